//! The effect index: babysitter's fold of a journal into effect records, with the reference's
//! validation rules (§2.6 of the core spec), and the chain checks every read applies.
//!
//! Two layers, deliberately separate: [`ChainCheck`] verifies integrity (contiguous sequence
//! numbers from 1, strictly increasing ULIDs, hash-chain links) and is applied to every read,
//! including raw `Read` streams used by repair tools; [`EffectIndex`] folds the *meaning* of the
//! events and refuses what the reference refuses (unknown or doubly resolved effects, duplicate
//! invocation keys). Appends are checked against both before anything is written, so a bad event
//! can never make a stored run unloadable.

use std::collections::BTreeSet;
use std::sync::Arc;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::Head;
use crate::error::{JournalError, Locate, Location};
use crate::event::{EventType, StoredEvent, genesis_hash};

/// Integrity state carried from one event to the next.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChainCheck {
    pub head: Head,
    /// Chain hash of the head event (the genesis hash for an empty journal).
    pub head_hash: String,
    /// Whether hash-chain links are checked (object layout) or absent (filesystem layout).
    pub linked: bool,
}

impl ChainCheck {
    pub fn new(run_id: &str, linked: bool) -> Self {
        Self {
            head: Head::empty(),
            head_hash: genesis_hash(run_id),
            linked,
        }
    }

    /// Checks that `event` directly follows the current head, then advances to it.
    pub fn push(&mut self, event: &StoredEvent, at: &impl Locate) -> Result<(), JournalError> {
        let expected = self.head.seq + 1;
        if event.seq != expected {
            return Err(JournalError::SequenceGap {
                at: at.locate(),
                expected,
                got: event.seq,
            });
        }
        if self.head.seq > 0 && event.ulid.as_str() <= self.head.ulid.as_str() {
            return Err(JournalError::UlidOrder {
                at: at.locate(),
                prev: self.head.ulid.clone(),
                got: event.ulid.clone(),
            });
        }
        if self.linked {
            let found = event.prev_hash.as_deref().unwrap_or("");
            if found != self.head_hash {
                return Err(JournalError::HashChain {
                    at: at.locate(),
                    expected: self.head_hash.clone(),
                    found: found.to_owned(),
                });
            }
        }
        self.head = Head {
            seq: event.seq,
            ulid: event.ulid.clone(),
        };
        self.head_hash = event.chain_hash();
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EffectStatus {
    Requested,
    ResolvedOk,
    ResolvedError,
    Cancelled,
}

impl EffectStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requested => "requested",
            Self::ResolvedOk => "resolved_ok",
            Self::ResolvedError => "resolved_error",
            Self::Cancelled => "cancelled",
        }
    }
}

/// One effect as the journal describes it (the reference's `EffectRecord`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectRecord {
    pub effect_id: String,
    pub invocation_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invocation_hash: Option<String>,
    pub step_id: String,
    pub task_id: String,
    pub status: EffectStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_def_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_percent: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_step: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_eta: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_creation_input_tokens: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_model: Option<String>,
}

/// The last run-lifecycle event seen (`RUN_CREATED`, terminal events, process errors).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LifecycleMark {
    pub seq: u64,
    pub event_type: String,
}

/// Babysitter's effect index plus the run-level facts derived from the same fold.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EffectIndex {
    /// Effects keyed by effect id, in order of first request. Shared records: a snapshot
    /// copies the index under the run's write lock, and copying a pointer per effect keeps that
    /// cheap for long runs (a record is copied on write only while a snapshot still holds it).
    pub effects: IndexMap<String, Arc<EffectRecord>>,
    /// invocationKey → effectId.
    pub by_invocation: IndexMap<String, String>,
    pub last_lifecycle: Option<LifecycleMark>,
    /// Number of `RUN_ITERATION` events (the reference's iteration counter).
    pub iterations: u64,
    /// The effect resolved (or cancelled) most recently, in journal order.
    #[serde(default)]
    pub last_resolved: Option<String>,
    /// Positions in `effects` of the effects still `Requested`: derived (kept by [`Self::apply`],
    /// rebuilt when an index is deserialised), so that [`Self::pending`] costs the pending
    /// effects rather than the whole run — an engine iteration asks for them every time.
    #[serde(skip)]
    pending_at: BTreeSet<usize>,
    /// babysitter's `costStats`, from every `COST_TRACKED` applied (boxed: an index travels
    /// inside many futures, and most runs track no cost).
    #[serde(default)]
    pub costs: Box<crate::cost_stats::CostStats>,
    /// What the journal says about the run's budget (warnings, a wait for a raise).
    #[serde(default)]
    pub budget: Box<crate::budget_marks::BudgetMarks>,
}

