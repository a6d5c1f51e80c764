//! The cost-feedback sink (spec §2.3): requests that carry babysitter's `x-babysitter-*`
//! headers (run, session, effect, task, idempotency key) get one cost record when they finish,
//! with the upstream's usage in canonical quantities (cache counted once).
//!
//! Why a JSON-lines file under `data-dir`: it is written once per request, off the response
//! path's critical section (after the last byte), survives a proxy restart, and can be tailed
//! by any consumer; without a data dir the record goes to the log at info level. The headers
//! themselves never reach an upstream (only an allow-list of headers is forwarded).
//!
//! A sink can also *collect* ([`CostSink::collecting`]): every finished generate request of the
//! proxy, keyed by babysitter headers or not, is kept in memory as a [`RequestRecord`] for the
//! proxy's owner to take ([`RequestLog::settle`]). The harness launcher's in-process proxy — one
//! per task — is run this way, and the launcher returns the records with the task, which the
//! orchestrator journals as one `COST_TRACKED` per request. Why in memory and not the file: the
//! owner wants exactly this instance's requests, once, when the task ends; there is no one else
//! to read them, and nothing to clean up afterwards.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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

/// One finished generate request, as the proxy saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    /// The `x-request-id` the proxy answered with (the client's, or one it minted); unique
    /// among the records of one [`RequestLog`] (see [`RequestLog::settle`]).
    pub request_id: String,
    /// The route that carried it.
    pub route: String,
    /// The model sent upstream.
    pub model: String,
    /// The upstream's usage in canonical quantities: `input` without cache reads and writes.
    pub usage: Usage,
    /// The request failed (before the upstream answered, or its stream ended in an error);
    /// `usage` then holds whatever the upstream had reported.
    pub failed: bool,
    /// From the proxy's decoding of the request to its last byte (or failure).
    pub duration: Duration,
}

/// The in-memory side of a collecting sink.
#[derive(Debug)]
struct Collector {
    records: Mutex<Vec<RequestRecord>>,
    /// Requests begun and not yet finished.
    in_flight: tokio::sync::watch::Sender<usize>,
}

/// One request in flight in a collecting sink: finished (and counted out) when dropped, so a
/// stream whose task never reports still lets [`RequestLog::settle`] return.
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Collector>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// The owner's handle on a collecting sink's records.
#[derive(Debug, Clone)]
pub struct RequestLog(Arc<Collector>);

impl RequestLog {
    /// Takes the records so far, after waiting (at most `grace`) for requests still in flight
    /// to finish: a stream's last bytes can reach the client a moment before its record is
    /// written. A request id the client reused is made unique with a `#<n>` suffix (each
    /// record is a separate upstream call and counts on its own).
    pub async fn settle(&self, grace: Duration) -> Vec<RequestRecord> {
        let mut rx = self.0.in_flight.subscribe();
        if tokio::time::timeout(grace, rx.wait_for(|n| *n == 0))
            .await
            .is_err()
        {
            tracing::warn!(
                in_flight = *rx.borrow(),
                "requests still in flight when their records were taken; they are left out"
            );
        }
        let records =
            std::mem::take(&mut *self.0.records.lock().unwrap_or_else(|p| p.into_inner()));
        unique_ids(records)
    }
}

/// Suffixes repeated request ids with `#2`, `#3`, … (in order), skipping any taken already.
fn unique_ids(mut records: Vec<RequestRecord>) -> Vec<RequestRecord> {
    let mut seen: HashSet<String> = HashSet::with_capacity(records.len());
    for r in &mut records {
        if !seen.insert(r.request_id.clone()) {
            let base = r.request_id.clone();
            let mut n = 2;
            while seen.contains(&format!("{base}#{n}")) {
                n += 1;
            }
            r.request_id = format!("{base}#{n}");
            seen.insert(r.request_id.clone());
        }
    }
    records
}

