//! The task queue: effects waiting for a worker, the leases they run under, and the workers.
//!
//! Rules it enforces (the worker protocol's promises, `proto/.../worker.proto`):
//! - a task is leased to one worker at a time; the lease lasts `lease_duration` past the last
//!   heartbeat; an expired lease puts the task back with `attempt + 1` after a backoff, and a task
//!   whose attempts run out is handed to the run manager to fail (never parked forever);
//! - a completion is accepted only under the live lease it names, by the worker holding it; a
//!   repeat of an accepted completion is idempotent; a completion under an expired or foreign lease
//!   is refused (`lease-lost`) — the journal's single `EFFECT_RESOLVED` per effect is the last line;
//! - leases are named `<incarnation>:<run>:<effect>:<attempt>:<nonce>`: after an orchestrator
//!   restart, a task recovered from the journal is held back for one lease duration, counted from
//!   when this orchestrator starts answering workers (not from recovery, which may take seconds),
//!   so the worker that was running it can adopt it again by heartbeat or completion instead of
//!   it running twice (and a draining server hands out nothing: `grpc::worker_api`);
//! - routing: a worker gets a task only if it serves the namespace, advertises the task kind, has
//!   the harness the task names (`execution.harness`) and carries every label the task requires
//!   (`execution.labels`, our extension); concurrency is capped per run and per namespace.
//!
//! Time is tokio's (`tokio::time::Instant`), so tests drive leases with paused time. State is one
//! `std::sync::Mutex` held for microseconds: no await happens under it.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::sync::Notify;
use tokio::time::Instant;

use super::metrics;

/// How far off a recovered task's grace is while calls are not served yet (re-set by
/// [`TaskQueue::open_adoption`]; far enough that no sweep or poll reaches it first).
const ADOPTION_NOT_OPEN: Duration = Duration::from_secs(365 * 86_400);

/// Queue and lease settings.
#[derive(Debug, Clone)]
pub struct QueueConfig {
    pub lease_duration: Duration,
    pub heartbeat_interval: Duration,
    pub max_poll_wait: Duration,
    /// Attempts before a task fails for good (each expired lease is one).
    pub max_attempts: u32,
    /// Backoff before attempt n+1 is offered: `base * 2^(n-1)`, capped.
    pub retry_backoff: Duration,
    pub retry_backoff_max: Duration,
    /// Tasks leased at once per run / per namespace.
    pub per_run_limit: usize,
    pub per_namespace_limit: usize,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            lease_duration: Duration::from_secs(30),
            heartbeat_interval: Duration::from_secs(10),
            max_poll_wait: Duration::from_secs(30),
            max_attempts: 5,
            retry_backoff: Duration::from_secs(1),
            retry_backoff_max: Duration::from_secs(60),
            per_run_limit: 256,
            per_namespace_limit: 10_000,
        }
    }
}

/// What a task needs and carries: built by the run manager from `task.json`.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    pub namespace: String,
    pub run_id: String,
    pub effect_id: String,
    pub task_id: String,
    pub invocation_key: String,
    pub kind: String,
    pub label: String,
    pub task_json: Bytes,
    /// `execution.harness`: only workers with this harness installed.
    pub harness: Option<String>,
    /// `execution.labels`: labels a worker must carry with exactly these values.
    pub required_labels: BTreeMap<String, String>,
    pub timeout: Option<Duration>,
    /// The W3C context of the orchestrator's span for this task, handed to the worker so its
    /// spans join the run's trace (`runs/trace.rs`).
    pub trace: Option<babysitter_common::telemetry::W3cContext>,
    /// The run file keeping the harness session this task continues and saves (harness kinds
    /// only; `babysitter_journal::agent_sessions`).
    pub session_file: Option<babysitter_journal::store::RunFile>,
}

/// A worker's advertised capabilities.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Capabilities {
    pub task_kinds: Vec<String>,
    pub harnesses: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub max_concurrency: u32,
}

/// A task handed to a worker.
#[derive(Debug, Clone)]
pub struct Assignment {
    pub lease_id: String,
    pub expires_at: SystemTime,
    pub spec: Arc<TaskSpec>,
    pub attempt: u32,
}

