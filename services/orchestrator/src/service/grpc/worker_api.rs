//! `WorkerService`: register, long-poll, heartbeat, agent events, completion — served over
//! gRPC and, for a worker in the same process, through [`InProcess`].

use babysitter_common::agent_session::SavedSession;
use babysitter_common::auth::{Principal, Role};
use babysitter_common::server::ServerConfig;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::worker_service_server::{
    WorkerService, WorkerServiceServer,
};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use super::{agent_event_of, authorize, duration_of, duration_pb, outcome_of, system_time_to_pb};
use crate::service::ServiceError;
use crate::service::queue::{Capabilities, LeaseVerdict};
use crate::service::runs::{RunManager, TaskOutcome};

#[derive(Debug, Clone)]
pub struct WorkerApi {
    manager: RunManager,
    /// The server's drain: from then on no task is handed out (see [`WorkerApi::assignments`]).
    draining: CancellationToken,
}

impl WorkerApi {
    /// Workers can reach `manager` from now on: the grace in which they adopt the tasks
    /// recovered at its start begins here (not while recovery ran).
    pub(super) fn new(manager: RunManager, draining: CancellationToken) -> Self {
        manager.open_to_workers();
        Self { manager, draining }
    }

    /// The tonic service, with the message-size limits and compression of `config`.
    pub fn into_service(self, config: &ServerConfig) -> WorkerServiceServer<Self> {
        babysitter_common::tune_grpc_service!(WorkerServiceServer::new(self), config)
    }
}

impl WorkerApi {
    /// Long-polls the queue and turns assignments into wire tasks (secret placeholders resolved;
    /// a task naming an unknown secret is failed here instead of being sent).
    ///
    /// A draining server hands out nothing, and its waiting polls end empty at once. Why: while
    /// it drains it accepts no new connection, so the workers that ran the tasks it recovered
    /// cannot reach it to adopt them; a poll left waiting on an old connection would otherwise
    /// take such a task once its adoption grace ran out, and run it a second time while its
    /// first worker still holds the result.
    async fn assignments(
        &self,
        worker_id: &str,
        max_tasks: u32,
        wait: Option<prost_types::Duration>,
    ) -> Result<Vec<pb::TaskAssignment>, Status> {
        let wait = wait.map(duration_of).unwrap_or_default();
        if self.draining.is_cancelled() {
            return Ok(Vec::new());
        }
        let polled = self
            .manager
            .queue()
            .poll(worker_id, max_tasks.clamp(1, 1000) as usize, wait);
        let got = tokio::select! {
            biased;
            () = self.draining.cancelled() => return Ok(Vec::new()),
            got = polled => got.map_err(ServiceError::from)?,
        };
        let mut ready = Vec::with_capacity(got.len());
        for a in got {
            match self.manager.dispatch_form(&a.spec.task_json) {
                Ok(task_json) => ready.push((a, task_json)),
                Err(e) => {
                    // A task naming a secret this orchestrator lacks fails now, not on a worker.
                    let outcome = TaskOutcome {
                        outcome: Some(Err(
                            serde_json::json!({"name": "SecretNotFound", "message": e.to_string()}),
                        )),
                        ..Default::default()
                    };
                    let manager = self.manager.clone();
                    let worker = worker_id.to_owned();
                    tokio::spawn(async move {
                        let _ = manager
                            .complete_task(&worker, &a.lease_id, &a.spec.effect_id, outcome, false)
                            .await;
                    });
                }
            }
        }
        let mut tasks = Vec::with_capacity(ready.len());
        for (a, task_json) in ready {
            let session = match a.spec.session_file {
                Some(_) => self.manager.saved_session(&a.spec).await,
                None => None,
            };
            let trace = a.spec.trace.as_ref();
            tasks.push(pb::TaskAssignment {
                lease_id: a.lease_id,
                lease_expires_at: Some(system_time_to_pb(a.expires_at)),
                namespace: a.spec.namespace.clone(),
                run_id: a.spec.run_id.clone(),
                effect_id: a.spec.effect_id.clone(),
                task_id: a.spec.task_id.clone(),
                invocation_key: a.spec.invocation_key.clone(),
                kind: a.spec.kind.clone(),
                label: a.spec.label.clone(),
                task_json,
                attempt: a.attempt,
                timeout: a.spec.timeout.map(duration_pb),
                traceparent: trace.map(|t| t.traceparent.clone()).unwrap_or_default(),
                tracestate: trace.map(|t| t.tracestate.clone()).unwrap_or_default(),
                session: session.map(SavedSession::into_pb),
            });
        }
        Ok(tasks)
    }
}

const WORKER: &[Role] = &[Role::Worker];

