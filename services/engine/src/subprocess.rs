//! The shapes of a subprocess run, one rule for every executor that makes child runs (the
//! orchestrator and `babysitter run`): babysitter's run.json `nested` link, the
//! `SubprocessResult` a completed child resolves its parent's effect with, and the error a
//! child that did not complete gives the parent's process.

use serde_json::{Value, json};

/// babysitter's `nested` (`{parentRunId, parentEffectId, parentInvocationKey, shareSession}`)
/// for the child of `parent_run`'s effect; `invocation` is the effect's `subprocess` block.
pub fn nested(
    parent_run: &str,
    effect_id: &str,
    invocation_key: &str,
    invocation: &Value,
) -> Value {
    json!({"parentRunId": parent_run, "parentEffectId": effect_id,
           "parentInvocationKey": invocation_key,
           "shareSession": invocation["shareSession"].as_bool().unwrap_or(true)})
}

/// What a completed child resolves its parent's effect with.
pub fn result(child_id: &str, run_dir: &str, output: Option<Value>) -> Value {
    json!({"runId": child_id, "runDir": run_dir, "output": output.unwrap_or(Value::Null)})
}

/// The process's error for a child that ended `status` (failed, cancelled, halted) with
/// `error` (its `{name, message}`, or null).
pub fn failed(child_id: &str, status: &str, error: Option<Value>) -> Value {
    let error = error.unwrap_or(Value::Null);
    let why = error["message"].as_str().unwrap_or(status).to_owned();
    json!({"name": "SubprocessFailedError",
           "message": format!("subprocess run {child_id} {status}: {why}"),
           "data": {"runId": child_id, "status": status, "error": error}})
}

/// The process's error for an invocation no child run can be made from.
pub fn invalid(why: &str) -> Value {
    json!({"name": "SubprocessError", "message": why})
}
