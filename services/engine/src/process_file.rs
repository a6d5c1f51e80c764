//! Where a process's code comes from, and whether it changed.
//!
//! [`process_root`]: the folder a process's imports are confined to. Babysitter's library
//! processes import shared helpers from outside their own folder (`../common-utilities/…`), so
//! the root is the project the entry file belongs to — the nearest ancestor holding `.a5c/`,
//! `.git` or `package.json` — unless one is given explicitly; a service's bundle is confined to
//! itself.
//!
//! [`closure_digest`]: the code hash journaled for a run (fix B9) covers the import closure, not
//! the entry file alone: the SHA-256 of the entry's bytes when it imports no file (exactly the
//! reference's `processCodeHash`), else a digest over every module loaded while the process
//! module was evaluated.
//!
//! The process file's code hash, checked on every iteration (fix B9: a changed process file is
//! detected and journaled) without reading and hashing the file every time: the hash is kept
//! per path together with the file's identity — length, modification and status-change times,
//! inode — and recomputed when any of them differs, the way build tools and git notice changed
//! files. The status-change time cannot be set back by tools (unlike the modification time), so
//! a rewrite with the same length and a restored modification time is still seen.

use crate::FastMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::Digest;

/// Files or folders whose presence marks a project root.
const ROOT_MARKERS: &[&str] = &[".a5c", ".git", "package.json"];

/// The folder `entry`'s imports are confined to: `explicit` when given, `bundle` when the entry
/// lies inside it (a service's materialized bundle), else the nearest ancestor of the entry's
/// folder holding `.a5c/`, `.git` or `package.json` (`.a5c/` itself excepted), else the entry's
/// folder. `entry` must be canonical. It is also the process's `process.cwd()`, as the project
/// folder babysitter is run from is for the reference.
pub(crate) fn process_root(entry: &Path, bundle: &Path, explicit: Option<&Path>) -> PathBuf {
    if let Some(root) = explicit {
        return root.to_path_buf();
    }
    let Some(folder) = entry.parent() else {
        return PathBuf::from("/");
    };
    if let Ok(bundle) = bundle.canonicalize()
        && entry.starts_with(&bundle)
    {
        return bundle;
    }
    // `.a5c/` itself is not a project: babysitter keeps a `package.json` in it (so its
    // processes load as ES modules); the project is the folder holding it.
    folder
        .ancestors()
        .filter(|dir| dir.file_name().is_none_or(|n| n != ".a5c"))
        .find(|dir| {
            // A folder that cannot be looked into is not a project root.
            ROOT_MARKERS
                .iter()
                .any(|m| dir.join(m).try_exists().is_ok_and(|found| found))
        })
        .unwrap_or(folder)
        .to_path_buf()
}

/// The code hash of an import closure: `modules` are the file modules loaded, by root-relative
/// name with the SHA-256 of their bytes, the entry (`entry`) among them. The entry's own hash
/// when it is the only one (babysitter's `processCodeHash`); else the SHA-256 of the closure's
/// listing, one `<sha256>  <name>` line per module in name order (the format of `sha256sum`).
pub fn closure_digest<'a>(
    entry: &str,
    modules: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Option<String> {
    let modules: std::collections::BTreeMap<&str, &str> = modules.into_iter().collect();
    let entry_hash = modules.get(entry)?;
    if modules.len() == 1 {
        return Some((*entry_hash).to_owned());
    }
    let mut listing = String::new();
    for (name, hash) in &modules {
        listing.push_str(hash);
        listing.push_str("  ");
        listing.push_str(name);
        listing.push('\n');
    }
    Some(hex::encode(sha2::Sha256::digest(listing.as_bytes())))
}

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
    fn the_process_root_is_the_nearest_project_folder() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let deep = base.join("lib/methodologies/m");
        std::fs::create_dir_all(&deep).unwrap();
        let entry = deep.join("p.js");
        std::fs::write(&entry, "").unwrap();
        let bundle = base.join("runs/r/process");
        // The outer project, unless a folder nearer the entry is one.
        std::fs::create_dir(base.join(".git")).unwrap();
        assert_eq!(process_root(&entry, &bundle, None), base);
        for marker in ["package.json", ".git", ".a5c"] {
            let at = base.join("lib").join(marker);
            if marker == ".a5c" {
                std::fs::create_dir(&at).unwrap();
            } else {
                std::fs::write(&at, "{}").unwrap();
            }
            assert_eq!(
                process_root(&entry, &bundle, None),
                base.join("lib"),
                "{marker}"
            );
            if marker == ".a5c" {
                std::fs::remove_dir(&at).unwrap();
            } else {
                std::fs::remove_file(&at).unwrap();
            }
        }
        // A process under `.a5c/` belongs to the project holding it, whatever `.a5c/` holds.
        let a5c = base.join("proj/.a5c/processes");
        std::fs::create_dir_all(&a5c).unwrap();
        std::fs::write(base.join("proj/.a5c/package.json"), "{}").unwrap();
        std::fs::write(a5c.join("x.js"), "").unwrap();
        assert_eq!(
            process_root(&a5c.join("x.js"), &bundle, None),
            base.join("proj")
        );
        // An explicit root wins; a bundle confines its own files.
        assert_eq!(process_root(&entry, &bundle, Some(&base)), base);
        std::fs::create_dir_all(&bundle).unwrap();
        std::fs::write(base.join("package.json"), "{}").unwrap();
        let bundled = bundle.join("main.mjs");
        std::fs::write(&bundled, "").unwrap();
        assert_eq!(process_root(&bundled, &bundle, None), bundle);
    }

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
