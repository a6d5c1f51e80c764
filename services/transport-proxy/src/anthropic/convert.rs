//! Anthropic Messages ⇄ canonical, non-streaming (requests and responses).
//!
//! Decoding keeps everything the canonical model can hold (system blocks with cache hints,
//! mid-conversation system messages, images inside tool results, thinking with signatures,
//! `disable_parallel_tool_use`, reasoning controls). Encoding towards an Anthropic upstream
//! folds system-role messages into `system` (without the mid-conversation beta the API rejects
//! them, spec §4.3), merges consecutive same-role messages with tool results first, and drops
//! reasoning that another provider produced (its signature would not validate, §10 rule 3).

use serde_json::{Value, json};

use super::{
    Block, Content, ContentBlock, ImageSource, InputMessage, MessagesRequest, MessagesResponse,
    MetadataDef, Role as WireRole, System, TextBlock, ToolChoiceDef, ToolDef, WireUsage,
};
use crate::canonical::{
    Image, Message, Metadata, Part, ReasoningControl, ReasoningOrigin, Request, Response, Role,
    StopReason, TextPart, Tool, ToolCall, ToolChoice, ToolResult, Usage,
};
use crate::error::ProxyError;
use crate::protocol::Protocol;

/// Client request → canonical. Fails with a 400 naming the field for what cannot be translated.
pub fn request_to_canonical(req: MessagesRequest) -> Result<Request, ProxyError> {
    let max_tokens = req
        .max_tokens
        .ok_or_else(|| ProxyError::invalid("max_tokens", "field required"))?;
    let system = match req.system {
        None => Vec::new(),
        Some(System::Text(t)) => vec![TextPart::plain(t)],
        Some(System::Blocks(blocks)) => blocks
            .into_iter()
            .map(|b| TextPart {
                text: b.text,
                cache_control: b.cache_control,
            })
            .collect(),
    };
    let mut messages = Vec::with_capacity(req.messages.len());
    for (i, m) in req.messages.into_iter().enumerate() {
        let role = match m.role {
            WireRole::User => Role::User,
            WireRole::Assistant => Role::Assistant,
            WireRole::System => Role::System,
        };
        let content = content_to_parts(m.content, &format!("messages[{i}].content"))?;
        messages.push(Message { role, content });
    }
    let mut tools = Vec::new();
    for def in req.tools.unwrap_or_default() {
        tools.push(tool_to_canonical(def));
    }
    let (tool_choice, parallel_tool_calls) = match req.tool_choice {
        None => (None, None),
        Some(tc) => {
            let choice = match tc.kind.as_str() {
                "auto" => ToolChoice::Auto,
                "any" => ToolChoice::Required,
                "none" => ToolChoice::None,
                "tool" => ToolChoice::Specific(
                    tc.name
                        .ok_or_else(|| ProxyError::invalid("tool_choice.name", "required"))?,
                ),
                other => {
                    return Err(ProxyError::invalid(
                        "tool_choice.type",
                        format!("unknown tool choice {other}"),
                    ));
                }
            };
            (Some(choice), tc.disable_parallel_tool_use.map(|d| !d))
        }
    };
    let effort = req
        .output_config
        .as_ref()
        .and_then(|c| c.get("effort"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let reasoning = match req
        .thinking
        .as_ref()
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
    {
        Some("enabled") => Some(ReasoningControl::Budget(
            req.thinking
                .as_ref()
                .and_then(|t| t.get("budget_tokens"))
                .and_then(Value::as_u64)
                .unwrap_or(1024),
        )),
        Some("adaptive") => {
            Some(effort.map_or(ReasoningControl::Adaptive, ReasoningControl::Effort))
        }
        _ => effort.map(ReasoningControl::Effort),
    };
    if !req.extra.is_empty() {
        let keys: Vec<&String> = req.extra.keys().collect();
        tracing::debug!(
            ?keys,
            "anthropic fields without canonical equivalent dropped"
        );
    }
    Ok(Request {
        model: req.model,
        system,
        messages,
        max_tokens: Some(max_tokens),
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        stop_sequences: req.stop_sequences.unwrap_or_default(),
        tools,
        tool_choice,
        parallel_tool_calls,
        reasoning,
        metadata: Metadata {
            user_id: req.metadata.and_then(|m| m.user_id),
        },
        stream: req.stream.unwrap_or(false),
        include_usage: true,
        response_format: req
            .output_config
            .as_ref()
            .and_then(|c| c.get("format"))
            .or_else(|| req.extra.get("output_format"))
            .and_then(crate::canonical::ResponseFormat::from_openai),
    })
}

fn tool_to_canonical(def: ToolDef) -> Tool {
    match def.kind.as_deref() {
        None | Some("custom") => Tool::Function {
            name: def.name,
            description: def.description,
            parameters: def
                .input_schema
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        },
        Some(_) => Tool::Hosted(serde_json::to_value(&def).unwrap_or(Value::Null)),
    }
}

fn content_to_parts(content: Content, path: &str) -> Result<Vec<Part>, ProxyError> {
    let blocks = match content {
        Content::Text(t) => return Ok(vec![Part::Text(TextPart::plain(t))]),
        Content::Blocks(b) => b,
    };
    let mut parts = Vec::with_capacity(blocks.len());
    for (j, block) in blocks.into_iter().enumerate() {
        let block = match block {
            ContentBlock::Known(b) => b,
            ContentBlock::Other(v) => {
                let ty = v
                    .get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("?")
                    .to_owned();
                tracing::debug!(block_type = %ty, "content block without canonical equivalent dropped");
                continue;
            }
        };
        parts.push(match block {
            Block::Text {
                text,
                cache_control,
            } => Part::Text(TextPart {
                text,
                cache_control,
            }),
            Block::Image { source, .. } => Part::Image(image_to_canonical(source)),
            Block::ToolUse {
                id, name, input, ..
            } => Part::ToolCall(ToolCall {
                id,
                name,
                arguments: serde_json::to_string(&input).unwrap_or_else(|_| "{}".to_owned()),
                signature: None,
            }),
            Block::ToolResult {
                tool_use_id,
                content,
                is_error,
                ..
            } => {
                let inner = match content {
                    None => Vec::new(),
                    Some(c) => content_to_parts(c, &format!("{path}[{j}].content"))?,
                };
                if let Some(bad) = inner
                    .iter()
                    .find(|p| !matches!(p, Part::Text(_) | Part::Image(_)))
                {
                    return Err(ProxyError::invalid(
                        format!("{path}[{j}].content"),
                        format!(
                            "tool results hold text and images only, got {}",
                            part_name(bad)
                        ),
                    ));
                }
                Part::ToolResult(ToolResult {
                    tool_call_id: tool_use_id,
                    content: inner,
                    is_error: is_error.unwrap_or(false),
                })
            }
            Block::Thinking {
                thinking,
                signature,
            } => {
                let (origin, signature) = match signature {
                    Some(s) => {
                        let (o, s) = ReasoningOrigin::from_client(Protocol::Anthropic, &s);
                        (o, Some(s))
                    }
                    None => (ReasoningOrigin::Anthropic, None),
                };
                Part::Reasoning {
                    text: thinking,
                    signature,
                    origin,
                }
            }
            Block::RedactedThinking { data } => Part::RedactedReasoning { data },
        });
    }
    Ok(parts)
}

fn part_name(p: &Part) -> &'static str {
    match p {
        Part::Text(_) => "text",
        Part::Image(_) => "image",
        Part::ToolCall(_) => "tool_use",
        Part::ToolResult(_) => "tool_result",
        Part::Reasoning { .. } => "thinking",
        Part::RedactedReasoning { .. } => "redacted_thinking",
    }
}

fn image_to_canonical(src: ImageSource) -> Image {
    match src {
        ImageSource::Base64 { media_type, data } => Image::Base64 { media_type, data },
        ImageSource::Url { url } => Image::Url(url),
    }
}

fn image_to_wire(img: &Image) -> ImageSource {
    match img {
        Image::Base64 { media_type, data } => ImageSource::Base64 {
            media_type: media_type.clone(),
            data: data.clone(),
        },
        Image::Url(url) => ImageSource::Url { url: url.clone() },
    }
}

/// Canonical parts → Anthropic blocks. Reasoning from another provider is dropped.
fn parts_to_blocks(parts: &[Part]) -> Vec<ContentBlock> {
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        let block = match p {
            Part::Text(t) => Block::Text {
                text: t.text.clone(),
                cache_control: t.cache_control.clone(),
            },
            Part::Image(img) => Block::Image {
                source: image_to_wire(img),
                cache_control: None,
            },
            Part::ToolCall(c) => Block::ToolUse {
                id: c.id.clone(),
                name: c.name.clone(),
                input: c.arguments_object(),
                cache_control: None,
            },
            Part::ToolResult(r) => Block::ToolResult {
                tool_use_id: r.tool_call_id.clone(),
                content: Some(Content::Blocks(parts_to_blocks(&r.content))),
                is_error: r.is_error.then_some(true),
                cache_control: None,
            },
            Part::Reasoning {
                text,
                signature,
                origin: ReasoningOrigin::Anthropic,
            } => Block::Thinking {
                thinking: text.clone(),
                signature: signature.clone(),
            },
            Part::Reasoning { .. } => {
                tracing::debug!("reasoning from another provider dropped (cannot be verified)");
                continue;
            }
            Part::RedactedReasoning { data } => Block::RedactedThinking { data: data.clone() },
        };
        out.push(ContentBlock::Known(block));
    }
    out
}

