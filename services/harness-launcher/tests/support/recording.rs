//! A [`WorkerApi`] that records what the worker sends and hands every call on to the real
//! orchestrator's (in process or over gRPC): with the orchestrator real, the tests can still
//! assert on exactly what the worker sent — its capabilities, the tasks it was handed and when,
//! each completion with its `next_max_tasks`, its agent events — and on what it was answered.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use babysitter_common::worker_api::WorkerApi;
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tonic::Status;

/// A task handed to the worker (by a poll, or along with a completion).
#[derive(Debug, Clone)]
pub struct Assigned {
    pub task: pb::TaskAssignment,
    /// When the orchestrator's answer reached the worker: the lease starts here.
    pub at: Instant,
}

/// A completion the worker sent.
#[derive(Debug, Clone)]
pub struct Completed {
    pub request: pb::CompleteTaskRequest,
    /// When the worker sent it.
    pub at: Instant,
    /// The orchestrator's refusal (`code: message`), `None` when it accepted the completion.
    pub refused: Option<String>,
}

/// Everything recorded, in the order it happened.
#[derive(Debug, Default)]
pub struct Log {
    /// The capabilities of every accepted registration.
    pub registered: Vec<cpb::WorkerCapabilities>,
    pub assigned: Vec<Assigned>,
    pub completed: Vec<Completed>,
    /// Agent events reported, by lease.
    pub events: HashMap<String, Vec<cpb::AgentEvent>>,
}

impl Log {
    /// The leases under which (run, effect) was handed to the worker.
    pub fn leases(&self, run_id: &str, effect_id: &str) -> Vec<String> {
        self.assigned
            .iter()
            .filter(|a| a.task.run_id == run_id && a.task.effect_id == effect_id)
            .map(|a| a.task.lease_id.clone())
            .collect()
    }

    /// The completions the worker sent for (run, effect).
    pub fn completions(&self, run_id: &str, effect_id: &str) -> Vec<Completed> {
        let leases = self.leases(run_id, effect_id);
        self.completed
            .iter()
            .filter(|c| leases.contains(&c.request.lease_id))
            .cloned()
            .collect()
    }

    /// The agent events the worker reported for (run, effect), lease after lease.
    pub fn events_of(&self, run_id: &str, effect_id: &str) -> Vec<cpb::AgentEvent> {
        self.leases(run_id, effect_id)
            .iter()
            .flat_map(|l| self.events.get(l).cloned().unwrap_or_default())
            .collect()
    }
}

/// The recording decorator around `inner`.
#[derive(Debug, Clone)]
pub struct Recorder {
    inner: Arc<dyn WorkerApi>,
    log: Arc<watch::Sender<Log>>,
}

impl Recorder {
    pub fn new(inner: Arc<dyn WorkerApi>) -> Self {
        Self {
            inner,
            log: Arc::new(watch::Sender::new(Log::default())),
        }
    }

    /// Reads the log as it is now.
    pub fn read<R>(&self, f: impl FnOnce(&Log) -> R) -> R {
        f(&self.log.borrow())
    }

    /// Waits until `ready` finds what it looks for in the log; `None` after `within` (a guard
    /// against a hung worker, not a timing check).
    pub async fn wait_for<R>(
        &self,
        within: std::time::Duration,
        mut ready: impl FnMut(&Log) -> Option<R>,
    ) -> Option<R> {
        let mut rx = self.log.subscribe();
        let wait = async {
            loop {
                if let Some(r) = ready(&rx.borrow_and_update()) {
                    return Some(r);
                }
                if rx.changed().await.is_err() {
                    return None;
                }
            }
        };
        tokio::time::timeout(within, wait).await.ok().flatten()
    }

    fn assigned(&self, tasks: &[pb::TaskAssignment]) {
        if tasks.is_empty() {
            return;
        }
        let at = Instant::now();
        self.log.send_modify(|l| {
            l.assigned.extend(tasks.iter().map(|t| Assigned {
                task: t.clone(),
                at,
            }));
        });
    }
}

#[tonic::async_trait]
impl WorkerApi for Recorder {
    async fn register_worker(
        &self,
        req: pb::RegisterWorkerRequest,
    ) -> Result<pb::RegisterWorkerResponse, Status> {
        let caps = req.capabilities.clone().unwrap_or_default();
        let answer = self.inner.register_worker(req).await;
        if answer.is_ok() {
            self.log.send_modify(|l| l.registered.push(caps));
        }
        answer
    }

    async fn poll_tasks(&self, req: pb::PollTasksRequest) -> Result<pb::PollTasksResponse, Status> {
        let answer = self.inner.poll_tasks(req).await;
        if let Ok(r) = &answer {
            self.assigned(&r.tasks);
        }
        answer
    }

    async fn heartbeat(&self, req: pb::HeartbeatRequest) -> Result<pb::HeartbeatResponse, Status> {
        self.inner.heartbeat(req).await
    }

    async fn report_events(
        &self,
        mut batches: mpsc::Receiver<pb::ReportEventsRequest>,
    ) -> Result<pb::ReportEventsResponse, Status> {
        let (tx, rx) = mpsc::channel(16);
        let log = self.log.clone();
        // Each batch is recorded, then passed on; the orchestrator's stream ends with the worker's.
        let forward = async move {
            while let Some(batch) = batches.recv().await {
                log.send_modify(|l| {
                    l.events
                        .entry(batch.lease_id.clone())
                        .or_default()
                        .extend(batch.events.iter().cloned());
                });
                if tx.send(batch).await.is_err() {
                    break;
                }
            }
        };
        let ((), answer) = tokio::join!(forward, self.inner.report_events(rx));
        answer
    }

    async fn complete_task(
        &self,
        req: pb::CompleteTaskRequest,
    ) -> Result<pb::CompleteTaskResponse, Status> {
        let request = req.clone();
        let at = Instant::now();
        let answer = self.inner.complete_task(req).await;
        let refused = answer
            .as_ref()
            .err()
            .map(|s| format!("{:?}: {}", s.code(), s.message()));
        self.log.send_modify(|l| {
            l.completed.push(Completed {
                request,
                at,
                refused,
            });
        });
        if let Ok(r) = &answer {
            self.assigned(&r.next_tasks);
        }
        answer
    }
}
