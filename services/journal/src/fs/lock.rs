//! The run's writer locks — the `journal/` directory's `flock` (babysitter-rs writers) and
//! babysitter's `run.lock` (the reference CLI) — and the runtime's record of runs held for a
//! whole command ([`super::FsRuntime::hold_run`], exclusive: one command at a time).
//!
//! While a runtime holds a run, no babysitter-rs writer and no lock-respecting reference
//! writer can append to it, so the journal listing taken under the hold stays true: reads use
//! it instead of listing `journal/` again (a cold `run:iterate` used to list an 800-entry
//! directory five times; ext4 hashes and sorts every name on each `readdir`). Commits still
//! list afresh, because the reference appends a few events without its lock (spec §2.5) and a
//! stale head there would write a duplicate sequence number; each commit then refreshes the
//! held listing with what it wrote.
//!
//! Why the record lives in the runtime, and why a process keeps one runtime: `flock` locks
//! belong to an open file description, so a second `flock` of the same `journal/` from this
//! process — through another descriptor — waits for the first like any other writer would.
//! The stores and holds that may reach the same run in one process must therefore see one
//! [`Holds`]: then a store's commit under its own command's hold goes ahead instead of waiting
//! on it until it fails with `Locked`. Stores of two runtimes exclude each other as two
//! processes do (both locks are taken afresh), which is safe, only slower.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustix::fs::{FlockOperation, Mode, OFlags};
use serde_json::{Value, json};

use super::{Entry, FsRuntime};
use crate::error::{JournalError, Result};
use crate::node_json;

const LOCK_OWNER: &str = "babysitter-rs:journal";

/// Holds the journal directory's `flock` and babysitter's `run.lock` until dropped.
#[derive(Debug)]
pub(super) struct RunLock {
    /// `None`: the locks were already held by this runtime for a whole command.
    held: Option<(rustix::fd::OwnedFd, PathBuf)>,
}

impl Drop for RunLock {
    fn drop(&mut self) {
        if let Some((_, lock_file)) = &self.held {
            let _ = fs::remove_file(lock_file);
        }
    }
}

/// A run held for a whole command: the paths it was reached by, and the journal listing seen
/// under the hold.
#[derive(Debug, Default)]
struct Held {
    paths: Vec<PathBuf>,
    listing: Option<Arc<Vec<Entry>>>,
    /// The event files a view holds were checked against what was verified (`fs/seen.rs`) under
    /// this hold: no writer can change the journal until it ends, so one check covers the
    /// command, as a one-shot command reads each file once.
    checked: bool,
}

/// The runs whose writer locks a runtime holds for a whole command, by canonical run
/// directory; their appends proceed under that hold instead of taking the (not re-entrant)
/// locks again.
#[derive(Debug, Default)]
pub(super) struct Holds(Mutex<BTreeMap<PathBuf, Held>>);

fn held_key(run_dir: &Path) -> PathBuf {
    fs::canonicalize(run_dir).unwrap_or_else(|_| run_dir.to_path_buf())
}

impl Holds {
    fn all(&self) -> MutexGuard<'_, BTreeMap<PathBuf, Held>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `f` on the hold of `run_dir`, if this runtime holds it. The path the command uses is
    /// matched as given first; only a miss resolves it (a syscall per path component).
    fn with_held<R>(&self, run_dir: &Path, f: impl FnOnce(&mut Held) -> R) -> Option<R> {
        let mut held = self.all();
        if held.is_empty() {
            return None;
        }
        if let Some(h) = held
            .values_mut()
            .find(|h| h.paths.iter().any(|p| p == run_dir))
        {
            return Some(f(h));
        }
        let h = held.get_mut(&held_key(run_dir))?;
        h.paths.push(run_dir.to_path_buf());
        Some(f(h))
    }

    pub(super) fn held(&self, run_dir: &Path) -> bool {
        self.with_held(run_dir, |_| ()).is_some()
    }

    /// The journal listing taken under this runtime's hold of the run, if any.
    pub(super) fn listing(&self, run_dir: &Path) -> Option<Arc<Vec<Entry>>> {
        self.with_held(run_dir, |h| h.listing.clone()).flatten()
    }

    /// Records `listing` as the run's journal while this runtime holds it (no-op otherwise).
    pub(super) fn remember_listing(&self, run_dir: &Path, listing: &Arc<Vec<Entry>>) {
        self.with_held(run_dir, |h| h.listing = Some(listing.clone()));
    }

