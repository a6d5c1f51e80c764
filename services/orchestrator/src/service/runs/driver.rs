//! Iteration drivers: one per live run, coalescing the resolutions that arrive while an iteration
//! runs into one follow-up iteration; what an iteration asks for is dispatched (worker tasks to
//! the queue, sleeps to durable timers, breakpoints left for approvers) and the run's summary is
//! published. Also the periodic sweep (expired leases, unroutable tasks).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use babysitter_common::kinds::runs_on_a_harness;
use babysitter_journal::agent_sessions;
use babysitter_journal::index::EffectRecord;
use babysitter_journal::store::RunFile;
use bytes::Bytes;
use serde_json::Value;

use super::spend::BUDGET_WARNING;
use super::table::DriveFlags;
use super::trace;
use super::{DEFAULT_NAMESPACE, RunManager, RunStatus, RunSummary, lock};
use crate::engine::IterationStatus;
use crate::service::bundle;
use crate::service::queue::TaskSpec;
use crate::service::{Result, ServiceError};

impl RunManager {
    /// Asks for an iteration of `run_id` (coalesced with one already running).
    pub fn schedule(&self, run_id: &str, recovered: bool) {
        if !self.claim_driver(run_id, recovered) {
            return;
        }
        let this = self.clone();
        let run_id = run_id.to_owned();
        self.inner
            .tracker
            .spawn(async move { this.drive(&run_id, recovered).await });
    }

    /// Like [`RunManager::schedule`], but iterates in the calling task when no driver is active
    /// (a completion that waits for the next task anyway saves a task hop and a wake-up).
    pub async fn iterate_now(&self, run_id: &str) {
        if self.claim_driver(run_id, false) {
            let _running = self.inner.tracker.token();
            self.drive(run_id, false).await;
        }
    }

    /// Drives a run recovered at start in the calling task, until it waits for something.
    pub(super) async fn resume(&self, run_id: &str) {
        if self.claim_driver(run_id, true) {
            let _running = self.inner.tracker.token();
            self.drive(run_id, true).await;
        }
    }

    /// Registers the run's driver; false when one is active (it was asked to go again), the run
    /// is not live, or its client drives it.
    fn claim_driver(&self, run_id: &str, recovered: bool) -> bool {
        if self.inner.shutdown.is_cancelled() {
            return false;
        }
        let mut runs = lock(&self.inner.runs);
        let Some(run) = runs.live_mut(run_id) else {
            return false;
        };
        if run.summary.borrow().client_driven {
            return false; // its client iterates it (client.rs)
        }
        match &mut run.driver {
            Some(flags) => {
                flags.again = true;
                flags.recovered |= recovered;
                false
            }
            None => {
                run.driver = Some(DriveFlags {
                    again: false,
                    recovered,
                });
                true
            }
        }
    }

    /// The driver loop: iterate until no resolution arrived meanwhile.
    async fn drive(&self, run_id: &str, recovered: bool) {
        let mut recovered = recovered;
        loop {
            self.iterate_once(run_id, recovered).await;
            let mut runs = lock(&self.inner.runs);
            let Some(run) = runs.live_mut(run_id) else {
                break; // the run ended: its entry (and driver) is gone
            };
            match &mut run.driver {
                Some(flags) if flags.again && !self.inner.shutdown.is_cancelled() => {
                    flags.again = false;
                    recovered = std::mem::take(&mut flags.recovered);
                }
                _ => {
                    run.driver = None;
                    break;
                }
            }
        }
    }

    /// One iteration, in its `run.iterate` span (a child of the run's root).
    async fn iterate_once(&self, run_id: &str, recovered: bool) {
        use tracing::Instrument as _;
        let root = lock(&self.inner.runs)
            .live(run_id)
            .and_then(|r| r.summary.borrow().trace.clone());
        let span = trace::iteration_span(run_id, root.as_ref());
        self.iterate_in_span(run_id, recovered)
            .instrument(span)
            .await;
    }

