//! The commit log's crash points, simulated by stopping after a step and by taking away what a
//! machine crash can take away (a named file's blocks, a name): what readers and writers find.

use std::fs;
use std::path::{Path, PathBuf};

use super::super::tests::{batch as events, borrowed};
use super::super::{deferred, write_events, write_for_commit};
use super::*;

fn run_dir(dir: &Path) -> (PathBuf, PathBuf) {
    let run = dir.join("01ARZ3NDEKTSV4RRFFQ69G5FAV");
    let journal = run.join("journal");
    fs::create_dir_all(&journal).unwrap();
    fs::write(run.join("run.json"), "{}").unwrap();
    (run, journal)
}

fn state_byte(run: &Path) -> u8 {
    fs::read(path(run)).unwrap()[STATE_AT as usize]
}

/// A large batch through the log: every event named with its bytes, the task files it refers
/// to carried by the log (no longer pending a sync), and the log settled once its settling ran.
#[test]
fn a_large_batch_commits_through_the_log_and_settles() {
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(dir.path());
    let tasks: Vec<(PathBuf, Vec<u8>)> = (0..3)
        .map(|i| {
            (
                run.join(format!("tasks/E{i}/task.json")),
                format!("{{\"t\": {i}}}").into_bytes(),
            )
        })
        .collect();
    write_for_commit(&run, &borrowed(&tasks), true).unwrap();
    assert!(deferred::of(&run).is_some_and(|d| d.contents.is_some_and(|c| c.len() == 3)));
    let evs = events(&journal, 40);
    write_events(&run, &journal, &borrowed(&evs), true).unwrap();
    assert_eq!(deferred::of(&run), None, "the log carried the task files");
    for (p, b) in evs.iter().chain(&tasks) {
        assert_eq!(fs::read(p).unwrap(), *b, "{}", p.display());
    }
    let (_, logged) = read_live(&run).unwrap().expect("live until settled");
    assert_eq!(logged.len(), 43);
    assert!(logged.iter().any(|(n, _)| n == "tasks/E2/task.json"));
    settle_all();
    assert_eq!(state_byte(&run), SETTLED);
    assert!(read_live(&run).unwrap().is_none());
}

/// A file the log cannot name (outside `tasks/<effect>/`) is not carried: it is synced as for
/// any batch, and the commit goes through.
#[test]
fn files_a_log_cannot_name_are_synced_instead() {
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(dir.path());
    let other = vec![(run.join("state/extra.json"), b"{}".to_vec())];
    write_for_commit(&run, &borrowed(&other), true).unwrap();
    let evs = events(&journal, 40);
    write_events(&run, &journal, &borrowed(&evs), true).unwrap();
    assert_eq!(deferred::of(&run), None, "synced");
    let (_, logged) = read_live(&run).unwrap().expect("live until settled");
    assert_eq!(logged.len(), 40, "events only");
    assert!(evs.iter().all(|(p, b)| fs::read(p).unwrap() == *b));
    settle_all();
}

/// A machine crash after the log's sync: events named or not, an event's blocks lost (empty),
/// a task file gone. A reader (through the store's listing) restores all of it, byte for byte,
/// and the log is settled; the journal then lists whole.
#[tokio::test]
async fn a_crash_after_the_commit_point_loses_nothing() {
    use crate::store::JournalStore as _;
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(dir.path());
    let evs = events(&journal, 40);
    let task = (run.join("tasks/E0/task.json"), b"{\"t\": 0}".to_vec());
    let mut logged: Vec<(&Path, &[u8])> = evs.iter().map(|(p, b)| (p.as_path(), &b[..])).collect();
    logged.push((task.0.as_path(), &task.1[..]));
    write(&run, &logged).unwrap();
    for (i, (p, b)) in evs.iter().enumerate() {
        match i {
            0..20 => fs::write(p, b).unwrap(),
            20 => fs::write(p, b"").unwrap(),
            _ => {}
        }
    }
    let store = crate::fs::FsStore::new(dir.path());
    let head = store
        .head("01ARZ3NDEKTSV4RRFFQ69G5FAV", None)
        .await
        .unwrap();
    assert_eq!(head.seq, 40);
    for (p, b) in evs.iter().chain(std::iter::once(&task)) {
        assert_eq!(fs::read(p).unwrap(), *b, "{}", p.display());
    }
    assert_eq!(state_byte(&run), SETTLED);
}

/// A log torn while it was written (its checksum fails) was never a commit point: nothing is
/// restored from it.
#[test]
fn a_torn_log_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(dir.path());
    let evs = events(&journal, 40);
    let logged: Vec<(&Path, &[u8])> = evs.iter().map(|(p, b)| (p.as_path(), &b[..])).collect();
    write(&run, &logged).unwrap();
    let mut bytes = fs::read(path(&run)).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(path(&run), &bytes).unwrap();
    assert!(read_live(&run).unwrap().is_none());
    recover("01ARZ3NDEKTSV4RRFFQ69G5FAV", &run, false, 10).unwrap();
    assert_eq!(fs::read_dir(&journal).unwrap().count(), 0);
}

/// A batch that could not be named whole (a name taken) fails, and its log is void: a later
/// recovery does not complete what the caller was told failed.
#[test]
fn a_batch_not_named_whole_voids_its_log() {
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(dir.path());
    let evs = events(&journal, 40);
    fs::write(&evs[30].0, b"someone else's").unwrap();
    assert!(write_events(&run, &journal, &borrowed(&evs), true).is_err());
    assert_eq!(state_byte(&run), SETTLED);
    forget(&run);
    recover("01ARZ3NDEKTSV4RRFFQ69G5FAV", &run, false, 10).unwrap();
    assert!(
        evs[..30].iter().all(|(p, _)| p.try_exists().unwrap()),
        "the prefix is committed"
    );
    assert!(
        evs[31..].iter().all(|(p, _)| !p.try_exists().unwrap()),
        "the rest never appears"
    );
}

/// A log never makes recovery write outside `journal/<file>` and `tasks/<effect>/<file>`.
#[test]
fn log_names_stay_inside_the_run() {
    for ok in ["journal/000001.A.json", "tasks/01ARZ/task.json"] {
        assert!(valid_name(ok), "{ok}");
    }
    for bad in [
        "../x.json",
        "journal/../../etc/passwd",
        "/journal/a.json",
        "state/state.json",
        "tasks/a/b/c.json",
        "journal/.hidden",
        "journal/",
        "journal/a b.json",
    ] {
        assert!(!valid_name(bad), "{bad}");
    }
    let dir = tempfile::tempdir().unwrap();
    let (run, _) = run_dir(dir.path());
    let outside = dir.path().join("outside.json");
    assert!(write(&run, &[(outside.as_path(), b"x".as_slice())]).is_err());
}
