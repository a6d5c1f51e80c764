//! A worker whose credentials the orchestrator refuses backs off and then exits with a reason
//! naming the setting to fix, instead of retrying forever (issue 25, item 8). Paused time: the
//! backoff is read from the virtual clock, never waited for.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use babysitter_common::worker_api::WorkerApi;
use babysitter_harness_launcher::worker::{Worker, WorkerError, WorkerSettings};
use babysitter_proto::orchestrator::v1 as pb;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::{Code, Status};

/// An orchestrator that refuses every registration as a bad token would be refused.
#[derive(Debug, Default)]
struct Refusing {
    registrations: Mutex<Vec<Instant>>,
}

#[tonic::async_trait]
impl WorkerApi for Refusing {
    async fn register_worker(
        &self,
        _: pb::RegisterWorkerRequest,
    ) -> Result<pb::RegisterWorkerResponse, Status> {
        self.registrations
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Instant::now());
        Err(Status::unauthenticated("invalid bearer token"))
    }
    async fn poll_tasks(&self, _: pb::PollTasksRequest) -> Result<pb::PollTasksResponse, Status> {
        Err(Status::unauthenticated("invalid bearer token"))
    }
    async fn heartbeat(&self, _: pb::HeartbeatRequest) -> Result<pb::HeartbeatResponse, Status> {
        Err(Status::unauthenticated("invalid bearer token"))
    }
    async fn report_events(
        &self,
        _: mpsc::Receiver<pb::ReportEventsRequest>,
    ) -> Result<pb::ReportEventsResponse, Status> {
        Err(Status::unauthenticated("invalid bearer token"))
    }
    async fn complete_task(
        &self,
        _: pb::CompleteTaskRequest,
    ) -> Result<pb::CompleteTaskResponse, Status> {
        Err(Status::unauthenticated("invalid bearer token"))
    }
}

#[tokio::test(start_paused = true)]
async fn refused_credentials_back_off_then_end_the_worker_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let api = Arc::new(Refusing::default());
    let worker = Worker::with_api(
        api.clone(),
        WorkerSettings {
            worker_id: "w-bad-token".into(),
            namespaces: vec![],
            labels: HashMap::new(),
            task_kinds: vec!["shell".into()],
            max_concurrency: 1,
            work_dir: dir.path().to_owned(),
            drain_timeout: Duration::from_secs(1),
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let ended = worker.run(CancellationToken::new()).await;
    let Err(e @ WorkerError::Refused { .. }) = ended else {
        panic!("expected the worker to give up on refused credentials, got {ended:?}");
    };
    let WorkerError::Refused { code, .. } = &e else {
        unreachable!()
    };
    assert_eq!(*code, Code::Unauthenticated);
    let text = e.to_string();
    assert!(text.contains("orchestrator.token-file"), "{text}");
    assert!(text.contains("invalid bearer token"), "{text}");

    let at = api
        .registrations
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    assert_eq!(at.len(), 5, "five tries, then the worker stops");
    let gaps: Vec<Duration> = at.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.windows(2).all(|g| g[1] > g[0]),
        "each retry waits longer than the one before: {gaps:?}"
    );
}
