//! Skipping a test whose prerequisite is missing — visibly, and never in CI.
//!
//! Some tests need something the workspace cannot build: a running dockerd, a pinned harness
//! CLI, the reference babysitter CLI, the Python SDK venv. When it is missing such a test cannot
//! run, and nextest has no "skipped" status for a test that has started: it can only pass or
//! fail. So a missing prerequisite goes through [`skip`], which applies one policy:
//!
//! * `BABYSITTER_REQUIRE_ALL=1` ([`REQUIRE_ALL_ENV`]): the test **fails**, quoting the reason.
//!   `.ci/run` sets it: CI installs every prerequisite, so a skip there is a broken setup.
//! * otherwise the test returns early and passes, after printing
//!   `SKIPPED: <binary> <test>: <reason>` to stderr and appending that line to the file named
//!   by `BABYSITTER_SKIP_LOG` ([`SKIP_LOG_ENV`]) when it is set. nextest runs each test in its
//!   own process and hides a passing test's stderr, so the file is how `scripts/test.sh`
//!   collects them and ends with "N tests skipped: …".
//!
//! The reason names what is missing and how to get it (`needs the Claude Code CLI at …: run
//! scripts/ensure-claude-code.sh`). Use it as the test's return value — `()` and
//! `Result<(), E>` tests alike:
//!
//! ```ignore
//! let Some(bin) = installed(&path) else {
//!     return skip(format!("needs … at {}: run scripts/ensure-….sh", path.display()));
//! };
//! ```
//!
//! A test that goes on without the prerequisite (it compares with the reference CLI only when
//! that is there) calls `skip::<()>(…)` for the part it leaves out and carries on.
//!
//! This file uses `std` only: `babysitter-tests` exports it as `babysitter_tests::skip`, and the
//! other crates' tests include this same file by path (`#[path = "…/tests/src/skip.rs"] mod
//! skip;`) rather than depend on this testcontainers-heavy crate, so there is one policy and one
//! line format for `scripts/test.sh` to read.

#![allow(dead_code)]

use std::fmt::Display;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Env var: when exactly `1`, a missing prerequisite fails the test instead of skipping it.
pub const REQUIRE_ALL_ENV: &str = "BABYSITTER_REQUIRE_ALL";
/// Env var: a file each skip appends its `SKIPPED: …` line to.
pub const SKIP_LOG_ENV: &str = "BABYSITTER_SKIP_LOG";

/// What a skipped test returns: `()`, or `Ok(())` for a test returning `Result<(), E>`.
pub trait Skipped {
    /// The passing value.
    fn skipped() -> Self;
}

impl Skipped for () {
    fn skipped() -> Self {}
}

impl<E> Skipped for Result<(), E> {
    fn skipped() -> Self {
        Ok(())
    }
}

/// Gives up on the current test (or part of it) because a prerequisite is missing.
///
/// Panics under `BABYSITTER_REQUIRE_ALL=1`; otherwise records `SKIPPED: <binary> <test>:
/// <reason>` (stderr, and the `BABYSITTER_SKIP_LOG` file) and returns the passing value for the
/// caller to `return`. `reason` names what is missing and how to get it.
#[track_caller]
pub fn skip<T: Skipped>(reason: impl Display) -> T {
    Policy::from_env().skip(&current_test(), &reason.to_string());
    T::skipped()
}

/// `path` when it is a file, else `None`: the usual "is the pinned install there" check.
pub fn installed(path: &Path) -> Option<PathBuf> {
    std::fs::metadata(path)
        .is_ok_and(|m| m.is_file())
        .then(|| path.to_path_buf())
}

/// `path` with its `..` folded away lexically, for a reason to quote
/// (`<repo>/cli/../.ci-work/x` → `<repo>/.ci-work/x`).
pub fn tidy(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            std::path::Component::ParentDir if out.file_name().is_some() => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

/// The skip policy, read from the environment once per call of [`skip`].
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// `BABYSITTER_REQUIRE_ALL=1`: fail instead of skipping.
    pub require_all: bool,
    /// `BABYSITTER_SKIP_LOG`: the file to append `SKIPPED:` lines to.
    pub log: Option<PathBuf>,
}

impl Policy {
    /// The policy the environment asks for.
    pub fn from_env() -> Self {
        Self {
            require_all: std::env::var(REQUIRE_ALL_ENV).as_deref() == Ok("1"),
            log: std::env::var_os(SKIP_LOG_ENV)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from),
        }
    }

    /// Fails (`require_all`) or records the skip of `test`.
    #[track_caller]
    pub fn skip(&self, test: &str, reason: &str) {
        if self.require_all {
            panic!(
                "{test} cannot run: {reason} ({REQUIRE_ALL_ENV}=1: every prerequisite must be \
                 there; without it this test would be skipped)"
            );
        }
        let line = format!("SKIPPED: {test}: {reason}\n");
        eprint!("{line}");
        if let Some(log) = &self.log {
            // One `write` of one short line on an O_APPEND file: lines of tests running in
            // parallel processes do not interleave.
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .and_then(|mut f| f.write_all(line.as_bytes()));
            if let Err(e) = written {
                panic!(
                    "cannot record the skip in {SKIP_LOG_ENV}={}: {e}; {line}",
                    log.display()
                );
            }
        }
    }
}

/// `<binary> <test>` as nextest prints it (`NEXTEST_BINARY_ID`, `NEXTEST_TEST_NAME`); under
/// `cargo test`, the test binary's file name and libtest's thread name.
fn current_test() -> String {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let binary = var("NEXTEST_BINARY_ID").unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .unwrap_or_else(|| "unknown-binary".to_owned())
    });
    let test = var("NEXTEST_TEST_NAME").unwrap_or_else(|| {
        std::thread::current()
            .name()
            .filter(|n| *n != "main")
            .unwrap_or("unknown-test")
            .to_owned()
    });
    format!("{binary} {test}")
}
