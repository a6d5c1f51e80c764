//! Chat Completions stream state machines, one per direction (spec §6.2, §8, §11, §12).
//!
//! [`ChatDecoder`] reads a Chat upstream. Each tool call `index` gets its own canonical block,
//! created on the first fragment (id and name) and fed every later argument fragment of that
//! index only — calls are never merged and fragments never cross blocks (T11). The stop reason
//! and usage arrive in separate chunks (`finish_reason`, then the `include_usage` chunk), so the
//! terminal event is emitted at `[DONE]` or end of body; a body that ends without a
//! `finish_reason` is an error, never a clean end (T18).
//!
//! [`ChatEncoder`] writes the client stream: a role chunk first, tool calls with stable indices
//! `0..k` and incremental argument fragments, a finish chunk, the usage chunk when the client
//! asked for it, then `[DONE]`; an in-band failure is a `data: {"error":…}` frame (T29).
//! Reasoning text streams as `reasoning_content`; opaque reasoning (a signed thinking block when
//! its signature arrives, a `redacted_thinking` block) as one complete `reasoning_details` entry.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use serde_json::{Value, json};

use super::ChatChunk;
use super::convert::{unix_now, usage_from_wire, usage_to_json};
use super::reasoning_details;
use crate::canonical::{BlockDelta, BlockStart, ReasoningOrigin, StopReason, StreamEvent, Usage};
use crate::error::{ErrorKind, StreamError, openai_error_body};
use crate::pipeline::{StreamDecoder, StreamEncoder};
use crate::protocol::Protocol;
use crate::sse::{SseEvent, data_frame};

/// Chat upstream SSE → canonical events.
#[derive(Debug, Default)]
pub struct ChatDecoder {
    started: bool,
    finished: bool,
    next_block: usize,
    text: Option<usize>,
    reasoning: Option<usize>,
    /// Chat tool index → canonical block.
    tools: BTreeMap<usize, usize>,
    /// Open canonical blocks in start order.
    open: Vec<usize>,
    finish: Option<String>,
}

impl ChatDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    fn start(&mut self, block: BlockStart, out: &mut Vec<StreamEvent>) -> usize {
        let index = self.next_block;
        self.next_block += 1;
        self.open.push(index);
        out.push(StreamEvent::BlockStart { index, block });
        index
    }

    fn stop(&mut self, slot: Option<usize>, out: &mut Vec<StreamEvent>) {
        if let Some(index) = slot {
            self.open.retain(|&i| i != index);
            out.push(StreamEvent::BlockStop { index });
        }
    }

    fn terminal(&mut self) -> Vec<StreamEvent> {
        self.finished = true;
        let mut out = Vec::new();
        if !self.started {
            return vec![StreamEvent::Error(StreamError {
                kind: ErrorKind::Unavailable,
                message: "upstream stream ended before any chunk".to_owned(),
            })];
        }
        for index in std::mem::take(&mut self.open) {
            out.push(StreamEvent::BlockStop { index });
        }
        match StopReason::from_chat(self.finish.as_deref(), !self.tools.is_empty()) {
            Ok(stop) => out.push(StreamEvent::MessageStop {
                stop,
                stop_sequence: None,
            }),
            Err(e) => out.push(StreamEvent::Error(StreamError {
                kind: ErrorKind::Api,
                message: format!("upstream stream ended without a usable finish reason: {e}"),
            })),
        }
        out
    }
}

impl StreamDecoder for ChatDecoder {
    fn on_sse(&mut self, ev: &SseEvent) -> Vec<StreamEvent> {
        if self.finished {
            return Vec::new();
        }
        if ev.data.trim() == "[DONE]" {
            return self.terminal();
        }
        let chunk: ChatChunk = match serde_json::from_str(&ev.data) {
            Ok(c) => c,
            Err(e) => {
                self.finished = true;
                return vec![StreamEvent::Error(StreamError {
                    kind: ErrorKind::Api,
                    message: format!("unreadable upstream chunk: {e}"),
                })];
            }
        };
        if let Some(err) = chunk.error {
            self.finished = true;
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("upstream error")
                .to_owned();
            return vec![StreamEvent::Error(StreamError {
                kind: ErrorKind::Api,
                message,
            })];
        }
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(StreamEvent::MessageStart {
                id: chunk.id.clone(),
                model: chunk.model.clone(),
                usage: Usage::default(),
            });
        }
        for choice in chunk.choices {
            let d = choice.delta;
            if let Some(r) = d
                .reasoning_content
                .or(d.reasoning)
                .filter(|r| !r.is_empty())
            {
                let index = match self.reasoning {
                    Some(i) => i,
                    None => {
                        let text = self.text.take();
                        self.stop(text, &mut out);
                        let i = self.start(BlockStart::Reasoning, &mut out);
                        self.reasoning = Some(i);
                        i
                    }
                };
                out.push(StreamEvent::BlockDelta {
                    index,
                    delta: BlockDelta::Reasoning(r),
                });
            }
            if let Some(t) = d.content.filter(|t| !t.is_empty()) {
                let index = match self.text {
                    Some(i) => i,
                    None => {
                        let r = self.reasoning.take();
                        self.stop(r, &mut out);
                        let i = self.start(BlockStart::Text, &mut out);
                        self.text = Some(i);
                        i
                    }
                };
                out.push(StreamEvent::BlockDelta {
                    index,
                    delta: BlockDelta::Text(t),
                });
            }
            for tc in d.tool_calls.unwrap_or_default() {
                let f = tc.function.unwrap_or_default();
                let index = match self.tools.get(&tc.index) {
                    Some(&i) => i,
                    None => {
                        let text = self.text.take();
                        self.stop(text, &mut out);
                        let r = self.reasoning.take();
                        self.stop(r, &mut out);
                        let id = tc
                            .id
                            .clone()
                            .unwrap_or_else(|| format!("call_{}", tc.index));
                        let name = f.name.clone().unwrap_or_default();
                        let i = self.start(
                            BlockStart::ToolCall {
                                id,
                                name,
                                signature: None,
                            },
                            &mut out,
                        );
                        self.tools.insert(tc.index, i);
                        i
                    }
                };
                if let Some(a) = f.arguments.filter(|a| !a.is_empty()) {
                    out.push(StreamEvent::BlockDelta {
                        index,
                        delta: BlockDelta::ToolArguments(a),
                    });
                }
            }
            if choice.finish_reason.is_some() {
                self.finish = choice.finish_reason;
            }
        }
        if let Some(u) = chunk.usage {
            out.push(StreamEvent::Usage(usage_from_wire(&u)));
        }
        out
    }

    fn on_end(&mut self) -> Vec<StreamEvent> {
        if self.finished {
            return Vec::new();
        }
        self.terminal()
    }
}

