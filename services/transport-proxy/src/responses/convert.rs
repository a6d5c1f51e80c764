//! OpenAI Responses ⇄ canonical, non-streaming (requests and responses).
//!
//! The structural differences handled here (spec §4.3, §10):
//! * Responses history is a flat list of items; canonical groups an assistant turn's reasoning,
//!   text and `function_call` items into one assistant message, and consecutive
//!   `function_call_output` items into one user message, as Anthropic does.
//! * `developer`/`system` input items (Codex sends no `instructions`) become the system prompt
//!   while no conversation has started, and mid-conversation system messages afterwards.
//! * Hosted tools (`web_search`) and `namespace` tools are kept opaque: only a Responses
//!   upstream could run them, and other encoders drop them (spec §4.1).
//! * Reasoning items keep their `encrypted_content` as the canonical signature; towards a
//!   Responses upstream only reasoning that a Responses upstream produced is replayed, and never
//!   as `output_text` (T2).

use serde_json::{Value, json};

use super::{Input, ResponseObject, ResponsesRequest, WireUsage, item_type, str_field};
use crate::canonical::{
    Image, Message, Metadata, Part, ReasoningControl, ReasoningOrigin, Request, Response, Role,
    StopReason, TextPart, Tool, ToolCall, ToolChoice, ToolResult, Usage,
};
use crate::error::ProxyError;
use crate::protocol::Protocol;

/// Client request → canonical. Fails with a 400 naming the field.
pub fn request_to_canonical(req: ResponsesRequest) -> Result<Request, ProxyError> {
    let mut system: Vec<TextPart> = req
        .instructions
        .filter(|i| !i.is_empty())
        .map(TextPart::plain)
        .into_iter()
        .collect();
    let mut messages: Vec<Message> = Vec::new();
    let items = match req.input {
        None => Vec::new(),
        Some(Input::Text(t)) => vec![json!({"role": "user", "content": t})],
        Some(Input::Items(items)) => items,
    };
    for (i, item) in items.iter().enumerate() {
        let path = format!("input[{i}]");
        decode_item(item, &path, &mut system, &mut messages)?;
    }
    let mut tools = Vec::new();
    for (i, t) in req.tools.unwrap_or_default().into_iter().enumerate() {
        if item_type(&t) == "function" {
            let name = t.get("name").and_then(Value::as_str).ok_or_else(|| {
                ProxyError::invalid(format!("tools[{i}].name"), "required for function tools")
            })?;
            tools.push(Tool::Function {
                name: name.to_owned(),
                description: t
                    .get("description")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                parameters: t
                    .get("parameters")
                    .filter(|p| !p.is_null())
                    .cloned()
                    .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
            });
        } else {
            tools.push(Tool::Hosted(t));
        }
    }
    let tool_choice = match req.tool_choice {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "auto" => ToolChoice::Auto,
            "required" => ToolChoice::Required,
            "none" => ToolChoice::None,
            other => {
                return Err(ProxyError::invalid(
                    "tool_choice",
                    format!("unknown value {other}"),
                ));
            }
        }),
        Some(v) if item_type(&v) == "function" => match v.get("name").and_then(Value::as_str) {
            Some(n) => Some(ToolChoice::Specific(n.to_owned())),
            None => return Err(ProxyError::invalid("tool_choice.name", "required")),
        },
        Some(v) => {
            tracing::debug!(choice = %v, "hosted tool choice has no canonical equivalent: auto");
            Some(ToolChoice::Auto)
        }
    };
    if !req.extra.is_empty() {
        let keys: Vec<&String> = req.extra.keys().collect();
        tracing::debug!(
            ?keys,
            "responses fields without canonical equivalent dropped"
        );
    }
    Ok(Request {
        model: req.model,
        system,
        messages,
        max_tokens: req.max_output_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: None,
        stop_sequences: Vec::new(),
        tools,
        tool_choice,
        parallel_tool_calls: req.parallel_tool_calls,
        reasoning: req
            .reasoning
            .and_then(|r| r.effort)
            .map(ReasoningControl::Effort),
        metadata: Metadata { user_id: req.user },
        stream: req.stream.unwrap_or(false),
        include_usage: true,
        response_format: req
            .extra
            .get("text")
            .and_then(|t| t.get("format"))
            .and_then(crate::canonical::ResponseFormat::from_openai),
    })
}

