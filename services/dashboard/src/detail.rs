//! A run's detail, read from its journal: the pipeline of its tasks, the timeline, the raw
//! journal with each event's verification, logs by range, and the cost.
//!
//! Everything here is derived from the journal the source names (the same verified reads the
//! engine replays from), plus what only the source knows live (queued or leased tasks, the
//! budget decision). A journal that does not verify is not an error page: the events up to the
//! first bad one are shown verified, the bad one with what is wrong with it, and the pipeline is
//! folded from the verified prefix.
//!
//! The pipeline's stages are babysitter's parallel groups as the journal shows them: the effects
//! one iteration requests are appended together, so a run of consecutive `EFFECT_REQUESTED`
//! events is one stage (a `ctx.parallel.all` fan-out side by side), and a sequential step is a
//! stage of one.

use std::collections::HashMap;

use babysitter_journal::index::{EffectIndex, EffectRecord};
use babysitter_journal::store::RunFile;
use babysitter_journal::{EventType, Journal, Location, StoredEvent};
use serde::Serialize;
use serde_json::{Value, json};

use crate::model::{Digest, millis_of};
use crate::source::{LiveTask, Result, Source, SourceError};

/// Effects whose task and result files are read for the detail (a larger fan-out shows the rest
/// from the journal alone).
const FILES_FOR: usize = 400;
/// Largest piece of an event's data shown inline in the raw journal.
const DATA_MAX: usize = 4096;
/// Raw journal events per request.
pub const JOURNAL_PAGE: usize = 200;

/// The verified events of a run, and where verification stopped.
pub struct Verified {
    pub events: Vec<StoredEvent>,
    pub corrupt: Option<(u64, String)>,
    pub head: u64,
}

/// Reads the run's journal: all of it when it verifies, else the prefix before the first event
/// that does not (and what is wrong with that one).
pub async fn verified(journal: &Journal, run_id: &str) -> Result<Verified> {
    let head = journal.head(run_id).await.map(|h| h.seq).unwrap_or(0);
    match journal.read(run_id, 1, 0).await {
        Ok(events) => Ok(Verified {
            head: head.max(events.last().map_or(0, |e| e.seq)),
            events,
            corrupt: None,
        }),
        Err(e) if e.is_corruption() => {
            let seq = e.location().and_then(|l| l.seq).unwrap_or(1);
            let events = if seq > 1 {
                journal.read(run_id, 1, seq - 1).await.unwrap_or_default()
            } else {
                Vec::new()
            };
            Ok(Verified {
                head: head.max(seq),
                events,
                corrupt: Some((seq, e.to_string())),
            })
        }
        Err(e) => Err(e.into()),
    }
}

