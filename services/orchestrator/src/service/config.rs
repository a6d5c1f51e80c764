//! The `orchestrator` binary's configuration (env prefix `BABYSITTER_ORCHESTRATOR`), layered
//! like every babysitter service: defaults → TOML → env → `--set` → flags.
//!
//! The journal is either in-process over a store URL (`[journal.store]`, the same keys as the
//! `journal` binary) or remote (`journal.remote = "http://…"`: the orchestrator keeps its own
//! verified view over the `JournalService`, see `babysitter_journal::remote`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use babysitter_common::EnvMap;
use babysitter_common::auth::Secret;
use babysitter_common::server::ServerConfig;
use babysitter_common::telemetry::TelemetryConfig;
use babysitter_journal::config::{LimitsConfig, StoreConfig, open_store};
use babysitter_journal::remote::RemoteStore;
use babysitter_journal::store::JournalStore;
use serde::{Deserialize, Serialize};

use super::bundle::BundleLimits;
use super::queue::QueueConfig;
use super::runs::ManagerConfig;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct OrchestratorConfig {
    /// Config format version. Since v0.1.
    pub version: u32,
    /// Listener, limits, auth (tokens per role and namespace). Since v0.1.
    pub server: ServerConfig,
    /// Log filter and format. Since v0.1.
    pub telemetry: TelemetryConfig,
    /// Where runs are journaled. Since v0.1.
    pub journal: JournalConfig,
    /// The process engine. Since v0.1.
    pub engine: EngineConfig,
    /// Task queue and leases. Since v0.1.
    pub queue: QueueSettings,
    /// Run manager. Since v0.1.
    pub runs: RunsSettings,
    /// Secrets kept out of journals and events. Since v0.1.
    pub secrets: SecretsConfig,
    /// One active orchestrator per journal, the others standing by. Since v0.4.
    pub leadership: LeadershipSettings,
}

/// The journal's leadership lease (see `babysitter_journal::leadership` and the `leader`
/// module): the active orchestrator holds it and writes under its epoch; the others stand by,
/// forward their callers to it, and take over when it lapses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct LeadershipSettings {
    /// Take the lease before writing (off: this process writes unfenced, as the only
    /// orchestrator of its journal). Since v0.4.
    pub enabled: bool,
    /// The lease's name; orchestrators sharing a journal share it. Since v0.4.
    pub group: String,
    /// How long the lease lasts without a renewal, ms (500..=600000): a standby takes over
    /// this long after the active one stopped renewing. Renewed every third of it. Since v0.4.
    pub ttl_ms: u64,
    /// How often a standby asks for the lease, ms (unset: a tenth of the ttl). Since v0.4.
    pub poll_interval_ms: Option<u64>,
    /// The URL standbys forward callers to (`http://host:port`); unset: the bound listen
    /// address, `https://` when `[server.tls]` is on. Since v0.4.
    pub advertise_url: Option<String>,
    /// TLS when forwarding to the active instance: its CA, this instance's client
    /// certificate. Since v0.5.
    pub tls: babysitter_common::tls::ClientTlsConfig,
}

impl Default for LeadershipSettings {
    fn default() -> Self {
        Self {
            enabled: true,
            group: babysitter_journal::leadership::DEFAULT_GROUP.to_owned(),
            ttl_ms: 5000,
            poll_interval_ms: None,
            advertise_url: None,
            tls: babysitter_common::tls::ClientTlsConfig::default(),
        }
    }
}

impl LeadershipSettings {
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms)
    }

    /// Why this lease does not suit task leases of `task_lease`, if it does not: a fail-over
    /// takes about one ttl, and a worker that cannot renew its task lease for four fifths of it
    /// kills the task, which then runs again.
    pub fn unsuited_to(&self, task_lease: Duration) -> Option<String> {
        (self.ttl() * 2 > task_lease).then(|| {
            format!(
                "leadership.ttl-ms ({} ms) is more than half of queue.lease-duration-ms ({} ms): a fail-over may outlast task leases, and workers then stop their running tasks, which run again",
                self.ttl().as_millis(),
                task_lease.as_millis()
            )
        })
    }

    pub fn poll_interval(&self) -> Duration {
        self.poll_interval_ms
            .map(Duration::from_millis)
            .unwrap_or(self.ttl() / 10)
            .max(Duration::from_millis(10))
    }
}

/// The journal as a leader-elected orchestrator sees it: the store it writes through (fenced by
/// `term`) and who keeps its lease.
pub struct FencedJournal {
    pub store: Arc<dyn JournalStore>,
    pub keeper: Arc<dyn babysitter_journal::leadership::LeaseKeeper>,
    pub term: Arc<babysitter_journal::leadership::WriterTerm>,
}

