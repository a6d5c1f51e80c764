//! `babysitter observe`: runs in local `.a5c/runs` directories (babysitter's layout), several
//! projects at once, read through the same filesystem journal the CLI writes with.
//!
//! Discovery walks the given folders once for `.a5c/runs` directories (skipping `node_modules`,
//! `.git` and `target`); after that nothing polls. A `notify` watcher per runs directory names
//! the run whose files changed (the first path component under the runs directory), and only
//! that run is read again. A run whose journal does not verify stays on the board, marked
//! corrupt.
//!
//! Read-only, except that a breakpoint may be approved when the caller provides a
//! [`LocalResolver`]: the CLI resolves one the way `task:post` does (under the run's lock, the
//! same result file and `EFFECT_RESOLVED`), and the harness session driving the run picks the
//! decision up at its next iteration.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use babysitter_common::auth::Principal;
use babysitter_journal::fs::FsStore;
use babysitter_journal::{Journal, JournalOptions};
use notify::Watcher as _;
use serde_json::Value;
use tokio::sync::broadcast;

use crate::model::{Digest, millis_of};
use crate::source::{Action, Capabilities, Result, Source, SourceError};

/// How deep discovery looks for `.a5c/runs` under each folder given.
const MAX_DEPTH: usize = 6;
/// Runs read at once while the board is built.
const READ_AHEAD: usize = 16;

/// Approves or rejects a breakpoint of a local run (the CLI's `task:post`).
#[async_trait::async_trait]
pub trait LocalResolver: Send + Sync {
    async fn resolve(
        &self,
        run_dir: &Path,
        effect_id: &str,
        value: Value,
    ) -> std::result::Result<(), String>;
}

struct Root {
    dir: PathBuf,
    project: String,
    journal: Journal,
}

pub struct LocalSource {
    roots: Vec<Root>,
    /// Which root holds each run seen.
    where_: Mutex<HashMap<String, usize>>,
    changes: broadcast::Sender<Arc<str>>,
    resolver: Option<Arc<dyn LocalResolver>>,
    _watchers: Vec<notify::RecommendedWatcher>,
}

