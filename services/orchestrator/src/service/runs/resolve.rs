//! Everything that settles an effect or a run: worker completions, posted results, breakpoint
//! decisions, tasks that ran out of attempts, cancellation and halting. Each write happens under
//! the run's lock and only while its precondition holds (effect pending, run not finished), so
//! races between these paths end in exactly one journaled outcome; the losers learn whether
//! their result was the same (idempotent) or different (`Conflict`).

use babysitter_journal::index::{EffectRecord, EffectStatus};
use babysitter_journal::store::RunFile;
use babysitter_journal::{EventType, NewEvent};
use serde_json::{Map, Value, json};

use super::{RunManager, RunStatus, RunSummary, lock};
use crate::engine::commit::Commit;
pub use crate::engine::commit::{RequestUsage, TaskUsage, Usage};
use crate::engine::lifecycle;
use crate::service::queue::{Completion, GaveUp};
use crate::service::{Result, ServiceError};

/// Logs larger than this are stored as blobs (the log file keeps [`LOG_HEAD_BYTES`] of them).
pub const LOG_BLOB_THRESHOLD: usize = 1024 * 1024;
pub const LOG_HEAD_BYTES: usize = 64 * 1024;

/// A task's result as executors report it.
#[derive(Debug, Clone, Default)]
pub struct TaskOutcome {
    /// `Ok(value)` or `Err({name, message, stack?, data?})`.
    pub outcome: Option<Result<Value, Value>>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub metadata: Option<Value>,
    /// The model usage reported with it, journaled as [`TaskUsage::events`] says.
    pub usage: TaskUsage,
    /// The lease's attempt, for a worker's completion (its per-request usage is keyed by it).
    pub attempt: Option<u32>,
    /// An agent's events for the record ([`super::agents::record`]).
    pub agent_events: Vec<super::agents::AgentEvent>,
}

impl TaskOutcome {
    /// Sets `key` in the result's metadata: what the orchestrator itself vouches for, over
    /// what the sender said.
    fn note(&mut self, key: &str, value: Value) {
        set_metadata(&mut self.metadata, key, value);
    }
}

/// Sets `key` in a result's `metadata` (an object; anything else there is replaced by one).
/// The one way the orchestrator adds to a result's metadata (principal, worker, logs' blobs,
/// the agent-event record).
pub(super) fn set_metadata(metadata: &mut Option<Value>, key: &str, value: Value) {
    let mut m = match metadata.take() {
        Some(Value::Object(m)) => m,
        _ => Map::new(),
    };
    m.insert(key.into(), value);
    *metadata = Some(Value::Object(m));
}

/// A breakpoint decision.
#[derive(Debug, Clone, Default)]
pub struct Decision {
    pub approved: bool,
    pub feedback: Option<String>,
    pub response: Option<String>,
    pub option: Option<String>,
    /// Who the client says decided.
    pub approver: Option<String>,
    /// The authenticated principal that sent the decision.
    pub principal: String,
}

/// A waiting breakpoint.
#[derive(Debug, Clone)]
pub struct BreakpointInfo {
    pub namespace: String,
    pub run_id: String,
    pub effect_id: String,
    pub breakpoint_id: String,
    pub label: String,
    pub payload: Option<Value>,
    pub requested_at: Option<String>,
    pub auto_approval: Option<Value>,
}

/// Whether a run can still be written to.
enum Writable {
    /// Live: its write lock (check it is still live once holding it).
    Live(std::sync::Arc<tokio::sync::Mutex<()>>),
    /// It has ended.
    Ended,
}

/// How a commit ended.
enum Settled {
    New(u64),
    /// The effect already carried this very result.
    Same,
}

impl RunManager {
    /// Whether the run visible in `namespace` is live (its lock) or has ended.
    async fn writable(&self, namespace: &str, run_id: &str) -> Result<Writable> {
        let run_lock = self.run_lock(run_id);
        // Visibility (NotFound); read after the lock so a run that ended just now reads as ended.
        let summary = self.get(namespace, run_id).await?;
        if let Some(run_lock) = run_lock {
            return Ok(Writable::Live(run_lock));
        }
        if summary.status.is_terminal() {
            Ok(Writable::Ended)
        } else {
            // In the journal, unfinished, yet not live here: it failed to load at start.
            Err(ServiceError::Conflict(format!(
                "run {run_id} is not active in this orchestrator"
            )))
        }
    }

