//! A task's model usage as `COST_TRACKED` journal events — the one rule the orchestrator and
//! `babysitter run` both follow when they commit a task's result.
//!
//! A task can report its usage twice over: the harness CLI prints a per-task total, and when
//! its model traffic went through a transport proxy the worker ran for it, the proxy measured
//! every request. Journaling both would count the same tokens twice, so the rule is: with
//! per-request records, one `COST_TRACKED` per request (`source: "proxy"`, each with an
//! `idempotencyKey` of `<effectId>/<attempt>/<requestId>` so a consumer can tell them apart and
//! recognise a repeat), and the harness's total is left out; without them, the total alone
//! (`source: "harness"`). The proxy's figures win because they are what the upstream reported
//! for each call, not a harness's summary of them. Every consumer (the effect index, `costStats`,
//! budgets, `GetRunCost`) adds the events up per effect, so either way the sums are right.
//!
//! Fields are written in the order of babysitter's `COST_TRACKED` table
//! (`babysitter-core.md` §2.3).

use babysitter_journal::{EventType, NewEvent};
use serde_json::{Map, Value, json};

/// The harness's own per-task total, journaled when no per-request records came with it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Usage {
    pub provider: String,
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_usd: f64,
}

/// One model request a transport proxy made for the task.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestUsage {
    /// Unique among the task's requests (the proxy's `x-request-id`).
    pub request_id: String,
    pub provider: String,
    pub model: String,
    /// Without cache reads and writes.
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_usd: f64,
    pub failed: bool,
    pub duration_ms: u64,
}

/// What a task reported about its model usage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskUsage {
    /// The harness's per-task total.
    pub total: Option<Usage>,
    /// The proxy's per-request records, in order.
    pub requests: Vec<RequestUsage>,
}

/// The token and cost fields common to both kinds of event, in the table's order up to
/// `effectId` (`model`, `provider`, the four token counts).
struct Figures<'a> {
    model: &'a str,
    provider: &'a str,
    input: u64,
    output: u64,
    cache_write: u64,
    cache_read: u64,
}

impl Figures<'_> {
    fn start(&self, effect_id: &str, kind: Option<&str>, source: &str) -> Map<String, Value> {
        let mut d = Map::new();
        d.insert("model".into(), json!(self.model));
        d.insert("provider".into(), json!(self.provider));
        d.insert("inputTokens".into(), json!(self.input));
        d.insert("outputTokens".into(), json!(self.output));
        d.insert("cacheCreationTokens".into(), json!(self.cache_write));
        d.insert("cacheReadTokens".into(), json!(self.cache_read));
        d.insert("effectId".into(), json!(effect_id));
        if let Some(k) = kind {
            d.insert("taskKind".into(), json!(k));
        }
        d.insert("source".into(), json!(source));
        d
    }
}

