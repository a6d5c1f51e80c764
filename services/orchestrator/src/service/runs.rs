//! The run manager: creates runs, iterates each one after every resolution, dispatches what it
//! asks for (worker tasks to the [`TaskQueue`], sleeps to durable timers, breakpoints to
//! approvers), and publishes every run's summary for `GetRun` / `ListRuns` / `WatchRun`.
//!
//! Everything the manager keeps about a run lives in one entry of the run table (`table.rs`):
//! its summary (a `watch` channel every change is published on), lock, driver, timers, bundle
//! state and live agent-event channel. A run's entry shrinks to its final summary when it ends
//! and joins a bounded cache of finished runs; older ones are read back from the journal.
//!
//! - `driver.rs`: iteration drivers, dispatch, sleep timers, the lease sweep.
//! - `resolve.rs`: worker completions, posted results, breakpoint decisions, cancel, halt.
//! - `watch.rs`: [`RunWatch`], a run's events, summary changes and agent events, without polling.
//! - `agents.rs`: live agent events, from the worker that reports them to the run's watchers.
//! - `query.rs`: `get` / `list`, through the table or the journal.
//! - `recovery.rs`: the table rebuilt from the journal at start.
//! - `client.rs`: client-driven runs, iterated when their client asks (`IterateRun`).
//!
//! Iterations of one run never overlap: a per-run driver coalesces resolutions that arrive while
//! an iteration runs into one follow-up iteration (a fan-out of 1,000 completions costs a handful
//! of iterations, not 1,000). Every write to a run's journal happens under its lock, so a result
//! is committed only while its effect is pending and exactly one `EFFECT_RESOLVED` exists per
//! effect even when a worker, a posted result and a breakpoint decision race.
//!
//! Nothing here is durable except through the journal: on start [`RunManager::recover`] lists
//! every run and iterates the unfinished ones, which re-queues their requested-but-unresolved
//! effects (held briefly so their previous workers can adopt them).

pub mod agents;
mod client;
mod driver;
mod query;
mod recovery;
mod resolve;
mod sessions;
mod spend;
mod subprocess;
mod table;
mod tasks;
mod trace;
mod watch;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use babysitter_journal::store::RunFiles;
use babysitter_journal::{EventType, Journal, JournalError, NewEvent};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

pub use agents::{AgentBatch, AgentEvent, AgentEventSource};
pub use resolve::{Decision, RequestUsage, TaskOutcome, TaskUsage, Usage};
pub use spend::{RunCost, TaskCost, task_costs};
pub use tasks::{LogHead, TaskDetail, TaskInfo, TaskState};
pub use watch::{RunWatch, WatchUpdate};

use super::budget::Budget;
use super::bundle::{self, Bundle, BundleLimits, PROCESS_DIR};
use super::queue::TaskQueue;
use super::{Result, ServiceError};
use crate::engine::Engine;
use crate::engine::lifecycle::{self, Entrypoint, new_completion_proof};
use table::RunTable;

/// Where a run is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RunStatus {
    Created,
    Running,
    Waiting,
    Completed,
    Failed,
    Halted,
    Cancelled,
}

impl RunStatus {
    /// The status a terminal lifecycle event gives a run (`None` for any other event); a
    /// `RUN_FAILED` marked `cancelled` is a cancellation.
    pub fn of_terminal_event(event_type: &str, data: &Value) -> Option<Self> {
        match event_type {
            "RUN_COMPLETED" => Some(Self::Completed),
            "RUN_HALTED" => Some(Self::Halted),
            "RUN_FAILED" if data.get("cancelled") == Some(&Value::Bool(true)) => {
                Some(Self::Cancelled)
            }
            "RUN_FAILED" => Some(Self::Failed),
            _ => None,
        }
    }

    /// The lower-case name (metrics labels).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Running => "running",
            Self::Waiting => "waiting",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Halted => "halted",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Halted | Self::Cancelled
        )
    }
}

