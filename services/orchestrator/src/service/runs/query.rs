//! Reading runs: `GetRun` / `ListRuns` over the run table, falling back to the journal for
//! finished runs that are no longer cached (the journal is the only complete record of runs; the
//! table keeps the live ones and a bounded number of finished ones, see `table.rs`).

use std::collections::BTreeMap;

use babysitter_journal::JournalError;
use babysitter_journal::store::RunFile;
use futures::StreamExt;

use super::{DEFAULT_NAMESPACE, Parent, RunManager, RunStatus, RunSummary, lock, str_of};
use crate::service::{Result, ServiceError};

/// Runs read from the journal at once while listing.
const READ_AHEAD: usize = 16;

/// A run as the journal has it.
pub(super) struct StoredRun {
    pub summary: RunSummary,
    pub idempotency_key: Option<String>,
}

impl RunManager {
    /// The summary of a run visible in `namespace`.
    pub async fn get(&self, namespace: &str, run_id: &str) -> Result<RunSummary> {
        let not_found = || ServiceError::NotFound(format!("run {run_id}"));
        let summary = match self.cached(run_id) {
            Some(s) => s,
            None => self.read_through(run_id).await?.ok_or_else(not_found)?,
        };
        if summary.namespace == namespace {
            Ok(summary)
        } else {
            Err(not_found())
        }
    }

    /// The `run.json` and the stored state cache (when the journal holds one) of a run of
    /// `namespace` (the namespace is checked as [`Self::get`] does).
    pub async fn run_files(
        &self,
        namespace: &str,
        run_id: &str,
    ) -> Result<(serde_json::Value, Option<bytes::Bytes>)> {
        self.get(namespace, run_id).await?;
        let journal = self.journal();
        let run_json = journal.get_run(run_id).await?.0.run_json;
        let state = journal.store().read_state_cache(run_id).await?;
        Ok((run_json, state))
    }

    /// Runs of `namespace` matching the filters, newest first (ULID order), after `page_token`.
    /// Live runs are listed from memory; a listing that may include finished runs walks the
    /// journal's run ids and reads the runs that are not cached.
    pub async fn list(
        &self,
        namespace: &str,
        statuses: &[RunStatus],
        labels: &BTreeMap<String, String>,
        page_size: usize,
        page_token: Option<&str>,
    ) -> Result<(Vec<RunSummary>, Option<String>)> {
        let size = page_size.clamp(1, 1000);
        let wanted = |r: &RunSummary| {
            r.namespace == namespace
                && (statuses.is_empty() || statuses.contains(&r.status))
                && labels.iter().all(|(k, v)| r.labels.get(k) == Some(v))
        };
        let mut matching: Vec<RunSummary> = Vec::new();
        if !statuses.is_empty() && statuses.iter().all(|s| !s.is_terminal()) {
            // Only unfinished runs: all of them are live.
            let runs = lock(&self.inner.runs);
            matching.extend(runs.lives().filter_map(|run| {
                let r = run.summary.borrow();
                let after = page_token.is_none_or(|t| r.run_id.as_str() < t);
                (after && wanted(&r)).then(|| r.clone())
            }));
            matching.sort_by(|a, b| b.run_id.cmp(&a.run_id));
            matching.truncate(size + 1);
        } else {
            let mut ids = self.journal_run_ids().await?;
            ids.retain(|id| page_token.is_none_or(|t| id.as_str() < t));
            ids.sort_by(|a, b| b.cmp(a));
            let mut runs = futures::stream::iter(ids)
                .map(|id| async move {
                    match self.cached(&id) {
                        Some(s) => Ok(Some(s)),
                        None => self.read_through(&id).await,
                    }
                    .map_err(|e| (id, e))
                })
                .buffered(READ_AHEAD);
            while matching.len() <= size
                && let Some(read) = runs.next().await
            {
                match read {
                    Ok(Some(r)) if wanted(&r) => matching.push(r),
                    Ok(_) => {}
                    Err((run_id, e)) => {
                        tracing::warn!(%run_id, error = %e, "a run could not be read for a listing");
                    }
                }
            }
        }
        let next = (matching.len() > size).then(|| matching[size - 1].run_id.clone());
        matching.truncate(size);
        Ok((matching, next))
    }

    /// Ids of the live runs of a namespace, sorted (for cross-run listings such as breakpoints:
    /// a finished run waits for nothing).
    pub(crate) fn live_run_ids_in(&self, namespace: &str) -> Vec<String> {
        let mut ids: Vec<String> = lock(&self.inner.runs)
            .lives()
            .filter_map(|run| {
                let r = run.summary.borrow();
                (r.namespace == namespace).then(|| r.run_id.clone())
            })
            .collect();
        ids.sort();
        ids
    }

