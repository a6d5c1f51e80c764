//! Budgets enforced (see `service::budget` for the rules): after each iteration of a run the
//! manager drives, before anything is dispatched, and from the sweep for wall time; and what a
//! run has spent, for `GetRunCost`.

use std::time::Duration;

use babysitter_journal::index::EffectIndex;

use super::{RunManager, lock};
use crate::service::Result;
use crate::service::budget::{self, Budget, Crossed, Spent};

/// How a run's status reason starts while it is past a warning fraction.
pub(super) const BUDGET_WARNING: &str = "budget warning: ";

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

fn task_costs(index: &EffectIndex) -> Vec<TaskCost> {
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
    /// holds it): past a limit the run is ended (true); past a warning fraction its status
    /// reason says so.
    pub(super) async fn enforce_budget(&self, run_id: &str) -> Result<bool> {
        let Some((budget, created_at)) = lock(&self.inner.runs).live(run_id).and_then(|r| {
            let s = r.summary.borrow();
            s.budget.clone().map(|b| (b, s.created_at.clone()))
        }) else {
            return Ok(false);
        };
        let age = self.age(created_at.as_deref());
        let spent = self
            .engine()
            .view(run_id, |_, idx| Spent::of(idx, age))
            .await?;
        if let Some(crossed) = budget.crossed(&spent) {
            let reason = crossed.reason();
            tracing::warn!(run_id, %reason, "budget exceeded: the run is stopped");
            crate::service::metrics::budget_exceeded(crossed.limit.as_str());
            self.end_locked(run_id, &reason, crossed.error(&spent), false)
                .await?;
            return Ok(true);
        }
        let warnings = budget.warnings(&spent);
        if !warnings.is_empty() {
            let said: Vec<String> = warnings.iter().map(Crossed::figures).collect();
            let reason = format!("{BUDGET_WARNING}{}", said.join(", "));
            let changed = self.set_reason_if_changed(run_id, &reason);
            if changed {
                tracing::warn!(run_id, %reason, "budget warning");
                for w in &warnings {
                    crate::service::metrics::budget_warning(w.limit.as_str());
                }
            }
        }
        Ok(false)
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
                (!s.client_driven && self.age(s.created_at.as_deref()) >= max)
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
        let (warnings, exceeded) = match &summary.budget {
            Some(b) => (b.warnings(&spent), b.crossed(&spent)),
            None => (Vec::new(), None),
        };
        Ok(RunCost {
            budget: summary.budget,
            tasks: task_costs(&index),
            spent,
            warnings,
            exceeded,
        })
    }
}
