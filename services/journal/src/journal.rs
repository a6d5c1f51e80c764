//! The journal domain service: what every caller (gRPC adapter, orchestrator in-process, CLI)
//! uses, identical over every backend.
//!
//! It keeps one verified view per open run (integrity chain + effect index at the head, built
//! from the latest snapshot plus the tail), seals new events (ULID strictly after the head even
//! across machines with skewed clocks, babysitter checksum, hash-chain link), refuses events that
//! would make the run unloadable *before* anything is written, and commits through the store's
//! conditional write. Appends run in their own task so a caller that goes away cannot cancel a
//! half-done write.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::{Mutex, broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::error::{JournalError, Location, Result};
use crate::event::{EventBody, EventType, StoredEvent};
use crate::index::{ChainCheck, EffectIndex};
use crate::store::{BlobRef, JournalStore, Layout, RunFile, RunFiles, SNAPSHOT_FORMAT, Snapshot};
use crate::{Head, node_json, state_cache, validate_id};

mod append;
mod run_files;
mod stream;
mod whole;
pub use run_files::RunFileContent;
pub use stream::RunFileStream;
pub(crate) use whole::spawn_whole;

/// Tunables of the journal service.
#[derive(Debug, Clone)]
pub struct JournalOptions {
    /// Largest event accepted, in bytes of its stored JSON form.
    pub max_event_bytes: usize,
    /// Most events accepted in one append.
    pub max_batch_events: usize,
    /// Write a snapshot after this many events since the last one (0 = never automatically);
    /// background snapshots are spaced wider on long runs (see `snapshot_spacing`).
    pub snapshot_every: u64,
    /// Write automatic snapshots in the background (the append that crosses `snapshot_every`
    /// does not wait for the whole index to be serialized and stored, nor hold the run's
    /// writers back meanwhile). A short-lived process (the CLI) sets it to `false`, so the
    /// snapshot is stored before it exits; a long-lived one awaits [`Journal::flush`] on
    /// shutdown. A lost snapshot costs only a longer open: the next one follows.
    pub background_snapshots: bool,
    /// How often a watcher checks the store for events written by other processes.
    pub watch_poll_interval: Duration,
    /// Secret values replaced in event data and run files before they are stored.
    pub redactor: Option<Arc<crate::redact::Redactor>>,
    /// Where event ULIDs come from (`None`: a monotonic generator over the wall clock). Tests
    /// inject a recorded run's ULIDs to reproduce its journal file for file. A ULID that does
    /// not parse, or does not follow the head, is replaced as a generated one would be.
    pub ulids: Option<UlidSource>,
}

/// A source of event ULIDs (see [`JournalOptions::ulids`]).
#[derive(Clone)]
pub struct UlidSource(pub Arc<dyn Fn() -> String + Send + Sync>);

impl std::fmt::Debug for UlidSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UlidSource")
    }
}

impl Default for JournalOptions {
    fn default() -> Self {
        Self {
            max_event_bytes: 16 * 1024 * 1024,
            max_batch_events: 10_000,
            snapshot_every: 1000,
            background_snapshots: true,
            watch_poll_interval: Duration::from_millis(500),
            redactor: None,
            ulids: None,
        }
    }
}

/// An event to append: the journal stamps sequence number, ULID and checksum.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub kind: EventType,
    /// `None` = now.
    pub recorded_at: Option<String>,
    pub data: Value,
    pub sdk_version: Option<String>,
    /// `None` = the journal assigns the next ULID; `Some` = a client that seals events itself
    /// (a remote journal's own view) fixes it: it must be a ULID after the head's.
    pub ulid: Option<String>,
}

impl NewEvent {
    /// A 6.0.0-style event (stamped with `sdkVersion`).
    pub fn new(kind: EventType, data: Value) -> Self {
        Self {
            kind,
            recorded_at: None,
            data,
            sdk_version: Some(state_cache::SDK_VERSION.to_owned()),
            ulid: None,
        }
    }
}