/// A run as `GetRun` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    pub run_id: String,
    pub namespace: String,
    pub status: RunStatus,
    pub labels: BTreeMap<String, String>,
    pub process_id: String,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
    pub head_seq: u64,
    pub pending_by_kind: BTreeMap<String, u32>,
    pub status_reason: String,
    pub output: Option<Value>,
    pub error: Option<Value>,
    /// Iterated by its client (`IterateRun`), never by the manager, and none of its effects
    /// dispatched to workers (see `client.rs`).
    pub client_driven: bool,
    /// What it may spend (see `service::budget`).
    pub budget: Option<Budget>,
    /// Set for a subprocess run: the run and effect its end resolves.
    pub parent: Option<Parent>,
    /// The W3C context of the run's root span, which its iterations and tasks are children of
    /// (see `runs/trace.rs`); `None` when the run has none stored.
    pub trace: Option<babysitter_common::telemetry::W3cContext>,
}

/// The run and effect a subprocess run resolves (babysitter's run.json `nested`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parent {
    pub run_id: String,
    pub effect_id: String,
}

impl Parent {
    /// From run.json's `nested.parentRunId` / `parentEffectId` (both needed: a nested run made
    /// by babysitter without its effect is not one this orchestrator resolves).
    pub fn of_run_json(run_json: &Value) -> Option<Self> {
        run_json.get("nested").and_then(Self::of_nested)
    }

    /// From a `nested` object.
    pub fn of_nested(nested: &Value) -> Option<Self> {
        let text = |k: &str| nested.get(k).and_then(Value::as_str).map(str::to_owned);
        Some(Self {
            run_id: text("parentRunId")?,
            effect_id: text("parentEffectId")?,
        })
    }
}

impl RunSummary {
    pub fn pending(&self) -> u32 {
        self.pending_by_kind.values().sum()
    }
}

/// A request to create a run.
#[derive(Debug, Clone, Default)]
pub struct NewRun {
    pub namespace: String,
    pub bundle: Bundle,
    pub inputs: Option<Value>,
    pub labels: BTreeMap<String, String>,
    pub run_id: Option<String>,
    pub process_id: Option<String>,
    pub request: Option<String>,
    pub prompt: Option<String>,
    pub idempotency_key: Option<String>,
    /// The client iterates the run (babysitter's own loop against this server).
    pub client_driven: bool,
    /// What the run may spend (merged over the namespace's default).
    pub budget: Option<Budget>,
    /// babysitter's run.json `nested` of a subprocess run (see [`Parent`]).
    pub nested: Option<Value>,
}

/// Run manager settings.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    pub bundle_limits: BundleLimits,
    /// How often leases are checked for expiry and unroutable tasks reported.
    pub sweep_interval: Duration,
    /// Drop a run's warm JS session while it waits on nothing a worker is doing (a breakpoint, a
    /// sleep): idle runs then cost only their summary; the next iteration replays cold.
    pub evict_idle_sessions: bool,
    /// Delay before retrying an iteration that failed for a transient reason.
    pub retry_delay: Duration,
    /// Known secrets: redacted from what is stored and relayed, resolved into the tasks workers
    /// receive (`{"$secret": "NAME"}` placeholders).
    pub secrets: Arc<babysitter_journal::redact::Redactor>,
    /// Finished runs whose final summary stays in memory (the most recently finished or read);
    /// others are read from the journal when asked for. Bounds the run table: live runs plus
    /// this many.
    pub finished_runs_cached: usize,
    /// Default budgets by namespace (`default`: every other namespace).
    pub budgets: BTreeMap<String, Budget>,
}

/// The default of [`ManagerConfig::finished_runs_cached`]: a summary is a few hundred bytes
/// plus the run's output, so this is a few MiB for typical outputs.
pub const DEFAULT_FINISHED_RUNS_CACHED: usize = 4096;

impl Default for ManagerConfig {
    fn default() -> Self {
        Self {
            bundle_limits: BundleLimits::default(),
            sweep_interval: Duration::from_secs(1),
            evict_idle_sessions: true,
            retry_delay: Duration::from_secs(2),
            secrets: Arc::default(),
            finished_runs_cached: DEFAULT_FINISHED_RUNS_CACHED,
            budgets: BTreeMap::new(),
        }
    }
}

pub const DEFAULT_NAMESPACE: &str = "default";

