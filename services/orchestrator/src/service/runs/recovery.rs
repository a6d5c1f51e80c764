//! Start-up recovery: every unfinished run in the journal gets a live entry back and is iterated
//! again, which re-queues its requested-but-unresolved effects (held for adoption by the workers
//! that were running them) and re-arms its sleep timers. [`RunManager::recover`] returns only
//! once every resumed run has been iterated: the server starts after it, so a worker's
//! heartbeat or completion under a lease of the previous incarnation always finds its task
//! queued and adoptable, never "unknown" (which would drop a finished result and run the task
//! again). The most recently created finished runs
//! fill the finished-run cache; older ones are read from the journal when asked for.

use babysitter_journal::{EventType, NewEvent};
use serde_json::Value;

use super::query::StoredRun;
use super::{RunManager, RunStatus, lock};
use crate::engine::lifecycle;
use crate::service::bundle;
use crate::service::{Result, ServiceError};

impl RunManager {
    /// Loads every run from the journal and resumes the unfinished ones, returning once each
    /// has been iterated (its pending effects queued). Call once at start, before serving.
    pub async fn recover(&self) -> Result<usize> {
        use futures::StreamExt;
        let journal = self.journal();
        let mut ids = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let (page, next) = journal.list_runs("", token.as_deref(), 1000).await?;
            ids.extend(page);
            match next {
                Some(t) => token = Some(t),
                None => break,
            }
        }
        let loaded: Vec<Result<Option<StoredRun>>> = futures::stream::iter(ids)
            .map(|id| {
                let this = self.clone();
                async move { this.load_run(&id).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        let mut runs: Vec<StoredRun> = Vec::with_capacity(loaded.len());
        for item in loaded {
            match item {
                Ok(Some(run)) => runs.push(run),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "a run could not be loaded at start"),
            }
        }
        // Oldest first, so the cache keeps the newest finished runs.
        runs.sort_by(|a, b| a.summary.run_id.cmp(&b.summary.run_id));
        let mut resumed = Vec::new();
        {
            let mut table = lock(&self.inner.runs);
            for run in runs {
                if run.summary.status.is_terminal() {
                    table.remember_finished(run.summary, run.idempotency_key);
                } else {
                    let id = run.summary.run_id.clone();
                    if table.insert_live(run.summary, run.idempotency_key) {
                        resumed.push(id);
                    }
                }
            }
        }
        self.relink_children();
        let count = resumed.len();
        futures::stream::iter(resumed)
            .for_each_concurrent(16, |id| {
                let this = self.clone();
                async move { this.resume(&id).await }
            })
            .await;
        Ok(count)
    }

    /// Starts the adoption grace of the tasks recovered at start (see
    /// [`crate::service::queue::TaskQueue::open_adoption`]): call right before serving workers.
    pub fn open_to_workers(&self) {
        self.inner.queue.open_adoption();
    }

    /// A creation cut before the process bundle was stored (its run.json names blobs that never
    /// landed): the run can never be replayed, so it is recorded as failed — `RUN_CREATED` then
    /// `RUN_FAILED` naming why — and its idempotency key is not kept, so the client's retry
    /// creates the run afresh instead of being handed this one.
    async fn abandon_creation(
        &self,
        run_id: &str,
        mut run: StoredRun,
        files: &babysitter_journal::store::RunFiles,
    ) -> Result<StoredRun> {
        let new = lifecycle::NewRun::from_run_json(&files.run_json, files.inputs_json.is_some())
            .ok_or_else(|| {
                ServiceError::invalid(
                    "run.json",
                    format!("run {run_id}: runId, processId or entrypoint.importPath missing"),
                )
            })?;
        let reason = "the run's creation was interrupted before its process bundle was stored; create it again";
        let error = serde_json::json!({"name": "RunCreationIncompleteError", "message": reason});
        tracing::warn!(run_id, "{reason}");
        self.journal()
            .append(
                run_id,
                1,
                vec![
                    NewEvent::new(EventType::RunCreated, Value::Object(new.created_data())),
                    NewEvent::new(
                        EventType::RunFailed,
                        serde_json::json!({"error": error, "reason": reason}),
                    ),
                ],
            )
            .await?;
        run.summary.head_seq = 2;
        run.summary.status = RunStatus::Failed;
        run.summary.status_reason = reason.to_owned();
        run.summary.error = Some(error);
        run.idempotency_key = None;
        Ok(run)
    }

    /// A run as the journal has it, finishing its creation if `RUN_CREATED` never landed.
    async fn load_run(&self, run_id: &str) -> Result<Option<StoredRun>> {
        let Some(mut run) = self.read_run(run_id).await? else {
            return Ok(None);
        };
        if run.summary.head_seq == 0 {
            // Created but RUN_CREATED never landed (a crash in CreateRun): finish the creation.
            // The same RUN_CREATED data the creation would have written (one rule:
            // `lifecycle::NewRun`), read back from the run.json it did write.
            let files = self.journal().run_files(run_id).await?;
            if let Some(manifest) = files.run_json.get("processBundle")
                && !bundle::is_stored(self.journal(), run_id, manifest).await?
            {
                return self.abandon_creation(run_id, run, &files).await.map(Some);
            }
            let new = lifecycle::NewRun::from_run_json(&files.run_json, files.inputs_json.is_some())
                .ok_or_else(|| {
                    ServiceError::invalid(
                        "run.json",
                        format!(
                            "run {run_id}: runId, processId or entrypoint.importPath missing or not a string"
                        ),
                    )
                })?;
            let data = new.created_data();
            self.journal()
                .append(
                    run_id,
                    1,
                    vec![NewEvent::new(EventType::RunCreated, Value::Object(data))],
                )
                .await?;
            run.summary.head_seq = 1;
            run.summary.status = RunStatus::Running;
        }
        Ok(Some(run))
    }
}
