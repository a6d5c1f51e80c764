//! babysitter's state cache, `state/state.json`: a pure function of the journal, kept for the
//! tools that read it, and rebuilt whenever it is missing, unparseable or behind the journal.
//!
//! Key order and field presence follow the reference's `stateCache.ts` exactly (§2.8 of the
//! core spec), so the file it rebuilds equals the reference's field by field.

use serde_json::{Map, Value, json};

use crate::Head;
use crate::index::EffectIndex;

pub const SCHEMA_VERSION: &str = "2026.01.state-cache";
pub const SDK_VERSION: &str = "6.0.0";

/// Why a cache was (re)built; the strings are babysitter's `rebuildReason` values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Freshness {
    /// The stored cache matches the journal head.
    Fresh,
    Missing,
    Corrupt,
    JournalMismatch,
}

impl Freshness {
    pub fn rebuild_reason(&self) -> Option<&'static str> {
        match self {
            Self::Fresh => None,
            Self::Missing => Some("missing_cache"),
            Self::Corrupt => Some("corrupt_cache"),
            Self::JournalMismatch => Some("journal_mismatch"),
        }
    }
}

/// Builds the cache document for `index` at `head`.
pub fn build(
    index: &EffectIndex,
    head: &Head,
    saved_at: &str,
    rebuild_reason: Option<&str>,
) -> Value {
    let mut effects = Map::new();
    for r in index.effects.values() {
        let mut s = Map::new();
        s.insert("effectId".into(), json!(r.effect_id));
        s.insert("invocationKey".into(), json!(r.invocation_key));
        s.insert("status".into(), json!(r.status.as_str()));
        let mut opt = |k: &str, v: &Option<String>| {
            if let Some(v) = v.as_deref().filter(|v| !v.is_empty()) {
                s.insert(k.into(), json!(v));
            }
        };
        opt("kind", &r.kind);
        opt("label", &r.label);
        opt("taskId", &Some(r.task_id.clone()));
        opt("stepId", &Some(r.step_id.clone()));
        opt("requestedAt", &r.requested_at);
        opt("resolvedAt", &r.resolved_at);
        effects.insert(r.invocation_key.clone(), Value::Object(s));
    }
    let mut pending: Map<String, Value> = Map::new();
    for r in index.pending() {
        let k = r.kind.clone().unwrap_or_else(|| "unknown".into());
        let n = pending.get(&k).and_then(Value::as_u64).unwrap_or(0) + 1;
        pending.insert(k, json!(n));
    }
    let journal_head = if head.seq == 0 {
        Value::Null
    } else {
        json!({"seq": head.seq, "ulid": head.ulid})
    };
    let mut doc = Map::new();
    doc.insert("schemaVersion".into(), json!(SCHEMA_VERSION));
    doc.insert("savedAt".into(), json!(saved_at));
    doc.insert("sdkVersion".into(), json!(SDK_VERSION));
    doc.insert("journalHead".into(), journal_head);
    doc.insert("stateVersion".into(), json!(head.seq));
    doc.insert("effectsByInvocation".into(), Value::Object(effects));
    doc.insert("pendingEffectsByKind".into(), Value::Object(pending));
    doc.insert(
        "rebuildReason".into(),
        rebuild_reason.map_or(Value::Null, |r| json!(r)),
    );
    Value::Object(doc)
}

/// Decides whether stored cache bytes can be used for a journal at `head` (the reference's
/// `journalHeadsEqual`: seq and ULID, and checksum only when both sides have one).
pub fn freshness(stored: Option<&[u8]>, head: &Head) -> Freshness {
    let Some(bytes) = stored else {
        return Freshness::Missing;
    };
    let Ok(Value::Object(doc)) = serde_json::from_slice::<Value>(bytes) else {
        return Freshness::Corrupt;
    };
    let stored_head = match doc.get("journalHead") {
        None | Some(Value::Null) => None,
        Some(Value::Object(h)) => match (
            h.get("seq").and_then(Value::as_u64),
            h.get("ulid").and_then(Value::as_str),
        ) {
            (Some(seq), Some(ulid)) if !ulid.is_empty() => Some((seq, ulid.to_owned())),
            _ => None,
        },
        Some(_) => return Freshness::Corrupt,
    };
    let matches = match stored_head {
        None => head.seq == 0,
        Some((seq, ulid)) => seq == head.seq && ulid == head.ulid,
    };
    if matches {
        Freshness::Fresh
    } else {
        Freshness::JournalMismatch
    }
}