/// Named secrets: their values are redacted wherever they would be stored or relayed, and task
/// definitions refer to them as `{"$secret": "NAME"}`, resolved only in what a worker receives.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct SecretsConfig {
    /// Environment variables whose values are secrets, named after the variable. Since v0.1.
    pub env: Vec<String>,
    /// Secrets read from files: name → path (whitespace trimmed). Since v0.1.
    pub files: std::collections::BTreeMap<String, PathBuf>,
}

impl SecretsConfig {
    /// The redactor; an unset variable is skipped with a warning, an unreadable file is an error.
    pub fn redactor(&self, env: &EnvMap) -> anyhow::Result<babysitter_journal::redact::Redactor> {
        let mut secrets = Vec::new();
        for name in &self.env {
            match env.get_non_empty(name) {
                Some(v) => secrets.push((name.clone(), v.to_owned())),
                None => tracing::warn!(secret = %name, "secret variable is not set"),
            }
        }
        for (name, path) in &self.files {
            let value = std::fs::read_to_string(path).map_err(|e| {
                anyhow::anyhow!("cannot read secret {name} from {}: {e}", path.display())
            })?;
            secrets.push((name.clone(), value.trim().to_owned()));
        }
        Ok(babysitter_journal::redact::Redactor::new(secrets)?)
    }
}