    /// Drops the held listing (the journal directory is being replaced).
    pub(super) fn forget_listing(&self, run_dir: &Path) {
        self.with_held(run_dir, |h| {
            h.listing = None;
            h.checked = false;
        });
    }

    /// Whether the run's event files were checked under this runtime's hold of it: `None` when
    /// the runtime does not hold the run.
    pub(super) fn checked(&self, run_dir: &Path) -> Option<bool> {
        self.with_held(run_dir, |h| h.checked)
    }

    /// Notes that the run's event files were checked under the hold (no-op without one).
    pub(super) fn mark_checked(&self, run_dir: &Path) {
        self.with_held(run_dir, |h| h.checked = true);
    }

    /// Takes the run's writer locks for one write — or nothing, when this runtime holds the run
    /// for a whole command (its writes go ahead under that hold). Blocking; waits about
    /// `attempts` × 5 ms before failing with [`JournalError::Locked`].
    pub(super) fn lock_run(&self, run_id: &str, run_dir: &Path, attempts: u32) -> Result<RunLock> {
        if self.held(run_dir) {
            return Ok(RunLock { held: None });
        }
        lock_run(run_id, run_dir, attempts)
    }
}

/// A run's writer locks held for a whole command (see [`FsRuntime::hold_run`]); released on
/// drop.
#[derive(Debug)]
pub struct HeldRun {
    key: PathBuf,
    /// `None` once released.
    lock: Option<RunLock>,
    runtime: FsRuntime,
}

impl Drop for HeldRun {
    fn drop(&mut self) {
        let shared = self.runtime.shared();
        // A commit-log write or settling that went ahead under the hold ends before the hold
        // does; one that starts after it takes the locks itself.
        let _guard = shared.settle.guard();
        shared.holds.all().remove(&self.key);
        self.lock.take();
    }
}

/// Who holds a run that [`FsRuntime::hold_run`] is waiting for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunHolder {
    /// A babysitter-rs command or writer: another hold of this runtime, or the journal's `flock`
    /// taken by another runtime or process.
    Writer,
    /// The reference CLI: its `run.lock`, whose pid is alive.
    RunLock { pid: i64, owner: String },
}

impl FsRuntime {
    /// Takes a run's writer locks (the `journal/` `flock` and babysitter's `run.lock` with this
    /// pid) for the whole of a command such as one iteration or one `task:post`, the way the
    /// reference's `withRunLock` holds them: a reference CLI started meanwhile waits on
    /// `run.lock` instead of interleaving its appends with ours.
    ///
    /// The hold is exclusive against every other holder — another command of this runtime (two
    /// commands the warm server runs at once), another runtime or process, the reference CLI —
    /// and waits for them quietly, up to `within`, calling `waiting` with the holder each time
    /// it finds the run taken; past that it fails with [`JournalError::Locked`]. Appends to the
    /// run through stores of this runtime go ahead under the hold; a store of another runtime
    /// waits for it like another process. The run directory must exist (a hold never creates a
    /// run).
    pub async fn hold_run(
        &self,
        run_dir: &Path,
        within: Duration,
        mut waiting: impl FnMut(&RunHolder),
    ) -> Result<HeldRun> {
        if !run_dir.is_dir() {
            return Err(JournalError::io(
                run_dir.display(),
                std::io::Error::new(ErrorKind::NotFound, "no such run directory"),
            ));
        }
        let run_id = run_dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let deadline = tokio::time::Instant::now() + within;
        let mut pause = Duration::from_millis(5);
        loop {
            // In place, without waiting: each attempt is a non-blocking `flock` and at most
            // one `run.lock` creation (a trip to the blocking pool would cost a thread).
            let holder = match self.try_hold(&run_id, run_dir) {
                Ok(held) => return Ok(held),
                Err(Contended(holder)) => holder,
                Err(Failed(e)) => return Err(e),
            };
            if tokio::time::Instant::now() >= deadline {
                let (pid, owner) = match holder {
                    RunHolder::Writer => (-1, "another babysitter-rs command".to_owned()),
                    RunHolder::RunLock { pid, owner } => (pid, owner),
                };
                return Err(JournalError::Locked { run_id, pid, owner });
            }
            waiting(&holder);
            tokio::time::sleep(pause.min(deadline - tokio::time::Instant::now())).await;
            pause = (pause * 2).min(Duration::from_millis(100));
        }
    }