/// The stored form of [`EffectIndex`] (everything but the derived pending set).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredIndex {
    effects: IndexMap<String, Arc<EffectRecord>>,
    by_invocation: IndexMap<String, String>,
    last_lifecycle: Option<LifecycleMark>,
    iterations: u64,
    #[serde(default)]
    last_resolved: Option<String>,
    #[serde(default)]
    costs: Box<crate::cost_stats::CostStats>,
    #[serde(default)]
    budget: Box<crate::budget_marks::BudgetMarks>,
}

impl<'de> Deserialize<'de> for EffectIndex {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = StoredIndex::deserialize(d)?;
        let pending_at = s
            .effects
            .values()
            .enumerate()
            .filter(|(_, r)| r.status == EffectStatus::Requested)
            .map(|(i, _)| i)
            .collect();
        Ok(Self {
            effects: s.effects,
            by_invocation: s.by_invocation,
            last_lifecycle: s.last_lifecycle,
            iterations: s.iterations,
            last_resolved: s.last_resolved,
            pending_at,
            costs: s.costs,
            budget: s.budget,
        })
    }
}

impl EffectIndex {
    /// Effects still `Requested`, in order of request.
    pub fn pending(&self) -> impl Iterator<Item = &EffectRecord> {
        self.pending_at
            .iter()
            .filter_map(|&i| self.effects.get_index(i).map(|(_, r)| &**r))
    }

    pub fn by_invocation_key(&self, key: &str) -> Option<&EffectRecord> {
        self.by_invocation
            .get(key)
            .and_then(|id| self.effects.get(id))
            .map(|r| &**r)
    }

    /// Checks that `events` would fold cleanly onto this index, without changing it: the batch
    /// is applied to a scratch index holding only the records it touches (by effect id and by
    /// invocation key), so the cost is the batch's, not the run's.
    pub fn check_batch(&self, events: &[(&StoredEvent, Location)]) -> Result<(), JournalError> {
        let mut scratch = EffectIndex::default();
        for (event, _) in events {
            let Some(d) = event.body.data.as_object() else {
                continue;
            };
            let by_id = d
                .get("effectId")
                .and_then(Value::as_str)
                .and_then(|id| self.effects.get(id));
            let by_key = d
                .get("invocationKey")
                .and_then(Value::as_str)
                .and_then(|k| self.by_invocation.get(k))
                .and_then(|id| self.effects.get(id));
            for r in by_id.into_iter().chain(by_key) {
                if !scratch.effects.contains_key(&r.effect_id) {
                    scratch
                        .by_invocation
                        .insert(r.invocation_key.clone(), r.effect_id.clone());
                    scratch.effects.insert(r.effect_id.clone(), r.clone());
                }
            }
        }
        for (event, at) in events {
            scratch.apply(event, at)?;
        }
        Ok(())
    }

