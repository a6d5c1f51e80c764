//! The commit log's crash points, simulated by stopping after a step and by taking away what a
//! machine crash can take away (a named file's blocks, a name): what readers and writers find.

use std::fs;
use std::path::{Path, PathBuf};

use super::super::tests::{batch as events, borrowed, runtime};
use super::super::{write_events, write_for_commit};
use super::*;

/// The runs root inside a test's temporary directory: a runs root's parent receives babysitter's
/// `package.json`, which must land in the temporary directory, not in `/tmp`.
fn runs(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("runs")
}

const RUN: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";

fn run_dir(dir: &Path) -> (PathBuf, PathBuf) {
    let run = dir.join(RUN);
    let journal = run.join("journal");
    fs::create_dir_all(&journal).unwrap();
    fs::write(run.join("run.json"), "{}").unwrap();
    (run, journal)
}

/// The log's live records, as another process would read them.
fn live(run: &Path) -> Vec<Entries> {
    let Some((f, Kind::Current(h), len)) = open(run, false).unwrap() else {
        return Vec::new();
    };
    read_records(run, &f, h, len).unwrap().records
}

fn header(run: &Path) -> Header {
    match open(run, false).unwrap() {
        Some((_, Kind::Current(h), _)) => h,
        _ => panic!("no current log"),
    }
}

fn log_len(run: &Path) -> u64 {
    fs::metadata(path(run)).unwrap().len()
}

fn refs(files: &[(PathBuf, Vec<u8>)]) -> Vec<(&Path, &[u8])> {
    files.iter().map(|(p, b)| (p.as_path(), &b[..])).collect()
}

fn tasks(run: &Path, n: usize) -> Vec<(PathBuf, Vec<u8>)> {
    (0..n)
        .map(|i| {
            (
                run.join(format!("tasks/E{i}/task.json")),
                format!("{{\"t\": {i}}}").into_bytes(),
            )
        })
        .collect()
}

/// A small batch (a `task:post`'s) and a large one (a fan-out's) through the log: every event
/// named with its bytes, the task files they refer to carried (no longer pending a sync), one
/// record each; the settling empties the log.
#[test]
fn batches_commit_through_the_log_and_settle() {
    let runtime = runtime();
    let rt = runtime.shared();
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(&runs(&dir));
    let result = vec![(run.join("tasks/E9/result.json"), b"{\"ok\": 1}".to_vec())];
    write_for_commit(rt, &run, &borrowed(&result), true).unwrap();
    let small = events(&journal, 2);
    write_events(rt, &run, &journal, &borrowed(&small), true).unwrap();
    assert_eq!(
        rt.writes.deferred.of(&run),
        None,
        "the log carried the result file"
    );
    let files = tasks(&run, 3);
    write_for_commit(rt, &run, &borrowed(&files), true).unwrap();
    let large: Vec<_> = events(&journal, 42).split_off(2);
    write_events(rt, &run, &journal, &borrowed(&large), true).unwrap();
    assert_eq!(rt.writes.deferred.of(&run), None);
    for (p, b) in small.iter().chain(&large).chain(&files).chain(&result) {
        assert_eq!(fs::read(p).unwrap(), *b, "{}", p.display());
    }
    let records = live(&run);
    assert_eq!(
        records.iter().map(Vec::len).collect::<Vec<_>>(),
        [3, 43],
        "events and carried files, one record per batch"
    );
    assert!(records[0].iter().any(|(n, _)| n == "tasks/E9/result.json"));
    assert!(
        fs::read_dir(&journal).unwrap().all(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .ends_with(".json")),
        "no temp file left"
    );
    let epoch = header(&run).epoch;
    rt.settle.settle_all();
    assert_eq!(log_len(&run), HEADER, "emptied once settled");
    assert_ne!(header(&run).epoch, epoch, "a new epoch");
    assert!(live(&run).is_empty());
}

