//! What a worker asks of the orchestrator, as one trait: register, long-poll, heartbeat, report
//! agent events, complete. The worker loop (`babysitter-harness-launcher`) is written once
//! against it; two implementations carry the calls:
//!
//! - over gRPC: [`WorkerServiceClient`] (a worker on another machine or process);
//! - in process: the orchestrator's own `WorkerService` handlers called directly
//!   (`babysitter_orchestrator::service::grpc::WorkerApi`), so `babysitter up` runs its worker
//!   without looping back through its own port, and tests run the real worker against the real
//!   orchestrator with no network between them.
//!
//! Requests and answers are the `worker.proto` messages, errors `tonic::Status` with the
//! error-kind metadata: the worker's failure handling (register again on `NOT_FOUND`, drop a
//! result whose lease is lost, retry what is unavailable) is then the same for both carriers.

use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::worker_service_client::WorkerServiceClient;
use tokio::sync::mpsc;
use tonic::Status;

use crate::client::AuthedChannel;

/// The worker side of `WorkerService`.
#[tonic::async_trait]
pub trait WorkerApi: Send + Sync + std::fmt::Debug + 'static {
    async fn register_worker(
        &self,
        req: pb::RegisterWorkerRequest,
    ) -> Result<pb::RegisterWorkerResponse, Status>;

    async fn poll_tasks(&self, req: pb::PollTasksRequest) -> Result<pb::PollTasksResponse, Status>;

    async fn heartbeat(&self, req: pb::HeartbeatRequest) -> Result<pb::HeartbeatResponse, Status>;

    /// One task's agent events, in the batches `batches` yields until its sender is dropped.
    async fn report_events(
        &self,
        batches: mpsc::Receiver<pb::ReportEventsRequest>,
    ) -> Result<pb::ReportEventsResponse, Status>;

    async fn complete_task(
        &self,
        req: pb::CompleteTaskRequest,
    ) -> Result<pb::CompleteTaskResponse, Status>;

    /// Saves a running agent task's harness session. The default answers as an orchestrator
    /// from before sessions did: `UNIMPLEMENTED` (the worker then runs on without saving).
    async fn save_session(
        &self,
        req: pb::SaveSessionRequest,
    ) -> Result<pb::SaveSessionResponse, Status> {
        let _ = req;
        Err(Status::unimplemented(
            "this orchestrator keeps no agent sessions",
        ))
    }

    /// Gives a task back for a later attempt. The default answers as an orchestrator from
    /// before releases did: `UNIMPLEMENTED` (the worker then completes the task with its error).
    async fn release_task(
        &self,
        req: pb::ReleaseTaskRequest,
    ) -> Result<pb::ReleaseTaskResponse, Status> {
        let _ = req;
        Err(Status::unimplemented(
            "this orchestrator does not take tasks back",
        ))
    }
}

#[tonic::async_trait]
impl WorkerApi for WorkerServiceClient<AuthedChannel> {
    async fn register_worker(
        &self,
        req: pb::RegisterWorkerRequest,
    ) -> Result<pb::RegisterWorkerResponse, Status> {
        Ok(WorkerServiceClient::register_worker(&mut self.clone(), req)
            .await?
            .into_inner())
    }

    async fn poll_tasks(&self, req: pb::PollTasksRequest) -> Result<pb::PollTasksResponse, Status> {
        Ok(WorkerServiceClient::poll_tasks(&mut self.clone(), req)
            .await?
            .into_inner())
    }

    async fn heartbeat(&self, req: pb::HeartbeatRequest) -> Result<pb::HeartbeatResponse, Status> {
        Ok(WorkerServiceClient::heartbeat(&mut self.clone(), req)
            .await?
            .into_inner())
    }

    async fn report_events(
        &self,
        batches: mpsc::Receiver<pb::ReportEventsRequest>,
    ) -> Result<pb::ReportEventsResponse, Status> {
        let stream = tokio_stream::wrappers::ReceiverStream::new(batches);
        Ok(
            WorkerServiceClient::report_events(&mut self.clone(), stream)
                .await?
                .into_inner(),
        )
    }

    async fn complete_task(
        &self,
        req: pb::CompleteTaskRequest,
    ) -> Result<pb::CompleteTaskResponse, Status> {
        Ok(WorkerServiceClient::complete_task(&mut self.clone(), req)
            .await?
            .into_inner())
    }

    async fn save_session(
        &self,
        req: pb::SaveSessionRequest,
    ) -> Result<pb::SaveSessionResponse, Status> {
        Ok(WorkerServiceClient::save_session(&mut self.clone(), req)
            .await?
            .into_inner())
    }

    async fn release_task(
        &self,
        req: pb::ReleaseTaskRequest,
    ) -> Result<pb::ReleaseTaskResponse, Status> {
        Ok(WorkerServiceClient::release_task(&mut self.clone(), req)
            .await?
            .into_inner())
    }
}
