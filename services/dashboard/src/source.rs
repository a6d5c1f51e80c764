//! What the dashboard reads and steers: a [`Source`] of runs. Two implement it — the
//! orchestrator's run manager (`babysitter_orchestrator::service::dashboard`) and local
//! `.a5c/runs` directories ([`crate::local`]) — so the HTTP layer, the board index and the run
//! detail are written once, and each source only says how to list its runs, where a run's
//! journal is, and which actions it can take.

use std::collections::HashMap;
use std::sync::Arc;

use babysitter_common::auth::Principal;
use babysitter_journal::Journal;
use futures::stream::BoxStream;
use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::model::Digest;

/// What a source reports (the HTTP layer maps each kind to a status code).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    #[error("{0} not found")]
    NotFound(String),
    #[error("invalid {0}")]
    Invalid(String),
    /// The action is not possible here (a read-only source, a run that ended).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Unavailable(String),
    #[error("{0}")]
    Internal(String),
}

pub type Result<T, E = SourceError> = std::result::Result<T, E>;

impl From<babysitter_journal::JournalError> for SourceError {
    fn from(e: babysitter_journal::JournalError) -> Self {
        use babysitter_journal::JournalError as J;
        match e {
            J::RunNotFound { .. } | J::RunFileNotFound { .. } => Self::NotFound(e.to_string()),
            other => Self::Internal(other.to_string()),
        }
    }
}

/// A task the source is running right now (not in the journal until it resolves).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LiveTask {
    /// `queued` or `leased`.
    pub state: &'static str,
    pub attempt: u32,
    pub worker: String,
}

/// A decision or command from the page.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Resolve {
        effect_id: String,
        approved: bool,
        comment: String,
    },
    Cancel {
        reason: String,
    },
    Halt {
        reason: String,
    },
}

/// Which actions a source can take at all.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capabilities {
    pub resolve: bool,
    pub cancel: bool,
    pub halt: bool,
}

/// Runs as a source has them.
#[async_trait::async_trait]
pub trait Source: Send + Sync + 'static {
    /// Every run's digest (the board index is built from it at start and after a lag).
    async fn runs(&self) -> Result<Vec<Digest>>;

    /// One run's digest now; `None` when the source no longer has it.
    async fn run(&self, run_id: &str) -> Result<Option<Digest>>;

    /// Ids of runs whose digest may have changed, as they change (no polling: the orchestrator's
    /// summary channels, or file-system notifications). A lagging receiver rebuilds the index.
    fn changes(&self) -> broadcast::Receiver<Arc<str>>;

    /// The journal holding `run_id` (the detail, the raw journal and the logs are read from it).
    async fn journal(&self, run_id: &str) -> Result<Journal>;

    /// Tasks of the run that are queued or held by a worker, by effect id.
    fn live_tasks(&self, _run_id: &str) -> HashMap<String, LiveTask> {
        HashMap::new()
    }

    /// The run's budget and what it spent (`GetRunCost`'s answer as JSON); `None` without one.
    async fn cost(&self, _run: &Digest) -> Result<Option<Value>> {
        Ok(None)
    }

    /// Live agent events of the run from now on (JSON objects), when the source relays them.
    async fn agent_events(&self, _run: &Digest) -> Option<BoxStream<'static, Value>> {
        None
    }

    fn capabilities(&self) -> Capabilities;

    /// Takes `action` on `run` for `who` (whose name is journaled with a decision).
    async fn act(&self, who: &Principal, run: &Digest, action: Action) -> Result<Value>;
}
