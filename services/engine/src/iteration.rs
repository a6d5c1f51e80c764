//! One iteration: bring the run's process up to the journal (continue a warm session, or replay
//! cold), then journal everything it asked for as one batch — new effects (`EFFECT_REQUESTED`,
//! after their `task.json`) and the terminal event when it finished — and report the result in
//! babysitter's terms (`waiting`, `completed`, `halted`, `failed`, `none`).
//!
//! Fixes of the reference kept here: a pending sleep whose time has passed is resolved (B1);
//! a task error the process re-throws journals `RUN_FAILED` (B5); the process code hash is
//! checked every iteration and a change is journaled (B9); `ctx.log` lines are emitted once
//! (per-run sequence numbers, B23); one append per iteration instead of one per effect.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use babysitter_journal::index::{EffectRecord, EffectStatus};
use babysitter_journal::store::RunFile;
use babysitter_journal::{EventType, Head, NewEvent};
use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::drive::Driven;
use crate::host::HostError;
use crate::pool::Warm;
use crate::session::{DriveReport, LogLine, ProcessState, Request};
use crate::task_files::Streamed;
use crate::views;
use crate::{Engine, EngineError, identity, iso};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IterationStatus {
    /// New effects were requested, or the process waits on pending ones.
    Waiting,
    Completed,
    Halted,
    Failed,
    /// Nothing to do (already terminal).
    None,
}

impl IterationStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Completed => "completed",
            Self::Halted => "halted",
            Self::Failed => "failed",
            Self::None => "none",
        }
    }
}

/// What an iteration did.
#[derive(Debug, Clone)]
pub struct Iteration {
    pub status: IterationStatus,
    pub reason: Option<String>,
    pub output: Option<Value>,
    pub error: Option<Value>,
    /// babysitter's `nextActions`: the effects the process waits on.
    pub next_actions: Vec<Value>,
    /// Effect ids requested by this iteration.
    pub requested: Vec<String>,
    /// Their `task.json` as stored (redacted), in the same order: a dispatcher needs no read.
    pub requested_tasks: Vec<Bytes>,
    pub warnings: Vec<String>,
    /// Journaled effects the process ended without reaching (e.g. after a code change).
    pub unreached: Vec<String>,
    /// Time spent in the JS engine (replay or continuation).
    pub js_time: std::time::Duration,
    /// Whether the iteration continued a warm session (false: replayed cold).
    pub warm: bool,
    pub head: Head,
    /// The `ctx.log` lines new in this iteration (replays' repeats left out), redacted.
    pub logs: Vec<LogLine>,
}

/// The parts of `run.json` the engine needs.
#[derive(Debug, Clone)]
pub(crate) struct RunInfo {
    pub(crate) process_id: String,
    pub(crate) run_dir: PathBuf,
    /// The entry file as run.json names it (made absolute, not canonical: resolving symlinks
    /// costs a syscall per path component, and only a cold start needs the process folder).
    pub(crate) entry: PathBuf,
    pub(crate) export_name: String,
    pub(crate) inputs: Option<Value>,
    pub(crate) non_interactive: bool,
    pub(crate) process_code_hash: Option<String>,
    pub(crate) created_ms: i64,
}