/// A lease as a heartbeat sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum LeaseVerdict {
    Active { expires_at: SystemTime },
    Cancelled { reason: String },
    Lost { reason: String },
}

/// What a completion may do.
#[derive(Debug, Clone)]
pub enum Completion {
    /// Journal it (then call [`TaskQueue::completed`] or [`TaskQueue::completion_failed`]).
    Proceed(Arc<TaskSpec>),
    /// This lease already completed the task: nothing to do.
    AlreadyCompleted,
}

/// A task whose lease expired once too often: the run manager fails the effect.
#[derive(Debug, Clone)]
pub struct GaveUp {
    pub spec: Arc<TaskSpec>,
    pub attempts: u32,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum QueueError {
    #[error("worker {0} is not registered (register again)")]
    UnknownWorker(String),
    #[error("lease {lease_id} is lost: {reason}")]
    LeaseLost { lease_id: String, reason: String },
    #[error("lease {lease_id} is for effect {leased}, not {named}")]
    EffectMismatch {
        lease_id: String,
        leased: String,
        named: String,
    },
    /// A task that cannot be given back for another attempt (complete it instead).
    #[error("the task of lease {lease_id} cannot be given back: {reason}")]
    NotReleased { lease_id: String, reason: String },
}

#[derive(Debug, Clone)]
enum State {
    Queued {
        not_before: Instant,
        /// Recovered after a restart: a lease of an earlier incarnation may adopt it.
        adoptable: bool,
    },
    Leased {
        lease_id: String,
        worker: String,
        expires: Instant,
    },
    /// Its result is being journaled under `lease_id`.
    Completing { lease_id: String, worker: String },
}

#[derive(Debug)]
struct Task {
    spec: Arc<TaskSpec>,
    attempt: u32,
    state: State,
    /// FIFO position among queued tasks.
    order: u64,
    cancelled: Option<String>,
}

#[derive(Debug)]
struct Worker {
    namespaces: Vec<String>,
    caps: Capabilities,
    last_seen: Instant,
    /// Leases it holds now (capped by `caps.max_concurrency` when that is set).
    leased: usize,
}

impl Worker {
    /// Seen within two lease durations: a worker not seen for longer takes no new task, counts
    /// for no routing and is not shown as live.
    fn is_live(&self, now: Instant, lease: Duration) -> bool {
        now.saturating_duration_since(self.last_seen) <= lease * 2
    }
}

type Key = (String, String);

#[derive(Debug, Default)]
struct Inner {
    tasks: HashMap<Key, Task>,
    queued: BTreeMap<u64, Key>,
    next_order: u64,
    leases: HashMap<String, Key>,
    /// Leases of this incarnation that expired or were replaced: their completions are refused.
    dead_leases: HashSet<String>,
    /// Leases whose completion was journaled (bounded, oldest dropped first).
    completed: HashSet<String>,
    completed_order: VecDeque<String>,
    workers: HashMap<String, Worker>,
    leased_per_run: HashMap<String, usize>,
    leased_per_ns: HashMap<String, usize>,
    /// The effect ids known per run (queued or leased): a run's counts cost O(1) and cancelling
    /// a run touches only its own tasks.
    tasks_per_run: HashMap<String, HashSet<String>>,
    /// Set while recovery runs and calls are not served yet: recovered tasks wait for
    /// [`TaskQueue::open_adoption`] to start their grace period.
    adoption_held: bool,
}

impl Inner {
    fn insert_task(&mut self, key: Key, task: Task) {
        self.tasks_per_run
            .entry(key.0.clone())
            .or_default()
            .insert(key.1.clone());
        self.tasks.insert(key, task);
    }