/// The derived state of a run as `GetState` returns it.
#[derive(Debug, Clone)]
pub struct RunState {
    pub head: Head,
    /// babysitter's `state/state.json` document.
    pub state_json: Bytes,
    /// Why it was rebuilt (`missing_cache`, …), `None` when the stored one was fresh.
    pub rebuild_reason: Option<&'static str>,
    /// The snapshot the view was opened from (0 = none).
    pub snapshot_seq: u64,
}

/// ISO-8601 UTC with milliseconds, as babysitter's clock prints it.
pub fn now_iso() -> String {
    chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string()
}

#[derive(Debug)]
struct RunView {
    chain: ChainCheck,
    index: EffectIndex,
    since_snapshot: u64,
    snapshot_seq: u64,
    /// The most recent events (up to [`RECENT_EVENTS`]): tail reads are served from memory.
    recent: std::collections::VecDeque<StoredEvent>,
}

/// Events an open view keeps for tail reads.
const RECENT_EVENTS: usize = 256;

impl RunView {
    fn remember(&mut self, events: &[StoredEvent]) {
        self.remember_owned(
            events
                .iter()
                .skip(events.len().saturating_sub(RECENT_EVENTS))
                .cloned(),
        );
    }

    fn remember_owned(&mut self, events: impl IntoIterator<Item = StoredEvent>) {
        for e in events {
            if self.recent.len() == RECENT_EVENTS {
                self.recent.pop_front();
            }
            self.recent.push_back(e);
        }
    }
}

type ViewSlot = Arc<Mutex<Option<RunView>>>;

/// Open views kept in memory before idle ones are dropped.
const MAX_OPEN_VIEWS: usize = 4096;

#[derive(Debug)]
struct Inner {
    store: Arc<dyn JournalStore>,
    options: JournalOptions,
    views: StdMutex<HashMap<String, ViewSlot>>,
    watchers: StdMutex<HashMap<String, broadcast::Sender<Arc<Vec<StoredEvent>>>>>,
    ulids: StdMutex<ulid::Generator>,
    /// Background snapshot writes ([`Journal::flush`] waits for them).
    background: tokio_util::task::TaskTracker,
    /// The store's kind, for metrics labels.
    backend: &'static str,
}

/// The journal service. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Journal {
    inner: Arc<Inner>,
}

impl Journal {
    pub fn new(store: Arc<dyn JournalStore>, options: JournalOptions) -> Self {
        let backend = crate::metrics::backend_of(&store.describe());
        Self {
            inner: Arc::new(Inner {
                backend,
                store,
                options,
                views: StdMutex::new(HashMap::new()),
                watchers: StdMutex::new(HashMap::new()),
                ulids: StdMutex::new(ulid::Generator::new()),
                background: tokio_util::task::TaskTracker::new(),
            }),
        }
    }

    /// Waits for the snapshots being written in the background (on shutdown).
    pub async fn flush(&self) {
        self.inner.background.close();
        self.inner.background.wait().await;
        self.inner.background.reopen();
    }

    pub fn store(&self) -> &Arc<dyn JournalStore> {
        &self.inner.store
    }

    pub fn options(&self) -> &JournalOptions {
        &self.inner.options
    }

    /// Creates a run. `run.json` must be an object whose `runId` (when present) equals `run_id`.
    pub async fn create_run(&self, run_id: &str, files: RunFiles) -> Result<Head> {
        validate_id("run id", run_id)?;
        let Value::Object(run) = &files.run_json else {
            return Err(JournalError::invalid("run.json", "must be a JSON object"));
        };
        if let Some(id) = run.get("runId")
            && id.as_str() != Some(run_id)
        {
            return Err(JournalError::invalid(
                "run.json",
                format!("runId {id} does not match the run id `{run_id}`"),
            ));
        }
        let store = self.inner.store.clone();
        let id = run_id.to_owned();
        spawn_whole(async move { store.create_run(&id, &files).await }).await?;
        Ok(Head::empty())
    }

    /// `run.json` and `inputs.json` of a run.
    pub async fn run_files(&self, run_id: &str) -> Result<RunFiles> {
        validate_id("run id", run_id)?;
        self.inner.store.get_run(run_id).await
    }

