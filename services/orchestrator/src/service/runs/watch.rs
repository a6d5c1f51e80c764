//! Watching a run: its journal events as they commit, its summary whenever what it shows changes,
//! and (on request) its live agent events, until the run's terminal event has been delivered.
//!
//! Nothing here polls. Summary changes arrive on the run entry's `watch` channel (published by
//! every writer, see `table.rs`), journal events on the journal's own watch, agent events on the
//! entry's broadcast channel. A watcher that falls behind never holds a writer up: the summary
//! channel keeps only the latest value (an intermediate status a slow watcher never saw is
//! skipped), the agent channel drops the oldest batches past its buffer, and the journal watch
//! re-reads from the store.
//!
//! The terminal summary (status, output, error) is published right after the terminal event is
//! appended, so it is sent together with that event rather than on its own: a watcher's last
//! message shows the finished run, and a `GetRun` after the stream ends agrees with it. Agent
//! batches still buffered go with that last message too: a worker ends its `ReportEvents` stream
//! before completing its task, so by the terminal event every batch of the run is buffered.

use std::sync::Arc;

use babysitter_journal::{JournalError, StoredEvent};
use futures::StreamExt;
use tokio::sync::{broadcast, watch};
use tokio_stream::wrappers::ReceiverStream;

use super::agents::AgentBatch;
use super::{RunManager, RunStatus, RunSummary, lock};
use crate::service::{Result, ServiceError};

/// One message of a run watch.
#[derive(Debug, Clone, Default)]
pub struct WatchUpdate {
    /// Journal events committed since the previous update, in seq order.
    pub events: Vec<StoredEvent>,
    /// The run, on the first update and whenever its status, reason or pending counts changed.
    pub run: Option<RunSummary>,
    /// Live agent events (only when asked for), by task.
    pub agent_events: Vec<Arc<AgentBatch>>,
}

/// A run being watched: call [`RunWatch::next`] until it returns `None` (after the update that
/// carries the run's terminal event) or an error (the last item).
#[derive(Debug)]
pub struct RunWatch {
    first: Option<RunSummary>,
    /// The summary last sent.
    last: RunSummary,
    /// `None` once nothing more will come.
    journal: Option<ReceiverStream<Result<Vec<StoredEvent>, JournalError>>>,
    /// The live run's summary channel (`None` for a run that had already ended).
    summary: Option<watch::Receiver<RunSummary>>,
    /// The summary channel still has a sender (the run has not ended).
    summary_open: bool,
    agents: Option<broadcast::Receiver<Arc<AgentBatch>>>,
}

enum Next {
    Events(Option<Result<Vec<StoredEvent>, JournalError>>),
    Summary(bool),
    Agents(Result<Arc<AgentBatch>, broadcast::error::RecvError>),
}

fn terminal_status(e: &StoredEvent) -> Option<RunStatus> {
    RunStatus::of_terminal_event(e.body.kind.as_str(), &e.body.data)
}

/// What a watcher is shown of a summary.
fn differs(a: &RunSummary, b: &RunSummary) -> bool {
    a.status != b.status
        || a.status_reason != b.status_reason
        || a.pending_by_kind != b.pending_by_kind
}

async fn summary_changed(rx: &mut Option<watch::Receiver<RunSummary>>, open: bool) -> bool {
    match rx {
        Some(rx) if open => rx.changed().await.is_ok(),
        _ => std::future::pending().await,
    }
}

async fn agent_batch(
    rx: &mut Option<broadcast::Receiver<Arc<AgentBatch>>>,
) -> Result<Arc<AgentBatch>, broadcast::error::RecvError> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

