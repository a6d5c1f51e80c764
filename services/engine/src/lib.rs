//! The process engine: runs babysitter processes unchanged in embedded QuickJS and turns each
//! `ctx` call into an effect with babysitter's exact identity, replaying deterministically
//! against the journal.
//!
//! - [`identity`]: babysitter's effect identity — ICU root collation (`localeCompare`), argument
//!   shapes, step ids, invocation keys and hashes, parallel group ids, key-sorted clones.
//! - [`host`]: the embedded QuickJS host — runtime limits, the ES module loader confined to the
//!   process folder, Node built-in shims.
//! - [`session`]: one run's live JS session (engine runtime, SDK module, the process promise).
//! - [`pool`]: where runs' JS executes (inline or on the JS threads) and the warm sessions.
//! - [`views`]: what a journaled effect hands to the process.
//! - [`iteration`]: one iteration — load, replay or continue, journal the batch, report.

pub mod breakpoints;
pub mod commit;
mod drive;
mod host;
pub mod identity;
pub mod iteration;
mod js_value;
pub mod lifecycle;
/// Maps and sets private to the engine, keyed by invocation keys, effect ids and paths a run's
/// own process produces: hashed with FxHash (an iteration does a few dozen lookups, and SipHash
/// was a visible share of a warm one; a process could only slow down its own run).
pub type FastMap<K, V> = std::collections::HashMap<K, V, rustc_hash::FxBuildHasher>;
pub type FastSet<T> = std::collections::HashSet<T, rustc_hash::FxBuildHasher>;
mod js_shape;
#[cfg(test)]
mod js_test;
mod pool;
mod process_file;
pub mod process_log;
mod session;
pub mod subprocess;
pub mod task_files;
pub mod views;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use babysitter_journal::{Journal, JournalError};

pub use host::HostError;
pub use iteration::{Iteration, IterationStatus};
pub use pool::JsPlacement;
pub use session::{EntryCheck, LogLine, ProcessState};

/// Wall clock in epoch milliseconds (injectable for tests and golden reproduction).
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;
/// ULID source for effect ids (injectable for golden reproduction).
pub type IdSource = Arc<dyn Fn() -> String + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Host(#[from] host::HostError),
    #[error("run {run_id}: {reason}")]
    InvalidRun { run_id: String, reason: String },
    #[error("run {run_id}: result of effect {effect_id} is missing")]
    MissingResult { run_id: String, effect_id: String },
    #[error("run {run_id}: {what} is corrupt: {reason}")]
    Corrupt {
        run_id: String,
        what: String,
        reason: String,
    },
    #[error("engine error: {0}")]
    Engine(String),
}

/// Engine settings.
#[derive(Clone)]
pub struct EngineOptions {
    /// Where babysitter run directories live (filesystem layout): process files are resolved
    /// from `<runs_root>/<runId>/` + `entrypoint.importPath`.
    pub runs_root: PathBuf,
    /// JS heap limit per run (default 256 MiB).
    pub memory_limit: usize,
    /// CPU time per drive of a run's JS (default 30 s).
    pub cpu_limit: Duration,
    /// Warm sessions kept across all JS threads.
    pub cached_runs: usize,
    /// JS worker threads (none with [`JsPlacement::CallingThread`]).
    pub js_threads: usize,
    /// Which thread runs a run's JS: see [`pool`]. The default runs warm continuations inline
    /// under a time slice; a process driving a single run (the CLI) can choose
    /// [`JsPlacement::CallingThread`] and start no JS thread at all.
    pub js_placement: JsPlacement,
    /// Keep sessions warm between iterations (false: every iteration replays cold).
    pub warm: bool,
    pub clock: Clock,
    pub ids: Option<IdSource>,
    /// What processes see as `process.env` (nothing of the host's environment leaks in).
    pub process_env: std::collections::BTreeMap<String, String>,
    /// This process is the only writer of the runs it iterates (an orchestrator owning its
    /// journal): reads skip checking the store for other writers' events. A write that meets
    /// another writer's event still fails with a conflict, after which the run is re-read.
    pub exclusive_writer: bool,
    /// Build babysitter's `nextActions` every iteration (the CLI prints them). The service,
    /// which dispatches from the index, turns it off: for every effect still pending it costs a
    /// `task.json` read per iteration (a fan-out of 1,000 would read 999 files per result).
    pub next_actions: bool,
    /// Also append each new `ctx.log` line to `<dir>/<runId>/process.log`, babysitter's
    /// structured log ([`process_log`]); the CLI sets it to `~/.a5c/logs`. Lines always go to
    /// `tracing`.
    pub process_log_dir: Option<PathBuf>,
    /// The breakpoint auto-approval rules file (`~/.a5c/breakpoint-approvals/rules.json` for the
    /// CLI) a breakpoint's `autoApproval` is computed from ([`breakpoints`]); `None`: no rules.
    pub breakpoint_rules: Option<PathBuf>,
    /// The folder processes' imports are confined to; `None`: the project the entry file
    /// belongs to ([`process_file::process_root`]).
    pub process_root: Option<PathBuf>,
    /// This executor creates and drives the child run of a `ctx.subprocess` effect (the
    /// orchestrator and `babysitter run` do). Off, `ctx.subprocess` throws babysitter's
    /// `RunFailedError` (its `run:iterate` enables them only in plugin mode, where the harness
    /// makes the child run).
    pub subprocesses: bool,
}

