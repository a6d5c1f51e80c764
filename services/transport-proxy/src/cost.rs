//! The cost-feedback sink (spec §2.3): requests that carry babysitter's `x-babysitter-*`
//! headers (run, session, effect, task, idempotency key) get one cost record when they finish,
//! with the upstream's usage in canonical quantities (cache counted once). The orchestrator
//! turns these into `COST_TRACKED` journal events.
//!
//! Why a JSON-lines file under `data-dir`: it is written once per request, off the response
//! path's critical section (after the last byte), survives a proxy restart, and can be tailed
//! by any consumer; without a data dir the record goes to the log at info level. The headers
//! themselves never reach an upstream (only an allow-list of headers is forwarded).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use http::HeaderMap;
use serde_json::{Map, Value, json};

use crate::canonical::Usage;

const FILE_NAME: &str = "cost.jsonl";

/// The babysitter headers of one request.
#[derive(Debug, Clone, PartialEq)]
pub struct CostContext {
    fields: Map<String, Value>,
}

impl CostContext {
    /// `Some` when the request names a run, session, effect or idempotency key.
    pub fn from_headers(headers: &HeaderMap) -> Option<Self> {
        const FIELDS: [(&str, &str); 7] = [
            ("x-babysitter-run-id", "run_id"),
            ("x-babysitter-session-id", "session_id"),
            ("x-babysitter-effect-id", "effect_id"),
            ("x-babysitter-task-id", "task_id"),
            ("x-babysitter-task-kind", "task_kind"),
            ("x-babysitter-cost-source", "cost_source"),
            ("x-babysitter-cost-idempotency-key", "idempotency_key"),
        ];
        let mut fields = Map::new();
        for (header, key) in FIELDS {
            if let Some(v) = headers.get(header).and_then(|v| v.to_str().ok()) {
                fields.insert(key.to_owned(), json!(v));
            }
        }
        let keyed = ["run_id", "session_id", "effect_id", "idempotency_key"]
            .iter()
            .any(|k| fields.contains_key(*k));
        keyed.then_some(Self { fields })
    }
}

/// Where cost records go; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct CostSink {
    file: Option<Arc<Mutex<File>>>,
}

impl CostSink {
    /// Appends to `<dir>/cost.jsonl`.
    pub fn open(dir: &Path) -> std::io::Result<Self> {
        std::fs::create_dir_all(dir)?;
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(FILE_NAME))?;
        Ok(Self {
            file: Some(Arc::new(Mutex::new(f))),
        })
    }

    /// Records one finished request.
    pub fn record(&self, ctx: &CostContext, route: &str, model: &str, usage: &Usage, failed: bool) {
        let mut v = Value::Object(ctx.fields.clone());
        v["at_ms"] = json!(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0)
        );
        v["route"] = json!(route);
        v["model"] = json!(model);
        v["input_tokens"] = json!(usage.input.unwrap_or(0));
        v["output_tokens"] = json!(usage.output.unwrap_or(0));
        v["cache_read_tokens"] = json!(usage.cache_read.unwrap_or(0));
        v["cache_write_tokens"] = json!(usage.cache_write.unwrap_or(0));
        v["reasoning_tokens"] = json!(usage.reasoning.unwrap_or(0));
        v["failed"] = json!(failed);
        match &self.file {
            Some(f) => {
                if let Ok(mut f) = f.lock()
                    && let Err(e) = writeln!(f, "{v}")
                {
                    tracing::warn!(error = %e, "cost record not written");
                }
            }
            None => tracing::info!(cost = %v, "cost record"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_only_keyed_requests_with_canonical_usage() {
        let mut h = HeaderMap::new();
        h.insert(
            "x-babysitter-task-kind",
            http::HeaderValue::from_static("agent"),
        );
        assert!(
            CostContext::from_headers(&h).is_none(),
            "no run/session/effect/key"
        );
        h.insert(
            "x-babysitter-run-id",
            http::HeaderValue::from_static("run-1"),
        );
        let ctx = CostContext::from_headers(&h).unwrap_or_else(|| panic!("keyed"));
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let sink = CostSink::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let usage = Usage {
            input: Some(10),
            cache_read: Some(5),
            output: Some(3),
            ..Usage::default()
        };
        sink.record(&ctx, "r", "m", &usage, false);
        let text = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap_or_default();
        let v: Value = serde_json::from_str(text.trim()).unwrap_or_default();
        assert_eq!(v["run_id"], "run-1");
        assert_eq!(v["task_kind"], "agent");
        assert_eq!(
            (v["input_tokens"].as_u64(), v["cache_read_tokens"].as_u64()),
            (Some(10), Some(5))
        );
    }
}
