//! Budgets enforced (see `service::budget` for the rules): after each iteration of a run the
//! manager drives, before anything is dispatched, and from the sweep for wall time; and what a
//! run has spent, for `GetRunCost`.
//!
//! What is decided is journaled (`journal::budget_marks`): a limit's warning once
//! (`BUDGET_WARNING`), and, for a budget that asks rather than fails, the wait for a raise
//! (`BUDGET_EXCEEDED`) and the raise (`BUDGET_RAISED`, whose limits stand over run.json's,
//! which is never rewritten). The journal is the only record, so a restart neither repeats a
//! warning nor forgets a wait or a raise.

use std::time::Duration;

use babysitter_journal::NewEvent;
use babysitter_journal::budget_marks::BudgetMarks;
use babysitter_journal::index::EffectIndex;
use serde_json::json;

use super::{Decision, RunManager, RunStatus, lock};
use crate::service::budget::{self, Budget, Crossed, RAISE_BREAKPOINT, Spent, effective};
use crate::service::{Result, ServiceError};

/// How a run's status reason starts while it is past a warning fraction.
pub(super) const BUDGET_WARNING: &str = "budget warning: ";

/// How a run's status reason starts while it waits for its budget to be raised.
pub(super) const BUDGET_WAIT: &str = "budget_exceeded: ";

/// What `GetRunCost` answers.
#[derive(Debug, Clone, PartialEq)]
pub struct RunCost {
    pub budget: Option<Budget>,
    pub spent: Spent,
    pub tasks: Vec<TaskCost>,
    pub warnings: Vec<Crossed>,
    pub exceeded: Option<Crossed>,
}

/// One task's usage.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskCost {
    pub effect_id: String,
    pub kind: String,
    pub label: String,
    pub model: String,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    pub cost_usd: f64,
}

/// Each task's model usage as its `COST_TRACKED` events add up in the effect index (what
/// `GetRunCost` and `tokens:stats --usage` answer per task).
pub fn task_costs(index: &EffectIndex) -> Vec<TaskCost> {
    let n = |v: Option<f64>| v.unwrap_or(0.0).max(0.0) as u64;
    index
        .effects
        .values()
        .filter(|r| r.cost_usd.is_some() || r.input_tokens.is_some() || r.output_tokens.is_some())
        .map(|r| TaskCost {
            effect_id: r.effect_id.clone(),
            kind: r.kind.clone().unwrap_or_default(),
            label: r.label.clone().unwrap_or_default(),
            model: r.cost_model.clone().unwrap_or_default(),
            input_tokens: n(r.input_tokens),
            output_tokens: n(r.output_tokens),
            cache_read_tokens: n(r.cache_read_input_tokens),
            cache_write_tokens: n(r.cache_creation_input_tokens),
            cost_usd: r.cost_usd.unwrap_or(0.0),
        })
        .collect()
}

impl RunManager {
    /// How long ago the run `created_at` (ISO) was created, by the engine's clock.
    fn age(&self, created_at: Option<&str>) -> Duration {
        budget::age(created_at, (self.inner.engine.options().clock)())
    }

