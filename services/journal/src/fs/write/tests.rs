//! Crash points of the write paths, simulated by stopping after a step: what a reader of the
//! directory sees then, and that the bookkeeping of deferred durability is kept.

use std::path::{Path, PathBuf};

use super::*;

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

pub(super) fn batch(dir: &Path, n: usize) -> Vec<(PathBuf, Vec<u8>)> {
    (0..n)
        .map(|i| {
            (
                dir.join(format!("{:06}.01ARZ3NDEKTSV4RRFFQ69G5F{i:02}.json", i + 1)),
                format!("{{\"i\": {i}}}\n").into_bytes(),
            )
        })
        .collect()
}

/// A runtime of the test's own: what a process's stores share.
pub(super) fn runtime() -> crate::fs::FsRuntime {
    crate::fs::FsRuntime::new()
}

pub(super) fn borrowed(files: &[(PathBuf, Vec<u8>)]) -> Vec<(PathBuf, &[u8])> {
    files
        .iter()
        .map(|(p, b)| (p.clone(), b.as_slice()))
        .collect()
}

/// A crash after a commit's events were written as anonymous files, before they were named:
/// the directory shows nothing of them (no name, no temp file).
#[test]
fn events_not_yet_named_are_invisible() {
    let dir = tempfile::tempdir().unwrap();
    let files = batch(dir.path(), 40);
    let Some(anonymous) = stage_anonymous(dir.path(), &borrowed(&files)).unwrap() else {
        return; // no O_TMPFILE here: the temp-file path is checked below
    };
    assert_eq!(anonymous.fds.len(), 40);
    drop(anonymous); // the crash
    assert_eq!(names(dir.path()), Vec::<String>::new());
}

/// Anonymous files get their names both ways (by descriptor where the process may, through
/// `/proc/self/fd` otherwise), with their content, and a taken name is refused.
#[test]
fn anonymous_files_are_linked_either_way() {
    let dir = tempfile::tempdir().unwrap();
    let files = batch(dir.path(), 40);
    let Some(anonymous) = stage_anonymous(dir.path(), &borrowed(&files)).unwrap() else {
        return; // no O_TMPFILE here
    };
    for (i, (path, _)) in files.iter().enumerate() {
        if i % 2 == 0 {
            anonymous.link(&Default::default(), i, path).unwrap();
        } else {
            anonymous
                .link_through_proc(i, path.file_name().unwrap())
                .unwrap();
        }
    }
    for (path, bytes) in &files {
        assert_eq!(&fs::read(path).unwrap(), bytes);
    }
    assert_eq!(names(dir.path()).len(), 40);
    assert!(
        anonymous.link(&Default::default(), 0, &files[1].0).is_err(),
        "name taken"
    );
    assert!(
        anonymous
            .link_through_proc(0, files[1].0.file_name().unwrap())
            .is_err()
    );
}

/// A crash after a commit's events were staged as temp files, before the renames: only temp
/// files are there, which no loader reads (they do not end in `.json`).
#[test]
fn events_staged_as_temp_files_are_not_journal_files() {
    let dir = tempfile::tempdir().unwrap();
    let files = batch(dir.path(), 3);
    let staged = stage_all(&borrowed(&files)).unwrap();
    assert!(staged.iter().all(|s| matches!(s, Staged::Tmp(..))));
    assert!(names(dir.path()).iter().all(|n| !n.ends_with(".json")));
    discard_tmps(&staged);
    assert_eq!(names(dir.path()), Vec::<String>::new());
}

/// A run directory with a `journal/` and `n` new task files to write (not written yet).
fn run_with_tasks(n: usize) -> (tempfile::TempDir, PathBuf, Vec<(PathBuf, Vec<u8>)>) {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    fs::create_dir(&journal).unwrap();
    let tasks = (0..n)
        .map(|i| {
            (
                dir.path().join(format!("tasks/E{i}/task.json")),
                b"{}\n".to_vec(),
            )
        })
        .collect();
    (dir, journal, tasks)
}

