//! Saving a running agent task's harness session with the orchestrator (`SaveSession`), so
//! the task's next attempt, or a follow-up task, continues it ([`crate::session`]).
//!
//! One sender per task, latest state wins: while a save is on its way newer captures replace
//! each other, and only the newest is sent next. Failures are logged and never fail the task
//! (the task then only loses what a resume would have saved); a refusal for a lost lease ends
//! the saving, since nothing this attempt does is kept any more.

use std::sync::Arc;
use std::time::Duration;

use babysitter_common::agent_session::SavedSession;
use babysitter_common::worker_api::WorkerApi;
use babysitter_proto::orchestrator::v1 as pb;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tonic::Code;

/// Longest the last save may take once the task finished before the task is completed anyway.
pub(super) const FINAL_SAVE_WAIT: Duration = Duration::from_secs(30);

/// Starts the saver of one task; drop the sender and await the handle to flush the last save.
pub(super) fn start(
    api: Arc<dyn WorkerApi>,
    worker_id: String,
    lease_id: String,
) -> (mpsc::Sender<SavedSession>, JoinHandle<()>) {
    let (tx, mut rx) = mpsc::channel::<SavedSession>(8);
    let handle = tokio::spawn(async move {
        let mut unimplemented_said = false;
        while let Some(mut latest) = rx.recv().await {
            while let Ok(newer) = rx.try_recv() {
                latest = newer;
            }
            let req = pb::SaveSessionRequest {
                worker_id: worker_id.clone(),
                lease_id: lease_id.clone(),
                session: Some(latest.into_pb()),
            };
            match api.save_session(req).await {
                Ok(_) => {}
                Err(s) if s.code() == Code::FailedPrecondition => {
                    tracing::info!(%lease_id, error = %s.message(), "the lease is gone; the session is no longer saved");
                    break;
                }
                Err(s) if s.code() == Code::Unimplemented => {
                    if !unimplemented_said {
                        tracing::warn!(%lease_id, "the orchestrator keeps no agent sessions; a lost task will start over");
                        unimplemented_said = true;
                    }
                }
                Err(s) => {
                    tracing::warn!(%lease_id, code = ?s.code(), error = %s.message(), "saving the agent session failed; the next change is saved again");
                }
            }
        }
    });
    (tx, handle)
}

/// The session an assignment continues; one that does not hold up is reported and left out
/// (the task then starts anew).
pub(super) fn of_assignment(a: &pb::TaskAssignment) -> Option<SavedSession> {
    let s = a.session.clone()?;
    match SavedSession::from_pb(s) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(lease_id = %a.lease_id, error = %e, "the assignment's saved session is invalid; the task starts anew");
            None
        }
    }
}
