//! One run directory as the commands see it: its journal and engine (filesystem layout, the runs
//! root being the directory's parent), `run.json`, the state cache, and the reference's
//! serialisations of events, effect records, iteration metadata and the completion proof.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use babysitter_common::EnvMap;
use babysitter_engine::{Engine, EngineOptions};
use babysitter_journal::Head;
use babysitter_journal::fs::FsRuntime;
use babysitter_journal::index::{EffectIndex, EffectRecord};
use babysitter_journal::{EventType, Journal, NewEvent, StoredEvent};
use serde_json::{Map, Value, json};
use sha2::Digest as _;

use super::paths::UserFiles;

use super::output::io_message;
use super::paths;

/// Engine options for a process that drives one run once (a CLI call): the JS runs on the
/// calling thread (no JS thread to start and hand the work to) and nothing is kept warm.
pub fn one_shot_engine(root: &Path) -> EngineOptions {
    let mut opts = EngineOptions::new(root);
    opts.js_placement = babysitter_engine::JsPlacement::CallingThread;
    opts.js_threads = 1;
    opts.cached_runs = 1;
    opts.warm = false;
    opts
}

tokio::task_local! {
    /// The filesystem journal runtime of the command being run ([`with_fs`]).
    static FS: FsRuntime;
}

/// Runs `command` with `fs` as the runtime its runs' stores and holds share ([`fs_runtime`]):
/// the process's for a local call, the server's for a command the warm server runs.
pub async fn with_fs<T>(fs: FsRuntime, command: impl Future<Output = T>) -> T {
    FS.scope(fs, command).await
}

/// The runtime of the command being run: [`Run::open`] puts the run's store on it and
/// [`super::lock`] holds runs through it, so the command's own appends go ahead under its hold
/// (a `flock` belongs to one open file description: a store of another runtime would wait for
/// the hold like another process). Called outside a command's scope (a task spawned from a
/// command, a test that did not enter [`with_fs`]) it is an error, not a runtime of its own: that
/// runtime's holds would not be the command's, and its store would wait on the command's hold.
pub fn fs_runtime() -> Result<FsRuntime, String> {
    FS.try_with(FsRuntime::clone).map_err(|_| {
        "internal error: the journal runtime was used outside a command (run it under \
         run_dir::with_fs)"
            .to_owned()
    })
}

/// An opened run: `<root>/<id>` with what it is read from.
#[derive(Debug, Clone)]
pub struct Run {
    pub dir: PathBuf,
    pub root: PathBuf,
    pub id: String,
    source: Source,
}

/// What a [`Run`] reads from and writes to.
#[derive(Debug, Clone)]
enum Source {
    /// The run directory's filesystem journal: this process's, or the warm server's together
    /// with its warm engine (`warm_engine`).
    Disk {
        journal: Journal,
        warm_engine: Option<Engine>,
    },
    /// A run on an orchestrator as it stood when the command opened it (read-only: it changes
    /// through the command's [`super::client::RunClient`]).
    Remote(Arc<Fetched>),
}

/// A run read from an orchestrator: its `run.json`, every event (checksums verified), the
/// effect index built from them and the state cache its journal keeps.
#[derive(Debug)]
pub struct Fetched {
    pub run_json: Value,
    pub events: Vec<StoredEvent>,
    pub head: Head,
    pub index: EffectIndex,
    /// The server's stored state cache (`None` when its journal holds none).
    pub state: Option<Value>,
    /// Where it lives (`the orchestrator at URL`), for the refusal of a local-only operation.
    pub home: String,
}