/// Canonical → request for an Anthropic upstream (`model` is the route's target model).
pub fn canonical_to_request(
    req: &Request,
    model: &str,
    default_max_tokens: u64,
) -> MessagesRequest {
    let mut system: Vec<TextBlock> = req
        .system
        .iter()
        .map(|t| TextBlock {
            kind: "text".into(),
            text: t.text.clone(),
            cache_control: t.cache_control.clone(),
        })
        .collect();
    let mut messages: Vec<InputMessage> = Vec::new();
    for m in &req.messages {
        let role = match m.role {
            Role::System => {
                for p in &m.content {
                    if let Part::Text(t) = p {
                        system.push(TextBlock {
                            kind: "text".into(),
                            text: t.text.clone(),
                            cache_control: t.cache_control.clone(),
                        });
                    }
                }
                continue;
            }
            Role::User => WireRole::User,
            Role::Assistant => WireRole::Assistant,
        };
        let mut blocks = parts_to_blocks(&m.content);
        if let Some(last) = messages.last_mut()
            && last.role == role
            && let Content::Blocks(prev) = &mut last.content
        {
            prev.append(&mut blocks);
            // Tool results go before any text of the same user message (spec §4.3).
            prev.sort_by_key(|b| !matches!(b, ContentBlock::Known(Block::ToolResult { .. })));
            continue;
        }
        messages.push(InputMessage {
            role,
            content: Content::Blocks(blocks),
        });
    }
    let tools: Vec<ToolDef> = req
        .tools
        .iter()
        .filter_map(|t| match t {
            Tool::Function {
                name,
                description,
                parameters,
            } => Some(ToolDef {
                name: name.clone(),
                kind: None,
                description: description.clone(),
                input_schema: Some(parameters.clone()),
                extra: Default::default(),
            }),
            Tool::Hosted(v) => serde_json::from_value(v.clone()).ok(),
        })
        .collect();
    let disable_parallel = req.parallel_tool_calls.map(|p| !p);
    let tool_choice = match (&req.tool_choice, disable_parallel) {
        (None, None) => None,
        (None, Some(d)) => Some(("auto", None, Some(d))),
        (Some(ToolChoice::Auto), d) => Some(("auto", None, d)),
        (Some(ToolChoice::Required), d) => Some(("any", None, d)),
        (Some(ToolChoice::None), _) => Some(("none", None, None)),
        (Some(ToolChoice::Specific(n)), d) => Some(("tool", Some(n.clone()), d)),
    }
    .filter(|_| !tools.is_empty())
    .map(|(kind, name, d)| ToolChoiceDef {
        kind: kind.to_owned(),
        name,
        disable_parallel_tool_use: d,
    });
    let (thinking, output_config) = match &req.reasoning {
        None => (None, None),
        Some(ReasoningControl::Budget(b)) => {
            (Some(json!({"type": "enabled", "budget_tokens": b})), None)
        }
        Some(ReasoningControl::Adaptive) => (Some(json!({"type": "adaptive"})), None),
        Some(ReasoningControl::Effort(e)) => {
            // No portable thinking budget for an effort level on every Claude model: dropped.
            tracing::debug!(effort = %e, "reasoning effort not forwarded to anthropic upstream");
            (None, None)
        }
    };
    MessagesRequest {
        model: model.to_owned(),
        max_tokens: Some(req.max_tokens.unwrap_or(default_max_tokens)),
        messages,
        system: (!system.is_empty()).then_some(System::Blocks(system)),
        temperature: req.temperature,
        top_p: req.top_p,
        top_k: req.top_k,
        stop_sequences: (!req.stop_sequences.is_empty()).then(|| req.stop_sequences.clone()),
        stream: req.stream.then_some(true),
        tools: (!tools.is_empty()).then_some(tools),
        tool_choice,
        thinking,
        metadata: req.metadata.user_id.clone().map(|u| MetadataDef {
            user_id: Some(u),
            extra: Default::default(),
        }),
        output_config: match req.response_format.as_ref().and_then(|f| f.to_flat(false)) {
            Some(format) => {
                let mut c = output_config.unwrap_or_else(|| json!({}));
                c["format"] = format;
                Some(c)
            }
            None => output_config,
        },
        extra: Default::default(),
    }
}

