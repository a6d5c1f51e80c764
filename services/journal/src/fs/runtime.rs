//! [`FsRuntime`]: what the filesystem stores of one process share — the runs it holds for a
//! whole command ([`super::lock`]), the files written but not yet durable and the background
//! writes each run's next commit waits for ([`super::write`]), and the commit logs it settles in
//! the background ([`super::write::commit_log`]).
//!
//! One runtime per process, shared by every store that may touch the same runs: their writes
//! must see one another's holds (`flock` locks belong to an open file description, so two
//! registries in one process would make a command's own commit wait on its hold), deferred
//! files and background writes (a commit makes durable what its run's earlier writes left, so
//! both must be accounted in one place). [`FsStore::new`] makes a runtime of its own, for a
//! process with one store; a process with several builds one runtime and hands it to each
//! ([`FsStore::with_runtime`]).
//!
//! A binary builds its runtime first thing in `main`, before it starts threads, and keeps it
//! for its whole life: building it grows the descriptor table (see `write/anonymous.rs`; built
//! later it works the same, it only may not spare a large batch a wait for the kernel), and
//! dropping its last handle settles the commit logs its stores wrote (so `main` has nothing to
//! remember on the way out). [`FsRuntime::settle`] settles them on demand, e.g. while a server
//! drains. A log left unsettled (the process was killed) costs its next reader a comparison,
//! never an event.

use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::write::{self, commit_log, fsync_dir};
use super::{FsStore, lock, snapshot_dir};
use crate::error::{JournalError, Result};
use crate::event::StoredEvent;

/// The shared state of a process's filesystem stores (see the module docs). Cheap to clone:
/// clones are handles on one runtime.
#[derive(Clone)]
pub struct FsRuntime {
    owner: Arc<Owner>,
}

/// The runtime's state. Threads the runtime starts (settling, background writes) hold it, not
/// an [`FsRuntime`]: the runtime ends when its last handle goes, not when they do.
#[derive(Debug, Default)]
pub(super) struct Shared {
    pub(super) holds: lock::Holds,
    pub(super) writes: write::Writes,
    pub(super) settle: commit_log::Settling,
}

/// Settles and stops the settling thread when the last handle goes.
struct Owner {
    shared: Arc<Shared>,
}

impl Drop for Owner {
    fn drop(&mut self) {
        self.shared.settle.settle_all();
        self.shared.settle.stop();
    }
}

impl fmt::Debug for FsRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FsRuntime").finish_non_exhaustive()
    }
}

impl Default for FsRuntime {
    fn default() -> Self {
        Self::new()
    }
}

impl FsRuntime {
    /// A runtime for this process's filesystem stores. Grows the descriptor table for large
    /// batches: call it while the process has one thread (before an async runtime starts) —
    /// later it is as correct, the table's growth may just cost a wait then.
    pub fn new() -> Self {
        write::reserve_descriptors();
        Self {
            owner: Arc::new(Owner {
                shared: Arc::new(Shared::default()),
            }),
        }
    }

    pub(super) fn shared(&self) -> &Arc<Shared> {
        &self.owner.shared
    }

    /// A store over `root` on this runtime.
    pub fn store(&self, root: impl Into<PathBuf>) -> FsStore {
        FsStore::with_runtime(root, self.clone())
    }

    /// Waits until the commit logs this runtime's stores committed to are settled (their
    /// files durable, the logs marked; a run whose lock stays busy is left live: its readers
    /// compare). Blocking: a sync of each filesystem involved.
    pub fn settle_blocking(&self) {
        self.shared().settle.settle_all();
    }

    /// [`FsRuntime::settle_blocking`] off the async runtime's threads.
    pub async fn settle(&self) {
        let shared = self.shared().clone();
        let settled = tokio::task::spawn_blocking(move || shared.settle.settle_all()).await;
        if settled.is_err() {
            // No blocking thread to be had (or it panicked): settle here.
            self.settle_blocking();
        }
    }

    /// Replaces `<runDir>/journal/` with `events` (written with their own seq and ULID) and
    /// keeps the old directory as `<runDir>/<backup_name>/`; returns the backup's path. The run
    /// must be held by this runtime ([`FsRuntime::hold_run`]), so that no appender — ours or
    /// the reference CLI — writes into a directory being swapped; refused otherwise.
    ///
    /// The new journal is built whole in `<runDir>/<staging_name>/` and made durable (every
    /// file and the directory fsynced) before anything is renamed, then swapped in with one
    /// atomic `RENAME_EXCHANGE`, so a crash leaves either the old journal in place or the new
    /// one (the old one beside it) — never a half-written or missing journal. The run's
    /// snapshots (`state/snapshots`, keyed by the old sequence numbers) and its commit log
    /// (whose records name the old ones) are removed first.
    pub fn replace_journal(
        &self,
        run_dir: &Path,
        events: &[StoredEvent],
        staging_name: &str,
        backup_name: &str,
    ) -> Result<PathBuf> {
        let shared = self.shared();
        if !shared.holds.held(run_dir) {
            return Err(JournalError::invalid(
                "journal replacement",
                format!(
                    "{} is not held by this process (hold_run it first)",
                    run_dir.display()
                ),
            ));
        }
        shared.holds.forget_listing(run_dir);
        // Its sequence numbers would name other events after the swap.
        commit_log::discard(shared, run_dir)?;
        let backup = swap_journal(run_dir, events, staging_name, backup_name)?;
        shared.holds.forget_listing(run_dir);
        Ok(backup)
    }
}

