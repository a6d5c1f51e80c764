//! Read-only views of the queue for operators (`ListTasks`, `ListWorkers`): where a run's tasks
//! stand and which workers are known. Taken under the queue's lock in one pass; times are
//! converted from tokio's clock to wall-clock time at the moment of the view.

use std::collections::HashMap;
use std::time::SystemTime;

use super::*;

/// A queued or leased task as the queue holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuedTask {
    pub attempt: u32,
    /// `None` while queued.
    pub lease: Option<LeaseView>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LeaseView {
    pub worker_id: String,
    /// `None` while its result is being journaled.
    pub expires_at: Option<SystemTime>,
}

/// A registered worker.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerView {
    pub worker_id: String,
    pub namespaces: Vec<String>,
    pub capabilities: Capabilities,
    pub leases: usize,
    pub last_seen: SystemTime,
    /// Seen within two lease durations.
    pub live: bool,
}

/// The wall-clock time of tokio instant `at`, seen from `now`.
fn wall(at: Instant, now: Instant, wall_now: SystemTime) -> SystemTime {
    if at >= now {
        wall_now + (at - now)
    } else {
        wall_now - (now - at)
    }
}

impl TaskQueue {
    /// The run's tasks in the queue, by effect id.
    pub fn tasks_of(&self, run_id: &str) -> HashMap<String, QueuedTask> {
        let (now, wall_now) = (Instant::now(), SystemTime::now());
        let g = self.lock();
        let Some(effects) = g.tasks_per_run.get(run_id) else {
            return HashMap::new();
        };
        effects
            .iter()
            .filter_map(|effect| {
                let task = g.tasks.get(&(run_id.to_owned(), effect.clone()))?;
                let lease = match &task.state {
                    State::Queued { .. } => None,
                    State::Leased {
                        worker, expires, ..
                    } => Some(LeaseView {
                        worker_id: worker.clone(),
                        expires_at: Some(wall(*expires, now, wall_now)),
                    }),
                    State::Completing { worker, .. } => Some(LeaseView {
                        worker_id: worker.clone(),
                        expires_at: None,
                    }),
                };
                Some((
                    effect.clone(),
                    QueuedTask {
                        attempt: task.attempt,
                        lease,
                    },
                ))
            })
            .collect()
    }

    /// Every registered worker, by id.
    pub fn workers(&self) -> Vec<WorkerView> {
        let (now, wall_now) = (Instant::now(), SystemTime::now());
        let g = self.lock();
        let mut out: Vec<WorkerView> = g
            .workers
            .iter()
            .map(|(id, w)| WorkerView {
                worker_id: id.clone(),
                namespaces: w.namespaces.clone(),
                capabilities: w.caps.clone(),
                leases: w.leased,
                last_seen: wall(w.last_seen, now, wall_now),
                live: w.is_live(now, self.config.lease_duration),
            })
            .collect();
        out.sort_by(|a, b| a.worker_id.cmp(&b.worker_id));
        out
    }
}
