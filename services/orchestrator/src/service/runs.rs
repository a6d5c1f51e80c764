//! The run manager: creates runs, iterates each one after every resolution, dispatches what it
//! asks for (worker tasks to the [`TaskQueue`], sleeps to durable timers, breakpoints to
//! approvers), and keeps a summary of every run for `GetRun` / `ListRuns` / `WatchRun`.
//!
//! Iterations of one run never overlap: a per-run driver coalesces resolutions that arrive while
//! an iteration runs into one follow-up iteration (a fan-out of 1,000 completions costs a handful
//! of iterations, not 1,000). Every write to a run's journal happens under its lock, so a result
//! is committed only while its effect is pending and exactly one `EFFECT_RESOLVED` exists per
//! effect even when a worker, a posted result and a breakpoint decision race.
//!
//! Nothing here is durable except through the journal: on start [`RunManager::recover`] lists
//! every run, rebuilds summaries, and iterates the unfinished ones, which re-queues their
//! requested-but-unresolved effects (held briefly so their previous workers can adopt them).

mod recovery;
mod resolve;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use babysitter_journal::index::EffectRecord;
use babysitter_journal::store::{RunFile, RunFiles};
use babysitter_journal::{EventType, Journal, JournalError, NewEvent};
use bytes::Bytes;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

pub use resolve::{Decision, TaskOutcome, Usage};

use super::bundle::{self, Bundle, BundleLimits, PROCESS_DIR};
use super::queue::{TaskQueue, TaskSpec};
use super::{Result, ServiceError};
use crate::engine::lifecycle::{self, Entrypoint, new_completion_proof};
use crate::engine::{Engine, IterationStatus};

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
}

