//! Checks on a canonical request before anything goes upstream, and the local token estimate.
//!
//! Why here and not in each decoder: tool-call pairing (spec §7, T10) is a property of the
//! conversation, not of a wire format. An orphan tool result or an unanswered tool call makes
//! every upstream fail with its own cryptic 400 ("unexpected `tool_use_id`"); catching it once,
//! on the canonical history, gives the client a 400 in its own envelope that names the id.

use std::collections::HashSet;

use crate::canonical::{Part, Request, Role, Tool};
use crate::error::ProxyError;

/// Every tool result must answer a call of the nearest preceding assistant message; with
/// `require_answers`, every call of an assistant message followed by a user message must be
/// answered there (Anthropic, OpenAI; Gemini tolerates unanswered calls).
pub fn validate_pairing(req: &Request, require_answers: bool) -> Result<(), ProxyError> {
    let mut last_calls: Option<(usize, HashSet<&str>)> = None;
    for (i, m) in req.messages.iter().enumerate() {
        match m.role {
            Role::Assistant => {
                let calls: HashSet<&str> = m
                    .content
                    .iter()
                    .filter_map(|p| match p {
                        Part::ToolCall(c) => Some(c.id.as_str()),
                        _ => None,
                    })
                    .collect();
                last_calls = Some((i, calls));
            }
            Role::User => {
                let results: Vec<&str> = m
                    .content
                    .iter()
                    .filter_map(|p| match p {
                        Part::ToolResult(r) => Some(r.tool_call_id.as_str()),
                        _ => None,
                    })
                    .collect();
                let empty = HashSet::new();
                let calls = last_calls.as_ref().map_or(&empty, |(_, c)| c);
                if let Some(orphan) = results.iter().find(|id| !calls.contains(*id)) {
                    return Err(ProxyError::invalid(
                        format!("messages[{i}]"),
                        format!(
                            "tool result {orphan} answers no tool call of the preceding assistant turn"
                        ),
                    ));
                }
                if require_answers
                    && let Some((a, calls)) = last_calls.take()
                    && a + 1 == i
                {
                    let answered: HashSet<&str> = results.into_iter().collect();
                    let mut missing: Vec<&&str> = calls.difference(&answered).collect();
                    missing.sort();
                    if let Some(id) = missing.first() {
                        return Err(ProxyError::invalid(
                            format!("messages[{i}]"),
                            format!("tool call {id} of the preceding assistant turn has no result"),
                        ));
                    }
                }
                last_calls = None;
            }
            Role::System => {}
        }
    }
    Ok(())
}

/// Refuses requests whose meaning would be lost in translation (they pass through untouched to
/// an upstream of their own protocol): a Responses `previous_response_id` refers to server-side
/// state only an OpenAI upstream holds, so dropping it would silently lose the history.
pub fn translatable(front: crate::protocol::Protocol, body: &[u8]) -> Result<(), ProxyError> {
    if front == crate::protocol::Protocol::OpenAiResponses
        && let Ok(v) = serde_json::from_slice::<serde_json::Value>(body)
        && v.get("previous_response_id").is_some_and(|p| !p.is_null())
    {
        return Err(ProxyError::invalid(
            "previous_response_id",
            "server-side conversation state cannot be translated to this route's upstream; send the full input (store: false)",
        ));
    }
    Ok(())
}

/// A local token estimate (≈ 4 bytes per token over all text, arguments and schemas), used for
/// `count_tokens` when the upstream has no counting endpoint (spec §14).
pub fn estimate_tokens(req: &Request) -> u64 {
    let mut bytes = 0usize;
    let mut part = |p: &Part| match p {
        Part::Text(t) => bytes += t.text.len(),
        Part::ToolCall(c) => bytes += c.name.len() + c.arguments.len(),
        Part::ToolResult(r) => {
            for c in &r.content {
                if let Part::Text(t) = c {
                    bytes += t.text.len();
                } else {
                    bytes += 1000;
                }
            }
        }
        Part::Reasoning { text, .. } => bytes += text.len(),
        Part::Image(_) => bytes += 6000,
        Part::RedactedReasoning { data } => bytes += data.len() / 2,
    };
    for t in &req.system {
        part(&Part::Text(t.clone()));
    }
    for m in &req.messages {
        for p in &m.content {
            part(p);
        }
    }
    for t in &req.tools {
        bytes += match t {
            Tool::Function {
                name,
                description,
                parameters,
            } => {
                name.len()
                    + description.as_ref().map_or(0, String::len)
                    + parameters.to_string().len()
            }
            Tool::Hosted(v) => v.to_string().len(),
        };
    }
    (bytes as u64).div_ceil(4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::{Message, TextPart, ToolCall, ToolResult};

    fn call(id: &str) -> Part {
        Part::ToolCall(ToolCall {
            id: id.into(),
            name: "f".into(),
            arguments: "{}".into(),
            signature: None,
        })
    }

    fn result(id: &str) -> Part {
        Part::ToolResult(ToolResult {
            tool_call_id: id.into(),
            content: vec![Part::Text(TextPart::plain("ok"))],
            is_error: false,
        })
    }

    fn req(messages: Vec<(Role, Vec<Part>)>) -> Request {
        Request {
            messages: messages
                .into_iter()
                .map(|(role, content)| Message { role, content })
                .collect(),
            ..Request::default()
        }
    }

    /// T10: orphan results and unanswered calls are named in a 400 before any upstream call.
    #[test]
    fn t10_orphan_result_and_unanswered_call_are_rejected_naming_the_id() {
        let orphan = req(vec![
            (Role::User, vec![Part::Text(TextPart::plain("hi"))]),
            (Role::Assistant, vec![call("call_a")]),
            (Role::User, vec![result("call_a"), result("call_zzz")]),
        ]);
        let e = validate_pairing(&orphan, true).err().map(|e| e.to_string());
        assert!(
            e.as_deref()
                .is_some_and(|m| m.contains("call_zzz") && m.contains("messages[2]")),
            "{e:?}"
        );
        let unanswered = req(vec![
            (Role::Assistant, vec![call("call_a"), call("call_b")]),
            (Role::User, vec![result("call_a")]),
        ]);
        let e = validate_pairing(&unanswered, true)
            .err()
            .map(|e| e.to_string());
        assert!(e.as_deref().is_some_and(|m| m.contains("call_b")), "{e:?}");
        assert!(
            validate_pairing(&unanswered, false).is_ok(),
            "gemini tolerates it"
        );
        let fine = req(vec![
            (Role::Assistant, vec![call("call_a"), call("call_b")]),
            (Role::User, vec![result("call_b"), result("call_a")]),
            (Role::Assistant, vec![call("call_c")]),
        ]);
        assert!(validate_pairing(&fine, true).is_ok());
    }

    #[test]
    fn estimate_counts_text_tools_and_history() {
        let r = req(vec![(
            Role::User,
            vec![Part::Text(TextPart::plain("x".repeat(400)))],
        )]);
        assert_eq!(estimate_tokens(&r), 100);
    }
}
