//! Gemini ⇄ canonical, non-streaming (requests and responses).
//!
//! The structural differences handled here (spec §4.3, §7, §10):
//! * Gemini function calls carry no usable id (only the name), so ids are synthesised: from a
//!   Gemini upstream as `call_<ulid>` (unique even for two calls of one function, T8), and for
//!   a Gemini client's history deterministically from the position of the call, so the same
//!   history always yields the same ids. A `functionResponse` without an id pairs with the
//!   first unanswered call of that name in the preceding model turn.
//! * Towards a Gemini upstream every `functionCall` part gets its `thoughtSignature` back — from
//!   the canonical call, else from the [`SignatureStore`] by tool-call id (T6) — and every
//!   `functionResponse` gets the function name from the history or the store.
//! * `additionalProperties` and `$schema` are stripped recursively from parameter schemas (the
//!   Gemini API rejects them); system-role messages fold into `systemInstruction`.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::{
    Blob, Content, FileData, FunctionCall, FunctionCallingConfig, FunctionResponse, GPart,
    GenerateRequest, GenerateResponse, GenerationConfig, ThinkingConfig, ToolConfig, UsageMetadata,
};
use crate::canonical::{
    Image, Message, Metadata, Part, ReasoningControl, ReasoningOrigin, Request, Response, Role,
    StopReason, TextPart, Tool, ToolCall, ToolChoice, ToolResult, Usage,
};
use crate::error::ProxyError;
use crate::protocol::Protocol;
use crate::sigstore::SignatureStore;

/// Id for a call a Gemini client sent without one: stable for the same history position.
fn client_call_id(name: &str, content: usize, part: usize) -> String {
    let safe: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("call_{safe}_{content}_{part}")
}

