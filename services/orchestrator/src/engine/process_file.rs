//! The process file's code hash, checked on every iteration (fix B9: a changed process file is
//! detected and journaled) without reading and hashing the file every time: the hash is kept
//! per path together with the file's identity — length, modification and status-change times,
//! inode — and recomputed when any of them differs, the way build tools and git notice changed
//! files. The status-change time cannot be set back by tools (unlike the modification time), so
//! a rewrite with the same length and a restored modification time is still seen.

use crate::engine::FastMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::Digest;

/// Paths remembered before the cache starts over (a service runs many processes).
const MAX_ENTRIES: usize = 4096;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    ino: u64,
    dev: u64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        Self {
            len: meta.len(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
            ino: meta.ino(),
            dev: meta.dev(),
        }
    }
}

/// Code hashes of process files by path.
#[derive(Debug, Default)]
pub(crate) struct CodeHashes {
    known: Mutex<FastMap<PathBuf, (Stamp, String)>>,
}

impl CodeHashes {
    /// Lowercase hex SHA-256 of the file at `path` (symlinks followed); an error when it cannot
    /// be read.
    pub(crate) fn hash(&self, path: &Path) -> std::io::Result<String> {
        // The stamp is taken before reading: a change during the read leaves a stamp that no
        // longer matches, so the next call hashes again.
        let stamp = Stamp::of(&std::fs::metadata(path)?);
        if let Some((known, hash)) = self.lock().get(path)
            && *known == stamp
        {
            return Ok(hash.clone());
        }
        let hash = hex::encode(sha2::Sha256::digest(std::fs::read(path)?));
        let mut known = self.lock();
        if known.len() >= MAX_ENTRIES {
            known.clear();
        }
        known.insert(path.to_owned(), (stamp, hash.clone()));
        Ok(hash)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FastMap<PathBuf, (Stamp, String)>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_is_seen_even_with_the_same_length_and_modification_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.mjs");
        std::fs::write(&path, "export const a = 1;").unwrap();
        let hashes = CodeHashes::default();
        let first = hashes.hash(&path).unwrap();
        assert_eq!(hashes.hash(&path).unwrap(), first);
        let mtime = std::fs::metadata(&path).unwrap().modified().unwrap();
        std::fs::write(&path, "export const a = 2;").unwrap();
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(mtime)
            .unwrap();
        let second = hashes.hash(&path).unwrap();
        assert_ne!(second, first);
        assert_eq!(
            second,
            hex::encode(sha2::Sha256::digest(b"export const a = 2;"))
        );
        assert!(hashes.hash(&dir.path().join("missing.mjs")).is_err());
    }
}