    /// Applies one event; on error the index is unchanged.
    pub fn apply(&mut self, event: &StoredEvent, at: &impl Locate) -> Result<(), JournalError> {
        let fail = |reason: String| JournalError::Replay {
            at: at.locate(),
            reason,
        };
        let kind = &event.body.kind;
        match kind {
            EventType::RunCreated
            | EventType::RunCompleted
            | EventType::RunHalted
            | EventType::RunFailed
            | EventType::ProcessRuntimeError => {
                self.last_lifecycle = Some(LifecycleMark {
                    seq: event.seq,
                    event_type: kind.as_str().to_owned(),
                });
                Ok(())
            }
            EventType::RunIteration => {
                self.iterations += 1;
                Ok(())
            }
            EventType::EffectRequested => {
                let d = object(&event.body.data, "EFFECT_REQUESTED").map_err(fail)?;
                let effect_id = required(d, "effectId").map_err(fail)?;
                let invocation_key = required(d, "invocationKey").map_err(fail)?;
                let step_id = required(d, "stepId").map_err(fail)?;
                let task_id = required(d, "taskId").map_err(fail)?;
                let task_def_ref = required(d, "taskDefRef").map_err(fail)?;
                let inputs_ref = match d.get("inputsRef") {
                    None => None,
                    Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
                    Some(_) => return Err(fail("malformed journal event inputsRef".into())),
                };
                let labels = labels(d.get("labels")).map_err(fail)?;
                if self.effects.contains_key(effect_id) {
                    return Err(fail(format!("duplicate effectId detected: {effect_id}")));
                }
                if self.by_invocation.contains_key(invocation_key) {
                    return Err(fail(format!(
                        "duplicate invocation key detected: {invocation_key}"
                    )));
                }
                let record = EffectRecord {
                    effect_id: effect_id.to_owned(),
                    invocation_key: invocation_key.to_owned(),
                    invocation_hash: opt_str(d, "invocationHash"),
                    step_id: step_id.to_owned(),
                    task_id: task_id.to_owned(),
                    status: EffectStatus::Requested,
                    kind: opt_str(d, "kind"),
                    label: opt_str(d, "label"),
                    labels,
                    task_def_ref: Some(task_def_ref.to_owned()),
                    inputs_ref,
                    result_ref: None,
                    error: None,
                    stdout_ref: None,
                    stderr_ref: None,
                    requested_at: Some(event.body.recorded_at.clone()),
                    resolved_at: None,
                    progress_percent: None,
                    progress_label: None,
                    current_step: None,
                    progress_eta: None,
                    input_tokens: None,
                    output_tokens: None,
                    cache_creation_input_tokens: None,
                    cache_read_input_tokens: None,
                    cost_usd: None,
                    cost_model: None,
                };
                self.by_invocation
                    .insert(record.invocation_key.clone(), record.effect_id.clone());
                let (at, _) = self
                    .effects
                    .insert_full(record.effect_id.clone(), Arc::new(record));
                self.pending_at.insert(at);
                Ok(())
            }
            EventType::EffectResolved => {
                let d = object(&event.body.data, "EFFECT_RESOLVED").map_err(fail)?;
                let effect_id = required(d, "effectId").map_err(fail)?;
                let status = match d.get("status") {
                    None | Some(Value::Null) => {
                        return Err(fail(
                            "malformed EFFECT_RESOLVED event missing status".into(),
                        ));
                    }
                    Some(Value::String(s)) if s == "ok" => EffectStatus::ResolvedOk,
                    Some(Value::String(s)) if s == "error" => EffectStatus::ResolvedError,
                    Some(other) => {
                        return Err(fail(format!("unknown EFFECT_RESOLVED status {other}")));
                    }
                };
                let result_ref = opt_ref(d, "resultRef").map_err(fail)?;
                let stdout_ref = opt_ref(d, "stdoutRef").map_err(fail)?;
                let stderr_ref = opt_ref(d, "stderrRef").map_err(fail)?;
                let (at, _, record) = self.effects.get_full_mut(effect_id).ok_or_else(|| {
                    fail(format!(
                        "EFFECT_RESOLVED references unknown effectId {effect_id}"
                    ))
                })?;
                let record = Arc::make_mut(record);
                if record.status != EffectStatus::Requested {
                    return Err(fail(format!("effect {effect_id} already resolved")));
                }
                record.status = status;
                record.result_ref = result_ref;
                record.error = d.get("error").cloned();
                record.stdout_ref = stdout_ref;
                record.stderr_ref = stderr_ref;
                record.resolved_at = Some(event.body.recorded_at.clone());
                self.pending_at.remove(&at);
                self.last_resolved = Some(effect_id.to_owned());
                Ok(())
            }
            EventType::EffectCancelled => {
                let d = object(&event.body.data, "EFFECT_CANCELLED").map_err(fail)?;
                let effect_id = required(d, "effectId").map_err(fail)?;
                let (at, _, record) = self.effects.get_full_mut(effect_id).ok_or_else(|| {
                    fail(format!(
                        "EFFECT_CANCELLED references unknown effectId {effect_id}"
                    ))
                })?;
                let record = Arc::make_mut(record);
                if record.status != EffectStatus::Requested {
                    return Err(fail(format!(
                        "effect {effect_id} is not requested (status={})",
                        record.status.as_str()
                    )));
                }
                record.status = EffectStatus::Cancelled;
                record.resolved_at = Some(event.body.recorded_at.clone());
                self.pending_at.remove(&at);
                self.last_resolved = Some(effect_id.to_owned());
                Ok(())
            }
            EventType::EffectProgress => {
                let d = object(&event.body.data, "EFFECT_PROGRESS").map_err(fail)?;
                let Some(record) = d
                    .get("effectId")
                    .and_then(Value::as_str)
                    .and_then(|id| self.effects.get_mut(id))
                    .map(Arc::make_mut)
                else {
                    return Ok(());
                };
                if let Some(n) = d.get("progressPercent").and_then(Value::as_f64) {
                    record.progress_percent = Some(n);
                }
                set_str(&mut record.progress_label, d, "progressLabel");
                set_str(&mut record.current_step, d, "currentStep");
                set_str(&mut record.progress_eta, d, "progressEta");
                Ok(())
            }
            EventType::CostTracked => {
                let d = object(&event.body.data, "COST_TRACKED").map_err(fail)?;
                self.costs.add(d, &event.body.recorded_at);
                let Some(record) = d
                    .get("effectId")
                    .and_then(Value::as_str)
                    .and_then(|id| self.effects.get_mut(id))
                    .map(Arc::make_mut)
                else {
                    return Ok(());
                };
                let num = |k: &str| d.get(k).and_then(Value::as_f64);
                add(&mut record.input_tokens, num("inputTokens"));
                add(&mut record.output_tokens, num("outputTokens"));
                add(
                    &mut record.cache_creation_input_tokens,
                    num("cacheCreationInputTokens").or(num("cacheCreationTokens")),
                );
                add(
                    &mut record.cache_read_input_tokens,
                    num("cacheReadInputTokens").or(num("cacheReadTokens")),
                );
                add(&mut record.cost_usd, num("costUsd"));
                set_str(&mut record.cost_model, d, "model");
                Ok(())
            }
            EventType::ProcessAssigned
            | EventType::ProcessCodeHashChanged
            | EventType::ProcessLog
            | EventType::StopHookInvoked => Ok(()),
            EventType::Other(name) => {
                self.budget
                    .apply(name, &event.body.data, &event.body.recorded_at);
                Ok(())
            }
        }
    }
}

