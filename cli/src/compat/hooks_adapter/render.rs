//! The merged result in the harness's native output (spec `adapters-and-hooks.md` §3, quirks
//! K2, H2, H3, H5 fixed): what each harness reads to keep the agent going, to refuse or rewrite
//! a tool call, to add context, or to stop. Anything a harness has no way to express is left
//! out, so the answer degrades to "allow" (`{}`), never to a refusal.

use serde_json::{Map, Value, json};

use super::unified::{Decision, HookResult};
use crate::compat::hook::protocol::Answer;
use crate::plugins::harness::{Harness, Phase};

/// babysitter's own hook's answer as a handler result.
pub fn from_answer(a: Answer) -> HookResult {
    match a {
        Answer::Allow | Answer::Echo(_) => HookResult::default(),
        Answer::Block {
            reason,
            system_message,
        } => HookResult {
            decision: Some(Decision::Block),
            reason: Some(reason),
            system_message: Some(system_message),
            ..HookResult::default()
        },
        Answer::RewriteTool { input, reason } => HookResult {
            decision: Some(Decision::Allow),
            reason: Some(reason),
            tool_mutation: Some(super::unified::ToolMutation {
                mode: "replace".into(),
                value: input,
            }),
            ..HookResult::default()
        },
    }
}

fn put(m: &mut Map<String, Value>, k: &str, v: &Option<String>) {
    if let Some(v) = v {
        m.insert(k.into(), json!(v));
    }
}

pub fn render(h: Harness, phase: Phase, r: &HookResult) -> Value {
    let blocking = matches!(r.decision, Some(Decision::Deny | Decision::Block));
    let shell = matches!(h, Harness::ClaudeCode | Harness::Codex | Harness::GeminiCli);
    let mut m = Map::new();
    if phase.drives_loop() && blocking {
        if h == Harness::Cursor {
            // Cursor continues with a follow-up prompt: the next iteration's instructions.
            let follow = r.follow_up_message.clone().or_else(|| r.reason.clone());
            put(&mut m, "followup_message", &follow);
            return Value::Object(m);
        }
        m.insert("decision".into(), json!("block"));
        put(&mut m, "reason", &r.reason);
        put(&mut m, "systemMessage", &r.system_message);
        return Value::Object(m);
    }
    match (h, phase) {
        (Harness::ClaudeCode, Phase::ToolBefore) => {
            let mut out = Map::new();
            out.insert("hookEventName".into(), json!("PreToolUse"));
            if blocking {
                out.insert("permissionDecision".into(), json!("deny"));
                put(&mut out, "permissionDecisionReason", &r.reason);
            } else if r.decision == Some(Decision::Ask) {
                out.insert("permissionDecision".into(), json!("ask"));
                put(&mut out, "permissionDecisionReason", &r.reason);
            } else if let Some(t) = &r.tool_mutation {
                out.insert("permissionDecision".into(), json!("allow"));
                put(&mut out, "permissionDecisionReason", &r.reason);
                out.insert("updatedInput".into(), t.value.clone());
            }
            if out.len() > 1 {
                m.insert("hookSpecificOutput".into(), Value::Object(out));
            }
        }
        (Harness::ClaudeCode, Phase::SessionStart | Phase::UserPromptSubmitted) => {
            if blocking && phase == Phase::UserPromptSubmitted {
                m.insert("decision".into(), json!("block"));
                put(&mut m, "reason", &r.reason);
            } else if let Some(ctx) = &r.additional_context {
                let name = if phase == Phase::SessionStart {
                    "SessionStart"
                } else {
                    "UserPromptSubmit"
                };
                m.insert(
                    "hookSpecificOutput".into(),
                    json!({"hookEventName": name, "additionalContext": ctx}),
                );
            }
        }
        (Harness::Codex, Phase::ToolBefore | Phase::UserPromptSubmitted) if blocking => {
            m.insert("decision".into(), json!("block"));
            put(&mut m, "reason", &r.reason);
        }
        (Harness::GeminiCli, Phase::ToolBefore | Phase::BeforeAgent) if blocking => {
            m.insert("decision".into(), json!("deny"));
            put(&mut m, "reason", &r.reason);
        }
        (Harness::OpenCode | Harness::Pi, _) if blocking => {
            m.insert("decision".into(), json!("block"));
            put(&mut m, "reason", &r.reason);
        }
        _ => {}
    }
    if shell {
        if r.continue_session == Some(false) {
            m.insert("continue".into(), json!(false));
            put(&mut m, "stopReason", &r.stop_reason);
        }
        if !m.is_empty() || r.system_message.is_some() {
            put(&mut m, "systemMessage", &r.system_message);
        }
    }
    Value::Object(m)
}
