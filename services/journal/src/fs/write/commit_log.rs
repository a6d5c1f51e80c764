//! The commit log: one sequential, durable write commits a batch of events.
//!
//! Why: babysitter's layout keeps one file per event, and a commit made durable file by file
//! costs an `fsync` per event file, per task file it refers to and per directory whose entries
//! changed — six or seven for a `task:post` or a sequential `run:iterate` (~3 ms on a small
//! VM, the largest part of such a call), and for a fan-out's hundreds of files two `syncfs`,
//! the first writing hundreds of scattered blocks (~10 ms). A long-lived process
//! ([`super::super::FsStore::commit_log`]: the warm server) instead appends the batch — its
//! event files and the files they refer to (task files, a completed run's output) — to one
//! file, `state/commit.log`, as one checksummed record and `fdatasync`s it: that is the commit
//! point. The event files are then named without waiting for their blocks; a background
//! `syncfs` ([`settle`], run by the store's `FsRuntime`) makes them durable and marks the log
//! settled up to there. It is a write-ahead log in front of babysitter's journal files, as
//! databases keep one in front of their data files.
//!
//! After a machine crash a live record's files may be missing, or empty or cut short. Every
//! reader and writer of the run ([`recover`], from the listing and the commit) first compares
//! them with the log and restores what a crash took, under the run's lock: no committed event
//! is lost, none appears twice. A file whose bytes differ otherwise was written since by
//! another writer and is left alone. Until one of ours has opened the run, babysitter's own CLI
//! would see the journal without (some of) the last commits' events — only after a machine
//! crash: a killed process loses nothing, its writes are in the page cache. A record whose
//! checksum fails was torn while it was written, before it was a commit point (none of its
//! events had a name yet): reading stops there.
//!
//! A batch that fails to be named whole voids its record (durably) before the error is
//! returned, so a later recovery cannot complete what the caller was told failed. Once every
//! record is settled the log is emptied (a new epoch), so it stays small.
//!
//! Format (ours; babysitter never reads it): a 64-byte header — magic `BSCLOG02`, the epoch
//! (u64) and the offset up to which records are settled (u64), little-endian — then records,
//! each a 64-byte header — state byte (1 live, 2 void), `BSCR`, the epoch, the entry count
//! (u32), the body length (u64) and the SHA-256 of epoch, count, length and body (the state
//! byte is outside it) — and a body of entries: a run-relative file name (u16 length) and its
//! bytes (u32 length). A record of another epoch (left from before the log was emptied) ends
//! the log. The first version (`BSCLOG01`: one batch, overwritten) is still read.

use std::fs::{self, File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::{fsync_dir, syncfs, write_atomic};
use crate::error::{JournalError, Result};
use crate::fs::runtime::Shared;

mod settle;
pub(in crate::fs) use settle::Settling;
pub(super) use settle::committed;

const MAGIC: &[u8; 8] = b"BSCLOG02";
const MAGIC_V1: &[u8; 8] = b"BSCLOG01";
const HEADER: u64 = 64;
const RECORD_HEADER: usize = 64;
const RECORD_MAGIC: &[u8; 4] = b"BSCR";
const LIVE: u8 = 1;
const VOID: u8 = 2;

/// The run's commit log.
pub(in crate::fs) fn path(run_dir: &Path) -> PathBuf {
    run_dir.join("state").join("commit.log")
}

/// A log's entries: run-relative file names and their bytes.
type Entries = Vec<(String, Vec<u8>)>;

/// Deferred files (a fan-out's `task.json`s) a record carries at most; past that they are
/// synced.
pub(super) const MAX_CARRIED: usize = 4096;

fn io(path: &Path) -> impl Fn(std::io::Error) -> JournalError + '_ {
    move |e| JournalError::io(path.display(), e)
}

fn le8(b: &[u8]) -> u64 {
    u64::from_le_bytes(b.get(..8).and_then(|s| s.try_into().ok()).unwrap_or([0; 8]))
}

fn le4(b: &[u8]) -> u32 {
    u32::from_le_bytes(b.get(..4).and_then(|s| s.try_into().ok()).unwrap_or([0; 4]))
}