    async fn iterate_in_span(&self, run_id: &str, recovered: bool) {
        let Some(run_lock) = self.run_lock(run_id) else {
            return;
        };
        let _guard = run_lock.lock().await;
        if !self.is_live(run_id) {
            return; // it ended while we waited
        }
        let result = async {
            self.ensure_materialized(run_id).await?;
            let it = self.inner.engine.iterate(run_id).await?;
            self.after_iteration(run_id, it, recovered, true).await
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(run_id, error = %e, "iteration failed; will retry");
            let stop = {
                let mut runs = lock(&self.inner.runs);
                let Some(run) = runs.live_mut(run_id) else {
                    return;
                };
                run.materialized = false;
                run.update(|r| r.status_reason = format!("iteration failed (retrying): {e}"));
                run.stop.clone()
            };
            let this = self.clone();
            let run_id = run_id.to_owned();
            let delay = self.inner.config.retry_delay;
            self.inner.tracker.spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(delay) => this.schedule(&run_id, recovered),
                    () = stop.cancelled() => {}
                }
            });
        }
    }

    /// Makes sure the run's bundle files exist where the engine reads them (checked once per
    /// process; a failed iteration re-checks).
    pub(super) async fn ensure_materialized(&self, run_id: &str) -> Result<()> {
        let done = lock(&self.inner.runs)
            .live(run_id)
            .is_some_and(|r| r.materialized);
        if done {
            return Ok(());
        }
        let files = self.journal().run_files(run_id).await?;
        if let Some(manifest) = files.run_json.get("processBundle") {
            bundle::materialize(
                self.journal(),
                &self.inner.engine.options().runs_root,
                run_id,
                manifest,
            )
            .await?;
        } // else a run made outside the service (babysitter layout): files in place
        if let Some(run) = lock(&self.inner.runs).live_mut(run_id) {
            run.materialized = true;
        }
        Ok(())
    }

    /// Publishes where an iteration left the run and, when `dispatch`, hands what it waits on
    /// to workers and timers (a client-driven run's client executes its effects itself).
    pub(super) async fn after_iteration(
        &self,
        run_id: &str,
        it: crate::engine::Iteration,
        recovered: bool,
        dispatch: bool,
    ) -> Result<()> {
        // Over budget: ended here, before anything more is dispatched.
        if dispatch && it.status == IterationStatus::Waiting && self.enforce_budget(run_id).await? {
            return Ok(());
        }
        let journal = self.journal();
        let pending: Vec<EffectRecord> = self
            .engine()
            .view(run_id, |_, idx| idx.pending().cloned().collect())
            .await?;
        let (namespace, root) = lock(&self.inner.runs)
            .live(run_id)
            .map(|r| {
                let s = r.summary.borrow();
                (s.namespace.clone(), s.trace.clone())
            })
            .unwrap_or_else(|| (DEFAULT_NAMESPACE.to_owned(), None));
        // The task.json the iteration just stored, so new tasks are dispatched without a read.
        let fresh: HashMap<&str, &Bytes> = it
            .requested
            .iter()
            .map(String::as_str)
            .zip(it.requested_tasks.iter())
            .collect();
        let mut by_kind: BTreeMap<String, u32> = BTreeMap::new();
        for r in &pending {
            let kind = r.kind.clone().unwrap_or_else(|| "unknown".into());
            *by_kind.entry(kind.clone()).or_default() += 1;
            if !dispatch {
                continue;
            }
            match kind.as_str() {
                "breakpoint" => {}
                "sleep" => self.arm_timer(run_id, r).await?,
                "subprocess" => {
                    let task = task_doc(journal, &fresh, run_id, r).await?;
                    self.start_subprocess(&namespace, run_id, r, task);
                }
                _ if self.inner.queue.is_known(run_id, &r.effect_id) => {}
                _ => {
                    let task = task_doc(journal, &fresh, run_id, r).await?;
                    let mut spec = task_spec(&namespace, run_id, r, &kind, task)?;
                    trace::dispatch(&mut spec, root.as_ref());
                    self.inner.queue.enqueue(spec, recovered);
                }
            }
        }
        let (queued, leased) = self.inner.queue.counts_for_run(run_id);
        let mut error = it.error;
        let (status, reason) = match it.status {
            IterationStatus::Completed => (RunStatus::Completed, String::new()),
            IterationStatus::Halted => (RunStatus::Halted, it.reason.clone().unwrap_or_default()),
            IterationStatus::Failed => (RunStatus::Failed, it.reason.clone().unwrap_or_default()),
            IterationStatus::None => {
                let (status, terminal_error) = self.terminal_of(run_id).await?;
                error = error.or(terminal_error);
                (status, String::new())
            }
            IterationStatus::Waiting if queued + leased > 0 => (RunStatus::Running, String::new()),
            IterationStatus::Waiting if by_kind.contains_key("breakpoint") => {
                (RunStatus::Waiting, "breakpoint-waiting".into())
            }
            IterationStatus::Waiting if by_kind.contains_key("sleep") => {
                (RunStatus::Waiting, "sleeping".into())
            }
            IterationStatus::Waiting if by_kind.contains_key("subprocess") => {
                (RunStatus::Running, "subprocess-running".into())
            }
            IterationStatus::Waiting => (RunStatus::Waiting, "external-task-waiting".into()),
        };
        if self.inner.config.evict_idle_sessions && (status.is_terminal() || queued + leased == 0) {
            self.inner.engine.evict(run_id).await?;
        }
        let now = crate::engine::iso(self.inner.engine.options().clock.as_ref()());
        let head = it.head.seq;
        self.set_summary(run_id, |r| {
            r.updated_at = Some(now);
            r.status = status;
            // A running run keeps what the sweep or its budget said about it.
            let kept = ["no live worker", BUDGET_WARNING]
                .iter()
                .any(|p| r.status_reason.starts_with(p));
            if !(status == RunStatus::Running && kept) {
                r.status_reason = reason;
            }
            r.head_seq = r.head_seq.max(head);
            r.pending_by_kind = by_kind;
            if let Some(o) = it.output {
                r.output = Some(o);
            }
            if error.is_some() {
                r.error = error;
            }
        });
        if status.is_terminal() {
            self.finished(run_id);
        }
        Ok(())
    }

    /// A run has ended (its terminal summary published): its queue entries are dropped and its
    /// entry shrinks to the final summary, which stops its timers and closes its channels.
    pub(super) fn finished(&self, run_id: &str) {
        self.inner.queue.cancel_run(run_id, "the run ended");
        let ended = lock(&self.inner.runs).finish(run_id);
        if let Some((summary, children)) = ended {
            self.link_ended(summary, children);
        }
    }

    /// The terminal status and error of a run whose last lifecycle event is terminal.
    pub(super) async fn terminal_of(&self, run_id: &str) -> Result<(RunStatus, Option<Value>)> {
        let mark = self
            .engine()
            .view(run_id, |_, idx| idx.last_lifecycle.clone())
            .await?;
        let Some(mark) = mark else {
            return Ok((RunStatus::Running, None));
        };
        let event = self.journal().read(run_id, mark.seq, mark.seq).await?;
        let data = event
            .first()
            .map(|e| e.body.data.clone())
            .unwrap_or_default();
        let status =
            RunStatus::of_terminal_event(&mark.event_type, &data).unwrap_or(RunStatus::Running);
        Ok((status, data.get("error").cloned()))
    }

    /// A durable timer for a pending sleep: when it fires, the run is iterated and the engine
    /// resolves the sleep (it is past due then). Re-armed from the journal after a restart;
    /// stopped when the run ends.
    async fn arm_timer(&self, run_id: &str, r: &EffectRecord) -> Result<()> {
        let stop = {
            let mut runs = lock(&self.inner.runs);
            let Some(run) = runs.live_mut(run_id) else {
                return Ok(());
            };
            if !run.timers.insert(r.effect_id.clone()) {
                return Ok(());
            }
            run.stop.clone()
        };
        let task = match RunFile::task(&r.effect_id, "task.json") {
            Ok(file) => self.journal().get_run_file(run_id, &file).await,
            Err(e) => Err(e),
        };
        let task = match task {
            Ok(t) => t,
            Err(e) => {
                // Not armed: the next iteration tries again.
                if let Some(run) = lock(&self.inner.runs).live_mut(run_id) {
                    run.timers.remove(&r.effect_id);
                }
                return Err(e.into());
            }
        };
        let target = serde_json::from_slice::<Value>(&task)
            .ok()
            .and_then(|t| t.pointer("/sleep/targetEpochMs").and_then(Value::as_i64))
            .unwrap_or(0);
        let now = self.inner.engine.options().clock.as_ref()();
        let wait = Duration::from_millis(u64::try_from(target - now).unwrap_or(0));
        let this = self.clone();
        let run_id = run_id.to_owned();
        let effect_id = r.effect_id.clone();
        self.inner.tracker.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(wait + Duration::from_millis(1)) => {
                    if let Some(run) = lock(&this.inner.runs).live_mut(&run_id) {
                        run.timers.remove(&effect_id);
                    }
                    this.schedule(&run_id, false);
                }
                () = stop.cancelled() => {}
            }
        });
        Ok(())
    }

    /// Periodic work: expired leases, tasks that ran out of attempts, unroutable tasks.
    pub fn spawn_sweeper(&self) {
        let this = self.clone();
        let stop = self.inner.shutdown.clone();
        let every = self.inner.config.sweep_interval;
        self.inner.tracker.spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => this.sweep().await,
                    () = stop.cancelled() => break,
                }
            }
        });
    }

    pub async fn sweep(&self) {
        for run_id in self.past_wall_time() {
            self.schedule(&run_id, false);
        }
        for gave_up in self.inner.queue.expire() {
            if let Err(e) = self.give_up(&gave_up).await {
                tracing::warn!(run_id = %gave_up.spec.run_id, effect_id = %gave_up.spec.effect_id,
                    error = %e, "could not fail a task that ran out of attempts");
            }
        }
        let unroutable: HashMap<String, String> = self
            .inner
            .queue
            .unroutable()
            .into_iter()
            .map(|(spec, why)| (spec.run_id.clone(), why))
            .collect();
        let runs = lock(&self.inner.runs);
        for run in runs.lives() {
            // Some(reason) to set, Some("") to clear, None to leave as it is.
            let change = {
                let s = run.summary.borrow();
                match unroutable.get(&s.run_id) {
                    Some(why) if s.status_reason != *why => {
                        tracing::warn!(run_id = %s.run_id, reason = %why, "task cannot be routed");
                        Some(why.clone())
                    }
                    None if s.status_reason.starts_with("no live worker") => Some(String::new()),
                    _ => None,
                }
            };
            if let Some(reason) = change {
                run.update(|r| r.status_reason = reason);
            }
        }
    }

    /// Changes a live run's summary and publishes the change to its watchers.
    pub(crate) fn set_summary(&self, run_id: &str, f: impl FnOnce(&mut RunSummary)) {
        if let Some(run) = lock(&self.inner.runs).live(run_id) {
            run.update(f);
        }
    }
}