    fn remove_task(&mut self, key: &Key) -> Option<Task> {
        let task = self.tasks.remove(key)?;
        if let Some(ids) = self.tasks_per_run.get_mut(&key.0) {
            ids.remove(&key.1);
            if ids.is_empty() {
                self.tasks_per_run.remove(&key.0);
            }
        }
        Some(task)
    }
}

/// Completed lease ids remembered for idempotent repeats.
const COMPLETED_MEMORY: usize = 100_000;

/// The queue. Cheap to clone.
#[derive(Debug, Clone)]
pub struct TaskQueue {
    inner: Arc<Mutex<Inner>>,
    /// What the metrics scrape reads of this queue (alive while a clone of the queue is).
    _live: Arc<LiveQueue>,
    notify: Arc<Notify>,
    config: Arc<QueueConfig>,
    incarnation: Arc<str>,
}

/// The queue as the metrics scrape sees it: tasks by kind, namespace and state; live workers.
#[derive(Debug)]
struct LiveQueue {
    inner: Arc<Mutex<Inner>>,
    lease: Duration,
}

impl metrics::Live for LiveQueue {
    fn report(&self, into: &mut metrics::Snapshot) {
        let now = Instant::now();
        let g = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for task in g.tasks.values() {
            let state = match task.state {
                State::Queued { .. } => "queued",
                State::Leased { .. } | State::Completing { .. } => "leased",
            };
            let key = (task.spec.kind.clone(), task.spec.namespace.clone(), state);
            *into.tasks.entry(key).or_default() += 1;
        }
        into.workers += g
            .workers
            .values()
            .filter(|w| w.is_live(now, self.lease))
            .count() as i64;
    }
}

/// The attempt a lease id names (`<incarnation>:<run>:<effect>:<attempt>:<nonce>`).
pub fn lease_attempt(lease_id: &str) -> Option<u32> {
    lease_id.rsplit(':').nth(1)?.parse().ok()
}

fn lease_parts(lease_id: &str) -> Option<(&str, &str, &str)> {
    let (incarnation, rest) = lease_id.split_once(':')?;
    let mut it = rest.rsplitn(4, ':');
    let _nonce = it.next()?;
    let _attempt = it.next()?;
    let effect = it.next()?;
    let run = it.next()?;
    Some((incarnation, run, effect))
}

impl TaskQueue {
    /// `incarnation` names this orchestrator process in lease ids (a fresh ULID per start).
    pub fn new(config: QueueConfig, incarnation: impl Into<Arc<str>>) -> Self {
        let inner: Arc<Mutex<Inner>> = Default::default();
        let live = Arc::new(LiveQueue {
            inner: inner.clone(),
            lease: config.lease_duration,
        });
        let tracked = Arc::downgrade(&live);
        metrics::track(tracked);
        Self {
            inner,
            _live: live,
            notify: Arc::new(Notify::new()),
            config: Arc::new(config),
            incarnation: incarnation.into(),
        }
    }