fn digest_of(epoch: Option<u64>, count: u32, body: &[u8]) -> [u8; 32] {
    let mut h = Sha256::new();
    if let Some(e) = epoch {
        h.update(e.to_le_bytes());
    }
    h.update(count.to_le_bytes());
    h.update((body.len() as u64).to_le_bytes());
    h.update(body);
    h.finalize().into()
}

/// A log's header: its epoch and how far its records are settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Header {
    epoch: u64,
    settled_to: u64,
}

impl Header {
    fn bytes(self) -> [u8; HEADER as usize] {
        let mut b = [0u8; HEADER as usize];
        b[..8].copy_from_slice(MAGIC);
        b[8..16].copy_from_slice(&self.epoch.to_le_bytes());
        b[16..24].copy_from_slice(&self.settled_to.to_le_bytes());
        b
    }
}

/// What the first 64 bytes of a log say.
enum Kind {
    /// No log, or nothing in it that could be live.
    None,
    Current(Header),
    /// A first-version log, live.
    V1,
}

fn kind(header: &[u8; HEADER as usize]) -> Kind {
    if &header[..8] == MAGIC {
        Kind::Current(Header {
            epoch: le8(&header[8..]),
            settled_to: le8(&header[16..]),
        })
    } else if &header[..8] == MAGIC_V1 && header[8] == 1 {
        Kind::V1
    } else {
        Kind::None
    }
}

/// The log's file, its header and its length; `None` without a log.
fn open(run_dir: &Path, write: bool) -> Result<Option<(File, Kind, u64)>> {
    let p = path(run_dir);
    let f = match OpenOptions::new().read(true).write(write).open(&p) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&p)(e)),
    };
    let len = f.metadata().map_err(io(&p))?.len();
    let mut header = [0u8; HEADER as usize];
    let kind = match f.read_exact_at(&mut header, 0) {
        Ok(()) => kind(&header),
        Err(e) if e.kind() == ErrorKind::UnexpectedEof => Kind::None,
        Err(e) => return Err(io(&p)(e)),
    };
    Ok(Some((f, kind, len)))
}

/// Encodes `files` (in `run_dir`) as entries.
fn encode_entries(run_dir: &Path, files: &[(&Path, &[u8])], buf: &mut Vec<u8>) -> Result<u32> {
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
    u32::try_from(files.len())
        .map_err(|_| JournalError::io("commit log", ErrorKind::InvalidInput.into()))
}

/// A record of `files` in `epoch`.
fn encode(run_dir: &Path, epoch: u64, files: &[(&Path, &[u8])]) -> Result<Vec<u8>> {
    let size: usize = files
        .iter()
        .map(|(p, b)| p.as_os_str().len() + b.len() + 6)
        .sum();
    let mut buf = vec![0u8; RECORD_HEADER];
    buf.reserve(size);
    let count = encode_entries(run_dir, files, &mut buf)?;
    let body_len = (buf.len() - RECORD_HEADER) as u64;
    let digest = digest_of(Some(epoch), count, &buf[RECORD_HEADER..]);
    buf[0] = LIVE;
    buf[4..8].copy_from_slice(RECORD_MAGIC);
    buf[8..16].copy_from_slice(&epoch.to_le_bytes());
    buf[16..20].copy_from_slice(&count.to_le_bytes());
    buf[24..32].copy_from_slice(&body_len.to_le_bytes());
    buf[32..64].copy_from_slice(&digest);
    Ok(buf)
}