/// The run manager. Cheap to clone.
#[derive(Debug, Clone)]
pub struct RunManager {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    engine: Engine,
    queue: TaskQueue,
    config: ManagerConfig,
    /// Every live run's entry and the bounded cache of finished ones (see `table.rs`).
    runs: StdMutex<RunTable>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    /// The engine of client-driven runs, made on first use: the same options but building
    /// babysitter's `nextActions`, which the client prints (runs the manager drives never pay
    /// for them).
    client_engine: std::sync::OnceLock<Engine>,
}

/// Live runs by state, for the metrics scrape.
impl crate::service::metrics::Live for Inner {
    fn report(&self, into: &mut crate::service::metrics::Snapshot) {
        for run in lock(&self.runs).lives() {
            *into.runs.entry(run.current().status.as_str()).or_default() += 1;
        }
    }
}

fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn str_of(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_owned)
}

impl RunManager {
    pub fn new(engine: Engine, queue: TaskQueue, config: ManagerConfig) -> Self {
        let shutdown = CancellationToken::new();
        let runs = RunTable::new(config.finished_runs_cached, shutdown.clone());
        let inner = Arc::new(Inner {
            engine,
            queue,
            config,
            runs: StdMutex::new(runs),
            shutdown,
            tracker: TaskTracker::new(),
            client_engine: std::sync::OnceLock::new(),
        });
        let live = Arc::downgrade(&inner);
        crate::service::metrics::track(live);
        Self { inner }
    }

