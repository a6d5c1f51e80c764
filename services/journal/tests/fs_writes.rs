//! How the filesystem backend writes a fan-out's files (`fs::write`): a new effect's task files
//! in place, made durable with the commit that refers to them; large batches from two threads.
//! These check what a reader and a crash can see: every file whole, nothing left behind, and a
//! run whose commit never happened (the process died after writing its task files) iterates on
//! with no lost or duplicated entries.

use std::path::Path;
use std::sync::Arc;

use babysitter_journal::fs::FsStore;
use babysitter_journal::store::{RunFile, RunFiles};
use babysitter_journal::testsuite::requested;
use babysitter_journal::{Journal, JournalOptions};
use serde_json::{Value, json};

/// The runs root inside a test's temporary directory: a runs root's parent receives babysitter's
/// `package.json`, which must land in the temporary directory, not in `/tmp`.
fn runs(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("runs")
}

const RUN: &str = "fanout";

fn journal(root: &Path) -> Journal {
    Journal::new(
        Arc::new(FsStore::new(root.to_path_buf())),
        JournalOptions::default(),
    )
}

async fn created(root: &Path) -> Journal {
    let j = journal(root);
    j.create_run(
        RUN,
        RunFiles {
            run_json: json!({"runId": RUN, "processId": "p", "layoutVersion": "2026.01-storage-preview"}),
            inputs_json: None,
        },
    )
    .await
    .unwrap();
    j
}

fn task_doc(effect: &str) -> Value {
    json!({"effectId": effect, "kind": "node", "title": format!("step {effect}")})
}

/// What an iteration of a fan-out writes: `n` task files, then the events that request them.
async fn fan_out(j: &Journal, prefix: &str, n: usize, next_seq: u64) {
    let effects: Vec<String> = (0..n).map(|i| format!("{prefix}{i:03}")).collect();
    let files = effects
        .iter()
        .map(|e| (RunFile::task(e, "task.json").unwrap(), task_doc(e)))
        .collect();
    j.put_run_json_files(RUN, files).await.unwrap();
    let events = effects.iter().map(|e| requested(e)).collect();
    j.append(RUN, next_seq, events).await.unwrap();
}

/// Names in `dir` that are not whole files of the layout (temp files, anything unfinished).
fn leftovers(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().to_string_lossy().into_owned();
        if entry.file_type().unwrap().is_dir() {
            out.extend(leftovers(&entry.path()));
        } else if name.contains(".tmp-") {
            out.push(entry.path().display().to_string());
        }
    }
    out
}

/// 200 new task files and 200 events (the two-thread paths): every file is whole and in
/// babysitter's form, the journal holds each event once in order, and no temp file is left.
#[tokio::test]
async fn a_fan_out_batch_is_written_whole() {
    let dir = tempfile::tempdir().unwrap();
    let j = created(&runs(&dir)).await;
    fan_out(&j, "E", 200, 1).await;
    let fresh = journal(&runs(&dir));
    let events = fresh.read(RUN, 1, 0).await.unwrap();
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=200).collect::<Vec<u64>>()
    );
    for (i, e) in events.iter().enumerate() {
        let effect = format!("E{i:03}");
        assert_eq!(e.body.data["effectId"], json!(effect));
        let stored = fresh
            .get_run_file(RUN, &RunFile::task(&effect, "task.json").unwrap())
            .await
            .unwrap();
        assert_eq!(
            &stored[..],
            babysitter_journal::node_json::to_file_string(&task_doc(&effect)).as_bytes()
        );
    }
    assert_eq!(
        leftovers(&runs(&dir).join(RUN)),
        Vec::<String>::new(),
        "no temp files"
    );
}

/// The process dies after writing an iteration's task files and before their events are
/// committed (here: the journal is dropped and nothing is appended; one task file is left torn,
/// as a crash in the middle of writing it would leave it). The run still opens at its old head;
/// writing over the orphan directories replaces the torn file whole; the next iteration commits
/// its own effects once each.
#[tokio::test]
async fn task_files_without_their_commit_leave_the_run_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let j = created(&runs(&dir)).await;
    fan_out(&j, "A", 40, 1).await;
    // Task files for a second fan-out, then the "crash": no append.
    let orphans: Vec<(RunFile, Value)> = (0..40)
        .map(|i| {
            let e = format!("B{i:03}");
            (RunFile::task(&e, "task.json").unwrap(), task_doc(&e))
        })
        .collect();
    j.put_run_json_files(RUN, orphans.clone()).await.unwrap();
    // (A read of the run's files waits for the batch, which may be written in the background.)
    j.get_run_file(RUN, &RunFile::task("B007", "task.json").unwrap())
        .await
        .unwrap();
    drop(j);
    let torn = runs(&dir).join(RUN).join("tasks/B007/task.json");
    std::fs::write(&torn, b"{\"effectId\": \"B0").unwrap();

    let j = journal(&runs(&dir));
    assert_eq!(
        j.head(RUN).await.unwrap().seq,
        40,
        "the orphan files are not in the journal"
    );
    // The same files again (existing directories: replaced through temp files, durably).
    j.put_run_json_files(RUN, orphans).await.unwrap();
    let repaired = j
        .get_run_file(RUN, &RunFile::task("B007", "task.json").unwrap())
        .await
        .unwrap();
    assert_eq!(
        serde_json::from_slice::<Value>(&repaired).unwrap(),
        task_doc("B007")
    );
    // And the next iteration, with its own effects, commits each once.
    fan_out(&j, "C", 40, 41).await;
    let events = journal(&runs(&dir)).read(RUN, 1, 0).await.unwrap();
    let ids: Vec<&str> = events
        .iter()
        .map(|e| e.body.data["effectId"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 80);
    let mut unique = ids.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), 80, "no duplicated entries");
    assert!(ids[..40].iter().all(|id| id.starts_with('A')));
    assert!(ids[40..].iter().all(|id| id.starts_with('C')));
    assert_eq!(leftovers(&runs(&dir).join(RUN)), Vec::<String>::new());
}