/// Client request → canonical. `model` and `stream` come from the URL.
pub fn request_to_canonical(
    req: GenerateRequest,
    model: String,
    stream: bool,
) -> Result<Request, ProxyError> {
    let system = req
        .system_instruction
        .map(|c| {
            c.parts
                .into_iter()
                .filter_map(|p| p.text.map(TextPart::plain))
                .collect()
        })
        .unwrap_or_default();
    let mut messages: Vec<Message> = Vec::new();
    // calls of the latest model turn not answered yet: (name, id)
    let mut pending: Vec<(String, String)> = Vec::new();
    for (i, c) in req.contents.into_iter().enumerate() {
        let role = match c.role.as_deref() {
            Some("model") => Role::Assistant,
            Some("user" | "function") | None => Role::User,
            Some(other) => {
                return Err(ProxyError::invalid(
                    format!("contents[{i}].role"),
                    format!("unknown role {other}"),
                ));
            }
        };
        if role == Role::Assistant {
            pending.clear();
        }
        let mut parts = Vec::with_capacity(c.parts.len());
        for (j, p) in c.parts.into_iter().enumerate() {
            let path = format!("contents[{i}].parts[{j}]");
            if let Some(fc) = p.function_call {
                let id = fc
                    .id
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| client_call_id(&fc.name, i, j));
                pending.push((fc.name.clone(), id.clone()));
                parts.push(Part::ToolCall(ToolCall {
                    id,
                    name: fc.name,
                    arguments: args_text(&fc.args),
                    signature: p.thought_signature,
                }));
            } else if let Some(fr) = p.function_response {
                let id = match fr.id.filter(|s| !s.is_empty()) {
                    Some(id) => {
                        pending.retain(|(_, pid)| pid != &id);
                        id
                    }
                    None => match pending.iter().position(|(n, _)| n == &fr.name) {
                        Some(k) => pending.remove(k).1,
                        None => {
                            return Err(ProxyError::invalid(
                                format!("{path}.functionResponse.name"),
                                format!("no preceding functionCall named {} to answer", fr.name),
                            ));
                        }
                    },
                };
                parts.push(Part::ToolResult(ToolResult {
                    tool_call_id: id,
                    content: vec![Part::Text(TextPart::plain(response_text(&fr.response)))],
                    is_error: fr.response.get("error").is_some(),
                }));
            } else if let Some(data) = p
                .thought_signature
                .as_deref()
                .filter(|_| p.thought == Some(true))
                .and_then(crate::canonical::redacted_from_client)
            {
                parts.push(Part::RedactedReasoning { data });
            } else if let Some(text) = p.text {
                if p.thought == Some(true) {
                    let (origin, signature) = match p.thought_signature {
                        Some(s) => {
                            let (o, s) = ReasoningOrigin::from_client(Protocol::Gemini, &s);
                            (o, Some(s))
                        }
                        None => (ReasoningOrigin::Gemini, None),
                    };
                    // A streamed thought arrives as several parts, the signature on the last:
                    // one reasoning block again, so a signed text stays whole.
                    match parts.last_mut() {
                        Some(Part::Reasoning {
                            text: prev,
                            signature: prev_sig @ None,
                            origin: prev_origin,
                        }) => {
                            prev.push_str(&text);
                            *prev_sig = signature;
                            *prev_origin = origin;
                        }
                        _ => parts.push(Part::Reasoning {
                            text,
                            signature,
                            origin,
                        }),
                    }
                } else {
                    parts.push(Part::Text(TextPart::plain(text)));
                }
            } else if let Some(b) = p.inline_data {
                parts.push(Part::Image(Image::Base64 {
                    media_type: b.mime_type,
                    data: b.data,
                }));
            } else if let Some(f) = p.file_data {
                parts.push(Part::Image(Image::Url(f.file_uri)));
            } else {
                tracing::debug!(path = %path, "gemini part without canonical equivalent dropped");
            }
        }
        messages.push(Message {
            role,
            content: parts,
        });
    }
    let mut tools = Vec::new();
    for (i, t) in req.tools.unwrap_or_default().into_iter().enumerate() {
        let decls = t
            .get("functionDeclarations")
            .or_else(|| t.get("function_declarations"));
        match decls.and_then(Value::as_array) {
            Some(decls) => {
                for (k, d) in decls.iter().enumerate() {
                    let name = d.get("name").and_then(Value::as_str).ok_or_else(|| {
                        ProxyError::invalid(
                            format!("tools[{i}].functionDeclarations[{k}].name"),
                            "required",
                        )
                    })?;
                    tools.push(Tool::Function {
                        name: name.to_owned(),
                        description: d
                            .get("description")
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        parameters: d
                            .get("parametersJsonSchema")
                            .or_else(|| d.get("parameters"))
                            .cloned()
                            .map(lower_types)
                            .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                    });
                }
            }
            None => tools.push(Tool::Hosted(t)),
        }
    }
    let fcc = req.tool_config.and_then(|c| c.function_calling_config);
    let tool_choice = match fcc.as_ref().and_then(|c| c.mode.as_deref()) {
        None => None,
        Some("AUTO" | "MODE_UNSPECIFIED" | "VALIDATED") => Some(ToolChoice::Auto),
        Some("NONE") => Some(ToolChoice::None),
        Some("ANY") => match fcc
            .as_ref()
            .and_then(|c| c.allowed_function_names.as_deref())
        {
            Some([one]) => Some(ToolChoice::Specific(one.clone())),
            _ => Some(ToolChoice::Required),
        },
        Some(other) => {
            return Err(ProxyError::invalid(
                "toolConfig.functionCallingConfig.mode",
                format!("unknown mode {other}"),
            ));
        }
    };
    let gc = req.generation_config.unwrap_or_default();
    let reasoning = gc.thinking_config.as_ref().and_then(|t| {
        match (t.thinking_budget, t.thinking_level.as_deref()) {
            (Some(b), _) if b > 0 => Some(ReasoningControl::Budget(b.unsigned_abs())),
            (Some(-1), _) => Some(ReasoningControl::Adaptive),
            (_, Some(level)) => Some(ReasoningControl::Effort(level.to_ascii_lowercase())),
            _ => None,
        }
    });
    if !gc.extra.is_empty() || !req.extra.is_empty() {
        tracing::debug!("gemini fields without canonical equivalent dropped");
    }
    let json_mode =
        gc.extra.get("responseMimeType").and_then(Value::as_str) == Some("application/json");
    let response_format = json_mode.then(|| {
        match gc
            .extra
            .get("responseJsonSchema")
            .or_else(|| gc.extra.get("responseSchema"))
        {
            Some(schema) => crate::canonical::ResponseFormat::JsonSchema {
                name: None,
                schema: lower_types(schema.clone()),
                strict: None,
            },
            None => crate::canonical::ResponseFormat::JsonObject,
        }
    });
    Ok(Request {
        model,
        system,
        messages,
        max_tokens: gc.max_output_tokens,
        temperature: gc.temperature,
        top_p: gc.top_p,
        top_k: gc.top_k,
        stop_sequences: gc.stop_sequences.unwrap_or_default(),
        tools,
        tool_choice,
        parallel_tool_calls: None,
        reasoning,
        metadata: Metadata::default(),
        stream,
        include_usage: true,
        response_format,
    })
}

