//! The worker loop: register with the orchestrator, long-poll for tasks up to the free slots,
//! run each under its lease (heartbeats keep it alive and bring cancellations), and complete it.
//!
//! Failure handling follows the worker protocol (`worker.proto`), and its guarantee — attempts
//! at least once, never overlapping, exactly one journaled result:
//! - a finished result is kept until the orchestrator answers it ([`deliver`]): spooled to the
//!   worker's home ([`crate::home`]) before it is reported, retried across `Unavailable`,
//!   `Cancelled`, transport errors and `NotFound` for the worker (the orchestrator restarted:
//!   register again with the same id, complete under the same lease id, which the new
//!   orchestrator adopts), and delivered by the next worker on this home if this one dies;
//! - a task is stopped before its lease can lapse unrenewed ([`heartbeat`]), so the attempt the
//!   orchestrator starts after the lapse never overlaps it; a worker's death kills its tasks'
//!   process groups ([`crate::group`]);
//! - a lease reported lost → the task is killed and its result dropped; cancelled → killed and
//!   completed with an `EffectCancelledError`;
//! - credentials the orchestrator refuses: retried with growing backoff a few times, then the
//!   worker exits with the error (a restart loop an operator sees, not a silent spin).
//!
//! Agent tasks ([`crate::agent`]) also stream universal events while they run: one
//! `ReportEvents` client stream per task, fed in batches, so a slow orchestrator applies
//! back-pressure instead of losing events; a failed stream is logged and never fails the task.
//!
//! The running-task table and the lifecycle state live in [`control`], where the admin API
//! ([`crate::admin`]) reads them and asks for a cancel or a drain: a drain ends polling like a
//! shutdown does, but running tasks get all the time they need (or the drain's deadline) and the
//! loop returns once they are done, leaving the process up.

mod control;
mod deliver;
mod heartbeat;
mod sessions;

pub use control::{
    DRAIN_DEADLINE_REASON, DrainError, DrainStatus, TaskInfo, WorkerControl, WorkerState,
};

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use babysitter_common::client::{AuthedChannel, ClientOptions};
use babysitter_common::error::{ErrorKind, error_kind};
use babysitter_common::kinds;
use babysitter_common::telemetry::{W3cContext, set_remote_parent};
use babysitter_common::worker_api::WorkerApi;
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::worker_service_client::WorkerServiceClient;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Code, Status};

use crate::agent::{self, AgentSettings, AgentSpec};
use crate::exec::{self, Attempt, Done, Task};
use crate::harness::{Detected, HarnessKind};
use crate::home::{Home, HomeError, Spooled};
use control::Running;

/// Consecutive registrations refused for credentials before the worker gives up.
const MAX_REFUSALS: u32 = 5;

/// Longest wait between registration or poll attempts while the orchestrator does not answer: an
/// orchestrator taking over (a standby that became active) gets this worker's next poll within a
/// second, and a second is cheap for a server to absorb from every worker.
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(1);

/// Why a worker stopped before it was asked to.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    #[error(transparent)]
    Home(#[from] HomeError),
    #[error(
        "the orchestrator refused this worker's credentials {MAX_REFUSALS} times ({code:?}: {message}); check orchestrator.token-file"
    )]
    Refused { code: Code, message: String },
}

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub worker_id: String,
    pub namespaces: Vec<String>,
    pub labels: HashMap<String, String>,
    pub task_kinds: Vec<String>,
    pub max_concurrency: usize,
    /// The worker's home is a slot under it ([`crate::home`]): task working directories, the
    /// completion spool.
    pub work_dir: PathBuf,
    /// How long running tasks may finish after shutdown is asked before they are killed.
    pub drain_timeout: Duration,
}

/// What the worker offers the orchestrator (advertised at registration).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    pub task_kinds: Vec<String>,
    /// The harnesses that work on this machine.
    pub harnesses: Vec<Detected>,
    pub labels: HashMap<String, String>,
    pub max_concurrency: usize,
}