    pub async fn get_run(&self, run_id: &str) -> Result<(RunFiles, Head)> {
        validate_id("run id", run_id)?;
        let files = self.inner.store.get_run(run_id).await?;
        let head = self.head(run_id).await?;
        Ok((files, head))
    }

    /// Events with `from <= seq <= to` (`to` = 0: up to the head), verified.
    pub async fn read(&self, run_id: &str, from: u64, to: u64) -> Result<Vec<StoredEvent>> {
        let read = self.read_inner(run_id, from, to).await;
        if let Err(e) = &read {
            crate::metrics::failed(self.inner.backend, "read", e);
        }
        read
    }

    async fn read_inner(&self, run_id: &str, from: u64, to: u64) -> Result<Vec<StoredEvent>> {
        validate_id("run id", run_id)?;
        let from = from.max(1);
        let to = (to > 0).then_some(to);
        if to.is_some_and(|t| t < from) {
            return Ok(Vec::new());
        }
        // A tail the open view still remembers is served from memory (after a refresh, so
        // other writers' events are included — unless the range ends at or before the view's
        // head: committed events never change, so there is nothing to look for).
        {
            let slot = self.slot(run_id);
            let mut guard = slot.lock().await;
            if let Some(known) = guard.as_ref().map(|v| v.chain.head.seq) {
                let refresh = to.is_none_or(|t| t > known);
                let view = self.current(run_id, &mut guard, refresh).await?;
                let head = view.chain.head.seq;
                let end = to.unwrap_or(head).min(head);
                if from > head {
                    return Ok(Vec::new());
                }
                if view.recent.front().is_some_and(|e| e.seq <= from) {
                    return Ok(view
                        .recent
                        .iter()
                        .filter(|e| e.seq >= from && e.seq <= end)
                        .cloned()
                        .collect());
                }
            }
        }
        let store = &self.inner.store;
        let start = match store.latest_snapshot(run_id, Some(from - 1)).await {
            Ok(Some(s)) => s.chain,
            Ok(None) => self.genesis(run_id),
            Err(e) => {
                tracing::warn!(run_id, error = %e, "unusable snapshot, reading from the start");
                self.genesis(run_id)
            }
        };
        let events = match store.load(run_id, &start, to).await {
            Ok(ev) => ev,
            Err(e) if start.head.seq > 0 && e.is_corruption() => {
                tracing::warn!(run_id, error = %e, "snapshot does not match the journal, reading from the start");
                store.load(run_id, &self.genesis(run_id), to).await?
            }
            Err(e) => return Err(e),
        };
        Ok(events.into_iter().filter(|e| e.seq >= from).collect())
    }

    /// The current head, as the store sees it now (includes other writers' appends).
    pub async fn head(&self, run_id: &str) -> Result<Head> {
        validate_id("run id", run_id)?;
        let hint = {
            let slot = self.slot(run_id);
            let guard = slot.lock().await;
            guard.as_ref().map(|v| v.chain.head.clone())
        };
        self.inner.store.head(run_id, hint.as_ref()).await
    }

    /// The effect index and head of a run, brought up to date.
    pub async fn index(&self, run_id: &str) -> Result<(Head, EffectIndex)> {
        validate_id("run id", run_id)?;
        let slot = self.slot(run_id);
        let mut guard = slot.lock().await;
        let view = self.current(run_id, &mut guard, true).await?;
        Ok((view.chain.head.clone(), view.index.clone()))
    }

    /// Runs `f` on the run's up-to-date head and effect index without copying the index (the
    /// engine reads a few records per iteration of runs with thousands of effects).
    pub async fn inspect<R>(
        &self,
        run_id: &str,
        f: impl FnOnce(&Head, &EffectIndex) -> R,
    ) -> Result<R> {
        validate_id("run id", run_id)?;
        let slot = self.slot(run_id);
        let mut guard = slot.lock().await;
        let view = self.current(run_id, &mut guard, true).await?;
        Ok(f(&view.chain.head, &view.index))
    }