pub(crate) fn run_info(
    engine: &Engine,
    run_id: &str,
    run: &Value,
    inputs: Option<Value>,
) -> Result<RunInfo, EngineError> {
    let bad = |reason: &str| EngineError::InvalidRun {
        run_id: run_id.to_owned(),
        reason: reason.to_owned(),
    };
    let import_path = crate::lifecycle::iterable_entry(run).map_err(bad)?;
    let entry = run.get("entrypoint").unwrap_or(&Value::Null);
    let run_dir = engine.options().runs_root.join(run_id);
    let entry_file = if Path::new(import_path).is_absolute() {
        PathBuf::from(import_path)
    } else {
        run_dir.join(import_path)
    };
    let str_of = |k: &str| run.get(k).and_then(Value::as_str).map(str::to_owned);
    Ok(RunInfo {
        process_id: str_of("processId")
            .or_else(|| str_of("request"))
            .unwrap_or_else(|| run_id.to_owned()),
        run_dir,
        entry: entry_file,
        export_name: entry
            .get("exportName")
            .and_then(Value::as_str)
            .unwrap_or("process")
            .to_owned(),
        inputs,
        non_interactive: run
            .get("nonInteractive")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        process_code_hash: str_of("processCodeHash"),
        created_ms: str_of("createdAt")
            .as_deref()
            .and_then(views::iso_to_ms)
            .unwrap_or(0),
    })
}

fn terminal_status(ty: &str) -> IterationStatus {
    match ty {
        "RUN_COMPLETED" => IterationStatus::Completed,
        "RUN_HALTED" => IterationStatus::Halted,
        _ => IterationStatus::Failed,
    }
}

impl Engine {
    /// Runs one iteration of `run_id`.
    pub async fn iterate(&self, run_id: &str) -> Result<Iteration, EngineError> {
        self.iterate_with(run_id, None).await
    }

    /// [`Engine::iterate`], journaling `marker` (e.g. babysitter's `RUN_ITERATION`) in the same
    /// append as the iteration's own events — one durable write instead of two. A finished run
    /// gets no marker.
    pub async fn iterate_with(
        &self,
        run_id: &str,
        marker: Option<NewEvent>,
    ) -> Result<Iteration, EngineError> {
        let mut marker = marker;
        let journal = self.journal().clone();
        let files = self.run_files(run_id).await?;
        let mut warnings = Vec::new();
        // Only what this iteration needs from the index: no copy of thousands of records.
        let (mut head, pending, terminal) = self
            .view(run_id, |h, idx| {
                let pending: Vec<EffectRecord> = idx.pending().cloned().collect();
                let terminal = idx
                    .last_lifecycle
                    .clone()
                    .map(|m| m.event_type)
                    .filter(|t| t != "RUN_CREATED");
                (h.clone(), pending, terminal)
            })
            .await?;

        // Terminal shortcut: a finished run is not run again.
        if pending.is_empty()
            && let Some(ty) = terminal
        {
            let status = terminal_status(&ty);
            let output = if status == IterationStatus::Completed {
                self.read_output(run_id).await?
            } else {
                None
            };
            return Ok(Iteration {
                status: IterationStatus::None,
                reason: Some(format!("already {}", status.as_str())),
                output,
                error: None,
                next_actions: Vec::new(),
                requested: Vec::new(),
                requested_tasks: Vec::new(),
                warnings,
                unreached: Vec::new(),
                js_time: std::time::Duration::ZERO,
                warm: false,
                head,
                logs: Vec::new(),
            });
        }

        // Resolved only now: a finished run answers even if its process file has moved.
        let info = run_info(self, run_id, &files.run_json, files.inputs_json.clone())?;
        // The process file must be readable before anything is written.
        self.code_hash(&info.entry)
            .map_err(|e| cannot_open(run_id, &info.entry, &e))?;

        // B1: a pending sleep whose time has passed is resolved, not skipped forever.
        let now = self.now_ms();
        let mut pre: Vec<NewEvent> = Vec::new();
        for r in pending
            .iter()
            .filter(|r| r.kind.as_deref() == Some("sleep"))
        {
            let task = journal
                .get_run_file(run_id, &RunFile::task(&r.effect_id, "task.json")?)
                .await;
            let target = task
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                .and_then(|t| t.pointer("/sleep/targetEpochMs").and_then(Value::as_i64));
            if target.is_some_and(|t| t <= now) {
                let at = iso(now);
                self.write_result(run_id, r, &json!({"sleptUntil": target}), &at)
                    .await?;
                pre.push(self.event(
                    EventType::EffectResolved,
                    json!({"effectId": r.effect_id, "status": "ok", "resultRef": format!("tasks/{}/result.json", r.effect_id),
                           "startedAt": at, "finishedAt": at}),
                    now,
                ));
            }
        }
        if !pre.is_empty() {
            if let Some(m) = marker.take() {
                pre.insert(0, m);
            }
            head = journal.append_for_head(run_id, head.seq + 1, pre).await?;
        }
        match self.drive(run_id, &info, &head).await {
            Ok(d) if is_out_of_memory(&d.report.state) => {
                let e = HostError::MemoryLimit {
                    limit: self.options().memory_limit,
                };
                self.fail_run(run_id, head, &e, warnings).await
            }
            Ok(d) => {
                let changed = self
                    .code_change(
                        run_id,
                        &info,
                        d.report.code_digest.as_deref(),
                        &mut warnings,
                    )
                    .await?;
                let lead = marker.into_iter().chain(changed).collect();
                self.finish(run_id, &info, head, d, warnings, lead).await
            }
            Err(EngineError::Host(e)) => self.fail_run(run_id, head, &e, warnings).await,
            Err(e) => Err(e),
        }
    }

