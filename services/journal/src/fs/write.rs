//! How the filesystem backend writes files and makes them durable.
//!
//! - A file that replaces one (a rewritten `run.json`, a re-posted `result.json`) goes through a
//!   temp file made durable before it is renamed over the old one: a crash leaves the old file
//!   or the new one, never a torn one.
//! - A file in a directory this write created (a new effect's `tasks/<effectId>/task.json`) is
//!   written in place: nothing can refer to it yet, so a crash leaves at most a torn file in an
//!   orphan directory, and it saves a rename per file.
//! - A batch that events committed next will refer to ([`write_for_commit`]) may stay not yet
//!   durable: the run's next commit makes it durable before its events become visible — a few
//!   files one `fsync` at a time, many with one `syncfs` that covers the events too
//!   ([`deferred`] keeps the account, by run).
//!
//! The account of deferred files, the background writes and what the process may do when it
//! links files are kept in the stores' [`super::FsRuntime`] ([`Writes`]): a commit must see
//! what every earlier write to its run left, whichever store of the process made it.
//!
//! Large batches are written from two threads: creating an inode is the expensive part on ext4
//! (more so without a journal, where each allocation scans past the recently deleted inodes of
//! its block group), and the threads are arranged so that neither waits for a directory lock the
//! other holds — new directories on one thread and the files in them on the other; a commit's
//! events as anonymous files (`O_TMPFILE`, no directory lock), named once they are durable.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use super::runtime::Shared;
use crate::error::{JournalError, Result};

pub(super) use anonymous::reserve_descriptors;
use anonymous::{Anonymous, stage_anonymous};

/// Batches at least this large are written from two threads.
const PARALLEL_MIN: usize = 32;

/// A runtime's write bookkeeping (see the module docs).
#[derive(Debug, Default)]
pub(super) struct Writes {
    /// Files written, not yet durable, by run ([`deferred`]).
    deferred: deferred::Deferreds,
    /// Large [`write_for_commit`] batches being written in the background, by run directory:
    /// the commit that refers to them stages its own events meanwhile and joins them before its
    /// sync (a fan-out's new task directories, created one at a time under `tasks/`'s lock, are
    /// the long pole of an iteration; its events need no part of them until then). Every other
    /// access to the run's files joins them first ([`join_background`]).
    background: Mutex<Vec<(PathBuf, std::thread::JoinHandle<Result<()>>)>>,
    /// How this process may name anonymous files.
    links: anonymous::Links,
}

/// `<name>.tmp-<pid>-<ULID>` next to `path`: never ends in `.json`, so loaders skip it. The
/// ULID's 80 random bits make the name unique without a counter the process's stores (and
/// [`write_atomic`], which has no store) would have to share.
pub(super) fn tmp_path(path: &Path) -> PathBuf {
    path.with_file_name(format!(
        "{}.tmp-{}-{}",
        path.file_name().and_then(|s| s.to_str()).unwrap_or("file"),
        std::process::id(),
        ulid::Ulid::generate()
    ))
}

/// Atomic replace without fsync, for derived files (state cache, snapshots): after a crash
/// they may be missing or stale, never torn, and they are rebuilt from the journal.
pub(super) fn write_derived(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    let io = |e| JournalError::io(path.display(), e);
    fs::write(&tmp, bytes).map_err(io)?;
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io(e)
    })
}

/// babysitter's `writeFileAtomic`: temp file, fsync, rename over `path` (public for commands
/// that rewrite a run's own files, such as `run.json` or a task's `result.json`).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = tmp_path(path);
    let io = |e| JournalError::io(path.display(), e);
    let mut f = File::create(&tmp).map_err(io)?;
    f.write_all(bytes).map_err(io)?;
    f.sync_all().map_err(io)?;
    drop(f);
    fs::rename(&tmp, path).map_err(|e| {
        let _ = fs::remove_file(&tmp);
        io(e)
    })
}

pub(super) fn fsync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| JournalError::io(dir.display(), e))
}

/// One `syncfs` of the filesystem holding `path`.
pub(super) fn syncfs(path: &Path) -> Result<()> {
    let f = File::open(path).map_err(|e| JournalError::io(path.display(), e))?;
    rustix::fs::syncfs(&f).map_err(|e| JournalError::io(path.display(), e.into()))
}