    /// Like [`Journal::inspect`], without checking the store for other writers' events first
    /// (for reads right after an inspect or append of the same caller).
    pub async fn inspect_now<R>(
        &self,
        run_id: &str,
        f: impl FnOnce(&Head, &EffectIndex) -> R,
    ) -> Result<R> {
        validate_id("run id", run_id)?;
        let slot = self.slot(run_id);
        let mut guard = slot.lock().await;
        let view = self.current(run_id, &mut guard, false).await?;
        Ok(f(&view.chain.head, &view.index))
    }

    /// babysitter's state cache at the head: the stored one when fresh, else rebuilt and stored.
    /// Rebuilds the stored state cache from the run's head, naming why (babysitter's
    /// `rebuildReason`: `post_effect_resolution`, `post_completion`, `manual_halt`, …), and
    /// returns it. What a command that changed a run writes for the tools that read the cache.
    pub async fn rebuild_state_cache(&self, run_id: &str, reason: &str) -> Result<Value> {
        let now = now_iso();
        let doc = self
            .inspect(run_id, |h, idx| {
                state_cache::build(idx, h, &now, Some(reason))
            })
            .await?;
        self.inner
            .store
            .write_state_cache(run_id, Bytes::from(node_json::to_file_string(&doc)))
            .await?;
        Ok(doc)
    }

    pub async fn state(&self, run_id: &str) -> Result<RunState> {
        validate_id("run id", run_id)?;
        let slot = self.slot(run_id);
        let mut guard = slot.lock().await;
        let view = self.current(run_id, &mut guard, true).await?;
        let head = view.chain.head.clone();
        let stored = self.inner.store.read_state_cache(run_id).await?;
        let fresh = state_cache::freshness(stored.as_deref(), &head);
        let (state_json, rebuild_reason) = match (fresh.rebuild_reason(), stored) {
            (None, Some(bytes)) => (bytes, None),
            (reason, _) => {
                let reason = reason.unwrap_or("missing_cache");
                let doc = state_cache::build(&view.index, &head, &now_iso(), Some(reason));
                let bytes = Bytes::from(node_json::to_file_string(&doc));
                self.inner
                    .store
                    .write_state_cache(run_id, bytes.clone())
                    .await?;
                (bytes, Some(reason))
            }
        };
        Ok(RunState {
            head,
            state_json,
            rebuild_reason,
            snapshot_seq: view.snapshot_seq,
        })
    }

    /// Writes a snapshot at the current head; returns its seq.
    pub async fn snapshot(&self, run_id: &str) -> Result<u64> {
        validate_id("run id", run_id)?;
        let slot = self.slot(run_id);
        let mut guard = slot.lock().await;
        let view = self.current(run_id, &mut guard, true).await?;
        let snapshot = snapshot_of(run_id, view);
        self.inner.store.put_snapshot(run_id, &snapshot).await?;
        view.since_snapshot = 0;
        view.snapshot_seq = snapshot.seq();
        Ok(snapshot.seq())
    }

    pub async fn list_runs(
        &self,
        prefix: &str,
        page_token: Option<&str>,
        page_size: usize,
    ) -> Result<(Vec<String>, Option<String>)> {
        let page_size = page_size.clamp(1, 1000);
        let mut ids = self
            .inner
            .store
            .list_runs(prefix, page_token, page_size + 1)
            .await?;
        let next = if ids.len() > page_size {
            ids.truncate(page_size);
            ids.last().cloned()
        } else {
            None
        };
        Ok((ids, next))
    }

    pub async fn put_blob(&self, run_id: &str, content: Bytes) -> Result<BlobRef> {
        validate_id("run id", run_id)?;
        let store = self.inner.store.clone();
        let run_id = run_id.to_owned();
        spawn_whole(async move { store.put_blob(&run_id, content).await }).await
    }

    pub async fn get_blob(&self, run_id: &str, blob: &BlobRef) -> Result<Bytes> {
        validate_id("run id", run_id)?;
        self.inner.store.get_blob(run_id, blob).await
    }