impl Run {
    /// Opens the run at `dir` (which need not exist yet). Its last path segment is the run id,
    /// which must be a valid id (`[A-Za-z0-9._-]`, at most 128 characters).
    pub fn open(dir: &Path) -> Result<Run, String> {
        let (dir, root, id) = Self::locate(dir)?;
        // Inside the warm server: its journal (run indexes kept in memory) and warm engine.
        if let Some((journal, engine)) = super::warm::context::shared(&root, &id, &dir) {
            return Ok(Run {
                dir,
                root,
                id,
                source: Source::Disk {
                    journal,
                    warm_engine: Some(engine),
                },
            });
        }
        // One command per process: file I/O in place (see FsStore::inline_io).
        let journal = Journal::new(
            Arc::new(fs_runtime()?.store(&root).inline_io()),
            crate::journal_options::for_cli(),
        );
        Ok(Run {
            dir,
            root,
            id,
            source: Source::Disk {
                journal,
                warm_engine: None,
            },
        })
    }

    /// A run read from an orchestrator, named by the directory a command resolved for it.
    pub fn fetched(dir: &Path, fetched: Fetched) -> Result<Run, String> {
        let (dir, root, id) = Self::locate(dir)?;
        Ok(Run {
            dir,
            root,
            id,
            source: Source::Remote(Arc::new(fetched)),
        })
    }