/// How one file of a batch was staged.
#[derive(Debug)]
enum Staged {
    /// Written in place, in a directory this batch created.
    InPlace(PathBuf),
    /// Written to a temp file, to be renamed to the path.
    Tmp(PathBuf, PathBuf),
}

/// Whether `dir` exists, creating it if not: `true` when this call created it (it is empty and
/// nothing refers to it). `known` is the previous file's directory, which needs no syscall.
fn ensure_dir(dir: &Path, known: &mut Option<(PathBuf, bool)>) -> Result<bool> {
    if let Some((d, new)) = known.as_ref()
        && d == dir
    {
        return Ok(*new);
    }
    let new = match fs::create_dir(dir) {
        Ok(()) => true,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => false,
        Err(e) if e.kind() == ErrorKind::NotFound => {
            fs::create_dir_all(dir).map_err(|e| JournalError::io(dir.display(), e))?;
            // Made here or by a concurrent writer: not known to be empty.
            false
        }
        Err(e) => return Err(JournalError::io(dir.display(), e)),
    };
    *known = Some((dir.to_path_buf(), new));
    Ok(new)
}

/// Writes one file of a batch: in place when its directory is new, else to a temp file.
fn stage(path: &Path, bytes: &[u8], known: &mut Option<(PathBuf, bool)>) -> Result<Staged> {
    let io = |e| JournalError::io(path.display(), e);
    let parent = path
        .parent()
        .ok_or_else(|| io(std::io::Error::other("no parent directory")))?;
    let create = |target: &Path| -> std::io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(target)?;
        f.write_all(bytes).inspect_err(|_| {
            let _ = fs::remove_file(target);
        })
    };
    if ensure_dir(parent, known)? {
        match create(path) {
            Ok(()) => return Ok(Staged::InPlace(path.to_path_buf())),
            // The same path twice in one batch: the later one replaces it, as a rename would.
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
    }
    let tmp = tmp_path(path);
    create(&tmp).map_err(io)?;
    Ok(Staged::Tmp(tmp, path.to_path_buf()))
}

/// [`stage`] for every file. In a large batch over many directories (a fan-out's new task
/// directories) a second thread creates the directories, in order, while this one writes the
/// files into them: creating a directory holds its parent's lock (the two threads would only
/// take turns), a file in its own directory does not wait for it. On error, what was staged is
/// removed (files written in place are not referenced by anything yet).
fn stage_all(files: &[(PathBuf, &[u8])]) -> Result<Vec<Staged>> {
    let mut staged = Vec::with_capacity(files.len());
    let result = if files.len() >= PARALLEL_MIN {
        stage_pipelined(files, &mut staged)
    } else {
        let mut known = None;
        files.iter().try_for_each(|(path, bytes)| {
            staged.push(stage(path, bytes, &mut known)?);
            Ok(())
        })
    };
    match result {
        Ok(()) => Ok(staged),
        Err(e) => {
            for s in &staged {
                let (Staged::InPlace(p) | Staged::Tmp(p, _)) = s;
                let _ = fs::remove_file(p);
            }
            Err(e)
        }
    }
}

