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

fn batch(dir: &Path, n: usize) -> Vec<(PathBuf, Vec<u8>)> {
    (0..n)
        .map(|i| {
            (
                dir.join(format!("{:06}.01ARZ3NDEKTSV4RRFFQ69G5F{i:02}.json", i + 1)),
                format!("{{\"i\": {i}}}\n").into_bytes(),
            )
        })
        .collect()
}

fn borrowed(files: &[(PathBuf, Vec<u8>)]) -> Vec<(PathBuf, &[u8])> {
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
            anonymous.link(i, path).unwrap();
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
    assert!(anonymous.link(0, &files[1].0).is_err(), "name taken");
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

/// Files written for a commit leave their filesystem marked not yet durable; the commit's
/// sync settles it, so an event never becomes visible before them.
#[test]
fn deferred_files_are_synced_by_the_next_commit() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path();
    let journal = run.join("journal");
    fs::create_dir(&journal).unwrap();
    let tasks: Vec<(PathBuf, Vec<u8>)> = (0..3)
        .map(|i| (run.join(format!("tasks/E{i}/task.json")), b"{}\n".to_vec()))
        .collect();
    write_for_commit(run, &borrowed(&tasks)).unwrap();
    assert!(unsynced_on(&journal).unwrap().is_some(), "pending a sync");
    for (path, bytes) in &tasks {
        assert_eq!(&fs::read(path).unwrap(), bytes, "whole, in place");
        assert_eq!(names(path.parent().unwrap()), vec!["task.json"]);
    }
    // One event: the sync path is taken because of the deferred files.
    let events = batch(&journal, 1);
    write_events(run, &journal, &borrowed(&events)).unwrap();
    assert!(
        unsynced_on(&journal).unwrap().is_none(),
        "settled by the commit"
    );
    assert_eq!(
        names(&journal),
        vec![events[0].0.file_name().unwrap().to_string_lossy()]
    );
}

/// A file that already exists (a torn `task.json` left by a crash, a re-posted result) is
/// replaced through a temp file made durable first, never rewritten in place.
#[test]
fn an_existing_file_is_replaced_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks/E1/task.json");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, b"{\"torn").unwrap();
    let new = vec![(path.clone(), b"{\"whole\": true}\n".to_vec())];
    write_for_commit(dir.path(), &borrowed(&new)).unwrap();
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