    /// The effect's record, the run being visible in `namespace`.
    async fn record(&self, namespace: &str, run_id: &str, effect_id: &str) -> Result<EffectRecord> {
        self.get(namespace, run_id).await?;
        self.engine()
            .view(run_id, |_, idx| {
                idx.effects.get(effect_id).map(|r| (**r).clone())
            })
            .await?
            .ok_or_else(|| ServiceError::NotFound(format!("effect {effect_id} of run {run_id}")))
    }

    /// Commits `outcome` for a pending effect under the run's lock; an already resolved effect
    /// with the same result is [`Settled::Same`], with another result a `Conflict`.
    async fn settle(&self, run_id: &str, effect_id: &str, o: TaskOutcome) -> Result<Settled> {
        let outcome = o.outcome.clone().ok_or_else(|| {
            ServiceError::invalid("result", "neither value_json nor error is set")
        })?;
        let ended = || {
            ServiceError::Conflict(format!(
                "run {run_id} has ended; effect {effect_id} can no longer be resolved"
            ))
        };
        let run_lock = self.run_lock(run_id).ok_or_else(ended)?;
        let _guard = run_lock.lock().await;
        if !self.is_live(run_id) {
            return Err(ended());
        }
        let (head, record) = self
            .engine()
            .view(run_id, |h, idx| {
                (h.clone(), idx.effects.get(effect_id).map(|r| (**r).clone()))
            })
            .await?;
        let record = record
            .ok_or_else(|| ServiceError::NotFound(format!("effect {effect_id} of run {run_id}")))?;
        if record.status != EffectStatus::Requested {
            return self.compare_resolved(run_id, &record, &outcome).await;
        }
        let mut metadata = o.metadata;
        let stdout = self
            .spill_log(run_id, "stdout", o.stdout, &mut metadata)
            .await?;
        let stderr = self
            .spill_log(run_id, "stderr", o.stderr, &mut metadata)
            .await?;
        super::agents::store_record(
            self.journal(),
            &self.inner.config.secrets,
            run_id,
            o.agent_events,
            &mut metadata,
        )
        .await?;
        // The usage is journaled in the same append as the resolution: a repeated completion
        // finds the effect resolved and journals nothing.
        let usage: Vec<NewEvent> = o.usage.events(effect_id, record.kind.as_deref(), o.attempt);
        let commit = Commit {
            effect_id: effect_id.to_owned(),
            outcome,
            stdout,
            stderr,
            started_at: o.started_at,
            finished_at: o.finished_at,
            metadata,
            stdout_ref: None,
            stderr_ref: None,
        };
        let seq = self
            .inner
            .engine
            .commit_pending(run_id, head, record, commit, usage)
            .await?
            .seq;
        self.set_summary(run_id, |r| r.head_seq = r.head_seq.max(seq));
        Ok(Settled::New(seq))
    }

    /// A log over [`LOG_BLOB_THRESHOLD`] is stored whole as a content-addressed blob; the task's
    /// `<name>.log` keeps its head and names the blob, and `result.json` metadata records it as
    /// `<name>Blob` / `<name>Bytes` (babysitter's tools still find a readable log file).
    async fn spill_log(
        &self,
        run_id: &str,
        name: &str,
        log: Option<String>,
        metadata: &mut Option<Value>,
    ) -> Result<Option<String>> {
        let Some(text) = log else { return Ok(None) };
        if text.len() <= LOG_BLOB_THRESHOLD {
            return Ok(Some(text));
        }
        let total = text.len();
        let blob = self
            .journal()
            .put_blob(run_id, bytes::Bytes::from(text.clone()))
            .await?;
        let head = format!(
            "{}\n[{name} continues: {total} bytes in all, stored as blob {blob}]\n",
            super::tasks::head_of(&text, LOG_HEAD_BYTES)
        );
        set_metadata(metadata, &format!("{name}Blob"), json!(blob.to_string()));
        set_metadata(metadata, &format!("{name}Bytes"), json!(total));
        Ok(Some(head))
    }

