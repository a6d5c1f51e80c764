//! The commit log: one sequential, durable write that commits a large batch of events.
//!
//! Why: a fan-out's `run:iterate` commits hundreds of events, one file each (babysitter's
//! layout). Committed the way a small batch is — every event's data made durable before any
//! event has a name, then the names — that takes two `syncfs`, and the first writes hundreds
//! of scattered blocks: about 10 ms on a small VM, the largest part of such a call. A long-lived
//! process ([`super::super::FsStore::commit_log`]: the warm server) instead writes the batch's
//! event files into one file, `state/commit.log`, and `fdatasync`s it — that is the commit
//! point — then names the event files without waiting for their blocks; a background `syncfs`
//! makes them durable and marks the log settled. It is a write-ahead log in front of
//! babysitter's journal files, as databases keep one in front of their data files.
//!
//! After a machine crash a live log's events may be missing from `journal/`, or empty there.
//! Every reader and writer of the run ([`recover`], from the listing and the commit) first
//! compares them with the log and restores what differs, under the run's lock: no committed
//! event is lost, none appears twice. Until one of ours has opened the run, babysitter's own
//! CLI would see the journal without (some of) that commit's events — only after a machine
//! crash: a killed process loses nothing, its writes are in the page cache. A log whose
//! checksum fails was torn while it was written, before it was a commit point (no event of it
//! had a name yet), and is ignored.
//!
//! A log is overwritten only once it is settled (its events durable in `journal/`): the next
//! large commit waits for this process's settling, or settles another process's log with a
//! `syncfs` of its own. A batch that fails to be named whole voids its log (durably) before
//! the error is returned, so a later recovery cannot complete what the caller was told failed.
//!
//! Format (ours; babysitter never reads it): a 64-byte header — magic `BSCLOG01`, a state byte
//! (1 live, 0 settled or void), the entry count (u32) and body length (u64), little-endian, and
//! the SHA-256 of the count, the length and the body — then per event its file name (u16
//! length) and bytes (u32 length). The file keeps the largest size it had; the header's length
//! says where the body ends.

use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::mpsc;

use sha2::{Digest as _, Sha256};

use super::{fsync_dir, syncfs, write_atomic};
use crate::error::{JournalError, Result};

const MAGIC: &[u8; 8] = b"BSCLOG01";
const HEADER: usize = 64;
const STATE_AT: u64 = 8;
const LIVE: u8 = 1;
const SETTLED: u8 = 0;

/// The run's commit log.
pub(in crate::fs) fn path(run_dir: &Path) -> PathBuf {
    run_dir.join("state").join("commit.log")
}

type Digest = [u8; 32];

/// A log's entries: run-relative file names and their bytes.
type Entries = Vec<(String, Vec<u8>)>;

/// Deferred files (a fan-out's `task.json`s) a log carries at most; past that they are synced.
pub(super) const MAX_CARRIED: usize = 4096;

/// Logs this process wrote whose events it named, all of them, by run directory: a reader here
/// has nothing to compare while their settling runs.
static COMPLETE: Mutex<Vec<(PathBuf, Digest)>> = Mutex::new(Vec::new());

/// This process's settling threads, by run directory, and how to tell one to start at once.
#[allow(clippy::type_complexity)] // a registry, read in two places
static SETTLING: Mutex<Vec<(PathBuf, std::thread::JoinHandle<()>, mpsc::Sender<()>)>> =
    Mutex::new(Vec::new());

/// How long a settling waits before its `syncfs`: the sync's writeback holds up the
/// filesystem's metadata journal, and the command that committed is still answering (it
/// unlinks its lock file, writes its state cache). A commit that needs the log sooner, or the
/// process's exit, starts it at once.
const SETTLE_DELAY: std::time::Duration = std::time::Duration::from_millis(100);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> JournalError + '_ {
    move |e| JournalError::io(path.display(), e)
}

fn digest_of(count: u32, body: &[u8]) -> Digest {
    let mut h = Sha256::new();
    h.update(count.to_le_bytes());
    h.update((body.len() as u64).to_le_bytes());
    h.update(body);
    h.finalize().into()
}