/// The runtime settles what its stores committed through their logs when its last handle
/// goes: a binary has nothing to call on its way out, and the log is emptied by the time the
/// drop returns (not merely scheduled for the background round).
#[test]
fn dropping_the_runtime_settles_its_logs() {
    let runtime = runtime();
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(&runs(&dir));
    let evs = events(&journal, 3);
    write_events(runtime.shared(), &run, &journal, &borrowed(&evs), true).unwrap();
    let epoch = header(&run).epoch;
    drop(runtime);
    assert_eq!(log_len(&run), HEADER, "emptied when the runtime went");
    assert_ne!(header(&run).epoch, epoch, "a new epoch");
    assert!(live(&run).is_empty());
    assert!(evs.iter().all(|(p, b)| fs::read(p).unwrap() == *b));
}

/// A file the log cannot name (outside `tasks/<effect>/`) is not carried: it is synced as for
/// any batch, and the commit goes through.
#[test]
fn files_a_log_cannot_name_are_synced_instead() {
    let runtime = runtime();
    let rt = runtime.shared();
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(&runs(&dir));
    let other = vec![(run.join("state/extra.json"), b"{}".to_vec())];
    write_for_commit(rt, &run, &borrowed(&other), true).unwrap();
    let evs = events(&journal, 3);
    write_events(rt, &run, &journal, &borrowed(&evs), true).unwrap();
    assert_eq!(rt.writes.deferred.of(&run), None, "synced");
    assert_eq!(live(&run)[0].len(), 3, "events only");
    assert!(evs.iter().all(|(p, b)| fs::read(p).unwrap() == *b));
    rt.settle.settle_all();
}

/// A completed run's output (`state/output.json`, which its `RUN_COMPLETED` refers to) is
/// carried by the record like a task file — no sync of its own — and a machine crash that
/// takes it away after the commit point is undone by the next reader.
#[test]
fn the_run_output_is_carried_and_restored() {
    let runtime = runtime();
    let rt = runtime.shared();
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(&runs(&dir));
    let output = vec![(run.join("state/output.json"), b"{\"sum\": 200}\n".to_vec())];
    fs::create_dir_all(run.join("state")).unwrap();
    write_for_commit(rt, &run, &borrowed(&output), true).unwrap();
    let evs = events(&journal, 2);
    write_events(rt, &run, &journal, &borrowed(&evs), true).unwrap();
    assert_eq!(
        rt.writes.deferred.of(&run),
        None,
        "the log carried the output"
    );
    let records = live(&run);
    assert_eq!(records.len(), 1);
    assert!(
        records[0]
            .iter()
            .any(|(n, b)| n == "state/output.json" && *b == output[0].1),
        "{:?}",
        records[0].iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
    // The crash: the output's blocks never reached the disk; the next reader is another process.
    fs::write(&output[0].0, b"").unwrap();
    rt.settle.forget_known(&run);
    recover(rt, RUN, &run, false, 10).unwrap();
    assert_eq!(fs::read(&output[0].0).unwrap(), output[0].1);
    rt.settle.settle_all();
}

/// A machine crash after the commit points of two records: events named or not, an event's
/// blocks lost (empty) or cut short, a task file gone. A reader in another process (through
/// the store's listing) restores all of it, byte for byte, and empties the log; a file another
/// writer changed since is left as it is.
#[tokio::test]
async fn a_crash_after_the_commit_point_loses_nothing() {
    let runtime = runtime();
    let rt = runtime.shared();
    use crate::store::JournalStore as _;
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(&runs(&dir));
    let evs = events(&journal, 40);
    let task = tasks(&run, 2);
    let mut first = refs(&evs[..30]);
    first.push((task[0].0.as_path(), &task[0].1[..]));
    append(rt, &run, &first).unwrap();
    let mut second = refs(&evs[30..]);
    second.push((task[1].0.as_path(), &task[1].1[..]));
    append(rt, &run, &second).unwrap();
    for (i, (p, b)) in evs.iter().enumerate() {
        match i {
            0..20 | 31..35 => fs::write(p, b).unwrap(),
            20 => fs::write(p, b"").unwrap(),
            21 => fs::write(p, &b[..3]).unwrap(),
            _ => {}
        }
    }
    fs::create_dir_all(task[1].0.parent().unwrap()).unwrap();
    fs::write(&task[1].0, b"{\"t\": \"rewritten\"}").unwrap();
    let store = crate::fs::FsStore::new(runs(&dir)); // another process
    let head = store.head(RUN, None).await.unwrap();
    assert_eq!(head.seq, 40);
    for (p, b) in evs.iter().chain(&task[..1]) {
        assert_eq!(fs::read(p).unwrap(), *b, "{}", p.display());
    }
    assert_eq!(fs::read(&task[1].0).unwrap(), b"{\"t\": \"rewritten\"}");
    assert!(live(&run).is_empty(), "settled");
    assert_eq!(log_len(&run), HEADER);
}

/// A record torn while it was written (its checksum fails) was never a commit point: nothing is
/// restored from it, while the whole record before it is; a commit after it cuts it off.
#[test]
fn a_torn_record_is_ignored_and_cut_off() {
    let runtime = runtime();
    let rt = runtime.shared();
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(&runs(&dir));
    let evs = events(&journal, 6);
    append(rt, &run, &refs(&evs[..3])).unwrap();
    append(rt, &run, &refs(&evs[3..])).unwrap();
    let mut bytes = fs::read(path(&run)).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    fs::write(path(&run), &bytes).unwrap();
    rt.settle.forget_known(&run);
    assert_eq!(live(&run).len(), 1);
    recover(rt, RUN, &run, false, 10).unwrap();
    assert!(evs[..3].iter().all(|(p, _)| p.try_exists().unwrap()));
    assert!(evs[3..].iter().all(|(p, _)| !p.try_exists().unwrap()));
    // Torn again, and a commit appends: its record goes where the torn one was.
    fs::write(path(&run), &bytes).unwrap();
    let next = events(&journal, 9).split_off(6);
    append(rt, &run, &refs(&next)).unwrap();
    rt.settle.forget_known(&run);
    let records = live(&run);
    assert_eq!(records.len(), 2);
    assert_eq!(
        records[1][0].0,
        "journal/000007.01ARZ3NDEKTSV4RRFFQ69G5F06.json"
    );
}

/// A record of another epoch (left behind after the log was emptied) ends the log.
#[test]
fn a_record_of_another_epoch_ends_the_log() {
    let runtime = runtime();
    let rt = runtime.shared();
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(&runs(&dir));
    let evs = events(&journal, 2);
    append(rt, &run, &refs(&evs[..1])).unwrap();
    let stale = fs::read(path(&run)).unwrap();
    // Emptied (new epoch), then the old record's bytes seen again after the header.
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path(&run))
        .unwrap();
    let h = reset(&f, &path(&run), header(&run).epoch, true).unwrap();
    f.write_all_at(&stale[HEADER as usize..], HEADER).unwrap();
    rt.settle.forget_known(&run);
    assert!(live(&run).is_empty());
    // A commit of the new epoch overwrites it and is read.
    append(rt, &run, &refs(&evs[1..])).unwrap();
    assert_eq!(header(&run), h);
    assert_eq!(live(&run).len(), 1);
}