/// Appends `part` to the last message when it has `role` (and, for user messages, holds only
/// tool results, so that results stay grouped), else starts a new message.
fn push(messages: &mut Vec<Message>, role: Role, part: Part) {
    if let Some(last) = messages.last_mut()
        && last.role == role
        && (role == Role::Assistant
            || (matches!(part, Part::ToolResult(_))
                && last
                    .content
                    .iter()
                    .all(|p| matches!(p, Part::ToolResult(_)))))
    {
        last.content.push(part);
        return;
    }
    messages.push(Message {
        role,
        content: vec![part],
    });
}

fn decode_item(
    item: &Value,
    path: &str,
    system: &mut Vec<TextPart>,
    messages: &mut Vec<Message>,
) -> Result<(), ProxyError> {
    let ty = item_type(item);
    match ty {
        "message" | "" => {
            let role = item.get("role").and_then(Value::as_str).ok_or_else(|| {
                ProxyError::invalid(format!("{path}.role"), "required for message items")
            })?;
            let parts = content_parts(item.get("content"), &format!("{path}.content"))?;
            match role {
                "system" | "developer" => {
                    if messages.is_empty() {
                        system.extend(parts.into_iter().filter_map(|p| match p {
                            Part::Text(t) => Some(t),
                            _ => None,
                        }));
                    } else {
                        messages.push(Message {
                            role: Role::System,
                            content: parts,
                        });
                    }
                }
                "user" => messages.push(Message {
                    role: Role::User,
                    content: parts,
                }),
                "assistant" => {
                    for p in parts {
                        push(messages, Role::Assistant, p);
                    }
                }
                other => {
                    return Err(ProxyError::invalid(
                        format!("{path}.role"),
                        format!("unknown role {other}"),
                    ));
                }
            }
        }
        "function_call" => {
            let call_id = required_str(item, "call_id", path)?;
            let name = required_str(item, "name", path)?;
            push(
                messages,
                Role::Assistant,
                Part::ToolCall(ToolCall {
                    id: call_id,
                    name,
                    arguments: str_field(item, "arguments").to_owned(),
                    signature: None,
                }),
            );
        }
        "function_call_output" => {
            let call_id = required_str(item, "call_id", path)?;
            let content = match item.get("output") {
                Some(Value::String(s)) => vec![Part::Text(TextPart::plain(s.clone()))],
                Some(v @ Value::Array(_)) => content_parts(Some(v), &format!("{path}.output"))?,
                None | Some(Value::Null) => Vec::new(),
                Some(other) => vec![Part::Text(TextPart::plain(other.to_string()))],
            };
            push(
                messages,
                Role::User,
                Part::ToolResult(ToolResult {
                    tool_call_id: call_id,
                    content,
                    is_error: false,
                }),
            );
        }
        "reasoning" => push(messages, Role::Assistant, reasoning_part(item)),
        other => tracing::debug!(item_type = %other, "responses input item dropped"),
    }
    Ok(())
}

fn required_str(item: &Value, key: &str, path: &str) -> Result<String, ProxyError> {
    item.get(key)
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| ProxyError::invalid(format!("{path}.{key}"), "required string"))
}

/// Message content: a string or a list of `input_text` / `output_text` / `input_image` parts.
fn content_parts(content: Option<&Value>, path: &str) -> Result<Vec<Part>, ProxyError> {
    match content {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![Part::Text(TextPart::plain(s.clone()))]),
        Some(Value::Array(parts)) => {
            let mut out = Vec::with_capacity(parts.len());
            for (j, p) in parts.iter().enumerate() {
                match item_type(p) {
                    "input_text" | "output_text" | "text" | "summary_text" => {
                        out.push(Part::Text(TextPart::plain(str_field(p, "text"))));
                    }
                    "refusal" => out.push(Part::Text(TextPart::plain(str_field(p, "refusal")))),
                    "input_image" => match p.get("image_url").and_then(Value::as_str) {
                        Some(url) => out.push(Part::Image(Image::from_url(url))),
                        None => {
                            return Err(ProxyError::invalid(
                                format!("{path}[{j}].image_url"),
                                "required (file ids cannot be translated)",
                            ));
                        }
                    },
                    other => tracing::debug!(part_type = %other, "responses content part dropped"),
                }
            }
            Ok(out)
        }
        Some(_) => Err(ProxyError::invalid(
            path,
            "expected a string or an array of content parts",
        )),
    }
}

