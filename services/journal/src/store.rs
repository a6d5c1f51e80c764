//! The storage contract every journal backend implements.
//!
//! A store only moves verified bytes: it writes sealed events create-only at the sequence number
//! they carry (refusing with [`JournalError::Conflict`] when that number is taken), and reads
//! events back with their checksums and chain links verified. Sealing, semantic validation,
//! caching and watching live one level up in [`crate::journal::Journal`], identical for every
//! backend; the conformance suite in [`crate::testsuite`] holds every backend to the same rules.

use std::fmt;

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Head;
use crate::error::{JournalError, Result};
use crate::event::{StoredEvent, sha256_hex};
use crate::index::{ChainCheck, EffectIndex};

/// A run's metadata documents: `run.json` and the optional `inputs.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunFiles {
    pub run_json: Value,
    pub inputs_json: Option<Value>,
}

/// A snapshot of the derived state at a sequence number: opening a run reads the latest
/// snapshot and then only the events after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Snapshot {
    pub format: String,
    pub run_id: String,
    pub chain: ChainCheck,
    pub index: EffectIndex,
}

pub const SNAPSHOT_FORMAT: &str = "babysitter-rs/journal-snapshot/v1";

impl Snapshot {
    pub fn seq(&self) -> u64 {
        self.chain.head.seq
    }
}

/// A content-addressed blob reference, `sha256:<64 lowercase hex>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BlobRef(String);

impl BlobRef {
    pub fn of(content: &[u8]) -> Self {
        Self(sha256_hex(content))
    }

    pub fn parse(s: &str) -> Result<Self> {
        let hex = s.strip_prefix("sha256:").ok_or_else(|| {
            JournalError::invalid(
                "blob reference",
                format!("`{s}` does not start with `sha256:`"),
            )
        })?;
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(JournalError::invalid(
                "blob reference",
                format!("`{s}` is not sha256:<64 lowercase hex>"),
            ));
        }
        Ok(Self(hex.to_owned()))
    }

    /// The 64 hex digits.
    pub fn hex(&self) -> &str {
        &self.0
    }

    pub fn verify(&self, run_id: &str, content: &[u8]) -> Result<()> {
        let actual = sha256_hex(content);
        if actual == self.0 {
            Ok(())
        } else {
            Err(JournalError::Corrupt {
                at: crate::Location::object(run_id, format!("blob {self}")),
                reason: format!("content hashes to sha256:{actual}"),
            })
        }
    }
}

impl fmt::Display for BlobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.0)
    }
}

/// A file of a run other than the journal: `tasks/<effectId>/<name>` (task.json, result.json,
/// stdout.log, …) or `state/<name>` (output.json, …). Parsed from a run-relative path, every
/// segment validated, so no path can leave the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunFile {
    Task { effect_id: String, name: String },
    State { name: String },
}

impl RunFile {
    pub fn task(effect_id: &str, name: &str) -> Result<Self> {
        crate::validate_id("effect id", effect_id)?;
        crate::validate_id("file name", name)?;
        Ok(Self::Task {
            effect_id: effect_id.to_owned(),
            name: name.to_owned(),
        })
    }

    pub fn state(name: &str) -> Result<Self> {
        crate::validate_id("file name", name)?;
        if name == "state.json" || name == "snapshots" {
            return Err(JournalError::invalid(
                "run file",
                format!("state/{name} is maintained by the journal"),
            ));
        }
        Ok(Self::State {
            name: name.to_owned(),
        })
    }

    /// `tasks/<effectId>/<name>` or `state/<name>`.
    pub fn parse(path: &str) -> Result<Self> {
        let parts: Vec<&str> = path.split('/').collect();
        match parts.as_slice() {
            ["tasks", effect, name] => Self::task(effect, name),
            ["state", name] => Self::state(name),
            _ => Err(JournalError::invalid(
                "run file path",
                format!("`{path}` is not tasks/<effectId>/<name> or state/<name>"),
            )),
        }
    }

    /// The run-relative path.
    pub fn path(&self) -> String {
        match self {
            Self::Task { effect_id, name } => format!("tasks/{effect_id}/{name}"),
            Self::State { name } => format!("state/{name}"),
        }
    }

    pub fn name(&self) -> &str {
        match self {
            Self::Task { name, .. } | Self::State { name } => name,
        }
    }
}

impl fmt::Display for RunFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path())
    }
}

/// Writes run files as they are produced, from a thread of its own ([`JournalStore::run_file_writer`]);
/// its calls block. Nothing it writes is referred to before [`RunFileWriter::close`] hands the
/// files to the run's next commit; dropped without being closed, it removes what it wrote.
pub trait RunFileWriter: Send {
    /// Writes one file (a new file of the run, or one that replaces an existing file).
    fn write(&mut self, file: &RunFile, content: &[u8]) -> Result<()>;

    /// Nothing more is to be written for now: a moment to start making what was written durable
    /// ahead of the commit, while its producer goes on (the default does nothing).
    fn idle(&mut self) -> Result<()> {
        Ok(())
    }

    /// Every file is written: the run's next commit makes them durable before any of its events
    /// becomes visible, as for [`JournalStore::put_run_files_for_commit`]. On error nothing
    /// written is left for an event to refer to.
    fn close(self: Box<Self>) -> Result<()>;
}

/// Which integrity scheme a store's events carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// babysitter's run directory: one file per event, no chain links (the reference's format).
    Babysitter,
    /// create-only batch objects with hash-chain links.
    Object,
}