    /// `dir` normalised, its runs root and its run id (checked).
    fn locate(dir: &Path) -> Result<(PathBuf, PathBuf, String), String> {
        let dir = paths::normalize(dir);
        let id = dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .ok_or_else(|| format!("{} is not a run directory", dir.display()))?;
        babysitter_journal::validate_id("run id", &id).map_err(|e| e.to_string())?;
        let root = dir
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("/"));
        Ok((dir, root, id))
    }

    /// Whether the run's files are on this machine (not a run read from an orchestrator).
    pub fn on_disk(&self) -> bool {
        matches!(self.source, Source::Disk { .. })
    }

    /// The run's journal; a run read from an orchestrator has none here (the operation is
    /// refused, naming where the run lives).
    pub fn journal(&self) -> anyhow::Result<&Journal> {
        match &self.source {
            Source::Disk { journal, .. } => Ok(journal),
            Source::Remote(f) => Err(anyhow::anyhow!(
                "run {} lives on {}: this operation needs its run directory on this machine",
                self.id,
                f.home
            )),
        }
    }

    /// `run.json`, with Node's wording for a missing or unreadable file.
    pub fn metadata(&self) -> Result<Value, String> {
        if let Source::Remote(f) = &self.source {
            return Ok(f.run_json.clone());
        }
        let path = self.dir.join("run.json");
        let bytes = std::fs::read(&path).map_err(|e| io_message("open", &path, &e))?;
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{} is not valid JSON: {e}", path.display()))?;
        if !v.is_object() {
            return Err(format!("{} is not a JSON object", path.display()));
        }
        Ok(v)
    }

    /// An engine over this run's runs root: the warm server's (kept per client's user files,
    /// see `warm::context::shared`), or one for this call only, with `user`'s (`ctx.log` lines to its log
    /// directory, breakpoint advice from its rules; none when `None`).
    pub fn engine(&self, user: Option<UserFiles>) -> anyhow::Result<Engine> {
        if let Source::Disk {
            warm_engine: Some(e),
            ..
        } = &self.source
        {
            return Ok(e.clone());
        }
        let journal = self.journal()?.clone();
        let mut opts = one_shot_engine(&self.root);
        if let Some(u) = user {
            u.apply_to(&mut opts);
        }
        Ok(Engine::new(journal, opts)?)
    }

    /// Every event, in order.
    pub async fn events(&self) -> anyhow::Result<Vec<StoredEvent>> {
        match &self.source {
            Source::Remote(f) => Ok(f.events.clone()),
            Source::Disk { journal, .. } => Ok(journal.read(&self.id, 1, 0).await?),
        }
    }

    /// One event by sequence number.
    pub async fn event(&self, seq: u64) -> anyhow::Result<Option<StoredEvent>> {
        if seq == 0 {
            return Ok(None);
        }
        match &self.source {
            Source::Remote(f) => Ok(f.events.iter().find(|e| e.seq == seq).cloned()),
            Source::Disk { journal, .. } => {
                Ok(journal.read(&self.id, seq, seq).await?.into_iter().next())
            }
        }
    }

    /// `state/state.json` as stored (`None` when absent), without rebuilding it (for a run on
    /// an orchestrator, as its journal stores it).
    pub fn read_state_cache(&self) -> Result<Option<Value>, String> {
        if let Source::Remote(f) = &self.source {
            return Ok(f.state.clone());
        }
        let path = self.dir.join("state").join("state.json");
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| format!("{} is not valid JSON: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_message("open", &path, &e)),
        }
    }

    /// Rebuilds `state/state.json` from the journal at its head, naming why (the reference's
    /// `rebuildReason`: `post_effect_resolution`, `post_completion`, `cli_manual`, …).
    pub async fn write_state_cache(&self, reason: &str) -> anyhow::Result<Value> {
        Ok(self
            .journal()?
            .rebuild_state_cache(&self.id, reason)
            .await?)
    }

    /// Brings `state/state.json` up to date after a command whose output does not depend on it
    /// (`reason`: rebuild with the reference's reason; `None`: only if it no longer matches the
    /// journal). A local call does it now; inside the warm server it runs right after the
    /// client has its answer, before the server takes the next command (the file is a cache:
    /// every reader checks its `journalHead`). A failure is a warning on stderr (`cmd` names
    /// the command), never the command's failure.
    pub async fn settle_state_cache(&self, cmd: &'static str, reason: Option<&'static str>) {
        if matches!(self.source, Source::Remote(_)) {
            return; // the orchestrator's journal keeps its own
        }
        let run = self.clone();
        let work = async move {
            let done = match reason {
                Some(reason) => run.write_state_cache(reason).await.map(drop),
                None => match run.journal() {
                    Ok(j) => j.state(&run.id).await.map(drop).map_err(Into::into),
                    Err(e) => Err(e),
                },
            };
            if let Err(e) = done {
                errln!("[{cmd}] warning: state cache not updated: {e:#}");
            }
        };
        if let Err(work) = super::warm::context::defer(Box::pin(work)) {
            work.await;
        }
    }

    /// Head and a closure over the effect index.
    pub async fn inspect<R>(&self, f: impl FnOnce(&Head, &EffectIndex) -> R) -> anyhow::Result<R> {
        match &self.source {
            Source::Remote(fetched) => Ok(f(&fetched.head, &fetched.index)),
            Source::Disk { journal, .. } => Ok(journal.inspect(&self.id, f).await?),
        }
    }

    /// Appends one CLI-written event at the head, with `harness` / `sessionId` appended to its
    /// data the way babysitter's `appendEvent` does (F5).
    pub async fn append(
        &self,
        kind: EventType,
        data: Map<String, Value>,
        run_json: &Value,
        env: &EnvMap,
    ) -> anyhow::Result<StoredEvent> {
        let journal = self.journal()?;
        let head = journal.head(&self.id).await?;
        let ev = new_event(kind, data, run_json, env);
        let mut committed = journal.append(&self.id, head.seq + 1, vec![ev]).await?;
        committed
            .pop()
            .ok_or_else(|| anyhow::anyhow!("the journal committed no event"))
    }
}

/// A 6.0.0 event stamped now, with `harness` (from `run.json`) and `sessionId` (the ambient
/// `AGENT_SESSION_ID`) added after the caller's keys when absent.
pub fn new_event(
    kind: EventType,
    mut data: Map<String, Value>,
    run_json: &Value,
    env: &EnvMap,
) -> NewEvent {
    if let Some(h) = run_json
        .get("harness")
        .and_then(Value::as_str)
        .filter(|h| !h.trim().is_empty())
        && !data.contains_key("harness")
    {
        data.insert("harness".into(), json!(h));
    }
    if let Some(s) = env.get_non_empty("AGENT_SESSION_ID")
        && !data.contains_key("sessionId")
    {
        data.insert("sessionId".into(), json!(s));
    }
    let mut ev = NewEvent::new(kind, Value::Object(data));
    ev.recorded_at = Some(babysitter_journal::journal::now_iso());
    ev
}

