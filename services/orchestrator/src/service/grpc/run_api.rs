//! `RunService`: create, observe and steer runs.

use std::collections::BTreeMap;
use std::pin::Pin;

use babysitter_common::auth::Role;
use babysitter_journal::StoredEvent;
use babysitter_journal::grpc::event_to_pb;
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_server::{RunService, RunServiceServer};
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::{
    AgentBatch, AgentEventHub, authorize, json_bytes, namespace_for, outcome_of, parse_json,
    timestamp_of,
};
use crate::service::ServiceError;
use crate::service::bundle::Bundle;
use crate::service::runs::{Decision, NewRun, RunManager, RunStatus, RunSummary};

#[derive(Debug, Clone)]
pub struct RunApi {
    manager: RunManager,
    hub: AgentEventHub,
    shutdown: CancellationToken,
}

impl RunApi {
    pub(super) fn new(
        manager: RunManager,
        hub: AgentEventHub,
        shutdown: CancellationToken,
    ) -> Self {
        Self {
            manager,
            hub,
            shutdown,
        }
    }

    pub fn into_service(self) -> RunServiceServer<Self> {
        RunServiceServer::new(self)
            .max_decoding_message_size(64 * 1024 * 1024)
            .max_encoding_message_size(64 * 1024 * 1024)
    }
}

const CLIENT: &[Role] = &[Role::Client];

fn task_agent_events(batch: &AgentBatch) -> pb::TaskAgentEvents {
    pb::TaskAgentEvents {
        effect_id: batch.0.clone(),
        events: batch.1.clone(),
    }
}

/// The agent batches a watch has received and not yet sent, without waiting. Sent with the run's
/// terminal event: a worker finishes `ReportEvents` before it completes its task, so by then
/// every batch of the run's tasks is queued here, and a watch that is behind (both ready at
/// once) must not end without them.
fn queued_agent_events(
    rx: Option<&mut broadcast::Receiver<AgentBatch>>,
) -> Vec<pb::TaskAgentEvents> {
    let mut out = Vec::new();
    let Some(rx) = rx else { return out };
    loop {
        match rx.try_recv() {
            Ok(batch) => out.push(task_agent_events(&batch)),
            // Batches the watch fell too far behind to keep are gone; send the rest.
            Err(broadcast::error::TryRecvError::Lagged(_)) => {}
            Err(_) => return out,
        }
    }
}

fn status_pb(s: RunStatus) -> pb::RunStatus {
    match s {
        RunStatus::Created => pb::RunStatus::Created,
        RunStatus::Running => pb::RunStatus::Running,
        RunStatus::Waiting => pb::RunStatus::Waiting,
        RunStatus::Completed => pb::RunStatus::Completed,
        RunStatus::Failed => pb::RunStatus::Failed,
        RunStatus::Halted => pb::RunStatus::Halted,
        RunStatus::Cancelled => pb::RunStatus::Cancelled,
    }
}

fn status_of_pb(v: i32) -> Result<RunStatus, Status> {
    Ok(match pb::RunStatus::try_from(v) {
        Ok(pb::RunStatus::Created) => RunStatus::Created,
        Ok(pb::RunStatus::Running) => RunStatus::Running,
        Ok(pb::RunStatus::Waiting) => RunStatus::Waiting,
        Ok(pb::RunStatus::Completed) => RunStatus::Completed,
        Ok(pb::RunStatus::Failed) => RunStatus::Failed,
        Ok(pb::RunStatus::Halted) => RunStatus::Halted,
        Ok(pb::RunStatus::Cancelled) => RunStatus::Cancelled,
        Ok(pb::RunStatus::Unspecified) | Err(_) => {
            return Err(
                ServiceError::invalid("statuses", format!("{v} is not a run status")).into(),
            );
        }
    })
}

pub(crate) fn run_pb(r: &RunSummary) -> pb::Run {
    let error = r.error.as_ref().map(|e| cpb::TaskError {
        name: e
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or("Error")
            .to_owned(),
        message: e
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        stack: e
            .get("stack")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        data_json: e.get("data").map(json_bytes).unwrap_or_default(),
    });
    pb::Run {
        run_id: r.run_id.clone(),
        namespace: r.namespace.clone(),
        status: status_pb(r.status) as i32,
        labels: r.labels.clone().into_iter().collect(),
        process_id: r.process_id.clone(),
        created_at: timestamp_of(r.created_at.as_deref()),
        updated_at: timestamp_of(r.updated_at.as_deref()),
        head_seq: r.head_seq,
        pending_effects: r.pending(),
        pending_effects_by_kind: r.pending_by_kind.clone().into_iter().collect(),
        status_reason: r.status_reason.clone(),
        output_json: r.output.as_ref().map(json_bytes).unwrap_or_default(),
        error,
    }
}