/// Entries of a body that its header says holds `count` of them.
fn decode_entries(run_dir: &Path, count: u32, body: &[u8]) -> Result<Entries> {
    let run_id = run_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let bad = || JournalError::Corrupt {
        at: crate::error::Location::object(run_id, "state/commit.log"),
        reason: "commit log entries do not match their record".into(),
    };
    let mut entries = Vec::with_capacity(count.min(1 << 16) as usize);
    let mut rest = body;
    for _ in 0..count {
        let (n, r) = rest.split_at_checked(2).ok_or_else(bad)?;
        let n = usize::from(u16::from_le_bytes([n[0], n[1]]));
        let (name, r) = r.split_at_checked(n).ok_or_else(bad)?;
        let (len, r) = r.split_at_checked(4).ok_or_else(bad)?;
        let len = le4(len) as usize;
        let (bytes, r) = r.split_at_checked(len).ok_or_else(bad)?;
        let name = std::str::from_utf8(name).map_err(|_| bad())?;
        if !valid_name(name) {
            return Err(bad());
        }
        entries.push((name.to_owned(), bytes.to_vec()));
        rest = r;
    }
    Ok(entries)
}

/// The records past the settled offset, read back: each live one's entries (void ones are
/// skipped), and where the last whole record ends. Reading stops at a torn record or one of
/// another epoch.
struct Live {
    records: Vec<Entries>,
    end: u64,
}

fn read_records(run_dir: &Path, f: &File, header: Header, len: u64) -> Result<Live> {
    let p = path(run_dir);
    let from = header.settled_to.max(HEADER);
    let mut live = Live {
        records: Vec::new(),
        end: from,
    };
    if from >= len {
        return Ok(live);
    }
    // What is there: the log may have been emptied by its settling since `len` was read (a
    // reader takes no lock), and a short read ends the records like a torn one.
    let bytes = read_upto(f, from, len - from).map_err(io(&p))?;
    let mut at = 0usize;
    while let Some(head) = bytes.get(at..at + RECORD_HEADER) {
        let state = head[0];
        if &head[4..8] != RECORD_MAGIC || le8(&head[8..]) != header.epoch {
            break;
        }
        let count = le4(&head[16..]);
        let body_len = le8(&head[24..]);
        let Some(body) = usize::try_from(body_len)
            .ok()
            .and_then(|n| bytes.get(at + RECORD_HEADER..(at + RECORD_HEADER).checked_add(n)?))
        else {
            break; // torn: the body never reached the disk whole
        };
        if digest_of(Some(header.epoch), count, body)[..] != head[32..64] {
            break;
        }
        if state == LIVE {
            live.records.push(decode_entries(run_dir, count, body)?);
        }
        at += RECORD_HEADER + body.len();
        live.end = from + at as u64;
    }
    Ok(live)
}

/// Up to `n` bytes of `f` from `at`: fewer when the file ends first.
fn read_upto(f: &File, at: u64, n: u64) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; usize::try_from(n).map_err(|_| ErrorKind::FileTooLarge)?];
    let mut got = 0;
    while got < buf.len() {
        match f.read_at(&mut buf[got..], at + got as u64) {
            Ok(0) => break,
            Ok(k) => got += k,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(got);
    Ok(buf)
}

/// A first-version log (one batch), if live and whole.
fn read_v1(run_dir: &Path, f: &File, len: u64) -> Result<Option<Entries>> {
    let p = path(run_dir);
    let header = read_upto(f, 0, HEADER).map_err(io(&p))?;
    let body_len = le8(header.get(24..).unwrap_or_default());
    if header.len() < HEADER as usize || body_len > len.saturating_sub(HEADER) {
        return Ok(None);
    }
    let count = le4(&header[16..]);
    let body = read_upto(f, HEADER, body_len).map_err(io(&p))?;
    if body.len() as u64 != body_len || digest_of(None, count, &body)[..] != header[32..64] {
        return Ok(None);
    }
    decode_entries(run_dir, count, &body).map(Some)
}

/// Whether the log can carry `path` (see [`valid_name`]); other deferred files are synced.
pub(super) fn loggable(run_dir: &Path, path: &Path) -> bool {
    path.strip_prefix(run_dir)
        .ok()
        .and_then(|n| n.to_str())
        .is_some_and(valid_name)
}

/// A log names only `journal/<file>`, `tasks/<effect>/<file>` and `state/output.json` (the
/// output `RUN_COMPLETED` refers to), relative, plain segments: a damaged or foreign log can
/// never make recovery write anywhere else.
fn valid_name(name: &str) -> bool {
    let parts: Vec<&str> = name.split('/').collect();
    let plain = |s: &&str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
    };
    parts.iter().all(plain)
        && matches!(
            parts.as_slice(),
            ["journal", _] | ["tasks", _, _] | ["state", "output.json"]
        )
}

