//! Per-run budgets: what a run may spend (model tokens, cost in USD, wall time, tasks, agent
//! tasks), what it has spent, and whether a limit is crossed.
//!
//! Why the spent amount is always recomputed from the journal's effect index and never kept as
//! a running total: the index is rebuilt from the journal on every start, so a restart (or a
//! standby taking over) loses nothing and counts nothing twice; usage arrives with a task's
//! result, journaled in the same append as `COST_TRACKED` events — the harness's per-task total,
//! or instead one per model request when the task's transport proxy measured them
//! (`engine::commit::TaskUsage::events`) — and the index adds up every one of an effect.
//!
//! A budget is given at `CreateRun` (`budget`), merged over the namespace's default from config
//! (`runs.budgets.<namespace>`, then `runs.budgets.default`), and stored in `run.json`
//! (`budget`, our extension) so any orchestrator that replays the run enforces the same one.
//! Semantics, checked by the run manager after each iteration and by the sweep:
//! - `max-tokens` / `max-cost-usd`: reached (spent ≥ max) → no new dispatch, running tasks are
//!   cancelled, the run fails with `BudgetExceededError`. Tasks running when the line is crossed
//!   can overshoot it by what they spend: bounded by the tasks in flight, and reported;
//! - `max-tasks` / `max-agent-tasks`: a run that requests more tasks than allowed fails before
//!   the extra one is dispatched;
//! - `max-wall-time`: counted from the run's creation; the sweep ends a run past it;
//! - `warn-at` (a fraction, default 0.8): past it a limit is reported as a warning (run status
//!   reason, logs, the `orchestrator_budget_warnings` metric, `GetRunCost`).

use std::time::Duration;

use babysitter_journal::budget_marks;
use babysitter_journal::index::EffectIndex;
use babysitter_journal::{EventType, NewEvent};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// The `run.json` key of a run's budget (our extension; `babysitter run` writes it too).
pub const BUDGET_KEY: &str = "budget";

/// What a run may spend; `None` = no limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields, default)]
pub struct Budget {
    /// Model tokens (input + output + cache reads and writes) over all tasks.
    pub max_tokens: Option<u64>,
    /// Cost in USD as the tasks' usage reports it (prices are the launcher's config).
    pub max_cost_usd: Option<f64>,
    /// Time since the run was created.
    #[serde(with = "babysitter_common::config::duration::option")]
    pub max_wall_time: Option<Duration>,
    /// Tasks dispatched to workers (every kind but breakpoints and sleeps).
    pub max_tasks: Option<u32>,
    /// Agent tasks.
    pub max_agent_tasks: Option<u32>,
    /// The fraction of a limit at which it warns (default 0.8).
    pub warn_at: Option<f64>,
    /// What a crossed limit does (default: fail the run).
    pub on_exceed: Option<OnExceed>,
}

/// What a run does when a limit is crossed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OnExceed {
    /// It fails with `BudgetExceededError`.
    #[default]
    Fail,
    /// It waits, nothing dispatched, on a breakpoint asking to raise the budget (`effect_id`
    /// [`RAISE_BREAKPOINT`]): approved with new limits it goes on, rejected it fails.
    Ask,
}

/// The breakpoint id (and effect id) of a run waiting for its budget to be raised.
pub const RAISE_BREAKPOINT: &str = "budget";

/// The budget in force: the latest raise's (`BUDGET_RAISED`, journaled), else the one stored
/// in run.json (never rewritten).
pub fn effective(
    stored: Option<&Budget>,
    marks: &babysitter_journal::budget_marks::BudgetMarks,
) -> Option<Budget> {
    marks
        .raised
        .as_ref()
        .and_then(|b| serde_json::from_value::<Budget>(b.clone()).ok())
        .or_else(|| stored.cloned())
}

/// One kind of limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Limit {
    Tokens,
    CostUsd,
    WallTime,
    Tasks,
    AgentTasks,
}

impl Limit {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Tokens => "tokens",
            Self::CostUsd => "cost_usd",
            Self::WallTime => "wall_time_seconds",
            Self::Tasks => "tasks",
            Self::AgentTasks => "agent_tasks",
        }
    }
}