/// The handlers, for a caller already authorized: the tonic service below checks the token;
/// the in-process implementation ([`InProcess`]) is the server's own worker.
impl WorkerApi {
    async fn register(
        &self,
        who: Principal,
        r: pb::RegisterWorkerRequest,
    ) -> Result<pb::RegisterWorkerResponse, Status> {
        if r.worker_id.len() > 256 {
            return Err(ServiceError::invalid("worker_id", "longer than 256 characters").into());
        }
        // A worker serves at most the namespaces its token allows.
        let namespaces = if r.namespaces.is_empty() {
            who.namespaces
        } else {
            if let Some(ns) = r.namespaces.iter().find(|n| !who.allows(n)) {
                return Err(Status::permission_denied(format!(
                    "this token may not serve namespace {ns}"
                )));
            }
            r.namespaces
        };
        let caps = r.capabilities.unwrap_or_default();
        let queue = self.manager.queue();
        let id = queue.register(
            &r.worker_id,
            namespaces,
            Capabilities {
                task_kinds: caps.task_kinds,
                harnesses: caps.harnesses.into_iter().map(|h| h.name).collect(),
                labels: caps.labels.into_iter().collect(),
                max_concurrency: caps.max_concurrency,
            },
        );
        tracing::info!(worker_id = %id, agent = %r.agent_version, "worker registered");
        let c = queue.config();
        Ok(pb::RegisterWorkerResponse {
            worker_id: id,
            lease_duration: Some(duration_pb(c.lease_duration)),
            heartbeat_interval: Some(duration_pb(c.heartbeat_interval)),
            max_poll_wait: Some(duration_pb(c.max_poll_wait)),
        })
    }

    async fn poll(&self, r: pb::PollTasksRequest) -> Result<pb::PollTasksResponse, Status> {
        let tasks = self.assignments(&r.worker_id, r.max_tasks, r.wait).await?;
        Ok(pb::PollTasksResponse { tasks })
    }

    fn heartbeats(&self, r: pb::HeartbeatRequest) -> Result<pb::HeartbeatResponse, Status> {
        let verdicts = self
            .manager
            .queue()
            .heartbeat(&r.worker_id, &r.lease_ids)
            .map_err(ServiceError::from)?;
        let leases = r
            .lease_ids
            .into_iter()
            .zip(verdicts)
            .map(|(lease_id, v)| match v {
                LeaseVerdict::Active { expires_at } => pb::LeaseStatus {
                    lease_id,
                    state: pb::LeaseState::Active as i32,
                    expires_at: Some(system_time_to_pb(expires_at)),
                    reason: String::new(),
                },
                LeaseVerdict::Cancelled { reason } => pb::LeaseStatus {
                    lease_id,
                    state: pb::LeaseState::Cancelled as i32,
                    expires_at: None,
                    reason,
                },
                LeaseVerdict::Lost { reason } => pb::LeaseStatus {
                    lease_id,
                    state: pb::LeaseState::Lost as i32,
                    expires_at: None,
                    reason,
                },
            })
            .collect();
        Ok(pb::HeartbeatResponse { leases })
    }

    /// One batch of a task's agent events; returns how many were accepted.
    fn report_batch(&self, msg: pb::ReportEventsRequest) -> u64 {
        let events = msg.events.into_iter().map(agent_event_of).collect();
        self.manager
            .report_agent_events(&msg.worker_id, &msg.lease_id, events) as u64
    }

    async fn complete(
        &self,
        r: pb::CompleteTaskRequest,
    ) -> Result<pb::CompleteTaskResponse, Status> {
        let outcome = outcome_of(r.result)?;
        let already = self
            .manager
            .complete_task(
                &r.worker_id,
                &r.lease_id,
                &r.effect_id,
                outcome,
                r.next_max_tasks > 0,
            )
            .await?;
        let next_tasks = if r.next_max_tasks > 0 {
            self.assignments(&r.worker_id, r.next_max_tasks, r.next_wait)
                .await?
        } else {
            Vec::new()
        };
        Ok(pb::CompleteTaskResponse {
            already_completed: already,
            next_tasks,
        })
    }
}

impl WorkerApi {
    async fn save(&self, r: pb::SaveSessionRequest) -> Result<pb::SaveSessionResponse, Status> {
        let Some(session) = r.session else {
            return Err(ServiceError::invalid("session", "missing").into());
        };
        let session = SavedSession::from_pb(session)
            .map_err(|e| ServiceError::invalid("session", e.to_string()))?;
        self.manager
            .save_session(&r.worker_id, &r.lease_id, session)
            .await?;
        Ok(pb::SaveSessionResponse {})
    }