    pub fn config(&self) -> &QueueConfig {
        &self.config
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers (or re-registers) a worker; returns its id.
    pub fn register(&self, worker_id: &str, namespaces: Vec<String>, caps: Capabilities) -> String {
        let id = if worker_id.is_empty() {
            format!("w-{}", ulid::Ulid::generate())
        } else {
            worker_id.to_owned()
        };
        let mut g = self.lock();
        let leased = g.workers.get(&id).map_or(0, |w| w.leased);
        g.workers.insert(
            id.clone(),
            Worker {
                namespaces,
                caps,
                last_seen: Instant::now(),
                leased,
            },
        );
        drop(g);
        self.notify.notify_waiters();
        id
    }

    /// Queues a task unless it is already known (idempotent per run and effect).
    /// `recovered`: rebuilt from the journal after a restart (held for adoption first).
    pub fn enqueue(&self, spec: TaskSpec, recovered: bool) {
        let key = (spec.run_id.clone(), spec.effect_id.clone());
        let now = Instant::now();
        let mut g = self.lock();
        if g.tasks.contains_key(&key) {
            return;
        }
        let order = g.next_order;
        g.next_order += 1;
        g.queued.insert(order, key.clone());
        let not_before = match (recovered, g.adoption_held) {
            (false, _) => now,
            // Until calls are served no worker can adopt it: its grace has not started yet.
            (true, true) => now + ADOPTION_NOT_OPEN,
            (true, false) => now + self.config.lease_duration,
        };
        g.insert_task(
            key,
            Task {
                spec: Arc::new(spec),
                attempt: 1,
                state: State::Queued {
                    not_before,
                    adoptable: recovered,
                },
                order,
                cancelled: None,
            },
        );
        drop(g);
        self.notify.notify_waiters();
    }

    /// Holds the grace period of tasks recovered from here on until [`TaskQueue::open_adoption`]
    /// (called before recovery starts).
    pub fn hold_adoption(&self) {
        self.lock().adoption_held = true;
    }

    /// Starts the grace period of every recovered task now: called once this orchestrator
    /// answers workers. Why not from when the task was recovered: recovering many runs takes
    /// time (seconds under load), during which no worker can reach this orchestrator; a grace
    /// counted from recovery would hand a still-running or finished task to a second worker
    /// before the first one could adopt it (the task would run twice).
    pub fn open_adoption(&self) {
        let until = Instant::now() + self.config.lease_duration;
        let mut g = self.lock();
        g.adoption_held = false;
        for task in g.tasks.values_mut() {
            if let State::Queued {
                not_before,
                adoptable: true,
            } = &mut task.state
            {
                *not_before = until;
            }
        }
        drop(g);
        self.notify.notify_waiters();
    }

    /// Forgets a task resolved by other means (posted result, cancellation).
    pub fn remove(&self, run_id: &str, effect_id: &str) {
        let mut g = self.lock();
        let key = (run_id.to_owned(), effect_id.to_owned());
        if let Some(task) = g.remove_task(&key) {
            g.queued.remove(&task.order);
            if let State::Leased {
                lease_id, worker, ..
            }
            | State::Completing { lease_id, worker } = task.state
            {
                g.leases.remove(&lease_id);
                g.dead_leases.insert(lease_id);
                release(&mut g, &task.spec, &worker);
            }
        }
    }

    /// Withdraws a run's queued tasks (their effects stay pending, queued again when the run
    /// is dispatched again); leased ones run on. Returns how many were withdrawn.
    pub fn withdraw_queued(&self, run_id: &str) -> usize {
        let mut g = self.lock();
        let keys = run_keys(&g, run_id);
        let mut n = 0;
        for key in keys {
            if matches!(
                g.tasks.get(&key).map(|t| &t.state),
                Some(State::Queued { .. })
            ) && let Some(t) = g.remove_task(&key)
            {
                g.queued.remove(&t.order);
                n += 1;
            }
        }
        n
    }

    /// Cancels a run's tasks: queued ones are dropped, leased ones are told at their next
    /// heartbeat. Returns the effect ids that were queued or running.
    pub fn cancel_run(&self, run_id: &str, reason: &str) -> Vec<String> {
        let mut g = self.lock();
        let keys = run_keys(&g, run_id);
        let mut out = Vec::new();
        for key in keys {
            out.push(key.1.clone());
            let leased = matches!(
                g.tasks.get(&key).map(|t| &t.state),
                Some(State::Leased { .. } | State::Completing { .. })
            );
            if leased {
                if let Some(t) = g.tasks.get_mut(&key) {
                    t.cancelled = Some(reason.to_owned());
                }
            } else if let Some(t) = g.remove_task(&key) {
                g.queued.remove(&t.order);
            }
        }
        out
    }

    /// Long-polls for up to `max` tasks for `worker_id`, waiting at most `wait`.
    pub async fn poll(
        &self,
        worker_id: &str,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<Assignment>, QueueError> {
        let deadline = Instant::now() + wait.min(self.config.max_poll_wait);
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (got, next_ready) = self.try_assign(worker_id, max.max(1))?;
            if !got.is_empty() || Instant::now() >= deadline {
                return Ok(got);
            }
            let wake = next_ready.map_or(deadline, |t| t.min(deadline));
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(wake) => {}
            }
        }
    }