/// What a run has spent so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spent {
    pub tokens: u64,
    pub cost_usd: f64,
    pub tasks: u32,
    pub agent_tasks: u32,
    pub wall_time: Duration,
}

/// A limit crossed: which, its maximum and what was spent.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossed {
    pub limit: Limit,
    pub max: f64,
    pub spent: f64,
}

impl Crossed {
    /// The run's error, babysitter-shaped, with the figures in `data`.
    pub fn error(&self, spent: &Spent) -> Value {
        json!({
            "name": "BudgetExceededError",
            "message": self.reason(),
            "data": {
                "reason": "budget_exceeded",
                "limit": self.limit.as_str(),
                "max": self.max,
                "spent": self.spent,
                "totals": spent.to_json(),
            },
        })
    }

    /// `tokens 1200 of 1000`: how warnings and the exceeded reason name a limit.
    pub fn figures(&self) -> String {
        format!("{} {} of {}", self.limit.as_str(), self.spent, self.max)
    }

    /// `budget_exceeded: tokens 1200 of 1000`.
    pub fn reason(&self) -> String {
        format!("budget_exceeded: {}", self.figures())
    }

    /// The journal's `BUDGET_WARNING` for this limit past its warning fraction `warn_at`.
    pub fn warning_event(&self, warn_at: f64) -> NewEvent {
        NewEvent::new(
            EventType::Other(budget_marks::WARNING.into()),
            json!({"limit": self.limit.as_str(), "max": self.max, "spent": self.spent, "warnAt": warn_at}),
        )
    }

    /// The journal's `BUDGET_EXCEEDED` of a budget that asks: the run waits for a raise.
    pub fn wait_event(&self, spent: &Spent) -> NewEvent {
        let mut data = self.error(spent)["data"].clone();
        data["action"] = json!("ask");
        NewEvent::new(EventType::Other(budget_marks::EXCEEDED.into()), data)
    }
}

impl Budget {
    /// The journal's `BUDGET_RAISED`: this budget is the one in force from now on.
    pub fn raised_event(&self, by: &str) -> NewEvent {
        let budget = serde_json::to_value(self).unwrap_or(Value::Null);
        NewEvent::new(
            EventType::Other(budget_marks::RAISED.into()),
            json!({"budget": budget, "by": by}),
        )
    }
}

const TASKLESS: [&str; 2] = ["breakpoint", "sleep"];

/// Amounts (tokens, cost, wall time) are crossed once reached, task counts once exceeded.
fn is_crossed(limit: Limit, max: f64, spent: f64) -> bool {
    match limit {
        Limit::Tasks | Limit::AgentTasks => spent > max,
        Limit::Tokens | Limit::CostUsd | Limit::WallTime => spent >= max,
    }
}

/// The wall time of a run created at `created_at` (ISO), as of `now_ms` (epoch ms); zero when
/// the creation time is unknown.
pub fn age(created_at: Option<&str>, now_ms: i64) -> Duration {
    let created = created_at
        .and_then(crate::engine::views::iso_to_ms)
        .unwrap_or(now_ms);
    Duration::from_millis(now_ms.saturating_sub(created).max(0) as u64)
}

impl Spent {
    /// What the run whose index is `index` has spent, `age` after its creation.
    pub fn of(index: &EffectIndex, age: Duration) -> Self {
        let mut s = Spent {
            wall_time: age,
            ..Default::default()
        };
        let n = |v: Option<f64>| v.unwrap_or(0.0).max(0.0);
        for r in index.effects.values() {
            let kind = r.kind.as_deref().unwrap_or("");
            if TASKLESS.contains(&kind) {
                continue;
            }
            s.tasks += 1;
            if babysitter_common::kinds::runs_on_a_harness(kind) {
                s.agent_tasks += 1;
            }
            s.tokens += (n(r.input_tokens)
                + n(r.output_tokens)
                + n(r.cache_creation_input_tokens)
                + n(r.cache_read_input_tokens)) as u64;
            s.cost_usd += n(r.cost_usd);
        }
        s
    }