    async fn compare_resolved(
        &self,
        run_id: &str,
        record: &EffectRecord,
        outcome: &Result<Value, Value>,
    ) -> Result<Settled> {
        let stored = self
            .journal()
            .get_run_file(run_id, &RunFile::task(&record.effect_id, "result.json")?)
            .await
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
        let same = match (stored.as_ref(), outcome) {
            (Some(doc), Ok(v)) => {
                doc.get("status") == Some(&json!("ok"))
                    && (doc.get("value") == Some(v)
                        // failed shell tasks are stored as values (F15): compare the status only
                        || record.kind.as_deref() == Some("shell"))
            }
            (Some(doc), Err(e)) => {
                doc.get("status") == Some(&json!("error"))
                    && doc.pointer("/error/message") == e.get("message")
                    || record.kind.as_deref() == Some("shell")
                        && doc.pointer("/value/success") == Some(&json!(false))
            }
            (None, _) => false,
        };
        if same {
            Ok(Settled::Same)
        } else {
            Err(ServiceError::Conflict(format!(
                "effect {} of run {run_id} is already {} with a different result",
                record.effect_id,
                record.status.as_str()
            )))
        }
    }

    /// A worker's completion under its lease. `Ok(true)`: it had already been accepted.
    /// `iterate_inline`: run the iteration it triggers before returning (the caller waits for
    /// the next task anyway).
    pub async fn complete_task(
        &self,
        worker_id: &str,
        lease_id: &str,
        effect_id: &str,
        mut outcome: TaskOutcome,
        iterate_inline: bool,
    ) -> Result<bool> {
        outcome.attempt = crate::service::queue::lease_attempt(lease_id);
        // Which worker produced the result, in `result.json` (the dashboard and `task:show`
        // name it); the attempt numbers it among the lease's retries.
        outcome.note("workerId", json!(worker_id));
        if let Some(attempt) = outcome.attempt {
            outcome.note("attempt", json!(attempt));
        }
        let spec = match self
            .inner
            .queue
            .begin_completion(worker_id, lease_id, effect_id)?
        {
            Completion::AlreadyCompleted => return Ok(true),
            Completion::Proceed(spec) => spec,
        };
        match self.settle(&spec.run_id, effect_id, outcome).await {
            Ok(settled) => {
                self.inner.queue.completed(lease_id);
                if iterate_inline {
                    self.iterate_now(&spec.run_id).await;
                } else {
                    self.schedule(&spec.run_id, false);
                }
                Ok(matches!(settled, Settled::Same))
            }
            Err(e @ ServiceError::Conflict(_)) => {
                // Resolved differently meanwhile: this lease is done either way.
                self.inner.queue.completed(lease_id);
                Err(e)
            }
            Err(e) => {
                self.inner.queue.completion_failed(lease_id);
                Err(e)
            }
        }
    }

    /// A result posted by an external or in-session executor. Returns (seq, already_resolved).
    pub async fn post_result(
        &self,
        namespace: &str,
        run_id: &str,
        effect_id: &str,
        mut outcome: TaskOutcome,
        principal: &str,
    ) -> Result<(u64, bool)> {
        let record = self.record(namespace, run_id, effect_id).await?;
        // A breakpoint answered this way (babysitter's `task:post` on a breakpoint) records who
        // answered it: the authenticated caller, in the result's metadata. The value stays what
        // was posted (the process sees it, and must see what babysitter's CLI would record).
        if record.kind.as_deref() == Some("breakpoint") {
            outcome.note("principal", json!(principal));
        }
        let settled = self.settle(run_id, effect_id, outcome).await?;
        self.inner.queue.remove(run_id, effect_id);
        if matches!(settled, Settled::New(_)) && self.is_live_client_driven(run_id) {
            self.settle_state(run_id, Some("post_effect_resolution"))
                .await;
        }
        self.schedule(run_id, false);
        Ok(match settled {
            Settled::New(seq) => (seq, false),
            Settled::Same => (self.journal().head(run_id).await?.seq, true),
        })
    }

