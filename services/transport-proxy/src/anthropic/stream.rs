//! Anthropic stream state machines, one per direction (spec §6.1, §8, §12).
//!
//! [`AnthropicEncoder`] writes the client stream. Anthropic requires blocks strictly in
//! sequence, while a Chat upstream interleaves parallel tool calls by index; the encoder keeps
//! one *active* block and buffers the starts, deltas and stops of the others in start order,
//! emitting each buffered block completely when the active one closes. It never merges calls,
//! never routes a fragment to another block, and always writes `message_start` first (T11, T13).
//!
//! [`AnthropicDecoder`] reads an Anthropic upstream: usage from `message_start` and
//! `message_delta` is merged with set semantics (T20, T22), unknown block types (server tools)
//! are skipped with their deltas, and a body that ends before `message_stop` becomes an error,
//! never a clean end.

use std::collections::{HashMap, HashSet, VecDeque};

use bytes::Bytes;
use serde_json::{Value, json};

use super::convert::{usage_from_wire, usage_to_json};
use super::{Block, ContentBlock, WireDelta, WireEvent};
use crate::canonical::{BlockDelta, BlockStart, ReasoningOrigin, StopReason, StreamEvent, Usage};
use crate::error::{ErrorKind, StreamError, anthropic_error_body};
use crate::pipeline::{StreamDecoder, StreamEncoder};
use crate::protocol::Protocol;
use crate::sse::{SseEvent, named_frame};

#[derive(Debug)]
struct Pending {
    start: BlockStart,
    deltas: Vec<BlockDelta>,
    stopped: bool,
}

/// Canonical events → Anthropic client SSE frames.
#[derive(Debug)]
pub struct AnthropicEncoder {
    id: String,
    model: String,
    started: bool,
    done: bool,
    next_wire: usize,
    active: Option<(usize, usize)>,
    order: VecDeque<usize>,
    pending: HashMap<usize, Pending>,
    usage: Usage,
}

impl AnthropicEncoder {
    /// `id` and `model` are used if the upstream's first event is not a message start.
    pub fn new(id: String, model: String) -> Self {
        Self {
            id,
            model,
            started: false,
            done: false,
            next_wire: 0,
            active: None,
            order: VecDeque::new(),
            pending: HashMap::new(),
            usage: Usage::default(),
        }
    }

    fn message_start(&mut self, out: &mut Vec<Bytes>) {
        if self.started {
            return;
        }
        self.started = true;
        let mut usage = usage_to_json(&self.usage);
        usage["output_tokens"] = json!(0);
        out.push(frame(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage,
            }}),
        ));
    }

    fn open(&mut self, idx: usize, start: &BlockStart, out: &mut Vec<Bytes>) -> usize {
        let wire = self.next_wire;
        self.next_wire += 1;
        let block = match start {
            BlockStart::Text => json!({"type": "text", "text": ""}),
            BlockStart::Reasoning => json!({"type": "thinking", "thinking": "", "signature": ""}),
            BlockStart::RedactedReasoning { data } => {
                json!({"type": "redacted_thinking", "data": data})
            }
            BlockStart::ToolCall { id, name, .. } => {
                json!({"type": "tool_use", "id": id, "name": name, "input": {}})
            }
        };
        out.push(frame(
            "content_block_start",
            json!({"type": "content_block_start", "index": wire, "content_block": block}),
        ));
        self.active = Some((idx, wire));
        wire
    }

    fn delta(wire: usize, d: &BlockDelta, out: &mut Vec<Bytes>) {
        let delta = match d {
            BlockDelta::Text(t) => json!({"type": "text_delta", "text": t}),
            BlockDelta::Reasoning(t) => json!({"type": "thinking_delta", "thinking": t}),
            BlockDelta::Signature(s) => {
                let (origin, raw) = ReasoningOrigin::from_client(Protocol::Anthropic, s);
                json!({"type": "signature_delta", "signature": origin.for_client(Protocol::Anthropic, &raw)})
            }
            BlockDelta::ToolArguments(a) => json!({"type": "input_json_delta", "partial_json": a}),
        };
        out.push(frame(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": wire, "delta": delta}),
        ));
    }

    fn close_active(&mut self, out: &mut Vec<Bytes>) {
        if let Some((_, wire)) = self.active.take() {
            out.push(frame(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": wire}),
            ));
        }
    }

    /// Emits buffered blocks in start order until one is still open upstream.
    fn drain(&mut self, force: bool, out: &mut Vec<Bytes>) {
        while self.active.is_none() {
            let Some(idx) = self.order.pop_front() else {
                return;
            };
            let Some(p) = self.pending.remove(&idx) else {
                continue;
            };
            let wire = self.open(idx, &p.start, out);
            for d in &p.deltas {
                Self::delta(wire, d, out);
            }
            if p.stopped || force {
                self.close_active(out);
            }
        }
    }

    fn error(&mut self, err: &StreamError, out: &mut Vec<Bytes>) {
        out.push(frame("error", anthropic_error_body(err.kind, &err.message)));
        self.done = true;
    }
}

