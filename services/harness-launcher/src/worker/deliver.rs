//! Delivering a finished result: spooled, then reported until the orchestrator answers it.
//!
//! Why this shape: a result is the one thing an attempt produces that cannot be made again
//! without running the task again (and repeating its side effects). So it is written to the
//! home's spool before the first try, and the worker keeps trying as long as an answer may still
//! come: `Unavailable` and transport errors (the orchestrator is restarting or unreachable),
//! `Cancelled` (its RPCs were cut by a drain), `DeadlineExceeded`, `Aborted`,
//! `ResourceExhausted`, and `NotFound` for the worker (a restarted orchestrator: register again,
//! then complete under the same lease id, which it adopts). It stops at an answer: accepted, the
//! lease lost (the task went to another attempt), or a refusal that repeating cannot change —
//! and then removes the spool file. When the worker lets go at shutdown ([`Worker::abandon`]),
//! the file stays for the next worker on this home.

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use bytes::Bytes;
use tonic::Code;

use super::{Executed, Worker, is_lease_lost, is_unknown_worker};
use crate::home;

/// How long a completion waits for an eagerly dispatched next task.
const EAGER_WAIT: Duration = Duration::from_secs(1);
/// The longest pause between two tries.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// How a delivery ended.
#[derive(Debug)]
pub(super) enum Delivered {
    /// Accepted (or already accepted under this lease), with the task handed over with it.
    Accepted(Option<Box<pb::TaskAssignment>>),
    /// Refused for good (the lease lost, or a request the orchestrator cannot take).
    Refused,
    /// The worker let go first; the result stays spooled.
    Abandoned,
}

impl Worker {
    /// Completes under the lease (see the module doc); with `take_next`, asks for the next task
    /// in the same call (eager dispatch).
    pub(super) async fn complete(
        &self,
        a: &pb::TaskAssignment,
        executed: Executed,
        started: SystemTime,
        finished: SystemTime,
        take_next: bool,
    ) -> Option<pb::TaskAssignment> {
        let req = completion(
            &self.settings.worker_id,
            a,
            executed,
            started,
            finished,
            take_next,
        );
        let spooled = match self.home.spool(&req) {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::error!(lease_id = %a.lease_id, error = %e, home = %self.home.dir().display(), "cannot spool a finished result; it is lost if this worker dies before delivering it");
                None
            }
        };
        match self.deliver(req, spooled).await {
            Delivered::Accepted(next) => next.map(|b| *b),
            Delivered::Refused | Delivered::Abandoned => None,
        }
    }

    /// Reports `req` until answered (see the module doc); removes its spool file on an answer.
    pub(super) async fn deliver(
        &self,
        mut req: pb::CompleteTaskRequest,
        spooled: Option<PathBuf>,
    ) -> Delivered {
        let lease_id = req.lease_id.clone();
        let mut backoff = Duration::from_millis(50);
        let answered = loop {
            if self.abandon.is_cancelled() {
                tracing::warn!(%lease_id, "stopping with a result not delivered; it stays spooled for the next worker on this home");
                return Delivered::Abandoned;
            }
            let sent = tokio::select! {
                r = self.api.complete_task(req.clone()) => r,
                () = self.abandon.cancelled() => continue,
            };
            match sent {
                Ok(r) => break Delivered::Accepted(r.next_tasks.into_iter().next().map(Box::new)),
                Err(s) if is_lease_lost(&s) => {
                    tracing::info!(%lease_id, reason = %s.message(), "completion refused: lease lost");
                    break Delivered::Refused;
                }
                Err(s) if is_unknown_worker(&s) => {
                    tracing::info!(%lease_id, "the orchestrator does not know this worker; registering again to complete");
                    // No task comes along with a completion made after registering again: the
                    // poll loop asks for work.
                    req.next_max_tasks = 0;
                    match self.register(&self.abandon).await {
                        Ok(_) => continue,
                        Err(e) => {
                            tracing::error!(%lease_id, error = %e, "cannot register again; the result stays spooled");
                            return Delivered::Abandoned;
                        }
                    }
                }
                Err(s) if retryable(&s) => {
                    tracing::warn!(%lease_id, code = ?s.code(), error = %s.message(), "completion not answered; retrying");
                }
                Err(s) => {
                    tracing::error!(%lease_id, code = ?s.code(), error = %s.message(), "completion refused");
                    break Delivered::Refused;
                }
            }
            tokio::select! {
                () = tokio::time::sleep(backoff) => {}
                () = self.abandon.cancelled() => {}
            }
            backoff = (backoff * 2).min(MAX_BACKOFF);
        };
        if let Some(path) = spooled {
            home::unspool(&path);
        }
        answered
    }

    /// Delivers what the home's previous owner spooled, one at a time, under its original
    /// worker id and lease ids.
    pub(super) async fn deliver_inherited(self) {
        let spooled =
            std::mem::take(&mut *self.inherited.lock().unwrap_or_else(|p| p.into_inner()));
        for s in spooled {
            let mut req = s.request;
            req.next_max_tasks = 0;
            let lease_id = req.lease_id.clone();
            let how = self.deliver(req, Some(s.path)).await;
            tracing::info!(%lease_id, outcome = ?how, "a spooled completion was delivered");
        }
    }
}