    /// Approves or rejects a waiting breakpoint. Returns (seq, already_resolved).
    pub async fn resolve_breakpoint(
        &self,
        namespace: &str,
        run_id: &str,
        effect_id: &str,
        d: Decision,
    ) -> Result<(u64, bool)> {
        if effect_id == crate::service::budget::RAISE_BREAKPOINT {
            return self.decide_budget(namespace, run_id, d).await;
        }
        let record = self.record(namespace, run_id, effect_id).await?;
        if record.kind.as_deref() != Some("breakpoint") {
            return Err(ServiceError::invalid(
                "effect_id",
                format!(
                    "effect {effect_id} is a `{}` effect, not a breakpoint",
                    record.kind.as_deref().unwrap_or("unknown")
                ),
            ));
        }
        let mut value = Map::new();
        value.insert("approved".into(), json!(d.approved));
        if let Some(r) = d.response.filter(|s| !s.is_empty()) {
            value.insert("response".into(), json!(r));
        }
        if let Some(f) = d.feedback.filter(|s| !s.is_empty()) {
            value.insert("feedback".into(), json!(f));
        }
        if let Some(o) = d.option.filter(|s| !s.is_empty()) {
            value.insert("option".into(), json!(o));
        }
        let approver = d.approver.filter(|s| !s.is_empty());
        value.insert(
            "respondedBy".into(),
            json!(approver.clone().unwrap_or_else(|| d.principal.clone())),
        );
        value.insert("principal".into(), json!(d.principal));
        let now = crate::engine::iso(self.inner.engine.options().clock.as_ref()());
        let outcome = TaskOutcome {
            outcome: Some(Ok(Value::Object(value.clone()))),
            started_at: Some(now.clone()),
            finished_at: Some(now),
            ..Default::default()
        };
        let settled = match self.settle(run_id, effect_id, outcome).await {
            Err(ServiceError::Conflict(_)) if record.status != EffectStatus::Requested => {
                // Same decision again is idempotent, whoever sent it.
                let stored = self
                    .journal()
                    .get_run_file(run_id, &RunFile::task(effect_id, "result.json")?)
                    .await
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
                let approved = stored.as_ref().and_then(|s| s.pointer("/value/approved"));
                if approved == Some(&json!(d.approved)) {
                    Settled::Same
                } else {
                    return Err(ServiceError::Conflict(format!(
                        "breakpoint {effect_id} of run {run_id} was already decided differently"
                    )));
                }
            }
            other => other?,
        };
        self.schedule(run_id, false);
        Ok(match settled {
            Settled::New(seq) => (seq, false),
            Settled::Same => (self.journal().head(run_id).await?.seq, true),
        })
    }

    /// Fails an effect whose leases expired `max_attempts` times.
    pub(crate) async fn give_up(&self, g: &GaveUp) -> Result<()> {
        let outcome = TaskOutcome {
            outcome: Some(Err(json!({
                "name": "TaskAttemptsExhausted",
                "message": format!("the task's lease expired {} times without a completion (workers died or hung)", g.attempts),
                "data": {"attempts": g.attempts},
            }))),
            ..Default::default()
        };
        match self
            .settle(&g.spec.run_id, &g.spec.effect_id, outcome)
            .await
        {
            Ok(_) | Err(ServiceError::Conflict(_)) => {}
            Err(e) => return Err(e),
        }
        self.schedule(&g.spec.run_id, false);
        Ok(())
    }

    /// Cancels a run: pending effects are cancelled, running tasks told at their next heartbeat,
    /// and the run ends with `RUN_FAILED` marked `cancelled`.
    pub async fn cancel(&self, namespace: &str, run_id: &str, reason: &str) -> Result<RunSummary> {
        let reason = if reason.is_empty() {
            "cancelled"
        } else {
            reason
        };
        let Writable::Live(run_lock) = self.writable(namespace, run_id).await? else {
            return self.get(namespace, run_id).await;
        };
        let _guard = run_lock.lock().await;
        if !self.is_live(run_id) {
            return self.get(namespace, run_id).await;
        }
        let error = json!({"name": "RunCancelledError", "message": reason});
        self.end_locked(run_id, reason, error, true).await?;
        self.get(namespace, run_id).await
    }

