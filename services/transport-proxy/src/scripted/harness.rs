//! The built-in harness rule of `harnesses.md` §7.2: answered from the request alone, so side
//! requests (title generation, Gemini's router call) never consume a turn.

use serde_json::{Value, json};

use super::{Reply, ScriptedCall, has_tool_result, last_user_text};
use crate::canonical::{Request, Tool};

/// The built-in harness rule of `harnesses.md` §7.2.
pub fn harness_reply(req: &Request, raw: &Value) -> Reply {
    let json_mode = raw
        .pointer("/generationConfig/responseMimeType")
        .and_then(Value::as_str)
        == Some("application/json");
    if json_mode {
        let schema = raw
            .pointer("/generationConfig/responseJsonSchema")
            .or_else(|| raw.pointer("/generationConfig/responseSchema"))
            .cloned()
            .unwrap_or(json!({}));
        return Reply {
            text: Some(sample(&schema).to_string()),
            ..Reply::default()
        };
    }
    if !has_tool_result(req)
        && let Some(call) = shell_call(req, "echo hello > out.txt", "Write hello to out.txt")
    {
        return Reply {
            tool_calls: vec![call],
            ..Reply::default()
        };
    }
    let text = if last_user_text(req).contains("Stop hook feedback") {
        "DONE-AGAIN"
    } else {
        "DONE"
    };
    Reply {
        text: Some(text.to_owned()),
        ..Reply::default()
    }
}

/// A call of the request's shell-like tool (whichever of the harnesses' names it offers)
/// running `command`, its arguments shaped as that tool's schema asks; `None` when the request
/// offers no such tool.
pub fn shell_call(req: &Request, command: &str, description: &str) -> Option<ScriptedCall> {
    const SHELLS: [&str; 7] = [
        "Bash",
        "bash",
        "shell",
        "shell_command",
        "exec_command",
        "run_shell_command",
        "local_shell",
    ];
    let (name, schema) = SHELLS.iter().find_map(|want| {
        req.tools.iter().find_map(|t| match t {
            Tool::Function {
                name, parameters, ..
            } if name == want => Some((name.clone(), parameters.clone())),
            _ => None,
        })
    })?;
    let props = schema.get("properties").cloned().unwrap_or(json!({}));
    let mut args = serde_json::Map::new();
    for key in ["command", "cmd"] {
        if let Some(prop) = props.get(key) {
            let v = if prop.get("type").and_then(Value::as_str) == Some("array") {
                json!(["bash", "-lc", command])
            } else {
                json!(command)
            };
            args.insert(key.to_owned(), v);
            break;
        }
    }
    if args.is_empty() {
        args.insert("command".to_owned(), json!(command));
    }
    if props.get("description").is_some() {
        args.insert("description".to_owned(), json!(description));
    }
    Some(ScriptedCall {
        id: None,
        name,
        arguments: Value::Object(args),
        thought_signature: None,
    })
}

/// A value satisfying a (simple) JSON schema.
fn sample(schema: &Value) -> Value {
    if let Some(e) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|a| a.first())
    {
        return e.clone();
    }
    let ty = schema
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("object")
        .to_ascii_lowercase();
    match ty.as_str() {
        "object" => Value::Object(
            schema
                .get("properties")
                .and_then(Value::as_object)
                .map(|p| p.iter().map(|(k, v)| (k.clone(), sample(v))).collect())
                .unwrap_or_default(),
        ),
        "string" => json!("simple"),
        "integer" | "number" => {
            let min = schema.get("minimum").and_then(Value::as_f64).unwrap_or(1.0);
            json!(min.max(1.0) as i64)
        }
        "boolean" => json!(true),
        "array" => json!([]),
        _ => Value::Null,
    }
}
