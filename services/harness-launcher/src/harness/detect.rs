//! Finding installed harnesses: a configured path or the binary on PATH, and a version that the
//! binary itself reports. A harness that is missing, not executable or does not answer
//! `--version` in time is not advertised, so the orchestrator never routes an agent task to a
//! worker that cannot run it.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::HarnessKind;

/// How long `--version` may take (Gemini CLI loads a large JS bundle first).
const VERSION_TIMEOUT: Duration = Duration::from_secs(30);

/// A harness found on this machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detected {
    pub kind: HarnessKind,
    pub version: String,
    pub path: PathBuf,
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn on_path(name: &str, path_env: &OsStr) -> Option<PathBuf> {
    std::env::split_paths(path_env)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// The first token of `--version` output that looks like a version (`2.1.197 (Claude Code)`,
/// `codex-cli 0.171.0`, `0.61.0`).
pub fn parse_version(out: &str) -> Option<String> {
    out.split_whitespace()
        .map(|t| t.trim_start_matches('v'))
        .find(|t| {
            let mut parts = t.split('.');
            parts
                .next()
                .is_some_and(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
                && parts
                    .next()
                    .is_some_and(|p| p.chars().next().is_some_and(|c| c.is_ascii_digit()))
        })
        .map(str::to_owned)
}

async fn version_of(path: &Path, path_env: &OsStr) -> Option<String> {
    let mut cmd = tokio::process::Command::new(path);
    cmd.arg("--version")
        .env_clear()
        .env("PATH", path_env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = tokio::time::timeout(VERSION_TIMEOUT, cmd.output())
        .await
        .ok()?
        .ok()?;
    if !out.status.success() {
        return None;
    }
    parse_version(&String::from_utf8_lossy(&out.stdout))
        .or_else(|| parse_version(&String::from_utf8_lossy(&out.stderr)))
}

/// Detects every harness: `binaries` (by adapter name) wins over PATH; a configured path that
/// does not work is not replaced by one from PATH (the operator asked for that binary).
pub async fn detect(binaries: &BTreeMap<String, PathBuf>, path_env: &OsStr) -> Vec<Detected> {
    let mut found = Vec::new();
    for kind in HarnessKind::ALL {
        let path = match binaries.get(kind.name()) {
            Some(p) if is_executable(p) => Some(p.clone()),
            Some(p) => {
                tracing::warn!(harness = %kind, path = %p.display(), "configured harness binary is not executable; not advertised");
                None
            }
            None => on_path(kind.binary_name(), path_env),
        };
        let Some(path) = path else { continue };
        // The binary's directory first on PATH: npm shims (`#!/usr/bin/env node`) find node
        // there or on the worker's PATH.
        match version_of(&path, path_env).await {
            Some(version) => {
                let path = std::fs::canonicalize(&path).unwrap_or(path);
                tracing::info!(harness = %kind, %version, path = %path.display(), "harness detected");
                found.push(Detected {
                    kind,
                    version,
                    path,
                });
            }
            None => {
                tracing::warn!(harness = %kind, path = %path.display(), "harness does not answer --version; not advertised");
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_of_each_harness_are_read() {
        assert_eq!(
            parse_version("2.1.197 (Claude Code)").as_deref(),
            Some("2.1.197")
        );
        assert_eq!(
            parse_version("codex-cli 0.171.0").as_deref(),
            Some("0.171.0")
        );
        assert_eq!(parse_version("0.61.0\n").as_deref(), Some("0.61.0"));
        assert_eq!(parse_version("v1.18.33").as_deref(), Some("1.18.33"));
        assert_eq!(parse_version("no version here"), None);
    }

    #[tokio::test]
    async fn a_missing_harness_is_not_detected_and_a_working_one_is() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let fake = dir.path().join("codex");
        std::fs::write(&fake, "#!/bin/sh\necho 'codex-cli 9.8.7'\n")
            .unwrap_or_else(|e| panic!("{e}"));
        let broken = dir.path().join("gemini");
        std::fs::write(&broken, "#!/bin/sh\nexit 3\n").unwrap_or_else(|e| panic!("{e}"));
        for f in [&fake, &broken] {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o755))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let mut binaries = BTreeMap::new();
        binaries.insert("pi".to_owned(), dir.path().join("no-such-pi"));
        // PATH holds only the temp dir (and /bin for `sh`): no claude, no opencode.
        let path_env =
            std::env::join_paths([dir.path(), Path::new("/bin")]).unwrap_or_else(|e| panic!("{e}"));
        let found = detect(&binaries, &path_env).await;
        let names: Vec<_> = found
            .iter()
            .map(|d| (d.kind.name(), d.version.as_str()))
            .collect();
        assert_eq!(names, vec![("codex", "9.8.7")], "{found:?}");
    }
}
