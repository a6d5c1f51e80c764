//! The run table: everything the manager keeps about a run, in one entry per run id.
//!
//! A live run (unfinished, managed here) has a [`LiveRun`]: its summary as a `watch` channel that
//! every change is published on, its write lock, its driver flags, its armed sleep timers, whether
//! its bundle is materialized, its live agent-event channel and a token that stops its timers and
//! retries. When the run ends the entry shrinks to a [`FinishedRun`] (the final summary) and joins
//! a bounded FIFO of finished runs; the oldest falls out once there are more than
//! `finished_runs_cached`. The journal holds every run, so a run that fell out is read back from
//! it on demand (see `query.rs`); the memory this table holds is bounded by the live runs plus
//! that cap, not by how many runs the journal has ever seen.
//!
//! The idempotency index ((namespace, key) → run id) is the one structure not keyed by run id. A
//! key lives while its run is live and then among the keys of the last `finished_runs_cached`
//! runs that finished (here, or found finished at start), in a FIFO of its own: reading old runs
//! back (`ListRuns`, the dashboard's listing) caches their summaries but never evicts a key, so
//! a `CreateRun` retry is deduplicated however many runs were read meanwhile. (Keys used to leave
//! with their run's cached summary, which a listing of thousands of old runs pushed out.)

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::RunSummary;
use super::agents::AgentBatch;

/// Agent batches a watcher may fall behind by before it loses the oldest (writers never wait).
const AGENT_EVENT_BUFFER: usize = 1024;
/// Summary changes a change-feed receiver may fall behind by before it is told it lagged.
pub(super) const CHANGE_BUFFER: usize = 4096;

/// A run with a driver task: `again` = iterate once more when the current iteration ends.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct DriveFlags {
    pub again: bool,
    pub recovered: bool,
}

/// What the manager keeps about an unfinished run.
#[derive(Debug)]
pub(super) struct LiveRun {
    /// The summary; receivers are woken when its status, reason or pending counts change.
    pub summary: watch::Sender<RunSummary>,
    /// Serializes writes to the run's journal (iterations, results, cancel, halt).
    pub lock: Arc<tokio::sync::Mutex<()>>,
    pub driver: Option<DriveFlags>,
    /// Sleep effects with an armed timer.
    pub timers: HashSet<String>,
    /// The bundle has been written and verified locally by this process.
    pub materialized: bool,
    /// Live agent events, while someone watches them.
    pub agents: Option<broadcast::Sender<Arc<AgentBatch>>>,
    pub idempotency_key: Option<String>,
    /// Cancelled when the run ends (or the manager stops): its timers and retries stop.
    pub stop: CancellationToken,
    /// Its subprocess runs (by run id) that may still be live: cancelled when it ends.
    pub children: HashSet<String>,
    /// The table's change feed (see [`RunTable::subscribe_changes`]).
    pub changes: broadcast::Sender<Arc<str>>,
}

impl LiveRun {
    /// Applies `f` to the summary and wakes the watchers when anything they show changed.
    pub fn update(&self, f: impl FnOnce(&mut RunSummary)) {
        let mut changed: Option<Arc<str>> = None;
        self.summary.send_if_modified(|s| {
            let before = (s.status, s.status_reason.clone(), s.pending_by_kind.clone());
            f(s);
            let modified = before != (s.status, s.status_reason.clone(), s.pending_by_kind.clone());
            if modified {
                changed = Some(Arc::from(s.run_id.as_str()));
            }
            modified
        });
        if let Some(id) = changed {
            // No receivers (no dashboard) is the common case: the send is then a no-op.
            let _ = self.changes.send(id);
        }
    }

    pub fn current(&self) -> RunSummary {
        self.summary.borrow().clone()
    }

    /// A receiver of the run's agent batches from now on.
    pub fn subscribe_agents(&mut self) -> broadcast::Receiver<Arc<AgentBatch>> {
        match &self.agents {
            Some(tx) => tx.subscribe(),
            None => {
                let (tx, rx) = broadcast::channel(AGENT_EVENT_BUFFER);
                self.agents = Some(tx);
                rx
            }
        }
    }

