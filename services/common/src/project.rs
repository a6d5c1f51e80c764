//! Where a project and a user keep babysitter's files: the project root (babysitter's "repo
//! root": the nearest ancestor holding `.git` or `.a5c`) and the home directory as Node's
//! `os.homedir()` finds it. The CLI (runs, logs, breakpoint rules) and the harness launcher
//! (runtime hooks under `<root>/.a5c/hooks` and `~/.a5c/hooks`) must agree on both.

use std::path::{Component, Path, PathBuf};

/// Folds `.` and `..` lexically (`..` at the root stays at the root).
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() && !out.has_root() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// `p` against `base` (an absolute `p` as is), normalized.
pub fn resolve(base: &Path, p: impl AsRef<Path>) -> PathBuf {
    let p = p.as_ref();
    if p.is_absolute() {
        normalize(p)
    } else {
        normalize(&base.join(p))
    }
}

/// The nearest ancestor of `start` (itself included) holding `.git` or `.a5c`.
pub fn find_root(start: &Path) -> Option<PathBuf> {
    let present = |p: PathBuf| p.try_exists().unwrap_or(false);
    let mut current = normalize(start);
    loop {
        if present(current.join(".git")) || present(current.join(".a5c")) {
            return Some(current);
        }
        if !current.pop() {
            return None;
        }
    }
}

/// The home directory: `home_var` (the caller's `HOME`; resolved against `cwd`) when set, else
/// this user's passwd entry; `None` when there is neither.
pub fn home_dir(home_var: Option<&str>, cwd: &Path) -> Option<PathBuf> {
    match home_var.map(str::trim).filter(|h| !h.is_empty()) {
        Some(h) => Some(resolve(cwd, h)),
        None => std::env::home_dir().filter(|h| h.is_absolute()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_and_homes() {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("p");
        std::fs::create_dir_all(project.join(".a5c/runs/r1")).unwrap();
        assert_eq!(
            find_root(&project.join(".a5c/runs/r1")),
            Some(project.clone())
        );
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(
            home_dir(Some("h"), Path::new("/cwd")),
            Some(PathBuf::from("/cwd/h"))
        );
        assert_eq!(
            home_dir(Some("/u"), Path::new("/cwd")),
            Some(PathBuf::from("/u"))
        );
    }
}
