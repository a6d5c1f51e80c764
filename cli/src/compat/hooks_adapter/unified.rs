//! The hooks adapter's one result model (`UnifiedHookResult`, spec `adapters-and-hooks.md`
//! §1.7) and its merge rules when several handlers answer one event (§1.8): babysitter's own hook
//! and any `--handler` command. The renderer ([`super::render`]) turns the merged result into
//! the harness's native output.
//!
//! Merge rules: the most restrictive decision wins (`deny` < `block` < `retry` < `ask` <
//! `allow` < `defer` < `continue` < `noop`); `reason`, `additionalContext`, `followUpMessage` and
//! `systemMessage` are joined with `\n---\n`; `continueSession` is false if any says so,
//! `suppressOutput` true if any says so; `stopReason`s are joined only when the session is
//! stopped; one tool mutation at most — a second is a conflict, reported, and the first kept.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A handler's decision, most restrictive first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Deny,
    Block,
    Retry,
    Ask,
    Allow,
    Defer,
    Continue,
    Noop,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolMutation {
    /// `replace` or `patch`.
    pub mode: String,
    pub value: Value,
}

/// What one handler answered (every field optional).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_context: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_up_message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continue_session: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suppress_output: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_mutation: Option<ToolMutation>,
}

const SEP: &str = "\n---\n";

fn join(a: &mut Option<String>, b: Option<String>) {
    match (a.as_mut(), b) {
        (_, None) => {}
        (None, Some(b)) => *a = Some(b),
        (Some(a), Some(b)) => {
            a.push_str(SEP);
            a.push_str(&b);
        }
    }
}

/// The merged result of `results`, in handler order, and the conflicts worth reporting.
pub fn merge(results: Vec<HookResult>) -> (HookResult, Vec<String>) {
    let mut out = HookResult::default();
    let mut conflicts = Vec::new();
    let mut stop_reasons: Option<String> = None;
    for r in results {
        out.decision = match (out.decision, r.decision) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        join(&mut out.reason, r.reason);
        join(&mut out.system_message, r.system_message);
        join(&mut out.additional_context, r.additional_context);
        join(&mut out.follow_up_message, r.follow_up_message);
        join(&mut stop_reasons, r.stop_reason);
        if r.continue_session == Some(false) {
            out.continue_session = Some(false);
        } else if out.continue_session.is_none() {
            out.continue_session = r.continue_session;
        }
        if r.suppress_output == Some(true) {
            out.suppress_output = Some(true);
        }
        match (&out.tool_mutation, r.tool_mutation) {
            (_, None) => {}
            (None, Some(m)) => out.tool_mutation = Some(m),
            (Some(_), Some(_)) => conflicts
                .push("two handlers rewrote the tool call; the first rewrite is kept".to_owned()),
        }
    }
    if out.continue_session == Some(false) {
        out.stop_reason = stop_reasons;
    }
    (out, conflicts)
}

/// A handler's stdout as its result: JSON of the model, or text taken as a `noop` with that
/// reason (§1.3).
pub fn parse(stdout: &str) -> HookResult {
    let text = stdout.trim();
    if text.is_empty() {
        return HookResult::default();
    }
    match serde_json::from_str::<HookResult>(text) {
        Ok(r) => r,
        Err(_) => HookResult {
            decision: Some(Decision::Noop),
            reason: Some(text.to_owned()),
            ..HookResult::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(v: Value) -> HookResult {
        serde_json::from_value(v).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_most_restrictive_decision_wins_and_texts_join() {
        let (m, conflicts) = merge(vec![
            r(serde_json::json!({"decision": "allow", "additionalContext": "a"})),
            r(
                serde_json::json!({"decision": "block", "reason": "keep going", "additionalContext": "b"}),
            ),
            r(serde_json::json!({"decision": "noop", "reason": "fyi"})),
        ]);
        assert_eq!(m.decision, Some(Decision::Block));
        assert_eq!(m.reason.as_deref(), Some("keep going\n---\nfyi"));
        assert_eq!(m.additional_context.as_deref(), Some("a\n---\nb"));
        assert!(conflicts.is_empty());
        let (m, _) = merge(vec![
            r(serde_json::json!({"decision": "block"})),
            r(serde_json::json!({"decision": "deny"})),
        ]);
        assert_eq!(m.decision, Some(Decision::Deny));
    }

    #[test]
    fn stopping_and_suppressing_win_and_a_second_mutation_conflicts() {
        let mutation = serde_json::json!({"mode": "replace", "value": {"command": "ls"}});
        let (m, conflicts) = merge(vec![
            r(
                serde_json::json!({"continueSession": true, "stopReason": "x", "toolMutation": mutation}),
            ),
            r(
                serde_json::json!({"continueSession": false, "stopReason": "y", "suppressOutput": true,
                                 "toolMutation": {"mode": "replace", "value": {"command": "rm"}}}),
            ),
        ]);
        assert_eq!(m.continue_session, Some(false));
        assert_eq!(m.stop_reason.as_deref(), Some("x\n---\ny"));
        assert_eq!(m.suppress_output, Some(true));
        assert_eq!(
            m.tool_mutation.map(|t| t.value["command"].clone()),
            Some("ls".into())
        );
        assert_eq!(conflicts.len(), 1);
        let (m, _) = merge(vec![r(serde_json::json!({"stopReason": "z"}))]);
        assert_eq!(m.stop_reason, None, "joined only when stopped");
    }

    #[test]
    fn text_output_is_a_noop_with_a_reason() {
        assert_eq!(parse(""), HookResult::default());
        let p = parse("just words");
        assert_eq!(p.decision, Some(Decision::Noop));
        assert_eq!(p.reason.as_deref(), Some("just words"));
        assert_eq!(
            parse(r#"{"decision":"deny","reason":"no"}"#).decision,
            Some(Decision::Deny)
        );
    }
}