/// Files written for a commit are noted as not yet durable, by run; a small commit makes them
/// durable one by one (and its events), and settles the account, so an event never becomes
/// visible before them.
#[test]
fn deferred_files_are_synced_by_the_next_commit() {
    let runtime = runtime();
    let rt = runtime.shared();
    let (dir, journal, tasks) = run_with_tasks(3);
    let run = dir.path();
    write_for_commit(rt, run, &borrowed(&tasks), false).unwrap();
    let pending = rt.writes.deferred.of(run).expect("pending a sync");
    assert!(!pending.many);
    assert_eq!(
        pending.files,
        tasks.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>()
    );
    for (path, bytes) in &tasks {
        assert_eq!(&fs::read(path).unwrap(), bytes, "whole, in place");
        assert_eq!(names(path.parent().unwrap()), vec!["task.json"]);
        assert!(
            pending.dirs.contains(path.parent().unwrap()),
            "its directory"
        );
    }
    assert!(
        pending.dirs.contains(&run.join("tasks")),
        "the new directories' parent"
    );
    assert!(pending.dirs.contains(run), "up to the run directory");
    assert!(
        pending.dirs.iter().all(|d| d.starts_with(run)),
        "{pending:?}"
    );
    let events = batch(&journal, 2);
    write_events(rt, run, &journal, &borrowed(&events), false).unwrap();
    assert_eq!(rt.writes.deferred.of(run), None, "settled by the commit");
    assert_eq!(
        names(&journal),
        events
            .iter()
            .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
    );
}

/// Many deferred files (a fan-out's) are synced with the whole filesystem by the commit, and a
/// batch that failed part way is too; either way the account is settled.
#[test]
fn many_or_failed_deferred_files_take_the_filesystem_sync() {
    let runtime = runtime();
    let rt = runtime.shared();
    let (dir, journal, tasks) = run_with_tasks(deferred::PER_FILE_MAX + 1);
    let run = dir.path();
    write_for_commit(rt, run, &borrowed(&tasks), false).unwrap();
    let pending = rt.writes.deferred.of(run).unwrap();
    assert!(pending.many && pending.files.is_empty(), "{pending:?}");
    write_events(rt, run, &journal, &borrowed(&batch(&journal, 1)), false).unwrap();
    assert_eq!(rt.writes.deferred.of(run), None);
    // A file under a regular file cannot be written: the batch fails, its account says so.
    fs::write(run.join("blocker"), b"x").unwrap();
    let bad = vec![(run.join("blocker/E0/task.json"), b"{}".to_vec())];
    assert!(write_for_commit(rt, run, &borrowed(&bad), false).is_err());
    assert!(rt.writes.deferred.of(run).unwrap().many);
    // A later small batch does not make the run's account small again.
    write_for_commit(rt, run, &borrowed(&tasks[..1]), false).unwrap();
    assert!(rt.writes.deferred.of(run).unwrap().many);
}

/// The account of one run says nothing about another's: a commit settles its own run only.
#[test]
fn deferred_files_are_kept_by_run() {
    let runtime = runtime();
    let rt = runtime.shared();
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for run in [&a, &b] {
        fs::create_dir_all(run.join("journal")).unwrap();
        let files = vec![(run.join("tasks/E1/task.json"), b"{}".to_vec())];
        write_for_commit(rt, run, &borrowed(&files), false).unwrap();
    }
    let events = batch(&a.join("journal"), 1);
    write_events(rt, &a, &a.join("journal"), &borrowed(&events), false).unwrap();
    assert_eq!(rt.writes.deferred.of(&a), None);
    assert_eq!(
        rt.writes.deferred.of(&b).unwrap().files,
        vec![b.join("tasks/E1/task.json")]
    );
}

/// A file that already exists (a torn `task.json` left by a crash, a re-posted result) is
/// replaced through a temp file made durable first, never rewritten in place.
#[test]
fn an_existing_file_is_replaced_whole() {
    let runtime = runtime();
    let rt = runtime.shared();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks/E1/task.json");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, b"{\"torn").unwrap();
    let new = vec![(path.clone(), b"{\"whole\": true}\n".to_vec())];
    write_for_commit(rt, dir.path(), &borrowed(&new), false).unwrap();
    assert_eq!(fs::read(&path).unwrap(), b"{\"whole\": true}\n");
    assert_eq!(names(path.parent().unwrap()), vec!["task.json"]);
}

