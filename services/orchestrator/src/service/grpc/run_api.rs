//! `RunService`: create, observe and steer runs.

use std::collections::BTreeMap;
use std::pin::Pin;

use babysitter_common::auth::Role;
use babysitter_common::error::{ErrorKind, status};
use babysitter_common::server::ServerConfig;
use babysitter_journal::grpc::event_to_pb;
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_server::{RunService, RunServiceServer};
use futures::Stream;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::ops_api;
use super::{
    agent_event_pb, authorize, json_bytes, namespace_for, outcome_of, parse_json, timestamp_of,
};
use crate::engine::Iteration;
use crate::service::ServiceError;
use crate::service::bundle::Bundle;
use crate::service::runs::{
    AgentBatch, Decision, NewRun, RunManager, RunStatus, RunSummary, RunWatch, WatchUpdate,
};

#[derive(Debug, Clone)]
pub struct RunApi {
    manager: RunManager,
    /// The server's: open watches end with Unavailable (resume) so it can drain.
    shutdown: CancellationToken,
}

impl RunApi {
    pub(super) fn new(manager: RunManager, shutdown: CancellationToken) -> Self {
        Self { manager, shutdown }
    }

    /// The tonic service, with the message-size limits and compression of `config`.
    pub fn into_service(self, config: &ServerConfig) -> RunServiceServer<Self> {
        babysitter_common::tune_grpc_service!(RunServiceServer::new(self), config)
    }
}

const CLIENT: &[Role] = &[Role::Client];

fn task_agent_events(batch: &AgentBatch) -> pb::TaskAgentEvents {
    pb::TaskAgentEvents {
        effect_id: batch.effect_id.clone(),
        events: batch.events.iter().map(agent_event_pb).collect(),
    }
}

fn watch_update_pb(u: WatchUpdate) -> pb::WatchRunResponse {
    pb::WatchRunResponse {
        events: u.events.iter().map(event_to_pb).collect(),
        run: u.run.as_ref().map(run_pb),
        agent_events: u
            .agent_events
            .iter()
            .map(|b| task_agent_events(b))
            .collect(),
    }
}

/// The watch as a response stream that ends with Unavailable when the server shuts down.
fn watch_stream(watch: RunWatch, shutdown: CancellationToken) -> WatchStream {
    Box::pin(futures::stream::unfold(
        Some((watch, shutdown)),
        |state| async move {
            let (mut watch, shutdown) = state?;
            tokio::select! {
                item = watch.next() => {
                    let item = item?.map(watch_update_pb).map_err(Status::from);
                    Some((item, Some((watch, shutdown))))
                }
                () = shutdown.cancelled() => {
                    let msg = "the orchestrator is shutting down; resume the watch";
                    Some((Err(status(ErrorKind::Unavailable, msg, true, &[])), None))
                }
            }
        },
    ))
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

/// Largest output sent inside a `Run` (larger ones go by `ReadRunOutput`).
pub const INLINE_OUTPUT_MAX: usize = 1024 * 1024;
/// Chunk size of `ReadRunOutput`.
const OUTPUT_CHUNK: usize = 1024 * 1024;

/// Whether a `Run` may carry its output inline (lists never do).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    InlineIfSmall,
    DigestOnly,
}

/// A run's output as JSON bytes with their SHA-256.
fn output_bytes(r: &RunSummary) -> Option<(bytes::Bytes, String)> {
    use sha2::Digest as _;
    let bytes = json_bytes(r.output.as_ref()?);
    let digest = hex::encode(sha2::Sha256::digest(&bytes));
    Some((bytes, digest))
}

/// babysitter's serialized error (`{name, message, stack, data}`) as a `TaskError`.
pub(super) fn task_error_pb(e: &Value) -> cpb::TaskError {
    let text = |k: &str| e.get(k).and_then(Value::as_str).map(str::to_owned);
    cpb::TaskError {
        name: text("name").unwrap_or_else(|| "Error".to_owned()),
        message: text("message").unwrap_or_default(),
        stack: text("stack").unwrap_or_default(),
        data_json: e.get("data").map(json_bytes).unwrap_or_default(),
    }
}

pub(crate) fn run_pb(r: &RunSummary) -> pb::Run {
    run_pb_with(r, Output::InlineIfSmall)
}