fn text_of(parts: &[Part]) -> String {
    parts
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Canonical → request for a Responses upstream. Stop sequences have no Responses field and
/// are dropped (logged).
pub fn canonical_to_request(req: &Request, model: &str) -> Value {
    let mut input: Vec<Value> = Vec::new();
    for m in &req.messages {
        match m.role {
            Role::System => input.push(json!({
                "type": "message", "role": "developer",
                "content": [{"type": "input_text", "text": text_of(&m.content)}],
            })),
            Role::User => encode_user(&m.content, &mut input),
            Role::Assistant => encode_assistant(&m.content, &mut input),
        }
    }
    let tools: Vec<Value> = req
        .tools
        .iter()
        .map(|t| match t {
            Tool::Function {
                name,
                description,
                parameters,
            } => {
                let mut v = json!({"type": "function", "name": name, "parameters": parameters});
                if let Some(d) = description {
                    v["description"] = json!(d);
                }
                v
            }
            Tool::Hosted(v) => v.clone(),
        })
        .collect();
    if !req.stop_sequences.is_empty() {
        tracing::debug!("stop sequences have no responses equivalent, dropped");
    }
    let mut body = json!({"model": model, "input": input, "store": false});
    if !req.system.is_empty() {
        let text: Vec<&str> = req.system.iter().map(|t| t.text.as_str()).collect();
        body["instructions"] = json!(text.join("\n\n"));
    }
    if let Some(m) = req.max_tokens {
        body["max_output_tokens"] = json!(m);
    }
    if let Some(t) = req.temperature {
        body["temperature"] = json!(t);
    }
    if let Some(t) = req.top_p {
        body["top_p"] = json!(t);
    }
    if req.stream {
        body["stream"] = json!(true);
    }
    if !tools.is_empty() {
        body["tools"] = Value::Array(tools);
        if let Some(c) = &req.tool_choice {
            body["tool_choice"] = match c {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::Required => json!("required"),
                ToolChoice::None => json!("none"),
                ToolChoice::Specific(n) => json!({"type": "function", "name": n}),
            };
        }
        if let Some(p) = req.parallel_tool_calls {
            body["parallel_tool_calls"] = json!(p);
        }
    }
    let effort = match &req.reasoning {
        Some(ReasoningControl::Effort(e)) => Some(e.clone()),
        Some(ReasoningControl::Budget(b)) => Some(
            match b {
                0..=2048 => "low",
                2049..=8192 => "medium",
                _ => "high",
            }
            .to_owned(),
        ),
        Some(ReasoningControl::Adaptive) => Some("medium".to_owned()),
        None => None,
    };
    if let Some(e) = effort {
        body["reasoning"] = json!({"effort": e, "summary": "auto"});
        body["include"] = json!(["reasoning.encrypted_content"]);
    }
    if let Some(u) = &req.metadata.user_id {
        body["user"] = json!(u);
    }
    if let Some(f) = req.response_format.as_ref().and_then(|f| f.to_flat(true)) {
        let mut f = f;
        if f.get("type") == Some(&json!("json_schema")) && f.get("name").is_none() {
            f["name"] = json!("response");
        }
        body["text"] = json!({"format": f});
    }
    body
}

fn image_url(img: &Image) -> Value {
    json!({"type": "input_image", "image_url": img.to_url()})
}

fn encode_user(parts: &[Part], input: &mut Vec<Value>) {
    let mut own: Vec<Value> = Vec::new();
    for p in parts {
        match p {
            Part::ToolResult(r) => {
                let has_image = r.content.iter().any(|c| matches!(c, Part::Image(_)));
                let mut text = text_of(&r.content);
                if r.is_error {
                    text = format!("Error: {text}");
                }
                let output = if has_image {
                    let mut arr = vec![json!({"type": "input_text", "text": text})];
                    arr.extend(r.content.iter().filter_map(|c| match c {
                        Part::Image(img) => Some(image_url(img)),
                        _ => None,
                    }));
                    Value::Array(arr)
                } else {
                    json!(text)
                };
                input.push(json!({"type": "function_call_output", "call_id": r.tool_call_id, "output": output}));
            }
            Part::Text(t) => own.push(json!({"type": "input_text", "text": t.text})),
            Part::Image(img) => own.push(image_url(img)),
            _ => tracing::debug!("non-user part in a user message dropped"),
        }
    }
    if !own.is_empty() {
        input.push(json!({"type": "message", "role": "user", "content": own}));
    }
}

fn encode_assistant(parts: &[Part], input: &mut Vec<Value>) {
    let mut text = String::new();
    let flush = |text: &mut String, input: &mut Vec<Value>| {
        if !text.is_empty() {
            input.push(json!({"type": "message", "role": "assistant",
                "content": [{"type": "output_text", "text": std::mem::take(text)}]}));
        }
    };
    for p in parts {
        match p {
            Part::Text(t) => text.push_str(&t.text),
            Part::ToolCall(c) => {
                flush(&mut text, input);
                input.push(
                    json!({"type": "function_call", "call_id": c.id, "name": c.name,
                    "arguments": c.arguments}),
                );
            }
            Part::Reasoning {
                text: summary,
                signature: Some(enc),
                origin: ReasoningOrigin::OpenAiResponses,
            } => {
                flush(&mut text, input);
                let summary: Vec<Value> = if summary.is_empty() {
                    Vec::new()
                } else {
                    vec![json!({"type": "summary_text", "text": summary})]
                };
                input.push(
                    json!({"type": "reasoning", "id": format!("rs_{}", ulid::Ulid::generate()),
                    "summary": summary, "encrypted_content": enc}),
                );
            }
            Part::Reasoning { .. } | Part::RedactedReasoning { .. } => {
                tracing::debug!("reasoning another provider produced is not replayed upstream");
            }
            _ => tracing::debug!("non-assistant part in an assistant message dropped"),
        }
    }
    flush(&mut text, input);
}

pub fn usage_from_wire(u: &WireUsage) -> Usage {
    Usage::from_total_input(
        u.input_tokens,
        u.input_tokens_details.and_then(|d| d.cached_tokens),
        u.output_tokens,
        u.output_tokens_details.and_then(|d| d.reasoning_tokens),
    )
}

/// Usage as a Responses client sees it: input includes cached tokens, details always present
/// (Codex reads them).
pub fn usage_to_json(u: &Usage) -> Value {
    let input = u.total_input();
    let output = u.output.unwrap_or(0);
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": u.cache_read.unwrap_or(0)},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": u.reasoning.unwrap_or(0)},
        "total_tokens": input + output,
    })
}

