//! The orchestrator service: owns runs, iterates them with the [`crate::engine`], hands their
//! effects to workers under leases, and survives any crash by rebuilding from the journal.
//!
//! - [`bundle`]: process bundles stored with the run (content-addressed blobs + a manifest in
//!   `run.json`), materialized on whichever replica iterates the run.
//! - [`queue`]: tasks, leases, workers, routing, long-poll.
//! - [`runs`]: the run manager — create, iterate after every resolution, durable sleep timers,
//!   breakpoints, posted results, cancel / halt, recovery at start, run summaries published to
//!   watchers, live agent events; one table entry per live run, a bounded cache of finished ones.
//! - [`grpc`]: `RunService` and `WorkerService`, thin adapters over the two cores.
//! - [`config`]: the `orchestrator` binary's layered configuration.
//! - [`dashboard`]: the run manager as the web dashboard's source (`[dashboard]`).
//! - [`leader`]: one active orchestrator per journal — the lease, standing by (forwarding callers
//!   to the active one), taking over, stepping down.
//!
//! Crash safety comes from one rule: the journal is the only state that matters. The queue,
//! leases, timers and summaries are caches rebuilt from it at start; every effect is resolved by
//! exactly one `EFFECT_RESOLVED` because results are only committed while the effect is pending,
//! under the run's lock, against the journal's create-only append.

pub mod budget;
pub mod bundle;
pub mod config;
pub mod dashboard;
pub mod grpc;
pub mod leader;
pub(crate) mod metrics;
pub mod queue;
pub mod runs;

use crate::engine::EngineError;
use babysitter_journal::JournalError;

/// What the service cores report; the gRPC adapter maps every variant to a status.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServiceError {
    #[error("invalid {what}: {reason}")]
    Invalid { what: &'static str, reason: String },
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// A precondition no longer holds (an effect already resolved differently, a run that ended).
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Lease(#[from] queue::QueueError),
    #[error("the service is shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Journal(#[from] JournalError),
    #[error(transparent)]
    Engine(EngineError),
}

impl From<EngineError> for ServiceError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Journal(j) => Self::Journal(j),
            other => Self::Engine(other),
        }
    }
}

impl ServiceError {
    pub fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Self::Invalid {
            what,
            reason: reason.into(),
        }
    }
}

pub type Result<T, E = ServiceError> = std::result::Result<T, E>;
