//! Gemini stream state machines, one per direction (spec §6.4, §10, §11, §12).
//!
//! [`GeminiDecoder`] reads `:streamGenerateContent?alt=sse`: every frame is a whole
//! `GenerateContentResponse` whose parts are deltas. Consecutive text (or thought) parts extend
//! one canonical block; a `functionCall` part arrives complete and becomes a start + one argument
//! delta + stop, with a fresh unique id and its `thoughtSignature` remembered in the
//! [`SignatureStore`] (T6, T8). `usageMetadata` repeats cumulative counts (set semantics). Gemini
//! has no terminal event, so the stop is emitted when the body ends; a body that ends without a
//! `finishReason` is an error.
//!
//! [`GeminiEncoder`] writes `data: <GenerateContentResponse>` frames: text and thought deltas as
//! they come, each function call as one complete part once its arguments are complete (calls
//! interleaved upstream are buffered per block), and a final frame with `finishReason` and
//! `usageMetadata`.

use std::collections::HashMap;

use bytes::Bytes;
use serde_json::{Value, json};

use super::GenerateResponse;
use super::convert::{usage_from_wire, usage_to_json};
use crate::canonical::{
    BlockDelta, BlockStart, ReasoningOrigin, StopReason, StreamEvent, ToolCall, Usage,
};
use crate::error::{ErrorKind, StreamError, gemini_error_body};
use crate::pipeline::{StreamDecoder, StreamEncoder};
use crate::protocol::Protocol;
use crate::sigstore::SignatureStore;
use crate::sse::{SseEvent, data_frame};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Open {
    Text(usize),
    Thought(usize),
}

/// Gemini upstream SSE → canonical events.
#[derive(Debug)]
pub struct GeminiDecoder {
    store: SignatureStore,
    started: bool,
    finished: bool,
    next_block: usize,
    open: Option<Open>,
    calls: usize,
    finish: Option<String>,
}

impl GeminiDecoder {
    pub fn new(store: SignatureStore) -> Self {
        Self {
            store,
            started: false,
            finished: false,
            next_block: 0,
            open: None,
            calls: 0,
            finish: None,
        }
    }

    fn close(&mut self, out: &mut Vec<StreamEvent>) {
        if let Some(Open::Text(i) | Open::Thought(i)) = self.open.take() {
            out.push(StreamEvent::BlockStop { index: i });
        }
    }

    fn start(&mut self, block: BlockStart, out: &mut Vec<StreamEvent>) -> usize {
        let index = self.next_block;
        self.next_block += 1;
        out.push(StreamEvent::BlockStart { index, block });
        index
    }

    fn fail(&mut self, kind: ErrorKind, message: String) -> Vec<StreamEvent> {
        self.finished = true;
        vec![StreamEvent::Error(StreamError { kind, message })]
    }
}

impl StreamDecoder for GeminiDecoder {
    fn on_sse(&mut self, ev: &SseEvent) -> Vec<StreamEvent> {
        if self.finished || ev.data.trim() == "[DONE]" {
            return Vec::new();
        }
        let frame: GenerateResponse = match serde_json::from_str(&ev.data) {
            Ok(f) => f,
            Err(e) => return self.fail(ErrorKind::Api, format!("unreadable upstream frame: {e}")),
        };
        if let Some(err) = frame.error {
            let status = err.get("code").and_then(Value::as_u64).unwrap_or(500);
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("upstream error")
                .to_owned();
            return self.fail(
                ErrorKind::from_status(u16::try_from(status).unwrap_or(500)),
                message,
            );
        }
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(StreamEvent::MessageStart {
                id: frame.response_id.clone().unwrap_or_default(),
                model: frame.model_version.clone().unwrap_or_default(),
                usage: Usage::default(),
            });
        }
        for cand in frame.candidates.into_iter().take(1) {
            for p in cand.content.map(|c| c.parts).unwrap_or_default() {
                if let Some(fc) = p.function_call {
                    self.close(&mut out);
                    let id = fc
                        .id
                        .filter(|s| !s.is_empty())
                        .unwrap_or_else(|| format!("call_{}", ulid::Ulid::generate()));
                    self.store
                        .put(&id, &fc.name, p.thought_signature.as_deref());
                    self.calls += 1;
                    let args = match fc.args {
                        Value::Null => "{}".to_owned(),
                        a => a.to_string(),
                    };
                    let index = self.start(
                        BlockStart::ToolCall {
                            id,
                            name: fc.name,
                            signature: p.thought_signature,
                        },
                        &mut out,
                    );
                    out.push(StreamEvent::BlockDelta {
                        index,
                        delta: BlockDelta::ToolArguments(args),
                    });
                    out.push(StreamEvent::BlockStop { index });
                } else if let Some(text) = p.text {
                    let thought = p.thought == Some(true);
                    let signature = p.thought_signature.filter(|_| thought);
                    if text.is_empty() && signature.is_none() {
                        continue;
                    }
                    let index = match (self.open, thought) {
                        (Some(Open::Thought(i)), true) | (Some(Open::Text(i)), false) => i,
                        _ => {
                            self.close(&mut out);
                            let (block, wrap): (BlockStart, fn(usize) -> Open) = if thought {
                                (BlockStart::Reasoning, Open::Thought)
                            } else {
                                (BlockStart::Text, Open::Text)
                            };
                            let i = self.start(block, &mut out);
                            self.open = Some(wrap(i));
                            i
                        }
                    };
                    let text_is_empty = text.is_empty();
                    let delta = if thought {
                        BlockDelta::Reasoning(text)
                    } else {
                        BlockDelta::Text(text)
                    };
                    if !text_is_empty {
                        out.push(StreamEvent::BlockDelta { index, delta });
                    }
                    if let Some(sig) = signature {
                        out.push(StreamEvent::BlockDelta {
                            index,
                            delta: BlockDelta::Signature(ReasoningOrigin::Gemini.tag(&sig)),
                        });
                    }
                }
            }
            if cand.finish_reason.is_some() {
                self.finish = cand.finish_reason;
            }
        }
        if let Some(u) = frame.usage_metadata {
            out.push(StreamEvent::Usage(usage_from_wire(&u)));
        }
        out
    }

    fn on_end(&mut self) -> Vec<StreamEvent> {
        if self.finished {
            return Vec::new();
        }
        if !self.started {
            return self.fail(
                ErrorKind::Unavailable,
                "upstream stream ended before any frame".to_owned(),
            );
        }
        self.finished = true;
        let mut out = Vec::new();
        self.close(&mut out);
        let Some(reason) = self.finish.as_deref() else {
            out.push(StreamEvent::Error(StreamError {
                kind: ErrorKind::Unavailable,
                message: "upstream stream ended without a finishReason".to_owned(),
            }));
            return out;
        };
        match StopReason::from_gemini(reason, self.calls > 0) {
            Ok(stop) => out.push(StreamEvent::MessageStop {
                stop,
                stop_sequence: None,
            }),
            Err(e) => out.push(StreamEvent::Error(StreamError {
                kind: ErrorKind::Api,
                message: e.to_string(),
            })),
        }
        out
    }
}

