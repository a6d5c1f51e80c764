//! Control documents on the filesystem (`<root>/.babysitter-rs/control/<name>.json`), written by
//! compare-and-swap: under an exclusive `flock` of `<name>.lock`, read the current bytes, compare
//! their digest (the version) with the expected one, then write aside, fsync and rename. The
//! directory starts with a dot, so it is never listed as a run.

use std::fs::{self, File};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use rustix::fs::{FlockOperation, Mode, OFlags};

use super::write::{fsync_dir, write_atomic};
use crate::error::{JournalError, Result};
use crate::event::sha256_hex;
use crate::store::Versioned;
use crate::validate_id;

pub(super) fn control_dir(root: &Path) -> PathBuf {
    root.join(".babysitter-rs").join("control")
}

fn paths(root: &Path, name: &str) -> Result<(PathBuf, PathBuf)> {
    validate_id("control document name", name)?;
    let dir = control_dir(root);
    Ok((
        dir.join(format!("{name}.json")),
        dir.join(format!("{name}.lock")),
    ))
}

fn read(path: &Path) -> Result<Option<Versioned>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(Versioned {
            version: sha256_hex(&bytes),
            content: bytes.into(),
        })),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(JournalError::io(path.display(), e)),
    }
}

pub(crate) fn read_control(root: &Path, name: &str) -> Result<Option<Versioned>> {
    let (path, _) = paths(root, name)?;
    read(&path)
}

pub(crate) fn write_control(
    root: &Path,
    name: &str,
    content: &[u8],
    expected: Option<&str>,
) -> Result<String> {
    let (path, lock_path) = paths(root, name)?;
    let dir = control_dir(root);
    fs::create_dir_all(&dir).map_err(|e| JournalError::io(dir.display(), e))?;
    let lock = rustix::fs::open(
        &lock_path,
        OFlags::RDWR | OFlags::CREATE | OFlags::CLOEXEC,
        Mode::from_raw_mode(0o644),
    )
    .map_err(|e| JournalError::io(lock_path.display(), e.into()))?;
    // Blocking: held only for a read and a small write, by this store's own writers.
    rustix::fs::flock(&lock, FlockOperation::LockExclusive)
        .map_err(|e| JournalError::io(lock_path.display(), e.into()))?;
    let current = read(&path)?;
    if current.as_ref().map(|c| c.version.as_str()) != expected {
        return Err(JournalError::ControlConflict {
            name: name.to_owned(),
        });
    }
    write_atomic(&path, content)?;
    fsync_dir(&dir)?;
    drop(File::from(lock));
    Ok(sha256_hex(content))
}