/// `{seq, ulid, type, recordedAt, filename, path, data}` (`serializeJournalEvent`).
pub fn serialize_event(e: &StoredEvent) -> Value {
    let file = e.file_name();
    let mut data = e.body.data.clone();
    // `ensureIterationMetadata`: an object-valued `data.iteration` always carries `metadata`.
    if let Some(Value::Object(it)) = data.get_mut("iteration")
        && it.get("metadata").is_none()
    {
        it.insert("metadata".into(), Value::Null);
    }
    json!({
        "seq": e.seq,
        "ulid": e.ulid,
        "type": e.body.kind.as_str(),
        "recordedAt": e.body.recorded_at,
        "filename": file,
        "path": format!("journal/{file}"),
        "data": data,
    })
}

/// `[run:…] … last=<TYPE>#<seq6> <recordedAt>` summary.
pub fn event_summary(e: Option<&StoredEvent>) -> String {
    match e {
        None => "none".into(),
        Some(e) => format!(
            "{}#{:06} {}",
            e.body.kind.as_str(),
            e.seq,
            e.body.recorded_at
        ),
    }
}

/// A `task:list` entry (`toTaskListEntry`), keys in the reference's order, undefined ones left
/// out, refs run-relative POSIX.
pub fn task_entry(r: &EffectRecord, run_dir: &Path) -> Value {
    let mut m = Map::new();
    m.insert("effectId".into(), json!(r.effect_id));
    m.insert("taskId".into(), json!(r.task_id));
    m.insert("stepId".into(), json!(r.step_id));
    m.insert("status".into(), json!(r.status.as_str()));
    if let Some(k) = &r.kind {
        m.insert("kind".into(), json!(k));
    }
    if let Some(l) = &r.label {
        m.insert("label".into(), json!(l));
    }
    if let Some(l) = &r.labels {
        m.insert("labels".into(), json!(l));
    }
    let default_def = format!("tasks/{}/task.json", r.effect_id);
    let refs = [
        (
            "taskDefRef",
            Some(r.task_def_ref.as_deref().unwrap_or(&default_def)),
        ),
        ("inputsRef", r.inputs_ref.as_deref()),
        ("resultRef", r.result_ref.as_deref()),
        ("stdoutRef", r.stdout_ref.as_deref()),
        ("stderrRef", r.stderr_ref.as_deref()),
    ];
    for (k, v) in refs {
        m.insert(
            k.into(),
            paths::normalize_ref(run_dir, v).map_or(Value::Null, Value::String),
        );
    }
    if let Some(t) = &r.requested_at {
        m.insert("requestedAt".into(), json!(t));
    }
    if let Some(t) = &r.resolved_at {
        m.insert("resolvedAt".into(), json!(t));
    }
    Value::Object(m)
}

/// Pending effects counted per kind, kinds in `localeCompare` order.
pub fn pending_by_kind(idx: &EffectIndex) -> Map<String, Value> {
    let mut counts: Vec<(String, u64)> = Vec::new();
    for r in idx.pending() {
        let k = r.kind.clone().unwrap_or_else(|| "unknown".into());
        match counts.iter_mut().find(|(kk, _)| *kk == k) {
            Some((_, n)) => *n += 1,
            None => counts.push((k, 1)),
        }
    }
    counts.sort_by(|a, b| babysitter_engine::identity::locale_compare(&a.0, &b.0));
    counts.into_iter().map(|(k, n)| (k, json!(n))).collect()
}

