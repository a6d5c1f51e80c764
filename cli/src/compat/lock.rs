//! Exclusion for a whole command on one run (`run:iterate`, `task:post`, `task:cancel`,
//! `run:halt`, `run:rebuild-state`), like the reference's `withRunLock` around an iteration or a
//! commit, but waiting quietly with one clear message instead of a 10-second spin.
//!
//! The lock is the journal's one run hold (`FsRuntime::hold_run` on the command's runtime,
//! `run_dir::fs_runtime`: the `journal/` `flock` and `run.lock` with our pid), held for the
//! command's whole duration as the reference's `withRunLock` does. It waits for every other
//! holder: another babysitter-rs command (in this process — the warm server runs several at
//! once — or another), a babysitter-rs writer, and the reference CLI while its `run.lock`'s pid is
//! alive. A reference CLI that starts during one of our iterations waits on `run.lock` instead of
//! interleaving with it, and the command's own appends (its stores are on the same runtime) go
//! ahead under the hold. This module only adds the CLI's words: the waiting message and
//! babysitter's error text.

use std::path::{Path, PathBuf};
use std::time::Duration;

use babysitter_journal::JournalError;
use babysitter_journal::fs::{HeldRun, RunHolder};

/// Default bound on the wait (the reference gives up after ~10 s as well).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// Held for the duration of a command.
#[derive(Debug)]
pub struct RunGuard {
    _held: HeldRun,
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

/// Waits (up to `timeout`) until no other command holds the run, then holds it; says once on
/// stderr what it is waiting for.
pub async fn acquire(run_dir: &Path, timeout: Duration) -> Result<RunGuard, LockError> {
    let fs = super::run_dir::fs_runtime().map_err(|e| LockError::Io {
        path: run_dir.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    let mut announced = false;
    let held = fs
        .hold_run(run_dir, timeout, |holder| {
            if !announced {
                announced = true;
                let what = match holder {
                    RunHolder::Writer => "another babysitter command is working on it".to_owned(),
                    RunHolder::RunLock { pid, owner } => {
                        format!("run.lock held by pid {pid} ({owner})")
                    }
                };
                errln!(
                    "[babysitter] run lock contention on {}: {what}; waiting up to {} ms",
                    run_dir.display(),
                    timeout.as_millis()
                );
            }
        })
        .await;
    match held {
        Ok(held) => Ok(RunGuard { _held: held }),
        // Still held when the wait ran out: by the reference CLI (a live pid in `run.lock`) or
        // by a babysitter-rs command.
        Err(JournalError::Locked { pid, owner, .. }) if pid > 0 => {
            Err(LockError::Held { pid, owner })
        }
        Err(JournalError::Locked { .. }) => Err(LockError::Busy(run_dir.to_path_buf())),
        Err(e) => Err(LockError::Io {
            path: run_dir.to_path_buf(),
            source: std::io::Error::other(e.to_string()),
        }),
    }
}