fn stage_pipelined(files: &[(PathBuf, &[u8])], staged: &mut Vec<Staged>) -> Result<()> {
    // Each file's directory, numbered by first appearance.
    let mut dirs: Vec<&Path> = Vec::new();
    let mut index: std::collections::HashMap<&Path, usize> = Default::default();
    let mut dir_of = Vec::with_capacity(files.len());
    for (path, _) in files {
        let parent = path.parent().ok_or_else(|| {
            JournalError::io(path.display(), std::io::Error::other("no parent directory"))
        })?;
        let i = *index.entry(parent).or_insert_with(|| {
            dirs.push(parent);
            dirs.len() - 1
        });
        dir_of.push(i);
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (tx, rx) = std::sync::mpsc::channel::<Result<bool>>();
    std::thread::scope(|s| {
        let dirs = &dirs;
        let stop = &stop;
        let maker = std::thread::Builder::new()
            .name("journal-mkdir".into())
            .spawn_scoped(s, move || {
                for dir in dirs {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let made = ensure_dir(dir, &mut None);
                    let failed = made.is_err();
                    if tx.send(made).is_err() || failed {
                        return;
                    }
                }
            });
        let mut made: Vec<bool> = Vec::with_capacity(dirs.len());
        let result = (|| {
            for ((path, bytes), &d) in files.iter().zip(&dir_of) {
                while made.len() <= d {
                    let next = match &maker {
                        Ok(_) => rx.recv().unwrap_or_else(|_| {
                            let e = std::io::Error::other("directory thread ended early");
                            Err(JournalError::io(dirs[made.len()].display(), e))
                        }),
                        // No thread to be had: make it here.
                        Err(_) => ensure_dir(dirs[made.len()], &mut None),
                    };
                    made.push(next?);
                }
                // The directory exists now; whether this batch made it decides the path.
                let mut known = Some((dirs[d].to_path_buf(), made[d]));
                staged.push(stage(path, bytes, &mut known)?);
            }
            Ok(())
        })();
        stop.store(true, Ordering::Relaxed);
        result
    })
}

fn discard_tmps(staged: &[Staged]) {
    for s in staged {
        if let Staged::Tmp(tmp, _) = s {
            let _ = fs::remove_file(tmp);
        }
    }
}

/// Renames every staged temp file over its path; returns how many there were.
fn rename_all(staged: &[Staged]) -> Result<usize> {
    let mut n = 0;
    for s in staged {
        if let Staged::Tmp(tmp, path) = s {
            fs::rename(tmp, path).map_err(|e| JournalError::io(path.display(), e))?;
            n += 1;
        }
    }
    Ok(n)
}

/// Renames the staged temp files whose path does not exist yet (`RENAME_NOREPLACE`); returns
/// the others, untouched.
fn rename_new(staged: &[Staged]) -> Result<Vec<(&Path, &Path)>> {
    let mut left = Vec::new();
    for s in staged {
        let Staged::Tmp(tmp, path) = s else { continue };
        let cwd = rustix::fs::CWD;
        match rustix::fs::renameat_with(cwd, tmp, cwd, path, rustix::fs::RenameFlags::NOREPLACE) {
            Ok(()) => {}
            // It exists (or this filesystem cannot tell): replace it durably.
            Err(rustix::io::Errno::EXIST | rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
                left.push((tmp.as_path(), path.as_path()))
            }
            Err(e) => return Err(JournalError::io(path.display(), e.into())),
        }
    }
    Ok(left)
}

/// Writes several files durably: in place in new directories, through temp files elsewhere; one
/// `syncfs` makes all of them durable, then the temp files are renamed into place (a crash
/// leaves whole files or none) and a second `syncfs` makes the renames durable. A single file
/// in an existing directory uses the per-file fsync path.
pub(super) fn write_all_atomic(files: &[(PathBuf, &[u8])]) -> Result<()> {
    if let [(path, bytes)] = files
        && path.parent().is_some_and(Path::is_dir)
    {
        return write_atomic(path, bytes);
    }
    let Some((first, _)) = files.first() else {
        return Ok(());
    };
    let staged = stage_all(files)?;
    let done = (|| {
        syncfs(first)?;
        if rename_all(&staged)? > 0 {
            syncfs(first)?;
        }
        Ok(())
    })();
    if done.is_err() {
        discard_tmps(&staged);
    }
    done
}

/// Writes run files that events committed next will refer to, leaving their durability to that
/// commit ([`write_events`]). New files are not synced here at all: nothing refers to them until
/// the commit, which syncs the filesystem before its events become visible. A file that replaces
/// an existing one is made durable before the rename (a file an event may already refer to is
/// never torn), as in [`write_all_atomic`].
pub(super) fn write_for_commit(
    rt: &Shared,
    run_dir: &Path,
    files: &[(PathBuf, &[u8])],
    log: bool,
) -> Result<()> {
    if files.is_empty() {
        return Ok(());
    }
    let contents = log.then(|| {
        files
            .iter()
            .map(|(p, b)| (p.clone(), std::sync::Arc::<[u8]>::from(*b)))
            .collect()
    });
    let staged = match stage_all(files) {
        Ok(staged) => staged,
        Err(e) => {
            // Whatever was written, even on error, is not known to be durable.
            rt.writes.deferred.note(run_dir, None);
            return Err(e);
        }
    };
    place_for_commit(rt, run_dir, &staged, contents)
}

/// Puts staged files where they go — new ones by name, existing ones replaced durably — and
/// notes them for the run's next commit to make durable ([`write_for_commit`]), with their
/// bytes when the run's commits go through its commit log (which then carries them).
fn place_for_commit(
    rt: &Shared,
    run_dir: &Path,
    staged: &[Staged],
    contents: Option<Contents>,
) -> Result<()> {
    let done = (|| {
        let replacing = rename_new(staged)?;
        if let Some((tmp, _)) = replacing.first() {
            syncfs(tmp)?;
            for (tmp, path) in &replacing {
                fs::rename(tmp, path).map_err(|e| JournalError::io(path.display(), e))?;
            }
        }
        Ok(())
    })();
    if done.is_err() {
        discard_tmps(staged);
    }
    let placed = staged
        .iter()
        .map(|s| {
            let (Staged::InPlace(path) | Staged::Tmp(_, path)) = s;
            path.as_path()
        })
        .collect();
    match &done {
        Ok(()) => rt
            .writes
            .deferred
            .note_with(run_dir, Some(placed), contents),
        Err(_) => rt.writes.deferred.note(run_dir, None),
    }
    done
}

/// Files' paths and bytes, for a commit log.
pub(super) type Contents = Vec<(PathBuf, std::sync::Arc<[u8]>)>;

/// [`write_for_commit`], on a thread of its own for a large batch; its outcome is reported by
/// the next [`join_background`] of `run_dir` (the commit's, at the latest).
pub(super) fn write_for_commit_background(
    rt: &Arc<Shared>,
    run_dir: PathBuf,
    files: Vec<(PathBuf, bytes::Bytes)>,
    log: bool,
) -> Result<()> {
    join_background(rt, &run_dir)?;
    if files.len() < PARALLEL_MIN {
        return write_for_commit(rt, &run_dir, &borrowed(&files), log);
    }
    let files = Arc::new(files);
    let (shared, dir, batch) = (rt.clone(), run_dir.clone(), files.clone());
    match std::thread::Builder::new()
        .name("journal-files".into())
        .spawn(move || write_for_commit(&shared, &dir, &borrowed(&batch), log))
    {
        Ok(handle) => {
            rt.writes
                .background
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push((run_dir, handle));
            Ok(())
        }
        // No thread to be had: write them here.
        Err(_) => write_for_commit(rt, &run_dir, &borrowed(&files), log),
    }
}

fn borrowed(files: &[(PathBuf, bytes::Bytes)]) -> Vec<(PathBuf, &[u8])> {
    files.iter().map(|(p, b)| (p.clone(), b.as_ref())).collect()
}

/// Waits for the background writes of `run_dir`'s files; the first error among them.
pub(super) fn join_background(rt: &Shared, run_dir: &Path) -> Result<()> {
    let mine: Vec<std::thread::JoinHandle<Result<()>>> = {
        let mut all = rt
            .writes
            .background
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if all.is_empty() {
            return Ok(());
        }
        let (mine, others) = std::mem::take(&mut *all)
            .into_iter()
            .partition(|(dir, _)| dir == run_dir);
        *all = others;
        mine.into_iter().map(|(_, h)| h).collect()
    };
    let mut result = Ok(());
    for handle in mine {
        let outcome = handle.join().unwrap_or_else(|_| {
            let e = std::io::Error::other("file writer thread panicked");
            Err(JournalError::io(run_dir.display(), e))
        });
        if result.is_ok() {
            result = outcome;
        }
    }
    result
}

/// Commits journal event files (`files`, all in `journal_dir`, names not yet taken). No event is
/// visible before the files it refers to (`run_dir`'s deferred [`write_for_commit`] files) are
/// durable; a crash leaves a committed prefix of whole events.
///
/// With `commit_log`, every batch commits through the run's commit log
/// ([`write_events_logged`]). Otherwise a small commit — a few events, a few deferred files —
/// is made durable one file at a time: the deferred files and their directories, then each
/// event through a durable temp file renamed into place, then the journal directory. A large
/// one stages its events (anonymous or temp files), makes them and the deferred files durable
/// with one `syncfs`, then names them in order and syncs the names.
///
/// `run_dir`'s background writes ([`write_for_commit_background`]) are joined after the events
/// are staged and before the sync; if one failed, no event is named.
pub(super) fn write_events(
    rt: &Arc<Shared>,
    run_dir: &Path,
    journal_dir: &Path,
    files: &[(PathBuf, &[u8])],
    commit_log: bool,
) -> Result<()> {
    if commit_log {
        return write_events_logged(rt, run_dir, journal_dir, files);
    }
    let background = rt
        .writes
        .background
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .any(|(dir, _)| dir == run_dir);
    let deferred = &rt.writes.deferred;
    let pending = deferred.of(run_dir);
    if !background && files.len() <= PER_FILE_EVENTS && pending.as_ref().is_none_or(|d| !d.many) {
        if let Some(d) = &pending {
            deferred::sync_each(d)?;
        }
        for (path, bytes) in files {
            write_atomic(path, bytes)?;
        }
        fsync_dir(journal_dir)?;
        if let Some(d) = pending {
            deferred.settle(run_dir, d.generation);
        }
        return Ok(());
    }
    if let Some(anonymous) = stage_anonymous(journal_dir, files)? {
        join_background(rt, run_dir)?;
        // Data and inodes durable (with the deferred files) before any event has a name; then
        // the names, in order; then one more sync for the names and link counts, also when a
        // link failed part way (the events linked so far are committed: a prefix).
        sync_with_deferred(rt, run_dir, journal_dir)?;
        let linked = files
            .iter()
            .enumerate()
            .try_for_each(|(i, (path, _))| anonymous.link(&rt.writes.links, i, path));
        let synced = syncfs(journal_dir);
        return linked.and(synced);
    }
    let staged = stage_all(files)?;
    let done = (|| {
        join_background(rt, run_dir)?;
        sync_with_deferred(rt, run_dir, journal_dir)?;
        rename_all(&staged)?;
        fsync_dir(journal_dir)
    })();
    if done.is_err() {
        discard_tmps(&staged);
    }
    done
}

/// A batch committed through the run's commit log ([`commit_log`]): the events staged unnamed
/// (anonymous files for a large batch, temp files otherwise, none of them synced), one record —
/// the events and the files they refer to, when their bytes are known (else those are made
/// durable first, as for any batch) — appended to the log and synced (the commit point; for a
/// large batch on a thread of its own while the events are staged), then the events named in
/// order; their own durability follows in the background.
fn write_events_logged(
    rt: &Arc<Shared>,
    run_dir: &Path,
    journal_dir: &Path,
    files: &[(PathBuf, &[u8])],
) -> Result<()> {
    join_background(rt, run_dir)?;
    let deferred = &rt.writes.deferred;
    let pending = deferred.of(run_dir);
    let carried = match pending.as_ref().map(|d| (d, &d.contents)) {
        Some((d, Some(contents)))
            if contents.len() <= commit_log::MAX_CARRIED
                && contents
                    .iter()
                    .all(|(p, _)| commit_log::loggable(run_dir, p)) =>
        {
            Some((d.generation, contents))
        }
        Some((d, _)) => {
            if d.many {
                sync_with_deferred(rt, run_dir, journal_dir)?;
            } else {
                deferred::sync_each(d)?;
                deferred.settle(run_dir, d.generation);
            }
            None
        }
        None => None,
    };
    let mut logged: Vec<(&Path, &[u8])> = files.iter().map(|(p, b)| (p.as_path(), *b)).collect();
    if let Some((_, contents)) = carried {
        logged.extend(contents.iter().map(|(p, b)| (p.as_path(), &b[..])));
    }
    let _guard = rt.settle.guard();
    // The record does not need the staged files (it holds their bytes): a large batch appends
    // and syncs it on a thread of its own while the events are staged (the sync is mostly a
    // wait for the disk). A small batch does both here, the record first.
    let (record, staging) = if files.len() >= PARALLEL_MIN {
        beside(
            "journal-log",
            run_dir,
            || commit_log::append(rt, run_dir, &logged),
            || stage_events(journal_dir, files),
        )
    } else {
        let record = commit_log::append(rt, run_dir, &logged);
        let staging = match record {
            Ok(_) => stage_events(journal_dir, files),
            Err(_) => Ok((None, Vec::new())),
        };
        (record, staging)
    };
    let (record, anonymous, staged) = match (record, staging) {
        (Ok(record), Ok((anonymous, staged))) => (record, anonymous, staged),
        (Ok(record), Err(e)) => {
            // Logged but not staged: the log must not complete it later.
            commit_log::void(rt, run_dir, record)?;
            return Err(e);
        }
        (Err(e), staging) => {
            if let Ok((_, staged)) = staging {
                discard_tmps(&staged);
            }
            return Err(e);
        }
    };
    if let Some((generation, _)) = carried {
        deferred.settle(run_dir, generation);
    }
    let named = match &anonymous {
        Some(anonymous) => files
            .iter()
            .enumerate()
            .try_for_each(|(i, (path, _))| anonymous.link(&rt.writes.links, i, path)),
        None => rename_each_new(&staged),
    };
    if let Err(e) = named {
        // Not named whole: the log must not complete it later; the events named so far are
        // committed (a prefix), as without a log.
        discard_tmps(&staged);
        commit_log::void(rt, run_dir, record)?;
        syncfs(journal_dir)?;
        return Err(e);
    }
    commit_log::committed(rt, run_dir, journal_dir, record);
    Ok(())
}

/// A commit log batch's events, staged unnamed and not synced: anonymous files for a large
/// batch where the system can, temp files beside their names otherwise.
fn stage_events(
    journal_dir: &Path,
    files: &[(PathBuf, &[u8])],
) -> Result<(Option<Anonymous>, Vec<Staged>)> {
    match stage_anonymous(journal_dir, files)? {
        Some(a) => Ok((Some(a), Vec::new())),
        None => Ok((None, stage_unnamed(files)?)),
    }
}

/// Runs `other` on a thread of its own named `name` while this thread runs `here`; both
/// results. When no thread can be had, `other` runs here after `here`; a panic on its thread is
/// an I/O error at `at`.
pub(super) fn beside<A, B, F>(
    name: &str,
    at: &Path,
    other: F,
    here: impl FnOnce() -> B,
) -> (Result<A>, B)
where
    A: Send,
    F: FnOnce() -> Result<A> + Send,
{
    // Taken by whichever thread runs it: a failed spawn leaves it here.
    let slot = Mutex::new(Some(other));
    let run = || {
        let f = slot.lock().unwrap_or_else(|p| p.into_inner()).take();
        f.map(|f| f())
    };
    std::thread::scope(|s| {
        let spawned = std::thread::Builder::new()
            .name(name.into())
            .spawn_scoped(s, run);
        let mine = here();
        let theirs = spawned
            .ok()
            .and_then(|h| h.join().ok())
            .flatten()
            .or_else(run)
            .unwrap_or_else(|| {
                let e = std::io::Error::other(format!("thread {name} panicked"));
                Err(JournalError::io(at.display(), e))
            });
        (theirs, mine)
    })
}

/// Writes each file to a temp file beside it (not synced): staged for a commit log's batch.
fn stage_unnamed(files: &[(PathBuf, &[u8])]) -> Result<Vec<Staged>> {
    let mut staged = Vec::with_capacity(files.len());
    for (path, bytes) in files {
        let tmp = tmp_path(path);
        let written = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .and_then(|mut f| f.write_all(bytes));
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            discard_tmps(&staged);
            return Err(JournalError::io(path.display(), e));
        }
        staged.push(Staged::Tmp(tmp, path.clone()));
    }
    Ok(staged)
}