    fn try_assign(
        &self,
        worker_id: &str,
        max: usize,
    ) -> Result<(Vec<Assignment>, Option<Instant>), QueueError> {
        let now = Instant::now();
        let mut g = self.lock();
        let g = &mut *g;
        let worker = g
            .workers
            .get_mut(worker_id)
            .ok_or_else(|| QueueError::UnknownWorker(worker_id.to_owned()))?;
        worker.last_seen = now;
        let max = match worker.caps.max_concurrency {
            0 => max,
            cap => max.min((cap as usize).saturating_sub(worker.leased)),
        };
        let mut out = Vec::new();
        let mut next_ready: Option<Instant> = None;
        let mut picked = Vec::new();
        for (&order, key) in &g.queued {
            if out.len() + picked.len() >= max {
                break;
            }
            let Some(task) = g.tasks.get(key) else {
                continue;
            };
            let State::Queued { not_before, .. } = task.state else {
                continue;
            };
            if !serves(worker, &task.spec) {
                continue;
            }
            if not_before > now {
                next_ready = Some(next_ready.map_or(not_before, |t| t.min(not_before)));
                continue;
            }
            let run_n = g
                .leased_per_run
                .get(&task.spec.run_id)
                .copied()
                .unwrap_or(0);
            let ns_n = g
                .leased_per_ns
                .get(&task.spec.namespace)
                .copied()
                .unwrap_or(0);
            let run_extra = picked
                .iter()
                .filter(|(_, k, _): &&(u64, Key, Instant)| k.0 == task.spec.run_id)
                .count();
            if run_n + run_extra >= self.config.per_run_limit
                || ns_n + picked.len() >= self.config.per_namespace_limit
            {
                continue;
            }
            picked.push((order, key.clone(), not_before));
        }
        for (order, key, ready_since) in picked {
            g.queued.remove(&order);
            let Some(task) = g.tasks.get_mut(&key) else {
                continue;
            };
            let lease_id = format!(
                "{}:{}:{}:{}:{:016x}",
                self.incarnation,
                key.0,
                key.1,
                task.attempt,
                rand_u64()
            );
            let expires = now + self.config.lease_duration;
            task.state = State::Leased {
                lease_id: lease_id.clone(),
                worker: worker_id.to_owned(),
                expires,
            };
            let spec = task.spec.clone();
            let attempt = task.attempt;
            metrics::lease_granted(
                &spec.kind,
                &spec.namespace,
                now.saturating_duration_since(ready_since),
            );
            g.leases.insert(lease_id.clone(), key);
            *g.leased_per_run.entry(spec.run_id.clone()).or_default() += 1;
            *g.leased_per_ns.entry(spec.namespace.clone()).or_default() += 1;
            if let Some(w) = g.workers.get_mut(worker_id) {
                w.leased += 1;
            }
            out.push(Assignment {
                lease_id,
                expires_at: SystemTime::now() + self.config.lease_duration,
                spec,
                attempt,
            });
        }
        Ok((out, next_ready))
    }

    /// Extends the worker's leases; says which were cancelled or lost.
    pub fn heartbeat(
        &self,
        worker_id: &str,
        lease_ids: &[String],
    ) -> Result<Vec<LeaseVerdict>, QueueError> {
        let now = Instant::now();
        let mut g = self.lock();
        let g = &mut *g;
        g.workers
            .get_mut(worker_id)
            .ok_or_else(|| QueueError::UnknownWorker(worker_id.to_owned()))?
            .last_seen = now;
        let mut out = Vec::with_capacity(lease_ids.len());
        for lease_id in lease_ids {
            self.adopt(g, worker_id, lease_id, now);
            let verdict = match g.leases.get(lease_id).and_then(|k| g.tasks.get_mut(k)) {
                Some(task) => match &mut task.state {
                    State::Leased {
                        worker, expires, ..
                    } if worker == worker_id => match &task.cancelled {
                        Some(reason) => LeaseVerdict::Cancelled {
                            reason: reason.clone(),
                        },
                        None => {
                            *expires = now + self.config.lease_duration;
                            LeaseVerdict::Active {
                                expires_at: SystemTime::now() + self.config.lease_duration,
                            }
                        }
                    },
                    State::Completing { worker, .. } if worker == worker_id => {
                        LeaseVerdict::Active {
                            expires_at: SystemTime::now() + self.config.lease_duration,
                        }
                    }
                    _ => LeaseVerdict::Lost {
                        reason: "the lease belongs to another worker".into(),
                    },
                },
                None => LeaseVerdict::Lost {
                    reason: if g.completed.contains(lease_id) {
                        "the task was already completed".into()
                    } else {
                        "the lease expired or the task no longer exists".into()
                    },
                },
            };
            out.push(verdict);
        }
        Ok(out)
    }