    async fn store_run_files(&self, run_id: &str, files: Vec<(RunFile, Bytes)>) -> Result<()> {
        let store = self.inner.store.clone();
        let run_id = run_id.to_owned();
        spawn_whole(async move { store.put_run_files_for_commit(&run_id, files).await }).await
    }

    pub async fn get_run_file(&self, run_id: &str, file: &RunFile) -> Result<Bytes> {
        validate_id("run id", run_id)?;
        self.inner.store.get_run_file(run_id, file).await
    }

    /// [`Journal::get_run_file`] for several files at once, in order (a backend may read them
    /// in one go); the outer error concerns the whole run.
    pub async fn get_run_files(
        &self,
        run_id: &str,
        files: &[RunFile],
    ) -> Result<Vec<Result<Bytes>>> {
        validate_id("run id", run_id)?;
        self.inner.store.get_run_files(run_id, files).await
    }

    /// Events from `from_seq` on, then each new one as it is committed (by this process, or by
    /// another one: the store is polled). Ends when the receiver is dropped or on an error
    /// (sent as the last item).
    pub fn watch(&self, run_id: &str, from_seq: u64) -> ReceiverStream<Result<Vec<StoredEvent>>> {
        let (tx, rx) = mpsc::channel(16);
        let this = self.clone();
        let run_id = run_id.to_owned();
        tokio::spawn(async move {
            if let Err(e) = this.watch_loop(&run_id, from_seq.max(1), &tx).await {
                let _ = tx.send(Err(e)).await;
            }
        });
        ReceiverStream::new(rx)
    }

