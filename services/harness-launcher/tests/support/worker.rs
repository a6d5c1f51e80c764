//! Starts the real [`Worker`] against the real [`Orchestrator`] (through its recorder); stopped
//! (drained) by [`WorkerHandle::stop`]. [`build`] + [`spawn`] leave room to take the worker's
//! admin handle before it runs.

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use babysitter_harness_launcher::agent::AgentSettings;
use babysitter_harness_launcher::worker::{Worker, WorkerSettings};
use tokio_util::sync::CancellationToken;

use super::orchestrator::Orchestrator;

pub struct WorkerHandle {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

pub fn start(orch: &Orchestrator, agents: AgentSettings, work_dir: &Path) -> WorkerHandle {
    start_n(orch, agents, work_dir, 2)
}

/// As [`start`], running up to `max_concurrency` tasks at once.
pub fn start_n(
    orch: &Orchestrator,
    agents: AgentSettings,
    work_dir: &Path,
    max_concurrency: usize,
) -> WorkerHandle {
    spawn(build(orch, work_dir, max_concurrency).with_agents(agents))
}

/// A worker `w1` offering `shell` tasks to `orch`, not running yet.
pub fn build(orch: &Orchestrator, work_dir: &Path, max_concurrency: usize) -> Worker {
    let settings = WorkerSettings {
        worker_id: "w1".into(),
        namespaces: vec![],
        labels: HashMap::new(),
        task_kinds: vec!["shell".into()],
        max_concurrency,
        work_dir: work_dir.to_owned(),
        drain_timeout: Duration::from_secs(5),
    };
    Worker::with_api(orch.api(), settings).expect("the worker takes a home under the work dir")
}

/// Runs `worker` until [`WorkerHandle::stop`].
pub fn spawn(worker: Worker) -> WorkerHandle {
    let stop = CancellationToken::new();
    let stop_run = stop.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = worker.run(stop_run).await {
            panic!("the worker stopped: {e}");
        }
    });
    WorkerHandle { stop, task }
}

impl WorkerHandle {
    /// Waits for the worker's loop to return by itself (after a drain), without stopping it;
    /// `within` guards against a hung worker.
    pub async fn returned(self, within: Duration) {
        tokio::time::timeout(within, self.task)
            .await
            .unwrap_or_else(|_| panic!("the worker did not return within {within:?}"))
            .unwrap_or_else(|e| panic!("the worker panicked: {e}"));
    }

    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