impl RunManager {
    /// Watches the run from journal seq `from_seq` (0 or 1 = from the start). With
    /// `agent_events`, agent events reported from now on are included.
    pub async fn watch(
        &self,
        namespace: &str,
        run_id: &str,
        from_seq: u64,
        agent_events: bool,
    ) -> Result<RunWatch> {
        let not_found = || ServiceError::NotFound(format!("run {run_id}"));
        // Subscribed under the table lock with the summary read, so no change falls in between.
        let live = {
            let mut runs = lock(&self.inner.runs);
            match runs.live_mut(run_id) {
                Some(run) if run.summary.borrow().namespace != namespace => {
                    return Err(not_found());
                }
                Some(run) => {
                    let mut rx = run.summary.subscribe();
                    let first = rx.borrow_and_update().clone();
                    Some((first, rx, agent_events.then(|| run.subscribe_agents())))
                }
                None => None,
            }
        };
        let (first, summary, agents) = match live {
            Some((first, rx, agents)) => (first, Some(rx), agents),
            // Not live: it has ended, and its summary will not change again.
            None => (self.get(namespace, run_id).await?, None, None),
        };
        let from = from_seq.max(1);
        let journal = (!(first.status.is_terminal() && from > first.head_seq))
            .then(|| self.journal().watch(run_id, from));
        Ok(RunWatch {
            last: first.clone(),
            first: Some(first),
            journal,
            summary_open: summary.is_some(),
            summary,
            agents,
        })
    }
}

impl RunWatch {
    /// The next update; `None` once the run's terminal event has been sent.
    pub async fn next(&mut self) -> Option<Result<WatchUpdate>> {
        if let Some(run) = self.first.take() {
            return Some(Ok(WatchUpdate {
                run: Some(run),
                ..WatchUpdate::default()
            }));
        }
        loop {
            let journal = self.journal.as_mut()?;
            let next = tokio::select! {
                batch = journal.next() => Next::Events(batch),
                open = summary_changed(&mut self.summary, self.summary_open) => Next::Summary(open),
                batch = agent_batch(&mut self.agents) => Next::Agents(batch),
            };
            match next {
                Next::Events(None) => return None,
                Next::Events(Some(Err(e))) => {
                    self.journal = None;
                    return Some(Err(e.into()));
                }
                Next::Events(Some(Ok(events))) => return Some(Ok(self.on_events(events).await)),
                Next::Summary(false) => self.summary_open = false,
                Next::Summary(true) => {
                    if let Some(run) = self.changed_summary() {
                        return Some(Ok(WatchUpdate {
                            run: Some(run),
                            ..WatchUpdate::default()
                        }));
                    }
                }
                Next::Agents(Ok(batch)) => {
                    return Some(Ok(WatchUpdate {
                        agent_events: vec![batch],
                        ..WatchUpdate::default()
                    }));
                }
                // Batches the watcher fell too far behind to keep are gone; go on with the rest.
                Next::Agents(Err(broadcast::error::RecvError::Lagged(_))) => {}
                Next::Agents(Err(broadcast::error::RecvError::Closed)) => self.agents = None,
            }
        }
    }

    /// The current summary when a watcher has not been shown it yet. A terminal summary waits
    /// for its terminal event.
    fn changed_summary(&mut self) -> Option<RunSummary> {
        let now = self.summary.as_mut()?.borrow_and_update().clone();
        if now.status.is_terminal() || !differs(&now, &self.last) {
            return None;
        }
        self.last = now.clone();
        Some(now)
    }

    async fn on_events(&mut self, events: Vec<StoredEvent>) -> WatchUpdate {
        let Some(ended) = events.iter().find_map(terminal_status) else {
            return WatchUpdate {
                events,
                run: self.changed_summary(),
                agent_events: Vec::new(),
            };
        };
        // The last update: the finished run's summary (published right after this event was
        // appended) and every agent batch still buffered.
        self.journal = None;
        let mut now = self.settled().await;
        now.status = ended;
        let run = differs(&now, &self.last).then(|| now.clone());
        self.last = now;
        let mut agent_events = Vec::new();
        if let Some(rx) = self.agents.as_mut() {
            loop {
                match rx.try_recv() {
                    Ok(batch) => agent_events.push(batch),
                    Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                    Err(_) => break,
                }
            }
        }
        WatchUpdate {
            events,
            run,
            agent_events,
        }
    }

    /// The run's summary once it shows the run finished (immediately for a run that had ended,
    /// or whose entry is gone).
    async fn settled(&mut self) -> RunSummary {
        let Some(rx) = self.summary.as_mut() else {
            return self.last.clone();
        };
        let terminal = rx
            .wait_for(|s| s.status.is_terminal())
            .await
            .map(|s| s.clone());
        terminal.unwrap_or_else(|_| rx.borrow().clone())
    }
}