/// An effect's `task.json`: the one its iteration just stored (`fresh`), else read back.
async fn task_doc(
    journal: &babysitter_journal::Journal,
    fresh: &HashMap<&str, &Bytes>,
    run_id: &str,
    r: &EffectRecord,
) -> Result<Bytes> {
    Ok(match fresh.get(r.effect_id.as_str()) {
        Some(doc) => (*doc).clone(),
        None => {
            journal
                .get_run_file(run_id, &RunFile::task(&r.effect_id, "task.json")?)
                .await?
        }
    })
}

/// A worker task from its journal record and `task.json`.
fn task_spec(
    namespace: &str,
    run_id: &str,
    r: &EffectRecord,
    kind: &str,
    task_json: Bytes,
) -> Result<TaskSpec> {
    let def: Value = serde_json::from_slice(&task_json).map_err(|e| {
        ServiceError::Conflict(format!(
            "run {run_id}: tasks/{}/task.json is not JSON: {e}",
            r.effect_id
        ))
    })?;
    let execution = def.get("execution");
    let harness = execution
        .and_then(|x| x.get("harness"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let required_labels = execution
        .and_then(|x| x.get("labels"))
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let timeout_ms = def
        .pointer("/shell/timeout")
        .or_else(|| def.pointer("/node/timeoutMs"))
        .or_else(|| def.pointer("/agent/timeoutMs"))
        .and_then(Value::as_u64);
    Ok(TaskSpec {
        namespace: namespace.to_owned(),
        run_id: run_id.to_owned(),
        effect_id: r.effect_id.clone(),
        task_id: r.task_id.clone(),
        invocation_key: r.invocation_key.clone(),
        kind: kind.to_owned(),
        label: r.label.clone().unwrap_or_default(),
        task_json,
        harness,
        required_labels,
        timeout: timeout_ms.map(Duration::from_millis),
        trace: None,
        // An invalid session name keeps none here; the worker fails the task naming it.
        session_file: runs_on_a_harness(kind)
            .then(|| agent_sessions::run_file(&def, &r.effect_id).ok())
            .flatten(),
    })
}