/// A large batch over many new directories (the pipelined path) writes every file whole, in
/// place, and reports what it staged in the batch's order.
#[test]
fn a_large_batch_over_new_directories_is_written_in_place() {
    let dir = tempfile::tempdir().unwrap();
    fs::create_dir(dir.path().join("tasks")).unwrap();
    let files: Vec<(PathBuf, Vec<u8>)> = (0..100)
        .map(|i| {
            (
                dir.path().join(format!("tasks/E{i:03}/task.json")),
                format!("{i}").into_bytes(),
            )
        })
        .collect();
    let staged = stage_all(&borrowed(&files)).unwrap();
    for ((path, bytes), s) in files.iter().zip(&staged) {
        assert!(matches!(s, Staged::InPlace(p) if p == path));
        assert_eq!(&fs::read(path).unwrap(), bytes);
    }
}

/// Streamed files are written as they come; enough of them get an early sync of their own
/// (on its thread, the writer going on), after which they are durable and no longer the
/// commit's to sync; the rest are noted for the commit as a batch would be.
#[test]
fn streamed_files_are_synced_early_or_left_to_the_commit() {
    let runtime = runtime();
    let rt = runtime.shared();
    use crate::store::{RunFile, RunFileWriter};
    let (dir, journal, _) = run_with_tasks(0);
    let run = dir.path();
    fs::create_dir(run.join("tasks")).unwrap();
    let mut w = streamed::StreamedFiles::new(rt.clone(), run.to_path_buf(), false).unwrap();
    let n = streamed::EARLY_SYNC_MIN;
    for i in 0..n {
        let file = RunFile::task(&format!("E{i}"), "task.json").unwrap();
        w.write(&file, b"{}\n").unwrap();
        assert_eq!(
            fs::read(run.join(format!("tasks/E{i}/task.json"))).unwrap(),
            b"{}\n",
            "written as it came"
        );
    }
    // The sync began with the last of them; the writer learns its outcome when next idle.
    while !w.early_synced_all() {
        w.idle().unwrap();
        std::thread::yield_now();
    }
    let last = RunFile::task("Elast", "task.json").unwrap();
    w.write(&last, b"{}\n").unwrap();
    Box::new(w).close().unwrap();
    let pending = rt
        .writes
        .deferred
        .of(run)
        .expect("the last file is the commit's");
    assert!(!pending.many, "{pending:?}");
    assert_eq!(pending.files, vec![run.join("tasks/Elast/task.json")]);
    write_events(rt, run, &journal, &borrowed(&batch(&journal, 1)), false).unwrap();
    assert_eq!(rt.writes.deferred.of(run), None);
}

/// A writer dropped unclosed removes what it wrote — durable or not, with the directories it
/// made — and leaves a file it would have replaced as it was, with no temp file beside it.
#[test]
fn an_unclosed_streamed_writer_removes_what_it_wrote() {
    let runtime = runtime();
    let rt = runtime.shared();
    use crate::store::{RunFile, RunFileWriter};
    let (dir, _journal, _) = run_with_tasks(0);
    let run = dir.path();
    fs::create_dir_all(run.join("tasks/OLD")).unwrap();
    fs::write(run.join("tasks/OLD/task.json"), b"old").unwrap();
    let mut w = streamed::StreamedFiles::new(rt.clone(), run.to_path_buf(), false).unwrap();
    for i in 0..(streamed::EARLY_SYNC_MIN + 5) {
        let file = RunFile::task(&format!("E{i}"), "task.json").unwrap();
        w.write(&file, b"{}\n").unwrap();
    }
    w.write(&RunFile::task("OLD", "task.json").unwrap(), b"new")
        .unwrap();
    w.idle().unwrap();
    drop(w);
    assert_eq!(names(&run.join("tasks")), vec!["OLD"]);
    assert_eq!(names(&run.join("tasks/OLD")), vec!["task.json"]);
    assert_eq!(fs::read(run.join("tasks/OLD/task.json")).unwrap(), b"old");
    assert_eq!(
        rt.writes.deferred.of(run),
        None,
        "nothing left for a commit"
    );
}