/// A new epoch: never the one before it, and unlikely to be any earlier one.
fn next_epoch(after: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos.max(after.wrapping_add(1)).max(1)
}

/// Empties the log: a new epoch, nothing to settle. `durable`: synced before it returns.
fn reset(f: &File, p: &Path, epoch: u64, durable: bool) -> Result<Header> {
    let header = Header {
        epoch: next_epoch(epoch),
        settled_to: HEADER,
    };
    f.set_len(HEADER).map_err(io(p))?;
    f.write_all_at(&header.bytes(), 0).map_err(io(p))?;
    if durable {
        f.sync_data().map_err(io(p))?;
    }
    Ok(header)
}

/// Where a record went: its epoch, and the log's end after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Appended {
    epoch: u64,
    start: u64,
    pub end: u64,
}

/// Appends `files` (a batch's event files and the files they refer to) to the run's log as one
/// record and makes it durable: the batch's commit point. The caller holds the run's lock and
/// its runtime's [`Settling::guard`], and has run [`recover`].
pub(super) fn append(rt: &Shared, run_dir: &Path, files: &[(&Path, &[u8])]) -> Result<Appended> {
    let p = path(run_dir);
    let state = run_dir.join("state");
    let (f, found, len, new) = match open(run_dir, true)? {
        Some((f, found, len)) => (f, found, len, false),
        None => {
            fs::create_dir_all(&state).map_err(io(&state))?;
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .create(true)
                .truncate(false)
                .open(&p)
                .map_err(io(&p))?;
            (f, Kind::None, 0, true)
        }
    };
    // Where the next record goes: after the last whole record (this runtime knows it when it
    // wrote the log last; else read back, and anything torn after it cut off).
    let (header, start) = match found {
        Kind::Current(h) if rt.settle.known_end(run_dir, h.epoch) == Some(len) => (h, len),
        Kind::Current(h) => {
            let end = read_records(run_dir, &f, h, len)?.end;
            if end < len {
                f.set_len(end).map_err(io(&p))?;
            }
            (h, end)
        }
        // A first-version log still live (recovered, not settled): settle it first.
        Kind::V1 => {
            syncfs(run_dir)?;
            (reset(&f, &p, 0, false)?, HEADER)
        }
        Kind::None => (reset(&f, &p, 0, false)?, HEADER),
    };
    let record = encode(run_dir, header.epoch, files)?;
    f.write_all_at(&record, start).map_err(io(&p))?;
    f.sync_data().map_err(io(&p))?;
    if new {
        fsync_dir(&state)?;
        fsync_dir(run_dir)?;
    }
    Ok(Appended {
        epoch: header.epoch,
        start,
        end: start + record.len() as u64,
    })
}

/// The batch of `record` was not named whole: the log must never complete it. Durable.
pub(super) fn void(rt: &Shared, run_dir: &Path, record: Appended) -> Result<()> {
    let p = path(run_dir);
    let f = OpenOptions::new().write(true).open(&p).map_err(io(&p))?;
    f.write_all_at(&[VOID], record.start).map_err(io(&p))?;
    f.sync_data().map_err(io(&p))?;
    rt.settle.known(run_dir, record.epoch, record.end);
    Ok(())
}

/// Whether `found` (a file's bytes, if it exists) is what a machine crash can leave of
/// `logged`: nothing, or a prefix of it (an empty file included).
fn lost(found: Option<&[u8]>, logged: &[u8]) -> bool {
    found.is_none_or(|f| f.len() < logged.len() && logged.starts_with(f))
}

fn read_opt(p: &Path) -> Result<Option<Vec<u8>>> {
    match fs::read(p) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(p)(e)),
    }
}

