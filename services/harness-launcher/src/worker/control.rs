//! The worker's own state, shared between its loop and whoever steers it (the admin API,
//! [`crate::admin`]): the running-task table, the lifecycle state and the drain request.
//!
//! Why one shared table rather than a second bookkeeping for the admin API: a task listed here
//! is exactly a task the heartbeats keep leased and the completion path reports, and cancelling
//! one goes through the same `stopped` mark the orchestrator's lease cancellation uses, so an
//! operator's cancel completes the task with the same `EffectCancelledError` as a cancel from
//! the orchestrator.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The error message of a task cancelled because the drain deadline passed.
pub const DRAIN_DEADLINE_REASON: &str = "cancelled: the worker's drain deadline passed";

/// Where the worker is in its life (its connection to the orchestrator, or draining).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WorkerState {
    /// Not registered yet.
    Starting,
    /// Registered and polling for tasks.
    Ready,
    /// The orchestrator is unreachable; retrying, running tasks continue.
    Disconnected,
    /// Drained or shutting down: no new tasks, running ones finish.
    Draining,
    /// Drained by [`WorkerControl::drain`]: nothing runs and nothing will be taken.
    Drained,
}

/// A task the worker is executing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInfo {
    pub lease_id: String,
    pub namespace: String,
    pub run_id: String,
    pub effect_id: String,
    /// The task kind (`agent`, `shell`, `node`, …).
    pub kind: String,
    /// The harness adapter of an agent task.
    pub harness: Option<String>,
    pub started_at: SystemTime,
    /// Universal agent events handed to the orchestrator's event stream so far.
    pub events_reported: u64,
    pub attempt: u32,
}

/// Why a drain was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DrainError {
    /// The worker is shutting down (SIGTERM): it is draining with its own timeout already.
    #[error("the worker is shutting down")]
    ShuttingDown,
}

/// The answer to a drain request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainStatus {
    /// [`WorkerState::Draining`] while tasks run, else [`WorkerState::Drained`].
    pub state: WorkerState,
    /// The tasks still running.
    pub running: Vec<TaskInfo>,
}

/// One entry of the running-task table.
#[derive(Debug)]
pub(super) struct Running {
    pub(super) cancel: CancellationToken,
    /// Why it was stopped: `Some(true)` = lease lost (drop the result), `Some(false)` = cancelled.
    pub(super) stopped: Option<(bool, String)>,
    pub(super) info: TaskInfo,
    pub(super) events: Arc<AtomicU64>,
    /// When the orchestrator last had the lease renewed at the latest: the assignment's arrival,
    /// then the sending of each heartbeat it answered `ACTIVE`. The task is stopped before the
    /// lease can lapse unrenewed ([`WorkerControl::overdue`]).
    pub(super) renewed: tokio::time::Instant,
}

#[derive(Debug)]
struct Lifecycle {
    state: WorkerState,
    /// The id the orchestrator answered at registration.
    worker_id: Option<String>,
    /// SIGTERM (the `stop` token) was seen: a drain request is refused.
    stopping: bool,
    /// Drain was asked for.
    draining: bool,
    /// The earliest drain deadline asked for, not yet passed.
    deadline: Option<Instant>,
    /// Cancelled by [`WorkerControl::drain`]: ends registration and polling. Set by the running
    /// loop ([`WorkerControl::halt_token`]).
    halt: Option<CancellationToken>,
}

#[derive(Debug)]
struct Inner {
    running: Mutex<HashMap<String, Running>>,
    lifecycle: Mutex<Lifecycle>,
    /// Notified when a task enters or leaves the table or a drain deadline is set.
    changed: Notify,
    started_at: SystemTime,
}

/// A handle on the worker's state; cheap to clone.
#[derive(Debug, Clone)]
pub struct WorkerControl {
    inner: Arc<Inner>,
}

