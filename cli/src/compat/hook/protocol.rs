//! What `hook:run` reads from and writes to its harness (spec `adapters-and-hooks.md` §2.1): the
//! JSON payload on stdin, and on stdout `{}` (let the agent stop) or the block decision in the
//! harness's shape; hook errors on stderr.

use serde_json::{Map, Value, json};

use crate::compat::output;

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
    output::line("{}");
}

/// The block decision in the harness's shape: Cursor takes `{followup_message}`, the others
/// `{decision, reason, systemMessage}` (adapters-and-hooks §2.1).
pub(super) fn block(harness: &str, reason: &str, system_message: &str) {
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
