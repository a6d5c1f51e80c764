//! OpenAI Chat Completions ⇄ canonical, non-streaming (requests and responses).
//!
//! The structural differences handled here (spec §4.3, §8, §9):
//! * Chat has one `role:"tool"` message per result; canonical groups consecutive results in one
//!   user message, as Anthropic does.
//! * Chat tool messages carry text only, so images inside a tool result travel in a user message
//!   right after the tool messages, each preceded by a text marker naming the call — never
//!   dropped (T24). Text that shared a user message with tool results is kept (Q7).
//! * Reasoning in history is never replayed as visible `content` (T2): Chat has no standard
//!   field for it, so it is dropped towards a Chat upstream. Reasoning an upstream *returns*
//!   (`reasoning_content` / `reasoning`) becomes a canonical reasoning part (T4). Towards a
//!   Chat *client*, opaque reasoning of other providers (signatures, `redacted_thinking`) also
//!   travels in `reasoning_details` and comes back from it ([`super::reasoning_details`]).

use serde_json::{Value, json};

use super::reasoning_details;
use super::{
    ChatContent, ChatMessage, ChatPart, ChatRequest, ChatResponse, ChatTool, ChatToolCall,
    ChatUsage, FunctionCall, FunctionDef, ImageUrl, Stop, StreamOptions,
};
use crate::canonical::{
    Image, Message, Metadata, Part, ReasoningControl, ReasoningOrigin, Request, Response, Role,
    StopReason, TextPart, Tool, ToolCall, ToolChoice, ToolResult, Usage,
};
use crate::error::ProxyError;