    async fn finish(
        &self,
        run_id: &str,
        info: &RunInfo,
        head: Head,
        driven: Driven,
        warnings: Vec<String>,
        lead: Vec<NewEvent>,
    ) -> Result<Iteration, EngineError> {
        let Driven {
            mut report,
            session,
            warm,
        } = driven;
        let journal = self.journal();
        let now = self.now_ms();
        let mut events: Vec<NewEvent> = lead;
        // task.json first (all of them, one durability sync), then the request events: a reader
        // never finds a request without its task.
        // Streamed during the drive (a fan-out), or stored now.
        let streamed = std::mem::take(&mut report.task_files);
        let mut task_files = Vec::new();
        for r in &mut report.requests {
            if matches!(streamed, Streamed::No) {
                task_files.push((
                    RunFile::task(&r.effect_id, "task.json")?,
                    std::mem::take(&mut r.task_doc),
                ));
            }
            events.push(self.event(EventType::EffectRequested, request_data(r), now));
        }
        let requested_tasks = match streamed {
            Streamed::Yes(stream) => stream.finish().await?,
            Streamed::Failed(e) => return Err(e.into()),
            Streamed::No if task_files.is_empty() => Vec::new(),
            Streamed::No => journal.put_run_json_files(run_id, task_files).await?,
        };
        let logs = self.emit_logs(run_id, info, &report).await?;
        let requested: Vec<String> = report
            .requests
            .iter()
            .map(|r| r.effect_id.clone())
            .collect();
        let (status, reason, output, error) = match &report.state {
            ProcessState::Pending => (IterationStatus::Waiting, None, None, None),
            // Stray effects (requested but not awaited): the run waits for them.
            ProcessState::Returned(_) if !requested.is_empty() => (
                IterationStatus::Waiting,
                Some("stray-effects".to_owned()),
                None,
                None,
            ),
            ProcessState::Returned(v) => {
                // Durable by the append below (its `RUN_COMPLETED` refers to it): no sync of
                // its own (the reference writes it atomically before that event, as this does).
                let output = vec![(RunFile::state("output.json")?, Bytes::from(v.to_string()))];
                journal.put_run_files(run_id, output).await?;
                // babysitter's `costStats`, when the run tracked any cost (from the index).
                let cost_stats = journal
                    .inspect_now(run_id, |_, idx| idx.costs.to_json(run_id))
                    .await?;
                let mut data = json!({"outputRef": "state/output.json"});
                if let Some(stats) = cost_stats {
                    data["costStats"] = stats;
                }
                events.push(self.event(EventType::RunCompleted, data, now));
                (IterationStatus::Completed, None, Some(v.clone()), None)
            }
            ProcessState::Halted { reason, payload } => {
                let mut data = Map::new();
                data.insert("reason".into(), json!(reason));
                if let Some(p) = payload {
                    data.insert("payload".into(), p.clone());
                }
                events.push(self.event(EventType::RunHalted, Value::Object(data), now));
                (IterationStatus::Halted, Some(reason.clone()), None, None)
            }
            ProcessState::Threw(err) => {
                // B5: a task error the process lets escape ends the run with RUN_FAILED; other
                // throws are process bugs (PROCESS_RUNTIME_ERROR, recoverable).
                let last_resolved: Option<Arc<EffectRecord>> = self
                    .journal()
                    .inspect_now(run_id, |_, idx| {
                        idx.last_resolved
                            .as_ref()
                            .and_then(|id| idx.effects.get(id))
                            .cloned()
                    })
                    .await?;
                let last_resolved = last_resolved.as_ref();
                if last_resolved.is_some_and(|r| r.status == EffectStatus::ResolvedError) {
                    events.push(self.event(EventType::RunFailed, json!({"error": err}), now));
                } else {
                    events.push(self.event(
                        EventType::ProcessRuntimeError,
                        json!({"error": err, "iteration": 0, "runId": run_id, "processId": info.process_id,
                               "journalHead": if head.seq == 0 { Value::Null } else { json!({"seq": head.seq, "ulid": head.ulid}) },
                               "lastEffect": last_resolved.map(|r| json!({"effectId": r.effect_id, "invocationKey": r.invocation_key,
                                    "taskId": r.task_id, "stepId": r.step_id, "kind": r.kind, "status": r.status.as_str(),
                                    "resultRef": r.result_ref})),
                               "recovery": {"command": "run:recover-process-error", "recoverable": true}}),
                        now,
                    ));
                }
                let msg = err
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("process error")
                    .to_owned();
                (
                    IterationStatus::Failed,
                    Some(format!("process-error: {msg}")),
                    None,
                    Some(err.clone()),
                )
            }
        };
        let mut new_head = head.clone();
        if !events.is_empty() {
            match journal.append_for_head(run_id, head.seq + 1, events).await {
                Ok(h) => new_head = h,
                Err(e) => {
                    // The session ran ahead of a journal it could not extend: it must not be
                    // reused (it is dropped here).
                    return Err(e.into());
                }
            }
        }
        if let Some(session) = session {
            self.pool().put(
                run_id,
                Warm {
                    session,
                    consumed: new_head.seq,
                    // A cold start's time says nothing about how long continuations take.
                    last_js: if warm {
                        report.js_time
                    } else {
                        std::time::Duration::ZERO
                    },
                },
            );
        }
        let next_actions = if self.options().next_actions {
            self.next_actions(run_id, &mut report, &iso(now)).await?
        } else {
            Vec::new()
        };
        let mut warnings = warnings;
        // Only a cold replay that ran to the end knows what it no longer reaches.
        let unreached: Vec<String> = if status == IterationStatus::Waiting || warm {
            Vec::new()
        } else {
            let reached = &report.reached;
            self.journal()
                .inspect_now(run_id, |_, idx| {
                    idx.effects
                        .values()
                        .filter(|r| !reached.contains(&r.invocation_key))
                        .map(|r| r.effect_id.clone())
                        .collect()
                })
                .await?
        };
        if !unreached.is_empty() {
            warnings.push(format!(
                "{} journaled effect(s) were not reached by the process: {}",
                unreached.len(),
                unreached.join(", ")
            ));
        }
        Ok(Iteration {
            status,
            reason,
            output,
            error,
            next_actions,
            requested,
            requested_tasks,
            warnings,
            unreached,
            js_time: report.js_time,
            warm,
            head: new_head,
            logs,
        })
    }