/// A batch that could not be named whole (a name taken) fails, and its record is void: a later
/// recovery does not complete what the caller was told failed, and still reads the records
/// after it.
#[test]
fn a_batch_not_named_whole_voids_its_record() {
    let runtime = runtime();
    let rt = runtime.shared();
    for n in [3, 40] {
        let dir = tempfile::tempdir().unwrap();
        let (run, journal) = run_dir(&runs(&dir));
        let evs = events(&journal, n + 1);
        fs::write(&evs[n - 1].0, b"someone else's").unwrap();
        assert!(write_events(rt, &run, &journal, &borrowed(&evs[..n]), true).is_err());
        assert!(live(&run).is_empty(), "void");
        write_events(rt, &run, &journal, &borrowed(&evs[n..]), true).unwrap();
        fs::remove_file(&evs[n].0).unwrap();
        rt.settle.forget(&run);
        recover(rt, RUN, &run, false, 10).unwrap();
        assert!(
            evs[..n - 1].iter().all(|(p, _)| p.try_exists().unwrap()),
            "the prefix is committed"
        );
        assert_eq!(fs::read(&evs[n - 1].0).unwrap(), b"someone else's");
        assert_eq!(
            fs::read(&evs[n].0).unwrap(),
            evs[n].1,
            "the later record restored"
        );
        let tmps = fs::read_dir(&journal)
            .unwrap()
            .filter(|e| {
                !e.as_ref()
                    .unwrap()
                    .path()
                    .to_string_lossy()
                    .ends_with(".json")
            })
            .count();
        assert_eq!(tmps, 0, "no temp file left");
    }
}

