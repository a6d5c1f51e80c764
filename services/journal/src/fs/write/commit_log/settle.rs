//! Settling: making a log's committed records durable in the run's own files, in the
//! background, and marking the log settled up to there.
//!
//! One thread per process does it for every run it committed to: the first commit after a
//! quiet spell schedules the run, and [`DELAY`] later (commits in between join the same round)
//! one `syncfs` per filesystem makes everything named so far durable; then, under the run's
//! lock, each log is marked settled up to the end this process had reached before the sync —
//! or emptied when nothing was appended since. The delay keeps the sync's writeback from
//! holding up the filesystem's metadata journal while the committing command still answers,
//! and lets one sync cover a run loop's several commits.
//!
//! In-process exclusion: the warm server holds a run's lock for a whole command, and this
//! thread, in the same process, would be let through by it; a [`guard`] orders it with the
//! process's own commits (taken after the run's lock by a commit, and before a single
//! non-blocking try of it here, so no one waits on the other in a cycle).

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::{Appended, HEADER, Kind, open, reset};
use crate::error::{JournalError, Result};

/// How long after the first unsettled commit a round starts.
const DELAY: Duration = Duration::from_millis(100);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Orders this process's log writes with its settling (see the module docs). One for every
/// run: a run reached by two spellings of its path (a symlink) must not get two, and the
/// process that commits through logs (the warm server) runs one command at a time.
static GUARD: Mutex<()> = Mutex::new(());

/// The guard against this process's settling (see the module docs), for any run.
pub(in crate::fs::write) fn guard() -> MutexGuard<'static, ()> {
    lock(&GUARD)
}

/// Per run with records this process committed and did not settle yet: the log's epoch and
/// its end after this process's last commit (every record before it named).
static KNOWN: Mutex<Vec<(PathBuf, u64, u64)>> = Mutex::new(Vec::new());

pub(super) fn known(run_dir: &Path, epoch: u64, end: u64) {
    let mut all = lock(&KNOWN);
    all.retain(|(d, _, _)| d != run_dir);
    all.push((run_dir.to_path_buf(), epoch, end));
}

/// Where the log of `epoch` ends as far as this process knows (it wrote it last).
pub(super) fn known_end(run_dir: &Path, epoch: u64) -> Option<u64> {
    lock(&KNOWN)
        .iter()
        .find(|(d, e, _)| d == run_dir && *e == epoch)
        .map(|(_, _, end)| *end)
}

pub(super) fn forget_known(run_dir: &Path) {
    lock(&KNOWN).retain(|(d, _, _)| d != run_dir);
}

/// A run waiting for its round.
struct Due {
    run_dir: PathBuf,
    journal_dir: PathBuf,
    epoch: u64,
    end: u64,
    since: Instant,
}

#[derive(Default)]
struct State {
    due: Vec<Due>,
    /// A round was asked for now ([`settle_all`]).
    urgent: bool,
    /// The runs of the round in progress.
    in_flight: Vec<PathBuf>,
    rounds: u64,
    thread: bool,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);
static WAKE: Condvar = Condvar::new();
static DONE: Condvar = Condvar::new();

fn state() -> MutexGuard<'static, Option<State>> {
    let mut s = lock(&STATE);
    s.get_or_insert_with(State::default);
    s
}

/// Every record of `record`'s log up to its end is named: readers here need not compare them,
/// and the run is scheduled for settling.
pub(in crate::fs::write) fn committed(run_dir: &Path, journal_dir: &Path, record: Appended) {
    known(run_dir, record.epoch, record.end);
    let mut guard = state();
    let Some(st) = guard.as_mut() else { return };
    let since = st
        .due
        .iter()
        .find(|d| d.run_dir == run_dir)
        .map_or_else(Instant::now, |d| d.since);
    st.due.retain(|d| d.run_dir != run_dir);
    st.due.push(Due {
        run_dir: run_dir.to_path_buf(),
        journal_dir: journal_dir.to_path_buf(),
        epoch: record.epoch,
        end: record.end,
        since,
    });
    if !st.thread {
        st.thread = std::thread::Builder::new()
            .name("journal-settle".into())
            .spawn(run)
            .is_ok();
    }
    WAKE.notify_all();
}

