//! The Gemini `thoughtSignature` store: tool-call id → (function name, signature).
//!
//! Why it exists (spec §10 rule 4, T6/T7): Gemini rejects a history whose `functionCall` parts
//! lack the signature it returned, but harnesses of other protocols (Claude Code, Codex) drop
//! unknown fields from tool calls before sending history back. The proxy therefore remembers the
//! signature of every Gemini call it translated, under the tool-call id it gave the client, and
//! re-attaches it on the next request. The same table answers "which function did this id
//! call?" for Gemini's `functionResponse.name`.
//!
//! Why a file: the reference keeps this in process memory, so a proxy restart (or a launcher
//! starting a fresh proxy per task) breaks every conversation in flight. Entries are appended as
//! JSON lines to `<data-dir>/thought-signatures.jsonl` and replayed on open; a torn last line
//! (crash mid-write) is skipped. The store is bounded: at most `max_entries` live entries (oldest
//! evicted first) younger than `ttl`, and the log is rewritten (temp file + rename) once it holds
//! twice as many lines as the bound. Appends are small unsynced writes under a mutex — a lost
//! tail costs one signature, which Gemini then reports as a 400, never silent corruption.
//!
//! Why compaction runs on its own thread: rewriting up to `2 × max_entries` lines (100k by
//! default, megabytes) under the mutex would stall every Gemini request for tens of
//! milliseconds once per ~100k calls — a tail-latency spike on the request path. The request
//! that crosses the bound only takes a snapshot (reference-counted lines, no copies); a thread
//! writes it to a temporary file, and under the mutex appends the lines that arrived meanwhile,
//! renames it over the log and reopens it.

use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

const FILE_NAME: &str = "thought-signatures.jsonl";

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Line {
    id: String,
    name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sig: Option<String>,
    at: u64,
}

#[derive(Debug)]
struct Inner {
    map: HashMap<String, Arc<Line>>,
    order: VecDeque<String>,
    file: Option<(PathBuf, File)>,
    lines: usize,
    max_entries: usize,
    ttl_secs: u64,
    /// While a compaction thread runs: the lines appended since its snapshot.
    compacting: Option<Vec<Arc<Line>>>,
    /// After a failed compaction, the line count at which to try again (no retry per call).
    retry_at: usize,
}

#[derive(Debug)]
struct Shared {
    inner: Mutex<Inner>,
    /// Signalled when a compaction ends.
    compacted: Condvar,
}

/// Shared handle; cheap to clone.
#[derive(Debug, Clone)]
pub struct SignatureStore {
    shared: Arc<Shared>,
}

