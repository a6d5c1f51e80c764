//! The gRPC adapters: `RunService` ([`run_api`]) over the [`RunManager`] and `WorkerService`
//! ([`worker_api`]) over the [`TaskQueue`] + run manager. Handlers authorize (role, namespace),
//! convert, call the core, and map the error; prost types stop here.

mod run_api;
mod worker_api;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use babysitter_common::auth::{Principal, Role, caller};
use babysitter_common::error::{ErrorKind, status};
use babysitter_common::server::ServerBuilder;
use babysitter_proto::common::v1 as cpb;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Status};

use super::ServiceError;
use super::queue::QueueError;
use super::runs::{RunManager, TaskOutcome, Usage};
use crate::engine::EngineError;

pub use run_api::RunApi;
pub use worker_api::WorkerApi;

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
            },
            ServiceError::ShuttingDown => status(ErrorKind::Unavailable, msg, true, &[]),
            ServiceError::Journal(j) => Status::from(j),
            ServiceError::Engine(e) => match e {
                EngineError::Journal(j) => Status::from(j),
                EngineError::InvalidRun { .. } => status(ErrorKind::Conflict, msg, false, &[]),
                EngineError::MissingResult { .. }
                | EngineError::Corrupt { .. }
                | EngineError::Host(_)
                | EngineError::Engine(_) => status(ErrorKind::Internal, msg, false, &[]),
            },
        }
    }
}

/// One task's batch of agent events: (effect id, events).
type AgentBatch = Arc<(String, Vec<cpb::AgentEvent>)>;

/// Live agent events per run, from `ReportEvents` to `WatchRun` (live only, never stored).
#[derive(Debug, Clone, Default)]
pub struct AgentEventHub {
    runs: Arc<Mutex<HashMap<String, broadcast::Sender<AgentBatch>>>>,
}

impl AgentEventHub {
    fn subscribe(&self, run_id: &str) -> broadcast::Receiver<AgentBatch> {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        runs.retain(|_, tx| tx.receiver_count() > 0);
        runs.entry(run_id.to_owned())
            .or_insert_with(|| broadcast::channel(1024).0)
            .subscribe()
    }

    /// Sends to watchers; returns how many events were delivered to at least one watcher.
    fn publish(&self, run_id: &str, effect_id: &str, events: Vec<cpb::AgentEvent>) {
        let runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = runs.get(run_id) {
            let _ = tx.send(Arc::new((effect_id.to_owned(), events)));
        }
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
        let hub = AgentEventHub::default();
        Self {
            runs: RunApi::new(manager.clone(), hub.clone(), shutdown),
            workers: WorkerApi::new(manager, hub),
        }
    }

    /// Both services on the shared server builder (health, reflection, auth, limits).
    pub fn into_server(self, config: &babysitter_common::server::ServerConfig) -> ServerBuilder {
        ServerBuilder::new("orchestrator", config)
            .add_service(
                self.runs.into_service(),
                babysitter_proto::FILE_DESCRIPTOR_SET,
            )
            .add_service(
                self.workers.into_service(),
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
        usage: r.usage.map(|u| Usage {
            provider: u.provider,
            model: u.model,
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            cost_usd: u.cost_usd,
        }),
    })
}
