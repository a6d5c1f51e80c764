//! `run:status` (spec §5.3.4): the run's state by the CLI derivation of §2.9 (the last lifecycle
//! event wins over pending effects), pending counts, the last event, metadata from the stored
//! state cache with live pending counts, and the completion proof once completed. Single-line
//! JSON (F13). Read-only: the state cache is read, never rebuilt.

use std::sync::Arc;

use babysitter_engine::lifecycle::completion_proof;
use babysitter_journal::StoredEvent;
use babysitter_journal::index::{EffectRecord, EffectStatus};
use serde_json::{Map, Value, json};

use crate::compat::cli::Cli;
use crate::compat::client;
use crate::compat::output;
use crate::compat::run_dir::{
    Run, event_summary, merged_metadata, metadata_text, pending_by_kind, serialize_event,
};
use crate::compat::usage;

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let Some(run_dir) = cli.run_dir() else {
        errln!("{}", usage::USAGE);
        return Ok(1);
    };
    cli.verbose(
        "run:status",
        &[
            ("runDir", Some(run_dir.display().to_string())),
            ("json", Some(cli.args.json().to_string())),
        ],
    );
    let opened = match client::open(&run_dir).await {
        Ok(run) => run.metadata().map(|run_json| (run, run_json)),
        Err(m) => Err(m),
    };
    let (run, run_json) = match opened {
        Ok(o) => o,
        Err(m) => {
            errln!(
                "[run:status] unable to read run metadata at {}: {m}",
                run_dir.display()
            );
            return Ok(1);
        }
    };
    let status = match Status::read(&run, &run_json).await? {
        Ok(s) => s,
        Err(e) => {
            errln!(
                "[run:status] unable to read journal at {}: {e:#}",
                run.dir.display()
            );
            return Ok(1);
        }
    };
    if cli.args.json() {
        output::line(&output::compact(&status.to_json()));
    } else if cli.args.flag("--tree") {
        status.print_tree();
    } else {
        output::line(&status.to_line());
    }
    Ok(0)
}

/// What `run:status` reports, read from the journal and the state cache.
struct Status {
    /// The CLI's derivation of the state (§2.9): the last lifecycle event wins over pending
    /// effects.
    state: &'static str,
    /// `RUN_HALTED`'s reason, else the failure's kind.
    reason: Option<String>,
    halt_reason: Option<String>,
    halt_payload: Option<Value>,
    last_event: Option<StoredEvent>,
    by_kind: Map<String, Value>,
    pending: usize,
    /// Pending `node` effects (what an iteration could run by itself).
    auto_runnable: usize,
    metadata: Option<Value>,
    proof: Option<String>,
    effects: Vec<Arc<EffectRecord>>,
}