/// Canonical events → Chat client SSE frames.
#[derive(Debug)]
pub struct ChatEncoder {
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    started: bool,
    done: bool,
    /// Canonical block → Chat tool index.
    tool_index: HashMap<usize, usize>,
    /// Reasoning text per open canonical block, for the `reasoning_details` entry its
    /// signature completes.
    reasoning_text: HashMap<usize, String>,
    /// `reasoning_details` entries sent so far (their `index`).
    details: usize,
    usage: Usage,
}

impl ChatEncoder {
    pub fn new(id: String, model: String, include_usage: bool) -> Self {
        Self {
            id,
            model,
            created: unix_now(),
            include_usage,
            started: false,
            done: false,
            tool_index: HashMap::new(),
            reasoning_text: HashMap::new(),
            details: 0,
            usage: Usage::default(),
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Bytes {
        data_frame(&json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        }))
    }

    fn ensure_started(&mut self, out: &mut Vec<Bytes>) {
        if !self.started {
            self.started = true;
            out.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
        }
    }

    fn error(&mut self, err: &StreamError, out: &mut Vec<Bytes>) {
        out.push(data_frame(&openai_error_body(err.kind, &err.message)));
        self.done = true;
    }
}

impl StreamEncoder for ChatEncoder {
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
                self.ensure_started(&mut out);
            }
            StreamEvent::BlockStart { index, block } => {
                self.ensure_started(&mut out);
                match block {
                    BlockStart::ToolCall { id, name, .. } => {
                        let n = self.tool_index.len();
                        self.tool_index.insert(index, n);
                        out.push(self.chunk(
                            json!({"tool_calls": [{"index": n, "id": id, "type": "function",
                                "function": {"name": name, "arguments": ""}}]}),
                            None,
                        ));
                    }
                    BlockStart::Reasoning => {
                        self.reasoning_text.insert(index, String::new());
                    }
                    BlockStart::RedactedReasoning { data } => {
                        let entry = reasoning_details::redacted_entry(self.details, &data);
                        self.details += 1;
                        out.push(self.chunk(json!({"reasoning_details": [entry]}), None));
                    }
                    BlockStart::Text => {}
                }
            }
            StreamEvent::BlockDelta { index, delta } => {
                self.ensure_started(&mut out);
                match delta {
                    BlockDelta::Text(t) => out.push(self.chunk(json!({"content": t}), None)),
                    BlockDelta::Reasoning(t) => {
                        if let Some(acc) = self.reasoning_text.get_mut(&index) {
                            acc.push_str(&t);
                        }
                        out.push(self.chunk(json!({"reasoning_content": t}), None));
                    }
                    BlockDelta::Signature(sig) => {
                        let (origin, raw) =
                            ReasoningOrigin::from_client(Protocol::OpenAiChat, &sig);
                        let text = self.reasoning_text.remove(&index).unwrap_or_default();
                        let entry = reasoning_details::text_entry(
                            self.details,
                            &text,
                            &origin.for_client(Protocol::OpenAiChat, &raw),
                        );
                        self.details += 1;
                        out.push(self.chunk(json!({"reasoning_details": [entry]}), None));
                    }
                    BlockDelta::ToolArguments(a) => match self.tool_index.get(&index) {
                        Some(n) => out.push(self.chunk(
                            json!({"tool_calls": [{"index": n, "function": {"arguments": a}}]}),
                            None,
                        )),
                        None => tracing::debug!(index, "arguments for an unknown block dropped"),
                    },
                }
            }
            StreamEvent::BlockStop { index } => {
                self.reasoning_text.remove(&index);
            }
            StreamEvent::Usage(u) => self.usage.merge(&u),
            StreamEvent::MessageStop { stop, .. } => {
                self.ensure_started(&mut out);
                match stop.to_chat() {
                    Ok(reason) => {
                        out.push(self.chunk(json!({}), Some(reason)));
                        if self.include_usage {
                            out.push(data_frame(&json!({
                                "id": self.id, "object": "chat.completion.chunk",
                                "created": self.created, "model": self.model, "choices": [],
                                "usage": usage_to_json(&self.usage),
                            })));
                        }
                        out.push(Bytes::from_static(b"data: [DONE]\n\n"));
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

#[cfg(test)]
#[path = "stream_tests.rs"]
mod tests;