    fn release(&self, r: pb::ReleaseTaskRequest) -> Result<pb::ReleaseTaskResponse, Status> {
        if r.reason.len() > 4096 {
            return Err(ServiceError::invalid("reason", "longer than 4096 bytes").into());
        }
        let retry_after = r.retry_after.map(duration_of).unwrap_or_default();
        let next_attempt = self.manager.release_task(
            &r.worker_id,
            &r.lease_id,
            &r.effect_id,
            &r.reason,
            retry_after,
        )?;
        Ok(pb::ReleaseTaskResponse { next_attempt })
    }
}

#[tonic::async_trait]
impl WorkerService for WorkerApi {
    async fn register_worker(
        &self,
        req: Request<pb::RegisterWorkerRequest>,
    ) -> Result<Response<pb::RegisterWorkerResponse>, Status> {
        let who = authorize(&req, WORKER)?;
        self.register(who, req.into_inner())
            .await
            .map(Response::new)
    }

    async fn poll_tasks(
        &self,
        req: Request<pb::PollTasksRequest>,
    ) -> Result<Response<pb::PollTasksResponse>, Status> {
        authorize(&req, WORKER)?;
        self.poll(req.into_inner()).await.map(Response::new)
    }

    async fn heartbeat(
        &self,
        req: Request<pb::HeartbeatRequest>,
    ) -> Result<Response<pb::HeartbeatResponse>, Status> {
        authorize(&req, WORKER)?;
        self.heartbeats(req.into_inner()).map(Response::new)
    }

    async fn report_events(
        &self,
        req: Request<Streaming<pb::ReportEventsRequest>>,
    ) -> Result<Response<pb::ReportEventsResponse>, Status> {
        authorize(&req, WORKER)?;
        let mut stream = req.into_inner();
        let mut accepted = 0u64;
        while let Some(msg) = stream.message().await? {
            accepted += self.report_batch(msg);
        }
        Ok(Response::new(pb::ReportEventsResponse {
            accepted_events: accepted,
        }))
    }

    async fn complete_task(
        &self,
        req: Request<pb::CompleteTaskRequest>,
    ) -> Result<Response<pb::CompleteTaskResponse>, Status> {
        authorize(&req, WORKER)?;
        self.complete(req.into_inner()).await.map(Response::new)
    }

    async fn save_session(
        &self,
        req: Request<pb::SaveSessionRequest>,
    ) -> Result<Response<pb::SaveSessionResponse>, Status> {
        authorize(&req, WORKER)?;
        self.save(req.into_inner()).await.map(Response::new)
    }

    async fn release_task(
        &self,
        req: Request<pb::ReleaseTaskRequest>,
    ) -> Result<Response<pb::ReleaseTaskResponse>, Status> {
        authorize(&req, WORKER)?;
        self.release(req.into_inner()).map(Response::new)
    }
}

/// The server's own worker calling these handlers in the same process (`babysitter up`): no
/// token (it is the server), no network, the same answers and errors as over gRPC.
#[derive(Debug, Clone)]
pub struct InProcess(WorkerApi);

impl WorkerApi {
    /// This service as a worker in the same process calls it.
    pub fn in_process(&self) -> InProcess {
        InProcess(self.clone())
    }
}

#[tonic::async_trait]
impl babysitter_common::worker_api::WorkerApi for InProcess {
    async fn register_worker(
        &self,
        req: pb::RegisterWorkerRequest,
    ) -> Result<pb::RegisterWorkerResponse, Status> {
        self.0.register(Principal::anonymous_admin(), req).await
    }

    async fn poll_tasks(&self, req: pb::PollTasksRequest) -> Result<pb::PollTasksResponse, Status> {
        self.0.poll(req).await
    }

    async fn heartbeat(&self, req: pb::HeartbeatRequest) -> Result<pb::HeartbeatResponse, Status> {
        self.0.heartbeats(req)
    }

    async fn report_events(
        &self,
        mut batches: tokio::sync::mpsc::Receiver<pb::ReportEventsRequest>,
    ) -> Result<pb::ReportEventsResponse, Status> {
        let mut accepted = 0u64;
        while let Some(msg) = batches.recv().await {
            accepted += self.0.report_batch(msg);
        }
        Ok(pb::ReportEventsResponse {
            accepted_events: accepted,
        })
    }

    async fn complete_task(
        &self,
        req: pb::CompleteTaskRequest,
    ) -> Result<pb::CompleteTaskResponse, Status> {
        self.0.complete(req).await
    }

    async fn save_session(
        &self,
        req: pb::SaveSessionRequest,
    ) -> Result<pb::SaveSessionResponse, Status> {
        self.0.save(req).await
    }

    async fn release_task(
        &self,
        req: pb::ReleaseTaskRequest,
    ) -> Result<pb::ReleaseTaskResponse, Status> {
        self.0.release(req)
    }
}