fn frame(event: &str, data: Value) -> Bytes {
    named_frame(event, &data)
}

impl StreamEncoder for AnthropicEncoder {
    fn on_event(&mut self, ev: StreamEvent) -> Vec<Bytes> {
        let mut out = Vec::new();
        if self.done {
            return out;
        }
        match ev {
            StreamEvent::MessageStart { id, model, usage } => {
                if !id.is_empty() {
                    self.id = id;
                }
                if !model.is_empty() {
                    self.model = model;
                }
                self.usage.merge(&usage);
                self.message_start(&mut out);
            }
            StreamEvent::BlockStart { index, block } => {
                self.message_start(&mut out);
                if self.active.is_none() && self.order.is_empty() {
                    self.open(index, &block, &mut out);
                } else {
                    self.order.push_back(index);
                    self.pending.insert(
                        index,
                        Pending {
                            start: block,
                            deltas: Vec::new(),
                            stopped: false,
                        },
                    );
                }
            }
            StreamEvent::BlockDelta { index, delta } => match self.active {
                Some((a, wire)) if a == index => Self::delta(wire, &delta, &mut out),
                _ => match self.pending.get_mut(&index) {
                    Some(p) => p.deltas.push(delta),
                    None => tracing::debug!(index, "delta for an unknown block dropped"),
                },
            },
            StreamEvent::BlockStop { index } => match self.active {
                Some((a, _)) if a == index => {
                    self.close_active(&mut out);
                    self.drain(false, &mut out);
                }
                _ => {
                    if let Some(p) = self.pending.get_mut(&index) {
                        p.stopped = true;
                    }
                }
            },
            StreamEvent::Usage(u) => self.usage.merge(&u),
            StreamEvent::MessageStop {
                stop,
                stop_sequence,
            } => {
                self.message_start(&mut out);
                self.close_active(&mut out);
                self.drain(true, &mut out);
                match stop.to_anthropic() {
                    Ok(reason) => {
                        out.push(frame(
                            "message_delta",
                            json!({"type": "message_delta",
                                "delta": {"stop_reason": reason, "stop_sequence": stop_sequence},
                                "usage": usage_to_json(&self.usage)}),
                        ));
                        out.push(frame("message_stop", json!({"type": "message_stop"})));
                        self.done = true;
                    }
                    Err(e) => self.error(&e.into(), &mut out),
                }
            }
            StreamEvent::Error(err) => self.error(&err, &mut out),
        }
        out
    }

    fn is_done(&self) -> bool {
        self.done
    }
}

/// Anthropic upstream SSE → canonical events.
#[derive(Debug, Default)]
pub struct AnthropicDecoder {
    skipped: HashSet<usize>,
    stop: Option<String>,
    stop_sequence: Option<String>,
    finished: bool,
}

impl AnthropicDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    fn fail(&mut self, kind: ErrorKind, message: String) -> Vec<StreamEvent> {
        self.finished = true;
        vec![StreamEvent::Error(StreamError { kind, message })]
    }
}

fn error_kind(anthropic_type: &str) -> ErrorKind {
    match anthropic_type {
        "overloaded_error" => ErrorKind::Overloaded,
        "rate_limit_error" => ErrorKind::RateLimit,
        "invalid_request_error" => ErrorKind::InvalidRequest,
        "authentication_error" => ErrorKind::Authentication,
        "permission_error" => ErrorKind::Permission,
        "not_found_error" => ErrorKind::NotFound,
        "request_too_large" => ErrorKind::RequestTooLarge,
        "timeout_error" => ErrorKind::Timeout,
        _ => ErrorKind::Api,
    }
}

