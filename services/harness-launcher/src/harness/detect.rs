//! Finding installed harnesses: a configured path or the binary on PATH, and a version that the
//! binary itself reports. A harness that is missing, not executable or does not answer
//! `--version` in time is not advertised, so the orchestrator never routes an agent task to a
//! worker that cannot run it.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
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

/// Runs `path --version`; the version it prints, or why there is none.
async fn version_of(path: &Path, path_env: &OsStr) -> Result<String, String> {
    let mut cmd = tokio::process::Command::new(path);
    cmd.arg("--version")
        .env_clear()
        .env("PATH", path_env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let out = match tokio::time::timeout(VERSION_TIMEOUT, cmd.output()).await {
        Err(_) => {
            return Err(format!(
                "`--version` did not answer within {}s",
                VERSION_TIMEOUT.as_secs()
            ));
        }
        Ok(Err(e)) => return Err(format!("cannot run `--version`: {e}")),
        Ok(Ok(out)) => out,
    };
    if !out.status.success() {
        return Err(format!("`--version` failed ({})", out.status));
    }
    parse_version(&String::from_utf8_lossy(&out.stdout))
        .or_else(|| parse_version(&String::from_utf8_lossy(&out.stderr)))
        .ok_or_else(|| "`--version` printed no version".to_owned())
}

/// What detection found for one harness adapter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HarnessCheck {
    pub kind: HarnessKind,
    pub outcome: Result<Detected, Unavailable>,
}

/// Why a harness is not advertised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable {
    /// The binary that was tried, when one was found or configured.
    pub path: Option<PathBuf>,
    /// E.g. "`codex` not found on PATH".
    pub reason: String,
}

/// Where harness binaries are looked for: the configured paths (by adapter name) and PATH.
/// Kept by the worker so its admin API can run detection again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detector {
    pub binaries: BTreeMap<String, PathBuf>,
    pub path_env: OsString,
}

impl Detector {
    /// Checks every harness: `binaries` wins over PATH; a configured path that does not work is
    /// not replaced by one from PATH (the operator asked for that binary). The version checks run
    /// at once (each may take up to its timeout: one after another, five could outlast an admin
    /// request's deadline); the result is in [`HarnessKind::ALL`]'s order.
    pub async fn check_all(&self) -> Vec<HarnessCheck> {
        let mut running = tokio::task::JoinSet::new();
        for (i, kind) in HarnessKind::ALL.into_iter().enumerate() {
            let this = self.clone();
            running.spawn(async move { (i, this.check(kind).await) });
        }
        let mut outcomes: Vec<Option<Result<Detected, Unavailable>>> =
            HarnessKind::ALL.iter().map(|_| None).collect();
        while let Some(joined) = running.join_next().await {
            match joined {
                Ok((i, outcome)) => outcomes[i] = Some(outcome),
                // A check that panicked: reported as unavailable below, not as a crash.
                Err(e) => tracing::error!(error = %e, "a harness check failed"),
            }
        }
        let mut checks = Vec::with_capacity(HarnessKind::ALL.len());
        for (kind, outcome) in HarnessKind::ALL.into_iter().zip(outcomes) {
            let outcome = outcome.unwrap_or_else(|| {
                Err(Unavailable {
                    path: None,
                    reason: "the check did not finish".to_owned(),
                })
            });
            match &outcome {
                Ok(d) => {
                    tracing::info!(harness = %kind, version = %d.version, path = %d.path.display(), "harness detected");
                }
                Err(u) if u.path.is_some() => {
                    tracing::warn!(harness = %kind, reason = %u.reason, "harness does not work; not advertised");
                }
                Err(_) => {}
            }
            checks.push(HarnessCheck { kind, outcome });
        }
        checks
    }

    async fn check(&self, kind: HarnessKind) -> Result<Detected, Unavailable> {
        let path = match self.binaries.get(kind.name()) {
            Some(p) if is_executable(p) => p.clone(),
            Some(p) => {
                return Err(Unavailable {
                    path: Some(p.clone()),
                    reason: format!("configured binary {} is not executable", p.display()),
                });
            }
            None => on_path(kind.binary_name(), &self.path_env).ok_or_else(|| Unavailable {
                path: None,
                reason: format!("`{}` not found on PATH", kind.binary_name()),
            })?,
        };
        // The binary's directory first on PATH: npm shims (`#!/usr/bin/env node`) find node
        // there or on the worker's PATH.
        match version_of(&path, &self.path_env).await {
            Ok(version) => Ok(Detected {
                kind,
                version,
                path: std::fs::canonicalize(&path).unwrap_or(path),
            }),
            Err(reason) => Err(Unavailable {
                reason: format!("{}: {reason}", path.display()),
                path: Some(path),
            }),
        }
    }
}

/// The harnesses that work, from [`Detector::check_all`].
pub fn available(checks: &[HarnessCheck]) -> Vec<Detected> {
    checks
        .iter()
        .filter_map(|c| c.outcome.as_ref().ok().cloned())
        .collect()
}

/// Detects every harness (see [`Detector::check_all`]) and keeps the ones that work.
pub async fn detect(binaries: &BTreeMap<String, PathBuf>, path_env: &OsStr) -> Vec<Detected> {
    let detector = Detector {
        binaries: binaries.clone(),
        path_env: path_env.to_owned(),
    };
    available(&detector.check_all().await)
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
