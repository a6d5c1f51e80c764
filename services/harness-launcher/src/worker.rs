//! The worker loop: register with the orchestrator, long-poll for tasks up to the free slots,
//! run each under its lease (heartbeats keep it alive and bring cancellations), and complete it.
//!
//! Failure handling follows the worker protocol (`worker.proto`):
//! - an RPC answering NotFound for the worker (the orchestrator restarted) → register again with
//!   the same id and keep running; completions are retried under their lease ids, which the new
//!   orchestrator adopts;
//! - `Unavailable` / transport errors → retry with capped backoff (the lease may still be live);
//! - a lease reported lost → the task is killed and its result dropped; cancelled → killed and
//!   completed with an `EffectCancelledError`.
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
use babysitter_common::worker_api::WorkerApi;
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::worker_service_client::WorkerServiceClient;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Code, Status};

use crate::agent::{self, AgentSettings, AgentSpec};
use crate::exec::{self, Done, Task};
use crate::harness::{Detected, HarnessKind};
use control::Running;

/// How long a completion waits for an eagerly dispatched next task.
const EAGER_WAIT: Duration = Duration::from_secs(1);

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    pub worker_id: String,
    pub namespaces: Vec<String>,
    pub labels: HashMap<String, String>,
    pub task_kinds: Vec<String>,
    pub max_concurrency: usize,
    /// Per-task working directories are created under it.
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
}

/// What one executed task produced, with what the completion carries besides the value.
struct Executed {
    done: Done,
    usage: Option<cpb::TaskUsage>,
    metadata: Value,
}

