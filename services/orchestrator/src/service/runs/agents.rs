//! Agent events: the universal events a worker reports for the task it holds a lease on.
//!
//! Live, they are redacted and fanned out to the run's watchers, only while someone watches:
//! each live run entry has a broadcast channel created by its first watcher and dropped with the
//! entry when the run ends (watchers still receive what was buffered). A watcher that falls more
//! than the buffer behind loses the oldest batches; a worker never waits for one.
//!
//! For the record, the completion carries the attempt's events again without the deltas
//! ([`record`]): stored once, with the result, as a JSON-lines blob that `result.json` names —
//! not as journal events, which would put thousands of entries per agent task on the replay
//! path for something only people read.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;
use serde_json::{Value, json};

use super::resolve::set_metadata;
use super::{RunManager, lock};
use babysitter_journal::redact::Redactor;
use babysitter_journal::{Journal, JournalError};

/// Who produced an agent event.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AgentEventSource {
    #[default]
    Unspecified,
    /// Parsed from the harness's native output.
    Agent,
    /// Synthesized by the worker (gap filling, `agent.unparsed`, session end).
    Daemon,
}

/// One universal agent event, as the worker reported it (payloads are opaque JSON).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentEvent {
    pub event_id: String,
    pub sequence: u64,
    pub time: Option<SystemTime>,
    pub session_id: String,
    pub native_session_id: Option<String>,
    pub synthetic: bool,
    pub source: AgentEventSource,
    /// e.g. `session.started`, `item.delta`.
    pub kind: String,
    pub data_json: Bytes,
    pub raw_json: Bytes,
}

/// One report's events of one task.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentBatch {
    pub effect_id: String,
    pub events: Vec<AgentEvent>,
}

impl RunManager {
    /// Relays `events` reported under `lease_id` to the watchers of the lease's run, secrets
    /// redacted. Returns how many were accepted: none under a lease the worker does not hold.
    pub fn report_agent_events(
        &self,
        worker_id: &str,
        lease_id: &str,
        mut events: Vec<AgentEvent>,
    ) -> usize {
        let Some((run_id, effect_id)) = self.inner.queue.lease_task(worker_id, lease_id) else {
            return 0; // a lost lease: its events are dropped
        };
        let accepted = events.len();
        let tx = lock(&self.inner.runs)
            .live_mut(&run_id)
            .and_then(|run| run.agent_sender());
        let Some(tx) = tx else {
            return accepted; // nobody watches
        };
        for e in &mut events {
            e.redact(&self.inner.config.secrets);
        }
        // An error only means the last watcher just left.
        let _ = tx.send(Arc::new(AgentBatch { effect_id, events }));
        accepted
    }
}

/// Most events of one completion stored for the record (the worker keeps as many).
pub const RECORD_MAX: usize = 2000;

impl AgentEvent {
    /// Redacts the payloads: one rule for the live relay and the record.
    fn redact(&mut self, secrets: &Redactor) {
        self.data_json = secrets.bytes(std::mem::take(&mut self.data_json));
        self.raw_json = secrets.bytes(std::mem::take(&mut self.raw_json));
    }

    /// The event as one JSON line of the record (the universal envelope, snake_case keys).
    fn record_line(&self) -> Value {
        let json = |b: &Bytes| {
            (!b.is_empty()).then(|| serde_json::from_slice::<Value>(b).unwrap_or(Value::Null))
        };
        let mut line = json!({
            "event_id": self.event_id,
            "sequence": self.sequence,
            "time": self
                .time
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| crate::engine::iso(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))),
            "session_id": self.session_id,
            "synthetic": self.synthetic,
            "type": self.kind,
            "data": json(&self.data_json).unwrap_or(Value::Null),
        });
        if let Some(native) = &self.native_session_id {
            line["native_session_id"] = json!(native);
        }
        if let Some(raw) = json(&self.raw_json) {
            line["raw"] = raw;
        }
        line
    }
}

/// Stores the record of a completion's `events` (when there are any) as a blob of `run_id` and
/// names it in the result's `metadata`: `agentEventsBlob`, `agentEvents` (how many stored) and
/// `agentEventsDropped` past [`RECORD_MAX`]. One rule for the orchestrator's completions and
/// `babysitter run`'s own.
pub async fn store_record(
    journal: &Journal,
    secrets: &Redactor,
    run_id: &str,
    events: Vec<AgentEvent>,
    metadata: &mut Option<Value>,
) -> Result<(), JournalError> {
    let Some((lines, stored, dropped)) = record(secrets, events) else {
        return Ok(());
    };
    let blob = journal.put_blob(run_id, lines).await?;
    set_metadata(metadata, "agentEventsBlob", json!(blob.to_string()));
    set_metadata(metadata, "agentEvents", json!(stored));
    if dropped > 0 {
        set_metadata(metadata, "agentEventsDropped", json!(dropped));
    }
    Ok(())
}

/// The record of a completion's events: JSON lines, secrets redacted, at most [`RECORD_MAX`];
/// `None` when there are none. Returns the lines, how many they are and how many events were
/// left out.
fn record(secrets: &Redactor, events: Vec<AgentEvent>) -> Option<(Bytes, usize, usize)> {
    if events.is_empty() {
        return None;
    }
    let events_len = events.len();
    let dropped = events_len.saturating_sub(RECORD_MAX);
    let mut out = Vec::new();
    for mut e in events.into_iter().take(RECORD_MAX) {
        e.redact(secrets);
        out.extend_from_slice(e.record_line().to_string().as_bytes());
        out.push(b'\n');
    }
    Some((Bytes::from(out), events_len - dropped, dropped))
}
