//! What `hook:run` reads from and writes to its harness (spec `adapters-and-hooks.md` §2.1): the
//! JSON payload on stdin, and on stdout `{}` (let the agent stop) or the block decision in the
//! harness's shape; hook errors on stderr.

use std::cell::RefCell;
use std::io::Read as _;

use serde_json::{Map, Value, json};

use crate::compat::output;

/// What a babysitter hook answered, before any harness's format: `hook:run` prints it in
/// babysitter's own shapes, `hooks:invoke` renders it in the calling harness's.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    /// Let the agent go on as it would (`{}`).
    Allow,
    /// Keep the agent going: `reason` is its next prompt, `system_message` a short status.
    Block {
        reason: String,
        system_message: String,
    },
    /// Run the tool with this input instead (`pre-tool-use`: output compression).
    RewriteTool { input: Value, reason: String },
    /// The payload handed back, changed (`user-prompt-submit`).
    Echo(Value),
}

/// A hook run by `hooks:invoke`: the payload it was given and the answer it gave, instead of
/// the process's stdin and stdout.
pub(crate) struct Adapted {
    payload: String,
    answer: RefCell<Option<Answer>>,
}

tokio::task_local! {
    static ADAPTED: Adapted;
}

/// Runs a hook handler on `payload`, capturing its answer (`None`: it answered nothing, which
/// means allow).
pub(crate) async fn adapted<F: std::future::Future>(
    payload: String,
    f: F,
) -> (F::Output, Option<Answer>) {
    let io = Adapted {
        payload,
        answer: RefCell::new(None),
    };
    ADAPTED
        .scope(io, async {
            let out = f.await;
            let answer = ADAPTED.with(|a| a.answer.borrow_mut().take());
            (out, answer)
        })
        .await
}

/// The hook's payload: the adapter's, else all of stdin.
pub(super) fn read_payload() -> std::io::Result<String> {
    if let Ok(p) = ADAPTED.try_with(|a| a.payload.clone()) {
        return Ok(p);
    }
    let mut raw = String::new();
    std::io::stdin().read_to_string(&mut raw)?;
    Ok(raw)
}

/// Gives the hook's answer: to the adapter when there is one, else printed in babysitter's
/// shape for `harness`.
pub(super) fn answer(harness: &str, a: Answer) {
    let a = match ADAPTED.try_with(|io| io.answer.replace(Some(a.clone()))) {
        Ok(_) => return,
        Err(_) => a,
    };
    match a {
        Answer::Allow => output::line("{}"),
        Answer::Block {
            reason,
            system_message,
        } => {
            let v = if harness == "cursor" {
                json!({"followup_message": system_message})
            } else {
                json!({
                    "decision": "block",
                    "reason": reason,
                    "systemMessage": system_message,
                })
            };
            output::line(&output::compact(&v));
        }
        Answer::RewriteTool { input, reason } => output::line(&output::compact(&json!({
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "allow",
                "permissionDecisionReason": reason,
                "updatedInput": input,
            }
        }))),
        Answer::Echo(v) => output::write_out(format_args!("{}", output::compact(&v))),
    }
}

/// A `hook:run` usage error: `{error, message}` (pretty) under `--json`, else `Error: …`; exit 1.
pub(super) fn hook_error(json: bool, code: &str, message: &str) -> u8 {
    if json {
        errln!(
            "{}",
            output::pretty(&json!({"error": code, "message": message}))
        );
    } else {
        errln!("Error: {message}");
    }
    1
}

/// The payload as an object; anything else becomes `{}` with a note on stderr.
pub(super) fn parse_payload(raw: &str) -> Map<String, Value> {
    if raw.trim().is_empty() {
        errln!("[hook:run] empty stop-hook payload on stdin; treating it as {{}}");
        return Map::new();
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(m)) => m,
        Ok(other) => {
            let kind = match other {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                _ => "null",
            };
            errln!(
                "[hook:run] invalid stop-hook payload: expected a JSON object, got {kind}; treating it as {{}}"
            );
            Map::new()
        }
        Err(e) => {
            errln!(
                "[hook:run] invalid stop-hook payload: not valid JSON ({e}); treating it as {{}}"
            );
            Map::new()
        }
    }
}

/// A non-blank string field of the payload.
pub(super) fn str_field<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    m.get(k)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
}

/// `{}`: the agent may stop.
pub(super) fn allow() {
    answer("", Answer::Allow);
}

/// The block decision in the harness's shape: Cursor takes `{followup_message}`, the others
/// `{decision, reason, systemMessage}` (adapters-and-hooks §2.1).
pub(super) fn block(harness: &str, reason: &str, system_message: &str) {
    answer(
        harness,
        Answer::Block {
            reason: reason.to_owned(),
            system_message: system_message.to_owned(),
        },
    );
}