pub fn usage_from_wire(u: &WireUsage) -> Usage {
    Usage {
        input: u.input_tokens,
        cache_read: u.cache_read_input_tokens,
        cache_write: u.cache_creation_input_tokens,
        output: u.output_tokens,
        reasoning: None,
    }
}

/// Usage as an Anthropic client sees it: both counts always present, cache fields when known.
pub fn usage_to_json(u: &Usage) -> Value {
    let mut v = json!({
        "input_tokens": u.input.unwrap_or(0),
        "output_tokens": u.output.unwrap_or(0),
    });
    if let Some(c) = u.cache_write {
        v["cache_creation_input_tokens"] = json!(c);
    }
    if let Some(c) = u.cache_read {
        v["cache_read_input_tokens"] = json!(c);
    }
    v
}

/// Upstream Anthropic response → canonical.
pub fn response_to_canonical(resp: MessagesResponse) -> Result<Response, ProxyError> {
    let stop = StopReason::from_anthropic(resp.stop_reason.as_deref().unwrap_or("null"))?;
    let content = content_to_parts(Content::Blocks(resp.content), "content")?;
    Ok(Response {
        id: resp.id,
        model: resp.model,
        content,
        stop,
        stop_sequence: resp.stop_sequence,
        usage: usage_from_wire(&resp.usage),
    })
}