/// Answers after which the same completion may still be accepted: transient codes, and an
/// orchestrator that was deposed while it handled the call (`fenced`: the active one adopts the
/// result once it is delivered there).
fn retryable(s: &tonic::Status) -> bool {
    babysitter_common::error::error_kind(s) == Some(babysitter_common::error::ErrorKind::Fenced)
        || matches!(
            s.code(),
            Code::Unavailable
                | Code::Unknown
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Aborted
                | Code::ResourceExhausted
                | Code::Internal
                | Code::Unauthenticated
        )
}

/// The completion of `a` with what its execution produced.
fn completion(
    worker_id: &str,
    a: &pb::TaskAssignment,
    executed: Executed,
    started: SystemTime,
    finished: SystemTime,
    take_next: bool,
) -> pb::CompleteTaskRequest {
    let Executed {
        done,
        usage,
        requests,
        metadata,
        release: _,
        events,
    } = executed;
    let outcome = match done.outcome {
        Ok(v) => cpb::task_result::Outcome::ValueJson(Bytes::from(
            serde_json::to_vec(&v).unwrap_or_default(),
        )),
        Err(e) => cpb::task_result::Outcome::Error(cpb::TaskError {
            name: e["name"].as_str().unwrap_or("Error").to_owned(),
            message: e["message"].as_str().unwrap_or_default().to_owned(),
            stack: String::new(),
            data_json: e
                .get("data")
                .map(|d| Bytes::from(serde_json::to_vec(d).unwrap_or_default()))
                .unwrap_or_default(),
        }),
    };
    pb::CompleteTaskRequest {
        worker_id: worker_id.to_owned(),
        lease_id: a.lease_id.clone(),
        effect_id: a.effect_id.clone(),
        result: Some(cpb::TaskResult {
            outcome: Some(outcome),
            stdout: done.stdout.map(Bytes::from).unwrap_or_default(),
            stderr: done.stderr.map(Bytes::from).unwrap_or_default(),
            started_at: Some(started.into()),
            finished_at: Some(finished.into()),
            metadata_json: if metadata.is_null() {
                Bytes::new()
            } else {
                Bytes::from(serde_json::to_vec(&metadata).unwrap_or_default())
            },
            usage,
            requests,
            agent_events: events,
        }),
        next_max_tasks: u32::from(take_next),
        next_wait: prost_types::Duration::try_from(EAGER_WAIT).ok(),
    }
}

#[cfg(test)]
mod tests {
    use babysitter_common::error::{ErrorKind, status};

    use super::retryable;

    #[test]
    fn a_deposed_orchestrators_answer_keeps_the_result_for_another_try() {
        // A deposed orchestrator answers UNAVAILABLE; a `fenced` answer (FailedPrecondition)
        // relayed from anywhere must not drop the result either.
        assert!(retryable(&status(ErrorKind::Fenced, "deposed", false, &[])));
        assert!(retryable(&status(
            ErrorKind::Unavailable,
            "deposed",
            true,
            &[]
        )));
        // A lost lease or a refusal is an answer: the result is dropped.
        assert!(!retryable(&status(
            ErrorKind::LeaseLost,
            "lost",
            false,
            &[]
        )));
        assert!(!retryable(&status(ErrorKind::Conflict, "no", false, &[])));
        assert!(!retryable(&status(
            ErrorKind::InvalidArgument,
            "bad",
            false,
            &[]
        )));
    }
}
