//! What the stop hook (and `session:iteration-message`, `session:resume`, `session:cleanup`,
//! session binding) knows about a run: its observed state (§2.9, the stop-hook variant) and its
//! pending effects, read from the journal.

use std::path::Path;

use babysitter_journal::StoredEvent;
use babysitter_journal::index::EffectRecord;
use serde_json::Value;

use crate::compat::run_dir::Run;

/// The run's observed state (§2.9, the stop-hook variant: pending effects beat `RUN_COMPLETED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObservedState {
    Created,
    Waiting,
    Completed,
    Failed,
    Halted,
}

impl ObservedState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Created => "created",
            Self::Waiting => "waiting",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Halted => "halted",
        }
    }

    pub fn terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Halted)
    }
}

/// What the stop hook (and `session:iteration-message`, `session:resume`, `session:cleanup`)
/// needs to know about a run.
#[derive(Debug, Clone)]
pub(in crate::compat) struct RunFacts {
    pub(in crate::compat) state: ObservedState,
    /// Pending kinds, sorted, joined by `", "` (empty when none).
    pub(in crate::compat) pending_kinds: String,
    pub(in crate::compat) only_breakpoints: bool,
    pub(in crate::compat) current_effect: Option<String>,
    /// The last lifecycle event is `RUN_COMPLETED` / `RUN_HALTED` / `RUN_FAILED` (no back-off).
    pub(in crate::compat) sealed: bool,
    /// The run's journal events, for back-off counting.
    pub(in crate::compat) events: Vec<(String, Option<String>)>,
}

/// Reads the journal and derives the observed state and pending facts.
pub(in crate::compat) async fn run_facts(run: &Run) -> anyhow::Result<RunFacts> {
    let evs = run.events().await?;
    facts_from(run, &evs).await
}

/// [`run_facts`] over the run's events, already read by the caller.
pub(in crate::compat) async fn facts_from(
    run: &Run,
    evs: &[StoredEvent],
) -> anyhow::Result<RunFacts> {
    let pending: Vec<EffectRecord> = run
        .inspect(|_, idx| idx.pending().cloned().collect())
        .await?;
    let has = |ts: &[&str]| evs.iter().any(|e| ts.contains(&e.body.kind.as_str()));
    let state = if has(&["RUN_FAILED", "PROCESS_RUNTIME_ERROR"]) {
        ObservedState::Failed
    } else if has(&["RUN_HALTED"]) {
        ObservedState::Halted
    } else if !pending.is_empty() {
        ObservedState::Waiting
    } else if has(&["RUN_COMPLETED"]) {
        ObservedState::Completed
    } else {
        ObservedState::Created
    };
    let mut kinds: Vec<String> = pending
        .iter()
        .map(|r| r.kind.clone().unwrap_or_else(|| "unknown".into()))
        .collect();
    kinds.sort();
    kinds.dedup();
    let delegable: Vec<&EffectRecord> = pending
        .iter()
        .filter(|r| host_delegable(&run.dir, r))
        .collect();
    let all_breakpoints = pending
        .iter()
        .all(|r| r.kind.as_deref() == Some("breakpoint"));
    let only_breakpoints = !pending.is_empty() && (all_breakpoints || delegable.is_empty());
    let current_effect = delegable
        .iter()
        .min_by(|a, b| {
            a.requested_at
                .as_deref()
                .unwrap_or("")
                .cmp(b.requested_at.as_deref().unwrap_or(""))
                .then_with(|| a.effect_id.cmp(&b.effect_id))
        })
        .map(|r| r.effect_id.clone());
    let sealed = evs
        .iter()
        .rev()
        .map(|e| e.body.kind.as_str())
        .find(|t| {
            matches!(
                *t,
                "RUN_CREATED" | "RUN_COMPLETED" | "RUN_HALTED" | "RUN_FAILED"
            )
        })
        .is_some_and(|t| t != "RUN_CREATED");
    let events = evs
        .iter()
        .map(|e| {
            (
                e.body.kind.as_str().to_owned(),
                e.body
                    .data
                    .get("effectId")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            )
        })
        .collect();
    Ok(RunFacts {
        state,
        pending_kinds: kinds.join(", "),
        only_breakpoints,
        current_effect,
        sealed,
        events,
    })
}

/// Host-delegable: any kind but `agent`/`breakpoint`; `agent` unless routed externally
/// (`responderType` agent/tracker, or `external: true` without `fallbackToInternal`).
fn host_delegable(run_dir: &Path, r: &EffectRecord) -> bool {
    match r.kind.as_deref() {
        Some("breakpoint") => false,
        Some("agent") => {
            let def_ref = r
                .task_def_ref
                .clone()
                .unwrap_or_else(|| format!("tasks/{}/task.json", r.effect_id));
            let def: Value = std::fs::read(run_dir.join(def_ref))
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or(Value::Null);
            let routed = [Some(&def), def.get("agent"), def.get("metadata")]
                .into_iter()
                .flatten()
                .any(|o| {
                    let responder = o.get("responderType").and_then(Value::as_str);
                    matches!(responder, Some("agent" | "tracker"))
                        || (o.get("external").and_then(Value::as_bool) == Some(true)
                            && o.get("fallbackToInternal").and_then(Value::as_bool) != Some(true))
                });
            !routed
        }
        _ => true,
    }
}

/// `STOP_HOOK_INVOKED` fires for `effect_id` since it was last requested (reset on resolution).
pub(in crate::compat) fn prior_fires(events: &[(String, Option<String>)], effect_id: &str) -> u32 {
    let Some(start) = events
        .iter()
        .rposition(|(t, e)| t == "EFFECT_REQUESTED" && e.as_deref() == Some(effect_id))
    else {
        return 0;
    };
    let mut n = 0;
    for (t, e) in &events[start + 1..] {
        if e.as_deref() != Some(effect_id) {
            continue;
        }
        match t.as_str() {
            "EFFECT_RESOLVED" | "EFFECT_CANCELLED" => return 0,
            "STOP_HOOK_INVOKED" => n += 1,
            _ => {}
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prior_fires_reset_on_resolution() {
        let ev = |t: &str, e: &str| (t.to_owned(), Some(e.to_owned()));
        let events = vec![
            ev("EFFECT_REQUESTED", "a"),
            ev("STOP_HOOK_INVOKED", "a"),
            ev("STOP_HOOK_INVOKED", "b"),
            ev("STOP_HOOK_INVOKED", "a"),
        ];
        assert_eq!(prior_fires(&events, "a"), 2);
        let mut resolved = events.clone();
        resolved.push(ev("EFFECT_RESOLVED", "a"));
        assert_eq!(prior_fires(&resolved, "a"), 0);
        assert_eq!(prior_fires(&events, "zz"), 0);
    }
}