/// A `reasoning` item → canonical reasoning (summary text, `encrypted_content` as signature).
fn reasoning_part(item: &Value) -> Part {
    if let Some(data) = item
        .get("encrypted_content")
        .and_then(Value::as_str)
        .and_then(crate::canonical::redacted_from_client)
    {
        return Part::RedactedReasoning { data };
    }
    let text = item
        .get("summary")
        .and_then(Value::as_array)
        .map(|s| {
            s.iter()
                .map(|p| str_field(p, "text"))
                .collect::<Vec<_>>()
                .join("\n\n")
        })
        .unwrap_or_default();
    let (origin, signature) = match item.get("encrypted_content").and_then(Value::as_str) {
        Some(enc) => {
            let (o, s) = ReasoningOrigin::from_client(Protocol::OpenAiResponses, enc);
            (o, Some(s))
        }
        None => (ReasoningOrigin::OpenAiResponses, None),
    };
    Part::Reasoning {
        text,
        signature,
        origin,
    }
}

/// The `error.message` of a failed response.
pub fn failure_message(resp: &ResponseObject) -> String {
    resp.error
        .as_ref()
        .and_then(|e| e.get("message"))
        .and_then(Value::as_str)
        .unwrap_or("upstream response failed")
        .to_owned()
}

/// Output items → canonical parts (shared with the stream decoder's terminal event).
pub fn output_to_parts(output: &[Value]) -> Vec<Part> {
    let mut content = Vec::new();
    for item in output {
        match item_type(item) {
            "message" => {
                if let Some(parts) = item.get("content").and_then(Value::as_array) {
                    for p in parts {
                        match item_type(p) {
                            "output_text" => {
                                content.push(Part::Text(TextPart::plain(str_field(p, "text"))));
                            }
                            "refusal" => {
                                content.push(Part::Text(TextPart::plain(str_field(p, "refusal"))));
                            }
                            _ => {}
                        }
                    }
                }
            }
            "function_call" => content.push(Part::ToolCall(ToolCall {
                id: str_field(item, "call_id").to_owned(),
                name: str_field(item, "name").to_owned(),
                arguments: str_field(item, "arguments").to_owned(),
                signature: None,
            })),
            "reasoning" => content.push(reasoning_part(item)),
            other => tracing::debug!(item_type = %other, "responses output item dropped"),
        }
    }
    content
}