pub(crate) fn run_pb_with(r: &RunSummary, output: Output) -> pb::Run {
    let (output_json, output_size_bytes, output_sha256) = match output_bytes(r) {
        Some((bytes, digest)) => {
            let size = bytes.len() as u64;
            let inline = output == Output::InlineIfSmall && bytes.len() <= INLINE_OUTPUT_MAX;
            (
                if inline { bytes } else { bytes::Bytes::new() },
                size,
                digest,
            )
        }
        None => Default::default(),
    };
    let error = r.error.as_ref().map(task_error_pb);
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
        output_json,
        error,
        client_driven: r.client_driven,
        output_size_bytes,
        output_sha256,
    }
}

/// An iteration as `IterateRun` answers it.
fn iteration_pb(it: Iteration, run: &RunSummary) -> pb::IterateRunResponse {
    let json_or_empty = |v: Option<&Value>| v.map(json_bytes).unwrap_or_default();
    pb::IterateRunResponse {
        status: it.status.as_str().to_owned(),
        reason: it.reason.unwrap_or_default(),
        output_json: json_or_empty(it.output.as_ref()),
        error_json: json_or_empty(it.error.as_ref()),
        next_actions_json: json_bytes(&Value::Array(it.next_actions)),
        requested: it
            .requested
            .into_iter()
            .zip(it.requested_tasks)
            .map(|(effect_id, task_json)| pb::RequestedEffect {
                effect_id,
                task_json,
            })
            .collect(),
        warnings: it.warnings,
        logs: it
            .logs
            .into_iter()
            .map(|l| pb::ProcessLogLine {
                label: l.label.unwrap_or_default(),
                message: l.message,
            })
            .collect(),
        run: Some(run_pb(run)),
    }
}

fn page_size(n: u32) -> usize {
    if n == 0 { 100 } else { (n as usize).min(1000) }
}

/// A page token as this server issues them — `ids` ids joined by `/` (a run id for ListRuns,
/// `run_id/effect_id` for ListBreakpoints) — or `None` for the first page. Anything else is
/// refused: read as a cursor, a garbage token silently started again from page one.
fn page_token(token: &str, ids: usize) -> Result<Option<&str>, Status> {
    if token.is_empty() {
        return Ok(None);
    }
    let parts: Vec<&str> = token.split('/').collect();
    let valid = parts.len() == ids
        && parts
            .iter()
            .all(|p| babysitter_common::ids::validate_path_segment("page token", p).is_ok());
    if valid {
        Ok(Some(token))
    } else {
        Err(ServiceError::invalid(
            "page_token",
            "not a token this server issued (pass the previous page's next_page_token, or none)",
        )
        .into())
    }
}

