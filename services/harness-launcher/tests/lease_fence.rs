//! A worker cut off from the orchestrator stops its task before the lease can lapse (issue 25,
//! "never overlapping"): the orchestrator gives the task to another worker once the lease
//! lapses, so the first attempt must be dead by then. Attempt 1 ticks into a ledger for as long
//! as it runs; once attempt 2 has started, no tick of attempt 1 may follow.

#[path = "support/orchestrator.rs"]
mod orchestrator;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use babysitter_common::worker_api::WorkerApi;
use babysitter_harness_launcher::worker::{Worker, WorkerSettings};
use babysitter_orchestrator::service::config::OrchestratorConfig;
use babysitter_proto::orchestrator::v1 as pb;
use orchestrator::Orchestrator;
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::Status;

/// A guard against a hung run; never a timing assertion.
const GUARD: Duration = Duration::from_secs(60);

/// The worker's side of a network partition: once `cut`, nothing reaches the orchestrator.
#[derive(Debug)]
struct Partitioned {
    inner: Arc<dyn WorkerApi>,
    cut: Arc<AtomicBool>,
}

impl Partitioned {
    fn check(&self) -> Result<(), Status> {
        if self.cut.load(Ordering::SeqCst) {
            Err(Status::unavailable("partitioned"))
        } else {
            Ok(())
        }
    }
}

#[tonic::async_trait]
impl WorkerApi for Partitioned {
    async fn register_worker(
        &self,
        req: pb::RegisterWorkerRequest,
    ) -> Result<pb::RegisterWorkerResponse, Status> {
        self.check()?;
        self.inner.register_worker(req).await
    }
    async fn poll_tasks(&self, req: pb::PollTasksRequest) -> Result<pb::PollTasksResponse, Status> {
        self.check()?;
        self.inner.poll_tasks(req).await
    }
    async fn heartbeat(&self, req: pb::HeartbeatRequest) -> Result<pb::HeartbeatResponse, Status> {
        self.check()?;
        self.inner.heartbeat(req).await
    }
    async fn report_events(
        &self,
        batches: mpsc::Receiver<pb::ReportEventsRequest>,
    ) -> Result<pb::ReportEventsResponse, Status> {
        self.check()?;
        self.inner.report_events(batches).await
    }
    async fn complete_task(
        &self,
        req: pb::CompleteTaskRequest,
    ) -> Result<pb::CompleteTaskResponse, Status> {
        self.check()?;
        self.inner.complete_task(req).await
    }
}

fn settings(id: &str, work_dir: &std::path::Path) -> WorkerSettings {
    WorkerSettings {
        worker_id: id.into(),
        namespaces: vec![],
        labels: HashMap::new(),
        task_kinds: vec!["shell".into()],
        max_concurrency: 1,
        work_dir: work_dir.to_owned(),
        drain_timeout: Duration::from_secs(1),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_worker_stops_its_task_before_another_attempt_can_start() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut config = OrchestratorConfig::default();
    config.queue.lease_duration_ms = 1_500;
    config.queue.heartbeat_interval_ms = 300;
    config.queue.retry_backoff_ms = 10;
    let orch = Orchestrator::start_grpc_with(config).await;
    let ledger = dir.path().join("ledger");
    let command = format!(
        "echo \"start $BABYSITTER_ATTEMPT\" >> {ledger}; \
         if [ \"$BABYSITTER_ATTEMPT\" = 1 ]; then while :; do echo 'tick 1' >> {ledger}; sleep 0.01; done; fi; \
         echo \"end $BABYSITTER_ATTEMPT\" >> {ledger}",
        ledger = ledger.display()
    );
    orch.push("fenced", "shell", json!({"shell": {"command": command}}))
        .await;

    let cut = Arc::new(AtomicBool::new(false));
    let api = Arc::new(Partitioned {
        inner: orch.api(),
        cut: cut.clone(),
    });
    let stop = CancellationToken::new();
    let first = Worker::with_api(api, settings("w-cut", &dir.path().join("a")))
        .unwrap_or_else(|e| panic!("{e}"));
    let first = tokio::spawn(first.run(stop.clone()));
    while !std::fs::read_to_string(&ledger).is_ok_and(|s| s.contains("tick 1")) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cut.store(true, Ordering::SeqCst);

    // A healthy worker takes the task once the cut-off worker's lease lapses.
    let second = Worker::with_api(orch.api(), settings("w-ok", &dir.path().join("b")))
        .unwrap_or_else(|e| panic!("{e}"));
    let second = tokio::spawn(second.run(stop.clone()));
    let stored = orch.result("fenced", GUARD).await;
    assert!(stored.outcome().is_ok(), "{:?}", stored.outcome());

    let ran = std::fs::read_to_string(&ledger).unwrap_or_default();
    let lines: Vec<&str> = ran.lines().collect();
    let second_start = lines
        .iter()
        .position(|l| *l == "start 2")
        .unwrap_or_else(|| panic!("attempt 2 never started: {lines:?}"));
    assert!(
        lines[second_start..].iter().all(|l| *l != "tick 1"),
        "attempt 1 was still running after attempt 2 started: {:?}",
        &lines[second_start.saturating_sub(3)..]
    );
    assert_eq!(lines.last(), Some(&"end 2"));
    assert!(
        !lines.contains(&"end 1"),
        "attempt 1 was stopped, not finished"
    );
    let sent = orch.sent("fenced").await;
    let task = orch.task("fenced");
    let (leases, completed) = orch.recorder().read(|l| {
        (
            l.leases(&task.run_id, &task.effect_id),
            l.completions(&task.run_id, &task.effect_id).len(),
        )
    });
    assert_eq!(leases.len(), 2, "two attempts");
    assert_eq!(
        sent.request.lease_id, leases[1],
        "the second attempt completed"
    );
    assert_eq!(completed, 1, "the first attempt's result was dropped");

    stop.cancel();
    let _ = first.await;
    let _ = second.await;
    orch.stop().await;
}
