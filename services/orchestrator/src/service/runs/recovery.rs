//! Start-up recovery: every run in the journal gets its summary back, and every unfinished one is
//! iterated again, which re-queues its requested-but-unresolved effects (held for adoption by the
//! workers that were running them) and re-arms its sleep timers.

use std::collections::BTreeMap;

use babysitter_journal::store::RunFile;
use babysitter_journal::{EventType, JournalError, NewEvent};
use serde_json::{Map, Value, json};

use super::{DEFAULT_NAMESPACE, RunManager, RunStatus, RunSummary, lock, str_of};
use crate::service::Result;

impl RunManager {
    /// Loads every run from the journal and resumes the unfinished ones. Call once at start.
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
        let loaded: Vec<Result<Option<(RunSummary, bool)>>> = futures::stream::iter(ids)
            .map(|id| {
                let this = self.clone();
                async move { this.load_summary(&id).await }
            })
            .buffer_unordered(16)
            .collect()
            .await;
        let mut resumed = 0;
        for item in loaded {
            match item {
                Ok(Some((summary, resume))) => {
                    let id = summary.run_id.clone();
                    lock(&self.inner.runs).insert(id.clone(), summary);
                    if resume {
                        resumed += 1;
                        self.schedule(&id, true);
                    }
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "a run could not be loaded at start"),
            }
        }
        Ok(resumed)
    }

    async fn load_summary(&self, run_id: &str) -> Result<Option<(RunSummary, bool)>> {
        let journal = self.journal();
        let files = match journal.run_files(run_id).await {
            Ok(f) => f,
            Err(JournalError::RunNotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let rj = &files.run_json;
        let namespace = str_of(rj, "namespace").unwrap_or_else(|| DEFAULT_NAMESPACE.into());
        let labels: BTreeMap<String, String> = rj
            .get("labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default();
        if let Some(k) = str_of(rj, "idempotencyKey") {
            lock(&self.inner.idempotency).insert((namespace.clone(), k), run_id.to_owned());
        }
        let head = journal.head(run_id).await?;
        if head.seq == 0 {
            // Created but RUN_CREATED never landed (a crash in CreateRun): finish the creation.
            let mut data = Map::new();
            data.insert("runId".into(), json!(run_id));
            for k in ["processId", "entrypoint", "processCodeHash"] {
                if let Some(v) = rj.get(k) {
                    data.insert(k.into(), v.clone());
                }
            }
            journal
                .append(
                    run_id,
                    1,
                    vec![NewEvent::new(EventType::RunCreated, Value::Object(data))],
                )
                .await?;
        }
        let (status, error) = self.terminal_of(run_id).await?;
        let output = if status == RunStatus::Completed {
            journal
                .get_run_file(run_id, &RunFile::state("output.json")?)
                .await
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
        } else {
            None
        };
        let summary = RunSummary {
            run_id: run_id.to_owned(),
            namespace,
            status,
            labels,
            process_id: str_of(rj, "processId").unwrap_or_default(),
            created_at: str_of(rj, "createdAt"),
            updated_at: None,
            head_seq: head.seq.max(1),
            pending_by_kind: BTreeMap::new(),
            status_reason: String::new(),
            output,
            error,
        };
        Ok(Some((summary, !status.is_terminal())))
    }
}