impl Default for OrchestratorConfig {
    fn default() -> Self {
        Self {
            version: 1,
            server: ServerConfig::with_listen_addr(std::net::SocketAddr::from((
                [127, 0, 0, 1],
                50052,
            ))),
            telemetry: TelemetryConfig::default(),
            journal: JournalConfig::default(),
            engine: EngineConfig::default(),
            queue: QueueSettings::default(),
            runs: RunsSettings::default(),
            secrets: SecretsConfig::default(),
            leadership: LeadershipSettings::default(),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct JournalConfig {
    /// URL of a remote `JournalService` (`http://127.0.0.1:50051`, `https://…` for TLS);
    /// unset = in-process store. Since v0.1.
    pub remote: Option<String>,
    /// Bearer token for the remote journal, read from this file. Since v0.1.
    pub token_file: Option<PathBuf>,
    /// TLS to the remote journal: its CA, this orchestrator's client certificate. Since v0.5.
    pub tls: babysitter_common::tls::ClientTlsConfig,
    /// The in-process store (ignored with `remote`). Since v0.1.
    pub store: StoreConfig,
    /// Journal limits. Since v0.1.
    pub limits: LimitsConfig,
    /// How long a start waits for the journal to answer before failing, seconds (unset: 30).
    /// Since v0.1.
    pub ready_timeout_secs: Option<u64>,
}

impl JournalConfig {
    /// How long a start waits for the journal to answer.
    pub fn ready_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.ready_timeout_secs.unwrap_or(30))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct EngineConfig {
    /// Local directory where process bundles are materialized for the engine. Default: the
    /// store's own directory for a `file://` store, else `./.babysitter/orchestrator/runs`.
    /// Since v0.1.
    pub runs_dir: Option<PathBuf>,
    /// JS heap limit per run, MiB. Since v0.1.
    pub memory_limit_mib: usize,
    /// CPU time per iteration, seconds. Since v0.1.
    pub cpu_limit_secs: u64,
    /// Warm JS sessions kept. Since v0.1.
    pub cached_runs: usize,
    /// JS threads (cold starts, replays, runs whose JS takes long). Since v0.1.
    pub js_threads: usize,
    /// Time slice, in ms, a warm iteration's JS gets on the runtime thread that serves the run
    /// before it is cut off and the run replays on a JS thread (`engine::pool`); 0 runs all JS on
    /// the JS threads (a thread hop per iteration). Since v0.2.
    pub inline_slice_ms: u64,
    /// This orchestrator is the only writer of its runs (one active orchestrator per journal):
    /// reads skip checking the store for other writers; a write that meets one is re-read and
    /// retried. Turn off when other processes write the same runs often. Since v0.1.
    pub exclusive_writer: bool,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            runs_dir: None,
            memory_limit_mib: 256,
            cpu_limit_secs: 30,
            cached_runs: 1024,
            js_threads: 2,
            inline_slice_ms: 20,
            exclusive_writer: true,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct QueueSettings {
    /// Lease length without a heartbeat, ms. Since v0.1.
    pub lease_duration_ms: u64,
    /// Heartbeat period told to workers, ms. Since v0.1.
    pub heartbeat_interval_ms: u64,
    /// Longest long-poll, ms. Since v0.1.
    pub max_poll_wait_ms: u64,
    /// Attempts before a task fails. Since v0.1.
    pub max_attempts: u32,
    /// First retry backoff, ms (doubles per attempt). Since v0.1.
    pub retry_backoff_ms: u64,
    /// Largest retry backoff, ms. Since v0.1.
    pub retry_backoff_max_ms: u64,
    /// Tasks running at once per run. Since v0.1.
    pub per_run_limit: usize,
    /// Tasks running at once per namespace. Since v0.1.
    pub per_namespace_limit: usize,
}

impl Default for QueueSettings {
    fn default() -> Self {
        let q = QueueConfig::default();
        Self {
            lease_duration_ms: q.lease_duration.as_millis() as u64,
            heartbeat_interval_ms: q.heartbeat_interval.as_millis() as u64,
            max_poll_wait_ms: q.max_poll_wait.as_millis() as u64,
            max_attempts: q.max_attempts,
            retry_backoff_ms: q.retry_backoff.as_millis() as u64,
            retry_backoff_max_ms: q.retry_backoff_max.as_millis() as u64,
            per_run_limit: q.per_run_limit,
            per_namespace_limit: q.per_namespace_limit,
        }
    }
}

impl QueueSettings {
    pub fn queue_config(&self) -> QueueConfig {
        QueueConfig {
            lease_duration: Duration::from_millis(self.lease_duration_ms.max(1)),
            heartbeat_interval: Duration::from_millis(self.heartbeat_interval_ms.max(1)),
            max_poll_wait: Duration::from_millis(self.max_poll_wait_ms),
            max_attempts: self.max_attempts.max(1),
            retry_backoff: Duration::from_millis(self.retry_backoff_ms),
            retry_backoff_max: Duration::from_millis(self.retry_backoff_max_ms),
            per_run_limit: self.per_run_limit.max(1),
            per_namespace_limit: self.per_namespace_limit.max(1),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct RunsSettings {
    /// Lease expiry / routing check period, ms. Since v0.1.
    pub sweep_interval_ms: u64,
    /// Drop warm JS sessions of runs that wait on no worker. Since v0.1.
    pub evict_idle_sessions: bool,
    /// Most files in a process bundle. Since v0.1.
    pub max_bundle_files: usize,
    /// Largest process bundle, bytes. A bundle arrives in one `CreateRun` request, so
    /// `server.max-decoding-message-size` (64 MiB by default) bounds it too. Since v0.1.
    pub max_bundle_bytes: usize,
    /// Finished runs whose final summary is kept in memory (the most recently finished or read);
    /// `GetRun` / `ListRuns` read older ones from the journal, and a `CreateRun` retry is
    /// deduplicated by its idempotency key while its run is live or cached. Since v0.3.
    pub finished_runs_cached: usize,
    /// Default budgets by namespace (`default` for every namespace without its own); a
    /// `CreateRun` budget's limits override them one by one. Since v0.5.
    pub budgets: std::collections::BTreeMap<String, super::budget::Budget>,
}

impl Default for RunsSettings {
    fn default() -> Self {
        let b = BundleLimits::default();
        Self {
            sweep_interval_ms: 1000,
            evict_idle_sessions: true,
            max_bundle_files: b.max_files,
            max_bundle_bytes: b.max_total_bytes,
            finished_runs_cached: super::runs::DEFAULT_FINISHED_RUNS_CACHED,
            budgets: Default::default(),
        }
    }
}

impl RunsSettings {
    pub fn manager_config(&self) -> ManagerConfig {
        ManagerConfig {
            bundle_limits: BundleLimits {
                max_files: self.max_bundle_files,
                max_total_bytes: self.max_bundle_bytes,
            },
            sweep_interval: Duration::from_millis(self.sweep_interval_ms.max(10)),
            evict_idle_sessions: self.evict_idle_sessions,
            finished_runs_cached: self.finished_runs_cached,
            budgets: self.budgets.clone(),
            ..ManagerConfig::default()
        }
    }
}

impl OrchestratorConfig {
    /// The journal store: remote service or in-process backend.
    pub async fn open_journal_store(&self, env: &EnvMap) -> anyhow::Result<Arc<dyn JournalStore>> {
        if let Some(url) = &self.journal.remote {
            let token = Secret::from_optional_file(self.journal.token_file.as_deref())
                .map_err(anyhow::Error::msg)?;
            return Ok(Arc::new(RemoteStore::connect_tls(
                url,
                token.as_ref(),
                &self.journal.tls,
            )?));
        }
        open_store(&self.journal.store, &self.journal.limits, env)
            .await
            .map_err(|e| anyhow::anyhow!("cannot use store {}: {e}", self.journal.store.url))
    }

    /// The journal store with leadership: every write fenced by the returned term — by the
    /// journal service (remote) or by this process's own arbiter over the store (in-process).
    pub async fn open_fenced_journal(&self, env: &EnvMap) -> anyhow::Result<FencedJournal> {
        use babysitter_journal::leadership::{Arbiter, FencedStore, WriterTerm};
        let term = WriterTerm::new();
        let group = &self.leadership.group;
        if let Some(url) = &self.journal.remote {
            let token = Secret::from_optional_file(self.journal.token_file.as_deref())
                .map_err(anyhow::Error::msg)?;
            let remote = Arc::new(
                RemoteStore::connect_tls(url, token.as_ref(), &self.journal.tls)?
                    .with_fence(term.clone(), group),
            );
            return Ok(FencedJournal {
                store: remote.clone(),
                keeper: remote,
                term,
            });
        }
        let inner = self.open_journal_store(env).await?;
        let arbiter = Arc::new(Arbiter::new(inner.clone()));
        Ok(FencedJournal {
            store: Arc::new(FencedStore::new(
                inner,
                arbiter.clone(),
                term.clone(),
                group,
            )),
            keeper: arbiter,
            term,
        })
    }

    /// Engine options from `[engine]`, reading process files under `runs_dir`.
    pub fn engine_options(&self, runs_dir: PathBuf) -> crate::engine::EngineOptions {
        let e = &self.engine;
        let mut o = crate::engine::EngineOptions::new(runs_dir);
        o.memory_limit = e.memory_limit_mib * 1024 * 1024;
        o.cpu_limit = Duration::from_secs(e.cpu_limit_secs.max(1));
        o.cached_runs = e.cached_runs.max(1);
        o.js_threads = e.js_threads.max(1);
        o.js_placement = if e.inline_slice_ms == 0 {
            crate::engine::JsPlacement::Threads
        } else {
            crate::engine::JsPlacement::InlineWarm {
                slice: Duration::from_millis(e.inline_slice_ms),
            }
        };
        o.exclusive_writer = e.exclusive_writer;
        // Tasks are dispatched from the journal's index, not from babysitter's nextActions.
        o.next_actions = false;
        // The manager creates and drives subprocess runs (`runs::subprocess`).
        o.subprocesses = true;
        o
    }

    /// The run manager this config describes over `journal`: engine, queue (with a fresh
    /// incarnation id), every unfinished run resumed, the lease sweeper running. Returns it and
    /// the number of runs resumed. Its recovered tasks stay held for the workers that ran them
    /// until a `WorkerApi` is built over it (`Services::new`, right before serving).
    pub async fn start_manager(
        &self,
        journal: babysitter_journal::Journal,
        runs_dir: PathBuf,
        secrets: Arc<babysitter_journal::redact::Redactor>,
    ) -> anyhow::Result<(super::runs::RunManager, usize)> {
        let engine = crate::engine::Engine::new(journal, self.engine_options(runs_dir))?;
        let queue = super::queue::TaskQueue::new(
            self.queue.queue_config(),
            ulid::Ulid::generate().to_string(),
        );
        // The recovered tasks' adoption grace starts when workers can reach this manager
        // ([`super::runs::RunManager::open_to_workers`]), not while recovery still runs.
        queue.hold_adoption();
        let mut manager_config = self.runs.manager_config();
        manager_config.secrets = secrets;
        let manager = super::runs::RunManager::new(engine, queue, manager_config);
        let resumed = manager.recover().await?;
        manager.spawn_sweeper();
        Ok((manager, resumed))
    }

    /// Where the engine reads process files.
    pub fn runs_dir(&self) -> PathBuf {
        if let Some(d) = &self.engine.runs_dir {
            return d.clone();
        }
        match self.journal.store.url.strip_prefix("file://") {
            Some(path) if self.journal.remote.is_none() => PathBuf::from(path),
            _ => PathBuf::from("./.babysitter/orchestrator/runs"),
        }
    }
}

impl babysitter_common::main_support::HealthPort for OrchestratorConfig {
    fn health_port(&self) -> Option<&babysitter_common::server::ServerConfig> {
        Some(&self.server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_lease_suits_the_default_task_lease_and_a_long_one_is_named() {
        let c = OrchestratorConfig::default();
        assert!(c.leadership.enabled);
        assert_eq!(
            c.leadership
                .unsuited_to(c.queue.queue_config().lease_duration),
            None
        );
        let long = LeadershipSettings {
            ttl_ms: 20_000,
            ..LeadershipSettings::default()
        };
        let warning = long
            .unsuited_to(Duration::from_secs(30))
            .expect("a 20 s lease over 30 s task leases is named");
        assert!(warning.contains("20000 ms"), "{warning}");
        assert!(warning.contains("30000 ms"), "{warning}");
        assert_eq!(long.poll_interval(), Duration::from_secs(2));
    }
}