    /// The agent-event sender while someone listens (the buffer is freed when no one does).
    pub fn agent_sender(&mut self) -> Option<broadcast::Sender<Arc<AgentBatch>>> {
        if self
            .agents
            .as_ref()
            .is_some_and(|tx| tx.receiver_count() == 0)
        {
            self.agents = None;
        }
        self.agents.clone()
    }
}

/// What is kept of a run that has ended.
#[derive(Debug)]
pub(super) struct FinishedRun {
    pub summary: RunSummary,
}

#[derive(Debug)]
pub(super) enum Entry {
    Live(LiveRun),
    /// Boxed: a summary is large, and most entries of a busy table are live.
    Finished(Box<FinishedRun>),
}

impl Entry {
    pub fn summary(&self) -> RunSummary {
        match self {
            Self::Live(run) => run.current(),
            Self::Finished(run) => run.summary.clone(),
        }
    }
}

#[derive(Debug)]
pub(super) struct RunTable {
    runs: HashMap<String, Entry>,
    /// Ids of the `Finished` entries, oldest first.
    finished: VecDeque<String>,
    finished_cap: usize,
    idempotency: HashMap<(String, String), String>,
    /// Keys of finished runs (namespace, key, run id), oldest first; at most `finished_cap`.
    finished_keys: VecDeque<(String, String, String)>,
    /// Parent of every live run's `stop` token.
    stop: CancellationToken,
    /// Ids of runs whose summary changed (created, status / reason / pending counts, ended):
    /// the dashboard's board follows it instead of watching every run.
    changes: broadcast::Sender<Arc<str>>,
}

impl RunTable {
    pub fn new(finished_cap: usize, stop: CancellationToken) -> Self {
        Self {
            runs: HashMap::new(),
            finished: VecDeque::new(),
            finished_cap,
            idempotency: HashMap::new(),
            finished_keys: VecDeque::new(),
            stop,
            changes: broadcast::channel(CHANGE_BUFFER).0,
        }
    }

    /// Ids of runs whose summary changes from now on (a receiver past [`CHANGE_BUFFER`] behind
    /// is told it lagged and reads everything again).
    pub fn subscribe_changes(&self) -> broadcast::Receiver<Arc<str>> {
        self.changes.subscribe()
    }

    fn changed(&self, run_id: &str) {
        let _ = self.changes.send(Arc::from(run_id));
    }

    /// Adds a live run; false (and nothing changes) when the id is already known.
    pub fn insert_live(&mut self, summary: RunSummary, idempotency_key: Option<String>) -> bool {
        if self.runs.contains_key(&summary.run_id) {
            return false;
        }
        let run_id = summary.run_id.clone();
        if let Some(k) = &idempotency_key {
            self.idempotency
                .insert((summary.namespace.clone(), k.clone()), run_id.clone());
        }
        let run = LiveRun {
            summary: watch::Sender::new(summary),
            lock: Arc::default(),
            driver: None,
            timers: HashSet::new(),
            materialized: false,
            agents: None,
            idempotency_key,
            stop: self.stop.child_token(),
            children: HashSet::new(),
            changes: self.changes.clone(),
        };
        self.changed(&run_id);
        self.runs.insert(run_id, Entry::Live(run));
        true
    }

    /// Shrinks a live run to its final summary (stopping its timers, closing its channels) and
    /// evicts the oldest finished runs beyond the cap. Answers that summary and the run's
    /// subprocess runs (`None`: it was not live).
    pub fn finish(&mut self, run_id: &str) -> Option<(RunSummary, HashSet<String>)> {
        let Some(Entry::Live(run)) = self.runs.remove(run_id) else {
            return None;
        };
        run.stop.cancel();
        let summary = run.current();
        crate::service::metrics::run_finished(summary.status.as_str());
        if let Some(k) = run.idempotency_key {
            self.keep_key(&summary.namespace, k, run_id);
        }
        self.keep_finished(
            run_id.to_owned(),
            FinishedRun {
                summary: summary.clone(),
            },
        );
        self.changed(run_id);
        Some((summary, run.children))
    }

    /// Replaces a finished run's summary (a forced seal of an ended run); unknown or live ids are
    /// left alone.
    pub fn replace_finished(&mut self, summary: RunSummary) {
        if let Some(Entry::Finished(run)) = self.runs.get_mut(&summary.run_id) {
            let id = summary.run_id.clone();
            run.summary = summary;
            self.changed(&id);
        }
    }