#[async_trait]
pub trait JournalStore: Send + Sync + fmt::Debug + 'static {
    fn layout(&self) -> Layout;

    /// Short human description for logs (`file:///data/runs`, `s3://bucket/prefix`).
    fn describe(&self) -> String;

    /// Creates a run with its metadata; [`JournalError::RunAlreadyExists`] when it exists.
    async fn create_run(&self, run_id: &str, files: &RunFiles) -> Result<()>;

    async fn get_run(&self, run_id: &str) -> Result<RunFiles>;

    /// Commits `events` (contiguous, sealed) at `events[0].seq`, all or nothing where the backend
    /// can (one object PUT); [`JournalError::Conflict`] with the current head when that sequence
    /// number is already taken.
    async fn commit(&self, run_id: &str, events: &[StoredEvent]) -> Result<()>;

    /// Every event after `from.head` (up to `to` when given, which must lie on a commit
    /// boundary or be the head), checksums and chain verified starting from `from`.
    async fn load(
        &self,
        run_id: &str,
        from: &ChainCheck,
        to: Option<u64>,
    ) -> Result<Vec<StoredEvent>>;

    /// The current head. `hint` is a head known to be committed; backends may list from it.
    async fn head(&self, run_id: &str, hint: Option<&Head>) -> Result<Head>;

    /// Run ids starting with `prefix`, ascending, strictly after `after`, at most `limit`.
    async fn list_runs(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>>;

    async fn put_blob(&self, run_id: &str, content: Bytes) -> Result<BlobRef>;

    async fn get_blob(&self, run_id: &str, blob: &BlobRef) -> Result<Bytes>;

    async fn put_snapshot(&self, run_id: &str, snapshot: &Snapshot) -> Result<()>;

    /// The newest snapshot whose seq is at most `at_most` (any when `None`).
    async fn latest_snapshot(&self, run_id: &str, at_most: Option<u64>)
    -> Result<Option<Snapshot>>;

    /// Writes a run file (`tasks/<effectId>/<name>` or `state/<name>`), replacing it.
    async fn put_run_file(&self, run_id: &str, file: &RunFile, content: Bytes) -> Result<()>;

    /// Writes several run files; backends may make them durable together (one sync).
    async fn put_run_files(&self, run_id: &str, files: Vec<(RunFile, Bytes)>) -> Result<()> {
        for (file, content) in files {
            self.put_run_file(run_id, &file, content).await?;
        }
        Ok(())
    }

    /// Writes run files that the events the caller commits next will refer to (a new effect's
    /// `task.json` before its `EFFECT_REQUESTED`, a `result.json` before its `EFFECT_RESOLVED`).
    /// A backend may leave new files not yet durable here and make them durable in its next
    /// [`JournalStore::commit`] on the same run, before any of its events becomes visible (one
    /// sync for the files and the events); a file that replaces one is durable before it does.
    /// It may even finish writing them in the background: its own reads of the run's files and
    /// that commit wait for them, and the commit fails (naming no event) if writing them failed.
    async fn put_run_files_for_commit(
        &self,
        run_id: &str,
        files: Vec<(RunFile, Bytes)>,
    ) -> Result<()> {
        self.put_run_files(run_id, files).await
    }

    /// A writer for run files the run's next commit will refer to, fed one file at a time as
    /// they are produced — the engine streams a fan-out's `task.json`s while the process is
    /// still running, so their directories and files are made meanwhile instead of after it.
    /// The files have [`JournalStore::put_run_files_for_commit`]'s standing once the writer is
    /// closed. `None` (the default): the store has no such writer, and the caller hands the
    /// files to `put_run_files_for_commit` instead.
    fn run_file_writer(&self, run_id: &str) -> Result<Option<Box<dyn RunFileWriter>>> {
        let _ = run_id;
        Ok(None)
    }

    /// Reads a run file; [`JournalError::RunFileNotFound`] when absent.
    async fn get_run_file(&self, run_id: &str, file: &RunFile) -> Result<Bytes>;

    /// Reads several run files, each as [`JournalStore::get_run_file`] would (in order); the
    /// outer error is one that concerns the whole run (it does not exist, say). Backends may do
    /// it in one go (a cold replay reads every result file of the run).
    async fn get_run_files(&self, run_id: &str, files: &[RunFile]) -> Result<Vec<Result<Bytes>>> {
        use futures::StreamExt as _;
        // Up to 32 reads in flight: a remote store answers each after a round trip. (Futures
        // made up front: a stream mapping borrowed files would not be `Send` for every lifetime.)
        let reads: Vec<_> = files
            .iter()
            .map(|file| self.get_run_file(run_id, file))
            .collect();
        Ok(futures::stream::iter(reads).buffered(32).collect().await)
    }

    /// babysitter's derived `state/state.json` bytes, if stored.
    async fn read_state_cache(&self, run_id: &str) -> Result<Option<Bytes>>;

    async fn write_state_cache(&self, run_id: &str, content: Bytes) -> Result<()>;

    /// A control document (the orchestrators' leadership lease, [`crate::leadership`]) with its
    /// version, an opaque token that changes with every write; `None` when absent. Control
    /// documents live beside the runs, never listed as one.
    async fn read_control(&self, name: &str) -> Result<Option<Versioned>> {
        Err(no_control(self.describe(), name))
    }

    /// Writes a control document only if its version is still `expected` (`None`: only if it
    /// does not exist) — a compare-and-swap; [`JournalError::ControlConflict`] when it lost.
    /// Returns the new version.
    async fn write_control(
        &self,
        name: &str,
        content: Bytes,
        expected: Option<&str>,
    ) -> Result<String> {
        let _ = (content, expected);
        Err(no_control(self.describe(), name))
    }
}

/// A control document's content and version (see [`JournalStore::read_control`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned {
    pub content: Bytes,
    pub version: String,
}

fn no_control(store: String, name: &str) -> JournalError {
    JournalError::UnsafeStore {
        reason: format!("{store} keeps no control documents (needed for `{name}`)"),
    }
}
