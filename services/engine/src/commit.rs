//! Committing an effect's result (babysitter's `commitEffectResult`, what `task:post` does):
//! `tasks/<effectId>/result.json` (+ stdout/stderr logs) in the reference's exact format, then
//! one `EFFECT_RESOLVED`. Failed shell effects are committed as `ok` with
//! `{success:false, exitCode, stdout, stderr, error}` (the reference's F15). A task's model
//! usage goes into the same append as its resolution, as [`TaskUsage::events`] says.

use babysitter_journal::index::{EffectRecord, EffectStatus};
use babysitter_journal::store::RunFile;
use babysitter_journal::{EventType, Head, NewEvent, RunFileContent, StoredEvent};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::pool::Arrived;
use crate::{Engine, EngineError, identity, iso, views};

mod usage;

pub use usage::{RequestUsage, TaskUsage, Usage};

/// A result to commit.
#[derive(Debug, Clone)]
pub struct Commit {
    pub effect_id: String,
    /// `Ok(value)` or `Err(error)` (`{name, message, stack?, data?}` or any JSON).
    pub outcome: Result<Value, Value>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// Free JSON recorded in `result.json` (key-sorted), e.g. from `task:post --metadata`.
    pub metadata: Option<Value>,
    /// Run-relative refs to logs stored elsewhere (`--stdout-ref`); ignored when the text is given.
    pub stdout_ref: Option<String>,
    pub stderr_ref: Option<String>,
}

fn error_doc(e: &Value) -> Value {
    match e {
        Value::Object(m) if m.contains_key("name") => {
            let mut out = Map::new();
            for k in ["name", "message", "stack", "data"] {
                if let Some(v) = m.get(k) {
                    out.insert(k.into(), v.clone());
                }
            }
            Value::Object(out)
        }
        Value::String(s) => json!({"name": "Error", "message": s}),
        other => json!({"name": "Error", "message": other.to_string(), "data": other}),
    }
}

impl Engine {
    /// The head and the record of an effect that must still be pending.
    async fn pending_record(
        &self,
        run_id: &str,
        effect_id: &str,
    ) -> Result<(Head, EffectRecord), EngineError> {
        let (head, record) = self
            .view(run_id, |h, idx| {
                (h.clone(), idx.effects.get(effect_id).map(|r| (**r).clone()))
            })
            .await?;
        let record = record.ok_or_else(|| EngineError::InvalidRun {
            run_id: run_id.to_owned(),
            reason: format!("effect {effect_id} was not requested"),
        })?;
        if record.status != EffectStatus::Requested {
            return Err(EngineError::InvalidRun {
                run_id: run_id.to_owned(),
                reason: format!(
                    "effect {effect_id} is not pending (status {})",
                    record.status.as_str()
                ),
            });
        }
        Ok((head, record))
    }

    /// Writes the effect's logs and `result.json` together (one durability sync on the
    /// filesystem instead of one per file), then journals `event` right after `head`, followed by
    /// `then` in the same append. When the run's session is warm, the resolution is handed to
    /// its next iteration as it was stored.
    #[allow(clippy::too_many_arguments)]
    async fn settle_effect(
        &self,
        run_id: &str,
        record: EffectRecord,
        head: Head,
        logs: Vec<(RunFile, Bytes)>,
        result: Map<String, Value>,
        event: NewEvent,
        then: Vec<NewEvent>,
    ) -> Result<Head, EngineError> {
        let journal = self.journal();
        let mut files: Vec<(RunFile, RunFileContent)> = logs
            .into_iter()
            .map(|(f, b)| (f, RunFileContent::Bytes(b)))
            .collect();
        files.push((
            RunFile::task(&record.effect_id, "result.json")?,
            RunFileContent::Json(Value::Object(result)),
        ));
        let stored = journal.put_run_contents(run_id, files).await?;
        let mut event = event;
        event.recorded_at = Some(iso(self.now_ms()));
        let mut events = vec![event];
        events.extend(then);
        let committed = journal.append(run_id, head.seq + 1, events).await?;
        let (Some(first), Some(last)) = (committed.first(), committed.last()) else {
            return Ok(head);
        };
        if let Some(result) = stored.last() {
            self.stash_settled(run_id, record, first, result);
            for e in &committed[1..] {
                self.pool().stash(
                    run_id,
                    Arrived {
                        seq: e.seq,
                        update: None,
                    },
                );
            }
        }
        Ok(Head {
            seq: last.seq,
            ulid: last.ulid.clone(),
        })
    }