    /// One attempt at [`FsRuntime::hold_run`].
    fn try_hold(&self, run_id: &str, run_dir: &Path) -> std::result::Result<HeldRun, TryHold> {
        let holds = &self.shared().holds;
        // Checked and recorded under the registry's mutex, so two holds of this runtime never
        // both get through (the second would otherwise pass as "held by us").
        let mut all = holds.all();
        let key = held_key(run_dir);
        if all.contains_key(&key) || all.values().any(|h| h.paths.iter().any(|p| p == run_dir)) {
            return Err(Contended(RunHolder::Writer));
        }
        let lock = match lock_run(run_id, run_dir, 1) {
            Ok(lock) => lock,
            Err(JournalError::Locked { pid, owner, .. }) => {
                return Err(Contended(if pid > 0 {
                    RunHolder::RunLock { pid, owner }
                } else {
                    RunHolder::Writer
                }));
            }
            Err(e) => return Err(Failed(e)),
        };
        all.insert(
            key.clone(),
            Held {
                paths: vec![run_dir.to_path_buf(), key.clone()],
                listing: None,
                checked: false,
            },
        );
        drop(all);
        Ok(HeldRun {
            key,
            lock: Some(lock),
            runtime: self.clone(),
        })
    }
}

/// Why one attempt at a hold did not get it.
enum TryHold {
    Contended(RunHolder),
    Failed(JournalError),
}
use TryHold::{Contended, Failed};

/// Short, growing pauses between lock attempts: 0.25 ms … 5 ms (≈ 30 s over `lock_attempts`).
fn backoff(attempt: u32) -> Duration {
    Duration::from_micros(u64::from(attempt.min(20)) * 250)
}

/// Takes both locks afresh (see [`Holds::lock_run`]).
fn lock_run(run_id: &str, run_dir: &Path, attempts: u32) -> Result<RunLock> {
    let journal_dir = run_dir.join("journal");
    fs::create_dir_all(&journal_dir).map_err(|e| JournalError::io(journal_dir.display(), e))?;
    let dir = rustix::fs::open(
        &journal_dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| JournalError::io(journal_dir.display(), e.into()))?;
    let mut attempt = 0;
    loop {
        match rustix::fs::flock(&dir, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => break,
            Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {
                attempt += 1;
                if attempt >= attempts {
                    return Err(JournalError::Locked {
                        run_id: run_id.to_owned(),
                        pid: -1,
                        owner: "another babysitter-rs writer (flock)".into(),
                    });
                }
                std::thread::sleep(backoff(attempt));
            }
            Err(e) => return Err(JournalError::io(journal_dir.display(), e.into())),
        }
    }
    let lock_file = run_dir.join("run.lock");
    let body = node_json::to_file_string(&json!({
        "pid": std::process::id(),
        "owner": LOCK_OWNER,
        "acquiredAt": crate::journal::now_iso(),
    }));
    let mut attempt = 0;
    loop {
        match OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&lock_file)
        {
            Ok(mut f) => {
                f.write_all(body.as_bytes())
                    .map_err(|e| JournalError::io(lock_file.display(), e))?;
                return Ok(RunLock {
                    held: Some((dir, lock_file)),
                });
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                // Held by the reference CLI (our own writers are excluded by the flock above).
                let (pid, owner) = run_lock_holder(run_dir).unwrap_or((0, "unknown".to_owned()));
                if !pid_alive(pid) {
                    tracing::warn!(run_id, pid, owner, "stale run.lock detected, taking over");
                    let _ = fs::remove_file(&lock_file);
                    continue;
                }
                attempt += 1;
                if attempt >= attempts {
                    return Err(JournalError::Locked {
                        run_id: run_id.to_owned(),
                        pid,
                        owner,
                    });
                }
                std::thread::sleep(backoff(attempt));
            }
            Err(e) => return Err(JournalError::io(lock_file.display(), e)),
        }
    }
}

/// The pid and owner recorded in a run's babysitter `run.lock`, if it exists and parses.
pub fn run_lock_holder(run_dir: &Path) -> Option<(i64, String)> {
    let bytes = fs::read(run_dir.join("run.lock")).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    let pid = v.get("pid").and_then(Value::as_i64).unwrap_or(0);
    let owner = v
        .get("owner")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    Some((pid, owner))
}

/// Whether a process with this pid is alive (babysitter's stale-lock test, `kill(pid, 0)`).
pub fn pid_alive(pid: i64) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    let Some(pid) = rustix::process::Pid::from_raw(raw) else {
        return false;
    };
    match rustix::process::test_kill_process(pid) {
        Ok(()) => true,
        Err(e) => e == rustix::io::Errno::PERM,
    }
}