impl Default for ManagerConfig {
    fn default() -> Self {
        Self {
            bundle_limits: BundleLimits::default(),
            sweep_interval: Duration::from_secs(1),
            evict_idle_sessions: true,
            retry_delay: Duration::from_secs(2),
            secrets: Arc::default(),
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
    runs: StdMutex<HashMap<String, RunSummary>>,
    idempotency: StdMutex<HashMap<(String, String), String>>,
    locks: StdMutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Runs with a driver task: `true` = iterate again when the current iteration ends.
    drivers: StdMutex<HashMap<String, DriveFlags>>,
    timers: StdMutex<HashSet<(String, String)>>,
    /// Runs whose bundle this process has written and verified locally.
    materialized: StdMutex<HashSet<String>>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
}

#[derive(Debug, Clone, Copy, Default)]
struct DriveFlags {
    again: bool,
    recovered: bool,
}

fn lock<T>(m: &StdMutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn str_of(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_owned)
}

impl RunManager {
    pub fn new(engine: Engine, queue: TaskQueue, config: ManagerConfig) -> Self {
        Self {
            inner: Arc::new(Inner {
                engine,
                queue,
                config,
                runs: Default::default(),
                idempotency: Default::default(),
                locks: Default::default(),
                drivers: Default::default(),
                timers: Default::default(),
                materialized: Default::default(),
                shutdown: CancellationToken::new(),
                tracker: TaskTracker::new(),
            }),
        }
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

    fn lock_for(&self, run_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.inner.locks)
            .entry(run_id.to_owned())
            .or_default()
            .clone()
    }

    /// The summary of a run visible in `namespace`.
    pub fn get(&self, namespace: &str, run_id: &str) -> Result<RunSummary> {
        lock(&self.inner.runs)
            .get(run_id)
            .filter(|r| r.namespace == namespace)
            .cloned()
            .ok_or_else(|| ServiceError::NotFound(format!("run {run_id}")))
    }

    /// Runs of `namespace` matching the filters, newest first (ULID order), after `page_token`.
    pub fn list(
        &self,
        namespace: &str,
        statuses: &[RunStatus],
        labels: &BTreeMap<String, String>,
        page_size: usize,
        page_token: Option<&str>,
    ) -> (Vec<RunSummary>, Option<String>) {
        let runs = lock(&self.inner.runs);
        let mut matching: Vec<&RunSummary> = runs
            .values()
            .filter(|r| r.namespace == namespace)
            .filter(|r| statuses.is_empty() || statuses.contains(&r.status))
            .filter(|r| labels.iter().all(|(k, v)| r.labels.get(k) == Some(v)))
            .filter(|r| page_token.is_none_or(|t| r.run_id.as_str() < t))
            .collect();
        matching.sort_by(|a, b| b.run_id.cmp(&a.run_id));
        let size = page_size.clamp(1, 1000);
        let next = (matching.len() > size).then(|| matching[size - 1].run_id.clone());
        (matching.into_iter().take(size).cloned().collect(), next)
    }

    /// Namespaces' run ids (for cross-run listings such as breakpoints).
    pub(crate) fn run_ids_in(&self, namespace: &str) -> Vec<String> {
        let mut ids: Vec<String> = lock(&self.inner.runs)
            .values()
            .filter(|r| r.namespace == namespace)
            .map(|r| r.run_id.clone())
            .collect();
        ids.sort();
        ids
    }

    /// Creates a run, journals `RUN_CREATED` and starts iterating it.
    pub async fn create(&self, req: NewRun) -> Result<RunSummary> {
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
        if let Some(key) = &req.idempotency_key
            && let Some(existing) =
                lock(&self.inner.idempotency).get(&(namespace.clone(), key.clone()))
        {
            return self.get(&namespace, existing);
        }
        let run_id = match &req.run_id {
            Some(id) if !id.is_empty() => {
                babysitter_common::ids::validate_path_segment("run id", id)
                    .map_err(|e| ServiceError::invalid("run_id", e.to_string()))?;
                id.clone()
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
        };
        lock(&self.inner.runs).insert(run_id.clone(), summary.clone());
        if let Some(k) = req.idempotency_key {
            lock(&self.inner.idempotency).insert((namespace, k), run_id.clone());
        }
        self.schedule(&run_id, false);
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

    /// Asks for an iteration of `run_id` (coalesced with one already running).
    pub fn schedule(&self, run_id: &str, recovered: bool) {
        if !self.claim_driver(run_id, recovered) {
            return;
        }
        let this = self.clone();
        let run_id = run_id.to_owned();
        self.inner
            .tracker
            .spawn(async move { this.drive(&run_id, recovered).await });
    }

    /// Like [`RunManager::schedule`], but iterates in the calling task when no driver is active
    /// (a completion that waits for the next task anyway saves a task hop and a wake-up).
    pub async fn iterate_now(&self, run_id: &str) {
        if self.claim_driver(run_id, false) {
            let _running = self.inner.tracker.token();
            self.drive(run_id, false).await;
        }
    }

    /// Registers the run's driver; false when one is active (it was asked to go again).
    fn claim_driver(&self, run_id: &str, recovered: bool) -> bool {
        if self.inner.shutdown.is_cancelled() {
            return false;
        }
        let mut drivers = lock(&self.inner.drivers);
        if let Some(flags) = drivers.get_mut(run_id) {
            flags.again = true;
            flags.recovered |= recovered;
            return false;
        }
        drivers.insert(
            run_id.to_owned(),
            DriveFlags {
                again: false,
                recovered,
            },
        );
        true
    }

    /// The driver loop: iterate until no resolution arrived meanwhile.
    async fn drive(&self, run_id: &str, recovered: bool) {
        let mut recovered = recovered;
        loop {
            self.iterate_once(run_id, recovered).await;
            let mut drivers = lock(&self.inner.drivers);
            match drivers.get_mut(run_id) {
                Some(flags) if flags.again && !self.inner.shutdown.is_cancelled() => {
                    flags.again = false;
                    recovered = std::mem::take(&mut flags.recovered);
                }
                _ => {
                    drivers.remove(run_id);
                    break;
                }
            }
        }
    }

    async fn iterate_once(&self, run_id: &str, recovered: bool) {
        let run_lock = self.lock_for(run_id);
        let _guard = run_lock.lock().await;
        let terminal = lock(&self.inner.runs)
            .get(run_id)
            .is_none_or(|r| r.status.is_terminal());
        if terminal {
            return;
        }
        let result = async {
            self.ensure_materialized(run_id).await?;
            let it = self.inner.engine.iterate(run_id).await?;
            self.after_iteration(run_id, it, recovered).await
        }
        .await;
        if let Err(e) = result {
            lock(&self.inner.materialized).remove(run_id);
            tracing::warn!(run_id, error = %e, "iteration failed; will retry");
            if let Some(r) = lock(&self.inner.runs).get_mut(run_id) {
                r.status_reason = format!("iteration failed (retrying): {e}");
            }
            let this = self.clone();
            let run_id = run_id.to_owned();
            let delay = self.inner.config.retry_delay;
            let stop = self.inner.shutdown.clone();
            self.inner.tracker.spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(delay) => this.schedule(&run_id, recovered),
                    () = stop.cancelled() => {}
                }
            });
        }
    }

    /// Makes sure the run's bundle files exist where the engine reads them (checked once per
    /// process; a failed iteration re-checks).
    async fn ensure_materialized(&self, run_id: &str) -> Result<()> {
        if lock(&self.inner.materialized).contains(run_id) {
            return Ok(());
        }
        let files = self.journal().run_files(run_id).await?;
        if let Some(manifest) = files.run_json.get("processBundle") {
            bundle::materialize(
                self.journal(),
                &self.inner.engine.options().runs_root,
                run_id,
                manifest,
            )
            .await?;
        } // else a run made outside the service (babysitter layout): files in place
        lock(&self.inner.materialized).insert(run_id.to_owned());
        Ok(())
    }

    async fn after_iteration(
        &self,
        run_id: &str,
        it: crate::engine::Iteration,
        recovered: bool,
    ) -> Result<()> {
        let journal = self.journal();
        let pending: Vec<EffectRecord> = self
            .engine()
            .view(run_id, |_, idx| idx.pending().cloned().collect())
            .await?;
        let namespace = lock(&self.inner.runs)
            .get(run_id)
            .map(|r| r.namespace.clone())
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_owned());
        // The task.json the iteration just stored, so new tasks are dispatched without a read.
        let fresh: HashMap<&str, &Bytes> = it
            .requested
            .iter()
            .map(String::as_str)
            .zip(it.requested_tasks.iter())
            .collect();
        let mut by_kind: BTreeMap<String, u32> = BTreeMap::new();
        for r in &pending {
            let kind = r.kind.clone().unwrap_or_else(|| "unknown".into());
            *by_kind.entry(kind.clone()).or_default() += 1;
            match kind.as_str() {
                "breakpoint" => {}
                "sleep" => self.arm_timer(run_id, r).await?,
                _ if self.inner.queue.is_known(run_id, &r.effect_id) => {}
                _ => {
                    let task = match fresh.get(r.effect_id.as_str()) {
                        Some(doc) => (*doc).clone(),
                        None => {
                            journal
                                .get_run_file(run_id, &RunFile::task(&r.effect_id, "task.json")?)
                                .await?
                        }
                    };
                    let spec = task_spec(&namespace, run_id, r, &kind, task)?;
                    self.inner.queue.enqueue(spec, recovered);
                }
            }
        }
        let (queued, leased) = self.inner.queue.counts_for_run(run_id);
        let (status, reason) = match it.status {
            IterationStatus::Completed => (RunStatus::Completed, String::new()),
            IterationStatus::Halted => (RunStatus::Halted, it.reason.clone().unwrap_or_default()),
            IterationStatus::Failed => (RunStatus::Failed, it.reason.clone().unwrap_or_default()),
            IterationStatus::None => {
                let (status, error) = self.terminal_of(run_id).await?;
                if let Some(r) = lock(&self.inner.runs).get_mut(run_id) {
                    r.error = error;
                }
                (status, String::new())
            }
            IterationStatus::Waiting if queued + leased > 0 => (RunStatus::Running, String::new()),
            IterationStatus::Waiting if by_kind.contains_key("breakpoint") => {
                (RunStatus::Waiting, "breakpoint-waiting".into())
            }
            IterationStatus::Waiting if by_kind.contains_key("sleep") => {
                (RunStatus::Waiting, "sleeping".into())
            }
            IterationStatus::Waiting => (RunStatus::Waiting, "external-task-waiting".into()),
        };
        if self.inner.config.evict_idle_sessions && (status.is_terminal() || queued + leased == 0) {
            self.inner.engine.evict(run_id).await?;
        }
        let head = it.head;
        let mut runs = lock(&self.inner.runs);
        if let Some(r) = runs.get_mut(run_id) {
            r.updated_at = Some(crate::engine::iso(self
                .inner
                .engine
                .options()
                .clock
                .as_ref()()));
            r.status = status;
            if !(status == RunStatus::Running && r.status_reason.starts_with("no live worker")) {
                r.status_reason = reason;
            }
            r.head_seq = r.head_seq.max(head.seq);
            r.pending_by_kind = by_kind;
            if let Some(o) = it.output {
                r.output = Some(o);
            }
            if let Some(e) = it.error {
                r.error = Some(e);
            }
        }
        drop(runs);
        if status.is_terminal() {
            self.finished(run_id);
        }
        Ok(())
    }