/// The header and body for `files` (in `run_dir`: event files and the files they refer to).
fn encode(run_dir: &Path, files: &[(&Path, &[u8])]) -> Result<(Vec<u8>, Digest)> {
    let size: usize = files
        .iter()
        .map(|(p, b)| p.as_os_str().len() + b.len() + 6)
        .sum();
    let mut buf = vec![0u8; HEADER];
    buf.reserve(size);
    for (path, bytes) in files {
        let name = path
            .strip_prefix(run_dir)
            .ok()
            .and_then(|n| n.to_str())
            .filter(|n| n.len() <= usize::from(u16::MAX) && valid_name(n))
            .ok_or_else(|| JournalError::io(path.display(), ErrorKind::InvalidInput.into()))?;
        let len = u32::try_from(bytes.len())
            .map_err(|_| JournalError::io(path.display(), ErrorKind::FileTooLarge.into()))?;
        buf.extend_from_slice(&(name.len() as u16).to_le_bytes());
        buf.extend_from_slice(name.as_bytes());
        buf.extend_from_slice(&len.to_le_bytes());
        buf.extend_from_slice(bytes);
    }
    let count = u32::try_from(files.len())
        .map_err(|_| JournalError::io("commit log", ErrorKind::InvalidInput.into()))?;
    let body_len = (buf.len() - HEADER) as u64;
    let digest = digest_of(count, &buf[HEADER..]);
    buf[..8].copy_from_slice(MAGIC);
    buf[STATE_AT as usize] = LIVE;
    buf[16..20].copy_from_slice(&count.to_le_bytes());
    buf[24..32].copy_from_slice(&body_len.to_le_bytes());
    buf[32..64].copy_from_slice(&digest);
    Ok((buf, digest))
}

/// A live log, read back whole: `None` when there is none, it is settled, or it is torn.
fn read_live(run_dir: &Path) -> Result<Option<(Digest, Entries)>> {
    let p = path(run_dir);
    let f = match File::open(&p) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&p)(e)),
    };
    let mut header = [0u8; HEADER];
    match f.read_exact_at(&mut header, 0) {
        Ok(()) => {}
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(io(&p)(e)),
    }
    if &header[..8] != MAGIC || header[STATE_AT as usize] != LIVE {
        return Ok(None);
    }
    let le4 =
        |r: std::ops::Range<usize>| u32::from_le_bytes(header[r].try_into().unwrap_or([0; 4]));
    let count = le4(16..20);
    let body_len = u64::from_le_bytes(header[24..32].try_into().unwrap_or([0; 8]));
    let file_len = f.metadata().map_err(io(&p))?.len();
    if body_len > file_len.saturating_sub(HEADER as u64) {
        return Ok(None); // torn: the body never reached the disk whole
    }
    let mut body = vec![0u8; body_len as usize];
    f.read_exact_at(&mut body, HEADER as u64).map_err(io(&p))?;
    let digest = digest_of(count, &body);
    if digest[..] != header[32..64] {
        return Ok(None);
    }
    let mut entries = Vec::with_capacity(count as usize);
    let mut rest = body.as_slice();
    let run_id = run_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let bad = || JournalError::Corrupt {
        at: crate::error::Location::object(run_id, "state/commit.log"),
        reason: "commit log entries do not match its header".into(),
    };
    for _ in 0..count {
        let (n, r) = rest.split_at_checked(2).ok_or_else(bad)?;
        let n = usize::from(u16::from_le_bytes([n[0], n[1]]));
        let (name, r) = r.split_at_checked(n).ok_or_else(bad)?;
        let (len, r) = r.split_at_checked(4).ok_or_else(bad)?;
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let (bytes, r) = r.split_at_checked(len).ok_or_else(bad)?;
        let name = std::str::from_utf8(name).map_err(|_| bad())?;
        if !valid_name(name) {
            return Err(bad());
        }
        entries.push((name.to_owned(), bytes.to_vec()));
        rest = r;
    }
    Ok(Some((digest, entries)))
}

/// Whether the log can carry `path` (see [`valid_name`]); other deferred files are synced.
pub(super) fn loggable(run_dir: &Path, path: &Path) -> bool {
    path.strip_prefix(run_dir)
        .ok()
        .and_then(|n| n.to_str())
        .is_some_and(valid_name)
}