impl From<&Capabilities> for cpb::WorkerCapabilities {
    fn from(c: &Capabilities) -> Self {
        cpb::WorkerCapabilities {
            task_kinds: c.task_kinds.clone(),
            harnesses: c
                .harnesses
                .iter()
                .map(|d| cpb::HarnessInfo {
                    name: d.kind.name().to_owned(),
                    version: d.version.clone(),
                    binary_path: d.path.display().to_string(),
                })
                .collect(),
            labels: c.labels.clone(),
            max_concurrency: u32::try_from(c.max_concurrency).unwrap_or(u32::MAX),
        }
    }
}

/// The worker.
#[derive(Debug, Clone)]
pub struct Worker {
    api: Arc<dyn WorkerApi>,
    settings: Arc<WorkerSettings>,
    control: WorkerControl,
    timing: Arc<Mutex<Timing>>,
    agents: Option<Arc<AgentSettings>>,
    home: Arc<Home>,
    /// What the home's previous owner spooled, delivered once registered.
    inherited: Arc<Mutex<Vec<Spooled>>>,
    /// Cancelled when the worker lets go of what it still holds (the drain timeout passed at
    /// shutdown): deliveries stop, their results staying spooled for the next worker.
    abandon: CancellationToken,
}

/// What one executed task produced, with what the completion carries besides the value.
struct Executed {
    done: Done,
    usage: Option<cpb::TaskUsage>,
    requests: Vec<cpb::RequestUsage>,
    metadata: Value,
    /// Give the task back instead of completing it (see [`agent::Release`]).
    release: Option<agent::Release>,
    /// An agent's events for the record ([`agent::KEPT_EVENTS`]).
    events: Vec<cpb::AgentEvent>,
}