fn page_size(n: u32) -> usize {
    if n == 0 { 100 } else { (n as usize).min(1000) }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchRunResponse, Status>> + Send>>;

fn terminal_status(e: &StoredEvent) -> Option<RunStatus> {
    RunStatus::of_terminal_event(e.body.kind.as_str(), &e.body.data)
}

#[tonic::async_trait]
impl RunService for RunApi {
    async fn create_run(
        &self,
        req: Request<pb::CreateRunRequest>,
    ) -> Result<Response<pb::CreateRunResponse>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let namespace = namespace_for(&who, &r.namespace)?;
        let process = r
            .process
            .ok_or_else(|| Status::from(ServiceError::invalid("process", "missing")))?;
        let inputs = r
            .inputs_json
            .as_deref()
            .map(|b| parse_json("inputs_json", b))
            .transpose()?;
        let empty = |s: String| (!s.is_empty()).then_some(s);
        let summary = self
            .manager
            .create(NewRun {
                namespace,
                bundle: Bundle {
                    entry_path: process.entry_path,
                    export_name: empty(process.export_name),
                    files: process
                        .files
                        .into_iter()
                        .map(|f| (f.path, f.content))
                        .collect(),
                },
                inputs,
                labels: r.labels.into_iter().collect(),
                run_id: empty(r.run_id),
                process_id: empty(r.process_id),
                request: empty(r.request),
                prompt: empty(r.prompt),
                idempotency_key: empty(r.idempotency_key),
            })
            .await?;
        Ok(Response::new(pb::CreateRunResponse {
            run: Some(run_pb(&summary)),
        }))
    }

    async fn get_run(
        &self,
        req: Request<pb::GetRunRequest>,
    ) -> Result<Response<pb::GetRunResponse>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let run = self.manager.get(&ns, &r.run_id)?;
        Ok(Response::new(pb::GetRunResponse {
            run: Some(run_pb(&run)),
        }))
    }

    async fn list_runs(
        &self,
        req: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let statuses = r
            .statuses
            .iter()
            .map(|s| status_of_pb(*s))
            .collect::<Result<Vec<_>, _>>()?;
        let labels: BTreeMap<String, String> = r.label_selector.into_iter().collect();
        let token = (!r.page_token.is_empty()).then_some(r.page_token.as_str());
        let (runs, next) =
            self.manager
                .list(&ns, &statuses, &labels, page_size(r.page_size), token);
        Ok(Response::new(pb::ListRunsResponse {
            runs: runs.iter().map(run_pb).collect(),
            next_page_token: next.unwrap_or_default(),
        }))
    }

    type WatchRunStream = WatchStream;

    async fn watch_run(
        &self,
        req: Request<pb::WatchRunRequest>,
    ) -> Result<Response<Self::WatchRunStream>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let first = self.manager.get(&ns, &r.run_id)?;
        let from = r.from_seq.max(1);
        let manager = self.manager.clone();
        let run_id = r.run_id.clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<pb::WatchRunResponse, Status>>(16);
        let mut agent_rx = r.include_agent_events.then(|| self.hub.subscribe(&run_id));
        let mut journal = manager.journal().watch(&run_id, from);
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            let mut last = first.clone();
            let send_first = pb::WatchRunResponse {
                events: vec![],
                run: Some(run_pb(&first)),
                agent_events: vec![],
            };
            if tx.send(Ok(send_first)).await.is_err() {
                return;
            }
            if first.status.is_terminal() && from > first.head_seq {
                return; // nothing more will ever come
            }
            // Status changes without new events (a run that starts waiting on a breakpoint, an
            // unroutable task) are sent when seen.
            let mut tick = tokio::time::interval(std::time::Duration::from_millis(250));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let Ok(now) = manager.get(&ns, &run_id) else { continue };
                        if now.status != last.status || now.status_reason != last.status_reason
                            || now.pending_by_kind != last.pending_by_kind
                        {
                            let msg = pb::WatchRunResponse { events: vec![], run: Some(run_pb(&now)), agent_events: vec![] };
                            last = now;
                            if tx.send(Ok(msg)).await.is_err() {
                                return;
                            }
                        }
                    }
                    batch = journal.next() => {
                        let events = match batch {
                            Some(Ok(events)) => events,
                            Some(Err(e)) => { let _ = tx.send(Err(Status::from(e))).await; return; }
                            None => return,
                        };
                        let ended = events.iter().find_map(terminal_status);
                        let mut now = manager.get(&ns, &run_id).unwrap_or_else(|_| last.clone());
                        if let Some(s) = ended {
                            // The summary (output, error) is updated right after the terminal
                            // append: wait for it briefly so the last message, and any GetRun
                            // after the stream ends, show the finished run.
                            for _ in 0..200 {
                                if now.status.is_terminal() {
                                    break;
                                }
                                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                                now = manager.get(&ns, &run_id).unwrap_or_else(|_| now.clone());
                            }
                            now.status = s;
                        }
                        let changed = now.status != last.status || now.status_reason != last.status_reason;
                        let msg = pb::WatchRunResponse {
                            events: events.iter().map(event_to_pb).collect(),
                            run: changed.then(|| run_pb(&now)),
                            // The stream ends here: agent events still queued go with it.
                            agent_events: if ended.is_some() {
                                queued_agent_events(agent_rx.as_mut())
                            } else {
                                vec![]
                            },
                        };
                        last = now;
                        if tx.send(Ok(msg)).await.is_err() || ended.is_some() {
                            return;
                        }
                    }
                    agent = async {
                        match agent_rx.as_mut() {
                            Some(rx) => rx.recv().await.ok(),
                            None => std::future::pending().await,
                        }
                    } => {
                        if let Some(batch) = agent {
                            let msg = pb::WatchRunResponse {
                                events: vec![],
                                run: None,
                                agent_events: vec![task_agent_events(&batch)],
                            };
                            if tx.send(Ok(msg)).await.is_err() {
                                return;
                            }
                        }
                    }
                    () = shutdown.cancelled() => {
                        let _ = tx.send(Err(Status::unavailable("the orchestrator is shutting down; resume the watch"))).await;
                        return;
                    }
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(rx),
        )))
    }

    async fn cancel_run(
        &self,
        req: Request<pb::CancelRunRequest>,
    ) -> Result<Response<pb::CancelRunResponse>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let run = self.manager.cancel(&ns, &r.run_id, &r.reason).await?;
        Ok(Response::new(pb::CancelRunResponse {
            run: Some(run_pb(&run)),
        }))
    }

    async fn halt_run(
        &self,
        req: Request<pb::HaltRunRequest>,
    ) -> Result<Response<pb::HaltRunResponse>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let failed = matches!(
            pb::HaltFinalStatus::try_from(r.final_status),
            Ok(pb::HaltFinalStatus::Failed)
        );
        let (run, already) = self.manager.halt(&ns, &r.run_id, &r.reason, failed).await?;
        Ok(Response::new(pb::HaltRunResponse {
            run: Some(run_pb(&run)),
            already_terminal: already,
        }))
    }

    async fn list_breakpoints(
        &self,
        req: Request<pb::ListBreakpointsRequest>,
    ) -> Result<Response<pb::ListBreakpointsResponse>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let run = (!r.run_id.is_empty()).then_some(r.run_id.as_str());
        let token = (!r.page_token.is_empty()).then_some(r.page_token.as_str());
        let (found, next) = self
            .manager
            .breakpoints(&ns, run, page_size(r.page_size), token)
            .await?;
        Ok(Response::new(pb::ListBreakpointsResponse {
            breakpoints: found
                .into_iter()
                .map(|b| pb::Breakpoint {
                    namespace: b.namespace,
                    run_id: b.run_id,
                    effect_id: b.effect_id,
                    breakpoint_id: b.breakpoint_id,
                    label: b.label,
                    payload_json: b.payload.as_ref().map(json_bytes).unwrap_or_default(),
                    requested_at: timestamp_of(b.requested_at.as_deref()),
                    auto_approval_json: b
                        .auto_approval
                        .as_ref()
                        .map(json_bytes)
                        .unwrap_or_default(),
                })
                .collect(),
            next_page_token: next.unwrap_or_default(),
        }))
    }

    async fn resolve_breakpoint(
        &self,
        req: Request<pb::ResolveBreakpointRequest>,
    ) -> Result<Response<pb::ResolveBreakpointResponse>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let approved = match pb::BreakpointDecision::try_from(r.decision) {
            Ok(pb::BreakpointDecision::Approve) => true,
            Ok(pb::BreakpointDecision::Reject) => false,
            _ => {
                return Err(ServiceError::invalid("decision", "must be APPROVE or REJECT").into());
            }
        };
        let some = |s: String| (!s.is_empty()).then_some(s);
        let (seq, already) = self
            .manager
            .resolve_breakpoint(
                &ns,
                &r.run_id,
                &r.effect_id,
                Decision {
                    approved,
                    feedback: some(r.feedback),
                    response: some(r.response),
                    option: some(r.option),
                    approver: some(r.approver),
                    principal: who.name.clone(),
                },
            )
            .await?;
        Ok(Response::new(pb::ResolveBreakpointResponse {
            resolved_seq: seq,
            already_resolved: already,
        }))
    }

    async fn post_task_result(
        &self,
        req: Request<pb::PostTaskResultRequest>,
    ) -> Result<Response<pb::PostTaskResultResponse>, Status> {
        let who = authorize(&req, &[Role::Client, Role::Worker])?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let outcome = outcome_of(r.result)?;
        let (seq, already) = self
            .manager
            .post_result(&ns, &r.run_id, &r.effect_id, outcome)
            .await?;
        Ok(Response::new(pb::PostTaskResultResponse {
            resolved_seq: seq,
            already_resolved: already,
        }))
    }
}