type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchRunResponse, Status>> + Send>>;

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
                client_driven: r.client_driven,
                budget: r.budget.map(ops_api::budget_of),
                nested: None,
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
        let run = self.manager.get(&ns, &r.run_id).await?;
        let (run_json, state_json) = if r.include_run_files {
            let (run_json, state) = self.manager.run_files(&ns, &r.run_id).await?;
            (json_bytes(&run_json), state.unwrap_or_default())
        } else {
            Default::default()
        };
        Ok(Response::new(pb::GetRunResponse {
            run: Some(run_pb(&run)),
            run_json,
            state_json,
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
        let token = page_token(&r.page_token, 1)?;
        let (runs, next) = self
            .manager
            .list(&ns, &statuses, &labels, page_size(r.page_size), token)
            .await?;
        Ok(Response::new(pb::ListRunsResponse {
            runs: runs
                .iter()
                .map(|r| run_pb_with(r, Output::DigestOnly))
                .collect(),
            next_page_token: next.unwrap_or_default(),
        }))
    }

    type WatchRunStream = WatchStream;
    type ReadRunOutputStream =
        futures::stream::Iter<std::vec::IntoIter<Result<pb::ReadRunOutputResponse, Status>>>;

    async fn read_run_output(
        &self,
        req: Request<pb::ReadRunOutputRequest>,
    ) -> Result<Response<Self::ReadRunOutputStream>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let run = self.manager.get(&ns, &r.run_id).await?;
        let Some((bytes, _)) = output_bytes(&run) else {
            return Err(ServiceError::NotFound(format!("run {} has no output", r.run_id)).into());
        };
        let chunks: Vec<Result<pb::ReadRunOutputResponse, Status>> = (0..bytes.len())
            .step_by(OUTPUT_CHUNK)
            .map(|at| {
                Ok(pb::ReadRunOutputResponse {
                    chunk: bytes.slice(at..(at + OUTPUT_CHUNK).min(bytes.len())),
                })
            })
            .collect();
        Ok(Response::new(futures::stream::iter(chunks)))
    }

    async fn watch_run(
        &self,
        req: Request<pb::WatchRunRequest>,
    ) -> Result<Response<Self::WatchRunStream>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let watch = self
            .manager
            .watch(&ns, &r.run_id, r.from_seq, r.include_agent_events)
            .await?;
        Ok(Response::new(watch_stream(watch, self.shutdown.clone())))
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
        let (run, already) = self
            .manager
            .halt(&ns, &r.run_id, &r.reason, failed, r.force)
            .await?;
        Ok(Response::new(pb::HaltRunResponse {
            run: Some(run_pb(&run)),
            already_terminal: already,
        }))
    }

    async fn list_tasks(
        &self,
        req: Request<pb::ListTasksRequest>,
    ) -> Result<Response<pb::ListTasksResponse>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let token = page_token(&r.page_token, 1)?;
        let (tasks, next) = self
            .manager
            .tasks(&ns, &r.run_id, page_size(r.page_size), token)
            .await?;
        Ok(Response::new(pb::ListTasksResponse {
            tasks: tasks.into_iter().map(ops_api::task_pb).collect(),
            next_page_token: next.unwrap_or_default(),
        }))
    }

    async fn get_task(
        &self,
        req: Request<pb::GetTaskRequest>,
    ) -> Result<Response<pb::GetTaskResponse>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let head = match r.log_head_bytes as usize {
            0 => ops_api::DEFAULT_LOG_HEAD,
            n => n.min(ops_api::MAX_LOG_HEAD),
        };
        let detail = self
            .manager
            .task(&ns, &r.run_id, &r.effect_id, head)
            .await?;
        Ok(Response::new(ops_api::task_detail_pb(detail)))
    }

    async fn get_run_cost(
        &self,
        req: Request<pb::GetRunCostRequest>,
    ) -> Result<Response<pb::GetRunCostResponse>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let cost = self.manager.cost(&ns, &r.run_id).await?;
        Ok(Response::new(ops_api::cost_pb(cost)))
    }

    async fn list_workers(
        &self,
        req: Request<pb::ListWorkersRequest>,
    ) -> Result<Response<pb::ListWorkersResponse>, Status> {
        let who = authorize(&req, CLIENT)?;
        // An admin, or a token for every namespace, sees every worker.
        let only = (who.role != Role::Admin && !who.namespaces.is_empty())
            .then_some(who.namespaces.as_slice());
        Ok(Response::new(pb::ListWorkersResponse {
            workers: self
                .manager
                .workers(only)
                .into_iter()
                .map(ops_api::worker_pb)
                .collect(),
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
        let token = page_token(&r.page_token, 2)?;
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
        // A client's call, as `task:post` is a person's or a CI job's: a worker returns what it
        // executed under its lease (CompleteTask) and may not settle effects it holds no lease
        // for — least of all a breakpoint, which is someone's decision.
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let outcome = outcome_of(r.result)?;
        let (seq, already) = self
            .manager
            .post_result(&ns, &r.run_id, &r.effect_id, outcome, &who.name)
            .await?;
        Ok(Response::new(pb::PostTaskResultResponse {
            resolved_seq: seq,
            already_resolved: already,
        }))
    }

    async fn iterate_run(
        &self,
        req: Request<pb::IterateRunRequest>,
    ) -> Result<Response<pb::IterateRunResponse>, Status> {
        let who = authorize(&req, CLIENT)?;
        let r = req.into_inner();
        let ns = namespace_for(&who, &r.namespace)?;
        let marker = if r.marker_json.is_empty() {
            None
        } else {
            match parse_json("marker_json", &r.marker_json)? {
                Value::Object(m) => Some(m),
                _ => {
                    return Err(
                        ServiceError::invalid("marker_json", "must be a JSON object").into(),
                    );
                }
            }
        };
        let (it, run) = self
            .manager
            .iterate_for_client(&ns, &r.run_id, marker)
            .await?;
        Ok(Response::new(iteration_pb(it, &run)))
    }
}
