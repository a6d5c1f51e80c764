//! The launcher's admin core: what `HarnessLauncherService` answers ([`crate::grpc`] is only its
//! wire adapter), computed from the worker's own state rather than a copy of it.
//!
//! - status and running tasks come from the worker's running-task table and lifecycle
//!   ([`WorkerControl`]), so a task is listed exactly while the worker heartbeats its lease;
//! - installed harnesses are the detection the worker advertised at start ([`HarnessCheck`]), and
//!   a refresh runs the same detection again. A refresh is a report only: the worker keeps
//!   advertising and running what it found at start, because the orchestrator routes tasks by the
//!   capabilities it registered with;
//! - cancel and drain go through [`WorkerControl`], the same paths a lease cancellation from the
//!   orchestrator and a SIGTERM take.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::harness::{Detector, HarnessCheck};
use crate::worker::WorkerState;
use crate::worker::{Capabilities, DrainError, DrainStatus, TaskInfo, Worker, WorkerControl};

/// The reason reported when a cancel names none.
pub const DEFAULT_CANCEL_REASON: &str = "cancelled by an operator";

/// Why an admin request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminError {
    /// The worker is shutting down.
    #[error("the worker is shutting down")]
    ShuttingDown,
}

impl From<DrainError> for AdminError {
    fn from(e: DrainError) -> Self {
        match e {
            DrainError::ShuttingDown => AdminError::ShuttingDown,
        }
    }
}

/// The worker's status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerStatus {
    /// The id the orchestrator knows the worker by; `None` before registration.
    pub worker_id: Option<String>,
    pub state: WorkerState,
    pub orchestrator_endpoint: String,
    pub capabilities: Capabilities,
    pub running_tasks: Vec<TaskInfo>,
    pub started_at: SystemTime,
    /// The launcher's version.
    pub version: &'static str,
}

/// A cancel request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelTask {
    /// Non-empty.
    pub lease_id: String,
    /// `None`: [`DEFAULT_CANCEL_REASON`].
    pub reason: Option<String>,
}

/// The admin core of one worker.
#[derive(Debug, Clone)]
pub struct LauncherAdmin {
    control: WorkerControl,
    capabilities: Capabilities,
    orchestrator_endpoint: String,
    detector: Detector,
    /// The last detection; behind an async mutex so concurrent refreshes run one at a time.
    checks: Arc<tokio::sync::Mutex<Vec<HarnessCheck>>>,
}

impl LauncherAdmin {
    /// The admin core of `worker` (take it before `worker.run`), which calls
    /// `orchestrator_endpoint` and found `checks` with `detector` at start.
    pub fn new(
        worker: &Worker,
        orchestrator_endpoint: impl Into<String>,
        detector: Detector,
        checks: Vec<HarnessCheck>,
    ) -> Self {
        Self {
            control: worker.control(),
            capabilities: worker.capabilities(),
            orchestrator_endpoint: orchestrator_endpoint.into(),
            detector,
            checks: Arc::new(tokio::sync::Mutex::new(checks)),
        }
    }

    /// The worker's id, state, capabilities and running tasks.
    pub fn status(&self) -> WorkerStatus {
        WorkerStatus {
            worker_id: self.control.worker_id(),
            state: self.control.state(),
            orchestrator_endpoint: self.orchestrator_endpoint.clone(),
            capabilities: self.capabilities.clone(),
            running_tasks: self.control.running_tasks(),
            started_at: self.control.started_at(),
            version: env!("CARGO_PKG_VERSION"),
        }
    }

    /// Every harness adapter and what detection found; with `refresh`, detection runs again.
    pub async fn harnesses(&self, refresh: bool) -> Vec<HarnessCheck> {
        let mut checks = self.checks.lock().await;
        if refresh {
            *checks = self.detector.check_all().await;
        }
        checks.clone()
    }

    /// Kills the task under the lease; `false` when none runs under it.
    pub fn cancel(&self, req: &CancelTask) -> bool {
        let reason = req.reason.as_deref().unwrap_or(DEFAULT_CANCEL_REASON);
        self.control.cancel(&req.lease_id, reason)
    }

    /// Stops taking tasks; running ones finish, or are cancelled after `deadline`.
    pub fn drain(&self, deadline: Option<Duration>) -> Result<DrainStatus, AdminError> {
        Ok(self.control.drain(deadline)?)
    }
}