/// Gemini `parameters` use OpenAPI upper-case types (`"OBJECT"`); JSON Schema wants lower case.
fn lower_types(mut v: Value) -> Value {
    match &mut v {
        Value::Object(m) => {
            for (k, x) in m.iter_mut() {
                if k == "type"
                    && let Value::String(s) = x
                {
                    *s = s.to_ascii_lowercase();
                } else {
                    *x = lower_types(std::mem::take(x));
                }
            }
        }
        Value::Array(a) => {
            for x in a.iter_mut() {
                *x = lower_types(std::mem::take(x));
            }
        }
        _ => {}
    }
    v
}

fn args_text(args: &Value) -> String {
    match args {
        Value::Null => "{}".to_owned(),
        other => other.to_string(),
    }
}

/// A function response as text: a lone string member (`{"output": "…"}`) is unwrapped.
fn response_text(resp: &Value) -> String {
    match resp {
        Value::Object(m) if m.len() == 1 => match m.values().next() {
            Some(Value::String(s)) => s.clone(),
            _ => resp.to_string(),
        },
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Removes `additionalProperties` and `$schema` at every depth (spec §4.3).
pub fn strip_schema(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| k.as_str() != "additionalProperties" && k.as_str() != "$schema")
                .map(|(k, x)| (k.clone(), strip_schema(x)))
                .collect::<Map<String, Value>>(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_schema).collect()),
        other => other.clone(),
    }
}

fn mime_for_url(url: &str) -> String {
    let lower = url.to_ascii_lowercase();
    let ext = lower.rsplit('.').next().unwrap_or("");
    match ext {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        _ => "application/octet-stream",
    }
    .to_owned()
}

fn image_part(img: &Image) -> GPart {
    match img {
        Image::Base64 { media_type, data } => GPart {
            inline_data: Some(Blob {
                mime_type: media_type.clone(),
                data: data.clone(),
            }),
            ..GPart::default()
        },
        Image::Url(u) => GPart {
            file_data: Some(FileData {
                mime_type: mime_for_url(u),
                file_uri: u.clone(),
            }),
            ..GPart::default()
        },
    }
}

fn text_part(text: &str) -> GPart {
    GPart {
        text: Some(text.to_owned()),
        ..GPart::default()
    }
}

