//! Agent sessions kept for the workers (`babysitter_common::agent_session`): a worker running
//! a harness task saves the harness's session under its lease, and whoever takes the task next
//! (or a follow-up task naming the same session) gets it with the assignment and resumes it.
//!
//! A harness stopped by its provider's quota window gives its task back ([`RunManager::release_task`])
//! instead of failing it: the next attempt, after the window, resumes the saved session.
//!
//! They are run files, written through the journal (fenced by this orchestrator's term,
//! redacted like every run file), not journal events: only the latest save matters, and a
//! worker saves as often as its harness makes progress.

use babysitter_common::agent_session::SavedSession;
use babysitter_journal::agent_sessions;

use super::RunManager;

/// The longest a released task waits before it is handed out again.
const MAX_RELEASE_DELAY: std::time::Duration = std::time::Duration::from_secs(3600);
use crate::service::queue::{QueueError, TaskSpec};
use crate::service::{Result, ServiceError};

impl RunManager {
    /// Saves the session of the task `lease_id` holds; refused (`lease-lost`) unless
    /// `worker_id` holds that lease now.
    pub async fn save_session(
        &self,
        worker_id: &str,
        lease_id: &str,
        session: SavedSession,
    ) -> Result<()> {
        let Some(spec) = self.inner.queue.leased_spec(worker_id, lease_id) else {
            return Err(QueueError::LeaseLost {
                lease_id: lease_id.to_owned(),
                reason: "the lease expired or is not this worker's".into(),
            }
            .into());
        };
        if session.effect_id != spec.effect_id {
            return Err(ServiceError::invalid(
                "session.effect_id",
                format!(
                    "`{}`, but lease {lease_id} holds effect {}",
                    session.effect_id, spec.effect_id
                ),
            ));
        }
        let Some(file) = &spec.session_file else {
            return Err(ServiceError::invalid(
                "session",
                format!("a `{}` task keeps no agent session", spec.kind),
            ));
        };
        agent_sessions::save(self.journal(), &spec.run_id, file, &session).await?;
        Ok(())
    }

    /// Gives a task back for a later attempt (its harness was stopped by a quota window), no
    /// sooner than `retry_after` (at most an hour); the next attempt gets its saved session.
    pub fn release_task(
        &self,
        worker_id: &str,
        lease_id: &str,
        effect_id: &str,
        reason: &str,
        retry_after: std::time::Duration,
    ) -> Result<u32> {
        let delay = retry_after.min(MAX_RELEASE_DELAY);
        let next = self
            .inner
            .queue
            .release(worker_id, lease_id, effect_id, delay)?;
        tracing::info!(%worker_id, %lease_id, %effect_id, %reason, retry_after_ms = delay.as_millis() as u64,
            next_attempt = next, "task given back for a later attempt");
        Ok(next)
    }

    /// The saved session `spec` continues, if any. One that cannot be read is reported and
    /// left out: the task then starts a new session, as it would with none saved.
    pub async fn saved_session(&self, spec: &TaskSpec) -> Option<SavedSession> {
        let file = spec.session_file.as_ref()?;
        match agent_sessions::load(self.journal(), &spec.run_id, file).await {
            Ok(s) => s,
            Err(error) => {
                tracing::warn!(run_id = %spec.run_id, effect_id = %spec.effect_id, %error,
                    "the task's saved agent session cannot be read; it starts a new one");
                None
            }
        }
    }
}