/// Upstream Responses response → canonical.
pub fn response_to_canonical(resp: ResponseObject) -> Result<Response, ProxyError> {
    let content = output_to_parts(&resp.output);
    let has_calls = content.iter().any(|p| matches!(p, Part::ToolCall(_)));
    let status = resp.status.as_deref().unwrap_or("completed");
    if status == "failed" {
        return Err(ProxyError::Upstream {
            status: 500,
            message: failure_message(&resp),
            retry_after: None,
        });
    }
    let reason = resp
        .incomplete_details
        .as_ref()
        .and_then(|d| d.reason.as_deref());
    Ok(Response {
        id: resp.id,
        model: resp.model,
        content,
        stop: StopReason::from_responses(status, reason, has_calls)?,
        stop_sequence: None,
        usage: resp.usage.as_ref().map(usage_from_wire).unwrap_or_default(),
    })
}

/// Canonical parts → Responses output items; ids derive from `seed` so that a stream's
/// terminal response repeats the ids of the streamed items.
pub fn parts_to_output(parts: &[Part], seed: &str) -> Vec<Value> {
    let mut out = Vec::new();
    let mut text = String::new();
    let flush = |text: &mut String, out: &mut Vec<Value>| {
        if !text.is_empty() {
            let n = out.len();
            out.push(message_item(
                &format!("msg_{seed}_{n}"),
                std::mem::take(text),
                "completed",
            ));
        }
    };
    for p in parts {
        match p {
            Part::Text(t) => text.push_str(&t.text),
            Part::ToolCall(c) => {
                flush(&mut text, &mut out);
                let n = out.len();
                out.push(function_call_item(
                    &format!("fc_{seed}_{n}"),
                    c,
                    "completed",
                ));
            }
            Part::Reasoning {
                text: summary,
                signature,
                origin,
            } => {
                flush(&mut text, &mut out);
                let n = out.len();
                let enc = signature
                    .as_deref()
                    .map(|s| origin.for_client(Protocol::OpenAiResponses, s));
                out.push(reasoning_item(
                    &format!("rs_{seed}_{n}"),
                    summary,
                    enc.as_ref(),
                ));
            }
            Part::RedactedReasoning { data } => {
                flush(&mut text, &mut out);
                let n = out.len();
                let enc = crate::canonical::redacted_for_client(data);
                out.push(reasoning_item(&format!("rs_{seed}_{n}"), "", Some(&enc)));
            }
            _ => {}
        }
    }
    flush(&mut text, &mut out);
    out
}

pub fn message_item(id: &str, text: String, status: &str) -> Value {
    json!({"id": id, "type": "message", "status": status, "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

pub fn function_call_item(id: &str, c: &ToolCall, status: &str) -> Value {
    json!({"id": id, "type": "function_call", "status": status, "call_id": c.id,
        "name": c.name, "arguments": c.arguments})
}

pub fn reasoning_item(id: &str, summary: &str, encrypted: Option<&String>) -> Value {
    let mut v = json!({"id": id, "type": "reasoning", "summary":
        if summary.is_empty() { json!([]) } else { json!([{"type": "summary_text", "text": summary}]) }});
    if let Some(e) = encrypted {
        v["encrypted_content"] = json!(e);
    }
    v
}

/// The full response object a Responses client sees.
pub fn response_object(
    id: &str,
    model: &str,
    output: Vec<Value>,
    stop: Option<StopReason>,
    usage: Option<&Usage>,
) -> Result<Value, ProxyError> {
    let (status, incomplete) = match stop {
        None => ("in_progress", Value::Null),
        Some(s) => {
            let st = s.to_responses()?;
            (
                st.status,
                st.incomplete_reason
                    .map_or(Value::Null, |r| json!({"reason": r})),
            )
        }
    };
    Ok(json!({
        "id": id, "object": "response", "created_at": crate::openai_chat::convert::unix_now(),
        "status": status, "error": null, "incomplete_details": incomplete, "model": model,
        "output": output, "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
        "usage": usage.map_or(Value::Null, usage_to_json),
    }))
}

/// Canonical → Responses client response body.
pub fn canonical_to_response(resp: &Response) -> Result<Value, ProxyError> {
    let seed = resp.id.trim_start_matches("resp_");
    let id = if resp.id.starts_with("resp_") {
        resp.id.clone()
    } else {
        format!("resp_{}", resp.id)
    };
    response_object(
        &id,
        &resp.model,
        parts_to_output(&resp.content, seed),
        Some(resp.stop),
        Some(&resp.usage),
    )
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