    /// The process could not run at all (it does not load, or it hit its memory / CPU limit):
    /// the run fails with `RUN_FAILED` naming why; the host is dropped, other runs go on.
    async fn fail_run(
        &self,
        run_id: &str,
        head: Head,
        e: &HostError,
        warnings: Vec<String>,
    ) -> Result<Iteration, EngineError> {
        self.evict(run_id).await?;
        let name = match e {
            HostError::CpuLimit { .. } | HostError::MemoryLimit { .. } => "ResourceLimitError",
            HostError::Js { name, .. } => name.as_str(),
            _ => "ProcessLoadError",
        };
        let error = json!({"name": name, "message": e.to_string()});
        let committed = self
            .journal()
            .append(
                run_id,
                head.seq + 1,
                vec![self.event(EventType::RunFailed, json!({"error": error}), self.now_ms())],
            )
            .await?;
        let head = committed
            .last()
            .map(|c| Head {
                seq: c.seq,
                ulid: c.ulid.clone(),
            })
            .unwrap_or(head);
        Ok(Iteration {
            status: IterationStatus::Failed,
            reason: Some(format!("failed: {e}")),
            output: None,
            error: Some(error),
            next_actions: Vec::new(),
            requested: Vec::new(),
            requested_tasks: Vec::new(),
            warnings,
            unreached: Vec::new(),
            js_time: std::time::Duration::ZERO,
            warm: false,
            head,
            logs: Vec::new(),
        })
    }

