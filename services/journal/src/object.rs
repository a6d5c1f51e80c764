//! The object-store backend (S3 and anything `object_store` speaks).
//!
//! Layout under the configured prefix:
//! ```text
//! runs/<runId>/manifest.json                  run.json + inputs.json, created once (create-only)
//! runs/<runId>/journal/<firstSeq:020>.json    one batch of events per commit (create-only)
//! runs/<runId>/snapshots/<seq:020>.json       derived state at a commit boundary
//! runs/<runId>/blobs/<sha256 hex>             content-addressed payloads
//! runs/<runId>/state/state.json               babysitter's state cache (derived, overwritable)
//! control/<name>.json                         leadership leases (compare-and-swap on the ETag)
//! ```
//! A batch's key is the sequence number of its first event and is written with
//! `PutMode::Create`, so of two writers that saw the same head exactly one wins and the other is
//! told the current head; appending k events costs one PUT (group commit). Every writer only ever
//! writes at (end of a batch it has read) + 1, so batches tile 1..N without overlap. Each event
//! carries the hash of its predecessor, verified on read, and event data larger than the blob
//! threshold is stored once as a blob and referenced from the batch.
//!
//! [`probe_conditional_create`] refuses stores that silently ignore create-only preconditions
//! (such as s3rver): on them two writers could both "win" a sequence number.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::error::{JournalError, Location, Result};
use crate::event::{EventBody, StoredEvent};
use crate::fs::parse_snapshot;
use crate::index::ChainCheck;
use crate::store::{BlobRef, JournalStore, Layout, RunFile, RunFiles, Snapshot, Versioned};
use crate::{Head, validate_id};

const BATCH_FORMAT: &str = "babysitter-rs/journal-batch/v1";
const MANIFEST_FORMAT: &str = "babysitter-rs/run-manifest/v1";
/// Concurrent GETs when reading a journal's batches.
const READ_CONCURRENCY: usize = 16;

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Manifest {
    format: String,
    run_json: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    inputs_json: Option<Value>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Batch {
    format: String,
    run_id: String,
    first: u64,
    events: Vec<BatchEntry>,
}

/// [`Batch`] as written: serialised from the sealed events without copying them.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BatchOut<'a> {
    format: &'a str,
    run_id: &'a str,
    first: u64,
    events: Vec<BatchEntryOut<'a>>,
}

/// [`BatchEntry`] as written.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BatchEntryOut<'a> {
    seq: u64,
    ulid: &'a str,
    prev_hash: &'a str,
    event: EnvelopeOut<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data_blob: Option<String>,
}

/// An event's envelope (`EventBody::envelope`, less `data` when that went to a blob), written
/// from the borrowed body.
struct EnvelopeOut<'a> {
    body: &'a EventBody,
    checksum: &'a str,
    with_data: bool,
}

impl Serialize for EnvelopeOut<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        if !self.body.extra.is_empty() {
            // Members read from older files: the envelope exactly as babysitter builds it.
            let mut envelope = self.body.envelope(self.checksum);
            if !self.with_data
                && let Value::Object(m) = &mut envelope
            {
                m.shift_remove("data");
            }
            return envelope.serialize(s);
        }
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("type", self.body.kind.as_str())?;
        m.serialize_entry("recordedAt", &self.body.recorded_at)?;
        if self.with_data {
            m.serialize_entry("data", &self.body.data)?;
        }
        if let Some(v) = &self.body.sdk_version {
            m.serialize_entry("sdkVersion", v)?;
        }
        m.serialize_entry("checksum", self.checksum)?;
        m.end()
    }
}

/// Counts the bytes of a serialisation (the size of event data, decided before writing it).
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BatchEntry {
    seq: u64,
    ulid: String,
    prev_hash: String,
    /// babysitter's envelope; `data` is absent when it lives in `data_blob`.
    event: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    data_blob: Option<String>,
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| JournalError::io("blocking task", std::io::Error::other(e.to_string())))?
}

/// Journals stored in an object store under a prefix.
#[derive(Debug, Clone)]
pub struct ObjectJournal {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    description: String,
    blob_threshold: usize,
    /// Control documents go to this directory by the filesystem's compare-and-swap instead
    /// (a local directory as an object store: `LocalFileSystem` cannot update conditionally).
    local_control: Option<std::path::PathBuf>,
}