    pub fn to_json(&self) -> Value {
        json!({
            "tokens": self.tokens,
            "costUsd": self.cost_usd,
            "tasks": self.tasks,
            "agentTasks": self.agent_tasks,
            "wallTimeSeconds": self.wall_time.as_secs_f64(),
        })
    }
}

impl std::str::FromStr for Budget {
    type Err = String;

    /// The `--budget` flag's form: `tokens=N,cost=USD,wall=DURATION,tasks=N,agent-tasks=N,
    /// warn-at=FRACTION`, any subset, e.g. `tokens=200000,wall=30m`.
    fn from_str(spec: &str) -> Result<Self, String> {
        let mut b = Budget::default();
        for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (key, value) = part
                .split_once('=')
                .ok_or_else(|| format!("`{part}` is not key=value"))?;
            let bad = |what: &str| format!("`{part}`: {value} is not {what}");
            match key.trim() {
                "tokens" => b.max_tokens = Some(value.parse().map_err(|_| bad("a count"))?),
                "cost" | "cost-usd" => {
                    b.max_cost_usd = Some(value.parse().map_err(|_| bad("an amount in USD"))?)
                }
                "wall" | "wall-time" => {
                    b.max_wall_time =
                        Some(humantime::parse_duration(value).map_err(|_| bad("a duration"))?)
                }
                "tasks" => b.max_tasks = Some(value.parse().map_err(|_| bad("a count"))?),
                "agent-tasks" => {
                    b.max_agent_tasks = Some(value.parse().map_err(|_| bad("a count"))?)
                }
                "warn-at" => b.warn_at = Some(value.parse().map_err(|_| bad("a fraction"))?),
                "on-exceed" => {
                    b.on_exceed = Some(match value.trim() {
                        "fail" => OnExceed::Fail,
                        "ask" => OnExceed::Ask,
                        _ => return Err(bad("`fail` or `ask`")),
                    })
                }
                other => {
                    return Err(format!(
                        "unknown limit `{other}` (tokens, cost, wall, tasks, agent-tasks, warn-at, on-exceed)"
                    ));
                }
            }
        }
        b.validate()?;
        Ok(b)
    }
}

impl Budget {
    /// True when it limits nothing.
    pub fn is_empty(&self) -> bool {
        self.max_tokens.is_none()
            && self.max_cost_usd.is_none()
            && self.max_wall_time.is_none()
            && self.max_tasks.is_none()
            && self.max_agent_tasks.is_none()
    }

    /// This budget with every limit it leaves unset taken from `defaults`.
    pub fn over(&self, defaults: &Budget) -> Budget {
        Budget {
            max_tokens: self.max_tokens.or(defaults.max_tokens),
            max_cost_usd: self.max_cost_usd.or(defaults.max_cost_usd),
            max_wall_time: self.max_wall_time.or(defaults.max_wall_time),
            max_tasks: self.max_tasks.or(defaults.max_tasks),
            max_agent_tasks: self.max_agent_tasks.or(defaults.max_agent_tasks),
            warn_at: self.warn_at.or(defaults.warn_at),
            on_exceed: self.on_exceed.or(defaults.on_exceed),
        }
    }

    /// Whether a crossed limit waits for a raise instead of failing the run.
    pub fn asks(&self) -> bool {
        self.on_exceed == Some(OnExceed::Ask)
    }