/// Babysitter's entry check ([`Engine::check_entry`]) outside any run: an engine of its own that
/// reads and writes no journal. `process_root`: as [`EngineOptions::process_root`].
pub async fn check_entry(
    entry: &std::path::Path,
    export_name: Option<&str>,
    process_root: Option<PathBuf>,
) -> Result<session::EntryCheck, EngineError> {
    let unused = std::env::temp_dir().join("babysitter-entry-check");
    let journal = Journal::new(
        Arc::new(babysitter_journal::fs::FsStore::new(&unused)),
        babysitter_journal::JournalOptions::default(),
    );
    let mut options = EngineOptions::new(unused);
    options.js_placement = JsPlacement::CallingThread;
    options.js_threads = 1;
    options.cached_runs = 1;
    options.warm = false;
    options.cpu_limit = Duration::from_secs(10);
    options.process_root = process_root;
    Engine::new(journal, options)?
        .check_entry(entry, export_name)
        .await
}

/// The folder inside a run directory a service materializes a run's process bundle into;
/// imports of a bundled process stay inside it.
pub const BUNDLE_DIR: &str = "process";

impl std::fmt::Debug for EngineOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineOptions")
            .field("runs_root", &self.runs_root)
            .field("memory_limit", &self.memory_limit)
            .field("cpu_limit", &self.cpu_limit)
            .field("cached_runs", &self.cached_runs)
            .field("js_threads", &self.js_threads)
            .field("js_placement", &self.js_placement)
            .field("warm", &self.warm)
            .finish_non_exhaustive()
    }
}

impl EngineOptions {
    pub fn new(runs_root: impl Into<PathBuf>) -> Self {
        Self {
            runs_root: runs_root.into(),
            memory_limit: 256 * 1024 * 1024,
            cpu_limit: Duration::from_secs(30),
            cached_runs: 1024,
            js_threads: 2,
            js_placement: JsPlacement::default(),
            warm: true,
            clock: Arc::new(|| chrono::Utc::now().timestamp_millis()),
            ids: None,
            process_env: Default::default(),
            exclusive_writer: false,
            next_actions: true,
            process_log_dir: None,
            breakpoint_rules: None,
            process_root: None,
            subprocesses: false,
        }
    }
}

/// The engine. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    journal: Journal,
    options: EngineOptions,
    pool: pool::Pool,
    code_hashes: process_file::CodeHashes,
    /// `run.json` / `inputs.json` per run, kept by an exclusive writer (they do not change under
    /// it) so an iteration does not re-read and re-parse them.
    run_files: std::sync::Mutex<
        std::collections::HashMap<String, Arc<babysitter_journal::store::RunFiles>>,
    >,
}

impl Engine {
    pub fn new(journal: Journal, options: EngineOptions) -> Result<Self, EngineError> {
        let pool = pool::Pool::new(
            options.js_threads,
            options.cached_runs,
            options.js_placement,
        )?;
        Ok(Self {
            inner: Arc::new(Inner {
                journal,
                options,
                pool,
                code_hashes: Default::default(),
                run_files: Default::default(),
            }),
        })
    }

    pub fn journal(&self) -> &Journal {
        &self.inner.journal
    }

    pub fn options(&self) -> &EngineOptions {
        &self.inner.options
    }

    pub(crate) fn pool(&self) -> &pool::Pool {
        &self.inner.pool
    }

    /// Warm sessions held and their JS heap bytes.
    pub async fn cache_stats(&self) -> Result<(usize, usize), EngineError> {
        Ok(self.inner.pool.stats())
    }

    /// Drops the run's warm session: its next iteration replays cold.
    pub async fn evict(&self, run_id: &str) -> Result<(), EngineError> {
        self.inner
            .run_files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(run_id);
        self.inner.pool.evict(run_id);
        Ok(())
    }

    /// SHA-256 of a process file, re-read only when the file changed.
    pub(crate) fn code_hash(&self, path: &std::path::Path) -> std::io::Result<String> {
        self.inner.code_hashes.hash(path)
    }

    /// The run's head and effect index (see [`EngineOptions::exclusive_writer`] for how fresh).
    pub async fn view<R>(
        &self,
        run_id: &str,
        f: impl FnOnce(&babysitter_journal::Head, &babysitter_journal::index::EffectIndex) -> R,
    ) -> Result<R, JournalError> {
        if self.inner.options.exclusive_writer {
            self.inner.journal.inspect_now(run_id, f).await
        } else {
            self.inner.journal.inspect(run_id, f).await
        }
    }

    /// The run's `run.json` and `inputs.json` (cached by an exclusive writer).
    pub(crate) async fn run_files(
        &self,
        run_id: &str,
    ) -> Result<Arc<babysitter_journal::store::RunFiles>, JournalError> {
        let exclusive = self.inner.options.exclusive_writer;
        if exclusive
            && let Some(f) = self
                .inner
                .run_files
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(run_id)
        {
            return Ok(f.clone());
        }
        let files = Arc::new(self.inner.journal.run_files(run_id).await?);
        if exclusive {
            let mut cache = self
                .inner
                .run_files
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if cache.len() >= self.inner.options.cached_runs.max(1) * 2 {
                cache.clear();
            }
            cache.insert(run_id.to_owned(), files.clone());
        }
        Ok(files)
    }

    pub(crate) fn now_ms(&self) -> i64 {
        (self.inner.options.clock)()
    }
}

/// `Date.prototype.toISOString` of an epoch-ms time (for four-digit years; others keep
/// chrono's `%Y`).
pub fn iso(ms: i64) -> String {
    use chrono::Datelike;
    let t = chrono::DateTime::from_timestamp_millis(ms).unwrap_or_default();
    if (0..=9999).contains(&t.year()) {
        // The same text as the format string below, without parsing a format string per call.
        t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    } else {
        t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn iso_prints_what_to_iso_string_prints() {
        assert_eq!(super::iso(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::iso(1_735_689_605_007), "2025-01-01T00:00:05.007Z");
        assert_eq!(super::iso(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
    }
}