/// Two writers commit large batches to one run at once: each batch lands whole at its own
/// sequence numbers or is refused as a conflict, never interleaved or doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_commits_never_share_a_sequence_number() {
    let dir = tempfile::tempdir().unwrap();
    created(&runs(&dir)).await;
    let writer = |name: &'static str| {
        let root = runs(&dir);
        tokio::spawn(async move {
            let j = journal(&root);
            let mut committed = 0;
            for round in 0..5 {
                let head = j.head(RUN).await.unwrap().seq;
                let events = (0..50)
                    .map(|i| requested(&format!("{name}{round}x{i:02}")))
                    .collect();
                if j.append(RUN, head + 1, events).await.is_ok() {
                    committed += 50;
                }
            }
            committed
        })
    };
    let (a, b) = (writer("a"), writer("b"));
    let total = a.await.unwrap() + b.await.unwrap();
    let events = journal(&runs(&dir)).read(RUN, 1, 0).await.unwrap();
    assert_eq!(events.len(), total);
    assert_eq!(
        events.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=total as u64).collect::<Vec<_>>()
    );
    for batch in events.chunks(50) {
        let first = batch[0].body.data["effectId"].as_str().unwrap();
        let prefix = &first[..first.len() - 2];
        assert!(
            batch.iter().all(|e| e.body.data["effectId"]
                .as_str()
                .unwrap()
                .starts_with(prefix)),
            "a batch is never interleaved with another"
        );
    }
}

/// A task file that cannot be written (here a plain file is in the way of its directory) fails
/// the commit that refers to it, even when the batch was written in the background: no event of
/// the batch is visible, and the run goes on from its old head.
#[tokio::test]
async fn a_failed_task_file_write_fails_its_commit_and_names_no_event() {
    let dir = tempfile::tempdir().unwrap();
    let j = created(&runs(&dir)).await;
    std::fs::write(runs(&dir).join(RUN).join("tasks/E017"), b"in the way").unwrap();
    let effects: Vec<String> = (0..40).map(|i| format!("E{i:03}")).collect();
    let files = effects
        .iter()
        .map(|e| (RunFile::task(e, "task.json").unwrap(), task_doc(e)))
        .collect();
    let put = j.put_run_json_files(RUN, files).await;
    let events = effects.iter().map(|e| requested(e)).collect();
    let append = j.append(RUN, 1, events).await;
    assert!(
        put.is_err() || append.is_err(),
        "the failed write is reported"
    );
    let fresh = journal(&runs(&dir));
    assert_eq!(fresh.head(RUN).await.unwrap().seq, 0, "no event named");
    assert_eq!(leftovers(&runs(&dir).join(RUN)), Vec::<String>::new());
    fan_out(&fresh, "F", 3, 1).await;
    assert_eq!(fresh.read(RUN, 1, 0).await.unwrap().len(), 3);
}

/// A journal longer than one `getdents` buffer (1,500 names: three buffers' worth) is listed
/// whole and in sequence order, foreign names skipped; a gap deep in it is found.
#[tokio::test]
async fn a_long_journal_is_listed_whole() {
    use babysitter_journal::store::JournalStore as _;
    let dir = tempfile::tempdir().unwrap();
    let journal_dir = runs(&dir).join(RUN).join("journal");
    std::fs::create_dir_all(&journal_dir).unwrap();
    std::fs::write(runs(&dir).join(RUN).join("run.json"), "{}").unwrap();
    let name = |seq: u64| {
        let ulid = ulid::Ulid::from_parts(1_700_000_000_000 + seq, 0);
        format!("{seq:06}.{ulid}.json")
    };
    // Created in reverse: a listing in directory order is not in sequence order.
    for seq in (1..=1500).rev() {
        std::fs::write(journal_dir.join(name(seq)), "").unwrap();
    }
    std::fs::write(journal_dir.join("notes.txt"), "").unwrap();
    std::fs::write(journal_dir.join("000001.json.tmp-1-0"), "").unwrap();
    let store = FsStore::new(runs(&dir));
    let head = store.head(RUN, None).await.unwrap();
    assert_eq!(head.seq, 1500);
    assert_eq!(format!("{:06}.{}.json", head.seq, head.ulid), name(1500));
    std::fs::remove_file(journal_dir.join(name(1234))).unwrap();
    let e = store.head(RUN, None).await.unwrap_err();
    assert!(
        matches!(
            e,
            babysitter_journal::JournalError::SequenceGap {
                expected: 1234,
                got: 1235,
                ..
            }
        ),
        "{e}"
    );
}