impl ObjectJournal {
    /// `blob_threshold`: event data whose JSON is larger than this many bytes goes to a blob.
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: &str,
        description: impl Into<String>,
        blob_threshold: usize,
    ) -> Self {
        let prefix = Path::from(prefix.trim_matches('/'));
        Self {
            store,
            prefix,
            description: description.into(),
            blob_threshold,
            local_control: None,
        }
    }

    /// Keeps control documents under `root` on the local filesystem (see `local_control`).
    pub fn with_local_control(mut self, root: impl Into<std::path::PathBuf>) -> Self {
        self.local_control = Some(root.into());
        self
    }

    fn run_path(&self, run_id: &str, rest: &str) -> Path {
        let mut p = self.prefix.clone().join("runs").join(run_id);
        for part in rest.split('/') {
            p = p.join(part);
        }
        p
    }

    /// `control/<name>.json`, beside `runs/` (never listed as a run).
    fn control_path(&self, name: &str) -> Result<Path> {
        validate_id("control document name", name)?;
        Ok(self
            .prefix
            .clone()
            .join("control")
            .join(format!("{name}.json")))
    }

    fn batch_path(&self, run_id: &str, first: u64) -> Path {
        self.run_path(run_id, &format!("journal/{first:020}.json"))
    }

    async fn get_bytes(&self, key: &Path) -> std::result::Result<Bytes, object_store::Error> {
        self.store.get(key).await?.bytes().await
    }

    async fn put_create(
        &self,
        key: &Path,
        bytes: Bytes,
    ) -> std::result::Result<(), object_store::Error> {
        let opts = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        self.store
            .put_opts(key, PutPayload::from(bytes), opts)
            .await
            .map(|_| ())
    }

    async fn ensure_run(&self, run_id: &str) -> Result<()> {
        validate_id("run id", run_id)?;
        let key = self.run_path(run_id, "manifest.json");
        match self.store.head(&key).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::NotFound { .. }) => Err(JournalError::RunNotFound {
                run_id: run_id.to_owned(),
            }),
            Err(e) => Err(JournalError::object(key, e)),
        }
    }

    /// Whether the batch starting at `first` exists (one HEAD request).
    async fn batch_exists(&self, run_id: &str, first: u64) -> Result<bool> {
        let key = self.batch_path(run_id, first);
        match self.store.head(&key).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(JournalError::object(key, e)),
        }
    }

    /// Batch keys (first seq, key) strictly after `after_seq`'s key, ascending.
    async fn list_batches(
        &self,
        run_id: &str,
        after_first: Option<u64>,
    ) -> Result<Vec<(u64, Path)>> {
        let dir = self.run_path(run_id, "journal");
        let stream = match after_first {
            Some(first) => self
                .store
                .list_with_offset(Some(&dir), &self.batch_path(run_id, first)),
            None => self.store.list(Some(&dir)),
        };
        let metas: Vec<_> = stream
            .try_collect()
            .await
            .map_err(|e| JournalError::object(&dir, e))?;
        let mut out = Vec::with_capacity(metas.len());
        for meta in metas {
            let name = meta.location.filename().unwrap_or_default().to_owned();
            let first = name
                .strip_suffix(".json")
                .filter(|s| s.len() == 20)
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| JournalError::Corrupt {
                    at: Location::object(run_id, meta.location.to_string()),
                    reason: "unexpected object in the journal prefix".into(),
                })?;
            out.push((first, meta.location));
        }
        out.sort_by_key(|(first, _)| *first);
        Ok(out)
    }

    /// Reads and decodes one batch, resolving blob-held data.
    async fn read_batch(&self, run_id: &str, first: u64, key: &Path) -> Result<Vec<StoredEvent>> {
        let bytes = self
            .get_bytes(key)
            .await
            .map_err(|e| JournalError::object(key, e))?;
        let at = Location::object(run_id, key.to_string()).with_seq(first);
        let batch: Batch = serde_json::from_slice(&bytes)
            .map_err(|e| JournalError::corrupt(&at, format!("invalid batch: {e}")))?;
        if batch.format != BATCH_FORMAT
            || batch.run_id != run_id
            || batch.first != first
            || batch.events.is_empty()
        {
            return Err(JournalError::corrupt(
                &at,
                "batch header does not match its run and key",
            ));
        }
        let mut out = Vec::with_capacity(batch.events.len());
        for entry in batch.events {
            let at = Location::object(run_id, key.to_string()).with_seq(entry.seq);
            let mut envelope = entry.event;
            if let Some(blob) = &entry.data_blob {
                let blob = BlobRef::parse(blob)?;
                let data_bytes = self.get_blob(run_id, &blob).await?;
                let data: Value = serde_json::from_slice(&data_bytes).map_err(|e| {
                    JournalError::corrupt(&at, format!("event data blob is not JSON: {e}"))
                })?;
                envelope = insert_data(envelope, data, &at)?;
            }
            let (body, checksum) = EventBody::from_envelope(envelope, &at)?;
            let event = StoredEvent {
                seq: entry.seq,
                ulid: entry.ulid,
                body,
                checksum,
                prev_hash: Some(entry.prev_hash),
            };
            event.verify_checksum(&at)?;
            out.push(event);
        }
        Ok(out)
    }
}

