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