impl Default for WorkerControl {
    fn default() -> Self {
        Self {
            inner: Arc::new(Inner {
                running: Mutex::default(),
                lifecycle: Mutex::new(Lifecycle {
                    state: WorkerState::Starting,
                    worker_id: None,
                    stopping: false,
                    draining: false,
                    deadline: None,
                    halt: None,
                }),
                changed: Notify::new(),
                started_at: SystemTime::now(),
            }),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl WorkerControl {
    /// The worker's state now.
    pub fn state(&self) -> WorkerState {
        lock(&self.inner.lifecycle).state
    }

    /// The id the orchestrator knows the worker by; `None` before registration.
    pub fn worker_id(&self) -> Option<String> {
        lock(&self.inner.lifecycle).worker_id.clone()
    }

    /// When the worker was created.
    pub fn started_at(&self) -> SystemTime {
        self.inner.started_at
    }

    /// The tasks running now, oldest first.
    pub fn running_tasks(&self) -> Vec<TaskInfo> {
        let mut tasks: Vec<TaskInfo> = lock(&self.inner.running)
            .values()
            .map(|r| TaskInfo {
                events_reported: r.events.load(Ordering::Relaxed),
                ..r.info.clone()
            })
            .collect();
        tasks.sort_by(|a, b| (a.started_at, &a.lease_id).cmp(&(b.started_at, &b.lease_id)));
        tasks
    }

    /// Cancels the task under `lease_id`: its process group is killed and it completes with an
    /// `EffectCancelledError` carrying `reason`. `false` when no task runs under that lease.
    /// Returns once the kill is under way, not once the process is gone.
    pub fn cancel(&self, lease_id: &str, reason: &str) -> bool {
        let mut running = lock(&self.inner.running);
        let Some(task) = running.get_mut(lease_id) else {
            return false;
        };
        tracing::info!(lease_id = %lease_id, %reason, "cancelling a task locally");
        // A lease already lost stays lost: its result is dropped either way.
        task.stopped
            .get_or_insert_with(|| (false, reason.to_owned()));
        task.cancel.cancel();
        true
    }

    /// Drains the worker: it leases nothing more (until restarted) and running tasks finish,
    /// or are cancelled like [`cancel`](Self::cancel) once `deadline` (the earliest asked for)
    /// passes. Refused while shutting down.
    pub fn drain(&self, deadline: Option<Duration>) -> Result<DrainStatus, DrainError> {
        {
            let mut life = lock(&self.inner.lifecycle);
            if life.stopping {
                return Err(DrainError::ShuttingDown);
            }
            if !life.draining {
                tracing::info!("draining: no new tasks");
                life.draining = true;
                life.state = WorkerState::Draining;
                if let Some(halt) = &life.halt {
                    halt.cancel();
                }
            }
            if let Some(d) = deadline {
                let at = Instant::now() + d;
                life.deadline = Some(life.deadline.map_or(at, |old| old.min(at)));
            }
        }
        self.inner.changed.notify_waiters();
        let running = self.running_tasks();
        Ok(DrainStatus {
            // Drained is set by the worker loop once it stopped polling and nothing runs.
            state: self.state(),
            running,
        })
    }

    /// The token that ends registration and polling: a child of `stop`, cancelled by a drain
    /// (also one asked for before the loop started).
    pub(super) fn halt_token(&self, stop: &CancellationToken) -> CancellationToken {
        let halt = stop.child_token();
        let mut life = lock(&self.inner.lifecycle);
        if life.draining {
            halt.cancel();
        }
        life.halt = Some(halt.clone());
        halt
    }

    pub(super) fn registered(&self, worker_id: &str) {
        let mut life = lock(&self.inner.lifecycle);
        life.worker_id = Some(worker_id.to_owned());
        if matches!(
            life.state,
            WorkerState::Starting | WorkerState::Disconnected
        ) {
            life.state = WorkerState::Ready;
        }
    }

    /// Records whether the last call to the orchestrator got through (not while draining).
    pub(super) fn connected(&self, ok: bool) {
        let mut life = lock(&self.inner.lifecycle);
        if matches!(life.state, WorkerState::Ready | WorkerState::Disconnected) {
            life.state = if ok {
                WorkerState::Ready
            } else {
                WorkerState::Disconnected
            };
        }
    }

    /// SIGTERM: draining with the shutdown timeout; drain requests are refused from now on.
    pub(super) fn stopping(&self) {
        let mut life = lock(&self.inner.lifecycle);
        life.stopping = true;
        life.state = WorkerState::Draining;
    }

    pub(super) fn drained(&self) {
        lock(&self.inner.lifecycle).state = WorkerState::Drained;
        tracing::info!("drained: no task runs and none will be taken");
    }

    pub(super) fn is_draining(&self) -> bool {
        lock(&self.inner.lifecycle).draining
    }

    pub(super) fn insert(&self, entry: Running) {
        lock(&self.inner.running).insert(entry.info.lease_id.clone(), entry);
        self.inner.changed.notify_waiters();
    }

    pub(super) fn remove(&self, lease_id: &str) {
        lock(&self.inner.running).remove(lease_id);
        self.inner.changed.notify_waiters();
    }

    pub(super) fn stopped_reason(&self, lease_id: &str) -> Option<(bool, String)> {
        lock(&self.inner.running)
            .get(lease_id)
            .and_then(|r| r.stopped.clone())
    }

    pub(super) fn lease_ids(&self) -> Vec<String> {
        lock(&self.inner.running).keys().cloned().collect()
    }

    /// Marks `lease_id` stopped by the orchestrator (lost or cancelled) and kills it.
    pub(super) fn stop_lease(&self, lease_id: &str, lost: bool, reason: String) {
        if let Some(task) = lock(&self.inner.running).get_mut(lease_id) {
            tracing::info!(lease_id = %lease_id, lost, %reason, "stopping a task");
            task.stopped = Some((lost, reason));
            task.cancel.cancel();
        }
    }

    /// The heartbeat sent at `sent` renewed these leases.
    pub(super) fn renewed(&self, lease_id: &str, sent: tokio::time::Instant) {
        if let Some(task) = lock(&self.inner.running).get_mut(lease_id) {
            task.renewed = task.renewed.max(sent);
        }
    }

    /// The oldest renewal among tasks still running (not stopped).
    pub(super) fn oldest_renewal(&self) -> Option<tokio::time::Instant> {
        lock(&self.inner.running)
            .values()
            .filter(|r| r.stopped.is_none())
            .map(|r| r.renewed)
            .min()
    }

    /// Leases of running tasks last renewed before `before`.
    pub(super) fn overdue(&self, before: tokio::time::Instant) -> Vec<String> {
        lock(&self.inner.running)
            .iter()
            .filter(|(_, r)| r.stopped.is_none() && r.renewed < before)
            .map(|(l, _)| l.clone())
            .collect()
    }

    /// Kills every running task without a reason (their results are whatever the kill left).
    pub(super) fn kill_all(&self) {
        for r in lock(&self.inner.running).values() {
            r.cancel.cancel();
        }
    }

    /// After a drain stopped polling: waits until every task (`tasks`, closed) has ended,
    /// cancelling what runs once the drain deadline has passed (also a task handed over with a
    /// completion after it). `false` when `stop` came first.
    pub(super) async fn wait_drained(&self, stop: &CancellationToken, tasks: &TaskTracker) -> bool {
        let mut passed = false;
        loop {
            let notified = self.inner.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if passed {
                for lease in self.lease_ids() {
                    self.cancel(&lease, DRAIN_DEADLINE_REASON);
                }
            }
            let deadline = lock(&self.inner.lifecycle).deadline.filter(|_| !passed);
            let deadline_passes = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = tasks.wait() => return true,
                () = notified => {}
                () = deadline_passes => {
                    tracing::info!(tasks = self.lease_ids().len(), "drain deadline passed: cancelling the tasks left");
                    passed = true;
                }
                () = stop.cancelled() => return false,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(lease: &str) -> (Running, CancellationToken) {
        let cancel = CancellationToken::new();
        let running = Running {
            cancel: cancel.clone(),
            stopped: None,
            info: TaskInfo {
                lease_id: lease.to_owned(),
                namespace: "default".into(),
                run_id: "run1".into(),
                effect_id: format!("eff-{lease}"),
                kind: "shell".into(),
                harness: None,
                started_at: SystemTime::UNIX_EPOCH,
                events_reported: 0,
                attempt: 1,
            },
            events: Arc::new(AtomicU64::new(7)),
            renewed: tokio::time::Instant::now(),
        };
        (running, cancel)
    }

    #[test]
    fn cancel_marks_and_kills_only_a_running_task_and_keeps_a_lost_lease_lost() {
        let control = WorkerControl::default();
        assert!(!control.cancel("nope", "why"));
        let (running, cancel) = entry("l1");
        control.insert(running);
        assert_eq!(control.running_tasks()[0].events_reported, 7);
        control.stop_lease("l1", true, "lease expired".into());
        assert!(control.cancel("l1", "operator"));
        assert!(cancel.is_cancelled());
        assert_eq!(
            control.stopped_reason("l1"),
            Some((true, "lease expired".into())),
            "a lost lease's result is still dropped"
        );
        control.remove("l1");
        assert!(!control.cancel("l1", "operator"));
    }

    #[test]
    fn connection_state_does_not_override_draining_and_a_drain_while_stopping_is_refused() {
        let control = WorkerControl::default();
        assert_eq!(control.state(), WorkerState::Starting);
        control.connected(false);
        assert_eq!(control.state(), WorkerState::Starting, "not registered yet");
        control.registered("w1");
        assert_eq!(control.worker_id().as_deref(), Some("w1"));
        control.connected(false);
        assert_eq!(control.state(), WorkerState::Disconnected);
        control.connected(true);
        assert_eq!(control.state(), WorkerState::Ready);

        let stop = CancellationToken::new();
        let halt = control.halt_token(&stop);
        let drained = control.drain(None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(drained.state, WorkerState::Draining);
        assert!(halt.is_cancelled() && !stop.is_cancelled());
        control.connected(true);
        assert_eq!(control.state(), WorkerState::Draining);

        control.stopping();
        assert_eq!(control.drain(None), Err(DrainError::ShuttingDown));
    }

    #[test]
    fn a_drain_before_the_loop_starts_halts_it_at_once() {
        let control = WorkerControl::default();
        control.drain(None).unwrap_or_else(|e| panic!("{e}"));
        assert!(control.halt_token(&CancellationToken::new()).is_cancelled());
    }

    #[tokio::test(start_paused = true)]
    async fn the_earliest_drain_deadline_wins_and_cancels_what_is_left() {
        let control = WorkerControl::default();
        let start = Instant::now();
        for secs in [30, 10, 20] {
            control
                .drain(Some(Duration::from_secs(secs)))
                .unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(
            lock(&control.inner.lifecycle).deadline,
            Some(start + Duration::from_secs(10))
        );

        // A task that ends only when cancelled, as the real ones do.
        let tasks = TaskTracker::new();
        let (running, cancel) = entry("l1");
        control.insert(running);
        let c = control.clone();
        let task = tasks.spawn(async move {
            cancel.cancelled().await;
            let why = c.stopped_reason("l1");
            c.remove("l1");
            why
        });
        tasks.close();
        assert!(
            control
                .wait_drained(&CancellationToken::new(), &tasks)
                .await
        );
        let stopped = task.await.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(stopped, Some((false, DRAIN_DEADLINE_REASON.to_owned())));
        assert_eq!(Instant::now() - start, Duration::from_secs(10));
        assert!(control.running_tasks().is_empty());
    }
}