/// Puts `data` back into an envelope at babysitter's position (after `recordedAt`).
fn insert_data(envelope: Value, data: Value, at: &Location) -> Result<Value> {
    let Value::Object(m) = envelope else {
        return Err(JournalError::corrupt(at, "event is not a JSON object"));
    };
    let mut out = Map::with_capacity(m.len() + 1);
    let mut data = Some(data);
    for (k, v) in m {
        let after_recorded = k == "recordedAt";
        out.insert(k, v);
        if after_recorded && let Some(d) = data.take() {
            out.insert("data".into(), d);
        }
    }
    if let Some(d) = data {
        out.insert("data".into(), d);
    }
    Ok(Value::Object(out))
}

fn to_json_bytes<T: Serialize>(what: &'static str, value: &T) -> Result<Bytes> {
    serde_json::to_vec(value)
        .map(Bytes::from)
        .map_err(|e| JournalError::invalid(what, e.to_string()))
}

/// Refuses a store that ignores create-only preconditions: writes one probe object twice with
/// `PutMode::Create`; the second write must fail with `AlreadyExists` and leave the first intact.
pub async fn probe_conditional_create(store: &dyn ObjectStore, prefix: &str) -> Result<()> {
    let key = Path::from(prefix.trim_matches('/'))
        .join("_probe")
        .join(format!("{}", ulid::Ulid::generate()));
    let create = || PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    store
        .put_opts(&key, PutPayload::from_static(b"first"), create())
        .await
        .map_err(|e| JournalError::UnsafeStore {
            reason: format!("probe write to {key} failed: {e}"),
        })?;
    let second = store
        .put_opts(&key, PutPayload::from_static(b"second"), create())
        .await;
    let content = store
        .get(&key)
        .await
        .map_err(|e| JournalError::object(&key, e))?
        .bytes()
        .await;
    let _ = store.delete(&key).await;
    match second {
        Err(object_store::Error::AlreadyExists { .. }) => {}
        Err(e) => {
            return Err(JournalError::UnsafeStore {
                reason: format!("create-only probe on {key} failed unexpectedly: {e}"),
            });
        }
        Ok(_) => {
            return Err(JournalError::UnsafeStore {
                reason: "the store accepted a second create-only write to the same key (it ignores If-None-Match); \
                         two writers could both commit one sequence number"
                    .into(),
            });
        }
    }
    match content {
        Ok(b) if b.as_ref() == b"first" => Ok(()),
        Ok(_) => Err(JournalError::UnsafeStore {
            reason: "a create-only write overwrote an existing object".into(),
        }),
        Err(e) => Err(JournalError::object(key, e)),
    }
}

#[async_trait]
impl JournalStore for ObjectJournal {
    fn layout(&self) -> Layout {
        Layout::Object
    }

    fn describe(&self) -> String {
        self.description.clone()
    }

    async fn create_run(&self, run_id: &str, files: &RunFiles) -> Result<()> {
        validate_id("run id", run_id)?;
        let manifest = Manifest {
            format: MANIFEST_FORMAT.into(),
            run_json: files.run_json.clone(),
            inputs_json: files.inputs_json.clone(),
        };
        let key = self.run_path(run_id, "manifest.json");
        match self
            .put_create(&key, to_json_bytes("run manifest", &manifest)?)
            .await
        {
            Ok(()) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => Err(JournalError::RunAlreadyExists {
                run_id: run_id.to_owned(),
            }),
            Err(e) => Err(JournalError::object(key, e)),
        }
    }