    /// babysitter's `nextActions` for the effects the process is blocked on; the TaskDefs of
    /// this iteration's requests are moved into them. Those effects were journaled at
    /// `requested_at` (their `requestedAt`, as `task:list` reports it later from the journal).
    async fn next_actions(
        &self,
        run_id: &str,
        report: &mut DriveReport,
        requested_at: &str,
    ) -> Result<Vec<Value>, EngineError> {
        let mut task_defs: Vec<Option<Value>> = report
            .requests
            .iter_mut()
            .map(|r| r.task_def.take())
            .collect();
        let new: HashMap<&str, usize> = report
            .requests
            .iter()
            .enumerate()
            .map(|(i, r)| (r.effect_id.as_str(), i))
            .collect();
        let known: Vec<&String> = report
            .blocked
            .iter()
            .filter(|id| !new.contains_key(id.as_str()))
            .collect();
        let records: HashMap<String, Arc<EffectRecord>> = if known.is_empty() {
            HashMap::new()
        } else {
            self.journal()
                .inspect_now(run_id, |_, idx| {
                    known
                        .iter()
                        .filter_map(|id| idx.effects.get(*id).map(|r| ((*id).clone(), r.clone())))
                        .collect()
                })
                .await?
        };
        let mut seen = HashSet::new();
        let mut actions = Vec::new();
        for id in &report.blocked {
            if !seen.insert(id.as_str()) {
                continue;
            }
            if let Some(&i) = new.get(id.as_str()) {
                let r = &report.requests[i];
                // Built field by field: `json!` would re-serialise the TaskDef value by value.
                let text = |s: &str| Value::String(s.to_owned());
                let mut a = Map::new();
                a.insert("effectId".into(), text(&r.effect_id));
                a.insert("invocationKey".into(), text(&r.invocation_key));
                a.insert("kind".into(), text(&r.kind));
                a.insert("label".into(), text(&r.label));
                a.insert(
                    "labels".into(),
                    Value::Array(r.labels.iter().map(|l| text(l)).collect()),
                );
                a.insert("taskDef".into(), task_defs[i].take().unwrap_or(Value::Null));
                a.insert("taskId".into(), text(&r.task_id));
                a.insert("stepId".into(), text(&r.step_id));
                a.insert(
                    "taskDefRef".into(),
                    Value::String(format!("tasks/{}/task.json", r.effect_id)),
                );
                a.insert("requestedAt".into(), text(requested_at));
                actions.push(Value::Object(a));
            } else if let Some(rec) = records.get(id) {
                let task = self
                    .journal()
                    .get_run_file(run_id, &RunFile::task(id, "task.json")?)
                    .await
                    .ok();
                let task_def = task
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .unwrap_or(Value::Null);
                actions.push(json!({
                    "effectId": rec.effect_id, "invocationKey": rec.invocation_key, "kind": rec.kind, "label": rec.label,
                    "labels": rec.labels, "taskDef": task_def, "taskId": rec.task_id, "stepId": rec.step_id,
                    "taskDefRef": rec.task_def_ref, "requestedAt": rec.requested_at,
                }));
            }
        }
        let n = actions.len();
        if n > 1 {
            let keys: Vec<&str> = actions
                .iter()
                .filter_map(|a| a.get("invocationKey").and_then(Value::as_str))
                .collect();
            let group = identity::parallel_group_id(&keys);
            for a in &mut actions {
                a["schedulerHints"] = json!({"parallelGroupId": group, "pendingCount": n});
            }
        } else {
            for a in &mut actions {
                a["schedulerHints"] = json!({"pendingCount": n});
            }
        }
        Ok(actions)
    }