impl Status {
    /// The outer error is the command's own failure; the inner one, a journal that cannot be
    /// read (reported with its own message and exit 1).
    async fn read(run: &Run, run_json: &Value) -> anyhow::Result<anyhow::Result<Status>> {
        let facts = run
            .inspect(|h, idx| {
                let pending: Vec<_> = idx.pending().cloned().collect();
                (
                    h.clone(),
                    pending,
                    pending_by_kind(idx),
                    idx.last_lifecycle.clone(),
                    idx.effects.values().cloned().collect::<Vec<_>>(),
                )
            })
            .await;
        let (head, pending, by_kind, lifecycle, effects) = match facts {
            Ok(f) => f,
            Err(e) => return Ok(Err(e)),
        };
        let last_event = run.event(head.seq).await?;
        let lifecycle_event = match &lifecycle {
            Some(m) if m.seq == head.seq => last_event.clone(),
            Some(m) => run.event(m.seq).await?,
            None => None,
        };
        let lifecycle_type = lifecycle.as_ref().map(|m| m.event_type.as_str());
        let state = match lifecycle_type {
            Some("RUN_COMPLETED") => "completed",
            Some("RUN_HALTED") => "halted",
            Some("RUN_FAILED" | "PROCESS_RUNTIME_ERROR") => "failed",
            _ if !pending.is_empty() => "waiting",
            _ => "created",
        };
        let base_reason = match lifecycle_type {
            Some("PROCESS_RUNTIME_ERROR") => Some("process_runtime_error"),
            Some("RUN_FAILED") => Some("failed"),
            _ => None,
        };
        let halt_data = (state == "halted")
            .then(|| lifecycle_event.as_ref().map(|e| &e.body.data))
            .flatten();
        let halt_reason = halt_data
            .and_then(|d| d.get("reason"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let halt_payload = halt_data
            .and_then(|d| d.get("payload"))
            .filter(|p| p.is_object())
            .cloned();
        let snapshot = state_cache(run);
        Ok(Ok(Status {
            state,
            reason: halt_reason.clone().or(base_reason.map(str::to_owned)),
            halt_reason,
            halt_payload,
            last_event,
            metadata: merged_metadata(snapshot.as_ref(), Some(by_kind.clone())),
            by_kind,
            pending: pending.len(),
            auto_runnable: pending
                .iter()
                .filter(|r| r.kind.as_deref() == Some("node"))
                .count(),
            proof: (state == "completed").then(|| completion_proof(run_json)),
            effects,
        }))
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("state".into(), json!(self.state));
        m.insert("reason".into(), json!(self.reason));
        m.insert(
            "payload".into(),
            self.halt_payload.clone().unwrap_or(Value::Null),
        );
        m.insert(
            "lastEvent".into(),
            self.last_event
                .as_ref()
                .map_or(Value::Null, serialize_event),
        );
        m.insert("pendingByKind".into(), Value::Object(self.by_kind.clone()));
        m.insert(
            "pendingEffectsSummary".into(),
            json!({"totalPending": self.pending, "countsByKind": self.by_kind, "autoRunnableCount": self.auto_runnable}),
        );
        m.insert(
            "needsMoreIterations".into(),
            json!(self.state == "waiting" && self.auto_runnable > 0),
        );
        m.insert(
            "metadata".into(),
            self.metadata.clone().unwrap_or(Value::Null),
        );
        m.insert("completionProof".into(), json!(self.proof));
        Value::Object(m)
    }

    fn print_tree(&self) {
        output::line(&format!("[run:status] state={}", self.state));
        let n = self.effects.len();
        for (i, r) in self.effects.iter().enumerate() {
            let branch = if i + 1 == n { "└─" } else { "├─" };
            let status = match r.status {
                EffectStatus::ResolvedOk | EffectStatus::ResolvedError => "completed",
                EffectStatus::Requested => "pending",
                EffectStatus::Cancelled => "cancelled",
            };
            output::line(&format!(
                "{branch} [{}] {} ({status})",
                r.kind.as_deref().unwrap_or("unknown"),
                r.task_id
            ));
        }
    }

    fn to_line(&self) -> String {
        let mut line = format!("[run:status] state={}", self.state);
        if let Some(r) = &self.halt_reason {
            line.push_str(&format!(" reason={r}"));
        }
        line.push_str(&format!(
            " last={}",
            event_summary(self.last_event.as_ref())
        ));
        for p in metadata_text(self.metadata.as_ref()) {
            line.push(' ');
            line.push_str(&p);
        }
        if let Some(p) = &self.proof {
            line.push_str(&format!(" completionProof={p}"));
        }
        line
    }
}

/// The stored state cache, for its metadata; a missing or unreadable one is said on stderr and
/// left out (`run:status` never rebuilds it).
fn state_cache(run: &Run) -> Option<Value> {
    match run.read_state_cache() {
        Ok(Some(s)) => Some(s),
        Ok(None) => {
            errln!(
                "[run:status] state cache snapshot missing at {} (continuing without metadata)",
                run.dir.display()
            );
            None
        }
        Err(m) => {
            errln!(
                "[run:status] unable to read state cache at {}: {m} (continuing without metadata)",
                run.dir.display()
            );
            None
        }
    }
}
