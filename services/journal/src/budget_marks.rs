//! What a run's journal says about its budget: a soft limit crossed (`BUDGET_WARNING`, once per
//! limit), a hard limit crossed by a budget that asks to be raised rather than fail
//! (`BUDGET_EXCEEDED`: the run waits), and a raise (`BUDGET_RAISED`: it goes on). These are
//! this implementation's own event types; babysitter's readers skip unknown types, as its
//! format requires. Kept by the effect index like everything else it knows, so what was said
//! survives a restart and is never journaled twice.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `{limit, max, spent, warnAt}`: a limit's warning fraction was crossed.
pub const WARNING: &str = "BUDGET_WARNING";
/// `{limit, max, spent, totals, action: "ask"}`: a limit was crossed; the run waits for a raise.
pub const EXCEEDED: &str = "BUDGET_EXCEEDED";
/// `{budget, by}`: the budget was raised (the new limits); the run goes on.
pub const RAISED: &str = "BUDGET_RAISED";

/// The budget's state as the journal has it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetMarks {
    /// Limits whose warning was journaled since the last raise.
    pub warned: BTreeSet<String>,
    /// The limit the run waits on a raise of (`None`: not waiting).
    pub waiting: Option<String>,
    /// That wait's `BUDGET_EXCEEDED` data and `recordedAt` (what its breakpoint shows).
    pub exceeded: Option<(Value, String)>,
    /// Raises so far.
    pub raises: u32,
    /// The budget the latest raise set (`BUDGET_RAISED.budget`): it stands over run.json's,
    /// which is never rewritten.
    pub raised: Option<Value>,
}

impl BudgetMarks {
    /// Applies an event of type `kind` (anything but the three budget types is ignored).
    pub fn apply(&mut self, kind: &str, data: &Value, recorded_at: &str) {
        let limit = || data.get("limit").and_then(Value::as_str).map(str::to_owned);
        match kind {
            WARNING => self.warned.extend(limit()),
            EXCEEDED => {
                self.waiting = limit().or_else(|| Some(String::new()));
                self.exceeded = Some((data.clone(), recorded_at.to_owned()));
            }
            RAISED => {
                self.waiting = None;
                self.exceeded = None;
                self.warned.clear();
                self.raises += 1;
                self.raised = data.get("budget").cloned();
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn warnings_waits_and_raises_are_remembered_in_journal_order() {
        let mut m = BudgetMarks::default();
        m.apply(WARNING, &json!({"limit": "tokens"}), "t1");
        m.apply(EXCEEDED, &json!({"limit": "tokens"}), "t2");
        assert!(m.warned.contains("tokens"));
        assert_eq!(m.waiting.as_deref(), Some("tokens"));
        assert_eq!(
            m.exceeded,
            Some((json!({"limit": "tokens"}), "t2".to_owned()))
        );
        m.apply(RAISED, &json!({"budget": {"max-tokens": 5}}), "t3");
        assert_eq!(
            m,
            BudgetMarks {
                raises: 1,
                raised: Some(json!({"max-tokens": 5})),
                ..BudgetMarks::default()
            }
        );
        m.apply("SOMETHING_ELSE", &json!({"limit": "x"}), "t4");
        assert_eq!(m.raises, 1);
    }
}
