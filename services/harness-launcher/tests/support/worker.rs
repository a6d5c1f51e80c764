//! Starts the real [`Worker`] against a [`Running`] fake orchestrator; stopped (drained) by
//! [`WorkerHandle::stop`].

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use babysitter_common::client::connect_lazy;
use babysitter_harness_launcher::agent::AgentSettings;
use babysitter_harness_launcher::worker::{Worker, WorkerSettings};
use tokio_util::sync::CancellationToken;

use super::fake_orchestrator::Running;

pub struct WorkerHandle {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

pub fn start(orch: &Running, agents: AgentSettings, work_dir: &Path) -> WorkerHandle {
    start_n(orch, agents, work_dir, 2)
}

/// As [`start`], running up to `max_concurrency` tasks at once.
pub fn start_n(
    orch: &Running,
    agents: AgentSettings,
    work_dir: &Path,
    max_concurrency: usize,
) -> WorkerHandle {
    let channel = connect_lazy(&orch.url, None).unwrap_or_else(|e| panic!("{e}"));
    let settings = WorkerSettings {
        worker_id: "w1".into(),
        namespaces: vec![],
        labels: HashMap::new(),
        task_kinds: vec!["shell".into()],
        max_concurrency,
        work_dir: work_dir.to_owned(),
        drain_timeout: Duration::from_secs(5),
    };
    let stop = CancellationToken::new();
    let worker = Worker::new(channel, settings).with_agents(agents);
    let task = tokio::spawn(worker.run(stop.clone()));
    WorkerHandle { stop, task }
}

impl WorkerHandle {
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
