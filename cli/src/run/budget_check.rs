//! The run's budget in `babysitter run`, by the orchestrator's rule (`service::budget`): what
//! the journal says was spent against run.json's budget, or the latest raise's. Past a warning
//! fraction it says so, journaled once per limit (`BUDGET_WARNING`). Past a limit the run fails
//! with `BudgetExceededError`, or, when its budget asks (`--budget …,on-exceed=ask`), it stops
//! resumable with the wait journaled (`BUDGET_EXCEEDED`), and `babysitter run --resume <id>
//! --budget <new limits>` raises it (`BUDGET_RAISED`) and goes on, as approving the `budget`
//! breakpoint does on a server.

use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use babysitter_journal::{EventType, NewEvent};
use babysitter_orchestrator::service::budget::{self, BUDGET_KEY, Budget, Spent};
use serde_json::{Value, json};

use super::Driver;

impl Driver<'_> {
    /// run.json's budget (if any) and creation time, read once per `babysitter run` (they
    /// never change; a raise is journaled, not written there).
    async fn stored_budget(&mut self) -> Result<(Option<Budget>, Option<String>)> {
        if self.budget.is_none() {
            let run_json = self
                .engine
                .journal()
                .run_files(&self.run_id)
                .await?
                .run_json;
            let budget = run_json
                .get(BUDGET_KEY)
                .map(|b| serde_json::from_value::<Budget>(b.clone()))
                .transpose()
                .context("run.json `budget` does not parse")?;
            let created = run_json
                .get("createdAt")
                .and_then(Value::as_str)
                .map(str::to_owned);
            self.budget = Some((budget, created));
        }
        Ok(self.budget.clone().unwrap_or_default())
    }

    /// What was spent and what the journal says of the budget, read in place (no copy of the
    /// run's index); `None` when the run has no budget at all (nothing is computed then).
    async fn budget_state(&mut self) -> Result<Option<BudgetState>> {
        let (stored, created) = self.stored_budget().await?;
        let age = budget::age(created.as_deref(), chrono::Utc::now().timestamp_millis());
        let state = self
            .engine
            .journal()
            .inspect_now(&self.run_id, |head, idx| {
                let budget = budget::effective(stored.as_ref(), &idx.budget)?;
                Some(BudgetState {
                    next_seq: head.seq + 1,
                    spent: Spent::of(idx, age),
                    marks: (*idx.budget).clone(),
                    budget,
                })
            })
            .await?;
        Ok(state)
    }

    /// `--resume` with `--budget`: the new limits over the ones in force, journaled as a raise
    /// (refused, naming the limit, when still exceeded).
    pub(super) async fn raise_on_resume(&mut self, asked: &Budget) -> Result<()> {
        let (stored, created) = self.stored_budget().await?;
        let age = budget::age(created.as_deref(), chrono::Utc::now().timestamp_millis());
        let (next_seq, current, spent) = self
            .engine
            .journal()
            .inspect_now(&self.run_id, |head, idx| {
                let current = budget::effective(stored.as_ref(), &idx.budget).unwrap_or_default();
                (head.seq + 1, current, Spent::of(idx, age))
            })
            .await?;
        let raised = asked.over(&current);
        if let Some(still) = raised.crossed(&spent) {
            bail!(
                "--budget: the raised budget is still exceeded: {}",
                still.figures()
            );
        }
        self.engine
            .journal()
            .append(
                &self.run_id,
                next_seq,
                vec![raised.raised_event("babysitter run")],
            )
            .await?;
        self.ui.note("budget raised");
        Ok(())
    }

    /// Checks the run against its budget before anything more runs; `Some(code)`: it ended
    /// (failed) or stopped (waiting for a raise).
    pub(super) async fn over_budget(&mut self) -> Result<Option<ExitCode>> {
        let Some(BudgetState {
            next_seq,
            spent,
            marks,
            budget,
        }) = self.budget_state().await?
        else {
            return Ok(None);
        };
        let mut events = Vec::new();
        for w in budget.warnings(&spent) {
            let said = format!("budget warning: {}", w.figures());
            if self.warned.insert(said.clone()) {
                self.ui.warn(&said);
            }
            if !marks.warned.contains(w.limit.as_str()) {
                events.push(w.warning_event(budget.warn_at.unwrap_or(0.8)));
            }
        }
        let code = match budget.crossed(&spent) {
            None => None,
            Some(c) if budget.asks() => {
                if marks.waiting.is_none() {
                    events.push(c.wait_event(&spent));
                }
                self.ui.warn(&format!(
                    "run {}: {}; raise it and go on: babysitter run --resume {} --budget {}=<more>",
                    self.run_id,
                    c.reason(),
                    self.run_id,
                    flag_name(c.limit),
                ));
                Some(ExitCode::from(3))
            }
            Some(c) => {
                events.push(NewEvent::new(
                    EventType::RunFailed,
                    json!({"error": c.error(&spent), "reason": c.reason()}),
                ));
                self.ui
                    .error(&format!("run {}: {}", self.run_id, c.reason()));
                Some(ExitCode::FAILURE)
            }
        };
        if !events.is_empty() {
            self.engine
                .journal()
                .append(&self.run_id, next_seq, events)
                .await?;
        }
        Ok(code)
    }
}

struct BudgetState {
    next_seq: u64,
    spent: Spent,
    marks: babysitter_journal::budget_marks::BudgetMarks,
    budget: Budget,
}

/// The `--budget` key of a limit.
fn flag_name(limit: budget::Limit) -> &'static str {
    match limit {
        budget::Limit::Tokens => "tokens",
        budget::Limit::CostUsd => "cost",
        budget::Limit::WallTime => "wall",
        budget::Limit::Tasks => "tasks",
        budget::Limit::AgentTasks => "agent-tasks",
    }
}