/// Client request → canonical. Fails with a 400 naming the field.
pub fn request_to_canonical(req: ChatRequest) -> Result<Request, ProxyError> {
    let mut system = Vec::new();
    let mut messages: Vec<Message> = Vec::new();
    for (i, m) in req.messages.into_iter().enumerate() {
        let path = format!("messages[{i}]");
        match m.role.as_str() {
            "system" | "developer" => {
                let text = content_text(m.content);
                if messages.is_empty() {
                    system.push(TextPart::plain(text));
                } else {
                    messages.push(Message {
                        role: Role::System,
                        content: vec![text_part(text)],
                    });
                }
            }
            "user" => {
                let content = content_parts(m.content);
                messages.push(Message {
                    role: Role::User,
                    content,
                });
            }
            "assistant" => {
                // Opaque reasoning this proxy handed out (signatures, redacted thinking) comes
                // back in `reasoning_details`; its text repeats `reasoning_content`.
                let (mut content, details_text) =
                    reasoning_details::from_client(m.reasoning_details.as_deref().unwrap_or(&[]));
                if let Some(r) = m
                    .reasoning_content
                    .or(m.reasoning)
                    .filter(|r| !r.is_empty() && !details_text)
                {
                    content.push(Part::Reasoning {
                        text: r,
                        signature: None,
                        origin: ReasoningOrigin::OpenAiChat,
                    });
                }
                content.extend(content_parts(m.content));
                for c in m.tool_calls.unwrap_or_default() {
                    content.push(Part::ToolCall(ToolCall {
                        id: c.id,
                        name: c.function.name,
                        arguments: c.function.arguments,
                        signature: None,
                    }));
                }
                messages.push(Message {
                    role: Role::Assistant,
                    content,
                });
            }
            "tool" => {
                let id = m.tool_call_id.ok_or_else(|| {
                    ProxyError::invalid(format!("{path}.tool_call_id"), "required")
                })?;
                let result = Part::ToolResult(ToolResult {
                    tool_call_id: id,
                    content: content_parts(m.content),
                    is_error: false,
                });
                match messages.last_mut() {
                    Some(last)
                        if last.role == Role::User
                            && last
                                .content
                                .iter()
                                .all(|p| matches!(p, Part::ToolResult(_))) =>
                    {
                        last.content.push(result);
                    }
                    _ => messages.push(Message {
                        role: Role::User,
                        content: vec![result],
                    }),
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
    let mut tools = Vec::new();
    for (i, t) in req.tools.unwrap_or_default().into_iter().enumerate() {
        match (t.kind.as_str(), t.function) {
            ("function", Some(f)) => tools.push(Tool::Function {
                name: f.name,
                description: f.description,
                parameters: f
                    .parameters
                    .unwrap_or_else(|| json!({"type":"object","properties":{}})),
            }),
            ("function", None) => {
                return Err(ProxyError::invalid(
                    format!("tools[{i}].function"),
                    "required",
                ));
            }
            (other, _) => tracing::debug!(tool_type = %other, "non-function chat tool dropped"),
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
        Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(name) => Some(ToolChoice::Specific(name.to_owned())),
            None => return Err(ProxyError::invalid("tool_choice.function.name", "required")),
        },
    };
    let stop_sequences = match req.stop {
        None => Vec::new(),
        Some(Stop::One(s)) => vec![s],
        Some(Stop::Many(v)) => v,
    };
    if !req.extra.is_empty() {
        let keys: Vec<&String> = req.extra.keys().collect();
        tracing::debug!(?keys, "chat fields without canonical equivalent dropped");
    }
    Ok(Request {
        model: req.model,
        system,
        messages,
        max_tokens: req.max_completion_tokens.or(req.max_tokens),
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: None,
        stop_sequences,
        tools,
        tool_choice,
        parallel_tool_calls: req.parallel_tool_calls,
        reasoning: req.reasoning_effort.map(ReasoningControl::Effort),
        metadata: Metadata { user_id: req.user },
        stream: req.stream.unwrap_or(false),
        include_usage: req
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        response_format: req
            .response_format
            .as_ref()
            .and_then(crate::canonical::ResponseFormat::from_openai),
    })
}

fn text_part(text: String) -> Part {
    Part::Text(TextPart::plain(text))
}

fn content_text(c: Option<ChatContent>) -> String {
    match c {
        None => String::new(),
        Some(ChatContent::Text(t)) => t,
        Some(ChatContent::Parts(parts)) => parts
            .into_iter()
            .filter_map(|p| match p {
                ChatPart::Text { text } => Some(text),
                ChatPart::ImageUrl { .. } => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
    }
}

fn content_parts(c: Option<ChatContent>) -> Vec<Part> {
    match c {
        None => Vec::new(),
        Some(ChatContent::Text(t)) if t.is_empty() => Vec::new(),
        Some(ChatContent::Text(t)) => vec![text_part(t)],
        Some(ChatContent::Parts(parts)) => parts
            .into_iter()
            .map(|p| match p {
                ChatPart::Text { text } => text_part(text),
                ChatPart::ImageUrl { image_url } => Part::Image(Image::from_url(&image_url.url)),
            })
            .collect(),
    }
}

fn image_part(img: &Image) -> ChatPart {
    ChatPart::ImageUrl {
        image_url: ImageUrl {
            url: img.to_url(),
            detail: None,
        },
    }
}

fn message(role: &str, content: Option<ChatContent>) -> ChatMessage {
    ChatMessage {
        role: role.to_owned(),
        content,
        ..ChatMessage::default()
    }
}

/// `reasoning_effort` for a budget or effort (spec §4.3 last row).
fn effort_for(control: &ReasoningControl) -> Option<String> {
    match control {
        ReasoningControl::Budget(b) if *b <= 2048 => Some("low".into()),
        ReasoningControl::Budget(b) if *b <= 8192 => Some("medium".into()),
        ReasoningControl::Budget(_) => Some("high".into()),
        ReasoningControl::Adaptive => None,
        ReasoningControl::Effort(e) => Some(match e.as_str() {
            "minimal" | "low" | "medium" | "high" => e.clone(),
            _ => "high".into(),
        }),
    }
}

/// Canonical → request for a Chat upstream. `forward_reasoning` decides whether a reasoning
/// control becomes `reasoning_effort` (non-reasoning models reject the field).
pub fn canonical_to_request(req: &Request, model: &str, forward_reasoning: bool) -> ChatRequest {
    let mut out: Vec<ChatMessage> = Vec::new();
    if !req.system.is_empty() {
        let text: Vec<&str> = req.system.iter().map(|t| t.text.as_str()).collect();
        out.push(message(
            "system",
            Some(ChatContent::Text(text.join("\n\n"))),
        ));
    }
    for m in &req.messages {
        match m.role {
            Role::System => {
                let text: Vec<&str> = m
                    .content
                    .iter()
                    .filter_map(|p| {
                        if let Part::Text(t) = p {
                            Some(t.text.as_str())
                        } else {
                            None
                        }
                    })
                    .collect();
                out.push(message(
                    "system",
                    Some(ChatContent::Text(text.join("\n\n"))),
                ));
            }
            Role::User => encode_user(&m.content, &mut out),
            Role::Assistant => out.push(encode_assistant(&m.content)),
        }
    }
    let tools: Vec<ChatTool> = req
        .tools
        .iter()
        .filter_map(|t| match t {
            Tool::Function {
                name,
                description,
                parameters,
            } => Some(ChatTool {
                kind: "function".into(),
                function: Some(FunctionDef {
                    name: name.clone(),
                    description: description.clone(),
                    parameters: Some(parameters.clone()),
                }),
            }),
            Tool::Hosted(v) => {
                tracing::debug!(tool = %v, "hosted tool cannot run on a chat upstream, dropped");
                None
            }
        })
        .collect();
    let has_tools = !tools.is_empty();
    let tool_choice = req
        .tool_choice
        .as_ref()
        .filter(|_| has_tools)
        .map(|c| match c {
            ToolChoice::Auto => json!("auto"),
            ToolChoice::Required => json!("required"),
            ToolChoice::None => json!("none"),
            ToolChoice::Specific(n) => json!({"type": "function", "function": {"name": n}}),
        });
    ChatRequest {
        model: model.to_owned(),
        messages: out,
        max_tokens: req.max_tokens,
        temperature: req.temperature,
        top_p: req.top_p,
        stop: (!req.stop_sequences.is_empty()).then(|| Stop::Many(req.stop_sequences.clone())),
        stream: req.stream.then_some(true),
        // Usage arrives in Chat streams only when asked for (spec §12 rule 2).
        stream_options: req.stream.then_some(StreamOptions {
            include_usage: Some(true),
        }),
        tools: has_tools.then_some(tools),
        tool_choice,
        parallel_tool_calls: req.parallel_tool_calls.filter(|_| has_tools),
        reasoning_effort: req
            .reasoning
            .as_ref()
            .filter(|_| forward_reasoning)
            .and_then(effort_for),
        response_format: req.response_format.as_ref().map(|f| match f {
            crate::canonical::ResponseFormat::JsonObject => json!({"type": "json_object"}),
            crate::canonical::ResponseFormat::JsonSchema {
                name,
                schema,
                strict,
            } => {
                let mut js =
                    json!({"name": name.as_deref().unwrap_or("response"), "schema": schema});
                if let Some(s) = strict {
                    js["strict"] = json!(s);
                }
                json!({"type": "json_schema", "json_schema": js})
            }
        }),
        ..ChatRequest::default()
    }
}

fn encode_user(parts: &[Part], out: &mut Vec<ChatMessage>) {
    let mut follow: Vec<ChatPart> = Vec::new();
    let mut own: Vec<ChatPart> = Vec::new();
    for p in parts {
        match p {
            Part::ToolResult(r) => {
                let mut texts = Vec::new();
                let images: Vec<&Image> = r
                    .content
                    .iter()
                    .filter_map(|c| match c {
                        Part::Text(t) => {
                            texts.push(t.text.as_str());
                            None
                        }
                        Part::Image(img) => Some(img),
                        _ => None,
                    })
                    .collect();
                let mut text = texts.join("\n");
                if r.is_error {
                    text = format!("Error: {text}");
                }
                if !images.is_empty() {
                    follow.push(ChatPart::Text {
                        text: format!("[image(s) from tool result {}]", r.tool_call_id),
                    });
                    follow.extend(images.into_iter().map(image_part));
                }
                out.push(ChatMessage {
                    role: "tool".into(),
                    content: Some(ChatContent::Text(text)),
                    tool_call_id: Some(r.tool_call_id.clone()),
                    ..ChatMessage::default()
                });
            }
            Part::Text(t) => own.push(ChatPart::Text {
                text: t.text.clone(),
            }),
            Part::Image(img) => own.push(image_part(img)),
            _ => tracing::debug!("non-user part in a user message dropped"),
        }
    }
    follow.extend(own);
    if follow.is_empty() {
        return;
    }
    let content = match follow.as_slice() {
        [ChatPart::Text { text }] => ChatContent::Text(text.clone()),
        _ => ChatContent::Parts(follow),
    };
    out.push(message("user", Some(content)));
}

fn encode_assistant(parts: &[Part]) -> ChatMessage {
    let mut text = String::new();
    let mut calls = Vec::new();
    for p in parts {
        match p {
            Part::Text(t) => text.push_str(&t.text),
            Part::ToolCall(c) => calls.push(ChatToolCall {
                id: c.id.clone(),
                kind: "function".into(),
                function: FunctionCall {
                    name: c.name.clone(),
                    arguments: c.arguments.clone(),
                },
            }),
            Part::Reasoning { .. } | Part::RedactedReasoning { .. } => {
                tracing::debug!("reasoning in history not replayed to a chat upstream");
            }
            _ => tracing::debug!("non-assistant part in an assistant message dropped"),
        }
    }
    ChatMessage {
        role: "assistant".into(),
        content: (!text.is_empty()).then_some(ChatContent::Text(text)),
        tool_calls: (!calls.is_empty()).then_some(calls),
        ..ChatMessage::default()
    }
}

pub fn usage_from_wire(u: &ChatUsage) -> Usage {
    Usage::from_total_input(
        u.prompt_tokens,
        u.prompt_tokens_details.and_then(|d| d.cached_tokens),
        u.completion_tokens,
        u.completion_tokens_details.and_then(|d| d.reasoning_tokens),
    )
}

/// Usage as a Chat client sees it: prompt includes cached tokens, which are also itemised.
pub fn usage_to_json(u: &Usage) -> Value {
    let prompt = u.total_input();
    let completion = u.output.unwrap_or(0);
    let mut v = json!({
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    });
    if let Some(c) = u.cache_read {
        v["prompt_tokens_details"] = json!({ "cached_tokens": c });
    }
    if let Some(r) = u.reasoning {
        v["completion_tokens_details"] = json!({ "reasoning_tokens": r });
    }
    v
}

/// Upstream Chat response → canonical.
pub fn response_to_canonical(resp: ChatResponse) -> Result<Response, ProxyError> {
    let choice = resp
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| ProxyError::UpstreamProtocol("response has no choices".into()))?;
    let m = choice.message;
    let mut content = Vec::new();
    if let Some(r) = m
        .reasoning_content
        .or(m.reasoning)
        .filter(|r| !r.is_empty())
    {
        content.push(Part::Reasoning {
            text: r,
            signature: None,
            origin: ReasoningOrigin::OpenAiChat,
        });
    }
    content.extend(content_parts(m.content));
    let calls = m.tool_calls.unwrap_or_default();
    let has_calls = !calls.is_empty();
    for c in calls {
        content.push(Part::ToolCall(ToolCall {
            id: c.id,
            name: c.function.name,
            arguments: c.function.arguments,
            signature: None,
        }));
    }
    Ok(Response {
        id: resp.id,
        model: resp.model,
        content,
        stop: StopReason::from_chat(choice.finish_reason.as_deref(), has_calls)?,
        stop_sequence: None,
        usage: resp.usage.as_ref().map(usage_from_wire).unwrap_or_default(),
    })
}

/// Seconds since the epoch for `created`.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Canonical → Chat client response body.
pub fn canonical_to_response(resp: &Response) -> Result<Value, ProxyError> {
    let finish = resp.stop.to_chat()?;
    let mut text = String::new();
    let mut reasoning = String::new();
    let mut calls = Vec::new();
    for p in &resp.content {
        match p {
            Part::Text(t) => text.push_str(&t.text),
            Part::Reasoning { text: r, .. } => reasoning.push_str(r),
            Part::ToolCall(c) => calls.push(json!({
                "id": c.id,
                "type": "function",
                "function": { "name": c.name, "arguments": c.arguments },
            })),
            _ => {}
        }
    }
    let mut message = json!({
        "role": "assistant",
        "content": if text.is_empty() { Value::Null } else { Value::String(text) },
    });
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    if !reasoning.is_empty() {
        message["reasoning_content"] = Value::String(reasoning);
    }
    if let Some(details) = reasoning_details::to_client(&resp.content) {
        message["reasoning_details"] = Value::Array(details);
    }
    Ok(json!({
        "id": resp.id,
        "object": "chat.completion",
        "created": unix_now(),
        "model": resp.model,
        "choices": [{ "index": 0, "message": message, "finish_reason": finish, "logprobs": null }],
        "usage": usage_to_json(&resp.usage),
    }))
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
