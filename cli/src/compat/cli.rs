//! What every command gets ([`Cli`]: the parsed arguments, the environment, the working
//! directory) and the settings derived from them that several commands share.

use std::path::PathBuf;
use std::time::Duration;

use babysitter_common::EnvMap;

use super::{args, lock, paths};

/// The version babysitter's tools see (`babysitter --version`): the SDK whose formats this
/// implementation writes (`sdkVersion` in every record).
pub const SDK_VERSION: &str = "6.0.0";

/// What every command gets: the parsed arguments, the environment (read from here only) and the
/// working directory.
#[derive(Debug)]
pub struct Cli<'a> {
    pub args: args::Parsed,
    pub env: &'a EnvMap,
    pub cwd: PathBuf,
}

impl Cli<'_> {
    /// The primary runs root (`--runs-dir`, `BABYSITTER_RUNS_DIR`, scope default).
    pub fn runs_dir(&self) -> PathBuf {
        paths::collapse_doubled(&paths::resolve_runs_dir(
            self.env,
            &self.cwd,
            self.args.value("--runs-dir"),
        ))
    }

    /// The `<runDir>` positional resolved the reference's way.
    pub fn run_dir(&self) -> Option<PathBuf> {
        let arg = self.args.run_dir_arg.as_deref()?;
        Some(paths::resolve_existing_run_dir(
            arg,
            &self.runs_dir(),
            &self.cwd,
        ))
    }

    /// `[<cmd>] verbose k=v …` on stderr under `--verbose`.
    pub fn verbose(&self, command: &str, details: &[(&str, Option<String>)]) {
        if !self.args.verbose() {
            return;
        }
        let parts: Vec<String> = details
            .iter()
            .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={v}")))
            .collect();
        errln!("[{command}] verbose {}", parts.join(" "));
    }

    /// How long a command waits for another writer of the same run
    /// (`BABYSITTER_RUN_LOCK_TIMEOUT_MS`, default 10 s).
    pub fn lock_timeout(&self) -> Duration {
        self.env
            .get_non_empty("BABYSITTER_RUN_LOCK_TIMEOUT_MS")
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_millis)
            .unwrap_or(lock::DEFAULT_TIMEOUT)
    }

    /// `BABYSITTER_ALLOW_SECRET_LOGS` is `1`/`true` and both `--json` and `--verbose` are given.
    pub fn secret_logs_allowed(&self) -> bool {
        self.args.json()
            && self.args.verbose()
            && self
                .env
                .get("BABYSITTER_ALLOW_SECRET_LOGS")
                .map(|v| v.trim().to_lowercase())
                .is_some_and(|v| v == "1" || v == "true")
    }
}