    /// Checks a live, manager-driven run against its budget under the run's lock (the caller
    /// holds it): past a limit the run is ended, or, if its budget asks, waits for a raise with
    /// nothing dispatched (true either way); past a warning fraction it is journaled once and
    /// its status reason says so.
    pub(super) async fn enforce_budget(&self, run_id: &str) -> Result<bool> {
        let Some((stored, created_at)) = lock(&self.inner.runs).live(run_id).and_then(|r| {
            let s = r.summary.borrow();
            s.budget.clone().map(|b| (b, s.created_at.clone()))
        }) else {
            return Ok(false);
        };
        let age = self.age(created_at.as_deref());
        let (spent, marks) = self
            .engine()
            .view(run_id, |_, idx| {
                (Spent::of(idx, age), (*idx.budget).clone())
            })
            .await?;
        let Some(budget) = effective(Some(&stored), &marks) else {
            return Ok(false);
        };
        if budget != stored {
            self.set_summary(run_id, |r| r.budget = Some(budget.clone()));
        }
        let warnings = budget.warnings(&spent);
        let new: Vec<NewEvent> = warnings
            .iter()
            .filter(|w| !marks.warned.contains(w.limit.as_str()))
            .map(|w| {
                tracing::warn!(run_id, figures = %w.figures(), "budget warning");
                crate::service::metrics::budget_warning(w.limit.as_str());
                w.warning_event(budget.warn_at.unwrap_or(0.8))
            })
            .collect();
        self.append_marks(run_id, new).await?;
        if let Some(crossed) = budget.crossed(&spent) {
            let reason = crossed.reason();
            crate::service::metrics::budget_exceeded(crossed.limit.as_str());
            if budget.asks() {
                return self.wait_for_raise(run_id, &crossed, &spent, &marks).await;
            }
            tracing::warn!(run_id, %reason, "budget exceeded: the run is stopped");
            self.end_locked(run_id, &reason, crossed.error(&spent), false)
                .await?;
            return Ok(true);
        }
        if !warnings.is_empty() {
            let said: Vec<String> = warnings.iter().map(Crossed::figures).collect();
            let reason = format!("{BUDGET_WARNING}{}", said.join(", "));
            self.set_reason_if_changed(run_id, &reason);
        }
        Ok(false)
    }

    async fn append_marks(&self, run_id: &str, events: Vec<NewEvent>) -> Result<()> {
        if events.is_empty() {
            return Ok(());
        }
        let head = self.journal().head(run_id).await?;
        let committed = self.journal().append(run_id, head.seq + 1, events).await?;
        let seq = committed.last().map_or(head.seq, |e| e.seq);
        self.set_summary(run_id, |r| r.head_seq = r.head_seq.max(seq));
        Ok(())
    }

    /// Past a limit of a budget that asks: the run's queued tasks are withdrawn (running ones
    /// finish; their work is kept while someone decides), nothing more is dispatched, the wait
    /// is journaled once, and the run shows as waiting on the `budget` breakpoint.
    async fn wait_for_raise(
        &self,
        run_id: &str,
        crossed: &Crossed,
        spent: &Spent,
        marks: &BudgetMarks,
    ) -> Result<bool> {
        let reason = format!(
            "{BUDGET_WAIT}{} (waiting on breakpoint `{RAISE_BREAKPOINT}` to raise it)",
            crossed.figures()
        );
        self.inner.queue.withdraw_queued(run_id);
        if marks.waiting.is_none() {
            tracing::warn!(run_id, %reason, "budget exceeded: the run waits for a raise");
            self.append_marks(run_id, vec![crossed.wait_event(spent)])
                .await?;
        }
        self.set_summary(run_id, |r| {
            r.status = RunStatus::Waiting;
            r.status_reason = reason;
        });
        Ok(true)
    }