/// What the store knows about one tool call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCall {
    pub name: String,
    pub signature: Option<String>,
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl SignatureStore {
    /// A store that lives in memory only (tests, or no data dir configured).
    pub fn memory(max_entries: usize) -> Self {
        Self::from_inner(Inner {
            map: HashMap::new(),
            order: VecDeque::new(),
            file: None,
            lines: 0,
            max_entries: max_entries.max(1),
            ttl_secs: u64::MAX,
            compacting: None,
            retry_at: 0,
        })
    }

    /// Opens (creating) the store under `dir`, replaying its log.
    pub fn open(dir: &Path, max_entries: usize, ttl: Duration) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join(FILE_NAME);
        let mut inner = Inner {
            map: HashMap::new(),
            order: VecDeque::new(),
            file: None,
            lines: 0,
            max_entries: max_entries.max(1),
            ttl_secs: ttl.as_secs().max(1),
            compacting: None,
            retry_at: 0,
        };
        if let Ok(f) = File::open(&path) {
            let now = now_secs();
            for line in BufReader::new(f).lines() {
                let Ok(line) = line else { break };
                inner.lines += 1;
                match serde_json::from_str::<Line>(&line) {
                    Ok(l) if now.saturating_sub(l.at) < inner.ttl_secs => {
                        inner.insert(Arc::new(l));
                    }
                    Ok(_) => {}
                    Err(_) => tracing::warn!("torn signature store line skipped"),
                }
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(&path)?;
        inner.file = Some((path, file));
        let store = Self::from_inner(inner);
        store.compact_if_needed();
        Ok(store)
    }

    fn lock(&self) -> Option<std::sync::MutexGuard<'_, Inner>> {
        self.shared.inner.lock().ok()
    }

    fn from_inner(inner: Inner) -> Self {
        Self {
            shared: Arc::new(Shared {
                inner: Mutex::new(inner),
                compacted: Condvar::new(),
            }),
        }
    }

    /// Remembers a call (its name always, its signature when it has one).
    pub fn put(&self, id: &str, name: &str, signature: Option<&str>) {
        let line = Arc::new(Line {
            id: id.to_owned(),
            name: name.to_owned(),
            sig: signature.map(str::to_owned),
            at: now_secs(),
        });
        {
            let Some(mut g) = self.lock() else { return };
            if let Some((_, f)) = g.file.as_mut()
                && let Ok(text) = serde_json::to_string(&*line)
                && let Err(e) = writeln!(f, "{text}")
            {
                tracing::warn!(error = %e, "signature store append failed");
            }
            g.lines += 1;
            if let Some(pending) = g.compacting.as_mut() {
                pending.push(line.clone());
            }
            g.insert(line);
        }
        self.compact_if_needed();
    }

    /// Waits until no compaction runs (tests, and before reopening the same directory).
    pub fn wait_compacted(&self) {
        let Some(mut g) = self.lock() else { return };
        while g.compacting.is_some() {
            g = match self.shared.compacted.wait(g) {
                Ok(g) => g,
                Err(_) => return,
            };
        }
    }

    /// What is known about tool call `id`, if it is live.
    pub fn get(&self, id: &str) -> Option<StoredCall> {
        let g = self.lock()?;
        let l = g.map.get(id)?;
        if now_secs().saturating_sub(l.at) >= g.ttl_secs {
            return None;
        }
        Some(StoredCall {
            name: l.name.clone(),
            signature: l.sig.clone(),
        })
    }

    /// Number of live entries (tests, metrics).
    pub fn len(&self) -> usize {
        self.lock().map_or(0, |g| g.map.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Starts a compaction on its own thread once the log holds twice the bound.
    fn compact_if_needed(&self) {
        let Some(mut g) = self.lock() else { return };
        if g.lines <= (2 * g.max_entries).max(g.retry_at) || g.compacting.is_some() {
            return;
        }
        let Some((path, _)) = g.file.as_ref() else {
            return;
        };
        let path = path.clone();
        let snapshot: Vec<Arc<Line>> = g
            .order
            .iter()
            .filter_map(|id| g.map.get(id).cloned())
            .collect();
        g.compacting = Some(Vec::new());
        drop(g);
        let store = self.clone();
        let spawned = std::thread::Builder::new()
            .name("sigstore-compact".into())
            .spawn(move || store.compact(&path, snapshot));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "signature store compaction not started");
            self.finish_compaction();
        }
    }

    /// Writes `snapshot` to a temporary file, then (under the mutex) the live lines appended
    /// since, and renames it over the log; again while a burst during the rewrite left the log
    /// over the bound.
    fn compact(&self, path: &Path, mut snapshot: Vec<Arc<Line>>) {
        loop {
            let tmp = path.with_extension("jsonl.tmp");
            let mut text = String::new();
            for l in &snapshot {
                if let Ok(s) = serde_json::to_string(&**l) {
                    text.push_str(&s);
                    text.push('\n');
                }
            }
            if let Err(e) = std::fs::write(&tmp, text) {
                tracing::warn!(error = %e, "signature store compaction failed");
                return self.finish_compaction();
            }
            let Some(mut g) = self.lock() else {
                return self.shared.compacted.notify_all();
            };
            // Lines that arrived meanwhile and are still live (evicted ones need no line).
            let pending: Vec<Arc<Line>> = g
                .compacting
                .take()
                .unwrap_or_default()
                .into_iter()
                .filter(|l| g.map.get(&l.id).is_some_and(|live| Arc::ptr_eq(live, l)))
                .collect();
            let swapped = (|| -> std::io::Result<File> {
                let mut f = OpenOptions::new().append(true).open(&tmp)?;
                for l in &pending {
                    if let Ok(s) = serde_json::to_string(&**l) {
                        writeln!(f, "{s}")?;
                    }
                }
                std::fs::rename(&tmp, path)?;
                OpenOptions::new().append(true).open(path)
            })();
            match swapped {
                Ok(f) => {
                    g.lines = snapshot.len() + pending.len();
                    g.file = Some((path.to_owned(), f));
                    g.retry_at = 0;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "signature store compaction failed");
                    g.retry_at = g.lines + g.max_entries;
                    drop(g);
                    return self.shared.compacted.notify_all();
                }
            }
            if g.lines <= 2 * g.max_entries {
                drop(g);
                return self.shared.compacted.notify_all();
            }
            snapshot = g
                .order
                .iter()
                .filter_map(|id| g.map.get(id).cloned())
                .collect();
            g.compacting = Some(Vec::new());
        }
    }

    /// Ends a compaction that wrote nothing; the next attempt waits for `max_entries` more
    /// lines.
    fn finish_compaction(&self) {
        if let Some(mut g) = self.lock() {
            g.compacting = None;
            g.retry_at = g.lines + g.max_entries;
        }
        self.shared.compacted.notify_all();
    }
}