/// Where cost records go; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct CostSink {
    file: Option<Arc<Mutex<File>>>,
    collector: Option<Arc<Collector>>,
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
            collector: None,
        })
    }

    /// This sink, also keeping every finished request in memory for the returned log; keyed
    /// requests still go to the file or the log as before.
    pub fn collecting(self) -> (Self, RequestLog) {
        let collector = Arc::new(Collector {
            records: Mutex::default(),
            in_flight: tokio::sync::watch::Sender::new(0),
        });
        let log = RequestLog(collector.clone());
        (
            Self {
                collector: Some(collector),
                ..self
            },
            log,
        )
    }

    /// Whether finished requests are kept for a [`RequestLog`].
    pub(crate) fn collects(&self) -> bool {
        self.collector.is_some()
    }

    /// A request has begun: a collecting sink counts it in flight until the guard drops.
    pub(crate) fn begin(&self) -> Option<Arc<InFlight>> {
        self.collector.as_ref().map(|c| {
            c.in_flight.send_modify(|n| *n += 1);
            Arc::new(InFlight(c.clone()))
        })
    }

    /// Records one finished request: kept when collecting, and written (file or log) when the
    /// request carried babysitter's headers.
    pub fn finish(&self, ctx: Option<&CostContext>, rec: RequestRecord) {
        if let Some(ctx) = ctx {
            self.write(ctx, &rec);
        }
        if let Some(c) = &self.collector {
            c.records
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(rec);
        }
    }

    fn write(&self, ctx: &CostContext, rec: &RequestRecord) {
        let usage = &rec.usage;
        let mut v = Value::Object(ctx.fields.clone());
        v["at_ms"] = json!(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis())
                .unwrap_or(0)
        );
        v["request_id"] = json!(rec.request_id);
        v["route"] = json!(rec.route);
        v["model"] = json!(rec.model);
        v["input_tokens"] = json!(usage.input.unwrap_or(0));
        v["output_tokens"] = json!(usage.output.unwrap_or(0));
        v["cache_read_tokens"] = json!(usage.cache_read.unwrap_or(0));
        v["cache_write_tokens"] = json!(usage.cache_write.unwrap_or(0));
        v["reasoning_tokens"] = json!(usage.reasoning.unwrap_or(0));
        v["failed"] = json!(rec.failed);
        v["duration_ms"] = json!(rec.duration.as_millis());
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

    fn record(id: &str, usage: Usage) -> RequestRecord {
        RequestRecord {
            request_id: id.to_owned(),
            route: "r".into(),
            model: "m".into(),
            usage,
            failed: false,
            duration: Duration::from_millis(5),
        }
    }

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
        sink.finish(Some(&ctx), record("req-1", usage));
        let text = std::fs::read_to_string(dir.path().join(FILE_NAME)).unwrap_or_default();
        let v: Value = serde_json::from_str(text.trim()).unwrap_or_default();
        assert_eq!(v["run_id"], "run-1");
        assert_eq!(v["task_kind"], "agent");
        assert_eq!(v["request_id"], "req-1");
        assert_eq!(
            (v["input_tokens"].as_u64(), v["cache_read_tokens"].as_u64()),
            (Some(10), Some(5))
        );
    }

    #[tokio::test]
    async fn a_collecting_sink_keeps_every_request_with_unique_ids_after_those_in_flight() {
        let (sink, log) = CostSink::default().collecting();
        let usage = Usage {
            input: Some(1),
            ..Usage::default()
        };
        sink.finish(None, record("a", usage));
        // One in flight: settle waits for it (its record lands when the stream ends).
        let flight = sink.begin();
        let later = {
            let sink = sink.clone();
            tokio::spawn(async move {
                tokio::task::yield_now().await;
                sink.finish(None, record("a", usage));
                drop(flight);
            })
        };
        let got = log.settle(Duration::from_secs(30)).await;
        later.await.unwrap_or_else(|e| panic!("{e}"));
        let ids: Vec<&str> = got.iter().map(|r| r.request_id.as_str()).collect();
        assert_eq!(ids, ["a", "a#2"], "a reused id is made unique");
        assert!(log.settle(Duration::ZERO).await.is_empty(), "taken once");
        // The plain sink keeps nothing.
        assert!(CostSink::default().begin().is_none());
    }

    #[test]
    fn unique_ids_skip_suffixes_already_taken() {
        let u = Usage::default();
        let got = unique_ids(vec![record("x", u), record("x#2", u), record("x", u)]);
        let ids: Vec<&str> = got.iter().map(|r| r.request_id.as_str()).collect();
        assert_eq!(ids, ["x", "x#2", "x#3"]);
    }
}