impl From<Done> for Executed {
    fn from(done: Done) -> Self {
        Self {
            done,
            usage: None,
            requests: Vec::new(),
            metadata: Value::Null,
            release: None,
            events: Vec::new(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Timing {
    heartbeat: Duration,
    max_poll_wait: Duration,
    lease: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_secs(10),
            max_poll_wait: Duration::from_secs(30),
            lease: Duration::from_secs(30),
        }
    }
}

fn dur(d: Option<prost_types::Duration>, default: Duration) -> Duration {
    d.and_then(|d| Duration::try_from(d).ok())
        .filter(|d| !d.is_zero())
        .unwrap_or(default)
}

fn is_unknown_worker(s: &Status) -> bool {
    s.code() == Code::NotFound
}

fn is_lease_lost(s: &Status) -> bool {
    error_kind(s) == Some(ErrorKind::LeaseLost)
}

impl Worker {
    /// A worker calling the orchestrator over `channel` (its connection settings are the
    /// caller's, e.g. `babysitter_common::client::connect_lazy`), with the default
    /// [`ClientOptions`] message sizes and compression. Takes its home under the work dir.
    pub fn new(channel: AuthedChannel, settings: WorkerSettings) -> Result<Self, WorkerError> {
        let client: WorkerServiceClient<AuthedChannel> = ClientOptions::default().client(channel);
        Self::with_api(Arc::new(client), settings)
    }

    /// A worker calling the orchestrator through `api`: gRPC ([`Worker::new`]) or the
    /// orchestrator's handlers in the same process (`babysitter up`). Takes its home under the
    /// work dir: what a previous worker left running there is killed, what it spooled is
    /// delivered once this one registers.
    pub fn with_api(
        api: Arc<dyn WorkerApi>,
        settings: WorkerSettings,
    ) -> Result<Self, WorkerError> {
        let (home, inherited) = Home::take(&settings.work_dir)?;
        if !inherited.spooled.is_empty() {
            tracing::info!(count = inherited.spooled.len(), home = %home.dir().display(), "completions a previous worker spooled will be delivered");
        }
        Ok(Self {
            api,
            settings: Arc::new(settings),
            control: WorkerControl::default(),
            timing: Arc::new(Mutex::new(Timing::default())),
            agents: None,
            home: Arc::new(home),
            inherited: Arc::new(Mutex::new(inherited.spooled)),
            abandon: CancellationToken::new(),
        })
    }

    /// The directory this worker owns under its work dir.
    pub fn home_dir(&self) -> &std::path::Path {
        self.home.dir()
    }

    /// Runs `agent` tasks with these harnesses and providers (advertised at registration).
    pub fn with_agents(mut self, agents: AgentSettings) -> Self {
        self.agents = Some(Arc::new(agents));
        self
    }

    /// The worker's state, for the admin API: running tasks, cancel, drain.
    pub fn control(&self) -> WorkerControl {
        self.control.clone()
    }

    /// What the worker advertises at registration.
    pub fn capabilities(&self) -> Capabilities {
        let mut task_kinds = self.settings.task_kinds.clone();
        let harnesses: Vec<Detected> = self
            .agents
            .iter()
            .flat_map(|a| a.harnesses.iter().cloned())
            .collect();
        if !harnesses.is_empty() {
            for kind in kinds::HARNESS_KINDS {
                if !task_kinds.iter().any(|k| k == kind) {
                    task_kinds.push(kind.to_owned());
                }
            }
        }
        Capabilities {
            task_kinds,
            harnesses,
            labels: self.settings.labels.clone(),
            max_concurrency: self.settings.max_concurrency,
        }
    }

    fn timing(&self) -> Timing {
        *self.timing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers until it succeeds (true) or `stop` is cancelled (false); an error when the
    /// orchestrator keeps refusing the credentials.
    async fn register(&self, stop: &CancellationToken) -> Result<bool, WorkerError> {
        let mut backoff = Duration::from_millis(100);
        let mut refusals = 0;
        loop {
            let req = pb::RegisterWorkerRequest {
                worker_id: self.settings.worker_id.clone(),
                namespaces: self.settings.namespaces.clone(),
                capabilities: Some((&self.capabilities()).into()),
                agent_version: format!("harness-launcher/{}", env!("CARGO_PKG_VERSION")),
            };
            match self.api.register_worker(req).await {
                Ok(r) => {
                    let d = Timing::default();
                    *self.timing.lock().unwrap_or_else(|p| p.into_inner()) = Timing {
                        heartbeat: dur(r.heartbeat_interval, d.heartbeat),
                        max_poll_wait: dur(r.max_poll_wait, d.max_poll_wait),
                        lease: dur(r.lease_duration, d.lease),
                    };
                    tracing::info!(worker_id = %r.worker_id, "registered with the orchestrator");
                    self.control.registered(if r.worker_id.is_empty() {
                        &self.settings.worker_id
                    } else {
                        &r.worker_id
                    });
                    return Ok(true);
                }
                Err(s) if matches!(s.code(), Code::Unauthenticated | Code::PermissionDenied) => {
                    refusals += 1;
                    if refusals >= MAX_REFUSALS {
                        return Err(WorkerError::Refused {
                            code: s.code(),
                            message: s.message().to_owned(),
                        });
                    }
                    tracing::error!(error = %s.message(), code = ?s.code(), refusals, "the orchestrator refused this worker's credentials; retrying");
                    backoff = Duration::from_secs(1 << refusals);
                }
                Err(s) => {
                    tracing::warn!(error = %s.message(), code = ?s.code(), "registration failed; retrying");
                    backoff = (backoff * 2).min(MAX_RETRY_BACKOFF);
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = stop.cancelled() => return Ok(false),
            }
        }
    }

    /// Runs until `stop` is cancelled, then drains: running tasks get the drain timeout to finish
    /// (and their results to be delivered) and are killed after it. Also returns when drained
    /// through [`WorkerControl::drain`], once nothing runs any more. An error when the
    /// orchestrator refused the worker's credentials (after the same drain).
    pub async fn run(self, stop: CancellationToken) -> Result<(), WorkerError> {
        // Ends registration and polling on `stop`, on a drain, or on refused credentials.
        let halt = self.control.halt_token(&stop);
        // The tasks (each with the tasks eagerly handed over after it), and the heartbeats and
        // inherited deliveries.
        let tasks = TaskTracker::new();
        let background = TaskTracker::new();
        let hb_stop = CancellationToken::new();
        let mut failed = None;
        match self.register(&halt).await {
            Ok(true) => {
                background.spawn(self.clone().heartbeats(hb_stop.clone(), stop.clone()));
                tasks.spawn(self.clone().deliver_inherited());
                if let Err(e) = self.poll_loop(&halt, &stop, &tasks).await {
                    failed = Some(e);
                }
            }
            Ok(false) => {}
            Err(e) => failed = Some(e),
        }
        tasks.close();
        background.close();
        if failed.is_none()
            && !stop.is_cancelled()
            && self.control.wait_drained(&stop, &tasks).await
        {
            hb_stop.cancel();
            background.wait().await;
            self.control.drained();
            return Ok(());
        }
        // Shutdown: running tasks finish (and complete) within the drain timeout, else are
        // killed, and undelivered results stay spooled for the next worker on this home.
        self.control.stopping();
        if tokio::time::timeout(self.settings.drain_timeout, tasks.wait())
            .await
            .is_err()
        {
            self.control.kill_all();
            self.abandon.cancel();
            tasks.wait().await;
        }
        hb_stop.cancel();
        background.wait().await;
        failed.map_or(Ok(()), Err)
    }

    /// Long-polls for tasks up to the free slots and spawns each on `tracker`, until `halt`.
    async fn poll_loop(
        &self,
        halt: &CancellationToken,
        stop: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Result<(), WorkerError> {
        let slots = Arc::new(Semaphore::new(self.settings.max_concurrency.max(1)));
        let mut backoff = Duration::from_millis(100);
        while !halt.is_cancelled() {
            // Wait for at least one free slot.
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
                () = halt.cancelled() => break,
            };
            let free = slots.available_permits() + 1;
            drop(permit);
            let req = pb::PollTasksRequest {
                worker_id: self.settings.worker_id.clone(),
                max_tasks: free as u32,
                wait: prost_types::Duration::try_from(self.timing().max_poll_wait).ok(),
            };
            let polled = tokio::select! {
                r = self.api.poll_tasks(req) => r,
                () = halt.cancelled() => break,
            };
            match polled {
                Ok(r) => {
                    self.control.connected(true);
                    backoff = Duration::from_millis(100);
                    for a in r.tasks {
                        let Ok(permit) = slots.clone().acquire_owned().await else {
                            break;
                        };
                        let this = self.clone();
                        let stop = stop.clone();
                        tracker.spawn(async move {
                            // Eager dispatch: a completion may bring the next task along.
                            let mut next = Some(a);
                            while let Some(a) = next.take() {
                                next = this.run_task(a, &stop).await;
                            }
                            drop(permit);
                        });
                    }
                }
                Err(s) if is_unknown_worker(&s) => {
                    if !self.register(halt).await? {
                        break;
                    }
                }
                Err(s) => {
                    self.control.connected(false);
                    tracing::warn!(error = %s.message(), code = ?s.code(), "poll failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        () = halt.cancelled() => break,
                    }
                    backoff = (backoff * 2).min(MAX_RETRY_BACKOFF);
                }
            }
        }
        Ok(())
    }

    /// Runs one task and completes it in the task's span, a child of the orchestrator's span for
    /// it (`TaskAssignment.traceparent`), so the task joins its run's trace; returns a task
    /// handed over with the completion.
    async fn run_task(
        &self,
        a: pb::TaskAssignment,
        stop: &CancellationToken,
    ) -> Option<pb::TaskAssignment> {
        use tracing::Instrument as _;
        let span = tracing::info_span!(
            "worker.task",
            run_id = %a.run_id,
            effect_id = %a.effect_id,
            kind = %a.kind,
            attempt = a.attempt,
            lease_id = %a.lease_id,
        );
        if let Some(parent) = W3cContext::parse(&a.traceparent, &a.tracestate) {
            set_remote_parent(&span, &parent);
        }
        self.run_task_in_span(a, stop).instrument(span).await
    }

    async fn run_task_in_span(
        &self,
        a: pb::TaskAssignment,
        stop: &CancellationToken,
    ) -> Option<pb::TaskAssignment> {
        let cancel = CancellationToken::new();
        let events = Arc::new(AtomicU64::new(0));
        let harness = self.harness_of(&a);
        self.control.insert(Running {
            cancel: cancel.clone(),
            stopped: None,
            info: TaskInfo {
                lease_id: a.lease_id.clone(),
                namespace: a.namespace.clone(),
                run_id: a.run_id.clone(),
                effect_id: a.effect_id.clone(),
                kind: a.kind.clone(),
                harness: harness.clone(),
                started_at: SystemTime::now(),
                events_reported: 0,
                attempt: a.attempt,
            },
            events: events.clone(),
            renewed: tokio::time::Instant::now(),
        });
        let work_dir = self.home.task_dir(&a.run_id, &a.effect_id, a.attempt);
        let started = SystemTime::now();
        let clock = tokio::time::Instant::now();
        crate::metrics::started();
        let done = self.execute(&a, &work_dir, &cancel, &events).await;
        let finished = SystemTime::now();
        let stopped = self.control.stopped_reason(&a.lease_id);
        let outcome = match (&stopped, &done.done.outcome) {
            (Some((true, _)), _) => "lease_lost",
            (Some((false, _)), _) => "cancelled",
            (None, Ok(_)) => "succeeded",
            (None, Err(_)) => "failed",
        };
        crate::metrics::finished(&a.kind, harness.as_deref(), outcome, clock.elapsed());
        let outcome = match stopped {
            Some((true, reason)) => {
                tracing::info!(lease_id = %a.lease_id, %reason, "lease lost: result dropped");
                None
            }
            Some((false, reason)) => Some(Executed::from(Done {
                outcome: Err(json!({"name": "EffectCancelledError", "message": reason})),
                stdout: done.done.stdout,
                stderr: done.done.stderr,
            })),
            None => Some(done),
        };
        let outcome = match outcome {
            Some(done) if done.release.is_some() => self.release(&a, done).await,
            other => other,
        };
        let next = match outcome {
            Some(done) => {
                // No task comes along with the completion once stopping or draining.
                let take_next = !stop.is_cancelled() && !self.control.is_draining();
                self.complete(&a, done, started, finished, take_next).await
            }
            None => None,
        };
        let _ = tokio::fs::remove_dir_all(&work_dir).await;
        self.control.remove(&a.lease_id);
        next
    }

    /// Gives a task back for a later attempt (its harness hit a quota window); `Some(done)`
    /// when the orchestrator would not take it back, so it is completed with its error instead.
    async fn release(&self, a: &pb::TaskAssignment, done: Executed) -> Option<Executed> {
        let r = done.release.clone()?;
        let req = pb::ReleaseTaskRequest {
            worker_id: self.settings.worker_id.clone(),
            lease_id: a.lease_id.clone(),
            effect_id: a.effect_id.clone(),
            reason: r.reason.clone(),
            retry_after: prost_types::Duration::try_from(r.retry_after).ok(),
        };
        match self.api.release_task(req).await {
            Ok(resp) => {
                tracing::info!(lease_id = %a.lease_id, reason = %r.reason, retry_after_s = r.retry_after.as_secs(),
                    next_attempt = resp.next_attempt, "task given back to resume after a quota window");
                None
            }
            Err(s) => {
                tracing::warn!(lease_id = %a.lease_id, code = ?s.code(), error = %s.message(),
                    "the task could not be given back; it is completed with its error");
                Some(done)
            }
        }
    }

    /// The attempt `a` is, as its commands are told.
    fn attempt<'a>(&'a self, a: &'a pb::TaskAssignment) -> Attempt<'a> {
        Attempt {
            run_id: &a.run_id,
            effect_id: &a.effect_id,
            number: a.attempt,
            home_marker: self.home.marker(),
        }
    }

    /// The harness adapter an agent task runs: the one it names, else the worker's default.
    fn harness_of(&self, a: &pb::TaskAssignment) -> Option<String> {
        if !kinds::runs_on_a_harness(&a.kind) {
            return None;
        }
        let named = serde_json::from_slice::<Value>(&a.task_json)
            .ok()
            .and_then(|def| AgentSpec::from_task(&a.kind, &def, None).ok())
            .and_then(|spec| spec.harness);
        match named {
            Some(name) => Some(HarnessKind::from_name(&name).map_or(name, |k| k.name().to_owned())),
            None => self
                .agents
                .as_ref()
                .and_then(|a| a.harnesses.first())
                .map(|d| d.kind.name().to_owned()),
        }
    }

    async fn execute(
        &self,
        a: &pb::TaskAssignment,
        work_dir: &std::path::Path,
        cancel: &CancellationToken,
        events: &Arc<AtomicU64>,
    ) -> Executed {
        let fail = |name: &str, message: String| {
            Executed::from(Done {
                outcome: Err(json!({"name": name, "message": message})),
                stdout: None,
                stderr: None,
            })
        };
        let def: Value = match serde_json::from_slice(&a.task_json) {
            Ok(v) => v,
            Err(e) => return fail("InvalidTaskError", format!("task_json is not JSON: {e}")),
        };
        if let Err(e) = tokio::fs::create_dir_all(work_dir).await {
            return fail(
                "WorkerError",
                format!("cannot create {}: {e}", work_dir.display()),
            );
        }
        if kinds::runs_on_a_harness(&a.kind) {
            let Some(agents) = self.agents.clone() else {
                return fail(
                    "TaskStartError",
                    format!(
                        "this worker cannot execute tasks of kind `{}` (no harness installed)",
                        a.kind
                    ),
                );
            };
            return self
                .execute_agent(a, &def, &agents, work_dir, cancel, events)
                .await;
        }
        let task = Task {
            effect_id: &a.effect_id,
            kind: &a.kind,
            def: &def,
            work_dir,
            attempt: Some(self.attempt(a)),
        };
        match exec::execute(task, cancel).await {
            Ok(done) => done.into(),
            Err(e) => fail("TaskStartError", e.to_string()),
        }
    }

    /// An agent task, its events streamed to the orchestrator while it runs.
    async fn execute_agent(
        &self,
        a: &pb::TaskAssignment,
        def: &Value,
        agents: &AgentSettings,
        work_dir: &std::path::Path,
        cancel: &CancellationToken,
        events: &Arc<AtomicU64>,
    ) -> Executed {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        let reporter = tokio::spawn(tracing::Instrument::in_current_span(report_events(
            self.api.clone(),
            self.settings.worker_id.clone(),
            a.lease_id.clone(),
            rx,
            events.clone(),
        )));
        let timeout = a
            .timeout
            .and_then(|d| Duration::try_from(d).ok())
            .filter(|d| !d.is_zero());
        let resume = sessions::of_assignment(a);
        let (saves, saver) = sessions::start(
            self.api.clone(),
            self.settings.worker_id.clone(),
            a.lease_id.clone(),
        );
        let task = agent::AgentTask {
            kind: &a.kind,
            def,
            work_dir,
            attempt: self.attempt(a),
            timeout,
            resume: resume.as_ref(),
            saves: Some(&saves),
        };
        let r = agent::run(agents, task, &tx, cancel).await;
        drop(tx);
        drop(saves);
        // The last save lands before the completion, so a follow-up task finds it.
        if tokio::time::timeout(sessions::FINAL_SAVE_WAIT, saver)
            .await
            .is_err()
        {
            tracing::warn!(lease_id = %a.lease_id, "the agent session's last save did not finish in time");
        }
        if let Ok(Err(s)) = reporter.await {
            tracing::warn!(lease_id = %a.lease_id, error = %s.message(), "reporting agent events failed; the task goes on");
        }
        Executed {
            done: r.done,
            usage: r.usage,
            requests: r.requests,
            metadata: r.metadata,
            release: r.release,
            events: r.events,
        }
    }
}

/// Largest batch of events in one `ReportEventsRequest`.
const EVENT_BATCH: usize = 128;

/// Feeds one task's events to a `ReportEvents` stream in batches until the sender is dropped.
async fn report_events(
    api: Arc<dyn WorkerApi>,
    worker_id: String,
    lease_id: String,
    mut rx: tokio::sync::mpsc::Receiver<cpb::AgentEvent>,
    reported: Arc<AtomicU64>,
) -> Result<u64, Status> {
    let (req_tx, req_rx) = tokio::sync::mpsc::channel::<pb::ReportEventsRequest>(16);
    let batcher = tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            let mut events = vec![first];
            while events.len() < EVENT_BATCH {
                match rx.try_recv() {
                    Ok(e) => events.push(e),
                    Err(_) => break,
                }
            }
            let n = events.len() as u64;
            let req = pb::ReportEventsRequest {
                worker_id: worker_id.clone(),
                lease_id: lease_id.clone(),
                events,
            };
            if req_tx.send(req).await.is_ok() {
                reported.fetch_add(n, Ordering::Relaxed);
            } else {
                // The stream ended early: keep draining so the agent never blocks on events.
                while rx.recv().await.is_some() {}
                return;
            }
        }
    });
    let r = api.report_events(req_rx).await;
    let _ = batcher.await;
    r.map(|r| r.accepted_events)
}