    /// A lease of an earlier orchestrator incarnation re-attaches to its recovered task.
    fn adopt(&self, g: &mut Inner, worker_id: &str, lease_id: &str, now: Instant) {
        if g.leases.contains_key(lease_id) {
            return;
        }
        let Some((incarnation, run, effect)) = lease_parts(lease_id) else {
            return;
        };
        if incarnation == &*self.incarnation {
            return;
        }
        let key = (run.to_owned(), effect.to_owned());
        let Some(task) = g.tasks.get_mut(&key) else {
            return;
        };
        if !matches!(
            task.state,
            State::Queued {
                adoptable: true,
                ..
            }
        ) {
            return;
        }
        task.state = State::Leased {
            lease_id: lease_id.to_owned(),
            worker: worker_id.to_owned(),
            expires: now + self.config.lease_duration,
        };
        let (order, spec) = (task.order, task.spec.clone());
        g.queued.remove(&order);
        g.leases.insert(lease_id.to_owned(), key);
        *g.leased_per_run.entry(spec.run_id.clone()).or_default() += 1;
        *g.leased_per_ns.entry(spec.namespace.clone()).or_default() += 1;
        if let Some(w) = g.workers.get_mut(worker_id) {
            w.leased += 1;
        }
    }

    /// Gives the task `lease_id` holds back to the queue as its next attempt, handed out no
    /// sooner than `delay` from now (something outside the task stopped it for a while, such
    /// as a provider's quota window); the lease ends. Refused unless `worker_id` holds the
    /// lease, and for a cancelled task or one with no attempt left. Returns the next attempt.
    pub fn release(
        &self,
        worker_id: &str,
        lease_id: &str,
        effect_id: &str,
        delay: Duration,
    ) -> Result<u32, QueueError> {
        let now = Instant::now();
        let mut g = self.lock();
        let g = &mut *g;
        let lost = |reason: &str| QueueError::LeaseLost {
            lease_id: lease_id.to_owned(),
            reason: reason.to_owned(),
        };
        let refused = |reason: &str| QueueError::NotReleased {
            lease_id: lease_id.to_owned(),
            reason: reason.to_owned(),
        };
        let Some(key) = g.leases.get(lease_id).cloned() else {
            return Err(lost("the lease is unknown, expired or already ended"));
        };
        if key.1 != effect_id {
            return Err(QueueError::EffectMismatch {
                lease_id: lease_id.to_owned(),
                leased: key.1,
                named: effect_id.to_owned(),
            });
        }
        let task = g
            .tasks
            .get_mut(&key)
            .ok_or_else(|| lost("the task no longer exists"))?;
        if !matches!(&task.state, State::Leased { worker, .. } if worker == worker_id) {
            return Err(lost("the lease is not this worker's"));
        }
        if task.cancelled.is_some() {
            return Err(refused("it was cancelled"));
        }
        if task.attempt >= self.config.max_attempts {
            return Err(refused(&format!(
                "it has had all {} attempts",
                self.config.max_attempts
            )));
        }
        let spec = task.spec.clone();
        task.attempt += 1;
        let attempt = task.attempt;
        let order = g.next_order;
        g.next_order += 1;
        task.order = order;
        task.state = State::Queued {
            not_before: now + delay,
            adoptable: false,
        };
        g.leases.remove(lease_id);
        g.dead_leases.insert(lease_id.to_owned());
        g.queued.insert(order, key);
        release(g, &spec, worker_id);
        self.notify.notify_waiters();
        Ok(attempt)
    }

    /// Checks a completion and, when it may proceed, marks the task as completing (no other
    /// completion or expiry can take it meanwhile).
    pub fn begin_completion(
        &self,
        worker_id: &str,
        lease_id: &str,
        effect_id: &str,
    ) -> Result<Completion, QueueError> {
        let now = Instant::now();
        let mut g = self.lock();
        let g = &mut *g;
        if let Some(w) = g.workers.get_mut(worker_id) {
            w.last_seen = now;
        }
        if g.completed.contains(lease_id) {
            return Ok(Completion::AlreadyCompleted);
        }
        self.adopt(g, worker_id, lease_id, now);
        let lost = |reason: &str| QueueError::LeaseLost {
            lease_id: lease_id.to_owned(),
            reason: reason.to_owned(),
        };
        let Some(key) = g.leases.get(lease_id).cloned() else {
            return Err(lost(if g.dead_leases.contains(lease_id) {
                "the lease expired; the task was given to another attempt"
            } else {
                "the lease is unknown or the task no longer exists"
            }));
        };
        if key.1 != effect_id {
            return Err(QueueError::EffectMismatch {
                lease_id: lease_id.to_owned(),
                leased: key.1,
                named: effect_id.to_owned(),
            });
        }
        let task = g
            .tasks
            .get_mut(&key)
            .ok_or_else(|| lost("the task no longer exists"))?;
        match &task.state {
            State::Leased { worker, .. } if worker == worker_id => {
                task.state = State::Completing {
                    lease_id: lease_id.to_owned(),
                    worker: worker_id.to_owned(),
                };
                Ok(Completion::Proceed(task.spec.clone()))
            }
            State::Completing { worker, .. } if worker == worker_id => {
                // A retry racing the first call: the first one decides.
                Err(lost("a completion under this lease is in progress"))
            }
            _ => Err(lost("the lease belongs to another worker")),
        }
    }

