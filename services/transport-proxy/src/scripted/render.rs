//! Rendering a scripted reply in the request's protocol, JSON or SSE, through the proxy's own
//! encoders (see the parent module for why), or verbatim (`raw_json`, `raw_sse`).

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use http::StatusCode;

use super::{Reply, ScriptedUsage};
use crate::canonical::{
    BlockDelta, BlockStart, Part, ReasoningOrigin, Request, StopReason, StreamEvent, TextPart,
    ToolCall, Usage,
};
use crate::error::{ErrorKind, render};
use crate::protocol::{self, Protocol};

/// Reasoning a scripted server of protocol `p` returns is that provider's own.
fn origin_of(p: Protocol) -> ReasoningOrigin {
    match p {
        Protocol::Anthropic => ReasoningOrigin::Anthropic,
        Protocol::OpenAiChat => ReasoningOrigin::OpenAiChat,
        Protocol::OpenAiResponses => ReasoningOrigin::OpenAiResponses,
        Protocol::Gemini => ReasoningOrigin::Gemini,
    }
}

fn canonical_reply(p: Protocol, reply: &Reply) -> (Vec<Part>, StopReason, Usage) {
    let mut parts = Vec::new();
    if let Some(t) = &reply.thinking {
        let origin = origin_of(p);
        parts.push(Part::Reasoning {
            text: t.text.clone(),
            signature: t.signature.clone(),
            origin,
        });
    }
    parts.extend(
        reply
            .redacted_thinking
            .iter()
            .map(|data| Part::RedactedReasoning { data: data.clone() }),
    );
    if let Some(t) = &reply.text {
        parts.push(Part::Text(TextPart::plain(t.clone())));
    }
    for (i, c) in reply.tool_calls.iter().enumerate() {
        let prefix = if p == Protocol::Anthropic {
            "toolu"
        } else {
            "call"
        };
        parts.push(Part::ToolCall(ToolCall {
            id: c
                .id
                .clone()
                .unwrap_or_else(|| format!("{prefix}_{}_{i}", ulid::Ulid::generate())),
            name: c.name.clone(),
            arguments: c.arguments.to_string(),
            signature: c.thought_signature.clone(),
        }));
    }
    let stop = reply
        .stop
        .as_deref()
        .and_then(|s| StopReason::from_anthropic(s).ok())
        .unwrap_or(if reply.tool_calls.is_empty() {
            StopReason::EndTurn
        } else {
            StopReason::ToolUse
        });
    let u = reply.usage.unwrap_or(ScriptedUsage {
        input: Some(100),
        output: Some(10),
        ..ScriptedUsage::default()
    });
    let usage = Usage {
        input: u.input,
        cache_read: u.cache_read,
        cache_write: u.cache_write,
        output: u.output,
        reasoning: u.reasoning,
    };
    (parts, stop, usage)
}

pub(super) fn render_reply(p: Protocol, req: &Request, reply: &Reply) -> Response {
    if let Some(e) = &reply.error {
        let (status, body) = render(
            p,
            ErrorKind::from_status(e.status),
            e.message.as_deref().unwrap_or("scripted error"),
        );
        let mut resp = (
            StatusCode::from_u16(e.status)
                .unwrap_or(StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST)),
            axum::Json(body),
        )
            .into_response();
        if let Some(ra) = e
            .retry_after
            .as_deref()
            .and_then(|v| http::HeaderValue::from_str(v).ok())
        {
            resp.headers_mut().insert(http::header::RETRY_AFTER, ra);
        }
        return resp;
    }
    if let Some(v) = &reply.raw_json {
        return axum::Json(v.clone()).into_response();
    }
    if let Some(frames) = &reply.raw_sse {
        let frames: Vec<Result<Bytes, std::convert::Infallible>> =
            frames.iter().map(|f| Ok(Bytes::from(f.clone()))).collect();
        let stall = reply.stall;
        let stream = futures::stream::iter(frames).chain(futures::stream::unfold(
            stall,
            |stall| async move {
                if stall {
                    std::future::pending::<()>().await;
                }
                None
            },
        ));
        return sse(Body::from_stream(stream));
    }
    let (parts, stop, usage) = canonical_reply(p, reply);
    let id = ulid::Ulid::generate().to_string();
    let model = if req.model.is_empty() {
        "fake-model".to_owned()
    } else {
        req.model.clone()
    };
    if !req.stream {
        let resp = crate::canonical::Response {
            id: match p {
                Protocol::Anthropic => format!("msg_{id}"),
                Protocol::OpenAiChat => format!("chatcmpl-{id}"),
                Protocol::OpenAiResponses => format!("resp_{id}"),
                Protocol::Gemini => id,
            },
            model,
            content: parts,
            stop,
            stop_sequence: None,
            usage,
        };
        return match protocol::encode_response(p, &resp) {
            Ok(v) => axum::Json(v).into_response(),
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        };
    }
    let chunk = reply.chunk_chars.unwrap_or(4).max(1);
    let mut events = vec![StreamEvent::MessageStart {
        id: String::new(),
        model: model.clone(),
        usage: Usage {
            output: Some(1),
            ..usage
        },
    }];
    for (index, part) in parts.iter().enumerate() {
        let (start, deltas): (BlockStart, Vec<BlockDelta>) = match part {
            Part::Reasoning {
                text, signature, ..
            } => {
                let mut d: Vec<BlockDelta> = pieces(text, chunk)
                    .into_iter()
                    .map(BlockDelta::Reasoning)
                    .collect();
                let origin = origin_of(p);
                d.extend(
                    signature
                        .as_deref()
                        .map(|s| BlockDelta::Signature(origin.tag(s))),
                );
                (BlockStart::Reasoning, d)
            }
            Part::RedactedReasoning { data } => (
                BlockStart::RedactedReasoning { data: data.clone() },
                Vec::new(),
            ),
            Part::Text(t) => (
                BlockStart::Text,
                pieces(&t.text, chunk)
                    .into_iter()
                    .map(BlockDelta::Text)
                    .collect(),
            ),
            Part::ToolCall(c) => (
                BlockStart::ToolCall {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    signature: c.signature.clone(),
                },
                pieces(&c.arguments, c.arguments.len().div_ceil(2).max(1))
                    .into_iter()
                    .map(BlockDelta::ToolArguments)
                    .collect(),
            ),
            _ => continue,
        };
        events.push(StreamEvent::BlockStart {
            index,
            block: start,
        });
        events.extend(
            deltas
                .into_iter()
                .map(|delta| StreamEvent::BlockDelta { index, delta }),
        );
        events.push(StreamEvent::BlockStop { index });
    }
    events.push(StreamEvent::Usage(usage));
    events.push(StreamEvent::MessageStop {
        stop,
        stop_sequence: None,
    });
    let mut enc = protocol::stream_encoder(p, &id, model, true);
    let frames: Vec<Result<Bytes, std::convert::Infallible>> = events
        .into_iter()
        .flat_map(|e| enc.on_event(e))
        .map(Ok)
        .collect();
    sse(Body::from_stream(futures::stream::iter(frames)))
}

fn pieces(s: &str, n: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    if chars.is_empty() {
        return Vec::new();
    }
    chars.chunks(n).map(|c| c.iter().collect()).collect()
}

fn sse(body: Body) -> Response {
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    resp
}