    /// The decision on a run's `budget` breakpoint: approved, `response` (the `--budget` form)
    /// raises the limits it names and the run goes on; rejected, the run fails with
    /// `BudgetExceededError`. A raise that would still be exceeded is refused, naming the limit.
    pub(super) async fn decide_budget(
        &self,
        namespace: &str,
        run_id: &str,
        d: Decision,
    ) -> Result<(u64, bool)> {
        let summary = self.get(namespace, run_id).await?;
        let not_waiting = || {
            ServiceError::Conflict(format!(
                "run {run_id} is not waiting for its budget to be raised"
            ))
        };
        let run_lock = self.run_lock(run_id).ok_or_else(not_waiting)?;
        let _guard = run_lock.lock().await;
        let age = self.age(summary.created_at.as_deref());
        let (spent, marks) = self
            .engine()
            .view(run_id, |_, idx| {
                (Spent::of(idx, age), (*idx.budget).clone())
            })
            .await?;
        if marks.waiting.is_none() || !self.is_live(run_id) {
            return Err(not_waiting());
        }
        let current = effective(summary.budget.as_ref(), &marks).unwrap_or_default();
        if !d.approved {
            let crossed = current.crossed(&spent).ok_or_else(not_waiting)?;
            let mut error = crossed.error(&spent);
            if let Some(f) = d.feedback.filter(|f| !f.is_empty()) {
                error["data"]["feedback"] = json!(f);
            }
            self.end_locked(run_id, &crossed.reason(), error, false)
                .await?;
            return Ok((self.journal().head(run_id).await?.seq, false));
        }
        let spec = d
            .response
            .clone()
            .filter(|r| !r.trim().is_empty())
            .or(d.option.clone())
            .ok_or_else(|| {
                ServiceError::invalid(
                    "response",
                    "approving a budget raise needs the new limits, e.g. `tokens=50000,cost=5`",
                )
            })?;
        let asked: Budget = spec
            .parse()
            .map_err(|e: String| ServiceError::invalid("response", e))?;
        let raised = asked.over(&current);
        if let Some(still) = raised.crossed(&spent) {
            return Err(ServiceError::invalid(
                "response",
                format!("the raised budget is still exceeded: {}", still.figures()),
            ));
        }
        let by = d.approver.filter(|a| !a.is_empty()).unwrap_or(d.principal);
        self.append_marks(run_id, vec![raised.raised_event(&by)])
            .await?;
        tracing::info!(run_id, %by, "budget raised: the run goes on");
        self.set_summary(run_id, |r| {
            r.budget = Some(raised);
            r.status = RunStatus::Running;
            r.status_reason = String::new();
        });
        self.schedule(run_id, false);
        Ok((self.journal().head(run_id).await?.seq, false))
    }

    /// Sets the run's status reason; false when it already said that.
    fn set_reason_if_changed(&self, run_id: &str, reason: &str) -> bool {
        let mut runs = lock(&self.inner.runs);
        let Some(run) = runs.live_mut(run_id) else {
            return false;
        };
        if run.summary.borrow().status_reason == reason {
            return false;
        }
        run.update(|r| r.status_reason = reason.to_owned());
        true
    }

    /// Live runs past their wall-time budget: the sweep iterates them, and the iteration ends
    /// them (under their lock, as any budget).
    pub(super) fn past_wall_time(&self) -> Vec<String> {
        let runs = lock(&self.inner.runs);
        runs.lives()
            .filter_map(|r| {
                let s = r.summary.borrow();
                let max = s.budget.as_ref()?.max_wall_time?;
                let waiting = s.status_reason.starts_with(BUDGET_WAIT);
                (!s.client_driven && !waiting && self.age(s.created_at.as_deref()) >= max)
                    .then(|| s.run_id.clone())
            })
            .collect()
    }

    /// What a run of `namespace` has spent against its budget.
    pub async fn cost(&self, namespace: &str, run_id: &str) -> Result<RunCost> {
        let summary = self.get(namespace, run_id).await?;
        let (_, index) = self.journal().index(run_id).await?;
        let age = match summary
            .updated_at
            .as_deref()
            .and_then(crate::engine::views::iso_to_ms)
        {
            // A finished run's time stops with it.
            Some(end) if summary.status.is_terminal() => {
                budget::age(summary.created_at.as_deref(), end)
            }
            _ => self.age(summary.created_at.as_deref()),
        };
        let spent = Spent::of(&index, age);
        let budget = effective(summary.budget.as_ref(), &index.budget);
        let (warnings, exceeded) = match &budget {
            Some(b) => (b.warnings(&spent), b.crossed(&spent)),
            None => (Vec::new(), None),
        };
        Ok(RunCost {
            budget,
            tasks: task_costs(&index),
            spent,
            warnings,
            exceeded,
        })
    }
}