/// The effect index folded from verified events (an event the index refuses ends the fold).
fn fold(run_id: &str, events: &[StoredEvent]) -> EffectIndex {
    let mut index = EffectIndex::default();
    for e in events {
        let at = || Location::file(run_id, e.seq, "");
        if index.apply(e, &at).is_err() {
            break;
        }
    }
    index
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskView {
    pub effect_id: String,
    pub kind: String,
    pub label: String,
    pub title: String,
    /// `requested`, `queued`, `leased`, `ok`, `error`, `cancelled`.
    pub state: String,
    pub attempt: u32,
    pub worker: String,
    pub harness: String,
    pub requested_at: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub duration_ms: Option<i64>,
    pub cost_usd: Option<f64>,
    pub input_tokens: Option<f64>,
    pub output_tokens: Option<f64>,
    pub error: Option<Value>,
    /// A subprocess's child run (its run id is the effect's id).
    pub child_run: Option<String>,
    pub sleep_until: Option<String>,
    pub question: Option<String>,
    pub stdout_bytes: Option<u64>,
    pub stderr_bytes: Option<u64>,
    /// Agent events stored for the record (read as the `agentEvents` log).
    pub agent_events: Option<u64>,
}

fn state_of(r: &EffectRecord, live: Option<&LiveTask>) -> String {
    use babysitter_journal::index::EffectStatus as S;
    match (r.status, live) {
        (S::ResolvedOk, _) => "ok".into(),
        (S::ResolvedError, _) => "error".into(),
        (S::Cancelled, _) => "cancelled".into(),
        (S::Requested, Some(l)) => l.state.into(),
        (S::Requested, None) => "requested".into(),
    }
}

fn text(v: &Value, pointers: &[&str]) -> Option<String> {
    pointers.iter().find_map(|p| match v.pointer(p) {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    })
}

/// The run's pipeline, timeline and journal summary as the detail page shows them.
pub async fn detail(source: &dyn Source, run: &Digest) -> Result<Value> {
    let run_id = run.run_id.as_str();
    let journal = source.journal(run_id).await?;
    let v = verified(&journal, run_id).await?;
    let index = fold(run_id, &v.events);
    let live = source.live_tasks(run_id);
    // Stages: runs of consecutive EFFECT_REQUESTED events. Resolution times from the events.
    let mut stages: Vec<Vec<String>> = Vec::new();
    let mut resolved: HashMap<String, &Value> = HashMap::new();
    let mut timeline = Vec::new();
    let mut previous_requested = false;
    for e in &v.events {
        let data = &e.body.data;
        let effect = data.get("effectId").and_then(Value::as_str);
        let requested = e.body.kind == EventType::EffectRequested;
        if let (true, Some(id)) = (requested, effect) {
            match stages.last_mut() {
                Some(stage) if previous_requested => stage.push(id.to_owned()),
                _ => stages.push(vec![id.to_owned()]),
            }
        }
        previous_requested = requested;
        if e.body.kind == EventType::EffectResolved
            && let Some(id) = effect
        {
            resolved.insert(id.to_owned(), data);
        }
        if !matches!(
            e.body.kind,
            EventType::EffectRequested | EventType::RunIteration
        ) {
            timeline.push(json!({
                "seq": e.seq,
                "at": e.body.recorded_at,
                "type": e.body.kind.as_str(),
                "effectId": effect,
                "text": summary_text(&e.body.kind, data),
            }));
        }
    }
    let files = task_files(&journal, run_id, &index).await;
    let tasks: Vec<TaskView> = index
        .effects
        .values()
        .map(|r| {
            let (task, result) = files.get(&r.effect_id).cloned().unwrap_or_default();
            let res = resolved.get(&r.effect_id).copied();
            let started = res.and_then(|d| text(d, &["/startedAt"]));
            let finished = res.and_then(|d| text(d, &["/finishedAt"]));
            let duration_ms = started
                .as_deref()
                .and_then(millis_of)
                .zip(finished.as_deref().and_then(millis_of))
                .map(|(s, f)| f - s);
            let l = live.get(&r.effect_id);
            let kind = r.kind.clone().unwrap_or_default();
            TaskView {
                effect_id: r.effect_id.clone(),
                label: r.label.clone().unwrap_or_default(),
                title: text(
                    &task,
                    &["/title", "/agent/name", "/shell/command", "/node/entry"],
                )
                .unwrap_or_else(|| r.task_id.clone()),
                state: state_of(r, l),
                attempt: l.map_or(u32::from(r.resolved_at.is_some()), |l| l.attempt),
                worker: l
                    .map(|l| l.worker.clone())
                    .filter(|w| !w.is_empty())
                    .or_else(|| text(&result, &["/metadata/workerId", "/metadata/worker"]))
                    .unwrap_or_default(),
                harness: text(
                    &task,
                    &[
                        "/harness",
                        "/agent/harness",
                        "/metadata/harness",
                        "/execution/harness",
                    ],
                )
                .or_else(|| text(&result, &["/metadata/harness"]))
                .unwrap_or_default(),
                requested_at: r.requested_at.clone(),
                started_at: started,
                finished_at: finished,
                duration_ms,
                cost_usd: r.cost_usd,
                input_tokens: r.input_tokens,
                output_tokens: r.output_tokens,
                error: r.error.clone(),
                child_run: (kind == "subprocess").then(|| r.effect_id.clone()),
                sleep_until: text(
                    &task,
                    &["/sleep/targetIso", "/sleepUntil", "/metadata/sleepUntil"],
                ),
                question: text(
                    &task,
                    &[
                        "/breakpoint/question",
                        "/inputs/question",
                        "/args/question",
                        "/title",
                    ],
                )
                .filter(|_| kind == "breakpoint"),
                stdout_bytes: result
                    .pointer("/metadata/stdoutBytes")
                    .and_then(Value::as_u64),
                stderr_bytes: result
                    .pointer("/metadata/stderrBytes")
                    .and_then(Value::as_u64),
                agent_events: result
                    .pointer("/metadata/agentEvents")
                    .and_then(Value::as_u64),
                kind,
            }
        })
        .collect();
    let cost = match source.cost(run).await {
        Ok(Some(c)) => c,
        _ => json!({"spent": {
            "costUsd": index.costs.cost_usd,
            "inputTokens": index.costs.input_tokens,
            "outputTokens": index.costs.output_tokens,
            "tokens": index.costs.input_tokens + index.costs.output_tokens
                + index.costs.cache_read + index.costs.cache_creation,
        }}),
    };
    let run_json = journal
        .run_files(run_id)
        .await
        .map(|f| f.run_json)
        .unwrap_or_default();
    Ok(json!({
        "run": run,
        "process": {
            "processId": run_json.get("processId"),
            "entrypoint": run_json.get("entrypoint"),
            "createdAt": run_json.get("createdAt"),
            "iterations": index.iterations,
        },
        "stages": stages,
        "tasks": tasks,
        "timeline": timeline,
        "journal": {
            "head": v.head,
            "verified": v.events.len(),
            "linked": v.events.iter().any(|e| e.prev_hash.is_some()),
            "corrupt": v.corrupt.as_ref().map(|(seq, why)| json!({"seq": seq, "message": why})),
        },
        "cost": cost,
        "capabilities": source.capabilities(),
    }))
}

/// One line describing an event for the timeline.
fn summary_text(kind: &EventType, d: &Value) -> String {
    let s = |p: &str| text(d, &[p]).unwrap_or_default();
    match kind {
        EventType::EffectResolved => format!("{} resolved {}", s("/effectId"), s("/status")),
        EventType::EffectProgress => format!("{} {}", s("/progressPercent"), s("/progressLabel")),
        EventType::ProcessLog => s("/message"),
        EventType::CostTracked => format!(
            "{} tokens in, {} out, ${}",
            s("/inputTokens"),
            s("/outputTokens"),
            s("/costUsd")
        ),
        EventType::RunFailed | EventType::ProcessRuntimeError => {
            text(d, &["/error/message", "/message"]).unwrap_or_default()
        }
        _ => String::new(),
    }
}

/// task.json and result.json of the first [`FILES_FOR`] effects, parsed (missing: null).
async fn task_files(
    journal: &Journal,
    run_id: &str,
    index: &EffectIndex,
) -> HashMap<String, (Value, Value)> {
    let ids: Vec<&String> = index.effects.keys().take(FILES_FOR).collect();
    let mut wanted = Vec::with_capacity(ids.len() * 2);
    for id in &ids {
        for name in ["task.json", "result.json"] {
            if let Ok(f) = RunFile::task(id, name) {
                wanted.push(f);
            }
        }
    }
    let Ok(read) = journal.get_run_files(run_id, &wanted).await else {
        return HashMap::new();
    };
    let parse = |r: Option<&babysitter_journal::Result<bytes::Bytes>>| {
        r.and_then(|r| r.as_ref().ok())
            .and_then(|b| serde_json::from_slice(b).ok())
            .unwrap_or(Value::Null)
    };
    ids.iter()
        .enumerate()
        .map(|(i, id)| {
            (
                (*id).clone(),
                (parse(read.get(2 * i)), parse(read.get(2 * i + 1))),
            )
        })
        .collect()
}

/// A page of the raw journal from `from`: each event with its checksum and whether it verified.
pub async fn raw_journal(source: &dyn Source, run_id: &str, from: u64) -> Result<Value> {
    let journal = source.journal(run_id).await?;
    let v = verified(&journal, run_id).await?;
    let from = from.max(1);
    let mut rows: Vec<Value> = v
        .events
        .iter()
        .filter(|e| e.seq >= from)
        .take(JOURNAL_PAGE)
        .map(|e| {
            let mut data = e.body.data.to_string();
            if data.len() > DATA_MAX {
                let mut cut = DATA_MAX;
                while !data.is_char_boundary(cut) {
                    cut -= 1;
                }
                data.truncate(cut);
                data.push('…');
            }
            json!({
                "seq": e.seq,
                "ulid": e.ulid,
                "type": e.body.kind.as_str(),
                "recordedAt": e.body.recorded_at,
                "checksum": e.checksum,
                "prevHash": e.prev_hash,
                "verified": true,
                "data": data,
            })
        })
        .collect();
    let last = rows
        .last()
        .and_then(|r| r["seq"].as_u64())
        .unwrap_or(from - 1);
    let mut next = (last < v.events.last().map_or(0, |e| e.seq)).then_some(last + 1);
    if let Some((seq, why)) = &v.corrupt
        && rows.len() < JOURNAL_PAGE
        && *seq >= from
    {
        rows.push(json!({"seq": seq, "verified": false, "error": why}));
        next = None;
    }
    Ok(json!({"events": rows, "next": next, "corrupt": v.corrupt.is_some()}))
}

/// `len` bytes of a task's `stdout` / `stderr` from `offset`: the log file, or the whole log
/// from its blob when the file keeps only the head. `agentEvents` is an agent task's event
/// record (JSON lines), which lives only in its blob.
pub async fn log(
    source: &dyn Source,
    run_id: &str,
    effect_id: &str,
    stream: &str,
    offset: usize,
    len: usize,
) -> Result<Value> {
    if !matches!(stream, "stdout" | "stderr" | "agentEvents") {
        return Err(SourceError::Invalid(format!("log stream `{stream}`")));
    }
    let journal = source.journal(run_id).await?;
    let file = |name: &str| RunFile::task(effect_id, name).map_err(SourceError::from);
    let result: Value = journal
        .get_run_file(run_id, &file("result.json")?)
        .await
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    let blob = result
        .pointer(&format!("/metadata/{stream}Blob"))
        .and_then(Value::as_str)
        .and_then(|b| babysitter_journal::store::BlobRef::parse(b).ok());
    let bytes = match blob {
        Some(b) => journal.get_blob(run_id, &b).await?,
        None if stream == "agentEvents" => bytes::Bytes::new(),
        None => match journal
            .get_run_file(run_id, &file(&format!("{stream}.log"))?)
            .await
        {
            Ok(b) => b,
            Err(babysitter_journal::JournalError::RunFileNotFound { .. }) => bytes::Bytes::new(),
            Err(e) => return Err(e.into()),
        },
    };
    let start = offset.min(bytes.len());
    let end = (start + len.clamp(1, 1 << 20)).min(bytes.len());
    Ok(json!({
        "text": String::from_utf8_lossy(&bytes[start..end]),
        "offset": start,
        "next": (end < bytes.len()).then_some(end),
        "total": bytes.len(),
    }))
}
