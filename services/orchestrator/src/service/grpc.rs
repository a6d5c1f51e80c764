//! The gRPC adapters: `RunService` ([`run_api`]) over the [`RunManager`] and `WorkerService`
//! ([`worker_api`]) over the [`TaskQueue`] + run manager. Handlers authorize (role, namespace),
//! convert, call the core, and map the error; prost types stop here.

mod ops_api;
pub use ops_api::budget_pb;
mod run_api;
mod worker_api;

use babysitter_common::auth::{Principal, Role, caller};
use babysitter_common::error::{ErrorKind, status};
use babysitter_common::server::ServerBuilder;
use babysitter_proto::common::v1 as cpb;
use bytes::Bytes;
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Status};

use super::ServiceError;
use super::queue::QueueError;
use super::runs::{
    AgentEvent, AgentEventSource, RequestUsage, RunManager, TaskOutcome, TaskUsage, Usage,
};
use crate::engine::EngineError;

pub use run_api::RunApi;
pub use worker_api::{InProcess, WorkerApi};

impl From<ServiceError> for Status {
    fn from(e: ServiceError) -> Self {
        let msg = e.to_string();
        match e {
            ServiceError::Invalid { .. } => status(ErrorKind::InvalidArgument, msg, false, &[]),
            ServiceError::NotFound(_) => status(ErrorKind::NotFound, msg, false, &[]),
            ServiceError::AlreadyExists(_) => status(ErrorKind::AlreadyExists, msg, false, &[]),
            ServiceError::Conflict(_) => status(ErrorKind::Conflict, msg, false, &[]),
            ServiceError::Lease(q) => match q {
                QueueError::UnknownWorker(_) => status(ErrorKind::NotFound, msg, false, &[]),
                QueueError::LeaseLost { .. } => status(ErrorKind::LeaseLost, msg, false, &[]),
                QueueError::EffectMismatch { .. } => {
                    status(ErrorKind::InvalidArgument, msg, false, &[])
                }
                QueueError::NotReleased { .. } => status(ErrorKind::Conflict, msg, false, &[]),
            },
            ServiceError::ShuttingDown => status(ErrorKind::Unavailable, msg, true, &[]),
            ServiceError::Journal(j) => journal_status(j),
            ServiceError::Engine(e) => match e {
                EngineError::Journal(j) => journal_status(j),
                EngineError::InvalidRun { .. } => status(ErrorKind::Conflict, msg, false, &[]),
                EngineError::Corrupt { .. } => status(ErrorKind::Corrupt, msg, false, &[]),
                EngineError::MissingResult { .. }
                | EngineError::Host(_)
                | EngineError::Engine(_) => status(ErrorKind::Internal, msg, false, &[]),
            },
        }
    }
}

/// A journal failure as callers see it. A fenced write means this orchestrator was deposed
/// while handling the call: nothing was written, and the same call succeeds at the active one
/// (where a standby forwards it), so it is `UNAVAILABLE`, retryable — a worker keeps its result.
fn journal_status(j: babysitter_journal::JournalError) -> Status {
    use babysitter_journal::JournalError;
    match j {
        JournalError::Fenced { .. }
        | JournalError::Remote {
            kind: ErrorKind::Fenced,
            ..
        } => status(
            ErrorKind::Unavailable,
            format!("this orchestrator was deposed while handling the call; retry: {j}"),
            true,
            &[],
        ),
        other => Status::from(other),
    }
}

/// An agent event from the wire (a relay: nothing is required, an unknown source is
/// unspecified, an out-of-range time is dropped).
/// An agent event off the wire (its payloads stay opaque JSON).
pub fn agent_event_of(e: cpb::AgentEvent) -> AgentEvent {
    let source = match cpb::AgentEventSource::try_from(e.source) {
        Ok(cpb::AgentEventSource::Agent) => AgentEventSource::Agent,
        Ok(cpb::AgentEventSource::Daemon) => AgentEventSource::Daemon,
        Ok(cpb::AgentEventSource::Unspecified) | Err(_) => AgentEventSource::Unspecified,
    };
    AgentEvent {
        event_id: e.event_id,
        sequence: e.sequence,
        time: e.time.and_then(|t| std::time::SystemTime::try_from(t).ok()),
        session_id: e.session_id,
        native_session_id: e.native_session_id,
        synthetic: e.synthetic,
        source,
        kind: e.r#type,
        data_json: e.data_json,
        raw_json: e.raw_json,
    }
}

