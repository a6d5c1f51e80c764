//! Where a run keeps its coding-agent harness sessions ([`babysitter_common::agent_session`]):
//! one run file per session, read when a harness task starts and written whenever its
//! harness made progress. The orchestrator (for its workers) and `babysitter run` (for the
//! tasks it runs itself) both keep them through here, so a follow-up task or a later attempt
//! finds its session the same way in either.
//!
//! Run files, not journal events: only the latest save matters, and one is made each time a
//! harness's session changes. Being run files they are redacted like every other one.

use babysitter_common::agent_session::{self, SavedSession};
use bytes::Bytes;
use serde_json::Value;

use crate::store::RunFile;
use crate::{Journal, JournalError, Location, Result};

/// The run file of the session a harness task (`def`, effect `effect_id`) continues and
/// saves; an invalid `agent.session` is an error naming it.
pub fn run_file(def: &Value, effect_id: &str) -> Result<RunFile> {
    let name = agent_session::session_name(def)
        .map_err(|e| JournalError::invalid("task definition", e.to_string()))?;
    RunFile::parse(&agent_session::run_file_path(name, effect_id))
}

/// The session saved at `file`, if any; a stored one that does not hold up is `Corrupt`.
pub async fn load(journal: &Journal, run_id: &str, file: &RunFile) -> Result<Option<SavedSession>> {
    match journal.get_run_file(run_id, file).await {
        Ok(bytes) => SavedSession::from_json(&bytes, &file.path())
            .map(Some)
            .map_err(|e| JournalError::Corrupt {
                at: Location::object(run_id, file.path()),
                reason: e.to_string(),
            }),
        Err(JournalError::RunFileNotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Saves `session` at `file`; the latest save wins.
pub async fn save(
    journal: &Journal,
    run_id: &str,
    file: &RunFile,
    session: &SavedSession,
) -> Result<()> {
    journal
        .put_run_file(run_id, file, Bytes::from(session.to_json()))
        .await
}
