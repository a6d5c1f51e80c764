//! Which run files are written but not yet durable, by run: what the run's next commit must make
//! durable before its events become visible ([`super::write_events`]).
//!
//! A commit makes them durable one by one when they are few — an `fsync` of each file and of the
//! directories on its path up to the run directory — and with one `syncfs` when they are many (a
//! fan-out's hundreds of new task files). One at a time keeps a small commit (`task:post`, a
//! sequential `run:iterate`) off the rest of the machine: a `syncfs` also waits for every other
//! program's dirty data on the filesystem, which next to a build costs tens to hundreds of
//! milliseconds.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{JournalError, Result};

/// Deferred files up to which a commit makes them durable one by one.
pub(super) const PER_FILE_MAX: usize = 8;

/// A run's files written by [`super::write_for_commit`] that no sync has covered yet.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Deferred {
    /// Of the latest batch: a sync settles the entry only if no batch came after it.
    pub generation: u64,
    pub files: Vec<PathBuf>,
    /// Every directory from each file's own up to the run directory (their entries changed).
    pub dirs: BTreeSet<PathBuf>,
    /// More than [`PER_FILE_MAX`] files, or a batch whose outcome is unknown: sync the
    /// filesystem.
    pub many: bool,
    /// Every file's bytes, where each batch gave them (a commit log carries them instead of a
    /// sync); `None` once one did not.
    pub contents: Option<super::Contents>,
}

/// The account of every run's deferred files, kept by the runtime: whichever of the process's
/// stores writes a run's files, its next commit sees them.
#[derive(Debug, Default)]
pub(super) struct Deferreds {
    runs: Mutex<BTreeMap<PathBuf, Deferred>>,
    generation: AtomicU64,
}

impl Deferreds {
    fn runs(&self) -> std::sync::MutexGuard<'_, BTreeMap<PathBuf, Deferred>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a batch of `run_dir`'s files as written, not durable: `files` where they now are,
    /// or `None` when the batch failed part way (whatever it left is synced the thorough way).
    pub(super) fn note(&self, run_dir: &Path, files: Option<Vec<&Path>>) {
        self.note_with(run_dir, files, None);
    }

    /// [`Deferreds::note`], with the files' bytes (`None`: not kept).
    pub(super) fn note_with(
        &self,
        run_dir: &Path,
        files: Option<Vec<&Path>>,
        contents: Option<super::Contents>,
    ) {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let mut all = self.runs();
        let entry = all
            .entry(run_dir.to_path_buf())
            .or_insert_with(|| Deferred {
                contents: Some(Vec::new()),
                ..Deferred::default()
            });
        entry.generation = generation;
        match (&mut entry.contents, contents) {
            (Some(kept), Some(new)) => kept.extend(new),
            (kept, _) => *kept = None,
        }
        match files {
            Some(files) if !entry.many && entry.files.len() + files.len() <= PER_FILE_MAX => {
                for file in files {
                    let mut dir = file.parent();
                    while let Some(d) = dir {
                        entry.dirs.insert(d.to_path_buf());
                        if d == run_dir || !d.starts_with(run_dir) {
                            break;
                        }
                        dir = d.parent();
                    }
                    entry.files.push(file.to_path_buf());
                }
            }
            _ => {
                entry.many = true;
                entry.files = Vec::new();
                entry.dirs = BTreeSet::new();
            }
        }
    }

    /// What `run_dir` has deferred, if anything.
    pub(super) fn of(&self, run_dir: &Path) -> Option<Deferred> {
        self.runs().get(run_dir).cloned()
    }

    /// A sync that covered `run_dir`'s deferred files as of `generation` happened (a batch
    /// noted since stays pending).
    pub(super) fn settle(&self, run_dir: &Path, generation: u64) {
        let mut all = self.runs();
        if all.get(run_dir).is_some_and(|d| d.generation == generation) {
            all.remove(run_dir);
        }
    }
}

/// Makes `deferred` durable one file and one directory at a time. A file that is gone (replaced
/// by a later batch, which is noted itself) is skipped.
pub(super) fn sync_each(deferred: &Deferred) -> Result<()> {
    for file in &deferred.files {
        match File::open(file).and_then(|f| f.sync_all()) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(JournalError::io(file.display(), e)),
        }
    }
    for dir in &deferred.dirs {
        super::fsync_dir(dir)?;
    }
    Ok(())
}
