//! A minimal `WorkerService` on 127.0.0.1:0 for driving the real [`Worker`] over real gRPC: it
//! hands out queued tasks, keeps every lease active, collects reported events and completions.
//! The orchestrator's own in-process tests cover its side of the protocol; this one lets the
//! launcher's tests assert on exactly what the worker sent.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::worker_service_server::{
    WorkerService, WorkerServiceServer,
};
use tokio::sync::Notify;
use tonic::{Request, Response, Status, Streaming};

#[derive(Default)]
pub struct State {
    pub capabilities: Option<cpb::WorkerCapabilities>,
    pub queue: VecDeque<pb::TaskAssignment>,
    pub events: HashMap<String, Vec<cpb::AgentEvent>>,
    pub results: HashMap<String, cpb::TaskResult>,
    /// `next_max_tasks` of each completion (how many tasks the worker asked to take along).
    pub next_asked: HashMap<String, u32>,
}

#[derive(Clone, Default)]
pub struct Fake {
    pub state: Arc<Mutex<State>>,
    pub changed: Arc<Notify>,
}

fn lock(s: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

#[tonic::async_trait]
impl WorkerService for Fake {
    async fn register_worker(
        &self,
        req: Request<pb::RegisterWorkerRequest>,
    ) -> Result<Response<pb::RegisterWorkerResponse>, Status> {
        let r = req.into_inner();
        lock(&self.state).capabilities = r.capabilities;
        self.changed.notify_waiters();
        Ok(Response::new(pb::RegisterWorkerResponse {
            worker_id: r.worker_id,
            lease_duration: prost_types::Duration::try_from(Duration::from_secs(60)).ok(),
            heartbeat_interval: prost_types::Duration::try_from(Duration::from_secs(1)).ok(),
            max_poll_wait: prost_types::Duration::try_from(Duration::from_millis(200)).ok(),
        }))
    }

    async fn poll_tasks(
        &self,
        _req: Request<pb::PollTasksRequest>,
    ) -> Result<Response<pb::PollTasksResponse>, Status> {
        for _ in 0..10 {
            if let Some(t) = lock(&self.state).queue.pop_front() {
                return Ok(Response::new(pb::PollTasksResponse { tasks: vec![t] }));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(Response::new(pb::PollTasksResponse { tasks: vec![] }))
    }

    async fn heartbeat(
        &self,
        req: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        let leases = req
            .into_inner()
            .lease_ids
            .into_iter()
            .map(|lease_id| pb::LeaseStatus {
                lease_id,
                state: pb::LeaseState::Active as i32,
                expires_at: None,
                reason: String::new(),
            })
            .collect();
        Ok(Response::new(pb::HeartbeatResponse { leases }))
    }

    async fn report_events(
        &self,
        req: Request<Streaming<pb::ReportEventsRequest>>,
    ) -> Result<Response<pb::ReportEventsResponse>, Status> {
        let mut s = req.into_inner();
        let mut n = 0;
        while let Some(m) = s.message().await? {
            n += m.events.len() as u64;
            lock(&self.state)
                .events
                .entry(m.lease_id)
                .or_default()
                .extend(m.events);
        }
        Ok(Response::new(pb::ReportEventsResponse {
            accepted_events: n,
        }))
    }

    async fn complete_task(
        &self,
        req: Request<pb::CompleteTaskRequest>,
    ) -> Result<Response<pb::CompleteTaskResponse>, Status> {
        let r = req.into_inner();
        let mut state = lock(&self.state);
        state
            .next_asked
            .insert(r.lease_id.clone(), r.next_max_tasks);
        if let Some(result) = r.result {
            state.results.insert(r.lease_id, result);
        }
        drop(state);
        self.changed.notify_waiters();
        Ok(Response::new(pb::CompleteTaskResponse {
            already_completed: false,
            next_tasks: vec![],
        }))
    }
}

pub struct Running {
    pub fake: Fake,
    pub url: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub async fn start() -> Self {
        let fake = Fake::default();
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let url = format!(
            "http://{}",
            l.local_addr().unwrap_or_else(|e| panic!("{e}"))
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        // The limits and compression of a default-configured orchestrator.
        let svc = babysitter_common::tune_grpc_service!(
            WorkerServiceServer::new(fake.clone()),
            &babysitter_common::server::ServerConfig::default()
        );
        let task = tokio::spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::TcpListenerStream::new(l),
                    async {
                        let _ = rx.await;
                    },
                )
                .await;
        });
        Self {
            fake,
            url,
            stop: Some(tx),
            task,
        }
    }

    pub fn push(&self, lease: &str, kind: &str, task_json: serde_json::Value) {
        lock(&self.fake.state).queue.push_back(pb::TaskAssignment {
            lease_id: lease.into(),
            run_id: "run1".into(),
            effect_id: format!("eff-{lease}"),
            task_id: "t".into(),
            kind: kind.into(),
            task_json: serde_json::to_vec(&task_json).unwrap_or_default().into(),
            attempt: 1,
            ..Default::default()
        });
    }

    /// Waits for the completion of `lease` (a guard against a hung worker, not a timing check).
    pub async fn result(&self, lease: &str, within: Duration) -> cpb::TaskResult {
        let wait = async {
            loop {
                let notified = self.fake.changed.notified();
                if let Some(r) = lock(&self.fake.state).results.get(lease) {
                    return r.clone();
                }
                tokio::select! {
                    () = notified => {}
                    () = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        };
        tokio::time::timeout(within, wait)
            .await
            .unwrap_or_else(|_| panic!("task {lease} not completed within {within:?}"))
    }

    /// The leases of the tasks still queued (never handed to the worker).
    pub fn queued(&self) -> Vec<String> {
        lock(&self.fake.state)
            .queue
            .iter()
            .map(|t| t.lease_id.clone())
            .collect()
    }

    /// `next_max_tasks` of the completion under `lease`.
    pub fn next_asked(&self, lease: &str) -> Option<u32> {
        lock(&self.fake.state).next_asked.get(lease).copied()
    }

    pub async fn capabilities(&self) -> cpb::WorkerCapabilities {
        for _ in 0..500 {
            if let Some(c) = lock(&self.fake.state).capabilities.clone() {
                return c;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the worker never registered");
    }

    /// Events reported under `lease` (the stream closes right after the task ends).
    pub async fn events(&self, lease: &str) -> Vec<cpb::AgentEvent> {
        for _ in 0..100 {
            let evs = lock(&self.fake.state)
                .events
                .get(lease)
                .cloned()
                .unwrap_or_default();
            if evs.last().is_some_and(|e| e.r#type == "session.ended") {
                return evs;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        lock(&self.fake.state)
            .events
            .get(lease)
            .cloned()
            .unwrap_or_default()
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
    }
}