/// [`FsRuntime::replace_journal`]'s swap, once the runtime's view of the run is dropped.
fn swap_journal(
    run_dir: &Path,
    events: &[StoredEvent],
    staging_name: &str,
    backup_name: &str,
) -> Result<PathBuf> {
    let journal = run_dir.join("journal");
    let staging = run_dir.join(staging_name);
    let backup = run_dir.join(backup_name);
    for p in [&staging, &backup] {
        if p.symlink_metadata().is_ok() {
            return Err(JournalError::io(
                p.display(),
                std::io::Error::new(ErrorKind::AlreadyExists, "already exists"),
            ));
        }
    }
    let build = || -> Result<()> {
        fs::create_dir(&staging).map_err(|e| JournalError::io(staging.display(), e))?;
        for ev in events {
            let path = staging.join(ev.file_name());
            let io = |e| JournalError::io(path.display(), e);
            let mut f = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
                .map_err(io)?;
            f.write_all(&ev.file_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        fsync_dir(&staging)
    };
    if let Err(e) = build() {
        let _ = fs::remove_dir_all(&staging);
        return Err(e);
    }
    // Snapshots describe the old journal's sequence numbers: drop them (derived data, rebuilt
    // from the journal; losing them costs one full read) before the new journal is visible.
    let snapshots = snapshot_dir(run_dir);
    match fs::remove_dir_all(&snapshots) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::NotFound => {}
        Err(e) => {
            let _ = fs::remove_dir_all(&staging);
            return Err(JournalError::io(snapshots.display(), e));
        }
    }
    // One atomic exchange: `journal/` is the old directory or the new one, never missing (two
    // renames would leave no journal between them if the process died there).
    let cwd = rustix::fs::CWD;
    match rustix::fs::renameat_with(
        cwd,
        &staging,
        cwd,
        &journal,
        rustix::fs::RenameFlags::EXCHANGE,
    ) {
        Ok(()) => {
            // The old journal now sits at the staging name: keep it as the backup.
            fs::rename(&staging, &backup).map_err(|e| JournalError::io(staging.display(), e))?;
        }
        // A filesystem without RENAME_EXCHANGE: two renames, the original put back on failure.
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
            if let Err(e) = fs::rename(&journal, &backup) {
                let _ = fs::remove_dir_all(&staging);
                return Err(JournalError::io(journal.display(), e));
            }
            if let Err(e) = fs::rename(&staging, &journal) {
                // Put the original back; the staged copy stays for inspection.
                let _ = fs::rename(&backup, &journal);
                return Err(JournalError::io(staging.display(), e));
            }
        }
        Err(e) => {
            let _ = fs::remove_dir_all(&staging);
            return Err(JournalError::io(journal.display(), e.into()));
        }
    }
    fsync_dir(run_dir)?;
    Ok(backup)
}

#[cfg(test)]
mod tests {

    /// The runs root inside a test's temporary directory: a runs root's parent receives babysitter's
    /// `package.json`, which must land in the temporary directory, not in `/tmp`.
    fn runs(dir: &tempfile::TempDir) -> std::path::PathBuf {
        dir.path().join("runs")
    }

    use std::sync::Arc;
    use std::time::Duration;

    use serde_json::json;

    use super::FsRuntime;
    use crate::store::RunFiles;
    use crate::{EventType, Journal, JournalError, JournalOptions, NewEvent};

    const RUN: &str = "01ARZ3NDEKTSV4RRFFQ69G5FAV";

    fn event() -> Vec<NewEvent> {
        vec![NewEvent::new(EventType::RunCreated, json!({"runId": RUN}))]
    }

    /// A hold belongs to the runtime that took it: that runtime's stores append under it, a
    /// store of another runtime waits for it like another process would (and gives up), and
    /// may append once the hold is released.
    #[tokio::test]
    async fn a_hold_lets_its_own_runtime_through_and_no_other() {
        let dir = tempfile::tempdir().unwrap();
        let (ours, theirs) = (FsRuntime::new(), FsRuntime::new());
        let journal = Journal::new(
            Arc::new(ours.store(runs(&dir)).inline_io()),
            JournalOptions::default(),
        );
        let files = RunFiles {
            run_json: json!({"runId": RUN}),
            inputs_json: None,
        };
        journal.create_run(RUN, files).await.unwrap();
        journal.append(RUN, 1, event()).await.unwrap();
        let mut other = theirs.store(runs(&dir)).inline_io();
        other.lock_attempts = 2;
        let other = Journal::new(Arc::new(other), JournalOptions::default());

        let hold = ours
            .hold_run(&runs(&dir).join(RUN), Duration::ZERO, |_| {})
            .await
            .unwrap();
        journal.append(RUN, 2, event()).await.unwrap();
        let refused = other.append(RUN, 3, event()).await;
        assert!(
            matches!(refused, Err(JournalError::Locked { .. })),
            "another runtime's store must wait for the hold: {refused:?}"
        );
        assert!(
            theirs
                .replace_journal(&runs(&dir).join(RUN), &[], "staging", "backup")
                .is_err(),
            "a runtime that does not hold the run may not replace its journal"
        );
        drop(hold);
        other.append(RUN, 3, event()).await.unwrap();
        let names = std::fs::read_dir(runs(&dir).join(RUN).join("journal"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .count();
        assert_eq!(names, 3, "one file per sequence number");
    }
}
