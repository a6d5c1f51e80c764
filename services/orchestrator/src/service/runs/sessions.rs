//! Agent sessions kept for the workers (`babysitter_common::agent_session`): a worker running
//! a harness task saves the harness's session under its lease, and whoever takes the task next
//! (or a follow-up task naming the same session) gets it with the assignment and resumes it.
//!
//! They are run files, written through the journal (fenced by this orchestrator's term,
//! redacted like every run file), not journal events: only the latest save matters, and a
//! worker saves as often as its harness makes progress.

use babysitter_common::agent_session::SavedSession;
use babysitter_journal::agent_sessions;

use super::RunManager;
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