    /// The completion under `lease_id` was journaled: the task is done.
    pub fn completed(&self, lease_id: &str) {
        let mut g = self.lock();
        if let Some(key) = g.leases.remove(lease_id)
            && let Some(task) = g.remove_task(&key)
            && let State::Leased { worker, .. } | State::Completing { worker, .. } = &task.state
        {
            release(&mut g, &task.spec, worker);
        }
        if g.completed.insert(lease_id.to_owned()) {
            g.completed_order.push_back(lease_id.to_owned());
            if g.completed_order.len() > COMPLETED_MEMORY
                && let Some(old) = g.completed_order.pop_front()
            {
                g.completed.remove(&old);
            }
        }
        drop(g);
        self.notify.notify_waiters();
    }

    /// Journaling the completion failed (e.g. the journal is unreachable): the lease stays live so
    /// the worker's retry can complete it.
    pub fn completion_failed(&self, lease_id: &str) {
        let now = Instant::now();
        let mut g = self.lock();
        let g = &mut *g;
        if let Some(task) = g.leases.get(lease_id).and_then(|k| g.tasks.get_mut(k))
            && let State::Completing { lease_id, worker } = &task.state
        {
            task.state = State::Leased {
                lease_id: lease_id.clone(),
                worker: worker.clone(),
                expires: now + self.config.lease_duration,
            };
        }
    }

    /// Puts tasks whose lease expired back in the queue (with backoff), and returns those whose
    /// attempts ran out (removed from the queue). Call it periodically.
    pub fn expire(&self) -> Vec<GaveUp> {
        let now = Instant::now();
        let mut g = self.lock();
        let g = &mut *g;
        let expired: Vec<(String, Key)> = g
            .leases
            .iter()
            .filter(|(_, key)| {
                matches!(g.tasks.get(*key).map(|t| &t.state),
                    Some(State::Leased { expires, .. }) if *expires <= now)
            })
            .map(|(l, k)| (l.clone(), k.clone()))
            .collect();
        let mut gave_up = Vec::new();
        for (lease_id, key) in expired {
            g.leases.remove(&lease_id);
            g.dead_leases.insert(lease_id);
            let Some(task) = g.tasks.get_mut(&key) else {
                continue;
            };
            let spec = task.spec.clone();
            metrics::lease_expired(&spec.kind, &spec.namespace);
            let holder = match &task.state {
                State::Leased { worker, .. } => worker.clone(),
                _ => String::new(),
            };
            if task.cancelled.is_some() || task.attempt >= self.config.max_attempts {
                let attempts = task.attempt;
                let cancelled = task.cancelled.is_some();
                g.remove_task(&key);
                release(g, &spec, &holder);
                if !cancelled {
                    metrics::task_given_up(&spec.kind, &spec.namespace);
                    gave_up.push(GaveUp { spec, attempts });
                }
                continue;
            }
            task.attempt += 1;
            let shift = (task.attempt - 2).min(16);
            let backoff = self
                .config
                .retry_backoff
                .saturating_mul(1 << shift)
                .min(self.config.retry_backoff_max);
            let order = g.next_order;
            g.next_order += 1;
            task.order = order;
            task.state = State::Queued {
                not_before: now + backoff,
                adoptable: false,
            };
            g.queued.insert(order, key);
            release(g, &spec, &holder);
        }
        // Recovered tasks nobody adopted within the grace period are ordinary queued tasks now.
        for task in g.tasks.values_mut() {
            if let State::Queued {
                not_before,
                adoptable,
            } = &mut task.state
                && *adoptable
                && *not_before <= now
            {
                *adoptable = false;
            }
        }
        self.notify.notify_waiters();
        gave_up
    }