    /// Drops a finished run's queue entries, timers and lock.
    fn finished(&self, run_id: &str) {
        self.inner.queue.cancel_run(run_id, "the run ended");
        lock(&self.inner.timers).retain(|(r, _)| r != run_id);
        lock(&self.inner.materialized).remove(run_id);
    }

    /// The terminal status and error of a run whose last lifecycle event is terminal.
    async fn terminal_of(&self, run_id: &str) -> Result<(RunStatus, Option<Value>)> {
        let mark = self
            .engine()
            .view(run_id, |_, idx| idx.last_lifecycle.clone())
            .await?;
        let Some(mark) = mark else {
            return Ok((RunStatus::Running, None));
        };
        let event = self.journal().read(run_id, mark.seq, mark.seq).await?;
        let data = event
            .first()
            .map(|e| e.body.data.clone())
            .unwrap_or_default();
        let status =
            RunStatus::of_terminal_event(&mark.event_type, &data).unwrap_or(RunStatus::Running);
        Ok((status, data.get("error").cloned()))
    }

    /// A durable timer for a pending sleep: when it fires, the run is iterated and the engine
    /// resolves the sleep (it is past due then). Re-armed from the journal after a restart.
    async fn arm_timer(&self, run_id: &str, r: &EffectRecord) -> Result<()> {
        let key = (run_id.to_owned(), r.effect_id.clone());
        if !lock(&self.inner.timers).insert(key.clone()) {
            return Ok(());
        }
        let task = self
            .journal()
            .get_run_file(run_id, &RunFile::task(&r.effect_id, "task.json")?)
            .await?;
        let target = serde_json::from_slice::<Value>(&task)
            .ok()
            .and_then(|t| t.pointer("/sleep/targetEpochMs").and_then(Value::as_i64))
            .unwrap_or(0);
        let now = self.inner.engine.options().clock.as_ref()();
        let wait = Duration::from_millis(u64::try_from(target - now).unwrap_or(0));
        let this = self.clone();
        let stop = self.inner.shutdown.clone();
        self.inner.tracker.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(wait + Duration::from_millis(1)) => {
                    lock(&this.inner.timers).remove(&key);
                    this.schedule(&key.0, false);
                }
                () = stop.cancelled() => {}
            }
        });
        Ok(())
    }

    /// Periodic work: expired leases, tasks that ran out of attempts, unroutable tasks.
    pub fn spawn_sweeper(&self) {
        let this = self.clone();
        let stop = self.inner.shutdown.clone();
        let every = self.inner.config.sweep_interval;
        self.inner.tracker.spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => this.sweep().await,
                    () = stop.cancelled() => break,
                }
            }
        });
    }

    pub async fn sweep(&self) {
        for gave_up in self.inner.queue.expire() {
            if let Err(e) = self.give_up(&gave_up).await {
                tracing::warn!(run_id = %gave_up.spec.run_id, effect_id = %gave_up.spec.effect_id,
                    error = %e, "could not fail a task that ran out of attempts");
            }
        }
        let unroutable: HashMap<String, String> = self
            .inner
            .queue
            .unroutable()
            .into_iter()
            .map(|(spec, why)| (spec.run_id.clone(), why))
            .collect();
        let mut runs = lock(&self.inner.runs);
        for r in runs.values_mut() {
            if let Some(why) = unroutable.get(&r.run_id) {
                if r.status_reason != *why {
                    tracing::warn!(run_id = %r.run_id, reason = %why, "task cannot be routed");
                }
                r.status_reason = why.clone();
            } else if r.status_reason.starts_with("no live worker") {
                r.status_reason.clear();
            }
        }
    }

    pub(crate) fn set_summary(&self, run_id: &str, f: impl FnOnce(&mut RunSummary)) {
        if let Some(r) = lock(&self.inner.runs).get_mut(run_id) {
            f(r);
        }
    }
}

