//! The conformance suite against the local backends: in-memory (logic only), the filesystem in
//! babysitter's layout, and the object layout on a local directory. SeaweedFS runs the same
//! suite in the `babysitter-tests` crate.

use std::sync::Arc;
use std::time::Duration;

use babysitter_journal::config::{LimitsConfig, object_journal};
use babysitter_journal::fs::{FsRuntime, FsStore};
use babysitter_journal::object::ObjectJournal;
use babysitter_journal::store::JournalStore;
use babysitter_journal::testsuite::{self, Factory};
use object_store::ObjectStore;

/// The runs root inside a test's temporary directory: a runs root's parent receives babysitter's
/// `package.json`, which must land in the temporary directory, not in `/tmp`.
fn runs(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("runs")
}

fn memory() -> Factory {
    let mem: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    Arc::new(move || {
        Arc::new(ObjectJournal::new(
            mem.clone(),
            "",
            "memory://",
            1024 * 1024,
        )) as Arc<dyn JournalStore>
    })
}

fn babysitter_dir(dir: &tempfile::TempDir) -> Factory {
    let root = dir.path().join(".a5c").join("runs");
    Arc::new(move || Arc::new(FsStore::new(root.clone())) as Arc<dyn JournalStore>)
}

/// A run with nothing but its `run.json`.
fn bare_run(id: &str) -> babysitter_journal::store::RunFiles {
    babysitter_journal::store::RunFiles {
        run_json: serde_json::json!({"runId": id, "processId": "p", "layoutVersion": "2026.01-storage-preview"}),
        inputs_json: None,
    }
}