    /// What of `req` differs from the request that created `run_id` (its process code, inputs,
    /// labels, process id), as field names.
    async fn differences(&self, run_id: &str, req: &NewRun) -> Result<Vec<&'static str>> {
        let files = self.journal().run_files(run_id).await?;
        let run = &files.run_json;
        let mut differs = Vec::new();
        if run.get("processCodeHash").and_then(Value::as_str)
            != Some(req.bundle.entry_hash().as_str())
        {
            differs.push("process");
        }
        if files.inputs_json != req.inputs {
            differs.push("inputs");
        }
        if run.get("labels").cloned().unwrap_or_else(|| json!({})) != json!(req.labels) {
            differs.push("labels");
        }
        if let Some(p) = req.process_id.as_deref().filter(|p| !p.is_empty())
            && run.get("processId").and_then(Value::as_str) != Some(p)
        {
            differs.push("process_id");
        }
        Ok(differs)
    }

    pub fn journal(&self) -> &Journal {
        self.inner.engine.journal()
    }

    pub fn engine(&self) -> &Engine {
        &self.inner.engine
    }

    pub fn queue(&self) -> &TaskQueue {
        &self.inner.queue
    }

    pub fn secrets(&self) -> &babysitter_journal::redact::Redactor {
        &self.inner.config.secrets
    }

    /// The task definition a worker receives: `{"$secret": …}` placeholders resolved.
    pub fn dispatch_form(&self, task_json: &Bytes) -> Result<Bytes> {
        let secrets = &self.inner.config.secrets;
        if secrets.is_empty() || !task_json.windows(7).any(|w| w == b"$secret") {
            return Ok(task_json.clone());
        }
        let mut v: Value = serde_json::from_slice(task_json)
            .map_err(|e| ServiceError::invalid("task.json", e.to_string()))?;
        secrets
            .resolve_placeholders(&mut v)
            .map_err(|e| ServiceError::invalid("task.json", e.to_string()))?;
        Ok(Bytes::from(v.to_string()))
    }

    /// Stops timers and drivers; waits for in-flight iterations (and their journal writes).
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }

    /// The write lock of a live run (`None` once it has ended).
    fn run_lock(&self, run_id: &str) -> Option<Arc<tokio::sync::Mutex<()>>> {
        lock(&self.inner.runs).live(run_id).map(|r| r.lock.clone())
    }

    fn is_live(&self, run_id: &str) -> bool {
        lock(&self.inner.runs).live(run_id).is_some()
    }

    /// Creates a run, journals `RUN_CREATED` and starts iterating it (a client-driven one waits
    /// for its client's first `IterateRun`).
    ///
    /// The creation's writes (run.json, the bundle's blobs, `RUN_CREATED`) run on a task of their
    /// own: a call cut short (a client gone, a term ended) does not stop them half-way, leaving a
    /// run.json whose bundle was never stored. They still stop at a fenced write; recovery
    /// records such a creation as failed (`runs::recovery`).
    pub async fn create(&self, req: NewRun) -> Result<RunSummary> {
        let this = self.clone();
        // The run's root span links to the request's (this one).
        let request = tracing::Span::current();
        self.inner
            .tracker
            .spawn(async move { this.create_now(req, &request).await })
            .await
            .unwrap_or_else(|e| match e.try_into_panic() {
                // A bug in the creation is a panic here too, not a shutdown.
                Ok(panic) => std::panic::resume_unwind(panic),
                Err(_) => Err(ServiceError::ShuttingDown),
            })
    }

    async fn create_now(&self, req: NewRun, request: &tracing::Span) -> Result<RunSummary> {
        let namespace = if req.namespace.is_empty() {
            DEFAULT_NAMESPACE.to_owned()
        } else {
            req.namespace.clone()
        };
        babysitter_common::ids::validate_path_segment("namespace", &namespace)
            .map_err(|e| ServiceError::invalid("namespace", e.to_string()))?;
        for k in req.labels.keys() {
            if k.is_empty() || k.len() > 128 {
                return Err(ServiceError::invalid(
                    "labels",
                    format!("label key `{k}` must be 1 to 128 characters"),
                ));
            }
        }
        req.bundle.validate(self.inner.config.bundle_limits)?;
        let existing = req
            .idempotency_key
            .as_ref()
            .and_then(|key| lock(&self.inner.runs).idempotent(&namespace, key));
        if let (Some(existing), Some(key)) = (existing, &req.idempotency_key) {
            // The same request again gets the same run; a different one under the same key is
            // a client's mistake, said rather than answered with a run it did not ask for.
            let differs = self.differences(&existing, &req).await?;
            if !differs.is_empty() {
                return Err(ServiceError::AlreadyExists(format!(
                    "idempotency key `{key}` (run {existing}, created with another {})",
                    differs.join(", ")
                )));
            }
            return self.get(&namespace, &existing).await;
        }
        let run_id = match &req.run_id {
            Some(id) if !id.is_empty() => {
                babysitter_common::ids::validate_path_segment("run id", id)
                    .map_err(|e| ServiceError::invalid("run_id", e.to_string()))?;
                // A ULID is one id in any case (Crockford base 32): its canonical spelling, so a
                // lowercase copy of an existing run's id is that run, not a second one.
                match ulid::Ulid::from_string(id) {
                    Ok(u) if id.len() == ulid::ULID_LEN => u.to_string(),
                    _ => id.clone(),
                }
            }
            _ => ulid::Ulid::generate().to_string(),
        };
        let process_id = req
            .process_id
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| {
                req.bundle
                    .entry_path
                    .trim_end_matches(".mjs")
                    .trim_end_matches(".js")
                    .to_owned()
            });
        let created_at = crate::engine::iso(self.inner.engine.options().clock.as_ref()());
        // A new run (not an idempotent repeat): its writes in its root span, a trace of its own.
        let root = trace::root_span(&run_id, &namespace, request);
        let trace = babysitter_common::telemetry::W3cContext::of_span(&root);
        self.create_in_span(req, namespace, run_id, process_id, created_at, trace)
            .instrument(root)
            .await
    }

    /// The writes of a new run's creation (`create_now` checked the request and named the run).
    async fn create_in_span(
        &self,
        req: NewRun,
        namespace: String,
        run_id: String,
        process_id: String,
        created_at: String,
        trace: Option<babysitter_common::telemetry::W3cContext>,
    ) -> Result<RunSummary> {
        let mut new = lifecycle::NewRun::new(
            &run_id,
            &process_id,
            Entrypoint {
                import_path: format!("{PROCESS_DIR}/{}", req.bundle.entry_path),
                export_name: req.bundle.export_name.clone(),
            },
            created_at.clone(),
        );
        if let Some(r) = &req.request {
            new.request = r.clone();
        }
        new.prompt = req.prompt.clone();
        new.nested = req.nested.clone();
        new.completion_proof = Some(new_completion_proof().map_err(|e| {
            ServiceError::Journal(JournalError::io("/dev/urandom (the completion proof)", e))
        })?);
        new.code_hash = Some(req.bundle.entry_hash());
        new.has_inputs = req.inputs.is_some();
        new.extra.insert("namespace".into(), json!(namespace));
        new.extra.insert("labels".into(), json!(req.labels));
        new.extra
            .insert("processBundle".into(), req.bundle.manifest());
        if let Some(k) = &req.idempotency_key {
            new.extra.insert("idempotencyKey".into(), json!(k));
        }
        if req.client_driven {
            new.extra
                .insert(client::DRIVER_KEY.into(), json!(client::CLIENT_DRIVER));
        }
        for (k, v) in trace.iter().flat_map(trace::run_json_entries) {
            new.extra.insert(k.into(), v);
        }
        let mut budget = self.budget_for(&namespace, req.budget.as_ref())?;
        if req.client_driven
            && let Some(b) = budget.as_mut()
        {
            // Its client iterates it: nobody would see a wait, so at a limit it fails.
            if req.budget.as_ref().is_some_and(|b| b.asks()) {
                return Err(ServiceError::invalid(
                    "budget",
                    "on-exceed=ask needs a run the orchestrator drives; a client-driven run fails at its limit",
                ));
            }
            b.on_exceed = Some(crate::service::budget::OnExceed::Fail);
        }
        if let Some(b) = &budget {
            new.extra.insert(
                BUDGET_KEY.into(),
                serde_json::to_value(b)
                    .map_err(|e| ServiceError::invalid("budget", e.to_string()))?,
            );
        }
        let journal = self.journal();
        match journal
            .create_run(
                &run_id,
                RunFiles {
                    run_json: new.run_json(),
                    inputs_json: req.inputs.clone(),
                },
            )
            .await
        {
            Ok(_) => {}
            Err(JournalError::RunAlreadyExists { .. }) => {
                return Err(ServiceError::AlreadyExists(format!("run {run_id}")));
            }
            Err(e) => return Err(e.into()),
        }
        bundle::store(journal, &run_id, &req.bundle).await?;
        self.write_bundle_locally(&run_id, &req.bundle).await?;
        let committed = journal
            .append(
                &run_id,
                1,
                vec![NewEvent::new(
                    EventType::RunCreated,
                    Value::Object(new.created_data()),
                )],
            )
            .await?;
        let summary = RunSummary {
            run_id: run_id.clone(),
            namespace: namespace.clone(),
            status: RunStatus::Created,
            labels: req.labels.clone(),
            process_id,
            created_at: Some(created_at),
            updated_at: committed.last().map(|e| e.body.recorded_at.clone()),
            head_seq: committed.last().map_or(1, |e| e.seq),
            pending_by_kind: BTreeMap::new(),
            status_reason: String::new(),
            output: None,
            error: None,
            client_driven: req.client_driven,
            budget,
            parent: req.nested.as_ref().and_then(Parent::of_nested),
            trace,
        };
        lock(&self.inner.runs).insert_live(summary.clone(), req.idempotency_key);
        self.schedule(&run_id, false); // a client-driven run waits for its client
        Ok(summary)
    }

    async fn write_bundle_locally(&self, run_id: &str, b: &Bundle) -> Result<()> {
        let dir = self
            .inner
            .engine
            .options()
            .runs_root
            .join(run_id)
            .join(PROCESS_DIR);
        for (path, content) in &b.files {
            let target = dir.join(path);
            let io =
                |e: std::io::Error| ServiceError::Journal(JournalError::io(target.display(), e));
            if let Some(parent) = target.parent() {
                tokio::fs::create_dir_all(parent).await.map_err(io)?;
            }
            tokio::fs::write(&target, content).await.map_err(io)?;
        }
        Ok(())
    }
}

pub(crate) use crate::service::budget::BUDGET_KEY;

impl RunManager {
    /// `requested` merged over the namespace's default budget (`None`: no limit at all).
    fn budget_for(&self, namespace: &str, requested: Option<&Budget>) -> Result<Option<Budget>> {
        let budgets = &self.inner.config.budgets;
        let default = budgets
            .get(namespace)
            .or_else(|| budgets.get(DEFAULT_NAMESPACE))
            .cloned()
            .unwrap_or_default();
        let budget = requested.cloned().unwrap_or_default().over(&default);
        budget
            .validate()
            .map_err(|e| ServiceError::invalid("budget", e))?;
        Ok((!budget.is_empty()).then_some(budget))
    }
}