    /// Caches a finished run read back from the journal (unless the id is known already). Its
    /// `idempotency_key` is given only for a run found at start (its key is then remembered as
    /// if it had finished here); a run read on demand passes `None` and evicts no key.
    pub fn remember_finished(&mut self, summary: RunSummary, idempotency_key: Option<String>) {
        if !summary.status.is_terminal() || self.runs.contains_key(&summary.run_id) {
            return;
        }
        if let Some(k) = idempotency_key {
            let slot = (summary.namespace.clone(), k.clone());
            if let std::collections::hash_map::Entry::Vacant(free) = self.idempotency.entry(slot) {
                free.insert(summary.run_id.clone());
                self.keep_key(&summary.namespace, k, &summary.run_id);
            }
        }
        let run_id = summary.run_id.clone();
        self.keep_finished(run_id, FinishedRun { summary });
    }

    fn keep_finished(&mut self, run_id: String, run: FinishedRun) {
        self.runs
            .insert(run_id.clone(), Entry::Finished(Box::new(run)));
        self.finished.push_back(run_id);
        while self.finished.len() > self.finished_cap {
            let Some(old) = self.finished.pop_front() else {
                break;
            };
            self.runs.remove(&old);
        }
    }

    /// Keeps a finished run's key among the last `finished_cap`, forgetting the oldest.
    fn keep_key(&mut self, namespace: &str, key: String, run_id: &str) {
        self.finished_keys
            .push_back((namespace.to_owned(), key, run_id.to_owned()));
        while self.finished_keys.len() > self.finished_cap {
            let Some((ns, k, id)) = self.finished_keys.pop_front() else {
                break;
            };
            self.forget_key(&ns, &k, &id);
        }
    }

    fn forget_key(&mut self, namespace: &str, key: &str, run_id: &str) {
        let k = (namespace.to_owned(), key.to_owned());
        if self.idempotency.get(&k).is_some_and(|r| r == run_id) {
            self.idempotency.remove(&k);
        }
    }

    pub fn get(&self, run_id: &str) -> Option<&Entry> {
        self.runs.get(run_id)
    }

    pub fn live(&self, run_id: &str) -> Option<&LiveRun> {
        match self.runs.get(run_id) {
            Some(Entry::Live(run)) => Some(run),
            _ => None,
        }
    }

    pub fn live_mut(&mut self, run_id: &str) -> Option<&mut LiveRun> {
        match self.runs.get_mut(run_id) {
            Some(Entry::Live(run)) => Some(run),
            _ => None,
        }
    }

    pub fn lives(&self) -> impl Iterator<Item = &LiveRun> {
        self.runs.values().filter_map(|e| match e {
            Entry::Live(run) => Some(run),
            Entry::Finished(_) => None,
        })
    }

    /// The run a `CreateRun` with this key already made.
    pub fn idempotent(&self, namespace: &str, key: &str) -> Option<String> {
        self.idempotency
            .get(&(namespace.to_owned(), key.to_owned()))
            .cloned()
    }

    pub fn live_count(&self) -> usize {
        self.runs.len() - self.finished.len()
    }

    pub fn finished_count(&self) -> usize {
        self.finished.len()
    }