fn object_dir(dir: &tempfile::TempDir) -> Factory {
    let local: Arc<dyn ObjectStore> = Arc::new(
        object_store::local::LocalFileSystem::new_with_prefix(dir.path())
            .expect("local object store"),
    );
    let root = dir.path().to_path_buf();
    Arc::new(move || {
        Arc::new(
            ObjectJournal::new(local.clone(), "journal", "object+file://", 1024 * 1024)
                .with_local_control(root.clone()),
        ) as Arc<dyn JournalStore>
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_in_memory() {
    testsuite::run_all(memory()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_filesystem_babysitter_layout() {
    let dir = tempfile::tempdir().unwrap();
    testsuite::run_all(babysitter_dir(&dir)).await;
}

/// The same layout with file I/O in place (the CLI's store), on the runtime the CLI uses.
#[tokio::test(flavor = "current_thread")]
async fn suite_filesystem_babysitter_layout_inline_io() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join(".a5c").join("runs");
    testsuite::run_all(Arc::new(move || {
        Arc::new(FsStore::new(root.clone()).inline_io()) as Arc<dyn JournalStore>
    }))
    .await;
}

/// The layout with large batches committed through the run's commit log (the warm server's
/// store), every store on one runtime as in the warm server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_filesystem_babysitter_layout_commit_log() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join(".a5c").join("runs");
    let fs = FsRuntime::new();
    let runtime = fs.clone();
    testsuite::run_all(Arc::new(move || {
        Arc::new(runtime.store(root.clone()).commit_log()) as Arc<dyn JournalStore>
    }))
    .await;
    fs.settle().await;
}

/// In-place I/O really is in place: with no tokio runtime at all (where a trip to the blocking
/// pool would panic), a run is created, appended to and read.
#[test]
fn inline_io_needs_no_blocking_pool() {
    use babysitter_journal::{EventType, Journal, JournalOptions, NewEvent};
    let dir = tempfile::tempdir().unwrap();
    let journal = Journal::new(
        Arc::new(FsStore::new(runs(&dir)).inline_io()),
        JournalOptions {
            background_snapshots: false,
            ..JournalOptions::default()
        },
    );
    futures::executor::block_on(async {
        journal
            .create_run("inline", bare_run("inline"))
            .await
            .unwrap();
        let ev = NewEvent::new(
            EventType::RunCreated,
            serde_json::json!({"runId": "inline"}),
        );
        journal.append("inline", 1, vec![ev]).await.unwrap();
        assert_eq!(journal.read("inline", 1, 0).await.unwrap().len(), 1);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_filesystem_object_layout() {
    let dir = tempfile::tempdir().unwrap();
    testsuite::run_all(object_dir(&dir)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_writers_1000_appends_filesystem() {
    let dir = tempfile::tempdir().unwrap();
    testsuite::concurrent_writers(babysitter_dir(&dir), 8, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_writers_1000_appends_object_layout_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    testsuite::concurrent_writers(object_dir(&dir), 8, 1000).await;
}

#[tokio::test]
async fn probe_accepts_stores_that_honour_create_only() {
    let mem: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    object_journal(mem, "p", "memory://", &LimitsConfig::default())
        .await
        .expect("in-memory honours PutMode::Create");
    let dir = tempfile::tempdir().unwrap();
    let local: Arc<dyn ObjectStore> =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
    object_journal(local, "", "object+file://", &LimitsConfig::default())
        .await
        .expect("local fs honours PutMode::Create");
}

#[tokio::test]
async fn probe_refuses_a_store_that_ignores_create_only() {
    let inner: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
    let unsafe_store: Arc<dyn ObjectStore> = Arc::new(testsupport::IgnoreConditionalPuts(inner));
    let err = object_journal(unsafe_store, "", "s3rver-like://", &LimitsConfig::default())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(err, babysitter_journal::JournalError::UnsafeStore { .. }),
        "{msg}"
    );
    assert!(msg.contains("ignores If-None-Match"), "{msg}");
}

mod testsupport {
    //! A store wrapper that behaves like s3rver: it drops create-only / update preconditions
    //! and overwrites.

    use std::fmt;
    use std::sync::Arc;

    use futures::stream::BoxStream;
    use object_store::path::Path;
    use object_store::{
        CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
        PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
    };

    #[derive(Debug)]
    pub struct IgnoreConditionalPuts(pub Arc<dyn ObjectStore>);

    impl fmt::Display for IgnoreConditionalPuts {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "IgnoreConditionalPuts({})", self.0)
        }
    }

    #[async_trait::async_trait]
    impl ObjectStore for IgnoreConditionalPuts {
        async fn put_opts(
            &self,
            location: &Path,
            payload: PutPayload,
            mut opts: PutOptions,
        ) -> Result<PutResult> {
            opts.mode = PutMode::Overwrite;
            self.0.put_opts(location, payload, opts).await
        }
        async fn put_multipart_opts(
            &self,
            location: &Path,
            opts: PutMultipartOptions,
        ) -> Result<Box<dyn MultipartUpload>> {
            self.0.put_multipart_opts(location, opts).await
        }
        async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
            self.0.get_opts(location, options).await
        }
        fn delete_stream(
            &self,
            locations: BoxStream<'static, Result<Path>>,
        ) -> BoxStream<'static, Result<Path>> {
            self.0.delete_stream(locations)
        }
        fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
            self.0.list(prefix)
        }
        async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
            self.0.list_with_delimiter(prefix).await
        }
        async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
            self.0.copy_opts(from, to, options).await
        }
    }
}

/// Rewrites one batch object of the object layout on disk.
fn tamper_batch(
    dir: &tempfile::TempDir,
    run: &str,
    first: u64,
    edit: impl FnOnce(&mut serde_json::Value),
) -> std::path::PathBuf {
    let p = dir
        .path()
        .join("journal/runs")
        .join(run)
        .join("journal")
        .join(format!("{first:020}.json"));
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&p, serde_json::to_vec(&v).unwrap()).unwrap();
    p
}

async fn three_batches(f: &Factory) -> String {
    use babysitter_journal::{EventType, Journal, NewEvent};
    let j = Journal::new(f(), Default::default());
    let id = testsuite::run_id("tamper");
    j.create_run(
        &id,
        babysitter_journal::store::RunFiles {
            run_json: serde_json::json!({"runId": id}),
            inputs_json: None,
        },
    )
    .await
    .unwrap();
    for seq in 1..=3 {
        j.append(
            &id,
            seq,
            vec![NewEvent::new(
                EventType::parse("STEP"),
                serde_json::json!({"n": seq}),
            )],
        )
        .await
        .unwrap();
    }
    id
}

