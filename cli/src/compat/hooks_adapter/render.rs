//! A babysitter answer in the harness's native output (spec `adapters-and-hooks.md` §3, quirks
//! K2, H2, H3, H5 fixed): what each harness reads to keep the agent going, to rewrite a tool
//! call, or to let it be. Anything a harness has no way to express becomes `{}` (allow).

use serde_json::{Value, json};

use crate::compat::hook::protocol::Answer;
use crate::plugins::harness::{Harness, Phase};

pub fn render(h: Harness, phase: Phase, answer: Option<Answer>) -> Value {
    match answer {
        None | Some(Answer::Allow) | Some(Answer::Echo(_)) => json!({}),
        Some(Answer::Block {
            reason,
            system_message,
        }) => {
            if !phase.drives_loop() {
                return json!({});
            }
            match h {
                // Cursor continues with a follow-up prompt: the next iteration's instructions.
                Harness::Cursor => json!({"followup_message": reason}),
                Harness::ClaudeCode
                | Harness::Codex
                | Harness::GeminiCli
                | Harness::OpenCode
                | Harness::Pi => json!({
                    "decision": "block",
                    "reason": reason,
                    "systemMessage": system_message,
                }),
            }
        }
        Some(Answer::RewriteTool { input, reason }) => match (h, phase) {
            (Harness::ClaudeCode, Phase::ToolBefore) => json!({
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "allow",
                    "permissionDecisionReason": reason,
                    "updatedInput": input,
                }
            }),
            _ => json!({}),
        },
    }
}
