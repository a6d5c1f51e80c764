//! `run:status` (spec §5.3.4): the run's state by the CLI derivation of §2.9 (the last lifecycle
//! event wins over pending effects), pending counts, the last event, metadata from the stored
//! state cache with live pending counts, and the completion proof once completed. Single-line
//! JSON (F13). Read-only: the state cache is read, never rebuilt.

use babysitter_journal::index::EffectStatus;
use serde_json::{Map, Value, json};

use crate::compat::cli::Cli;
use crate::compat::client;
use crate::compat::output;
use crate::compat::run_dir::{
    completion_proof, event_summary, merged_metadata, metadata_text, pending_by_kind,
    serialize_event,
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
    let run = match client::open(&run_dir).await {
        Ok(r) => r,
        Err(m) => {
            errln!(
                "[run:status] unable to read run metadata at {}: {m}",
                run_dir.display()
            );
            return Ok(1);
        }
    };
    let run_json = match run.metadata() {
        Ok(v) => v,
        Err(m) => {
            errln!(
                "[run:status] unable to read run metadata at {}: {m}",
                run.dir.display()
            );
            return Ok(1);
        }
    };
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
        Err(e) => {
            errln!(
                "[run:status] unable to read journal at {}: {e:#}",
                run.dir.display()
            );
            return Ok(1);
        }
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
        .filter(|s| !s.is_empty());
    let halt_payload = halt_data
        .and_then(|d| d.get("payload"))
        .filter(|p| p.is_object())
        .cloned();
    let snapshot = match run.read_state_cache() {
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
    };
    let metadata = merged_metadata(snapshot.as_ref(), Some(by_kind.clone()));
    let auto_runnable = pending
        .iter()
        .filter(|r| r.kind.as_deref() == Some("node"))
        .count();
    let proof = (state == "completed").then(|| completion_proof(&run_json));

    if cli.args.json() {
        let mut m = Map::new();
        m.insert("state".into(), json!(state));
        m.insert(
            "reason".into(),
            halt_reason
                .or(base_reason)
                .map_or(Value::Null, |r| json!(r)),
        );
        m.insert("payload".into(), halt_payload.unwrap_or(Value::Null));
        m.insert(
            "lastEvent".into(),
            last_event.as_ref().map_or(Value::Null, serialize_event),
        );
        m.insert("pendingByKind".into(), Value::Object(by_kind.clone()));
        m.insert(
            "pendingEffectsSummary".into(),
            json!({"totalPending": pending.len(), "countsByKind": by_kind, "autoRunnableCount": auto_runnable}),
        );
        m.insert(
            "needsMoreIterations".into(),
            json!(state == "waiting" && auto_runnable > 0),
        );
        m.insert("metadata".into(), metadata.unwrap_or(Value::Null));
        m.insert(
            "completionProof".into(),
            proof.map_or(Value::Null, |p| json!(p)),
        );
        output::line(&output::compact(&Value::Object(m)));
        return Ok(0);
    }
    if cli.args.flag("--tree") {
        output::line(&format!("[run:status] state={state}"));
        let n = effects.len();
        for (i, r) in effects.iter().enumerate() {
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
        return Ok(0);
    }
    let mut line = format!("[run:status] state={state}");
    if let Some(r) = halt_reason {
        line.push_str(&format!(" reason={r}"));
    }
    line.push_str(&format!(" last={}", event_summary(last_event.as_ref())));
    for p in metadata_text(metadata.as_ref()) {
        line.push(' ');
        line.push_str(&p);
    }
    if let Some(p) = proof {
        line.push_str(&format!(" completionProof={p}"));
    }
    output::line(&line);
    Ok(0)
}