/// The entries a crash took: task files first, then the events that refer to them, record by
/// record.
fn to_restore(run_dir: &Path, records: &[Entries]) -> Result<Vec<(PathBuf, Vec<u8>)>> {
    let mut out = Vec::new();
    for entries in records {
        let (tasks, events): (Vec<_>, Vec<_>) =
            entries.iter().partition(|(n, _)| n.starts_with("tasks/"));
        for (name, bytes) in tasks.into_iter().chain(events) {
            let p = run_dir.join(name);
            if lost(read_opt(&p)?.as_deref(), bytes) {
                out.push((p, bytes.clone()));
            }
        }
    }
    Ok(out)
}

/// Makes sure the log's live records are all in the run with their bytes, restoring what a
/// machine crash lost (then the log is settled). Without `locked`, the run's lock is taken
/// only when something must be restored (and everything compared again under it: a writer
/// may have been naming a batch).
pub(in crate::fs) fn recover(
    rt: &Shared,
    run_id: &str,
    run_dir: &Path,
    locked: bool,
    attempts: u32,
) -> Result<()> {
    let Some((f, kind, len)) = open(run_dir, false)? else {
        return Ok(());
    };
    let records = match kind {
        Kind::None => return Ok(()),
        Kind::Current(h) if h.settled_to >= len => return Ok(()),
        // This runtime named every record up to the end.
        Kind::Current(h) if rt.settle.known_end(run_dir, h.epoch) == Some(len) => return Ok(()),
        Kind::Current(h) => read_records(run_dir, &f, h, len)?.records,
        Kind::V1 => read_v1(run_dir, &f, len)?.into_iter().collect(),
    };
    drop(f);
    if to_restore(run_dir, &records)?.is_empty() {
        return Ok(());
    }
    let _lock = match locked {
        true => None,
        false => Some(rt.holds.lock_run(run_id, run_dir, attempts)?),
    };
    let _guard = rt.settle.guard();
    restore(rt, run_id, run_dir)
}

/// [`recover`]'s restoring part, under the run's lock: compares again, restores, syncs, and
/// empties the log.
fn restore(rt: &Shared, run_id: &str, run_dir: &Path) -> Result<()> {
    let Some((f, kind, len)) = open(run_dir, true)? else {
        return Ok(());
    };
    let (records, epoch) = match kind {
        Kind::None => return Ok(()),
        Kind::Current(h) => (read_records(run_dir, &f, h, len)?.records, h.epoch),
        Kind::V1 => (read_v1(run_dir, &f, len)?.into_iter().collect(), 0),
    };
    let missing = to_restore(run_dir, &records)?;
    let mut dirs = std::collections::BTreeSet::new();
    for (p, bytes) in &missing {
        let mut dir = p.parent();
        while let Some(d) = dir.filter(|d| d.starts_with(run_dir)) {
            dirs.insert(d.to_path_buf());
            dir = d.parent();
        }
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).map_err(io(parent))?;
        }
        write_atomic(p, bytes)?;
    }
    for d in dirs.iter().rev() {
        fsync_dir(d)?;
    }
    syncfs(run_dir)?;
    reset(&f, &path(run_dir), epoch, true)?;
    rt.settle.forget_known(run_dir);
    rt.holds.forget_listing(run_dir);
    if !missing.is_empty() {
        tracing::warn!(
            run_id,
            files = missing.len(),
            "restored files of committed events from the commit log (a machine crash had lost them)"
        );
    }
    Ok(())
}

/// Voids the run's log durably before its journal is replaced (its events' sequence numbers
/// would name other events after).
pub(in crate::fs) fn discard(rt: &Shared, run_dir: &Path) -> Result<()> {
    rt.settle.forget(run_dir);
    let _guard = rt.settle.guard();
    let p = path(run_dir);
    match OpenOptions::new().read(true).write(true).open(&p) {
        Ok(f) => {
            let mut header = [0u8; HEADER as usize];
            let epoch = match f.read_exact_at(&mut header, 0) {
                Ok(()) => le8(&header[8..]),
                Err(_) => 0,
            };
            reset(&f, &p, epoch, true).map(drop)
        }
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(&p)(e)),
    }
}

#[cfg(test)]
mod tests;