/// Canonical → request body for a Gemini upstream (the model goes in the URL).
pub fn canonical_to_request(req: &Request, store: &SignatureStore) -> GenerateRequest {
    let mut system: Vec<GPart> = req.system.iter().map(|t| text_part(&t.text)).collect();
    let names: HashMap<&str, &str> = req
        .messages
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|p| match p {
            Part::ToolCall(c) => Some((c.id.as_str(), c.name.as_str())),
            _ => None,
        })
        .collect();
    let mut contents: Vec<Content> = Vec::new();
    for m in &req.messages {
        let role = match m.role {
            Role::System => {
                system.extend(m.content.iter().filter_map(|p| match p {
                    Part::Text(t) => Some(text_part(&t.text)),
                    _ => None,
                }));
                continue;
            }
            Role::User => "user",
            Role::Assistant => "model",
        };
        let mut parts = Vec::new();
        let mut trailing_images = Vec::new();
        for p in &m.content {
            match p {
                Part::Text(t) => parts.push(text_part(&t.text)),
                Part::Image(img) => parts.push(image_part(img)),
                Part::ToolCall(c) => {
                    let stored = store.get(&c.id);
                    let signature = c
                        .signature
                        .clone()
                        .or_else(|| stored.and_then(|s| s.signature));
                    parts.push(GPart {
                        function_call: Some(FunctionCall {
                            id: None,
                            name: c.name.clone(),
                            args: c.arguments_object(),
                        }),
                        thought_signature: signature,
                        ..GPart::default()
                    });
                }
                Part::ToolResult(r) => {
                    let name = names
                        .get(r.tool_call_id.as_str())
                        .map(|n| (*n).to_owned())
                        .or_else(|| store.get(&r.tool_call_id).map(|s| s.name))
                        .unwrap_or_else(|| r.tool_call_id.clone());
                    let text: Vec<&str> = r
                        .content
                        .iter()
                        .filter_map(|c| match c {
                            Part::Text(t) => Some(t.text.as_str()),
                            _ => None,
                        })
                        .collect();
                    let key = if r.is_error { "error" } else { "content" };
                    parts.push(GPart {
                        function_response: Some(FunctionResponse {
                            id: None,
                            name,
                            response: json!({ key: text.join("\n") }),
                        }),
                        ..GPart::default()
                    });
                    let images: Vec<&Image> = r
                        .content
                        .iter()
                        .filter_map(|c| match c {
                            Part::Image(i) => Some(i),
                            _ => None,
                        })
                        .collect();
                    if !images.is_empty() {
                        trailing_images.push(text_part(&format!(
                            "[image(s) from tool result {}]",
                            r.tool_call_id
                        )));
                        trailing_images.extend(images.into_iter().map(image_part));
                    }
                }
                Part::Reasoning {
                    text,
                    signature,
                    origin: ReasoningOrigin::Gemini,
                } => parts.push(GPart {
                    text: Some(text.clone()),
                    thought: Some(true),
                    thought_signature: signature.clone(),
                    ..GPart::default()
                }),
                Part::Reasoning { .. } | Part::RedactedReasoning { .. } => {
                    tracing::debug!("reasoning another provider produced is not replayed upstream");
                }
            }
        }
        parts.extend(trailing_images);
        if parts.is_empty() {
            continue;
        }
        match contents.last_mut() {
            Some(last) if last.role.as_deref() == Some(role) => last.parts.extend(parts),
            _ => contents.push(Content {
                role: Some(role.to_owned()),
                parts,
            }),
        }
    }
    let decls: Vec<Value> = req
        .tools
        .iter()
        .filter_map(|t| match t {
            Tool::Function {
                name,
                description,
                parameters,
            } => {
                let mut d = json!({"name": name, "parameters": strip_schema(parameters)});
                if let Some(desc) = description {
                    d["description"] = json!(desc);
                }
                Some(d)
            }
            Tool::Hosted(v) => {
                tracing::debug!(tool = %v, "hosted tool cannot run on a gemini upstream, dropped");
                None
            }
        })
        .collect();
    let has_tools = !decls.is_empty();
    let tool_config = req.tool_choice.as_ref().filter(|_| has_tools).map(|c| {
        let (mode, names) = match c {
            ToolChoice::Auto => ("AUTO", None),
            ToolChoice::Required => ("ANY", None),
            ToolChoice::None => ("NONE", None),
            ToolChoice::Specific(n) => ("ANY", Some(vec![n.clone()])),
        };
        ToolConfig {
            function_calling_config: Some(FunctionCallingConfig {
                mode: Some(mode.to_owned()),
                allowed_function_names: names,
            }),
        }
    });
    let thinking_config = req.reasoning.as_ref().map(|r| match r {
        ReasoningControl::Budget(b) => ThinkingConfig {
            thinking_budget: i64::try_from(*b).ok(),
            include_thoughts: Some(true),
            thinking_level: None,
        },
        ReasoningControl::Adaptive => ThinkingConfig {
            thinking_budget: Some(-1),
            include_thoughts: Some(true),
            thinking_level: None,
        },
        ReasoningControl::Effort(e) => ThinkingConfig {
            thinking_budget: Some(match e.as_str() {
                "minimal" | "low" => 1024,
                "medium" => 8192,
                _ => 24576,
            }),
            include_thoughts: Some(true),
            thinking_level: None,
        },
    });
    GenerateRequest {
        contents,
        system_instruction: (!system.is_empty()).then_some(Content {
            role: None,
            parts: system,
        }),
        tools: has_tools.then(|| vec![json!({"functionDeclarations": decls})]),
        tool_config,
        generation_config: Some(GenerationConfig {
            max_output_tokens: req.max_tokens,
            temperature: req.temperature,
            top_p: req.top_p,
            top_k: req.top_k,
            stop_sequences: (!req.stop_sequences.is_empty()).then(|| req.stop_sequences.clone()),
            thinking_config,
            extra: match &req.response_format {
                None => Map::new(),
                Some(f) => {
                    let mut m = Map::new();
                    m.insert("responseMimeType".into(), json!("application/json"));
                    if let crate::canonical::ResponseFormat::JsonSchema { schema, .. } = f {
                        m.insert("responseJsonSchema".into(), schema.clone());
                    }
                    m
                }
            },
        }),
        extra: Map::new(),
    }
}