    /// Refuses limits that cannot mean anything (negative, not a number, zero wall time).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(c) = self.max_cost_usd
            && !(c.is_finite() && c >= 0.0)
        {
            return Err(format!("max-cost-usd must be a number ≥ 0, not {c}"));
        }
        if let Some(w) = self.warn_at
            && !(w.is_finite() && w > 0.0 && w <= 1.0)
        {
            return Err(format!("warn-at must be in (0, 1], not {w}"));
        }
        if self.max_wall_time.is_some_and(|d| d.is_zero()) {
            return Err("max-wall-time must be more than 0".into());
        }
        Ok(())
    }

    /// Each limit with its maximum and the spent amount.
    fn figures(&self, s: &Spent) -> Vec<(Limit, f64, f64)> {
        let mut out = Vec::new();
        if let Some(m) = self.max_tokens {
            out.push((Limit::Tokens, m as f64, s.tokens as f64));
        }
        if let Some(m) = self.max_cost_usd {
            out.push((Limit::CostUsd, m, s.cost_usd));
        }
        if let Some(m) = self.max_wall_time {
            out.push((Limit::WallTime, m.as_secs_f64(), s.wall_time.as_secs_f64()));
        }
        if let Some(m) = self.max_tasks {
            out.push((Limit::Tasks, m as f64, s.tasks as f64));
        }
        if let Some(m) = self.max_agent_tasks {
            out.push((Limit::AgentTasks, m as f64, s.agent_tasks as f64));
        }
        out
    }

    /// The first limit crossed: tokens, cost and wall time once reached, task counts once
    /// exceeded (the last allowed task may run).
    pub fn crossed(&self, s: &Spent) -> Option<Crossed> {
        self.figures(s)
            .into_iter()
            .find(|(limit, max, spent)| is_crossed(*limit, *max, *spent))
            .map(|(limit, max, spent)| Crossed { limit, max, spent })
    }

    /// The limits past their warning fraction (and not crossed: a task count at its maximum
    /// warns, the last allowed task may still run).
    pub fn warnings(&self, s: &Spent) -> Vec<Crossed> {
        let at = self.warn_at.unwrap_or(0.8);
        self.figures(s)
            .into_iter()
            .filter(|(limit, max, spent)| *spent >= max * at && !is_crossed(*limit, *max, *spent))
            .map(|(limit, max, spent)| Crossed { limit, max, spent })
            .collect()
    }
}

/// Why a run its client drives on this machine stops, and the event that ends it.
#[derive(Debug)]
pub struct Stop {
    pub reason: String,
    /// `RUN_FAILED` with `BudgetExceededError`: journaled after the run's pending effects are
    /// cancelled.
    pub event: NewEvent,
}