/// A batch whose events could not be staged (here: its journal directory is gone), small or
/// large (then staged while its record is appended, see `write_events_logged`), fails with its
/// record void: a later recovery restores none of it.
#[test]
fn a_batch_not_staged_voids_its_record() {
    let runtime = runtime();
    let rt = runtime.shared();
    for n in [3, 40] {
        let dir = tempfile::tempdir().unwrap();
        let (run, journal) = run_dir(&runs(&dir));
        let evs = events(&journal, n);
        fs::remove_dir(&journal).unwrap();
        assert!(write_events(rt, &run, &journal, &borrowed(&evs), true).is_err());
        assert!(live(&run).is_empty(), "void ({n} events)");
        fs::create_dir(&journal).unwrap();
        rt.settle.forget(&run);
        recover(rt, RUN, &run, false, 10).unwrap();
        assert_eq!(
            fs::read_dir(&journal).unwrap().count(),
            0,
            "nothing restored"
        );
    }
}

/// A first-version log (one batch, as the previous build wrote it), live after a crash, is
/// still restored from; the next commit replaces it with a current one.
#[test]
fn a_first_version_log_is_still_recovered() {
    let runtime = runtime();
    let rt = runtime.shared();
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(&runs(&dir));
    let evs = events(&journal, 3);
    let mut body = Vec::new();
    let count = encode_entries(&run, &refs(&evs), &mut body).unwrap();
    let mut log = vec![0u8; HEADER as usize];
    log[..8].copy_from_slice(MAGIC_V1);
    log[8] = 1;
    log[16..20].copy_from_slice(&count.to_le_bytes());
    log[24..32].copy_from_slice(&(body.len() as u64).to_le_bytes());
    log[32..64].copy_from_slice(&digest_of(None, count, &body));
    log.extend_from_slice(&body);
    fs::create_dir_all(run.join("state")).unwrap();
    fs::write(path(&run), &log).unwrap();
    recover(rt, RUN, &run, false, 10).unwrap();
    assert!(evs.iter().all(|(p, b)| fs::read(p).unwrap() == *b));
    assert!(matches!(
        open(&run, false).unwrap(),
        Some((_, Kind::Current(_), HEADER))
    ));
}

/// A log never makes recovery write outside `journal/<file>`, `tasks/<effect>/<file>` and
/// `state/output.json`.
#[test]
fn log_names_stay_inside_the_run() {
    let runtime = runtime();
    let rt = runtime.shared();
    for ok in [
        "journal/000001.A.json",
        "tasks/01ARZ/task.json",
        "state/output.json",
    ] {
        assert!(valid_name(ok), "{ok}");
    }
    for bad in [
        "../x.json",
        "journal/../../etc/passwd",
        "/journal/a.json",
        "state/state.json",
        "state/commit.log",
        "state/output.json/x",
        "tasks/a/b/c.json",
        "journal/.hidden",
        "journal/",
        "journal/a b.json",
    ] {
        assert!(!valid_name(bad), "{bad}");
    }
    let dir = tempfile::tempdir().unwrap();
    let (run, _) = run_dir(&runs(&dir));
    let outside = runs(&dir).join("outside.json");
    assert!(append(rt, &run, &[(outside.as_path(), b"x".as_slice())]).is_err());
}

/// A reader takes no lock: the log may be emptied (settled) between its length and its read.
/// It then reads no record, and no error.
#[test]
fn a_reader_racing_the_log_being_emptied_reads_nothing() {
    let runtime = runtime();
    let rt = runtime.shared();
    let dir = tempfile::tempdir().unwrap();
    let (run, journal) = run_dir(&runs(&dir));
    let evs = events(&journal, 2);
    append(rt, &run, &refs(&evs)).unwrap();
    let Some((f, Kind::Current(h), len)) = open(&run, false).unwrap() else {
        panic!("a current log");
    };
    let w = OpenOptions::new().write(true).open(path(&run)).unwrap();
    reset(&w, &path(&run), h.epoch, false).unwrap();
    assert!(read_records(&run, &f, h, len).unwrap().records.is_empty());
}