/// A log names only `journal/<file>` and `tasks/<effect>/<file>` (relative, plain segments):
/// a damaged or foreign log can never make recovery write anywhere else.
fn valid_name(name: &str) -> bool {
    let parts: Vec<&str> = name.split('/').collect();
    let plain = |s: &&str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    };
    parts.iter().all(plain) && matches!(parts.as_slice(), ["journal", _] | ["tasks", _, _])
}

fn set_state(run_dir: &Path, state: u8, durable: bool) -> Result<()> {
    let p = path(run_dir);
    let f = match OpenOptions::new().write(true).open(&p) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(io(&p)(e)),
    };
    f.write_all_at(&[state], STATE_AT).map_err(io(&p))?;
    if durable {
        f.sync_data().map_err(io(&p))?;
    }
    Ok(())
}

/// Writes `files` (the batch's event files in `journal/`) as the run's live log and makes it
/// durable: the batch's commit point. The run's previous log must be settled
/// ([`settle_previous`]).
pub(super) fn write(run_dir: &Path, files: &[(&Path, &[u8])]) -> Result<Digest> {
    let (buf, digest) = encode(run_dir, files)?;
    let p = path(run_dir);
    let state = run_dir.join("state");
    let (f, new) = match OpenOptions::new().write(true).create_new(true).open(&p) {
        Ok(f) => (f, true),
        Err(e) if e.kind() == ErrorKind::AlreadyExists => (
            OpenOptions::new().write(true).open(&p).map_err(io(&p))?,
            false,
        ),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            fs::create_dir_all(&state).map_err(io(&state))?;
            fsync_dir(run_dir)?;
            let f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(&p)
                .map_err(io(&p))?;
            (f, true)
        }
        Err(e) => return Err(io(&p)(e)),
    };
    f.write_all_at(&buf, 0).map_err(io(&p))?;
    f.sync_data().map_err(io(&p))?;
    if new {
        fsync_dir(&state)?;
    }
    Ok(digest)
}

/// The batch of log `digest` is named whole: readers here need not compare it, and a thread
/// makes its events durable (`syncfs`) and then marks the log settled (under the run's lock,
/// if it is still this log).
pub(super) fn settle_later(run_dir: &Path, journal_dir: &Path, digest: Digest) {
    {
        let mut complete = lock(&COMPLETE);
        complete.retain(|(d, _)| d != run_dir);
        complete.push((run_dir.to_path_buf(), digest));
    }
    let (dir, journal) = (run_dir.to_path_buf(), journal_dir.to_path_buf());
    let (now, wait) = mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("journal-settle".into())
        .spawn(move || {
            let _ = wait.recv_timeout(SETTLE_DELAY);
            if syncfs(&journal).is_err() {
                return; // stays live: a later commit syncs again, readers compare
            }
            let run_id = dir
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_owned();
            // One try: a writer holding the run now (possibly waiting for this very thread)
            // settles the log itself before it writes the next one; readers compare meanwhile.
            if let Ok(_lock) = super::super::lock_run(&run_id, &dir, 1)
                && matches!(read_live(&dir), Ok(Some((d, _))) if d == digest)
                && set_state(&dir, SETTLED, false).is_ok()
            {
                lock(&COMPLETE).retain(|(d, g)| !(*d == dir && *g == digest));
            }
        });
    if let Ok(handle) = spawned {
        let mut all = lock(&SETTLING);
        // Settlings that ended are forgotten here (a long-lived process commits many runs).
        all.retain(|(_, h, _)| !h.is_finished());
        all.push((run_dir.to_path_buf(), handle, now));
    }
}

/// Starts this process's settling of `run_dir` (of every run: `None`) at once and waits for it.
fn join_settling(run_dir: Option<&Path>) {
    let mine: Vec<_> = {
        let mut all = lock(&SETTLING);
        if all.is_empty() {
            return;
        }
        let (mine, others) = std::mem::take(&mut *all)
            .into_iter()
            .partition(|(dir, _, _)| run_dir.is_none_or(|r| dir == r));
        *all = others;
        mine
    };
    for (_, handle, now) in mine {
        let _ = now.send(());
        let _ = handle.join();
    }
}

