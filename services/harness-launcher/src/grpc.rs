//! The gRPC adapter of the admin API: check the caller is `admin`, decode the request, call
//! [`LauncherAdmin`], encode the answer, map the error. Nothing else lives here; prost types do
//! not leave this module (and [`crate::worker`]'s calls to the orchestrator).

use std::time::Duration;

use babysitter_common::auth::require_role;
use babysitter_common::error::{ErrorKind, status};
use babysitter_common::server::ServerConfig;
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::harness_launcher::v1 as pb;
use babysitter_proto::harness_launcher::v1::harness_launcher_service_server::{
    HarnessLauncherService, HarnessLauncherServiceServer,
};
use tonic::{Request, Response, Status};

use crate::admin::{AdminError, CancelTask, LauncherAdmin};
use crate::harness::HarnessCheck;
use crate::worker::{TaskInfo, WorkerState};

/// `HarnessLauncherService` over a [`LauncherAdmin`]. Every RPC needs the `admin` role.
#[derive(Debug, Clone)]
pub struct HarnessLauncherGrpcServer {
    admin: LauncherAdmin,
}

impl HarnessLauncherGrpcServer {
    pub fn new(admin: LauncherAdmin) -> Self {
        Self { admin }
    }

    /// The tonic service, with the message-size limits and compression of `config`.
    pub fn into_service(self, config: &ServerConfig) -> HarnessLauncherServiceServer<Self> {
        babysitter_common::tune_grpc_service!(HarnessLauncherServiceServer::new(self), config)
    }
}

/// A request that cannot be decoded into its domain form (`InvalidArgument`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// A required field is empty.
    #[error("{0} is required")]
    Missing(&'static str),
    /// A field holds a value out of its range.
    #[error("{field}: {reason}")]
    Invalid {
        field: &'static str,
        reason: &'static str,
    },
}

impl From<ProtocolError> for Status {
    fn from(e: ProtocolError) -> Self {
        let msg = e.to_string();
        match e {
            ProtocolError::Missing(_) | ProtocolError::Invalid { .. } => {
                status(ErrorKind::InvalidArgument, msg, false, &[])
            }
        }
    }
}

impl From<AdminError> for Status {
    fn from(e: AdminError) -> Self {
        let msg = e.to_string();
        match e {
            // Not worth retrying: the process is going away.
            AdminError::ShuttingDown => status(ErrorKind::Unavailable, msg, false, &[]),
        }
    }
}

impl TryFrom<pb::CancelTaskRequest> for CancelTask {
    type Error = ProtocolError;

    fn try_from(r: pb::CancelTaskRequest) -> Result<Self, Self::Error> {
        if r.lease_id.is_empty() {
            return Err(ProtocolError::Missing("lease_id"));
        }
        Ok(CancelTask {
            lease_id: r.lease_id,
            reason: (!r.reason.is_empty()).then_some(r.reason),
        })
    }
}

/// `DrainRequest.deadline`: unset = none.
fn drain_deadline(r: &pb::DrainRequest) -> Result<Option<Duration>, ProtocolError> {
    r.deadline
        .map(|d| {
            Duration::try_from(d).map_err(|_| ProtocolError::Invalid {
                field: "deadline",
                reason: "must be a non-negative duration",
            })
        })
        .transpose()
}

fn state_to_pb(s: WorkerState) -> pb::WorkerState {
    match s {
        WorkerState::Starting => pb::WorkerState::Starting,
        WorkerState::Ready => pb::WorkerState::Ready,
        WorkerState::Disconnected => pb::WorkerState::Disconnected,
        WorkerState::Draining => pb::WorkerState::Draining,
        WorkerState::Drained => pb::WorkerState::Drained,
    }
}

fn task_to_pb(t: TaskInfo) -> pb::RunningTask {
    pb::RunningTask {
        lease_id: t.lease_id,
        namespace: t.namespace,
        run_id: t.run_id,
        effect_id: t.effect_id,
        kind: t.kind,
        harness: t.harness.unwrap_or_default(),
        started_at: Some(t.started_at.into()),
        events_reported: t.events_reported,
        attempt: t.attempt,
    }
}

