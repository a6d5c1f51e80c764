//! The conformance suite through the network: a [`RemoteStore`] (what an orchestrator uses when
//! the journal is its own service) against a real tonic `JournalService` on 127.0.0.1, backed by
//! the filesystem in babysitter's layout and by the object layout on a local directory.

use std::sync::Arc;

use babysitter_common::server::{ServerBuilder, ServerConfig};
use babysitter_journal::fs::FsStore;
use babysitter_journal::grpc::JournalGrpcServer;
use babysitter_journal::object::ObjectJournal;
use babysitter_journal::remote::RemoteStore;
use babysitter_journal::store::JournalStore;
use babysitter_journal::testsuite::{self, Factory};
use babysitter_journal::{Journal, JournalOptions};
use tokio_util::sync::CancellationToken;

/// Serves `store` on an ephemeral 127.0.0.1 port; returns its URL and the shutdown token.
async fn serve(store: Arc<dyn JournalStore>) -> (String, CancellationToken) {
    let journal = Journal::new(store, JournalOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let config = ServerConfig::default();
    let server = ServerBuilder::new("journal", &config).add_service(
        JournalGrpcServer::new(journal)
            .with_shutdown(shutdown.clone())
            .into_service(&config),
        babysitter_proto::FILE_DESCRIPTOR_SET,
    );
    let token = shutdown.clone();
    tokio::spawn(async move { server.serve_with_listener(listener, token).await });
    (format!("http://{addr}"), shutdown)
}

fn remote(url: String) -> Factory {
    Arc::new(move || {
        Arc::new(RemoteStore::connect(&url, None).expect("remote store")) as Arc<dyn JournalStore>
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_remote_over_filesystem() {
    let dir = tempfile::tempdir().unwrap();
    let (url, stop) = serve(Arc::new(FsStore::new(dir.path().join("runs")))).await;
    testsuite::run_all_but_state_cache(remote(url)).await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_remote_over_object_layout() {
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn object_store::ObjectStore> =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    let store = Arc::new(ObjectJournal::new(
        local,
        "j",
        "object+file://",
        1024 * 1024,
    ));
    let (url, stop) = serve(store).await;
    testsuite::run_all_but_state_cache(remote(url)).await;
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_remote_writers_1000_appends() {
    let dir = tempfile::tempdir().unwrap();
    let (url, stop) = serve(Arc::new(FsStore::new(dir.path().join("runs")))).await;
    testsuite::concurrent_writers(remote(url), 8, 1000).await;
    stop.cancel();
}

/// The journal service's fence, end to end: two writers with their own terms over the wire; the
/// first stops renewing, the second takes over with a higher epoch, and every write of the
/// first — append, run file, new run — is refused as `fenced` and deposes its term, while
/// nothing it tried is in the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_writers_writes_are_refused_by_the_service() {
    use babysitter_journal::leadership::{Acquired, Candidate, LeaseKeeper, WriterTerm};
    use babysitter_journal::store::{RunFile, RunFiles};
    use babysitter_journal::{EventType, JournalError, NewEvent};
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    let (url, stop) = serve(Arc::new(FsStore::new(dir.path().join("runs")))).await;
    let ttl = Duration::from_millis(600);
    let writer = |holder: &str| {
        let term = WriterTerm::new();
        let store = RemoteStore::connect(&url, None)
            .unwrap()
            .with_fence(term.clone(), "orchestrator");
        let candidate = Candidate {
            group: "orchestrator".into(),
            holder: holder.into(),
            address: format!("http://{holder}.invalid"),
            ttl,
        };
        (term, Arc::new(store), candidate)
    };
    let (term_a, store_a, cand_a) = writer("a");
    let (term_b, store_b, cand_b) = writer("b");

    // Without a term, a fenced store does not even send the write.
    let e = store_a
        .create_run("r1", &files("r1"))
        .await
        .expect_err("no term yet");
    assert!(matches!(e, JournalError::Fenced { .. }), "{e}");

    let Acquired::Granted(a) = store_a.acquire(&cand_a).await.unwrap() else {
        panic!("a is first")
    };
    term_a.set(Some((a.clone(), tokio::time::Instant::now())));
    let Acquired::Held(seen) = store_b.acquire(&cand_b).await.unwrap() else {
        panic!("b must stand by")
    };
    assert_eq!(
        (seen.holder.as_str(), seen.address.as_str(), seen.epoch),
        ("a", "http://a.invalid", 1)
    );

    let journal_a = Journal::new(store_a.clone(), JournalOptions::default());
    journal_a.create_run("r1", files("r1")).await.unwrap();
    let created = NewEvent::new(EventType::RunCreated, serde_json::json!({"runId": "r1"}));
    journal_a
        .append("r1", 1, vec![created.clone()])
        .await
        .unwrap();

    // a stops renewing; past its ttl b takes over.
    tokio::time::sleep(ttl + Duration::from_millis(100)).await;
    let Acquired::Granted(b) = store_b.acquire(&cand_b).await.unwrap() else {
        panic!("b takes over once a's lease lapsed")
    };
    assert_eq!(b.epoch, 2);
    term_b.set(Some((b, tokio::time::Instant::now())));
    let mut deposed = term_a.deposed();

    let e = journal_a
        .append("r1", 2, vec![created.clone()])
        .await
        .expect_err("a is deposed");
    assert!(matches!(e, JournalError::Fenced { epoch: 1, .. }), "{e}");
    assert!(
        e.to_string().contains("epoch 2 of b holds the lease"),
        "{e}"
    );
    deposed.changed().await.unwrap();
    assert_eq!(*deposed.borrow(), 1);
    let e = store_a
        .put_run_file("r1", &RunFile::state("x.json").unwrap(), "{}".into())
        .await
        .expect_err("fenced run file");
    assert!(matches!(e, JournalError::Fenced { .. }), "{e}");
    let e = store_a
        .create_run("r2", &files("r2"))
        .await
        .expect_err("fenced create");
    assert!(matches!(e, JournalError::Fenced { .. }), "{e}");
    let e = store_a.renew(&a).await.expect_err("fenced renewal");
    assert!(matches!(e, JournalError::Fenced { .. }), "{e}");

    // b writes on; the journal holds a's one event and b's, nothing a tried after.
    let journal_b = Journal::new(store_b.clone(), JournalOptions::default());
    journal_b.append("r1", 2, vec![created]).await.unwrap();
    assert_eq!(journal_b.read("r1", 1, 0).await.unwrap().len(), 2);
    assert!(matches!(
        store_b.get_run("r2").await,
        Err(JournalError::RunNotFound { .. })
    ));
    stop.cancel();

    fn files(id: &str) -> RunFiles {
        RunFiles {
            run_json: serde_json::json!({"runId": id, "processId": "p", "layoutVersion": babysitter_journal::LAYOUT_VERSION}),
            inputs_json: None,
        }
    }
}
