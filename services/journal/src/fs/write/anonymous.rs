//! Large batches staged as anonymous files (`O_TMPFILE`): invisible until each is given its
//! name (`linkat`), and created without taking the directory's lock. The whole batch is held
//! open until it is named, so its width is bounded by this process's descriptor limit (a wider
//! batch is staged by name, see [`anonymous_cap`]), and the descriptor table is best grown
//! before the process has threads ([`reserve_descriptors`], which building the stores'
//! [`crate::fs::FsRuntime`] does).

use std::os::fd::{AsRawFd as _, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::fs::{Mode, OFlags};

use super::PARALLEL_MIN;
use crate::error::{JournalError, Result};

/// The most files [`stage_anonymous`] holds open at once: half this process's descriptor limit.
/// A larger batch is staged by name, one file open at a time: a fan-out wider than the limit
/// (1,024 by default on many systems) is written, not refused with "too many open files".
fn anonymous_cap() -> usize {
    descriptor_limit() / 2
}

/// This process's soft limit on open descriptors (`usize::MAX`: none).
fn descriptor_limit() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX))
}

/// The largest descriptor table [`reserve_descriptors`] sets up (32 KiB of pointers).
const RESERVED_MAX: usize = 4096;

/// Grows this process's descriptor table now to hold a large batch's anonymous files (up to
/// [`anonymous_cap`], at most [`RESERVED_MAX`]). Best called while the process has one
/// thread (`FsRuntime::new`, first thing in `main`): the kernel grows a table that several
/// threads share only after an RCU grace period, and a first 200-task fan-out in a young warm
/// server spent ~30 ms in two such waits (measured); with one thread the growth is a plain
/// reallocation, and a table never shrinks. Best effort; once the table is grown, a further
/// call costs three system calls and changes nothing.
pub(in crate::fs) fn reserve_descriptors() {
    let limit = descriptor_limit();
    let want = (limit / 2)
        .saturating_add(64)
        .min(RESERVED_MAX)
        .min(limit.saturating_sub(1));
    let Ok(at) = i32::try_from(want) else {
        return;
    };
    if let Ok(fd) = rustix::fs::open("/", OFlags::PATH | OFlags::CLOEXEC, Mode::empty()) {
        // The lowest free descriptor at or above `at`: the table grows to hold it.
        let _ = rustix::io::fcntl_dupfd_cloexec(&fd, at - 1);
    }
}

/// Writes `files` (all in `dir`, which exists) as anonymous files (`O_TMPFILE`), from two
/// threads for a large batch: an anonymous file takes no directory lock to create. `None` when
/// the filesystem or the system cannot (no `O_TMPFILE`, no `/proc` to link them through), or
/// the batch would hold more descriptors open than this process may ([`anonymous_cap`]; also
/// when opening them runs out of descriptors after all: those opened are closed, and so gone).
pub(super) fn stage_anonymous(dir: &Path, files: &[(PathBuf, &[u8])]) -> Result<Option<Anonymous>> {
    if files.len() < PARALLEL_MIN
        || files.len() > anonymous_cap()
        || !Path::new("/proc/self/fd").is_dir()
    {
        return Ok(None);
    }
    let io = |e: rustix::io::Errno| JournalError::io(dir.display(), e.into());
    let dir_fd = rustix::fs::open(
        dir,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(io)?;
    let anonymous = |bytes: &[u8]| -> rustix::io::Result<OwnedFd> {
        let fd = rustix::fs::openat(
            &dir_fd,
            ".",
            OFlags::WRONLY | OFlags::TMPFILE | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        )?;
        let mut rest = bytes;
        while !rest.is_empty() {
            let n = rustix::io::write(&fd, rest)?;
            rest = &rest[n..];
        }
        Ok(fd)
    };
    let first = match anonymous(files[0].1) {
        Ok(fd) => fd,
        Err(
            rustix::io::Errno::OPNOTSUPP
            | rustix::io::Errno::ISDIR
            | rustix::io::Errno::INVAL
            | rustix::io::Errno::NOENT
            | rustix::io::Errno::MFILE
            | rustix::io::Errno::NFILE,
        ) => return Ok(None),
        Err(e) => return Err(io(e)),
    };
    // Out of descriptors part way: `None` from here, the batch is staged by name instead.
    let out_of_fds = AtomicBool::new(false);
    let half = |part: &[(PathBuf, &[u8])]| -> Result<Vec<OwnedFd>> {
        part.iter()
            .map(|(path, bytes)| {
                anonymous(bytes).map_err(|e| {
                    if matches!(e, rustix::io::Errno::MFILE | rustix::io::Errno::NFILE) {
                        out_of_fds.store(true, Ordering::Relaxed);
                    }
                    JournalError::io(path.display(), e.into())
                })
            })
            .collect()
    };
    let (a, b) = files[1..].split_at((files.len() - 1) / 2);
    let (b, a) = super::beside("journal-write", dir, || half(b), || half(a));
    if out_of_fds.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let mut fds = vec![first];
    fds.extend(a?);
    fds.extend(b?);
    Ok(Some(Anonymous { dir: dir_fd, fds }))
}

/// A batch written by [`stage_anonymous`]: its directory and the files, in order.
pub(super) struct Anonymous {
    pub(super) dir: OwnedFd,
    pub(super) fds: Vec<OwnedFd>,
}

/// How this process may name anonymous files, learnt by the runtime on its first try.
#[derive(Debug, Default)]
pub(super) struct Links {
    /// `linkat(…, AT_EMPTY_PATH)` was refused here (it needs `CAP_DAC_READ_SEARCH`): files are
    /// linked through `/proc/self/fd` only.
    no_empty_path: AtomicBool,
}

impl Anonymous {
    /// Gives the `i`th file its name (`path`, in the batch's directory); fails if the name is
    /// taken. Linked by descriptor where the process may (no path lookup at all), else through
    /// `/proc/self/fd`; the new name is looked up relative to the directory either way.
    pub(super) fn link(&self, links: &Links, i: usize, path: &Path) -> Result<()> {
        let io = |e: rustix::io::Errno| JournalError::io(path.display(), e.into());
        let name = path
            .file_name()
            .ok_or_else(|| io(rustix::io::Errno::INVAL))?;
        let fd = &self.fds[i];
        if !links.no_empty_path.load(Ordering::Relaxed) {
            match rustix::fs::linkat(fd, "", &self.dir, name, rustix::fs::AtFlags::EMPTY_PATH) {
                Ok(()) => return Ok(()),
                Err(
                    rustix::io::Errno::NOENT | rustix::io::Errno::PERM | rustix::io::Errno::INVAL,
                ) => {
                    links.no_empty_path.store(true, Ordering::Relaxed);
                }
                Err(e) => return Err(io(e)),
            }
        }
        self.link_through_proc(i, name).map_err(io)
    }

    pub(super) fn link_through_proc(
        &self,
        i: usize,
        name: &std::ffi::OsStr,
    ) -> rustix::io::Result<()> {
        rustix::fs::linkat(
            rustix::fs::CWD,
            format!("/proc/self/fd/{}", self.fds[i].as_raw_fd()),
            &self.dir,
            name,
            rustix::fs::AtFlags::SYMLINK_FOLLOW,
        )
    }
}