    /// Ends a live run whose lock the caller holds: its tasks are cancelled at their workers,
    /// its pending effects cancelled, and `RUN_FAILED` with `error` is journaled (`cancelled`:
    /// by request, the run's status is then cancelled; otherwise failed).
    pub(super) async fn end_locked(
        &self,
        run_id: &str,
        reason: &str,
        error: Value,
        cancelled: bool,
    ) -> Result<()> {
        self.inner.queue.cancel_run(run_id, reason);
        let pending: Vec<String> = self
            .engine()
            .view(run_id, |_, idx| {
                idx.pending().map(|r| r.effect_id.clone()).collect()
            })
            .await?;
        for effect_id in pending {
            self.inner
                .engine
                .cancel_effect(run_id, &effect_id, Some(reason))
                .await?;
        }
        let head = self.journal().head(run_id).await?;
        let mut data = json!({"error": error, "reason": reason});
        if cancelled {
            data["cancelled"] = json!(true);
        }
        self.journal()
            .append(
                run_id,
                head.seq + 1,
                vec![NewEvent::new(EventType::RunFailed, data)],
            )
            .await?;
        self.inner.engine.evict(run_id).await?;
        self.set_summary(run_id, |r| {
            r.status = if cancelled {
                RunStatus::Cancelled
            } else {
                RunStatus::Failed
            };
            r.status_reason = reason.to_owned();
            r.error = Some(error);
            r.head_seq = head.seq + 1;
            r.pending_by_kind.clear();
        });
        self.finished(run_id);
        Ok(())
    }

    /// babysitter's `run:halt`: seals an unfinished run as completed or failed. A run that has
    /// already ended is left as it is (`already_terminal`).
    pub async fn halt(
        &self,
        namespace: &str,
        run_id: &str,
        reason: &str,
        failed: bool,
        force: bool,
    ) -> Result<(RunSummary, bool)> {
        let reason = if reason.is_empty() {
            "manual_halt"
        } else {
            reason
        };
        let run_lock = match self.writable(namespace, run_id).await? {
            Writable::Live(l) => l,
            Writable::Ended if force => {
                // No driver, timer or worker writes to an ended run; the journal's append at
                // head + 1 orders two forced seals.
                let summary = self.get(namespace, run_id).await?;
                let seq = self.append_seal(run_id, reason, failed).await?;
                if summary.client_driven {
                    self.settle_state(run_id, Some("manual_halt")).await;
                }
                let sealed = sealed_summary(summary, reason, failed, seq);
                lock(&self.inner.runs).replace_finished(sealed.clone());
                return Ok((sealed, true));
            }
            Writable::Ended => return Ok((self.get(namespace, run_id).await?, true)),
        };
        let _guard = run_lock.lock().await;
        if !self.is_live(run_id) {
            return Ok((self.get(namespace, run_id).await?, true));
        }
        let seq = self.append_seal(run_id, reason, failed).await?;
        self.inner.engine.evict(run_id).await?;
        if self.is_live_client_driven(run_id) {
            self.settle_state(run_id, Some("manual_halt")).await;
        }
        self.set_summary(run_id, |r| {
            *r = sealed_summary(r.clone(), reason, failed, seq);
        });
        self.finished(run_id);
        Ok((self.get(namespace, run_id).await?, false))
    }

    /// Appends babysitter's manual seal at the head; returns its seq.
    async fn append_seal(&self, run_id: &str, reason: &str, failed: bool) -> Result<u64> {
        let files = self.journal().run_files(run_id).await?;
        let (kind, data) = lifecycle::manual_seal(&files.run_json, reason, failed);
        let head = self.journal().head(run_id).await?;
        self.journal()
            .append(
                run_id,
                head.seq + 1,
                vec![NewEvent::new(kind, Value::Object(data))],
            )
            .await?;
        Ok(head.seq + 1)
    }