impl Inner {
    fn insert(&mut self, l: Arc<Line>) {
        if self.map.insert(l.id.clone(), l.clone()).is_some() {
            self.order.retain(|x| x != &l.id);
        }
        self.order.push_back(l.id.clone());
        while self.map.len() > self.max_entries {
            match self.order.pop_front() {
                Some(old) => {
                    self.map.remove(&old);
                }
                None => break,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// T7: a signature survives a reopen (proxy restart), and the store stays bounded after
    /// many unrelated calls, on disk as well as in memory.
    #[test]
    fn t7_signatures_survive_restart_and_store_is_bounded() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let day = Duration::from_secs(86_400);
        let s = SignatureStore::open(dir.path(), 50, day).unwrap_or_else(|e| panic!("{e}"));
        s.put("call_keep", "run_shell_command", Some("c2lnLWJ5dGVz/+=="));
        s.wait_compacted();
        drop(s);
        let s = SignatureStore::open(dir.path(), 50, day).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            s.get("call_keep"),
            Some(StoredCall {
                name: "run_shell_command".into(),
                signature: Some("c2lnLWJ5dGVz/+==".into())
            })
        );
        for i in 0..500 {
            s.put(&format!("call_{i}"), "other", Some("x"));
        }
        s.wait_compacted();
        assert_eq!(s.len(), 50);
        assert_eq!(s.get("call_keep"), None, "oldest entry evicted");
        assert!(s.get("call_499").is_some());
        let text = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap_or_default();
        assert!(text.lines().count() <= 101, "log compacted");
        drop(s);
        let s = SignatureStore::open(dir.path(), 50, day).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.len(), 50);
        assert!(s.get("call_499").is_some());
    }

    #[test]
    fn torn_line_is_skipped_on_open() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            dir.path().join(FILE_NAME),
            format!(
                "{{\"id\":\"a\",\"name\":\"f\",\"sig\":\"s\",\"at\":{}}}\n{{\"id\":\"b\",\"na",
                now_secs()
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let s = SignatureStore::open(dir.path(), 10, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.get("a").map(|c| c.signature), Some(Some("s".into())));
        assert_eq!(s.get("b"), None);
    }

    #[test]
    fn expired_entries_are_not_replayed() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            dir.path().join(FILE_NAME),
            "{\"id\":\"old\",\"name\":\"f\",\"sig\":\"s\",\"at\":5}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let s = SignatureStore::open(dir.path(), 10, Duration::from_secs(60))
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(s.is_empty());
    }
}