impl TaskUsage {
    /// The `COST_TRACKED` events of effect `effect_id` (of kind `kind`) for this usage, to be
    /// journaled in the same append as the effect's resolution; `attempt` is the lease's
    /// attempt (1 when the task was not leased, e.g. `babysitter run` or a posted result).
    pub fn events(
        &self,
        effect_id: &str,
        kind: Option<&str>,
        attempt: Option<u32>,
    ) -> Vec<NewEvent> {
        if self.requests.is_empty() {
            return self
                .total
                .iter()
                .map(|u| {
                    let mut d = Figures {
                        model: &u.model,
                        provider: &u.provider,
                        input: u.input_tokens,
                        output: u.output_tokens,
                        cache_write: u.cache_write_tokens,
                        cache_read: u.cache_read_tokens,
                    }
                    .start(effect_id, kind, "harness");
                    d.insert("costUsd".into(), json!(u.cost_usd));
                    NewEvent::new(EventType::CostTracked, Value::Object(d))
                })
                .collect();
        }
        let attempt = attempt.unwrap_or(1);
        self.requests
            .iter()
            .map(|r| {
                let mut d = Figures {
                    model: &r.model,
                    provider: &r.provider,
                    input: r.input_tokens,
                    output: r.output_tokens,
                    cache_write: r.cache_write_tokens,
                    cache_read: r.cache_read_tokens,
                }
                .start(effect_id, kind, "proxy");
                d.insert(
                    "idempotencyKey".into(),
                    json!(format!("{effect_id}/{attempt}/{}", r.request_id)),
                );
                d.insert("durationMs".into(), json!(r.duration_ms));
                d.insert("costUsd".into(), json!(r.cost_usd));
                NewEvent::new(EventType::CostTracked, Value::Object(d))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn total() -> Usage {
        Usage {
            provider: "p".into(),
            model: "m".into(),
            input_tokens: 1000,
            output_tokens: 100,
            cache_read_tokens: 10,
            cache_write_tokens: 1,
            cost_usd: 0.5,
        }
    }

    fn request(id: &str, input: u64) -> RequestUsage {
        RequestUsage {
            request_id: id.into(),
            provider: "p".into(),
            model: "up-m".into(),
            input_tokens: input,
            output_tokens: 7,
            cache_read_tokens: 3,
            cache_write_tokens: 2,
            cost_usd: 0.25,
            failed: false,
            duration_ms: 42,
        }
    }

    fn data(e: &NewEvent) -> &Map<String, Value> {
        assert_eq!(e.kind, EventType::CostTracked);
        e.data.as_object().unwrap_or_else(|| panic!("{:?}", e.data))
    }

    #[test]
    fn per_request_records_are_journaled_one_each_from_the_proxy_and_the_total_is_not() {
        let u = TaskUsage {
            total: Some(total()),
            requests: vec![request("req_a", 11), request("req_b", 22)],
        };
        let events = u.events("E1", Some("agent"), Some(3));
        assert_eq!(events.len(), 2, "one per request, none for the total");
        let keys: Vec<&Value> = events.iter().map(|e| &data(e)["idempotencyKey"]).collect();
        assert_eq!(keys, [&json!("E1/3/req_a"), &json!("E1/3/req_b")]);
        let inputs: Vec<&Value> = events.iter().map(|e| &data(e)["inputTokens"]).collect();
        assert_eq!(
            inputs,
            [&json!(11), &json!(22)],
            "each request's own figures"
        );
        let d = data(&events[0]);
        assert_eq!(d["source"], "proxy");
        assert_eq!(d["model"], "up-m");
        assert_eq!(
            (
                d["cacheCreationTokens"].as_u64(),
                d["cacheReadTokens"].as_u64()
            ),
            (Some(2), Some(3))
        );
        assert_eq!(
            (d["durationMs"].as_u64(), d["costUsd"].as_f64()),
            (Some(42), Some(0.25))
        );
        let order: Vec<&str> = d.keys().map(String::as_str).collect();
        assert_eq!(
            order,
            [
                "model",
                "provider",
                "inputTokens",
                "outputTokens",
                "cacheCreationTokens",
                "cacheReadTokens",
                "effectId",
                "taskKind",
                "source",
                "idempotencyKey",
                "durationMs",
                "costUsd"
            ],
            "babysitter's field order"
        );
        // Not leased: attempt 1.
        let unleased = u.events("E1", None, None);
        assert_eq!(data(&unleased[1])["idempotencyKey"], "E1/1/req_b");
        assert!(!data(&unleased[1]).contains_key("taskKind"));
    }

    #[test]
    fn without_per_request_records_the_harness_total_is_journaled_once() {
        let u = TaskUsage {
            total: Some(total()),
            requests: Vec::new(),
        };
        let events = u.events("E1", Some("agent"), Some(1));
        assert_eq!(events.len(), 1);
        let d = data(&events[0]);
        assert_eq!(d["source"], "harness");
        assert_eq!(
            (d["inputTokens"].as_u64(), d["costUsd"].as_f64()),
            (Some(1000), Some(0.5))
        );
        assert!(!d.contains_key("idempotencyKey"));
        assert!(TaskUsage::default().events("E1", None, None).is_empty());
    }
}
