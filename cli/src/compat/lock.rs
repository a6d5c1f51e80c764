//! Exclusion for a whole command on one run (`run:iterate`, `task:post`, `task:cancel`,
//! `run:halt`, `run:rebuild-state`), like the reference's `withRunLock` around an iteration or a
//! commit, but waiting quietly with one clear message instead of a 10-second spin.
//!
//! Two holders are waited for:
//! 1. another babysitter-rs command on the same run: an exclusive `flock` on the run directory
//!    (released by the kernel if the holder dies, so it never goes stale);
//! 2. the reference CLI: its `run.lock` (`{pid, owner, acquiredAt}`, spec §1.7) while the pid is
//!    alive (a dead holder's file is left for the journal's stale-lock takeover).
//!
//! Once both are free, the command holds the journal's writer locks for its whole duration
//! (`FsRuntime::hold_run` on the command's runtime, `run_dir::fs_runtime`: the `journal/` `flock`
//! and `run.lock` with our pid), as the reference's `withRunLock` does: a reference CLI that
//! starts during one of our iterations waits on `run.lock` instead of interleaving with it, and
//! the command's own appends (its stores are on the same runtime) go ahead under the hold.

use babysitter_journal::JournalError;
use babysitter_journal::fs::{HeldRun, pid_alive, run_lock_holder};
use std::path::{Path, PathBuf};
use std::time::Duration;

use rustix::fs::{FlockOperation, Mode, OFlags};

/// Default bound on the wait (the reference gives up after ~10 s as well).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Held for the duration of a command.
#[derive(Debug)]
pub struct RunGuard {
    // Dropped in this order: `run.lock` and the journal's flock, then the run directory's.
    _held: HeldRun,
    _dir: rustix::fd::OwnedFd,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// babysitter's own message (`run.lock already held by pid <pid> (<owner>)`).
    #[error("run.lock already held by pid {pid} ({owner})")]
    Held { pid: i64, owner: String },
    #[error("run {} is busy: another babysitter command holds its lock", .0.display())]
    Busy(PathBuf),
    #[error("cannot lock run {}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// The live holder of the reference's `run.lock`, if any.
fn foreign_holder(run_dir: &Path) -> Option<(i64, String)> {
    let (pid, owner) = run_lock_holder(run_dir)?;
    (pid != i64::from(std::process::id()) && pid_alive(pid)).then_some((pid, owner))
}

/// Waits (up to `timeout`) until no other command holds the run, then holds it.
pub async fn acquire(run_dir: &Path, timeout: Duration) -> Result<RunGuard, LockError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let dir = rustix::fs::open(
        run_dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| LockError::Io {
        path: run_dir.to_path_buf(),
        source: e.into(),
    })?;
    let mut announced = false;
    let mut pause = Duration::from_millis(5);
    let mut announce = |what: &str| {
        if !announced {
            announced = true;
            errln!(
                "[babysitter] run lock contention on {}: {what}; waiting up to {} ms",
                run_dir.display(),
                timeout.as_millis()
            );
        }
    };
    loop {
        match rustix::fs::flock(&dir, FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => break,
            Err(e) if e == rustix::io::Errno::WOULDBLOCK || e == rustix::io::Errno::INTR => {
                if tokio::time::Instant::now() >= deadline {
                    return Err(match foreign_holder(run_dir) {
                        Some((pid, owner)) => LockError::Held { pid, owner },
                        None => LockError::Busy(run_dir.to_path_buf()),
                    });
                }
                announce("another babysitter command is working on it");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_millis(100));
            }
            Err(e) => {
                return Err(LockError::Io {
                    path: run_dir.to_path_buf(),
                    source: e.into(),
                });
            }
        }
    }
    loop {
        let holder = match foreign_holder(run_dir) {
            Some(h) => Some(h),
            None => {
                // In place: the run directory's flock is ours, so this only creates `run.lock`
                // (a few short retries at most); a trip to the blocking pool would cost a thread.
                match super::run_dir::fs_runtime().hold_run(run_dir, 4) {
                    Ok(held) => {
                        return Ok(RunGuard {
                            _held: held,
                            _dir: dir,
                        });
                    }
                    // Taken by the reference CLI between the check and the hold: wait again.
                    Err(JournalError::Locked { pid, owner, .. }) => Some((pid, owner)),
                    Err(e) => {
                        return Err(LockError::Io {
                            path: run_dir.to_path_buf(),
                            source: std::io::Error::other(e.to_string()),
                        });
                    }
                }
            }
        };
        if let Some((pid, owner)) = holder {
            if tokio::time::Instant::now() >= deadline {
                return Err(LockError::Held { pid, owner });
            }
            announce(&format!("run.lock held by pid {pid} ({owner})"));
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(100));
    }
}