/// For a run its client drives on this machine (`run:iterate` on a runs directory): checked
/// after each iteration, by the rules above. Warnings not journaled yet are journaled; past a
/// limit, the [`Stop`] the caller ends the run with. Nothing for a run without a budget or one
/// that has ended. (Such a run has no one to ask, so a budget that asks is refused when the
/// run is created.)
pub async fn client_driven_check(
    journal: &babysitter_journal::Journal,
    run_id: &str,
    now_ms: i64,
) -> Result<Option<Stop>, babysitter_journal::JournalError> {
    let run_json = journal.run_files(run_id).await?.run_json;
    let Some(stored) = run_json.get(BUDGET_KEY) else {
        return Ok(None);
    };
    let stored: Budget = serde_json::from_value(stored.clone()).map_err(|e| {
        babysitter_journal::JournalError::invalid(
            "run.json",
            format!("`budget` does not parse: {e}"),
        )
    })?;
    let age = age(run_json.get("createdAt").and_then(Value::as_str), now_ms);
    let verdict = journal
        .inspect_now(run_id, |head, idx| {
            if idx.last_lifecycle.as_ref().is_some_and(|m| {
                matches!(
                    m.event_type.as_str(),
                    "RUN_COMPLETED" | "RUN_FAILED" | "RUN_HALTED"
                )
            }) {
                return None;
            }
            let budget = effective(Some(&stored), &idx.budget)?;
            let spent = Spent::of(idx, age);
            let warnings: Vec<NewEvent> = budget
                .warnings(&spent)
                .iter()
                .filter(|w| !idx.budget.warned.contains(w.limit.as_str()))
                .map(|w| w.warning_event(budget.warn_at.unwrap_or(0.8)))
                .collect();
            let stop = budget.crossed(&spent).map(|c| Stop {
                reason: c.reason(),
                event: NewEvent::new(
                    EventType::RunFailed,
                    json!({"error": c.error(&spent), "reason": c.reason()}),
                ),
            });
            Some((head.seq + 1, warnings, stop))
        })
        .await?;
    let Some((next_seq, warnings, stop)) = verdict else {
        return Ok(None);
    };
    if !warnings.is_empty() {
        journal.append(run_id, next_seq, warnings).await?;
    }
    Ok(stop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spent(tokens: u64, tasks: u32) -> Spent {
        Spent {
            tokens,
            tasks,
            ..Default::default()
        }
    }

    #[test]
    fn amounts_are_reached_and_counts_exceeded() {
        let b = Budget {
            max_tokens: Some(1000),
            max_tasks: Some(3),
            ..Default::default()
        };
        assert_eq!(b.crossed(&spent(999, 3)), None, "the third task may run");
        let c = b.crossed(&spent(1000, 1)).unwrap();
        assert_eq!((c.limit, c.max, c.spent), (Limit::Tokens, 1000.0, 1000.0));
        assert_eq!(c.reason(), "budget_exceeded: tokens 1000 of 1000");
        let c = b.crossed(&spent(10, 4)).unwrap();
        assert_eq!(c.limit, Limit::Tasks);
        let e = c.error(&spent(10, 4));
        assert_eq!(e["name"], "BudgetExceededError");
        assert_eq!(e["data"]["limit"], "tasks");
        assert_eq!(e["data"]["totals"]["tasks"], 4);
    }

    #[test]
    fn the_flag_form_parses_each_limit_and_names_what_is_wrong() {
        let b: Budget = "tokens=200000, cost=2.5,wall=30m,tasks=40,agent-tasks=8,warn-at=0.9"
            .parse()
            .unwrap();
        assert_eq!(b.max_tokens, Some(200_000));
        assert_eq!(b.max_cost_usd, Some(2.5));
        assert_eq!(b.max_wall_time, Some(Duration::from_secs(1800)));
        assert_eq!((b.max_tasks, b.max_agent_tasks), (Some(40), Some(8)));
        assert_eq!(b.warn_at, Some(0.9));
        assert!(
            "tokens=lots"
                .parse::<Budget>()
                .unwrap_err()
                .contains("tokens=lots")
        );
        assert!(
            "tokenz=1"
                .parse::<Budget>()
                .unwrap_err()
                .contains("unknown limit `tokenz`")
        );
        assert!(
            "cost=-3"
                .parse::<Budget>()
                .unwrap_err()
                .contains("max-cost-usd")
        );
        assert!(
            "tokens"
                .parse::<Budget>()
                .unwrap_err()
                .contains("key=value")
        );
    }

    #[test]
    fn warnings_start_at_the_fraction_and_stop_at_the_limit() {
        let b = Budget {
            max_tokens: Some(1000),
            warn_at: Some(0.5),
            ..Default::default()
        };
        assert!(b.warnings(&spent(499, 0)).is_empty());
        assert_eq!(b.warnings(&spent(500, 0))[0].limit, Limit::Tokens);
        assert!(
            b.warnings(&spent(1000, 0)).is_empty(),
            "crossed, not warned"
        );
    }

    #[test]
    fn a_request_budget_is_merged_over_the_namespace_default_and_validated() {
        let ns = Budget {
            max_tokens: Some(5),
            max_tasks: Some(9),
            ..Default::default()
        };
        let req = Budget {
            max_tasks: Some(2),
            ..Default::default()
        };
        let b = req.over(&ns);
        assert_eq!((b.max_tokens, b.max_tasks), (Some(5), Some(2)));
        assert!(Budget::default().is_empty() && !b.is_empty());
        let bad = Budget {
            max_cost_usd: Some(-1.0),
            ..Default::default()
        };
        assert!(bad.validate().unwrap_err().contains("max-cost-usd"));
        let parsed: Budget =
            serde_json::from_value(json!({"max-tokens": 10, "max-wall-time": "90s"})).unwrap();
        assert_eq!(parsed.max_wall_time, Some(Duration::from_secs(90)));
        assert!(serde_json::from_value::<Budget>(json!({"max-token": 1})).is_err());
    }
}