/// Canonical → Anthropic client response body.
pub fn canonical_to_response(resp: &Response) -> Result<Value, ProxyError> {
    let stop_reason = resp.stop.to_anthropic()?;
    let content = serde_json::to_value(anthropic_client_blocks(&resp.content)).unwrap_or_default();
    Ok(json!({
        "id": resp.id,
        "type": "message",
        "role": "assistant",
        "model": resp.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": resp.stop_sequence,
        "usage": usage_to_json(&resp.usage),
    }))
}

/// Blocks for an Anthropic *client*: unlike an upstream, a client sees reasoning of any origin
/// as thinking blocks (T4); a foreign signature travels tagged with its origin
/// ([`ReasoningOrigin::for_client`]), so it is replayed only to its own provider.
fn anthropic_client_blocks(parts: &[Part]) -> Vec<ContentBlock> {
    parts
        .iter()
        .flat_map(|p| match p {
            Part::Reasoning {
                text,
                signature,
                origin,
            } if *origin != ReasoningOrigin::Anthropic => {
                vec![ContentBlock::Known(Block::Thinking {
                    thinking: text.clone(),
                    signature: Some(
                        signature
                            .as_deref()
                            .map(|s| origin.for_client(Protocol::Anthropic, s))
                            .unwrap_or_default(),
                    ),
                })]
            }
            other => parts_to_blocks(std::slice::from_ref(other)),
        })
        .collect()
}

#[cfg(test)]
#[path = "convert_tests.rs"]
mod tests;