    /// Waiting breakpoints of one run or of every run in the namespace, in (run, effect) order,
    /// after `after` (a `run_id/effect_id` page token).
    pub async fn breakpoints(
        &self,
        namespace: &str,
        run_id: Option<&str>,
        page_size: usize,
        after: Option<&str>,
    ) -> Result<(Vec<BreakpointInfo>, Option<String>)> {
        let runs = match run_id {
            Some(id) => {
                self.get(namespace, id).await?;
                vec![id.to_owned()]
            }
            None => self.live_run_ids_in(namespace),
        };
        let size = page_size.clamp(1, 1000);
        let mut out = Vec::new();
        for run in runs {
            let (waiting, budget_wait) = lock(&self.inner.runs)
                .live(&run)
                .map(|r| {
                    let s = r.summary.borrow();
                    (
                        s.pending_by_kind.contains_key("breakpoint"),
                        s.status_reason.starts_with(super::spend::BUDGET_WAIT),
                    )
                })
                .unwrap_or_default();
            let records: Vec<EffectRecord> = if !waiting {
                Vec::new()
            } else {
                self.engine()
                    .view(&run, |_, idx| {
                        idx.pending()
                            .filter(|r| r.kind.as_deref() == Some("breakpoint"))
                            .cloned()
                            .collect()
                    })
                    .await?
            };
            for r in records {
                let token = format!("{run}/{}", r.effect_id);
                if after.is_some_and(|a| token.as_str() <= a) {
                    continue;
                }
                if out.len() == size {
                    let next = page_token(&out);
                    return Ok((out, next));
                }
                let task = self
                    .journal()
                    .get_run_file(&run, &RunFile::task(&r.effect_id, "task.json")?)
                    .await
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .unwrap_or_default();
                let meta = task.get("metadata").cloned().unwrap_or_default();
                out.push(BreakpointInfo {
                    namespace: namespace.to_owned(),
                    run_id: run.clone(),
                    effect_id: r.effect_id.clone(),
                    breakpoint_id: meta
                        .get("breakpointId")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    label: meta
                        .get("label")
                        .and_then(Value::as_str)
                        .or(r.label.as_deref())
                        .unwrap_or_default()
                        .to_owned(),
                    payload: meta.get("payload").cloned(),
                    requested_at: r.requested_at.clone(),
                    auto_approval: task.get("autoApproval").cloned(),
                });
            }
            if budget_wait {
                // After the run's own breakpoints (its token sorts after their ULIDs).
                let token = format!("{run}/{}", crate::service::budget::RAISE_BREAKPOINT);
                if after.is_some_and(|a| token.as_str() <= a) {
                    continue;
                }
                if out.len() == size {
                    let next = page_token(&out);
                    return Ok((out, next));
                }
                if let Some(b) = self.budget_breakpoint(namespace, &run).await? {
                    out.push(b);
                }
            }
        }
        Ok((out, None))
    }
}

impl RunManager {
    /// The `budget` breakpoint of a run waiting for its budget to be raised: the question, the
    /// limit crossed and the figures (the wait's `BUDGET_EXCEEDED`, as the index keeps it).
    async fn budget_breakpoint(
        &self,
        namespace: &str,
        run_id: &str,
    ) -> Result<Option<BreakpointInfo>> {
        let exceeded = self
            .engine()
            .view(run_id, |_, idx| idx.budget.exceeded.clone())
            .await?;
        let Some((data, at)) = exceeded else {
            return Ok(None);
        };
        let figures = format!(
            "{} {} of {}",
            data["limit"].as_str().unwrap_or("budget"),
            data["spent"],
            data["max"]
        );
        Ok(Some(BreakpointInfo {
            namespace: namespace.to_owned(),
            run_id: run_id.to_owned(),
            effect_id: crate::service::budget::RAISE_BREAKPOINT.to_owned(),
            breakpoint_id: crate::service::budget::RAISE_BREAKPOINT.to_owned(),
            label: format!("Raise the budget? ({figures})"),
            payload: Some(json!({
                "question": format!("The run has spent {figures}. Approve with the new limits as the response (e.g. `tokens=50000,cost=5`) to go on, or reject to fail it."),
                "budget": data,
            })),
            requested_at: Some(at),
            auto_approval: None,
        }))
    }
}

/// The page token after the last breakpoint of a full page.
fn page_token(page: &[BreakpointInfo]) -> Option<String> {
    page.last().map(|l| format!("{}/{}", l.run_id, l.effect_id))
}

/// A run's summary once sealed at `seq` (`failed`: `RUN_FAILED`, else `RUN_COMPLETED`).
fn sealed_summary(mut r: RunSummary, reason: &str, failed: bool, seq: u64) -> RunSummary {
    r.status = if failed {
        RunStatus::Failed
    } else {
        RunStatus::Completed
    };
    r.status_reason = reason.to_owned();
    r.error = failed.then(|| lifecycle::manual_halt_error(reason));
    r.head_seq = r.head_seq.max(seq);
    r
}