/// The `.a5c/runs` directories under `dirs` (a folder that is itself a runs directory counts).
pub fn discover(dirs: &[PathBuf]) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack: Vec<(PathBuf, usize)> = dirs.iter().map(|d| (d.clone(), 0)).collect();
    while let Some((dir, depth)) = stack.pop() {
        if dir.ends_with(".a5c/runs") {
            found.push(dir);
            continue;
        }
        let runs = dir.join(".a5c").join("runs");
        if runs.is_dir() {
            found.push(runs);
        }
        if depth >= MAX_DEPTH {
            continue;
        }
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let skip = matches!(
                name.to_str(),
                Some("node_modules" | ".git" | "target" | ".a5c")
            );
            if !skip && e.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((e.path(), depth + 1));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

impl LocalSource {
    /// Watches the runs directories `roots` (see [`discover`]).
    pub fn new(roots: Vec<PathBuf>, resolver: Option<Arc<dyn LocalResolver>>) -> Result<Self> {
        let (changes, _) = broadcast::channel(4096);
        let mut watchers = Vec::new();
        let mut out = Vec::new();
        for dir in roots {
            let project = dir
                .parent()
                .and_then(Path::parent)
                .and_then(Path::file_name)
                .map_or_else(
                    || dir.display().to_string(),
                    |n| n.to_string_lossy().into_owned(),
                );
            let tx = changes.clone();
            let base = dir.clone();
            let mut watcher =
                notify::recommended_watcher(move |ev: notify::Result<notify::Event>| {
                    let Ok(ev) = ev else { return };
                    let mut last: Option<String> = None;
                    for p in ev.paths {
                        let id = p
                            .strip_prefix(&base)
                            .ok()
                            .and_then(|r| r.components().next())
                            .and_then(|c| c.as_os_str().to_str())
                            .map(str::to_owned);
                        if let Some(id) = id
                            && last.as_deref() != Some(id.as_str())
                        {
                            let _ = tx.send(Arc::from(id.as_str()));
                            last = Some(id);
                        }
                    }
                })
                .map_err(|e| {
                    SourceError::Unavailable(format!("cannot watch {}: {e}", dir.display()))
                })?;
            watcher
                .watch(&dir, notify::RecursiveMode::Recursive)
                .map_err(|e| {
                    SourceError::Unavailable(format!("cannot watch {}: {e}", dir.display()))
                })?;
            watchers.push(watcher);
            let store = FsStore::new(dir.clone());
            out.push(Root {
                journal: Journal::new(Arc::new(store), JournalOptions::default()),
                dir,
                project,
            });
        }
        Ok(Self {
            roots: out,
            where_: Mutex::default(),
            changes,
            resolver,
            _watchers: watchers,
        })
    }

    fn root_of(&self, run_id: &str) -> Option<&Root> {
        let known = self
            .where_
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run_id)
            .copied();
        match known {
            Some(i) => self.roots.get(i),
            None => {
                let i = self
                    .roots
                    .iter()
                    .position(|r| r.dir.join(run_id).join("run.json").is_file())?;
                self.where_
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(run_id.to_owned(), i);
                self.roots.get(i)
            }
        }
    }

    /// A local run's digest, from its run.json and journal.
    async fn digest_in(root: &Root, run_id: &str) -> Result<Option<Digest>> {
        let journal = &root.journal;
        let files = match journal.run_files(run_id).await {
            Ok(f) => f,
            Err(babysitter_journal::JournalError::RunNotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let rj = &files.run_json;
        let s = |k: &str| {
            rj.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        let labels = rj
            .get("labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default();
        let mut d = Digest {
            run_id: run_id.to_owned(),
            namespace: "local".into(),
            project: root.project.clone(),
            process_id: s("processId"),
            labels,
            status: "created".into(),
            status_reason: String::new(),
            pending: Default::default(),
            created_at: Some(s("createdAt")).filter(|c| !c.is_empty()),
            last_activity_ms: millis_of(&s("createdAt")),
            head_seq: 0,
            corrupt: false,
            bucket: None,
        };
        let v = crate::detail::verified(journal, run_id).await?;
        d.corrupt = v.corrupt.is_some();
        d.head_seq = v.head;
        if let Some(last) = v.events.last() {
            d.last_activity_ms = millis_of(&last.body.recorded_at).or(d.last_activity_ms);
        }
        let index = match journal.index(run_id).await {
            Ok((_, i)) => i,
            Err(_) => return Ok(Some(d)),
        };
        for r in index.pending() {
            *d.pending
                .entry(r.kind.clone().unwrap_or_default())
                .or_default() += 1;
        }
        let terminal = v
            .events
            .iter()
            .rev()
            .find_map(|e| babysitter_journal_status(e.body.kind.as_str(), &e.body.data));
        d.status = match terminal {
            Some(t) => t.into(),
            None if d.pending.is_empty() && d.head_seq <= 1 => "created".into(),
            None => "waiting".into(),
        };
        Ok(Some(d))
    }
}

/// A run's status from a terminal lifecycle event (the orchestrator's rule: a `RUN_FAILED`
/// marked `cancelled` is a cancellation).
fn babysitter_journal_status(kind: &str, data: &Value) -> Option<&'static str> {
    match kind {
        "RUN_COMPLETED" => Some("completed"),
        "RUN_HALTED" => Some("halted"),
        "RUN_FAILED" if data.get("cancelled") == Some(&Value::Bool(true)) => Some("cancelled"),
        "RUN_FAILED" => Some("failed"),
        _ => None,
    }
}

#[async_trait::async_trait]
impl Source for LocalSource {
    async fn runs(&self) -> Result<Vec<Digest>> {
        use futures::StreamExt as _;
        let mut found = Vec::new();
        for (i, root) in self.roots.iter().enumerate() {
            let Ok(entries) = std::fs::read_dir(&root.dir) else {
                continue;
            };
            for e in entries.flatten() {
                let Some(id) = e.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                if e.path().join("run.json").is_file() {
                    found.push((i, id));
                }
            }
        }
        self.where_
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(found.iter().map(|(i, id)| (id.clone(), *i)));
        // Several runs read at once: each read waits on the file system more than on a core.
        let reads = futures::stream::iter(found).map(|(i, id)| async move {
            let read = Self::digest_in(&self.roots[i], &id).await;
            (id, read)
        });
        Ok(reads
            .buffer_unordered(READ_AHEAD)
            .filter_map(|(id, read)| async move {
                read.inspect_err(|e| tracing::warn!(run_id = %id, error = %e, "observe: a run could not be read"))
                    .ok()
                    .flatten()
            })
            .collect()
            .await)
    }

    async fn run(&self, run_id: &str) -> Result<Option<Digest>> {
        match self.root_of(run_id) {
            Some(root) => Self::digest_in(root, run_id).await,
            None => Ok(None),
        }
    }

    fn changes(&self) -> broadcast::Receiver<Arc<str>> {
        self.changes.subscribe()
    }

    async fn journal(&self, run_id: &str) -> Result<Journal> {
        self.root_of(run_id)
            .map(|r| r.journal.clone())
            .ok_or_else(|| SourceError::NotFound(format!("run {run_id}")))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            resolve: self.resolver.is_some(),
            cancel: false,
            halt: false,
        }
    }

    async fn act(&self, who: &Principal, run: &Digest, action: Action) -> Result<Value> {
        let (
            Some(resolver),
            Action::Resolve {
                effect_id,
                approved,
                comment,
            },
        ) = (&self.resolver, action)
        else {
            return Err(SourceError::Conflict(
                "observe is read-only except for breakpoint decisions".into(),
            ));
        };
        let root = self
            .root_of(&run.run_id)
            .ok_or_else(|| SourceError::NotFound(format!("run {}", run.run_id)))?;
        let mut value = serde_json::json!({"approved": approved, "respondedBy": who.name});
        if !comment.is_empty() {
            value["feedback"] = Value::String(comment);
        }
        resolver
            .resolve(&root.dir.join(&run.run_id), &effect_id, value)
            .await
            .map_err(SourceError::Conflict)?;
        let _ = self.changes.send(Arc::from(run.run_id.as_str()));
        Ok(serde_json::json!({"resolved": effect_id}))
    }
}
