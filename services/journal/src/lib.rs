//! The journal: every babysitter run's append-only, checksummed event log, and the derived state
//! built from it.
//!
//! Layers, outermost last:
//! - [`event`] and [`node_json`]: babysitter's event envelope and the exact bytes Node writes, so
//!   checksums recompute and runs stay byte-compatible with the reference implementation.
//! - [`index`]: integrity checks (sequence, ULID order, hash chain) and the effect index fold.
//! - [`store`]: the [`JournalStore`] trait and its backends — [`fs::FsStore`] (babysitter's run
//!   directory layout, guarded by `flock` + babysitter's `run.lock`) and [`object::ObjectJournal`]
//!   (any `object_store`: create-only batch objects keyed by sequence, hash-chained, with
//!   snapshots and content-addressed blobs).
//! - [`journal::Journal`]: the domain service (validation, sealing, caching, watch, snapshots)
//!   that the gRPC adapter in [`grpc`] exposes. No tonic type appears outside [`grpc`].

#![forbid(unsafe_code)]

pub mod agent_sessions;
pub mod budget_marks;
pub mod config;
pub mod cost_stats;
pub mod error;
pub mod event;
pub mod fs;
pub mod grpc;
pub mod index;
pub mod journal;
pub mod leadership;
mod metrics;
pub mod node_json;
pub mod object;
pub mod readiness;
pub mod redact;
pub mod remote;
pub mod state_cache;
pub mod store;
#[cfg(any(test, feature = "testsuite"))]
pub mod testsuite;

use serde::{Deserialize, Serialize};

pub use error::{JournalError, Location, Result};
pub use state_cache::SDK_VERSION;

/// `run.json`'s `layoutVersion`: the only run layout babysitter (and this journal) reads.
pub const LAYOUT_VERSION: &str = "2026.01-storage-preview";
pub use event::{EventBody, EventType, StoredEvent};
pub use journal::{Journal, JournalOptions, NewEvent, RunFileContent, RunFileStream, UlidSource};
pub use store::JournalStore;

/// The last committed event of a run: `seq` 0 (and an empty ULID) for an empty journal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Head {
    pub seq: u64,
    pub ulid: String,
}

impl Head {
    pub fn empty() -> Self {
        Self::default()
    }
}

/// Validates a run id, effect id or file name used as one directory / key segment, by the
/// workspace-wide rule of [`babysitter_common::ids::validate_path_segment`].
pub fn validate_id(what: &'static str, id: &str) -> Result<()> {
    babysitter_common::ids::validate_path_segment(what, id)
        .map_err(|e| JournalError::invalid(what, e.to_string()))
}