    fn event(&self, kind: EventType, data: Value, now_ms: i64) -> NewEvent {
        let mut e = NewEvent::new(kind, data);
        e.recorded_at = Some(iso(now_ms));
        e
    }

    /// Records the drive's new `ctx.log` lines (`logSeqs.txt`, `tracing`, `process.log` when
    /// configured); returns them, redacted.
    async fn emit_logs(
        &self,
        run_id: &str,
        info: &RunInfo,
        report: &DriveReport,
    ) -> Result<Vec<LogLine>, EngineError> {
        if report.logs.is_empty() {
            return Ok(Vec::new());
        }
        let file = RunFile::state("logSeqs.txt")?;
        let existing = match self.journal().get_run_file(run_id, &file).await {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(babysitter_journal::JournalError::RunFileNotFound { .. }) => String::new(),
            Err(e) => return Err(e.into()),
        };
        let seen: HashSet<u64> = existing
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        let mut out = existing;
        let redactor = self.journal().options().redactor.clone();
        let mut new_lines: Vec<LogLine> = Vec::new();
        for l in &report.logs {
            if seen.contains(&l.seq) {
                continue;
            }
            tracing::info!(target: "babysitter::process", run_id, label = l.label.as_deref().unwrap_or(""), "{}", l.message);
            out.push_str(&format!("{}\n", l.seq));
            let clean = |s: &str| match &redactor {
                Some(r) => r.text(s).into_owned(),
                None => s.to_owned(),
            };
            new_lines.push(LogLine {
                seq: l.seq,
                label: l.label.as_deref().map(clean),
                message: clean(&l.message),
            });
        }
        self.journal()
            .put_run_file(run_id, &file, Bytes::from(out))
            .await?;
        if let Some(dir) = &self.options().process_log_dir
            && !new_lines.is_empty()
        {
            let text = super::process_log::ctx_log_lines(
                run_id,
                &info.process_id,
                new_lines
                    .iter()
                    .map(|l| (l.label.as_deref(), l.message.as_str())),
                &iso(self.now_ms()),
            );
            let path = dir.join(run_id).join("process.log");
            // As in the reference, logging never breaks orchestration.
            if let Err(e) = super::process_log::append(&path, &text) {
                tracing::warn!(run_id, path = %path.display(), error = %e, "ctx.log lines not written to process.log");
            }
        }
        Ok(new_lines)
    }