/// An agent event as `WatchRun` sends it (the wire form of the run manager's event).
pub fn agent_event_pb(e: &AgentEvent) -> cpb::AgentEvent {
    let source = match e.source {
        AgentEventSource::Unspecified => cpb::AgentEventSource::Unspecified,
        AgentEventSource::Agent => cpb::AgentEventSource::Agent,
        AgentEventSource::Daemon => cpb::AgentEventSource::Daemon,
    };
    cpb::AgentEvent {
        event_id: e.event_id.clone(),
        sequence: e.sequence,
        time: e.time.map(system_time_to_pb),
        session_id: e.session_id.clone(),
        native_session_id: e.native_session_id.clone(),
        synthetic: e.synthetic,
        source: source as i32,
        r#type: e.kind.clone(),
        data_json: e.data_json.clone(),
        raw_json: e.raw_json.clone(),
    }
}

/// Both services over one run manager (one per orchestrator process).
#[derive(Debug, Clone)]
pub struct Services {
    pub runs: RunApi,
    pub workers: WorkerApi,
}

impl Services {
    pub fn new(manager: RunManager, shutdown: CancellationToken) -> Self {
        Self {
            runs: RunApi::new(manager.clone(), shutdown.clone()),
            workers: WorkerApi::new(manager, shutdown),
        }
    }

    /// Both services on the shared server builder (health, reflection, auth), each with the
    /// message-size limits and compression of the same `config`.
    pub fn into_server(self, config: &babysitter_common::server::ServerConfig) -> ServerBuilder {
        ServerBuilder::new("orchestrator", config)
            .add_service(
                self.runs.into_service(config),
                babysitter_proto::FILE_DESCRIPTOR_SET,
            )
            .add_service(
                self.workers.into_service(config),
                babysitter_proto::FILE_DESCRIPTOR_SET,
            )
    }
}

/// The caller, who must hold one of `roles` (admin always may).
fn authorize<T>(req: &Request<T>, roles: &[Role]) -> Result<Principal, Status> {
    babysitter_common::auth::require_role(req, roles)?;
    Ok(caller(req).unwrap_or_else(Principal::anonymous_admin))
}

/// The namespace a request names (empty = default), visible to `who` — else NotFound, so other
/// namespaces' runs stay invisible.
fn namespace_for(who: &Principal, ns: &str) -> Result<String, Status> {
    let ns = if ns.is_empty() {
        super::runs::DEFAULT_NAMESPACE
    } else {
        ns
    };
    if who.allows(ns) {
        Ok(ns.to_owned())
    } else {
        Err(status(
            ErrorKind::NotFound,
            format!("namespace {ns} not found"),
            false,
            &[],
        ))
    }
}

fn parse_json(what: &'static str, bytes: &[u8]) -> Result<Value, Status> {
    serde_json::from_slice(bytes)
        .map_err(|e| Status::from(ServiceError::invalid(what, format!("not valid JSON: {e}"))))
}

fn json_bytes(v: &Value) -> Bytes {
    Bytes::from(serde_json::to_vec(v).unwrap_or_default())
}

fn timestamp_of(iso: Option<&str>) -> Option<prost_types::Timestamp> {
    let t = chrono::DateTime::parse_from_rfc3339(iso?).ok()?;
    Some(prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: t.timestamp_subsec_nanos() as i32,
    })
}