/// Canonical events → Gemini client SSE frames.
#[derive(Debug)]
pub struct GeminiEncoder {
    model: String,
    response_id: String,
    done: bool,
    calls: HashMap<usize, ToolCall>,
    thoughts: Vec<usize>,
    usage: Usage,
}

impl GeminiEncoder {
    pub fn new(model: String) -> Self {
        Self {
            model,
            response_id: ulid::Ulid::generate().to_string(),
            done: false,
            calls: HashMap::new(),
            thoughts: Vec::new(),
            usage: Usage::default(),
        }
    }

    fn frame(&self, parts: Vec<Value>, finish: Option<&str>, usage: bool) -> Bytes {
        let mut cand = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        if let Some(f) = finish {
            cand["finishReason"] = json!(f);
        }
        let mut v = json!({"candidates": [cand], "modelVersion": self.model,
            "responseId": self.response_id});
        if usage {
            v["usageMetadata"] = usage_to_json(&self.usage);
        }
        data_frame(&v)
    }

    fn error(&mut self, err: &StreamError, out: &mut Vec<Bytes>) {
        out.push(data_frame(&gemini_error_body(err.kind, &err.message)));
        self.done = true;
    }
}

impl StreamEncoder for GeminiEncoder {
    fn on_event(&mut self, ev: StreamEvent) -> Vec<Bytes> {
        let mut out = Vec::new();
        if self.done {
            return out;
        }
        match ev {
            StreamEvent::MessageStart { id, model, usage } => {
                if !id.is_empty() {
                    self.response_id = id;
                }
                if !model.is_empty() {
                    self.model = model;
                }
                self.usage.merge(&usage);
            }
            StreamEvent::BlockStart { index, block } => match block {
                BlockStart::ToolCall {
                    id,
                    name,
                    signature,
                } => {
                    self.calls.insert(
                        index,
                        ToolCall {
                            id,
                            name,
                            arguments: String::new(),
                            signature,
                        },
                    );
                }
                BlockStart::Reasoning => self.thoughts.push(index),
                BlockStart::RedactedReasoning { data } => {
                    let part =
                        super::convert::client_part(&crate::canonical::Part::RedactedReasoning {
                            data,
                        });
                    out.extend(part.map(|p| self.frame(vec![p], None, false)));
                }
                BlockStart::Text => {}
            },
            StreamEvent::BlockDelta { index, delta } => match delta {
                BlockDelta::Text(t) => out.push(self.frame(vec![json!({"text": t})], None, false)),
                BlockDelta::Reasoning(t) => {
                    out.push(self.frame(vec![json!({"text": t, "thought": true})], None, false));
                }
                BlockDelta::Signature(sig) => {
                    let (origin, raw) = ReasoningOrigin::from_client(Protocol::Gemini, &sig);
                    let part = json!({"text": "", "thought": true,
                        "thoughtSignature": origin.for_client(Protocol::Gemini, &raw)});
                    out.push(self.frame(vec![part], None, false));
                }
                BlockDelta::ToolArguments(a) => {
                    if let Some(c) = self.calls.get_mut(&index) {
                        c.arguments.push_str(&a);
                    }
                }
            },
            StreamEvent::BlockStop { index } => {
                if let Some(c) = self.calls.remove(&index)
                    && let Some(part) =
                        super::convert::client_part(&crate::canonical::Part::ToolCall(c))
                {
                    out.push(self.frame(vec![part], None, false));
                }
            }
            StreamEvent::Usage(u) => self.usage.merge(&u),
            StreamEvent::MessageStop { stop, .. } => {
                let mut pending: Vec<(usize, ToolCall)> = self.calls.drain().collect();
                pending.sort_by_key(|(i, _)| *i);
                for (_, c) in pending {
                    if let Some(part) =
                        super::convert::client_part(&crate::canonical::Part::ToolCall(c))
                    {
                        out.push(self.frame(vec![part], None, false));
                    }
                }
                match stop.to_gemini() {
                    Ok(reason) => {
                        out.push(self.frame(vec![json!({"text": ""})], Some(reason), true));
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