    async fn read_output(&self, run_id: &str) -> Result<Option<Value>, EngineError> {
        match self
            .journal()
            .get_run_file(run_id, &RunFile::state("output.json")?)
            .await
        {
            Ok(b) => Ok(serde_json::from_slice(&b).ok()),
            Err(babysitter_journal::JournalError::RunFileNotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// B9: the process's code (its import closure, `digest`) changed since the run recorded
    /// it. The change is journaled once, leading the iteration's events (the drive that saw it
    /// was a cold replay of the new code: a warm session whose files changed is not continued),
    /// with babysitter's warning.
    async fn code_change(
        &self,
        run_id: &str,
        info: &RunInfo,
        digest: Option<&str>,
        warnings: &mut Vec<String>,
    ) -> Result<Option<NewEvent>, EngineError> {
        let (Some(previous), Some(digest)) = (&info.process_code_hash, digest) else {
            return Ok(None);
        };
        // A service's bundle is content-addressed (`processBundle`) and materialized intact:
        // its code cannot change, and its recorded hash is the entry file's.
        if info.entry.starts_with(info.run_dir.join(crate::BUNDLE_DIR)) {
            return Ok(None);
        }
        if previous == digest || self.code_hash_journaled(run_id, digest).await? {
            return Ok(None);
        }
        warnings.push(
            "Process code changed since last recorded process hash; replay may need journal reconstruction.".into(),
        );
        Ok(Some(self.event(
            EventType::ProcessCodeHashChanged,
            json!({"runId": run_id, "processId": info.process_id, "previousProcessCodeHash": previous,
                   "processCodeHash": digest}),
            self.now_ms(),
        )))
    }

    async fn code_hash_journaled(&self, run_id: &str, hash: &str) -> Result<bool, EngineError> {
        let events = self.journal().read(run_id, 1, 0).await?;
        Ok(events.iter().any(|e| {
            e.body.kind == EventType::ProcessCodeHashChanged
                && e.body.data.get("processCodeHash").and_then(Value::as_str) == Some(hash)
        }))
    }

    /// Writes `result.json` in babysitter's format for an effect resolved by the engine itself.
    async fn write_result(
        &self,
        run_id: &str,
        r: &EffectRecord,
        value: &Value,
        at: &str,
    ) -> Result<(), EngineError> {
        let doc = json!({
            "schemaVersion": "2026.01.results-v1", "effectId": r.effect_id, "taskId": r.task_id,
            "invocationKey": r.invocation_key, "status": "ok", "result": identity::key_sorted_clone(value),
            "startedAt": at, "finishedAt": at, "value": identity::key_sorted_clone(value), "sdkVersion": "6.0.0",
        });
        self.journal()
            .put_run_file(
                run_id,
                &RunFile::task(&r.effect_id, "result.json")?,
                Bytes::from(doc.to_string()),
            )
            .await?;
        Ok(())
    }
}

/// QuickJS reports heap exhaustion as an `InternalError: out of memory` that a promise chain can
/// catch like any rejection; it is the memory limit all the same.
fn is_out_of_memory(state: &ProcessState) -> bool {
    matches!(state, ProcessState::Threw(e)
        if e.get("name").and_then(Value::as_str) == Some("InternalError")
            && e.get("message").and_then(Value::as_str) == Some("out of memory"))
}

fn request_data(r: &Request) -> Value {
    let mut d = Map::with_capacity(9);
    d.insert("effectId".into(), json!(r.effect_id));
    d.insert("invocationKey".into(), json!(r.invocation_key));
    d.insert(
        "invocationHash".into(),
        json!(identity::invocation_hash(&r.invocation_key)),
    );
    d.insert("stepId".into(), json!(r.step_id));
    d.insert("taskId".into(), json!(r.task_id));
    d.insert("kind".into(), json!(r.kind));
    d.insert("label".into(), json!(r.label));
    d.insert(
        "taskDefRef".into(),
        json!(format!("tasks/{}/task.json", r.effect_id)),
    );
    if !r.labels.is_empty() {
        d.insert("labels".into(), json!(r.labels));
    }
    Value::Object(d)
}

pub(crate) fn cannot_open(run_id: &str, path: &Path, e: &std::io::Error) -> EngineError {
    EngineError::InvalidRun {
        run_id: run_id.to_owned(),
        reason: format!("process file {} cannot be opened: {e}", path.display()),
    }
}