    /// The summary of a run in any namespace (`None`: the journal has no such run), for views
    /// that filter by the caller's namespaces themselves (the dashboard's board).
    pub async fn summary_of(&self, run_id: &str) -> Result<Option<RunSummary>> {
        match self.cached(run_id) {
            Some(s) => Ok(Some(s)),
            None => self.read_through(run_id).await,
        }
    }

    /// [`Self::summary_of`] for a listing of every run (the dashboard's board, at start and
    /// after a lag): a run that is not in the table is read from the journal but not cached.
    /// Caching what such a listing reads refills the bounded table with whatever it reads last
    /// and pushes out the runs it found cached (those are not refreshed) — the most recently
    /// finished ones, with their idempotency keys, so a `CreateRun` retry of a run that had
    /// just finished made a second run.
    pub async fn summary_uncached(&self, run_id: &str) -> Result<Option<RunSummary>> {
        if let Some(s) = self.cached(run_id) {
            return Ok(Some(s));
        }
        Ok(self.read_named(run_id).await?.map(|stored| stored.summary))
    }

    /// Ids of runs whose summary changes from now on (created, status, reason, pending
    /// counts, ended), without watching each run.
    pub fn subscribe_changes(&self) -> tokio::sync::broadcast::Receiver<std::sync::Arc<str>> {
        lock(&self.inner.runs).subscribe_changes()
    }

    /// How many runs are live (unfinished, managed here): the run table's unbounded part, for
    /// tests and metrics.
    pub fn live_runs(&self) -> usize {
        lock(&self.inner.runs).live_count()
    }

    /// How many finished runs' summaries are cached (at most `finished_runs_cached`).
    pub fn cached_finished_runs(&self) -> usize {
        lock(&self.inner.runs).finished_count()
    }

    fn cached(&self, run_id: &str) -> Option<RunSummary> {
        lock(&self.inner.runs).get(run_id).map(|e| e.summary())
    }

    /// A run that is not in the table, read from the journal (and cached when finished);
    /// `None` when the journal does not have it.
    async fn read_through(&self, run_id: &str) -> Result<Option<RunSummary>> {
        let Some(stored) = self.read_named(run_id).await? else {
            return Ok(None);
        };
        // Read on demand: cached, but its key (if any) is not put back in the index: that would
        // evict a recently finished run's key for one that retries no longer use.
        lock(&self.inner.runs).remember_finished(stored.summary.clone(), None);
        Ok(Some(stored.summary))
    }

    /// [`Self::read_run`] of an id a caller gave (`None` when it cannot name a run).
    async fn read_named(&self, run_id: &str) -> Result<Option<StoredRun>> {
        if babysitter_common::ids::validate_path_segment("run id", run_id).is_err() {
            return Ok(None);
        }
        self.read_run(run_id).await
    }

    /// Every run id the journal has (all namespaces).
    pub async fn journal_run_ids(&self) -> Result<Vec<String>> {
        let mut ids = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let (page, next) = self.journal().list_runs("", token.as_deref(), 1000).await?;
            ids.extend(page);
            match next {
                Some(t) => token = Some(t),
                None => return Ok(ids),
            }
        }
    }

    /// A run's summary from the journal alone (nothing is written); `None` when there is no such
    /// run.
    pub(super) async fn read_run(&self, run_id: &str) -> Result<Option<StoredRun>> {
        let journal = self.journal();
        let files = match journal.run_files(run_id).await {
            Ok(f) => f,
            Err(JournalError::RunNotFound { .. }) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let rj = &files.run_json;
        let labels: BTreeMap<String, String> = rj
            .get("labels")
            .and_then(|l| serde_json::from_value(l.clone()).ok())
            .unwrap_or_default();
        let head = journal.head(run_id).await?;
        let (status, error) = if head.seq == 0 {
            (RunStatus::Created, None)
        } else {
            self.terminal_of(run_id).await?
        };
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
            parent: Parent::of_run_json(rj),
            run_id: run_id.to_owned(),
            namespace: str_of(rj, "namespace").unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
            status,
            labels,
            process_id: str_of(rj, "processId").unwrap_or_default(),
            created_at: str_of(rj, "createdAt"),
            updated_at: None,
            head_seq: head.seq,
            pending_by_kind: BTreeMap::new(),
            status_reason: String::new(),
            output,
            error,
            client_driven: super::client::is_client_driven(rj),
            // A budget that no longer parses (a newer writer's) is not enforced, and said so.
            budget: rj.get(super::BUDGET_KEY).and_then(|b| {
                serde_json::from_value(b.clone())
                    .inspect_err(|e| tracing::warn!(run_id, error = %e, "the run's budget does not parse; not enforced"))
                    .ok()
            }),
            trace: super::trace::of_run_json(rj),
        };
        Ok(Some(StoredRun {
            summary,
            idempotency_key: str_of(rj, "idempotencyKey"),
        }))
    }
}
