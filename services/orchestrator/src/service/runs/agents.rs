//! Live agent events: the universal events a worker reports for the task it holds a lease on,
//! redacted and fanned out to the run's watchers. They are relayed, never stored, and only while
//! someone watches: each live run entry has a broadcast channel created by its first watcher and
//! dropped with the entry when the run ends (watchers still receive what was buffered). A watcher
//! that falls more than the buffer behind loses the oldest batches; a worker never waits for one.

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;

use super::{RunManager, lock};

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
        let secrets = &self.inner.config.secrets;
        for e in &mut events {
            e.data_json = secrets.bytes(std::mem::take(&mut e.data_json));
            e.raw_json = secrets.bytes(std::mem::take(&mut e.raw_json));
        }
        // An error only means the last watcher just left.
        let _ = tx.send(Arc::new(AgentBatch { effect_id, events }));
        accepted
    }
}
