//! What `run:repair-journal` and `run:recover-process-error` share: reading the journal's raw
//! files (tolerating corrupt ones, which a repair must be able to skip), holding every writer
//! lock of the run while its journal is swapped, and writing the kept events as a new journal.
//!
//! Rewritten journals follow the reference's format (spec §2.2): each event keeps its `type`,
//! `recordedAt` and `data`, loses `sdkVersion` (checksum over `{type, recordedAt, data}`), gets a
//! fresh ULID and is renumbered from 1. The journal crate builds the files and swaps the
//! directories; nothing is renamed before the new journal is complete and durable.

use std::path::{Path, PathBuf};

use babysitter_journal::event::parse_file_name;
use babysitter_journal::{EventBody, EventType, StoredEvent};
use serde_json::{Map, Value};

use crate::compat::cli::Cli;
use crate::compat::lock;
use crate::compat::output::io_message;

/// One event as read from a journal file, before any validation.
#[derive(Debug, Clone)]
pub struct RawEvent {
    pub kind: String,
    /// `None` when the file has none (the rewrite stamps it now, as the reference does).
    pub recorded_at: Option<String>,
    pub data: Map<String, Value>,
}

impl RawEvent {
    pub fn data_str(&self, key: &str) -> Option<&str> {
        self.data
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
    }
}

impl From<&StoredEvent> for RawEvent {
    fn from(e: &StoredEvent) -> Self {
        RawEvent {
            kind: e.body.kind.as_str().to_owned(),
            recorded_at: Some(e.body.recorded_at.clone()),
            data: e.body.data.as_object().cloned().unwrap_or_default(),
        }
    }
}

/// The raw journal: how many `.json` files it has, the events that parsed, in sequence order,
/// and how many files did not.
#[derive(Debug, Default)]
pub struct RawJournal {
    pub files: usize,
    pub events: Vec<RawEvent>,
    pub corrupt: Vec<String>,
    /// Files that parse but would not load as written (checksum mismatch, missing field), with
    /// why: the rewrite gives them a fresh checksum, so the repair reports them.
    pub unverified: Vec<(String, String)>,
}

/// Reads `<runDir>/journal/*.json` in sequence order (by parsed sequence number, then name — not
/// lexicographically, F7). A file is corrupt when its name is not `<seq>.<ULID>.json` or its
/// content is not a JSON object; checksums are not required to match (the rewrite recomputes
/// them, as the reference does).
pub fn read_raw(run_dir: &Path) -> Result<RawJournal, String> {
    let dir = run_dir.join("journal");
    let entries = std::fs::read_dir(&dir).map_err(|e| io_message("scandir", &dir, &e))?;
    let mut names: Vec<(u64, String)> = Vec::new();
    let mut corrupt = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_message("scandir", &dir, &e))?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        if !name.ends_with(".json") {
            continue;
        }
        match parse_file_name("", &name) {
            Ok((seq, _)) => names.push((seq, name)),
            Err(_) => corrupt.push(name),
        }
    }
    names.sort();
    let mut out = RawJournal {
        files: names.len() + corrupt.len(),
        ..RawJournal::default()
    };
    for (_, name) in names {
        let path = dir.join(&name);
        let bytes = std::fs::read(&path).map_err(|e| io_message("open", &path, &e))?;
        let parsed = serde_json::from_slice::<Value>(&bytes);
        if matches!(parsed, Ok(Value::Object(_)))
            && let Err(e) = StoredEvent::from_file("", &name, &bytes)
        {
            out.unverified.push((name.clone(), e.to_string()));
        }
        match parsed {
            Ok(Value::Object(mut m)) => out.events.push(RawEvent {
                kind: match m.remove("type") {
                    Some(Value::String(s)) => s,
                    _ => "UNKNOWN".into(),
                },
                recorded_at: match m.remove("recordedAt") {
                    Some(Value::String(s)) => Some(s),
                    _ => None,
                },
                data: match m.remove("data") {
                    Some(Value::Object(d)) => d,
                    _ => Map::new(),
                },
            }),
            _ => corrupt.push(name),
        }
    }
    out.corrupt = corrupt;
    Ok(out)
}

/// Every lock a journal swap needs, released on drop: the command-level lock of [`lock`] (other
/// babysitter-rs commands, and the reference's live `run.lock`), which holds the journal's own
/// writer locks (its `flock` and `run.lock`) on the command's runtime, so no append can land in
/// a directory being replaced (and the runtime lets the swap go ahead).
#[derive(Debug)]
pub struct SwapGuard {
    _command: lock::RunGuard,
}

/// Takes [`SwapGuard`]'s locks. A run without a `journal/` directory is refused first (taking
/// the journal's lock would create one).
pub async fn lock_for_swap(cli: &Cli<'_>, run_dir: &Path) -> anyhow::Result<SwapGuard> {
    let journal = run_dir.join("journal");
    if !journal.is_dir() {
        anyhow::bail!("{} is not a journal directory", journal.display());
    }
    let command = lock::acquire(run_dir, cli.lock_timeout()).await?;
    Ok(SwapGuard { _command: command })
}

/// Writes `events` as the run's new journal (seq 1.., fresh ascending ULIDs, no `sdkVersion`),
/// keeping the old one as `<runDir>/<backup_prefix>.<ms>`; returns the backup directory. Call it
/// under [`lock_for_swap`].
pub async fn swap_journal(
    run_dir: &Path,
    events: Vec<RawEvent>,
    staging_prefix: &str,
    backup_prefix: &str,
) -> anyhow::Result<PathBuf> {
    let mut ulids = ulid::Generator::new();
    let mut sealed = Vec::with_capacity(events.len());
    for (i, ev) in events.into_iter().enumerate() {
        let ulid = ulids
            .generate()
            .map_err(|e| anyhow::anyhow!("cannot generate a ULID: {e}"))?;
        let body = EventBody {
            kind: EventType::parse(&ev.kind),
            recorded_at: ev
                .recorded_at
                .unwrap_or_else(babysitter_journal::journal::now_iso),
            data: Value::Object(ev.data),
            sdk_version: None,
            extra: Map::new(),
        };
        sealed.push(StoredEvent::seal(
            i as u64 + 1,
            ulid.to_string(),
            body,
            None,
        ));
    }
    let stamp = chrono::Utc::now().timestamp_millis();
    let staging = format!("{staging_prefix}.{stamp}");
    let backup = format!("{backup_prefix}.{stamp}");
    let dir = run_dir.to_path_buf();
    let fs = crate::compat::run_dir::fs_runtime().map_err(|e| anyhow::anyhow!(e))?;
    let backup_dir =
        tokio::task::spawn_blocking(move || fs.replace_journal(&dir, &sealed, &staging, &backup))
            .await
            .map_err(|e| anyhow::anyhow!("journal rewrite task failed: {e}"))??;
    Ok(backup_dir)
}
