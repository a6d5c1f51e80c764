//! Heartbeats, and the fence that keeps a task from outliving its lease.
//!
//! Why the fence: the orchestrator hands a task to another attempt once its lease lapses
//! unrenewed. A worker that cannot reach it (a partition, an orchestrator down longer than a
//! lease) would otherwise keep running the first attempt while the second starts elsewhere. So
//! the worker stops a task itself before that can happen: a lease counts as renewed from the
//! moment the renewing heartbeat was *sent* (the orchestrator extends it later than that, never
//! earlier), and a running task whose lease has gone [`FENCE`] of a lease duration without a
//! renewal is killed and its result dropped, as for a lost lease.
//!
//! A failed heartbeat is retried at a short backoff rather than at the next interval, so an
//! orchestrator that restarts within the lease keeps every task alive; `NotFound` for the
//! worker (it restarted) means register again, and the next heartbeat lets the new orchestrator
//! adopt the leases.

use std::time::Duration;

use babysitter_proto::orchestrator::v1 as pb;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{Worker, is_unknown_worker};

/// The share of a lease duration a task may go without a renewal (4/5: with the default 30 s
/// lease and 10 s heartbeats, two heartbeats and their retries fail first).
const FENCE: (u32, u32) = (4, 5);
const MIN_RETRY: Duration = Duration::from_millis(100);

/// Why a fenced task was stopped.
pub(super) const FENCED_REASON: &str = "the lease could not be renewed in time; the task was stopped so its next attempt cannot overlap it";

impl Worker {
    pub(super) async fn heartbeats(self, done: CancellationToken, stop: CancellationToken) {
        let mut next_beat = Instant::now() + self.timing().heartbeat;
        let mut retry = MIN_RETRY;
        loop {
            let timing = self.timing();
            let fence = timing.lease * FENCE.0 / FENCE.1;
            let wake = match self.control.oldest_renewal() {
                Some(r) => next_beat.min(r + fence),
                None => next_beat,
            };
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                () = done.cancelled() => return,
            }
            let now = Instant::now();
            if let Some(before) = now.checked_sub(fence) {
                for lease in self.control.overdue(before) {
                    self.control
                        .stop_lease(&lease, true, FENCED_REASON.to_owned());
                }
            }
            if now < next_beat {
                continue;
            }
            let leases = self.control.lease_ids();
            if leases.is_empty() {
                next_beat = now + timing.heartbeat;
                continue;
            }
            let req = pb::HeartbeatRequest {
                worker_id: self.settings.worker_id.clone(),
                lease_ids: leases,
            };
            let sent = Instant::now();
            // Not answered by the time the oldest lease reaches its fence (a partition where
            // packets vanish: the call would hang until TCP gives up, tens of seconds, with the
            // fence unchecked meanwhile): counted as failed, so the loop stops that task.
            let answer_by = self
                .control
                .oldest_renewal()
                .map_or(sent + timing.lease, |r| r + fence);
            let answered = tokio::time::timeout_at(answer_by, self.api.heartbeat(req)).await;
            let answered = answered.unwrap_or_else(|_| {
                Err(tonic::Status::deadline_exceeded(
                    "heartbeat not answered before a lease's fence",
                ))
            });
            let ok = match answered {
                Ok(r) => {
                    for l in r.leases {
                        match pb::LeaseState::try_from(l.state).unwrap_or_default() {
                            pb::LeaseState::Active => self.control.renewed(&l.lease_id, sent),
                            pb::LeaseState::Lost => {
                                self.control.stop_lease(&l.lease_id, true, l.reason)
                            }
                            pb::LeaseState::Cancelled => {
                                self.control.stop_lease(&l.lease_id, false, l.reason);
                            }
                            pb::LeaseState::Unspecified => {}
                        }
                    }
                    true
                }
                Err(s) if is_unknown_worker(&s) => {
                    // Registered again, the next heartbeat (at once) is adopted.
                    if let Err(e) = self.register(&stop).await {
                        tracing::error!(error = %e, "cannot register again");
                    }
                    false
                }
                Err(s) => {
                    tracing::warn!(error = %s.message(), code = ?s.code(), "heartbeat failed; retrying");
                    false
                }
            };
            if ok {
                retry = MIN_RETRY;
                next_beat = sent + timing.heartbeat;
            } else {
                next_beat = Instant::now() + retry.min(timing.heartbeat);
                retry = (retry * 2).min(timing.heartbeat);
            }
        }
    }
}