fn harness_to_pb(c: HarnessCheck) -> pb::HarnessStatus {
    let name = c.kind.name().to_owned();
    match c.outcome {
        Ok(d) => pb::HarnessStatus {
            harness: Some(cpb::HarnessInfo {
                name,
                version: d.version,
                binary_path: d.path.display().to_string(),
            }),
            available: true,
            unavailable_reason: String::new(),
        },
        Err(u) => pb::HarnessStatus {
            harness: Some(cpb::HarnessInfo {
                name,
                version: String::new(),
                binary_path: u.path.map(|p| p.display().to_string()).unwrap_or_default(),
            }),
            available: false,
            unavailable_reason: u.reason,
        },
    }
}

#[tonic::async_trait]
impl HarnessLauncherService for HarnessLauncherGrpcServer {
    #[tracing::instrument(name = "harness_launcher.get_status", skip_all)]
    async fn get_status(
        &self,
        req: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        require_role(&req, &[])?;
        let s = self.admin.status();
        Ok(Response::new(pb::GetStatusResponse {
            worker_id: s.worker_id.unwrap_or_default(),
            state: state_to_pb(s.state) as i32,
            orchestrator_endpoint: s.orchestrator_endpoint,
            capabilities: Some((&s.capabilities).into()),
            running_tasks: s.running_tasks.into_iter().map(task_to_pb).collect(),
            started_at: Some(s.started_at.into()),
            version: s.version.to_owned(),
        }))
    }

    #[tracing::instrument(name = "harness_launcher.list_harnesses", skip_all, fields(refresh = req.get_ref().refresh))]
    async fn list_harnesses(
        &self,
        req: Request<pb::ListHarnessesRequest>,
    ) -> Result<Response<pb::ListHarnessesResponse>, Status> {
        require_role(&req, &[])?;
        let checks = self.admin.harnesses(req.into_inner().refresh).await;
        Ok(Response::new(pb::ListHarnessesResponse {
            harnesses: checks.into_iter().map(harness_to_pb).collect(),
        }))
    }

    #[tracing::instrument(name = "harness_launcher.cancel_task", skip_all, fields(lease_id = %req.get_ref().lease_id))]
    async fn cancel_task(
        &self,
        req: Request<pb::CancelTaskRequest>,
    ) -> Result<Response<pb::CancelTaskResponse>, Status> {
        require_role(&req, &[])?;
        let cancel = CancelTask::try_from(req.into_inner())?;
        let was_running = self.admin.cancel(&cancel);
        Ok(Response::new(pb::CancelTaskResponse { was_running }))
    }

    #[tracing::instrument(name = "harness_launcher.drain", skip_all)]
    async fn drain(
        &self,
        req: Request<pb::DrainRequest>,
    ) -> Result<Response<pb::DrainResponse>, Status> {
        require_role(&req, &[])?;
        let deadline = drain_deadline(req.get_ref())?;
        let drained = self.admin.drain(deadline)?;
        Ok(Response::new(pb::DrainResponse {
            state: state_to_pb(drained.state) as i32,
            running_tasks: drained.running.into_iter().map(task_to_pb).collect(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_decoded_once_at_the_edge() {
        let missing = CancelTask::try_from(pb::CancelTaskRequest::default());
        assert_eq!(missing, Err(ProtocolError::Missing("lease_id")));
        let s = Status::from(ProtocolError::Missing("lease_id"));
        assert_eq!(s.code(), tonic::Code::InvalidArgument);

        let c = CancelTask::try_from(pb::CancelTaskRequest {
            lease_id: "l1".into(),
            reason: String::new(),
        });
        assert_eq!(
            c,
            Ok(CancelTask {
                lease_id: "l1".into(),
                reason: None
            })
        );

        let negative = pb::DrainRequest {
            deadline: Some(prost_types::Duration {
                seconds: -1,
                nanos: 0,
            }),
        };
        assert!(drain_deadline(&negative).is_err());
        assert_eq!(drain_deadline(&pb::DrainRequest::default()), Ok(None));
        let five = pb::DrainRequest {
            deadline: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
        };
        assert_eq!(drain_deadline(&five), Ok(Some(Duration::from_secs(5))));
    }

    #[test]
    fn shutting_down_is_unavailable() {
        let s = Status::from(AdminError::ShuttingDown);
        assert_eq!(s.code(), tonic::Code::Unavailable);
        assert_eq!(
            babysitter_common::error::error_kind(&s),
            Some(ErrorKind::Unavailable)
        );
    }
}
