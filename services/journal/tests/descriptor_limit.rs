//! A commit of many events is written whatever this process's descriptor limit: the filesystem
//! backend stages a large batch as anonymous files held open together, and a fan-out wider than
//! the limit (1,024 by default on many systems) once failed with "too many open files" and wrote
//! nothing. This binary holds one test on purpose: it lowers its own process's limit.

use std::path::Path;
use std::sync::Arc;

use babysitter_journal::fs::{FsRuntime, FsStore};
use babysitter_journal::store::RunFiles;
use babysitter_journal::testsuite::requested;
use babysitter_journal::{Journal, JournalOptions};
use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
use serde_json::json;

/// The runs root inside a test's temporary directory: a runs root's parent receives babysitter's
/// `package.json`, which must land in the temporary directory, not in `/tmp`.
fn runs(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("runs")
}

const RUN: &str = "wide";

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// Appends `n` events after `head`; checks a fresh journal reads all of them, in order.
async fn append_and_read(root: &Path, store: FsStore, head: u64, n: u64) {
    let j = Journal::new(Arc::new(store), JournalOptions::default());
    let events = (0..n)
        .map(|i| requested(&format!("E{}", head + i)))
        .collect();
    j.append(RUN, head + 1, events)
        .await
        .unwrap_or_else(|e| panic!("append of {n} events after {head}: {e}"));
    let fresh = Journal::new(
        Arc::new(FsStore::new(root.to_path_buf())),
        JournalOptions::default(),
    );
    let read = fresh.read(RUN, 1, 0).await.unwrap();
    assert_eq!(
        read.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=head + n).collect::<Vec<u64>>()
    );
    for e in &read[head as usize..] {
        assert_eq!(e.body.data["effectId"], json!(format!("E{}", e.seq - 1)));
    }
}

/// The size of this process's descriptor table (`FDSize` in `/proc/self/status`).
fn descriptor_table() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("FDSize:")).unwrap();
    line["FDSize:".len()..].trim().parse().unwrap()
}

#[tokio::test(flavor = "current_thread")]
async fn batches_wider_than_the_descriptor_limit_are_committed() {
    let limit = getrlimit(Resource::Nofile);
    // The table is grown up front, for a batch of half the limit (at most 4,096 descriptors),
    // when the stores' runtime is built.
    let fs = FsRuntime::new();
    let soft = limit.current.unwrap_or(u64::MAX);
    assert!(descriptor_table() >= (soft / 2 + 64).min(4096).min(soft - 1));
    setrlimit(
        Resource::Nofile,
        Rlimit {
            current: Some(64),
            maximum: limit.maximum,
        },
    )
    .unwrap();
    for commit_log in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let store = |root: &Path| match commit_log {
            false => fs.store(root.to_path_buf()),
            true => fs.store(root.to_path_buf()).commit_log(),
        };
        Journal::new(Arc::new(store(&runs(&dir))), JournalOptions::default())
            .create_run(
                RUN,
                RunFiles {
                    run_json: json!({"runId": RUN, "processId": "p"}),
                    inputs_json: None,
                },
            )
            .await
            .unwrap();
        // Wider than the limit itself.
        append_and_read(&runs(&dir), store(&runs(&dir)), 0, 150).await;
        // Narrow enough to be held open at once, but most descriptors are taken: opening them
        // runs out part way.
        let mut taken = Vec::new();
        while open_descriptors() < 64 - 12 {
            taken.push(std::fs::File::open("/dev/null").unwrap());
        }
        append_and_read(&runs(&dir), store(&runs(&dir)), 150, 32).await;
        drop(taken);
        assert!(
            !std::fs::read_dir(runs(&dir).join(RUN).join("journal"))
                .unwrap()
                .any(|e| e.unwrap().file_name().to_string_lossy().contains(".tmp-")),
            "no temp file left (commit log: {commit_log})"
        );
    }
    fs.settle().await;
}