/// Waits for every settling this process started (before it exits).
pub fn settle_all() {
    join_settling(None);
}

/// Before a new log is written over the run's last one: this process's settling of it is
/// waited for, and a log still live after that (another process's, or one whose sync failed)
/// is settled here with a `syncfs` of its own. The caller holds the run's lock and has run
/// [`recover`].
pub(super) fn settle_previous(run_dir: &Path, journal_dir: &Path) -> Result<()> {
    join_settling(Some(run_dir));
    if read_live(run_dir)?.is_some() {
        syncfs(journal_dir)?;
        set_state(run_dir, SETTLED, false)?;
    }
    Ok(())
}

/// The batch of the live log was not named whole: the log must never complete it. Durable.
pub(super) fn void(run_dir: &Path) -> Result<()> {
    lock(&COMPLETE).retain(|(d, _)| d != run_dir);
    set_state(run_dir, SETTLED, true)
}

/// Whether every entry is in `run_dir` with the log's bytes.
fn all_present(run_dir: &Path, entries: &[(String, Vec<u8>)]) -> Result<bool> {
    for (name, bytes) in entries {
        let p = run_dir.join(name);
        match fs::read(&p) {
            Ok(found) if found == *bytes => {}
            Ok(_) => return Ok(false),
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(io(&p)(e)),
        }
    }
    Ok(true)
}

/// Makes sure a live log's events are all in `journal/` with its bytes, restoring what a
/// machine crash lost (then the log is settled). Without `locked`, the run's lock is taken
/// only when something must be restored (and everything compared again under it: a writer
/// may have been naming the batch).
pub(in crate::fs) fn recover(
    run_id: &str,
    run_dir: &Path,
    locked: bool,
    attempts: u32,
) -> Result<()> {
    let Some((digest, entries)) = read_live(run_dir)? else {
        return Ok(());
    };
    if lock(&COMPLETE)
        .iter()
        .any(|(d, g)| d == run_dir && *g == digest)
    {
        return Ok(());
    }
    if all_present(run_dir, &entries)? {
        return Ok(());
    }
    if !locked {
        let _lock = super::super::lock_run(run_id, run_dir, attempts)?;
        return recover(run_id, run_dir, true, attempts);
    }
    // Task files first, then the events that refer to them; each directory whose entries
    // changed is synced.
    let mut dirs = std::collections::BTreeSet::new();
    let (tasks, events): (Vec<_>, Vec<_>) =
        entries.iter().partition(|(n, _)| n.starts_with("tasks/"));
    for (name, bytes) in tasks.into_iter().chain(events) {
        let p = run_dir.join(name);
        let restore = match fs::read(&p) {
            Ok(found) => found != *bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => true,
            Err(e) => return Err(io(&p)(e)),
        };
        if restore {
            let mut dir = p.parent();
            while let Some(d) = dir.filter(|d| d.starts_with(run_dir)) {
                dirs.insert(d.to_path_buf());
                dir = d.parent();
            }
            if let Some(parent) = p.parent() {
                fs::create_dir_all(parent).map_err(io(parent))?;
            }
            write_atomic(&p, bytes)?;
        }
    }
    for d in dirs.iter().rev() {
        fsync_dir(d)?;
    }
    syncfs(run_dir)?;
    set_state(run_dir, SETTLED, false)?;
    super::super::forget_listing(run_dir);
    tracing::warn!(
        run_id,
        events = entries.len(),
        "restored the events of the last commit from the commit log (a machine crash had lost them)"
    );
    Ok(())
}

/// Forgets this process's note of `run_dir`'s log (its journal is being replaced).
pub(in crate::fs) fn forget(run_dir: &Path) {
    join_settling(Some(run_dir));
    lock(&COMPLETE).retain(|(d, _)| d != run_dir);
}

/// Voids the run's log durably before its journal is replaced (its events' sequence numbers
/// would name other events after).
pub(in crate::fs) fn discard(run_dir: &Path) -> Result<()> {
    forget(run_dir);
    set_state(run_dir, SETTLED, true)
}

#[cfg(test)]
mod tests;