    #[cfg(test)]
    pub fn idempotency_keys(&self) -> usize {
        self.idempotency.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::runs::RunStatus;

    fn summary(id: &str, status: RunStatus) -> RunSummary {
        RunSummary {
            run_id: id.into(),
            namespace: "ns".into(),
            status,
            labels: Default::default(),
            process_id: String::new(),
            created_at: None,
            updated_at: None,
            head_seq: 1,
            pending_by_kind: Default::default(),
            status_reason: String::new(),
            output: None,
            error: None,
            client_driven: false,
            budget: None,
            parent: None,
            trace: None,
        }
    }

    fn finish(t: &mut RunTable, id: &str) {
        t.live(id)
            .unwrap()
            .update(|s| s.status = RunStatus::Completed);
        t.finish(id);
    }

    #[test]
    fn finished_runs_shrink_and_the_oldest_are_evicted_with_their_keys() {
        let mut t = RunTable::new(2, CancellationToken::new());
        for n in 0..4 {
            let id = format!("r{n}");
            assert!(t.insert_live(summary(&id, RunStatus::Running), Some(format!("k{n}"))));
        }
        assert!(!t.insert_live(summary("r0", RunStatus::Running), None));
        assert_eq!((t.live_count(), t.finished_count()), (4, 0));
        let stop = t.live("r0").unwrap().stop.clone();
        for n in 0..4 {
            finish(&mut t, &format!("r{n}"));
        }
        assert!(stop.is_cancelled(), "a finished run's timers stop");
        assert_eq!((t.live_count(), t.finished_count()), (0, 2));
        assert!(t.get("r0").is_none() && t.get("r1").is_none());
        assert_eq!(
            t.get("r3").map(|e| e.summary().status),
            Some(RunStatus::Completed)
        );
        assert_eq!(t.idempotent("ns", "k0"), None);
        assert_eq!(t.idempotent("ns", "k3").as_deref(), Some("r3"));
        assert_eq!(t.idempotency_keys(), 2);
    }

    #[test]
    fn runs_read_back_are_cached_only_when_finished_and_unknown() {
        let mut t = RunTable::new(1, CancellationToken::new());
        t.remember_finished(summary("a", RunStatus::Running), None);
        assert!(t.get("a").is_none(), "an unfinished run is not cached");
        t.insert_live(summary("b", RunStatus::Running), None);
        t.remember_finished(summary("b", RunStatus::Completed), None);
        assert!(t.live("b").is_some(), "a live run is not replaced");
        t.remember_finished(summary("c", RunStatus::Failed), Some("k".into()));
        t.remember_finished(summary("d", RunStatus::Failed), None);
        assert!(t.get("c").is_none() && t.get("d").is_some());
        // A key outlives its run's cached summary: runs read since evict no key.
        assert_eq!(t.idempotent("ns", "k").as_deref(), Some("c"));
        t.remember_finished(summary("f", RunStatus::Failed), Some("k2".into()));
        assert_eq!(t.idempotent("ns", "k"), None, "one key kept: the newest");
        assert_eq!(t.idempotent("ns", "k2").as_deref(), Some("f"));
        let mut none = RunTable::new(0, CancellationToken::new());
        none.insert_live(summary("e", RunStatus::Running), Some("k".into()));
        finish(&mut none, "e");
        assert!(none.get("e").is_none());
        assert_eq!((none.idempotency_keys(), none.finished_count()), (0, 0));
    }

    /// Reading thousands of old runs back (a listing) caches their summaries, evicting the
    /// recently finished ones, but keeps every recently finished run's key.
    #[test]
    fn reading_old_runs_back_evicts_no_idempotency_key() {
        let mut t = RunTable::new(3, CancellationToken::new());
        for n in 0..3 {
            let id = format!("new{n}");
            t.insert_live(summary(&id, RunStatus::Running), Some(format!("k{n}")));
            finish(&mut t, &id);
        }
        for n in 0..1000 {
            t.remember_finished(summary(&format!("old{n}"), RunStatus::Completed), None);
        }
        assert!(t.get("new0").is_none(), "the summaries made room");
        for n in 0..3 {
            assert_eq!(
                t.idempotent("ns", &format!("k{n}")).as_deref(),
                Some(format!("new{n}").as_str())
            );
        }
        // Live runs' keys are not counted against the finished ones.
        t.insert_live(summary("live", RunStatus::Running), Some("kl".into()));
        assert_eq!(t.idempotency_keys(), 4);
    }

    #[test]
    fn watchers_are_woken_only_by_what_they_show() {
        let mut t = RunTable::new(1, CancellationToken::new());
        t.insert_live(summary("a", RunStatus::Created), None);
        let run = t.live("a").unwrap();
        let mut rx = run.summary.subscribe();
        run.update(|s| s.head_seq = 9);
        assert!(!rx.has_changed().unwrap());
        assert_eq!(rx.borrow().head_seq, 9, "the value is current anyway");
        run.update(|s| s.status = RunStatus::Running);
        assert!(rx.has_changed().unwrap());
        rx.mark_unchanged();
        finish(&mut t, "a");
        assert_eq!(rx.borrow().status, RunStatus::Completed);
        assert!(
            rx.has_changed().is_err(),
            "the channel closes when the run ends"
        );
    }
}
