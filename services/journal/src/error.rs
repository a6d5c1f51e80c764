//! The journal's error type: one enum, semantic variants, each naming the run, the sequence
//! number and the file or object key involved, so an operator can go straight to the bad bytes.

use std::fmt;

use crate::Head;

/// Where in a journal something was found: run, sequence number (when known) and the file or
/// object key that holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub run_id: String,
    pub seq: Option<u64>,
    pub file: String,
}

impl Location {
    pub fn file(run_id: &str, seq: u64, file: impl Into<String>) -> Self {
        Self {
            run_id: run_id.to_owned(),
            seq: Some(seq),
            file: file.into(),
        }
    }

    pub fn object(run_id: &str, key: impl Into<String>) -> Self {
        Self {
            run_id: run_id.to_owned(),
            seq: None,
            file: key.into(),
        }
    }

    pub fn with_seq(mut self, seq: u64) -> Self {
        self.seq = Some(seq);
        self
    }
}

/// Something that names a [`Location`]: a location, or a closure that builds one only when an
/// error needs it (a hot path checks every event it writes, and a location costs allocations).
pub trait Locate {
    fn locate(&self) -> Location;
}

impl Locate for Location {
    fn locate(&self) -> Location {
        self.clone()
    }
}

impl<F: Fn() -> Location> Locate for F {
    fn locate(&self) -> Location {
        self()
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.seq {
            Some(seq) => write!(f, "run {} seq {} ({})", self.run_id, seq, self.file),
            None => write!(f, "run {} ({})", self.run_id, self.file),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    #[error("invalid {what}: {reason}")]
    InvalidArgument { what: &'static str, reason: String },

    #[error(
        "event {index} of the batch for run {run_id} is {size} bytes, over the {limit}-byte limit"
    )]
    EventTooLarge {
        run_id: String,
        index: usize,
        size: usize,
        limit: usize,
    },

    #[error("event {index} of the batch for run {run_id} was refused: {reason}")]
    InvalidEvent {
        run_id: String,
        index: usize,
        reason: String,
    },

    #[error("run {run_id} not found")]
    RunNotFound { run_id: String },

    #[error("run {run_id} already exists")]
    RunAlreadyExists { run_id: String },

    #[error("append conflict on run {run_id}: expected next seq {expected}, but the head is seq {}", head.seq)]
    Conflict {
        run_id: String,
        expected: u64,
        head: Head,
    },

    #[error("corrupt journal at {at}: {reason}")]
    Corrupt { at: Location, reason: String },

    #[error("checksum mismatch at {at}: stored {stored}, computed {computed}")]
    ChecksumMismatch {
        at: Location,
        stored: String,
        computed: String,
    },

    #[error("journal sequence gap at {at}: expected seq {expected}, got {got}")]
    SequenceGap {
        at: Location,
        expected: u64,
        got: u64,
    },

    #[error("duplicate journal sequence {seq} in run {run_id}: {}", files.join(", "))]
    DuplicateSequence {
        run_id: String,
        seq: u64,
        files: Vec<String>,
    },

    #[error("journal ULID order regression at {at}: {got} is not after {prev}")]
    UlidOrder {
        at: Location,
        prev: String,
        got: String,
    },

    #[error("broken hash chain at {at}: expected link {expected}, found {found}")]
    HashChain {
        at: Location,
        expected: String,
        found: String,
    },

    #[error("invalid journal file name {file} in run {run_id}: {reason}")]
    BadFileName {
        run_id: String,
        file: String,
        reason: String,
    },

    #[error("invalid event at {at}: {reason}")]
    Replay { at: Location, reason: String },

    #[error("blob {blob_ref} of run {run_id} not found")]
    BlobNotFound { run_id: String, blob_ref: String },

    #[error("{path} of run {run_id} not found")]
    RunFileNotFound { run_id: String, path: String },

    #[error("the store is not safe for a journal: {reason}")]
    UnsafeStore { reason: String },

    #[error("run {run_id} is locked by pid {pid} ({owner})")]
    Locked {
        run_id: String,
        pid: i64,
        owner: String,
    },

    #[error("i/o error on {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },

    #[error("object store error on {key}: {source}")]
    ObjectStore {
        key: String,
        #[source]
        source: object_store::Error,
    },

    #[error("journal is shutting down")]
    ShuttingDown,

    /// A conditional write of a control document (a leadership lease) lost: it changed since it
    /// was read, or it exists when it was to be created.
    #[error("control document {name} changed since it was read")]
    ControlConflict { name: String },

    /// A write under a leadership term that is not (or no longer) the current one.
    #[error("writes of {group} epoch {epoch} are fenced: {reason}")]
    Fenced {
        group: String,
        epoch: u64,
        reason: String,
    },

    /// A remote journal service refused or failed a call (see [`crate::remote`]).
    #[error("journal service at {url}: {call} failed ({kind}): {message}")]
    Remote {
        url: String,
        call: &'static str,
        kind: babysitter_common::error::ErrorKind,
        retryable: bool,
        message: String,
    },
}

impl JournalError {
    pub fn corrupt(at: &Location, reason: impl Into<String>) -> Self {
        Self::Corrupt {
            at: at.clone(),
            reason: reason.into(),
        }
    }

    pub fn io(path: impl fmt::Display, source: std::io::Error) -> Self {
        Self::Io {
            path: path.to_string(),
            source,
        }
    }

    pub fn object(key: impl fmt::Display, source: object_store::Error) -> Self {
        Self::ObjectStore {
            key: key.to_string(),
            source,
        }
    }

    pub fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidArgument {
            what,
            reason: reason.into(),
        }
    }

    /// True for a failure of the storage underneath (i/o, the object store, a remote journal),
    /// as opposed to a refusal of the request or damage to what is stored.
    pub fn is_store_failure(&self) -> bool {
        matches!(
            self,
            Self::Io { .. } | Self::ObjectStore { .. } | Self::Remote { .. }
        )
    }

    /// True for errors that say the stored journal itself is damaged.
    /// Where a corruption was found (the event's seq when known), for readers that show how
    /// far a journal verifies (the dashboard's raw journal view).
    pub fn location(&self) -> Option<&Location> {
        match self {
            Self::Corrupt { at, .. }
            | Self::ChecksumMismatch { at, .. }
            | Self::SequenceGap { at, .. }
            | Self::UlidOrder { at, .. }
            | Self::HashChain { at, .. }
            | Self::Replay { at, .. } => Some(at),
            _ => None,
        }
    }

    pub fn is_corruption(&self) -> bool {
        matches!(
            self,
            Self::Corrupt { .. }
                | Self::ChecksumMismatch { .. }
                | Self::SequenceGap { .. }
                | Self::DuplicateSequence { .. }
                | Self::UlidOrder { .. }
                | Self::HashChain { .. }
                | Self::BadFileName { .. }
                | Self::Replay { .. }
        )
    }
}

pub type Result<T, E = JournalError> = std::result::Result<T, E>;
