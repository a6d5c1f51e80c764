//! Settling: making a log's committed records durable in the run's own files, in the
//! background, and marking the log settled up to there.
//!
//! One thread per runtime (`FsRuntime`: per process) does it for every run its stores committed
//! to: the first commit after a quiet spell schedules the run, and [`DELAY`] later (commits in
//! between join the same round) one `syncfs` per filesystem makes everything named so far
//! durable; then, under the run's lock, each log is marked settled up to the end this runtime
//! had reached before the sync — or emptied when nothing was appended since. The delay keeps
//! the sync's writeback from holding up the filesystem's metadata journal while the committing
//! command still answers, and lets one sync cover a run loop's several commits. The thread
//! ends with the runtime, after a last round ([`Settling::settle_all`]).
//!
//! In-process exclusion: the warm server holds a run's lock for a whole command, and this
//! thread, on the same runtime, would be let through by it; a [`Settling::guard`] orders it
//! with the runtime's own commits (taken after the run's lock by a commit, and before a single
//! non-blocking try of it here, so no one waits on the other in a cycle), and the end of a hold
//! waits for it (see `fs/lock.rs`).

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use tokio::time::Instant;

use super::{Appended, HEADER, Kind, open, reset};
use crate::error::{JournalError, Result};
use crate::fs::runtime::Shared;

/// How long after the first unsettled commit a round starts.
const DELAY: Duration = Duration::from_millis(100);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A runtime's settling: what it committed and did not settle yet, and its thread's state.
#[derive(Debug, Default)]
pub(in crate::fs) struct Settling {
    /// Orders the runtime's log writes with its settling (see the module docs). One for every
    /// run: a run reached by two spellings of its path (a symlink) must not get two, and the
    /// process that commits through logs (the warm server) runs one command at a time.
    guard: Mutex<()>,
    /// Per run with records this runtime committed and did not settle yet: the log's epoch and
    /// its end after this runtime's last commit (every record before it named).
    known: Mutex<Vec<(PathBuf, u64, u64)>>,
    state: Mutex<State>,
    wake: Condvar,
    done: Condvar,
}

/// A run waiting for its round.
#[derive(Debug)]
struct Due {
    run_dir: PathBuf,
    journal_dir: PathBuf,
    epoch: u64,
    end: u64,
    since: Instant,
}

#[derive(Debug, Default)]
struct State {
    due: Vec<Due>,
    /// A round was asked for now ([`Settling::settle_all`]).
    urgent: bool,
    /// The runs of the round in progress.
    in_flight: Vec<PathBuf>,
    rounds: u64,
    /// The thread is running.
    thread: bool,
    /// The runtime is gone: the thread ends, and none is started again.
    stopping: bool,
}

impl Settling {
    /// The guard against this runtime's settling (see the module docs), for any run.
    pub(in crate::fs) fn guard(&self) -> MutexGuard<'_, ()> {
        lock(&self.guard)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    pub(super) fn known(&self, run_dir: &Path, epoch: u64, end: u64) {
        let mut all = lock(&self.known);
        all.retain(|(d, _, _)| d != run_dir);
        all.push((run_dir.to_path_buf(), epoch, end));
    }

    /// Where the log of `epoch` ends as far as this runtime knows (it wrote it last).
    pub(super) fn known_end(&self, run_dir: &Path, epoch: u64) -> Option<u64> {
        lock(&self.known)
            .iter()
            .find(|(d, e, _)| d == run_dir && *e == epoch)
            .map(|(_, _, end)| *end)
    }

    pub(super) fn forget_known(&self, run_dir: &Path) {
        lock(&self.known).retain(|(d, _, _)| d != run_dir);
    }