    /// The record as the index holds it after `event`, and its view from the stored result.
    fn stash_settled(&self, run_id: &str, mut r: EffectRecord, event: &StoredEvent, result: &[u8]) {
        let data = &event.body.data;
        r.status = match (&event.body.kind, data.get("status").and_then(Value::as_str)) {
            (EventType::EffectCancelled, _) => EffectStatus::Cancelled,
            (_, Some("ok")) => EffectStatus::ResolvedOk,
            (_, Some("error")) => EffectStatus::ResolvedError,
            _ => return,
        };
        r.error = data.get("error").cloned();
        r.resolved_at = Some(event.body.recorded_at.clone());
        if let Some(view) = views::view_from_stored(&r, result) {
            self.pool().stash(
                run_id,
                Arrived {
                    seq: event.seq,
                    update: Some((r.invocation_key, view)),
                },
            );
        }
    }

    /// Commits the result of a pending effect; returns the new head.
    pub async fn commit_result(&self, run_id: &str, c: Commit) -> Result<Head, EngineError> {
        self.commit_result_then(run_id, c, Vec::new()).await
    }

    /// [`Engine::commit_result`], journaling `then` in the same append (e.g. its usage).
    pub async fn commit_result_then(
        &self,
        run_id: &str,
        c: Commit,
        then: Vec<NewEvent>,
    ) -> Result<Head, EngineError> {
        let (head, record) = self.pending_record(run_id, &c.effect_id).await?;
        self.commit_pending(run_id, head, record, c, then).await
    }

