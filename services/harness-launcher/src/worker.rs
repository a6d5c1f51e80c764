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

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use babysitter_common::client::{AuthedChannel, ClientOptions};
use babysitter_common::error::{ErrorKind, error_kind};
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::worker_service_client::WorkerServiceClient;
use bytes::Bytes;
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Code, Status};

use crate::agent::{self, AgentSettings};
use crate::exec::{self, Done, Task};

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

#[derive(Debug)]
struct Running {
    cancel: CancellationToken,
    /// Why it was stopped: `Some(true)` = lease lost (drop the result), `Some(false)` = cancelled.
    stopped: Option<(bool, String)>,
}

/// The worker.
#[derive(Debug, Clone)]
pub struct Worker {
    client: WorkerServiceClient<AuthedChannel>,
    settings: Arc<WorkerSettings>,
    running: Arc<Mutex<HashMap<String, Running>>>,
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
        Self {
            client: ClientOptions::default().client(channel),
            settings: Arc::new(settings),
            running: Default::default(),
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

    fn capabilities(&self) -> cpb::WorkerCapabilities {
        let mut task_kinds = self.settings.task_kinds.clone();
        let harnesses: Vec<cpb::HarnessInfo> = self
            .agents
            .iter()
            .flat_map(|a| a.harnesses.iter())
            .map(|d| cpb::HarnessInfo {
                name: d.kind.name().to_owned(),
                version: d.version.clone(),
                binary_path: d.path.display().to_string(),
            })
            .collect();
        if !harnesses.is_empty() && !task_kinds.iter().any(|k| k == "agent") {
            task_kinds.push("agent".to_owned());
        }
        cpb::WorkerCapabilities {
            task_kinds,
            harnesses,
            labels: self.settings.labels.clone(),
            max_concurrency: self.settings.max_concurrency as u32,
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
                capabilities: Some(self.capabilities()),
                agent_version: format!("harness-launcher/{}", env!("CARGO_PKG_VERSION")),
            };
            match self.client.clone().register_worker(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    *self.timing.lock().unwrap_or_else(|p| p.into_inner()) = Timing {
                        heartbeat: dur(r.heartbeat_interval, Duration::from_secs(10)),
                        max_poll_wait: dur(r.max_poll_wait, Duration::from_secs(30)),
                    };
                    tracing::info!(worker_id = %r.worker_id, "registered with the orchestrator");
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

    /// Runs until `stop` is cancelled, then drains.
    pub async fn run(self, stop: CancellationToken) {
        if !self.register(&stop).await {
            return;
        }
        let tracker = TaskTracker::new();
        let hb_stop = CancellationToken::new();
        tracker.spawn(self.clone().heartbeats(hb_stop.clone(), stop.clone()));
        let slots = Arc::new(Semaphore::new(self.settings.max_concurrency.max(1)));
        let mut backoff = Duration::from_millis(100);
        while !stop.is_cancelled() {
            // Wait for at least one free slot.
            let permit = tokio::select! {
                p = slots.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
                () = stop.cancelled() => break,
            };
            let free = slots.available_permits() + 1;
            drop(permit);
            let req = pb::PollTasksRequest {
                worker_id: self.settings.worker_id.clone(),
                max_tasks: free as u32,
                wait: prost_types::Duration::try_from(self.timing().max_poll_wait).ok(),
            };
            let mut client = self.client.clone();
            let polled = tokio::select! {
                r = client.poll_tasks(req) => r,
                () = stop.cancelled() => break,
            };
            match polled {
                Ok(r) => {
                    backoff = Duration::from_millis(100);
                    for a in r.into_inner().tasks {
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
                    if !self.register(&stop).await {
                        break;
                    }
                }
                Err(s) => {
                    tracing::warn!(error = %s.message(), code = ?s.code(), "poll failed; retrying");
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        () = stop.cancelled() => break,
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
        // Drain: running tasks finish (and complete) within the drain timeout, else are killed.
        tracker.close();
        let drained = tokio::time::timeout(self.settings.drain_timeout, async {
            while !self
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_empty()
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        if drained.is_err() {
            for r in self
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
            {
                r.cancel.cancel();
            }
        }
        hb_stop.cancel();
        tracker.wait().await;
    }

    async fn heartbeats(self, done: CancellationToken, stop: CancellationToken) {
        loop {
            let every = self.timing().heartbeat;
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = done.cancelled() => return,
            }
            let leases: Vec<String> = self
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .keys()
                .cloned()
                .collect();
            if leases.is_empty() {
                continue;
            }
            let req = pb::HeartbeatRequest {
                worker_id: self.settings.worker_id.clone(),
                lease_ids: leases,
            };
            match self.client.clone().heartbeat(req).await {
                Ok(r) => {
                    let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
                    for l in r.into_inner().leases {
                        let state = pb::LeaseState::try_from(l.state).unwrap_or_default();
                        let lost = match state {
                            pb::LeaseState::Lost => true,
                            pb::LeaseState::Cancelled => false,
                            _ => continue,
                        };
                        if let Some(task) = running.get_mut(&l.lease_id) {
                            tracing::info!(lease_id = %l.lease_id, lost, reason = %l.reason, "stopping a task");
                            task.stopped = Some((lost, l.reason));
                            task.cancel.cancel();
                        }
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
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                a.lease_id.clone(),
                Running {
                    cancel: cancel.clone(),
                    stopped: None,
                },
            );
        let work_dir = self
            .settings
            .work_dir
            .join(&a.run_id)
            .join(format!("{}-{}", a.effect_id, a.attempt));
        let started = SystemTime::now();
        let done = self.execute(&a, &work_dir, &cancel).await;
        let finished = SystemTime::now();
        let stopped = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&a.lease_id)
            .and_then(|r| r.stopped.clone());
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
                self.complete(&a, done, started, finished, !stop.is_cancelled())
                    .await
            }
            None => None,
        };
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&a.lease_id);
        let _ = tokio::fs::remove_dir_all(&work_dir).await;
        next
    }

    async fn execute(
        &self,
        a: &pb::TaskAssignment,
        work_dir: &std::path::Path,
        cancel: &CancellationToken,
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
            return self.execute_agent(a, &def, &agents, work_dir, cancel).await;
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
    ) -> Executed {
        let (tx, rx) = tokio::sync::mpsc::channel(1024);
        let reporter = tokio::spawn(report_events(
            self.client.clone(),
            self.settings.worker_id.clone(),
            a.lease_id.clone(),
            rx,
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
            match self.client.clone().complete_task(req.clone()).await {
                Ok(r) => return r.into_inner().next_tasks.into_iter().next(),
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
    mut client: WorkerServiceClient<AuthedChannel>,
    worker_id: String,
    lease_id: String,
    mut rx: tokio::sync::mpsc::Receiver<cpb::AgentEvent>,
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
            let req = pb::ReportEventsRequest {
                worker_id: worker_id.clone(),
                lease_id: lease_id.clone(),
                events,
            };
            if req_tx.send(req).await.is_err() {
                // The stream ended early: keep draining so the agent never blocks on events.
                while rx.recv().await.is_some() {}
                return;
            }
        }
    });
    let r = client
        .report_events(tokio_stream::wrappers::ReceiverStream::new(req_rx))
        .await;
    let _ = batcher.await;
    r.map(|r| r.into_inner().accepted_events)
}