    async fn watch_loop(
        &self,
        run_id: &str,
        mut next: u64,
        tx: &mpsc::Sender<Result<Vec<StoredEvent>>>,
    ) -> Result<()> {
        validate_id("run id", run_id)?;
        let mut live = self.subscribe(run_id);
        let mut known_head = 0u64;
        // The last delivered event: a commit boundary, so object stores list only after it.
        let mut delivered: Option<Head> = None;
        loop {
            let head = self.inner.store.head(run_id, delivered.as_ref()).await?;
            if head.seq >= next && head.seq != known_head {
                let events = self.read(run_id, next, head.seq).await?;
                if let Some(last) = events.last() {
                    next = last.seq + 1;
                    delivered = Some(Head {
                        seq: last.seq,
                        ulid: last.ulid.clone(),
                    });
                    if tx.send(Ok(events)).await.is_err() {
                        return Ok(());
                    }
                }
            }
            known_head = head.seq;
            let poll = tokio::time::sleep(self.inner.options.watch_poll_interval);
            tokio::select! {
                _ = tx.closed() => return Ok(()),
                _ = poll => {}
                msg = live.recv() => match msg {
                    Ok(batch) => {
                        let fits = batch.first().is_some_and(|e| e.seq <= next) && batch.last().is_some_and(|e| e.seq >= next);
                        if fits {
                            let events: Vec<_> = batch.iter().filter(|e| e.seq >= next).cloned().collect();
                            if let Some(last) = events.last() {
                                next = last.seq + 1;
                                known_head = last.seq;
                                delivered = Some(Head { seq: last.seq, ulid: last.ulid.clone() });
                            }
                            if tx.send(Ok(events)).await.is_err() {
                                return Ok(());
                            }
                        } else {
                            known_head = 0; // out of step: re-read from the store
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => known_head = 0,
                    Err(broadcast::error::RecvError::Closed) => live = self.subscribe(run_id),
                },
            }
        }
    }

    fn subscribe(&self, run_id: &str) -> broadcast::Receiver<Arc<Vec<StoredEvent>>> {
        let mut map = self
            .inner
            .watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.entry(run_id.to_owned())
            .or_insert_with(|| broadcast::channel(256).0)
            .subscribe()
    }

    /// Whether anyone watches `run_id` (a lock and a lookup: no copy of the events for nobody).
    fn watched(&self, run_id: &str) -> bool {
        let map = self
            .inner
            .watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        map.contains_key(run_id)
    }

    fn notify(&self, run_id: &str, events: &[StoredEvent]) {
        let mut map = self
            .inner
            .watchers
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(tx) = map.get(run_id) {
            if tx.receiver_count() == 0 {
                map.remove(run_id);
            } else {
                let _ = tx.send(Arc::new(events.to_vec()));
            }
        }
    }

    fn genesis(&self, run_id: &str) -> ChainCheck {
        ChainCheck::new(run_id, self.inner.store.layout() == Layout::Object)
    }

    fn slot(&self, run_id: &str) -> ViewSlot {
        let mut views = self.inner.views.lock().unwrap_or_else(|p| p.into_inner());
        if views.len() >= MAX_OPEN_VIEWS && !views.contains_key(run_id) {
            // Forget idle views (no operation holds them); they reopen from snapshot + tail.
            views.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        views.entry(run_id.to_owned()).or_default().clone()
    }

    /// The run's view, opened (latest snapshot + tail) if it is not in memory, and brought up
    /// to the store's head when `refresh`. On any error the view is dropped, so a partly
    /// applied tail is never used.
    async fn current<'a>(
        &self,
        run_id: &str,
        guard: &'a mut Option<RunView>,
        refresh: bool,
    ) -> Result<&'a mut RunView> {
        if guard.is_none() {
            *guard = Some(self.open(run_id).await?);
        } else if refresh {
            let view = guard.as_mut().ok_or(JournalError::ShuttingDown)?;
            if let Err(e) = self.refresh(run_id, view).await {
                *guard = None;
                if !e.is_corruption() {
                    return Err(e);
                }
                // The store no longer holds what the view was built from (an event file changed
                // under a long-lived reader): judged afresh, as a reader opening the run would,
                // which reports damage exactly as it does.
                tracing::debug!(run_id, error = %e, "the journal changed under its open view, reopening");
                *guard = Some(self.open(run_id).await?);
            }
        }
        guard.as_mut().ok_or(JournalError::ShuttingDown)
    }

    async fn open(&self, run_id: &str) -> Result<RunView> {
        let store = &self.inner.store;
        let snapshot = match store.latest_snapshot(run_id, None).await {
            Ok(s) => s,
            Err(e @ JournalError::RunNotFound { .. }) => return Err(e),
            Err(e) => {
                tracing::warn!(run_id, error = %e, "unusable snapshot, opening from the start");
                None
            }
        };
        if let Some(s) = snapshot
            && s.chain.linked == (store.layout() == Layout::Object)
        {
            let mut view = RunView {
                chain: s.chain.clone(),
                index: s.index,
                since_snapshot: 0,
                snapshot_seq: s.chain.head.seq,
                recent: Default::default(),
            };
            match self.refresh(run_id, &mut view).await {
                Ok(()) => return Ok(view),
                Err(e) if e.is_corruption() => {
                    tracing::warn!(run_id, error = %e, "snapshot does not match the journal, opening from the start");
                }
                Err(e) => return Err(e),
            }
        }
        let mut view = RunView {
            chain: self.genesis(run_id),
            index: EffectIndex::default(),
            since_snapshot: 0,
            snapshot_seq: 0,
            recent: Default::default(),
        };
        self.refresh(run_id, &mut view).await?;
        Ok(view)
    }

    /// Reads and folds whatever was committed after the view's head.
    async fn refresh(&self, run_id: &str, view: &mut RunView) -> Result<()> {
        let events = self.inner.store.load(run_id, &view.chain, None).await?;
        for e in &events {
            let at = || Location::file(run_id, e.seq, e.file_name());
            view.index.apply(e, &at)?;
            view.chain.push(e, &at)?;
        }
        view.since_snapshot += events.len() as u64;
        view.remember(&events);
        Ok(())
    }
}

fn snapshot_of(run_id: &str, view: &RunView) -> Snapshot {
    Snapshot {
        format: SNAPSHOT_FORMAT.into(),
        run_id: run_id.to_owned(),
        chain: view.chain.clone(),
        index: view.index.clone(),
    }
}