#[tokio::test]
async fn object_layout_detects_a_broken_hash_chain() {
    let dir = tempfile::tempdir().unwrap();
    let f = object_dir(&dir);
    let id = three_batches(&f).await;
    // Replace batch 2 with a validly checksummed event that does not link to batch 1.
    tamper_batch(&dir, &id, 2, |v| {
        v["events"][0]["prevHash"] = serde_json::json!("00".repeat(32))
    });
    let err = babysitter_journal::Journal::new(f(), Default::default())
        .read(&id, 1, 0)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, babysitter_journal::JournalError::HashChain { at, .. } if at.seq == Some(2)),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("00000000000000000002.json"),
        "{err}"
    );
}

#[tokio::test]
async fn object_layout_detects_a_flipped_byte_and_a_missing_batch() {
    let dir = tempfile::tempdir().unwrap();
    let f = object_dir(&dir);
    let id = three_batches(&f).await;
    tamper_batch(&dir, &id, 3, |v| {
        v["events"][0]["event"]["data"]["n"] = serde_json::json!(4)
    });
    let err = babysitter_journal::Journal::new(f(), Default::default())
        .read(&id, 1, 0)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, babysitter_journal::JournalError::ChecksumMismatch { at, .. } if at.seq == Some(3)),
        "{err:?}"
    );
    let p = dir
        .path()
        .join("journal/runs")
        .join(&id)
        .join("journal")
        .join(format!("{:020}.json", 2));
    std::fs::remove_file(p).unwrap();
    let err = babysitter_journal::Journal::new(f(), Default::default())
        .read(&id, 1, 0)
        .await
        .unwrap_err();
    assert!(
        matches!(
            &err,
            babysitter_journal::JournalError::SequenceGap { expected: 2, .. }
        ),
        "{err:?}"
    );
}

/// A filesystem journal in a temp dir with one created run `id`, on `fs`.
async fn fs_run(fs: &FsRuntime, id: &str) -> (tempfile::TempDir, babysitter_journal::Journal) {
    let dir = tempfile::tempdir().unwrap();
    let journal = babysitter_journal::Journal::new(
        Arc::new(fs.store(runs(&dir))),
        babysitter_journal::JournalOptions::default(),
    );
    journal
        .create_run(
            id,
            babysitter_journal::store::RunFiles {
                run_json: serde_json::json!({"runId": id, "processId": "p", "layoutVersion": "2026.01-storage-preview"}),
                inputs_json: None,
            },
        )
        .await
        .unwrap();
    (dir, journal)
}