fn object<'a>(data: &'a Value, ty: &str) -> Result<&'a Map<String, Value>, String> {
    data.as_object()
        .ok_or_else(|| format!("malformed {ty} event payload"))
}

fn required<'a>(d: &'a Map<String, Value>, field: &str) -> Result<&'a str, String> {
    match d.get(field) {
        Some(Value::String(s)) if !s.is_empty() => Ok(s),
        _ => Err(format!("malformed journal event missing {field}")),
    }
}

fn opt_str(d: &Map<String, Value>, field: &str) -> Option<String> {
    d.get(field).and_then(Value::as_str).map(str::to_owned)
}

fn opt_ref(d: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match d.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(collapse_doubled_runs(s))),
        Some(_) => Err(format!("malformed EFFECT_RESOLVED {field}")),
    }
}

/// `.a5c/runs/.a5c/runs/` → `.a5c/runs/`, `.a5c/.a5c/` → `.a5c/` (the reference's ref repair).
fn collapse_doubled_runs(s: &str) -> String {
    let mut out = s.to_owned();
    while out.contains(".a5c/runs/.a5c/runs/") {
        out = out.replace(".a5c/runs/.a5c/runs/", ".a5c/runs/");
    }
    while out.contains(".a5c/.a5c/") {
        out = out.replace(".a5c/.a5c/", ".a5c/");
    }
    out
}

fn labels(v: Option<&Value>) -> Result<Option<Vec<String>>, String> {
    let Some(v) = v else { return Ok(None) };
    let Value::Array(items) = v else {
        return Err("malformed EFFECT_REQUESTED labels payload".into());
    };
    let mut out: Vec<String> = Vec::new();
    for item in items {
        let Value::String(s) = item else {
            return Err("malformed EFFECT_REQUESTED labels entry".into());
        };
        let t = s.trim();
        if !t.is_empty() && !out.iter().any(|x| x == t) {
            out.push(t.to_owned());
        }
    }
    Ok(if out.is_empty() { None } else { Some(out) })
}

fn set_str(slot: &mut Option<String>, d: &Map<String, Value>, field: &str) {
    if let Some(s) = d.get(field).and_then(Value::as_str) {
        *slot = Some(s.to_owned());
    }
}

fn add(slot: &mut Option<f64>, v: Option<f64>) {
    if let Some(v) = v {
        *slot = Some(slot.unwrap_or(0.0) + v);
    }
}