pub fn usage_from_wire(u: &UsageMetadata) -> Usage {
    let output = match (u.candidates_token_count, u.thoughts_token_count) {
        (None, None) => None,
        (c, t) => Some(c.unwrap_or(0) + t.unwrap_or(0)),
    };
    Usage::from_total_input(
        u.prompt_token_count,
        u.cached_content_token_count,
        output,
        u.thoughts_token_count,
    )
}

pub fn usage_to_json(u: &Usage) -> Value {
    let prompt = u.total_input();
    let output = u.output.unwrap_or(0);
    let thoughts = u.reasoning.unwrap_or(0);
    let mut v = json!({
        "promptTokenCount": prompt,
        "candidatesTokenCount": output.saturating_sub(thoughts),
        "totalTokenCount": prompt + output,
    });
    if let Some(c) = u.cache_read {
        v["cachedContentTokenCount"] = json!(c);
    }
    if thoughts > 0 {
        v["thoughtsTokenCount"] = json!(thoughts);
    }
    v
}

/// A Gemini upstream's parts → canonical parts; calls get fresh ids and are remembered.
pub fn parts_from_upstream(parts: Vec<GPart>, store: &SignatureStore) -> Vec<Part> {
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        if let Some(fc) = p.function_call {
            let id = fc
                .id
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| format!("call_{}", ulid::Ulid::generate()));
            store.put(&id, &fc.name, p.thought_signature.as_deref());
            out.push(Part::ToolCall(ToolCall {
                id,
                name: fc.name,
                arguments: args_text(&fc.args),
                signature: p.thought_signature,
            }));
        } else if let Some(text) = p.text {
            if p.thought == Some(true) {
                out.push(Part::Reasoning {
                    text,
                    signature: p.thought_signature,
                    origin: ReasoningOrigin::Gemini,
                });
            } else if !text.is_empty() {
                out.push(Part::Text(TextPart::plain(text)));
            }
        }
    }
    out
}

/// Upstream Gemini response → canonical.
pub fn response_to_canonical(
    resp: GenerateResponse,
    store: &SignatureStore,
) -> Result<Response, ProxyError> {
    let usage = resp
        .usage_metadata
        .as_ref()
        .map(usage_from_wire)
        .unwrap_or_default();
    let id = resp
        .response_id
        .unwrap_or_else(|| ulid::Ulid::generate().to_string());
    let model = resp.model_version.unwrap_or_default();
    let Some(cand) = resp.candidates.into_iter().next() else {
        if resp.prompt_feedback.is_some() {
            return Ok(Response {
                id,
                model,
                content: Vec::new(),
                stop: StopReason::Refusal,
                stop_sequence: None,
                usage,
            });
        }
        return Err(ProxyError::UpstreamProtocol(
            "response has no candidates".into(),
        ));
    };
    let content = parts_from_upstream(cand.content.map(|c| c.parts).unwrap_or_default(), store);
    let has_calls = content.iter().any(|p| matches!(p, Part::ToolCall(_)));
    let stop = StopReason::from_gemini(cand.finish_reason.as_deref().unwrap_or("null"), has_calls)?;
    Ok(Response {
        id,
        model,
        content,
        stop,
        stop_sequence: None,
        usage,
    })
}

/// One canonical part as a Gemini client part (`None` when it has no Gemini form).
pub fn client_part(p: &Part) -> Option<Value> {
    Some(match p {
        Part::Text(t) => json!({"text": t.text}),
        Part::Reasoning {
            text,
            signature,
            origin,
        } => {
            let mut v = json!({"text": text, "thought": true});
            if let Some(s) = signature {
                v["thoughtSignature"] = json!(origin.for_client(Protocol::Gemini, s));
            }
            v
        }
        Part::RedactedReasoning { data } => json!({"text": "", "thought": true,
            "thoughtSignature": crate::canonical::redacted_for_client(data)}),
        Part::ToolCall(c) => {
            let mut v =
                json!({"functionCall": {"id": c.id, "name": c.name, "args": c.arguments_object()}});
            if let Some(s) = &c.signature {
                v["thoughtSignature"] = json!(s);
            }
            v
        }
        _ => return None,
    })
}

/// Canonical → Gemini client response body.
pub fn canonical_to_response(resp: &Response) -> Result<Value, ProxyError> {
    let finish = resp.stop.to_gemini()?;
    let parts: Vec<Value> = resp.content.iter().filter_map(client_part).collect();
    Ok(json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
        "usageMetadata": usage_to_json(&resp.usage),
        "modelVersion": resp.model,
        "responseId": resp.id,
    }))
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