fn iso_of(t: &prost_types::Timestamp) -> Option<String> {
    let nanos = u32::try_from(t.nanos).ok()?;
    chrono::DateTime::from_timestamp(t.seconds, nanos)
        .map(|d| d.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
}

fn duration_pb(d: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}

/// A wire duration as a `Duration` (a negative part counts as zero).
fn duration_of(d: prost_types::Duration) -> std::time::Duration {
    std::time::Duration::new(d.seconds.max(0) as u64, d.nanos.max(0) as u32)
}

fn system_time_to_pb(t: std::time::SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(t)
}

/// A task result from the wire, validated.
fn outcome_of(r: Option<cpb::TaskResult>) -> Result<TaskOutcome, Status> {
    let r = r.ok_or_else(|| Status::from(ServiceError::invalid("result", "missing")))?;
    let outcome = match r.outcome {
        Some(cpb::task_result::Outcome::ValueJson(v)) => Ok(if v.is_empty() {
            Value::Null
        } else {
            parse_json("result.value_json", &v)?
        }),
        Some(cpb::task_result::Outcome::Error(e)) => {
            if e.name.is_empty() && e.message.is_empty() {
                return Err(
                    ServiceError::invalid("result.error", "name and message are empty").into(),
                );
            }
            let mut m = serde_json::Map::new();
            m.insert(
                "name".into(),
                Value::String(if e.name.is_empty() {
                    "Error".into()
                } else {
                    e.name
                }),
            );
            m.insert("message".into(), Value::String(e.message));
            if !e.stack.is_empty() {
                m.insert("stack".into(), Value::String(e.stack));
            }
            if !e.data_json.is_empty() {
                m.insert(
                    "data".into(),
                    parse_json("result.error.data_json", &e.data_json)?,
                );
            }
            Err(Value::Object(m))
        }
        None => {
            return Err(ServiceError::invalid(
                "result",
                "exactly one of value_json and error must be set",
            )
            .into());
        }
    };
    let text = |what: &'static str, b: Bytes| -> Result<Option<String>, Status> {
        if b.is_empty() {
            return Ok(None);
        }
        String::from_utf8(b.to_vec())
            .map(Some)
            .map_err(|_| ServiceError::invalid(what, "is not UTF-8").into())
    };
    let metadata = if r.metadata_json.is_empty() {
        None
    } else {
        let m = parse_json("result.metadata_json", &r.metadata_json)?;
        if !m.is_object() {
            return Err(
                ServiceError::invalid("result.metadata_json", "must be a JSON object").into(),
            );
        }
        Some(m)
    };
    Ok(TaskOutcome {
        outcome: Some(outcome),
        stdout: text("result.stdout", r.stdout)?,
        stderr: text("result.stderr", r.stderr)?,
        started_at: r.started_at.as_ref().and_then(iso_of),
        finished_at: r.finished_at.as_ref().and_then(iso_of),
        metadata,
        usage: task_usage_of(r.usage, r.requests)?,
        attempt: None,
        agent_events: r.agent_events.into_iter().map(agent_event_of).collect(),
    })
}

/// Longest request id a task's per-request usage may carry (it goes into journal keys).
pub const MAX_REQUEST_ID: usize = 200;

/// A task's model usage off the wire (what a worker, or `babysitter run`'s own launcher,
/// reports): the harness's total and the proxy's per-request records, checked — each request id
/// 1 to [`MAX_REQUEST_ID`] characters and distinct within the task (they key the journaled
/// events), every cost finite and not negative.
pub fn task_usage_of(
    total: Option<cpb::TaskUsage>,
    requests: Vec<cpb::RequestUsage>,
) -> Result<TaskUsage, ServiceError> {
    let cost = |what: &'static str, c: f64| {
        if c.is_finite() && c >= 0.0 {
            Ok(c)
        } else {
            Err(ServiceError::invalid(
                what,
                "must be a finite, non-negative number",
            ))
        }
    };
    let total = match total {
        Some(u) => Some(Usage {
            cost_usd: cost("result.usage.cost_usd", u.cost_usd)?,
            provider: u.provider,
            model: u.model,
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
        }),
        None => None,
    };
    let mut seen = std::collections::HashSet::with_capacity(requests.len());
    let mut out = Vec::with_capacity(requests.len());
    for r in requests {
        if r.request_id.is_empty() || r.request_id.chars().count() > MAX_REQUEST_ID {
            return Err(ServiceError::invalid(
                "result.requests.request_id",
                format!("must be 1 to {MAX_REQUEST_ID} characters"),
            ));
        }
        if !seen.insert(r.request_id.clone()) {
            return Err(ServiceError::invalid(
                "result.requests.request_id",
                format!("`{}` is given twice", r.request_id),
            ));
        }
        out.push(RequestUsage {
            cost_usd: cost("result.requests.cost_usd", r.cost_usd)?,
            request_id: r.request_id,
            provider: r.provider,
            model: r.model,
            input_tokens: r.input_tokens,
            output_tokens: r.output_tokens,
            cache_read_tokens: r.cache_read_tokens,
            cache_write_tokens: r.cache_write_tokens,
            failed: r.failed,
            duration_ms: r.duration_ms,
        });
    }
    Ok(TaskUsage {
        total,
        requests: out,
    })
}