    async fn get_run(&self, run_id: &str) -> Result<RunFiles> {
        validate_id("run id", run_id)?;
        let key = self.run_path(run_id, "manifest.json");
        let bytes = match self.get_bytes(&key).await {
            Ok(b) => b,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(JournalError::RunNotFound {
                    run_id: run_id.to_owned(),
                });
            }
            Err(e) => return Err(JournalError::object(key, e)),
        };
        let m: Manifest = serde_json::from_slice(&bytes).map_err(|e| {
            JournalError::corrupt(
                &Location::object(run_id, key.to_string()),
                format!("invalid manifest: {e}"),
            )
        })?;
        Ok(RunFiles {
            run_json: m.run_json,
            inputs_json: m.inputs_json,
        })
    }

    async fn commit(&self, run_id: &str, events: &[StoredEvent]) -> Result<()> {
        // The caller (the Journal) has opened the run; a missing run cannot get here.
        let Some(first) = events.first() else {
            return Ok(());
        };
        validate_id("run id", run_id)?;
        let mut entries = Vec::with_capacity(events.len());
        for e in events {
            let prev_hash = e.prev_hash.as_deref().ok_or_else(|| {
                JournalError::invalid("event", "object layout events need a hash-chain link")
            })?;
            let bad_data =
                |err: serde_json::Error| JournalError::invalid("event data", err.to_string());
            let mut size = ByteCount(0);
            serde_json::to_writer(&mut size, &e.body.data).map_err(bad_data)?;
            let mut data_blob = None;
            if size.0 > self.blob_threshold {
                let data_bytes = serde_json::to_vec(&e.body.data).map_err(bad_data)?;
                let blob = self.put_blob(run_id, Bytes::from(data_bytes)).await?;
                data_blob = Some(blob.to_string());
            }
            entries.push(BatchEntryOut {
                seq: e.seq,
                ulid: &e.ulid,
                prev_hash,
                event: EnvelopeOut {
                    body: &e.body,
                    checksum: &e.checksum,
                    with_data: data_blob.is_none(),
                },
                data_blob,
            });
        }
        let batch = BatchOut {
            format: BATCH_FORMAT,
            run_id,
            first: first.seq,
            events: entries,
        };
        let key = self.batch_path(run_id, first.seq);
        match self.put_create(&key, to_json_bytes("batch", &batch)?).await {
            Ok(()) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => {
                let head = self.head(run_id, None).await?;
                Err(JournalError::Conflict {
                    run_id: run_id.to_owned(),
                    expected: first.seq,
                    head,
                })
            }
            Err(e) => Err(JournalError::object(key, e)),
        }
    }

    async fn load(
        &self,
        run_id: &str,
        from: &ChainCheck,
        to: Option<u64>,
    ) -> Result<Vec<StoredEvent>> {
        let start = from.head.seq;
        let end = to.unwrap_or(u64::MAX);
        if start == 0 {
            self.ensure_run(run_id).await?;
        } else if !self.batch_exists(run_id, start + 1).await? {
            // Steady state (nothing new after a known boundary): one GET instead of a LIST.
            return Ok(Vec::new());
        }
        // The listing is only a hint: some stores (a local directory being written to) may miss
        // a key created during the listing while showing a later one. The chain is followed by
        // key — the batch after a boundary `e` is keyed `e + 1` — with a direct GET for any key
        // the listing missed, so a gap is reported only when the store really has none.
        let listed = self
            .list_batches(run_id, (start > 0).then_some(start))
            .await?;
        let listed: Vec<_> = listed
            .into_iter()
            .filter(|(first, _)| *first > start && *first <= end)
            .collect();
        let max_listed = listed.last().map(|(first, _)| *first);
        let mut prefetched: std::collections::BTreeMap<u64, Result<Vec<StoredEvent>>> =
            futures::stream::iter(listed.into_iter().map(|(first, key)| {
                let this = self.clone();
                let run = run_id.to_owned();
                async move { (first, this.read_batch(&run, first, &key).await) }
            }))
            .buffered(READ_CONCURRENCY)
            .collect()
            .await;
        let mut chain = from.clone();
        let mut out = Vec::new();
        let mut expected = start + 1;
        while expected <= end {
            let key = self.batch_path(run_id, expected);
            let batch = match prefetched.remove(&expected) {
                Some(Ok(b)) => b,
                Some(Err(JournalError::ObjectStore {
                    source: object_store::Error::NotFound { .. },
                    ..
                }))
                | None => {
                    match self.read_batch(run_id, expected, &key).await {
                        Ok(b) => b,
                        Err(JournalError::ObjectStore {
                            source: object_store::Error::NotFound { .. },
                            ..
                        }) => {
                            if max_listed.is_some_and(|m| m > expected) {
                                return Err(JournalError::SequenceGap {
                                    at: Location::object(run_id, key.to_string()),
                                    expected,
                                    got: prefetched.keys().next().copied().unwrap_or(expected + 1),
                                });
                            }
                            break; // the end of the journal
                        }
                        Err(e) => return Err(e),
                    }
                }
                Some(Err(e)) => return Err(e),
            };
            for event in batch {
                if event.seq > end {
                    break;
                }
                chain.push(
                    &event,
                    &Location::object(run_id, key.to_string()).with_seq(event.seq),
                )?;
                out.push(event);
            }
            expected = chain.head.seq + 1;
            // Keys inside the batch just read belong to no chain: another writer's overlap.
            if let Some((&inside, _)) = prefetched.range(..expected).next() {
                return Err(JournalError::corrupt(
                    &Location::object(run_id, self.batch_path(run_id, inside).to_string())
                        .with_seq(inside),
                    "batch overlaps an earlier batch",
                ));
            }
        }
        Ok(out)
    }

    async fn head(&self, run_id: &str, hint: Option<&Head>) -> Result<Head> {
        // A hint is a committed commit boundary: only batches after it can be newer.
        let hint_seq = hint.map(|h| h.seq).filter(|s| *s > 0);
        match (hint, hint_seq) {
            (Some(h), Some(seq)) if !self.batch_exists(run_id, seq + 1).await? => {
                return Ok(h.clone());
            }
            (_, None) => self.ensure_run(run_id).await?,
            _ => {}
        }
        let batches = self.list_batches(run_id, hint_seq).await?;
        let Some((first, key)) = batches.last() else {
            return Ok(hint.cloned().unwrap_or_default());
        };
        let events = self.read_batch(run_id, *first, key).await?;
        let last = events.last().ok_or_else(|| {
            JournalError::corrupt(&Location::object(run_id, key.to_string()), "empty batch")
        })?;
        Ok(Head {
            seq: last.seq,
            ulid: last.ulid.clone(),
        })
    }

    async fn list_runs(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>> {
        let dir = self.prefix.clone().join("runs");
        let listing = self
            .store
            .list_with_delimiter(Some(&dir))
            .await
            .map_err(|e| JournalError::object(&dir, e))?;
        let mut ids: Vec<String> = listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_owned))
            .filter(|id| id.starts_with(prefix) && after.is_none_or(|a| id.as_str() > a))
            .collect();
        ids.sort();
        ids.truncate(limit);
        Ok(ids)
    }

    async fn put_blob(&self, run_id: &str, content: Bytes) -> Result<BlobRef> {
        validate_id("run id", run_id)?;
        let blob = BlobRef::of(&content);
        let key = self.run_path(run_id, &format!("blobs/{}", blob.hex()));
        match self.put_create(&key, content).await {
            Ok(())
            | Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(blob),
            Err(e) => Err(JournalError::object(key, e)),
        }
    }

    async fn get_blob(&self, run_id: &str, blob: &BlobRef) -> Result<Bytes> {
        validate_id("run id", run_id)?;
        let key = self.run_path(run_id, &format!("blobs/{}", blob.hex()));
        let bytes = match self.get_bytes(&key).await {
            Ok(b) => b,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(JournalError::BlobNotFound {
                    run_id: run_id.to_owned(),
                    blob_ref: blob.to_string(),
                });
            }
            Err(e) => return Err(JournalError::object(key, e)),
        };
        blob.verify(run_id, &bytes)?;
        Ok(bytes)
    }

    async fn put_snapshot(&self, run_id: &str, snapshot: &Snapshot) -> Result<()> {
        validate_id("run id", run_id)?;
        let key = self.run_path(run_id, &format!("snapshots/{:020}.json", snapshot.seq()));
        match self
            .put_create(&key, to_json_bytes("snapshot", snapshot)?)
            .await
        {
            // A snapshot at a seq is a pure function of the journal: an existing one is the same.
            Ok(())
            | Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => Ok(()),
            Err(e) => Err(JournalError::object(key, e)),
        }
    }

    async fn latest_snapshot(
        &self,
        run_id: &str,
        at_most: Option<u64>,
    ) -> Result<Option<Snapshot>> {
        self.ensure_run(run_id).await?;
        let dir = self.run_path(run_id, "snapshots");
        let metas: Vec<_> = self
            .store
            .list(Some(&dir))
            .try_collect()
            .await
            .map_err(|e| JournalError::object(&dir, e))?;
        let best = metas
            .iter()
            .filter_map(|m| {
                let seq = m
                    .location
                    .filename()?
                    .strip_suffix(".json")?
                    .parse::<u64>()
                    .ok()?;
                Some((seq, &m.location))
            })
            .filter(|(seq, _)| at_most.is_none_or(|max| *seq <= max))
            .max_by_key(|(seq, _)| *seq);
        let Some((seq, key)) = best else {
            return Ok(None);
        };
        let bytes = self
            .get_bytes(key)
            .await
            .map_err(|e| JournalError::object(key, e))?;
        parse_snapshot(run_id, seq, key.as_ref(), &bytes).map(Some)
    }

    async fn put_run_file(&self, run_id: &str, file: &RunFile, content: Bytes) -> Result<()> {
        validate_id("run id", run_id)?;
        let key = self.run_path(run_id, &file.path());
        self.store
            .put(&key, PutPayload::from(content))
            .await
            .map(|_| ())
            .map_err(|e| JournalError::object(key, e))
    }

    async fn get_run_file(&self, run_id: &str, file: &RunFile) -> Result<Bytes> {
        validate_id("run id", run_id)?;
        let key = self.run_path(run_id, &file.path());
        match self.get_bytes(&key).await {
            Ok(b) => Ok(b),
            Err(object_store::Error::NotFound { .. }) => Err(JournalError::RunFileNotFound {
                run_id: run_id.to_owned(),
                path: file.path(),
            }),
            Err(e) => Err(JournalError::object(key, e)),
        }
    }

    async fn read_state_cache(&self, run_id: &str) -> Result<Option<Bytes>> {
        validate_id("run id", run_id)?;
        let key = self.run_path(run_id, "state/state.json");
        match self.get_bytes(&key).await {
            Ok(b) => Ok(Some(b)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(JournalError::object(key, e)),
        }
    }

    async fn write_state_cache(&self, run_id: &str, content: Bytes) -> Result<()> {
        validate_id("run id", run_id)?;
        let key = self.run_path(run_id, "state/state.json");
        self.store
            .put(&key, PutPayload::from(content))
            .await
            .map(|_| ())
            .map_err(|e| JournalError::object(key, e))
    }

    async fn read_control(&self, name: &str) -> Result<Option<Versioned>> {
        if let Some(root) = &self.local_control {
            let (root, name) = (root.clone(), name.to_owned());
            return blocking(move || crate::fs::control::read_control(&root, &name)).await;
        }
        let key = self.control_path(name)?;
        let got = match self.store.get(&key).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(JournalError::object(key, e)),
        };
        let version = got
            .meta
            .e_tag
            .clone()
            .ok_or_else(|| JournalError::UnsafeStore {
                reason: format!("{} returned {key} without an ETag", self.description),
            })?;
        let content = got
            .bytes()
            .await
            .map_err(|e| JournalError::object(&key, e))?;
        Ok(Some(Versioned { content, version }))
    }

    async fn write_control(
        &self,
        name: &str,
        content: Bytes,
        expected: Option<&str>,
    ) -> Result<String> {
        if let Some(root) = &self.local_control {
            let (root, name, expected) =
                (root.clone(), name.to_owned(), expected.map(str::to_owned));
            return blocking(move || {
                crate::fs::control::write_control(&root, &name, &content, expected.as_deref())
            })
            .await;
        }
        let key = self.control_path(name)?;
        let mode = match expected {
            None => PutMode::Create,
            Some(etag) => PutMode::Update(object_store::UpdateVersion {
                e_tag: Some(etag.to_owned()),
                version: None,
            }),
        };
        let opts = PutOptions {
            mode,
            ..Default::default()
        };
        match self
            .store
            .put_opts(&key, PutPayload::from(content), opts)
            .await
        {
            Ok(put) => put.e_tag.ok_or_else(|| JournalError::UnsafeStore {
                reason: format!("{} wrote {key} without returning an ETag", self.description),
            }),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. }
                | object_store::Error::NotFound { .. },
            ) => Err(JournalError::ControlConflict {
                name: name.to_owned(),
            }),
            Err(e) => Err(JournalError::object(key, e)),
        }
    }
}