/// A command's hold on a run (`FsRuntime::hold_run`, what the CLI takes around an iteration or
/// a post):
/// `run.lock` names this process for the whole hold, so the reference CLI waits instead of
/// interleaving; a second hold of the same runtime (another command the warm server runs) waits
/// for the first and gets the run once it ends; this process's own appends go ahead under it; the
/// lock file goes with the hold.
#[tokio::test]
async fn a_held_run_keeps_run_lock_and_lets_its_holder_append() {
    use babysitter_journal::fs::RunHolder;
    use babysitter_journal::{EventType, NewEvent};
    let fs = FsRuntime::new();
    let (dir, journal) = fs_run(&fs, "held").await;
    let run_dir = runs(&dir).join("held");
    let lock_file = run_dir.join("run.lock");
    let pid_in_lock = || -> Option<u64> {
        let text = std::fs::read_to_string(&lock_file).ok()?;
        serde_json::from_str::<serde_json::Value>(&text).ok()?["pid"].as_u64()
    };
    let outer = fs.hold_run(&run_dir, Duration::ZERO, |_| {}).await.unwrap();
    assert_eq!(pid_in_lock(), Some(u64::from(std::process::id())));
    let mut seen = Vec::new();
    let second = fs
        .hold_run(&run_dir, Duration::ZERO, |h| seen.push(h.clone()))
        .await;
    assert!(
        matches!(second, Err(babysitter_journal::JournalError::Locked { .. })),
        "a second hold of the same runtime must not get through: {second:?}"
    );
    assert!(seen.is_empty(), "no wait with a zero bound: {seen:?}");
    assert_eq!(
        pid_in_lock(),
        Some(u64::from(std::process::id())),
        "a refused hold leaves the first one in place"
    );
    // A second hold waiting meanwhile says what it waits for, and gets the run once the first
    // is released.
    let (told, mut contended) = tokio::sync::mpsc::unbounded_channel();
    let waiter = {
        let fs = fs.clone();
        let run_dir = run_dir.clone();
        tokio::spawn(async move {
            let held = fs
                .hold_run(&run_dir, Duration::from_secs(60), |h| {
                    let _ = told.send(h.clone());
                })
                .await;
            held.map(drop)
        })
    };
    let holder = tokio::time::timeout(Duration::from_secs(30), contended.recv())
        .await
        .expect("the second hold reports the run as held");
    assert_eq!(holder, Some(RunHolder::Writer));
    assert!(!waiter.is_finished(), "the second hold waits for the first");
    // Appends under the hold neither wait on it nor remove its run.lock.
    // Appends under the hold neither wait on it nor remove its run.lock.
    for seq in 1..=3 {
        journal
            .append(
                "held",
                seq,
                vec![NewEvent::new(
                    EventType::RunCreated,
                    serde_json::json!({"runId": "held"}),
                )],
            )
            .await
            .unwrap();
        assert!(
            lock_file.try_exists().unwrap(),
            "run.lock kept through append {seq}"
        );
    }
    drop(outer);
    waiter
        .await
        .unwrap()
        .expect("the waiting hold gets the run once the first is released");
    assert!(!lock_file.try_exists().unwrap(), "released with the hold");
    // Without a hold, an append takes and releases the locks itself.
    journal
        .append(
            "held",
            4,
            vec![NewEvent::new(
                EventType::RunCreated,
                serde_json::json!({"runId": "held"}),
            )],
        )
        .await
        .unwrap();
    assert!(!lock_file.try_exists().unwrap());
}

/// Under a hold, reads reuse the journal listing taken under it, but a commit always lists the
/// directory: an event the reference CLI appended without its lock (spec §2.5: `run:halt`, stop
/// hook events) is found there, the commit is refused as a conflict instead of writing a second
/// file with the same sequence number, and the holder's readers see the event from then on.
#[tokio::test]
async fn a_held_run_commit_sees_an_unlocked_foreign_append() {
    use babysitter_journal::{EventType, Journal, JournalError, JournalOptions, NewEvent};
    let fs = FsRuntime::new();
    let (dir, journal) = fs_run(&fs, "held2").await;
    let ev = || {
        vec![NewEvent::new(
            EventType::RunCreated,
            serde_json::json!({"runId": "held2"}),
        )]
    };
    for seq in 1..=2 {
        journal.append("held2", seq, ev()).await.unwrap();
    }
    let run_dir = runs(&dir).join("held2");
    let hold = fs.hold_run(&run_dir, Duration::ZERO, |_| {}).await.unwrap();
    assert_eq!(journal.head("held2").await.unwrap().seq, 2);
    // The reference appends seq 3 without taking run.lock: a copy of event 2 under a later ULID.
    let journal_dir = run_dir.join("journal");
    let second = std::fs::read_dir(&journal_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("000002.")
        })
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let foreign = format!("000003.{}.json", ulid::Ulid::generate());
    std::fs::copy(&second, journal_dir.join(&foreign)).unwrap();
    let err = journal.append("held2", 3, ev()).await.unwrap_err();
    assert!(
        matches!(err, JournalError::Conflict { expected: 3, .. }),
        "{err:?}"
    );
    assert_eq!(
        journal.head("held2").await.unwrap().seq,
        3,
        "the holder sees the foreign event after the conflict"
    );
    journal.append("held2", 4, ev()).await.unwrap();
    drop(hold);
    let fresh = Journal::new(
        Arc::new(FsStore::new(runs(&dir))),
        JournalOptions::default(),
    );
    let events = fresh.read("held2", 1, 0).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        vec![1, 2, 3, 4],
        "one file per sequence number"
    );
}