    /// Queued tasks no live worker (seen within two lease durations) could ever take, with why.
    pub fn unroutable(&self) -> Vec<(Arc<TaskSpec>, String)> {
        let now = Instant::now();
        let g = self.lock();
        let live: Vec<&Worker> = g
            .workers
            .values()
            .filter(|w| w.is_live(now, self.config.lease_duration))
            .collect();
        g.queued
            .values()
            .filter_map(|k| g.tasks.get(k))
            .filter(|t| !live.iter().any(|w| serves(w, &t.spec)))
            .map(|t| {
                let why = match &t.spec.harness {
                    Some(h) => format!(
                        "no live worker can run a `{}` task with harness `{h}` in namespace `{}`",
                        t.spec.kind, t.spec.namespace
                    ),
                    None => format!(
                        "no live worker can run a `{}` task in namespace `{}`",
                        t.spec.kind, t.spec.namespace
                    ),
                };
                (t.spec.clone(), why)
            })
            .collect()
    }

    /// Tasks known for a run: (queued, leased).
    pub fn counts_for_run(&self, run_id: &str) -> (usize, usize) {
        let g = self.lock();
        let total = g.tasks_per_run.get(run_id).map_or(0, HashSet::len);
        let leased = g.leased_per_run.get(run_id).copied().unwrap_or(0);
        (total.saturating_sub(leased), leased)
    }

    /// The (run, effect) of a live lease `worker_id` holds, for relaying its agent events.
    pub fn lease_task(&self, worker_id: &str, lease_id: &str) -> Option<(String, String)> {
        self.leased_spec(worker_id, lease_id)
            .map(|s| (s.run_id.clone(), s.effect_id.clone()))
    }

    /// The task `lease_id` holds, while `worker_id` holds that lease.
    pub fn leased_spec(&self, worker_id: &str, lease_id: &str) -> Option<Arc<TaskSpec>> {
        let g = self.lock();
        let key = g.leases.get(lease_id)?;
        let task = g.tasks.get(key)?;
        match &task.state {
            State::Leased { worker, .. } | State::Completing { worker, .. }
                if worker == worker_id =>
            {
                Some(task.spec.clone())
            }
            _ => None,
        }
    }

    pub fn is_known(&self, run_id: &str, effect_id: &str) -> bool {
        self.lock()
            .tasks
            .contains_key(&(run_id.to_owned(), effect_id.to_owned()))
    }
}

fn release(g: &mut Inner, spec: &TaskSpec, worker: &str) {
    if let Some(w) = g.workers.get_mut(worker) {
        w.leased = w.leased.saturating_sub(1);
    }
    if let Some(n) = g.leased_per_run.get_mut(&spec.run_id) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            g.leased_per_run.remove(&spec.run_id);
        }
    }
    if let Some(n) = g.leased_per_ns.get_mut(&spec.namespace) {
        *n = n.saturating_sub(1);
    }
}

fn serves(w: &Worker, spec: &TaskSpec) -> bool {
    (w.namespaces.is_empty() || w.namespaces.contains(&spec.namespace))
        && w.caps.task_kinds.contains(&spec.kind)
        && spec
            .harness
            .as_ref()
            .is_none_or(|h| w.caps.harnesses.iter().any(|x| x == h))
        && spec
            .required_labels
            .iter()
            .all(|(k, v)| w.caps.labels.get(k) == Some(v))
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    h.finish()
}

#[path = "queue_views.rs"]
mod views;
pub use views::{LeaseView, QueuedTask, WorkerView};

#[cfg(test)]
#[path = "queue_tests.rs"]
mod tests;

/// The queue's keys of `run_id`'s tasks (queued or leased).
fn run_keys(g: &Inner, run_id: &str) -> Vec<Key> {
    g.tasks_per_run
        .get(run_id)
        .map(|ids| {
            ids.iter()
                .map(|id| (run_id.to_owned(), id.clone()))
                .collect()
        })
        .unwrap_or_default()
}