    /// Runs a round now for everything this runtime committed and waits for it (a run whose
    /// lock stays busy is left live: readers compare).
    pub(in crate::fs) fn settle_all(&self) {
        let mut st = self.state();
        for _ in 0..3 {
            if !st.thread || (st.due.is_empty() && st.in_flight.is_empty()) {
                return;
            }
            st.urgent = true;
            let round = st.rounds;
            self.wake.notify_all();
            while st.thread && st.rounds == round {
                st = self.done.wait(st).unwrap_or_else(|p| p.into_inner());
            }
        }
    }

    /// Ends the thread (the runtime is gone; [`Settling::settle_all`] came first).
    pub(in crate::fs) fn stop(&self) {
        self.state().stopping = true;
        self.wake.notify_all();
    }

    /// Forgets this runtime's records of `run_dir` (its journal is being replaced), after any
    /// round in progress for it.
    pub(super) fn forget(&self, run_dir: &Path) {
        let mut st = self.state();
        st.due.retain(|d| d.run_dir != run_dir);
        while st.thread && st.in_flight.iter().any(|d| d == run_dir) {
            st = self.done.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        drop(st);
        self.forget_known(run_dir);
    }
}

/// Every record of `record`'s log up to its end is named: readers on this runtime need not
/// compare them, and the run is scheduled for settling.
pub(in crate::fs::write) fn committed(
    rt: &Arc<Shared>,
    run_dir: &Path,
    journal_dir: &Path,
    record: Appended,
) {
    let s = &rt.settle;
    s.known(run_dir, record.epoch, record.end);
    let mut st = s.state();
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
    if !st.thread && !st.stopping {
        let shared = rt.clone();
        st.thread = std::thread::Builder::new()
            .name("journal-settle".into())
            .spawn(move || run(&shared))
            .is_ok();
    }
    s.wake.notify_all();
}

/// Marks the thread gone when it ends, a panic included: no one waits for its rounds then.
struct Ended<'a>(&'a Settling);

impl Drop for Ended<'_> {
    fn drop(&mut self) {
        self.0.state().thread = false;
        self.0.done.notify_all();
    }
}

fn run(rt: &Shared) {
    let s = &rt.settle;
    let _ended = Ended(s);
    let mut st = s.state();
    loop {
        if st.stopping {
            return;
        }
        let Some(oldest) = st.due.iter().map(|d| d.since).min() else {
            st = s.wake.wait(st).unwrap_or_else(|p| p.into_inner());
            continue;
        };
        let wait = (oldest + DELAY).saturating_duration_since(Instant::now());
        if !st.urgent && !wait.is_zero() {
            st = s
                .wake
                .wait_timeout(st, wait)
                .unwrap_or_else(|p| p.into_inner())
                .0;
            continue;
        }
        st.urgent = false;
        let round = std::mem::take(&mut st.due);
        st.in_flight = round.iter().map(|d| d.run_dir.clone()).collect();
        drop(st);
        let retry = settle_round(rt, round);
        st = s.state();
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
        s.done.notify_all();
    }
}

/// One `syncfs` per filesystem, then each log marked; returns the runs whose lock was busy.
fn settle_round(rt: &Shared, round: Vec<Due>) -> Vec<Due> {
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
        match settle_one(rt, &d) {
            Ok(true) | Err(_) => {}
            Ok(false) => retry.push(d),
        }
    }
    retry
}

/// Marks `d`'s log settled up to `d.end` (emptied when nothing came after it); `false` when
/// the run's lock was busy.
fn settle_one(rt: &Shared, d: &Due) -> Result<bool> {
    let _g = rt.settle.guard();
    let run_id = d
        .run_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default()
        .to_owned();
    let _lock = match rt.holds.lock_run(&run_id, &d.run_dir, 1) {
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
        rt.settle.forget_known(&d.run_dir);
    } else {
        use std::os::unix::fs::FileExt as _;
        f.write_all_at(&d.end.max(HEADER).to_le_bytes(), 16)
            .map_err(|e| JournalError::io(p.display(), e))?;
    }
    Ok(true)
}