fn run() {
    let mut guard = state();
    loop {
        let Some(st) = guard.as_mut() else { return };
        let Some(oldest) = st.due.iter().map(|d| d.since).min() else {
            guard = WAKE.wait(guard).unwrap_or_else(|p| p.into_inner());
            continue;
        };
        let wait = (oldest + DELAY).saturating_duration_since(Instant::now());
        if !st.urgent && !wait.is_zero() {
            guard = WAKE
                .wait_timeout(guard, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        }
        st.urgent = false;
        let round = std::mem::take(&mut st.due);
        st.in_flight = round.iter().map(|d| d.run_dir.clone()).collect();
        drop(guard);
        let retry = settle_round(round);
        guard = state();
        let Some(st) = guard.as_mut() else { return };
        for d in retry {
            if !st.due.iter().any(|n| n.run_dir == d.run_dir) {
                st.due.push(Due {
                    since: Instant::now(),
                    ..d
                });
            }
        }
        st.in_flight.clear();
        st.rounds += 1;
        DONE.notify_all();
    }
}

/// One `syncfs` per filesystem, then each log marked; returns the runs whose lock was busy.
fn settle_round(round: Vec<Due>) -> Vec<Due> {
    let mut synced: Vec<u64> = Vec::new();
    let mut failed: Vec<u64> = Vec::new();
    let mut retry = Vec::new();
    for d in round {
        let Ok(dev) = std::fs::metadata(&d.journal_dir).map(|m| m.dev()) else {
            continue; // gone: nothing to settle
        };
        if !synced.contains(&dev) && !failed.contains(&dev) {
            match super::syncfs(&d.journal_dir) {
                Ok(()) => synced.push(dev),
                Err(_) => failed.push(dev), // stays live: readers compare, a later round syncs
            }
        }
        if failed.contains(&dev) {
            continue;
        }
        match settle_one(&d) {
            Ok(true) | Err(_) => {}
            Ok(false) => retry.push(d),
        }
    }
    retry
}

/// Marks `d`'s log settled up to `d.end` (emptied when nothing came after it); `false` when
/// the run's lock was busy.
fn settle_one(d: &Due) -> Result<bool> {
    let _g = guard();
    let run_id = d
        .run_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let _lock = match super::super::super::lock_run(&run_id, &d.run_dir, 1) {
        Ok(l) => l,
        Err(JournalError::Locked { .. }) => return Ok(false),
        Err(e) => return Err(e),
    };
    let Some((f, Kind::Current(h), len)) = open(&d.run_dir, true)? else {
        return Ok(true);
    };
    if h.epoch != d.epoch || h.settled_to >= d.end {
        return Ok(true); // emptied or settled since
    }
    let p = super::path(&d.run_dir);
    if len == d.end {
        reset(&f, &p, h.epoch, false)?;
        forget_known(&d.run_dir);
    } else {
        use std::os::unix::fs::FileExt as _;
        f.write_all_at(&d.end.max(HEADER).to_le_bytes(), 16)
            .map_err(|e| JournalError::io(p.display(), e))?;
    }
    Ok(true)
}

/// Runs a round now for everything this process committed and waits for it (before the
/// process exits; a run whose lock stays busy is left live: readers compare).
pub fn settle_all() {
    let mut guard = state();
    for _ in 0..3 {
        let Some(st) = guard.as_mut() else { return };
        if !st.thread || (st.due.is_empty() && st.in_flight.is_empty()) {
            return;
        }
        st.urgent = true;
        let round = st.rounds;
        WAKE.notify_all();
        while guard.as_ref().is_some_and(|s| s.rounds == round) {
            guard = DONE.wait(guard).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Forgets this process's records of `run_dir` (its journal is being replaced), after any
/// round in progress for it.
pub(super) fn forget(run_dir: &Path) {
    let mut guard = state();
    if let Some(st) = guard.as_mut() {
        st.due.retain(|d| d.run_dir != run_dir);
    }
    while guard
        .as_ref()
        .is_some_and(|s| s.in_flight.iter().any(|d| d == run_dir))
    {
        guard = DONE.wait(guard).unwrap_or_else(|p| p.into_inner());
    }
    drop(guard);
    forget_known(run_dir);
}