impl StreamDecoder for AnthropicDecoder {
    fn on_sse(&mut self, ev: &SseEvent) -> Vec<StreamEvent> {
        if self.finished {
            return Vec::new();
        }
        let wire: WireEvent = match serde_json::from_str(&ev.data) {
            Ok(w) => w,
            Err(e) => {
                // Event types this version does not know are skipped; broken JSON is an error.
                if serde_json::from_str::<Value>(&ev.data).is_ok() {
                    tracing::debug!(error = %e, "unknown anthropic stream event skipped");
                    return Vec::new();
                }
                return self.fail(ErrorKind::Api, format!("unreadable upstream event: {e}"));
            }
        };
        match wire {
            WireEvent::MessageStart { message } => vec![StreamEvent::MessageStart {
                id: message.id,
                model: message.model,
                usage: usage_from_wire(&message.usage),
            }],
            WireEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                let (start, initial) = match content_block {
                    ContentBlock::Known(Block::Text { text, .. }) => (
                        BlockStart::Text,
                        (!text.is_empty()).then_some(BlockDelta::Text(text)),
                    ),
                    ContentBlock::Known(Block::Thinking { thinking, .. }) => (
                        BlockStart::Reasoning,
                        (!thinking.is_empty()).then_some(BlockDelta::Reasoning(thinking)),
                    ),
                    ContentBlock::Known(Block::RedactedThinking { data }) => {
                        (BlockStart::RedactedReasoning { data }, None)
                    }
                    ContentBlock::Known(Block::ToolUse {
                        id, name, input, ..
                    }) => {
                        let args = match &input {
                            Value::Object(m) if m.is_empty() => None,
                            other => Some(BlockDelta::ToolArguments(other.to_string())),
                        };
                        (
                            BlockStart::ToolCall {
                                id,
                                name,
                                signature: None,
                            },
                            args,
                        )
                    }
                    other => {
                        tracing::debug!(
                            ?other,
                            "upstream block without canonical equivalent skipped"
                        );
                        self.skipped.insert(index);
                        return Vec::new();
                    }
                };
                let mut out = vec![StreamEvent::BlockStart {
                    index,
                    block: start,
                }];
                if let Some(delta) = initial {
                    out.push(StreamEvent::BlockDelta { index, delta });
                }
                out
            }
            WireEvent::ContentBlockDelta { index, .. } if self.skipped.contains(&index) => {
                Vec::new()
            }
            WireEvent::ContentBlockDelta { index, delta } => {
                let delta = match delta {
                    WireDelta::TextDelta { text } => BlockDelta::Text(text),
                    WireDelta::InputJsonDelta { partial_json } => {
                        BlockDelta::ToolArguments(partial_json)
                    }
                    WireDelta::ThinkingDelta { thinking } => BlockDelta::Reasoning(thinking),
                    WireDelta::SignatureDelta { signature } => {
                        BlockDelta::Signature(ReasoningOrigin::Anthropic.tag(&signature))
                    }
                    WireDelta::Other => return Vec::new(),
                };
                vec![StreamEvent::BlockDelta { index, delta }]
            }
            WireEvent::ContentBlockStop { index } if self.skipped.contains(&index) => Vec::new(),
            WireEvent::ContentBlockStop { index } => vec![StreamEvent::BlockStop { index }],
            WireEvent::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop = delta.stop_reason;
                    self.stop_sequence = delta.stop_sequence;
                }
                usage
                    .map(|u| vec![StreamEvent::Usage(usage_from_wire(&u))])
                    .unwrap_or_default()
            }
            WireEvent::MessageStop => {
                self.finished = true;
                let value = self.stop.as_deref().unwrap_or("null");
                match StopReason::from_anthropic(value) {
                    Ok(stop) => vec![StreamEvent::MessageStop {
                        stop,
                        stop_sequence: self.stop_sequence.take(),
                    }],
                    Err(e) => self.fail(ErrorKind::Api, e.to_string()),
                }
            }
            WireEvent::Ping => Vec::new(),
            WireEvent::Error { error } => self.fail(error_kind(&error.kind), error.message),
        }
    }

    fn on_end(&mut self) -> Vec<StreamEvent> {
        if self.finished {
            return Vec::new();
        }
        self.fail(
            ErrorKind::Unavailable,
            "upstream stream ended before message_stop".to_owned(),
        )
    }
}

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