/// A worker task from its journal record and `task.json`.
fn task_spec(
    namespace: &str,
    run_id: &str,
    r: &EffectRecord,
    kind: &str,
    task_json: Bytes,
) -> Result<TaskSpec> {
    let def: Value = serde_json::from_slice(&task_json).map_err(|e| {
        ServiceError::Conflict(format!(
            "run {run_id}: tasks/{}/task.json is not JSON: {e}",
            r.effect_id
        ))
    })?;
    let execution = def.get("execution");
    let harness = execution
        .and_then(|x| x.get("harness"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let required_labels = execution
        .and_then(|x| x.get("labels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let timeout_ms = def
        .pointer("/shell/timeout")
        .or_else(|| def.pointer("/node/timeoutMs"))
        .or_else(|| def.pointer("/agent/timeoutMs"))
        .and_then(Value::as_u64);
    Ok(TaskSpec {
        namespace: namespace.to_owned(),
        run_id: run_id.to_owned(),
        effect_id: r.effect_id.clone(),
        task_id: r.task_id.clone(),
        invocation_key: r.invocation_key.clone(),
        kind: kind.to_owned(),
        label: r.label.clone().unwrap_or_default(),
        task_json,
        harness,
        required_labels,
        timeout: timeout_ms.map(Duration::from_millis),
    })
}