/// The reference's `mergeMetadataSources` + `formatIterationMetadata` for commands that read the
/// stored cache: pending counts (live when given, else the cache's), then the cache's
/// `stateVersion`, `journalHead` and, when it names a rebuild reason, `stateRebuilt`.
pub fn merged_metadata(
    snapshot: Option<&Value>,
    pending_override: Option<Map<String, Value>>,
) -> Option<Value> {
    let mut m = Map::new();
    match pending_override {
        Some(p) => {
            m.insert("pendingEffectsByKind".into(), Value::Object(p));
        }
        None => {
            if let Some(p) = snapshot.and_then(|s| s.get("pendingEffectsByKind")) {
                m.insert("pendingEffectsByKind".into(), p.clone());
            }
        }
    }
    if let Some(s) = snapshot {
        if let Some(v) = s.get("stateVersion") {
            m.insert("stateVersion".into(), v.clone());
        }
        m.insert(
            "journalHead".into(),
            s.get("journalHead").cloned().unwrap_or(Value::Null),
        );
        if let Some(r) = s
            .get("rebuildReason")
            .and_then(Value::as_str)
            .filter(|r| !r.is_empty())
        {
            m.insert("stateRebuilt".into(), json!(true));
            m.insert("stateRebuildReason".into(), json!(r));
        }
    }
    (!m.is_empty()).then_some(Value::Object(m))
}

/// Metadata of a cache the command has just rebuilt (`run:halt`, `run:rebuild-state`).
pub fn rebuilt_metadata(doc: &Value) -> Value {
    let mut m = Map::new();
    m.insert(
        "pendingEffectsByKind".into(),
        doc.get("pendingEffectsByKind")
            .cloned()
            .unwrap_or(json!({})),
    );
    m.insert(
        "stateVersion".into(),
        doc.get("stateVersion").cloned().unwrap_or(json!(0)),
    );
    m.insert(
        "journalHead".into(),
        doc.get("journalHead").cloned().unwrap_or(Value::Null),
    );
    m.insert("stateRebuilt".into(), json!(true));
    if let Some(r) = doc.get("rebuildReason").filter(|r| !r.is_null()) {
        m.insert("stateRebuildReason".into(), r.clone());
    }
    Value::Object(m)
}

/// The text form of iteration metadata (`formatIterationMetadata`).
pub fn metadata_text(meta: Option<&Value>) -> Vec<String> {
    let mut parts = Vec::new();
    let Some(m) = meta else { return parts };
    if let Some(v) = m.get("stateVersion") {
        parts.push(format!("stateVersion={v}"));
    }
    if let Some(h) = m.get("journalHead").filter(|h| h.is_object())
        && let Some(seq) = h.get("seq").and_then(Value::as_u64)
    {
        parts.push(format!("journalHead=#{seq:06}"));
        if let Some(u) = h.get("ulid").and_then(Value::as_str) {
            parts.push(format!("journalHead.ulid={u}"));
        }
    }
    if m.get("stateRebuilt").and_then(Value::as_bool) == Some(true) {
        let reason = m
            .get("stateRebuildReason")
            .and_then(Value::as_str)
            .map(|r| format!("({r})"))
            .unwrap_or_default();
        parts.push(format!("stateRebuilt=true{reason}"));
    }
    if let Some(Value::Object(p)) = m.get("pendingEffectsByKind") {
        let mut entries: Vec<(&String, u64)> = p
            .iter()
            .map(|(k, v)| (k, v.as_u64().unwrap_or(0)))
            .collect();
        entries.sort_by(|a, b| babysitter_engine::identity::locale_compare(a.0, b.0));
        parts.push(format!(
            "pending[total]={}",
            entries.iter().map(|(_, n)| n).sum::<u64>()
        ));
        for (k, n) in entries {
            parts.push(format!("pending[{k}]={n}"));
        }
    }
    parts
}

/// SHA-256 hex of a file's bytes (`processCodeHash`).
pub fn hash_file(path: &Path) -> Option<String> {
    std::fs::read(path)
        .ok()
        .map(|b| hex::encode(sha2::Sha256::digest(&b)))
}