/// Renames each staged temp file to its path, in order, failing on a name that is taken.
fn rename_each_new(staged: &[Staged]) -> Result<()> {
    for s in staged {
        let Staged::Tmp(tmp, path) = s else { continue };
        let cwd = rustix::fs::CWD;
        match rustix::fs::renameat_with(cwd, tmp, cwd, path, rustix::fs::RenameFlags::NOREPLACE) {
            Ok(()) => {}
            // This filesystem cannot refuse to replace: a link can.
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
                fs::hard_link(tmp, path).map_err(|e| JournalError::io(path.display(), e))?;
                let _ = fs::remove_file(tmp);
            }
            Err(e) => return Err(JournalError::io(path.display(), e.into())),
        }
    }
    Ok(())
}

/// One `syncfs` of `dir`'s filesystem, settling `run_dir`'s deferred writes noted before it.
fn sync_with_deferred(rt: &Shared, run_dir: &Path, dir: &Path) -> Result<()> {
    let pending = rt.writes.deferred.of(run_dir);
    syncfs(dir)?;
    if let Some(d) = pending {
        rt.writes.deferred.settle(run_dir, d.generation);
    }
    Ok(())
}

mod anonymous;
pub(super) mod commit_log;
mod deferred;
mod streamed;
pub(super) use streamed::StreamedFiles;

/// Events up to which a commit with few deferred files ([`deferred::PER_FILE_MAX`]) writes them
/// one by one (durable temp file, rename) instead of staging them for one `syncfs`.
const PER_FILE_EVENTS: usize = 4;

#[cfg(test)]
mod tests;