    /// [`Engine::commit_result`] for an effect the caller has just found pending (`record`, at
    /// `head`: no second index lookup), journaling `then` in the same append right after the
    /// resolution (e.g. its `COST_TRACKED`). A stale `head` or a record no longer pending fails
    /// the append (a conflict, or an invalid event) before anything is journaled.
    pub async fn commit_pending(
        &self,
        run_id: &str,
        head: Head,
        record: EffectRecord,
        c: Commit,
        then: Vec<NewEvent>,
    ) -> Result<Head, EngineError> {
        if record.effect_id != c.effect_id {
            return Err(EngineError::InvalidRun {
                run_id: run_id.to_owned(),
                reason: format!(
                    "result for effect {} committed against the record of {}",
                    c.effect_id, record.effect_id
                ),
            });
        }
        let mut outcome = c.outcome.clone();
        if record.kind.as_deref() == Some("shell")
            && let Err(e) = &outcome
        {
            outcome = Ok(crate::lifecycle::shell_failure(
                e,
                c.stdout.as_deref(),
                c.stderr.as_deref(),
            ));
        }
        let id = &c.effect_id;
        let mut stdout_ref = c.stdout_ref.clone().filter(|r| !r.is_empty());
        let mut stderr_ref = c.stderr_ref.clone().filter(|r| !r.is_empty());
        let mut logs = Vec::new();
        if let Some(out) = &c.stdout {
            logs.push((RunFile::task(id, "stdout.log")?, Bytes::from(out.clone())));
            stdout_ref = Some(format!("tasks/{id}/stdout.log"));
        }
        if let Some(err) = &c.stderr {
            logs.push((RunFile::task(id, "stderr.log")?, Bytes::from(err.clone())));
            stderr_ref = Some(format!("tasks/{id}/stderr.log"));
        }
        let mut doc = Map::new();
        doc.insert("schemaVersion".into(), json!("2026.01.results-v1"));
        doc.insert("effectId".into(), json!(id));
        doc.insert("taskId".into(), json!(record.task_id));
        doc.insert("invocationKey".into(), json!(record.invocation_key));
        doc.insert(
            "status".into(),
            json!(if outcome.is_ok() { "ok" } else { "error" }),
        );
        if let Ok(v) = &outcome {
            doc.insert("result".into(), identity::key_sorted_clone(v));
        }
        if let Err(e) = &outcome {
            doc.insert("error".into(), identity::key_sorted_clone(&error_doc(e)));
        }
        if let Some(r) = &stdout_ref {
            doc.insert("stdoutRef".into(), json!(r));
        }
        if let Some(r) = &stderr_ref {
            doc.insert("stderrRef".into(), json!(r));
        }
        if let Some(t) = &c.started_at {
            doc.insert("startedAt".into(), json!(t));
        }
        if let Some(t) = &c.finished_at {
            doc.insert("finishedAt".into(), json!(t));
        }
        if let Some(m) = &c.metadata {
            doc.insert("metadata".into(), identity::key_sorted_clone(m));
        }
        if let Ok(v) = &outcome {
            doc.insert("value".into(), identity::key_sorted_clone(v));
        }
        doc.insert("sdkVersion".into(), json!("6.0.0"));
        let mut data = Map::new();
        data.insert("effectId".into(), json!(id));
        data.insert(
            "status".into(),
            json!(if outcome.is_ok() { "ok" } else { "error" }),
        );
        data.insert("resultRef".into(), json!(format!("tasks/{id}/result.json")));
        if let Err(e) = &outcome {
            data.insert("error".into(), error_doc(e));
        }
        if let Some(r) = stdout_ref {
            data.insert("stdoutRef".into(), json!(r));
        }
        if let Some(r) = stderr_ref {
            data.insert("stderrRef".into(), json!(r));
        }
        if let Some(t) = c.started_at {
            data.insert("startedAt".into(), json!(t));
        }
        if let Some(t) = c.finished_at {
            data.insert("finishedAt".into(), json!(t));
        }
        if record.kind.as_deref() == Some("breakpoint")
            && let Some(bp) = record.step_id.strip_prefix("__sdk.breakpoint.")
        {
            // B16 fixed: the breakpoint id comes from the step id (without an occurrence suffix).
            let bp_id = match bp.rsplit_once('.') {
                Some((base, n)) if n.chars().all(|c| c.is_ascii_digit()) => base,
                _ => bp,
            };
            data.insert("breakpointId".into(), json!(bp_id));
        }
        let event = NewEvent::new(EventType::EffectResolved, Value::Object(data));
        self.settle_effect(run_id, record, head, logs, doc, event, then)
            .await
    }
}

impl Engine {
    /// Cancels a pending effect (babysitter's `task:cancel`): `result.json` with status
    /// `cancelled`, then `EFFECT_CANCELLED`. The process sees an `EffectCancelledError`.
    pub async fn cancel_effect(
        &self,
        run_id: &str,
        effect_id: &str,
        reason: Option<&str>,
    ) -> Result<Head, EngineError> {
        let (head, record) = self.pending_record(run_id, effect_id).await?;
        let message = reason.unwrap_or("Effect cancelled");
        let mut doc = Map::new();
        doc.insert("schemaVersion".into(), json!("2026.01.results-v1"));
        doc.insert("effectId".into(), json!(effect_id));
        doc.insert("taskId".into(), json!(record.task_id));
        doc.insert("invocationKey".into(), json!(record.invocation_key));
        doc.insert("status".into(), json!("cancelled"));
        doc.insert(
            "error".into(),
            json!({"message": message, "name": "EffectCancelledError"}),
        );
        if let Some(r) = reason {
            doc.insert("reason".into(), json!(r));
        }
        let mut meta = Map::new();
        meta.insert("cancelled".into(), json!(true));
        if let Some(r) = reason {
            meta.insert("reason".into(), json!(r));
        }
        doc.insert("metadata".into(), Value::Object(meta));
        doc.insert("sdkVersion".into(), json!("6.0.0"));
        let mut data = Map::new();
        data.insert("effectId".into(), json!(effect_id));
        if let Some(r) = reason {
            data.insert("reason".into(), json!(r));
        }
        let event = NewEvent::new(EventType::EffectCancelled, Value::Object(data));
        self.settle_effect(run_id, record, head, Vec::new(), doc, event, Vec::new())
            .await
    }
}
