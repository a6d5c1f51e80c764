//! babysitter's `costStats` (its `computeRunCostStats`), which `RUN_COMPLETED` carries when a
//! run has any `COST_TRACKED` event: totals, per model and per task kind. Kept by the effect
//! index as each `COST_TRACKED` is applied, so completing a run costs no journal read, and a
//! rebuilt index rebuilds it (a pure function of the journal, like the rest of the index).
//!
//! babysitter's rules: every `COST_TRACKED` counts, with or without an effect; tokens are
//! `inputTokens`, `outputTokens`, `cacheCreationTokens`, `cacheReadTokens` (0 when absent); a
//! missing model is `unknown`, a missing `taskKind` too; dollar figures are rounded to six
//! decimals when written. An event without `costUsd` counts 0 dollars here (babysitter would
//! price it from its own table; this implementation always writes `costUsd`).

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Totals of one model.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelCost {
    pub event_count: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation_tokens: u64,
    pub cache_read_tokens: u64,
    pub cost_usd: f64,
}

/// Totals of one task kind.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KindCost {
    pub event_count: u64,
    pub cost_usd: f64,
}

/// A run's cost statistics so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CostStats {
    pub event_count: u64,
    /// `recordedAt` of the first `COST_TRACKED` (babysitter's `date`).
    pub first_at: Option<String>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_creation: u64,
    pub cache_read: u64,
    pub cost_usd: f64,
    pub by_model: IndexMap<String, ModelCost>,
    pub by_kind: IndexMap<String, KindCost>,
}

fn round6(x: f64) -> f64 {
    (x * 1_000_000.0).round() / 1_000_000.0
}

impl CostStats {
    /// Adds one `COST_TRACKED` event's data.
    pub fn add(&mut self, d: &Map<String, Value>, recorded_at: &str) {
        let n = |k: &str| {
            d.get(k)
                .and_then(|v| v.as_u64().or_else(|| v.as_f64().map(|f| f.max(0.0) as u64)))
                .unwrap_or(0)
        };
        let (input, output) = (n("inputTokens"), n("outputTokens"));
        let (creation, read) = (n("cacheCreationTokens"), n("cacheReadTokens"));
        let cost = d.get("costUsd").and_then(Value::as_f64).unwrap_or(0.0);
        self.event_count += 1;
        if self.first_at.is_none() {
            self.first_at = Some(recorded_at.to_owned());
        }
        self.input_tokens += input;
        self.output_tokens += output;
        self.cache_creation += creation;
        self.cache_read += read;
        self.cost_usd += cost;
        let name = |k: &str| {
            d.get(k)
                .and_then(Value::as_str)
                .unwrap_or("unknown")
                .to_owned()
        };
        let m = self.by_model.entry(name("model")).or_default();
        m.event_count += 1;
        m.input_tokens += input;
        m.output_tokens += output;
        m.cache_creation_tokens += creation;
        m.cache_read_tokens += read;
        m.cost_usd += cost;
        let k = self.by_kind.entry(name("taskKind")).or_default();
        k.event_count += 1;
        k.cost_usd += cost;
    }

    /// babysitter's `costStats` document for run `run_id` (`None`: no `COST_TRACKED` at all,
    /// and `RUN_COMPLETED` then carries none).
    pub fn to_json(&self, run_id: &str) -> Option<Value> {
        if self.event_count == 0 {
            return None;
        }
        let by_model: Map<String, Value> = self
            .by_model
            .iter()
            .map(|(model, m)| {
                let v = json!({"model": model, "eventCount": m.event_count,
                    "inputTokens": m.input_tokens, "outputTokens": m.output_tokens,
                    "cacheCreationTokens": m.cache_creation_tokens,
                    "cacheReadTokens": m.cache_read_tokens, "costUsd": round6(m.cost_usd)});
                (model.clone(), v)
            })
            .collect();
        let by_kind: Map<String, Value> = self
            .by_kind
            .iter()
            .map(|(kind, k)| {
                let v = json!({"kind": kind, "eventCount": k.event_count, "costUsd": round6(k.cost_usd)});
                (kind.clone(), v)
            })
            .collect();
        Some(
            json!({"runId": run_id, "date": self.first_at, "eventCount": self.event_count,
            "totalInputTokens": self.input_tokens, "totalOutputTokens": self.output_tokens,
            "totalCacheCreation": self.cache_creation, "totalCacheRead": self.cache_read,
            "totalCostUsd": round6(self.cost_usd), "byModel": by_model, "byKind": by_kind}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn cost_events_add_up_per_run_model_and_kind_as_babysitter_counts_them() {
        let mut s = CostStats::default();
        assert_eq!(s.to_json("r"), None, "no COST_TRACKED, no costStats");
        s.add(
            &data(
                json!({"model": "m1", "taskKind": "agent", "inputTokens": 100, "outputTokens": 20,
                         "cacheCreationTokens": 5, "cacheReadTokens": 7, "costUsd": 0.1000004}),
            ),
            "2026-12-06T00:00:00.000Z",
        );
        s.add(
            &data(json!({"model": "m2", "inputTokens": 1, "outputTokens": 2, "costUsd": 0.2})),
            "2026-12-06T00:00:01.000Z",
        );
        s.add(
            &data(json!({"model": "m1", "taskKind": "agent", "inputTokens": 3})),
            "later",
        );
        let j = s.to_json("r").unwrap();
        assert_eq!(j["runId"], "r");
        assert_eq!(j["date"], "2026-12-06T00:00:00.000Z");
        assert_eq!(j["eventCount"], 3);
        assert_eq!(j["totalInputTokens"], 104);
        assert_eq!(j["totalOutputTokens"], 22);
        assert_eq!(j["totalCacheCreation"], 5);
        assert_eq!(j["totalCacheRead"], 7);
        assert_eq!(j["totalCostUsd"], 0.3);
        assert_eq!(
            j["byModel"]["m1"],
            json!({"model": "m1", "eventCount": 2, "inputTokens": 103, "outputTokens": 20,
                   "cacheCreationTokens": 5, "cacheReadTokens": 7, "costUsd": 0.1})
        );
        assert_eq!(
            j["byKind"],
            json!({"agent": {"kind": "agent", "eventCount": 2, "costUsd": 0.1},
                   "unknown": {"kind": "unknown", "eventCount": 1, "costUsd": 0.2}})
        );
        let keys: Vec<&String> = j.as_object().unwrap().keys().collect();
        assert_eq!(
            keys,
            [
                "runId",
                "date",
                "eventCount",
                "totalInputTokens",
                "totalOutputTokens",
                "totalCacheCreation",
                "totalCacheRead",
                "totalCostUsd",
                "byModel",
                "byKind"
            ]
        );
    }
}
