//! Run files written one at a time as they are produced ([`crate::store::RunFileWriter`]): a
//! fan-out's `task.json`s are written while the process that asks for them is still running,
//! on the writer's own thread, instead of all at once after it. Each file is staged as
//! [`super::write_for_commit`] stages it (in place in a directory made for it, else through a
//! temp file). Each time [`EARLY_SYNC_MIN`] new files are written and no such sync is under way,
//! a `syncfs` starts on a thread of its own (the wait is the disk's, not the CPU's: it overlaps
//! the process and the writer), so the commit's own sync is left with its events and the files
//! written last. A sync still under way at closing is not waited for. Closing places and notes
//! the rest for the run's next commit, which makes them durable before its events become
//! visible. For a store whose commits go through the run's commit log there are no early syncs:
//! the writer keeps the files' bytes and the log carries them. A writer dropped unclosed
//! removes what it wrote: nothing refers to those files.

use std::fs;
use std::path::PathBuf;
use std::sync::Arc;

use super::{Staged, discard_tmps, join_background, place_for_commit, stage, syncfs};
use crate::error::Result;
use crate::fs::runtime::Shared;
use crate::store::{RunFile, RunFileWriter};

/// New files from which an early `syncfs` is started.
pub(super) const EARLY_SYNC_MIN: usize = 32;

/// [`RunFileWriter`] for a run directory.
#[derive(Debug)]
pub(in crate::fs) struct StreamedFiles {
    /// The store's runtime: the run's background writes, and the account its next commit reads.
    rt: Arc<Shared>,
    run_dir: PathBuf,
    /// Staged and not yet durable (or temp files still to be renamed).
    staged: Vec<Staged>,
    /// Written in place and covered by an early sync that ended (durable, unless the sync
    /// failed: then the writer fails and removes them with the rest).
    durable: Vec<PathBuf>,
    /// An early sync under way, and the files it covers.
    syncing: Option<(std::thread::JoinHandle<Result<()>>, Vec<PathBuf>)>,
    /// The run's commits go through its commit log, which carries these files' bytes: no early
    /// syncs, the bytes kept for it.
    contents: Option<super::Contents>,
    closed: bool,
}

impl StreamedFiles {
    /// A writer for `run_dir` (which exists), after its earlier background writes are done.
    pub(in crate::fs) fn new(rt: Arc<Shared>, run_dir: PathBuf, commit_log: bool) -> Result<Self> {
        join_background(&rt, &run_dir)?;
        Ok(Self {
            rt,
            run_dir,
            staged: Vec::new(),
            durable: Vec::new(),
            syncing: None,
            contents: commit_log.then(Vec::new),
            closed: false,
        })
    }

    /// Whether every file written in place so far is durable by an early sync (tests).
    #[cfg(test)]
    pub(super) fn early_synced_all(&self) -> bool {
        self.syncing.is_none() && self.staged.iter().all(|s| !matches!(s, Staged::InPlace(_)))
    }

    /// Starts making what was written durable, on a thread of its own, once enough is written
    /// and no such sync is under way: the disk works while the producer and the writer go on.
    fn sync_early(&mut self) -> Result<()> {
        // The last sync's outcome first: what it covered is durable now.
        if self.syncing.as_ref().is_some_and(|(h, _)| h.is_finished())
            && let Some((handle, covered)) = self.syncing.take()
        {
            let synced = handle.join().unwrap_or_else(|_| {
                let e = std::io::Error::other("sync thread panicked");
                Err(crate::error::JournalError::io(self.run_dir.display(), e))
            });
            // Kept either way: a failed sync fails the writer, which then removes them.
            self.durable.extend(covered);
            synced?;
        }
        let in_place = self
            .staged
            .iter()
            .filter(|s| matches!(s, Staged::InPlace(_)));
        if self.contents.is_some() || self.syncing.is_some() || in_place.count() < EARLY_SYNC_MIN {
            return Ok(());
        }
        // Files written in place in their new directories, durable with their directories'
        // entries once a sync that began after them ends; temp files still have their renames
        // ahead of them. The sync runs on a thread of its own: the writer goes on meanwhile.
        let (covered, rest): (Vec<Staged>, Vec<Staged>) = std::mem::take(&mut self.staged)
            .into_iter()
            .partition(|s| matches!(s, Staged::InPlace(_)));
        self.staged = rest;
        let covered: Vec<PathBuf> = covered
            .into_iter()
            .filter_map(|s| match s {
                Staged::InPlace(path) => Some(path),
                Staged::Tmp(..) => None,
            })
            .collect();
        let dir = self.run_dir.clone();
        match std::thread::Builder::new()
            .name("journal-sync".into())
            .spawn(move || syncfs(&dir))
        {
            Ok(handle) => self.syncing = Some((handle, covered)),
            // No thread to be had: leave them to the commit's sync.
            Err(_) => self.staged.extend(covered.into_iter().map(Staged::InPlace)),
        }
        Ok(())
    }
}

impl RunFileWriter for StreamedFiles {
    fn write(&mut self, file: &RunFile, content: &[u8]) -> Result<()> {
        let path = self.run_dir.join(file.path());
        self.staged.push(stage(&path, content, &mut None)?);
        if let Some(contents) = &mut self.contents {
            contents.push((path, content.into()));
        }
        self.sync_early()
    }

    fn idle(&mut self) -> Result<()> {
        self.sync_early()
    }

    fn close(mut self: Box<Self>) -> Result<()> {
        self.closed = true;
        join_background(&self.rt, &self.run_dir)?;
        // A sync still under way is not waited for: its files go to the commit's own sync
        // (which waits for the same writeback anyway).
        match self.syncing.take() {
            Some((handle, covered)) if handle.is_finished() => match handle.join() {
                Ok(Ok(())) => {}
                _ => self.staged.extend(covered.into_iter().map(Staged::InPlace)),
            },
            Some((_, covered)) => self.staged.extend(covered.into_iter().map(Staged::InPlace)),
            None => {}
        }
        if self.staged.is_empty() {
            return Ok(());
        }
        let contents = self.contents.take();
        place_for_commit(&self.rt, &self.run_dir, &self.staged, contents)
    }
}

impl Drop for StreamedFiles {
    fn drop(&mut self) {
        if self.closed {
            return;
        }
        // Not handed to a commit: nothing refers to these files.
        discard_tmps(&self.staged);
        let in_place = self.staged.iter().filter_map(|s| match s {
            Staged::InPlace(path) => Some(path),
            Staged::Tmp(..) => None,
        });
        let syncing = self.syncing.iter().flat_map(|(_, covered)| covered);
        for path in in_place.chain(&self.durable).chain(syncing) {
            let _ = fs::remove_file(path);
            // Made for this file (that is what "in place" means): empty again now.
            if let Some(dir) = path.parent() {
                let _ = fs::remove_dir(dir);
            }
        }
    }
}