impl From<Done> for Executed {
    fn from(done: Done) -> Self {
        Self {
            done,
            usage: None,
            metadata: Value::Null,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Timing {
    heartbeat: Duration,
    max_poll_wait: Duration,
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
    /// [`ClientOptions`] message sizes and compression.
    pub fn new(channel: AuthedChannel, settings: WorkerSettings) -> Self {
        let client: WorkerServiceClient<AuthedChannel> = ClientOptions::default().client(channel);
        Self::with_api(Arc::new(client), settings)
    }

    /// A worker calling the orchestrator through `api`: gRPC ([`Worker::new`]) or the
    /// orchestrator's handlers in the same process (`babysitter up`).
    pub fn with_api(api: Arc<dyn WorkerApi>, settings: WorkerSettings) -> Self {
        Self {
            api,
            settings: Arc::new(settings),
            control: WorkerControl::default(),
            timing: Arc::new(Mutex::new(Timing {
                heartbeat: Duration::from_secs(10),
                max_poll_wait: Duration::from_secs(30),
            })),
            agents: None,
        }
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
        if !harnesses.is_empty() && !task_kinds.iter().any(|k| k == "agent") {
            task_kinds.push("agent".to_owned());
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

    /// Registers until it succeeds or `stop` is cancelled.
    async fn register(&self, stop: &CancellationToken) -> bool {
        let mut backoff = Duration::from_millis(100);
        loop {
            let req = pb::RegisterWorkerRequest {
                worker_id: self.settings.worker_id.clone(),
                namespaces: self.settings.namespaces.clone(),
                capabilities: Some((&self.capabilities()).into()),
                agent_version: format!("harness-launcher/{}", env!("CARGO_PKG_VERSION")),
            };
            match self.api.register_worker(req).await {
                Ok(r) => {
                    *self.timing.lock().unwrap_or_else(|p| p.into_inner()) = Timing {
                        heartbeat: dur(r.heartbeat_interval, Duration::from_secs(10)),
                        max_poll_wait: dur(r.max_poll_wait, Duration::from_secs(30)),
                    };
                    tracing::info!(worker_id = %r.worker_id, "registered with the orchestrator");
                    self.control.registered(if r.worker_id.is_empty() {
                        &self.settings.worker_id
                    } else {
                        &r.worker_id
                    });
                    return true;
                }
                Err(s) => {
                    tracing::warn!(error = %s.message(), code = ?s.code(), "registration failed; retrying");
                    if matches!(s.code(), Code::Unauthenticated | Code::PermissionDenied) {
                        backoff = Duration::from_secs(5);
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = stop.cancelled() => return false,
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
    }

    /// Runs until `stop` is cancelled, then drains: running tasks get the drain timeout to finish
    /// and are killed after it. Also returns when drained through [`WorkerControl::drain`], once
    /// nothing runs any more.
    pub async fn run(self, stop: CancellationToken) {
        // Ends registration and polling on `stop` or on a drain.
        let halt = self.control.halt_token(&stop);
        // The tasks (each with the tasks eagerly handed over after it), and the heartbeats.
        let tasks = TaskTracker::new();
        let background = TaskTracker::new();
        let hb_stop = CancellationToken::new();
        if self.register(&halt).await {
            background.spawn(self.clone().heartbeats(hb_stop.clone(), stop.clone()));
            self.poll_loop(&halt, &stop, &tasks).await;
        }
        tasks.close();
        background.close();
        if !stop.is_cancelled() && self.control.wait_drained(&stop, &tasks).await {
            hb_stop.cancel();
            background.wait().await;
            self.control.drained();
            return;
        }
        // Shutdown: running tasks finish (and complete) within the drain timeout, else are killed.
        self.control.stopping();
        if tokio::time::timeout(self.settings.drain_timeout, tasks.wait())
            .await
            .is_err()
        {
            self.control.kill_all();
            tasks.wait().await;
        }
        hb_stop.cancel();
        background.wait().await;
    }

    /// Long-polls for tasks up to the free slots and spawns each on `tracker`, until `halt`.
    async fn poll_loop(
        &self,
        halt: &CancellationToken,
        stop: &CancellationToken,
        tracker: &TaskTracker,
    ) {
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
                    if !self.register(halt).await {
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
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    async fn heartbeats(self, done: CancellationToken, stop: CancellationToken) {
        loop {
            let every = self.timing().heartbeat;
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = done.cancelled() => return,
            }
            let leases = self.control.lease_ids();
            if leases.is_empty() {
                continue;
            }
            let req = pb::HeartbeatRequest {
                worker_id: self.settings.worker_id.clone(),
                lease_ids: leases,
            };
            match self.api.heartbeat(req).await {
                Ok(r) => {
                    for l in r.leases {
                        let state = pb::LeaseState::try_from(l.state).unwrap_or_default();
                        let lost = match state {
                            pb::LeaseState::Lost => true,
                            pb::LeaseState::Cancelled => false,
                            _ => continue,
                        };
                        self.control.stop_lease(&l.lease_id, lost, l.reason);
                    }
                }
                Err(s) if is_unknown_worker(&s) => {
                    self.register(&stop).await;
                }
                Err(s) => tracing::warn!(error = %s.message(), "heartbeat failed"),
            }
        }
    }

    /// Runs one task and completes it; returns a task handed over with the completion.
    async fn run_task(
        &self,
        a: pb::TaskAssignment,
        stop: &CancellationToken,
    ) -> Option<pb::TaskAssignment> {
        let cancel = CancellationToken::new();
        let events = Arc::new(AtomicU64::new(0));
        self.control.insert(Running {
            cancel: cancel.clone(),
            stopped: None,
            info: TaskInfo {
                lease_id: a.lease_id.clone(),
                namespace: a.namespace.clone(),
                run_id: a.run_id.clone(),
                effect_id: a.effect_id.clone(),
                kind: a.kind.clone(),
                harness: self.harness_of(&a),
                started_at: SystemTime::now(),
                events_reported: 0,
                attempt: a.attempt,
            },
            events: events.clone(),
        });
        let work_dir = self
            .settings
            .work_dir
            .join(&a.run_id)
            .join(format!("{}-{}", a.effect_id, a.attempt));
        let started = SystemTime::now();
        let done = self.execute(&a, &work_dir, &cancel, &events).await;
        let finished = SystemTime::now();
        let stopped = self.control.stopped_reason(&a.lease_id);
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

    /// The harness adapter an agent task runs: the one it names, else the worker's default.
    fn harness_of(&self, a: &pb::TaskAssignment) -> Option<String> {
        if a.kind != "agent" {
            return None;
        }
        let named = serde_json::from_slice::<Value>(&a.task_json)
            .ok()
            .and_then(|def| AgentSpec::from_task(&def).ok())
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
        if a.kind == "agent" {
            let Some(agents) = self.agents.clone() else {
                return fail(
                    "TaskStartError",
                    "this worker cannot execute tasks of kind `agent` (no harness installed)"
                        .into(),
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
        let reporter = tokio::spawn(report_events(
            self.api.clone(),
            self.settings.worker_id.clone(),
            a.lease_id.clone(),
            rx,
            events.clone(),
        ));
        let session_id = format!("{}-{}", a.effect_id, a.attempt);
        let timeout = a
            .timeout
            .and_then(|d| Duration::try_from(d).ok())
            .filter(|d| !d.is_zero());
        let r = agent::run(agents, def, work_dir, &session_id, &tx, timeout, cancel).await;
        drop(tx);
        if let Ok(Err(s)) = reporter.await {
            tracing::warn!(lease_id = %a.lease_id, error = %s.message(), "reporting agent events failed; the task goes on");
        }
        Executed {
            done: r.done,
            usage: r.usage,
            metadata: r.metadata,
        }
    }

    /// Completes under the lease, retrying transient failures while the lease may be live; with
    /// `take_next`, asks for the next task in the same call (eager dispatch).
    async fn complete(
        &self,
        a: &pb::TaskAssignment,
        executed: Executed,
        started: SystemTime,
        finished: SystemTime,
        take_next: bool,
    ) -> Option<pb::TaskAssignment> {
        let Executed {
            done,
            usage,
            metadata,
        } = executed;
        let outcome = match done.outcome {
            Ok(v) => cpb::task_result::Outcome::ValueJson(Bytes::from(
                serde_json::to_vec(&v).unwrap_or_default(),
            )),
            Err(e) => cpb::task_result::Outcome::Error(cpb::TaskError {
                name: e["name"].as_str().unwrap_or("Error").to_owned(),
                message: e["message"].as_str().unwrap_or_default().to_owned(),
                stack: String::new(),
                data_json: e
                    .get("data")
                    .map(|d| Bytes::from(serde_json::to_vec(d).unwrap_or_default()))
                    .unwrap_or_default(),
            }),
        };
        let req = pb::CompleteTaskRequest {
            worker_id: self.settings.worker_id.clone(),
            lease_id: a.lease_id.clone(),
            effect_id: a.effect_id.clone(),
            result: Some(cpb::TaskResult {
                outcome: Some(outcome),
                stdout: done.stdout.map(Bytes::from).unwrap_or_default(),
                stderr: done.stderr.map(Bytes::from).unwrap_or_default(),
                started_at: Some(started.into()),
                finished_at: Some(finished.into()),
                metadata_json: if metadata.is_null() {
                    Bytes::new()
                } else {
                    Bytes::from(serde_json::to_vec(&metadata).unwrap_or_default())
                },
                usage,
            }),
            next_max_tasks: u32::from(take_next),
            next_wait: prost_types::Duration::try_from(EAGER_WAIT).ok(),
        };
        let mut backoff = Duration::from_millis(50);
        for _ in 0..60 {
            match self.api.complete_task(req.clone()).await {
                Ok(r) => return r.next_tasks.into_iter().next(),
                Err(s) if is_lease_lost(&s) => {
                    tracing::info!(lease_id = %a.lease_id, reason = %s.message(), "completion refused: lease lost");
                    return None;
                }
                Err(s)
                    if matches!(
                        s.code(),
                        Code::Unavailable | Code::Unknown | Code::DeadlineExceeded
                    ) =>
                {
                    tracing::warn!(lease_id = %a.lease_id, error = %s.message(), "completion failed; retrying");
                }
                Err(s) => {
                    tracing::error!(lease_id = %a.lease_id, code = ?s.code(), error = %s.message(), "completion refused");
                    return None;
                }
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
        tracing::error!(lease_id = %a.lease_id, "gave up completing the task; its lease will expire and it will run again");
        None
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
