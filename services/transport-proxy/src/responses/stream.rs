//! Responses stream state machines, one per direction (spec §6.3, §8, §11, §12).
//!
//! [`ResponsesDecoder`] reads a Responses upstream. Items are keyed by `output_index`; each
//! becomes one canonical block, opened lazily (no empty text block) and closed at
//! `response.output_item.done`. Arguments that arrive only in
//! `response.function_call_arguments.done` or the finished item are still emitted (T14). The
//! terminal `response.completed` / `.incomplete` / `.failed` carries usage and the stop
//! reason; a body that ends before it is an error, never a clean end.
//!
//! [`ResponsesEncoder`] writes the client stream: `response.created` and
//! `response.in_progress` first (T13), one output item per canonical block with its own
//! `output_index` (interleaved tool calls stay separate, T11), every event with a monotonically
//! increasing `sequence_number`, and a terminal response whose `output` equals the streamed
//! items. No `data: [DONE]` (a Chat convention). Reasoning signatures become
//! `encrypted_content`: a Responses provider's unchanged, others' tagged with their origin
//! ([`ReasoningOrigin::for_client`]) so they find their way back to their own provider.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use serde_json::{Value, json};

use super::convert::{
    failure_message, function_call_item, message_item, reasoning_item, response_object,
    usage_from_wire,
};
use super::{ResponseObject, item_type, str_field};
use crate::canonical::{
    BlockDelta, BlockStart, ReasoningOrigin, StopReason, StreamEvent, ToolCall, Usage,
};
use crate::error::{ErrorKind, StreamError};
use crate::pipeline::{StreamDecoder, StreamEncoder};
use crate::protocol::Protocol;
use crate::sse::{SseEvent, named_frame};

#[derive(Debug)]
struct DecItem {
    block: Option<usize>,
    kind: String,
    saw_delta: bool,
}

/// Responses upstream SSE → canonical events.
#[derive(Debug, Default)]
pub struct ResponsesDecoder {
    started: bool,
    finished: bool,
    next_block: usize,
    items: HashMap<u64, DecItem>,
    calls_done: usize,
}

impl ResponsesDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    fn fail(&mut self, kind: ErrorKind, message: String) -> Vec<StreamEvent> {
        self.finished = true;
        vec![StreamEvent::Error(StreamError { kind, message })]
    }

    /// The block of item `idx`, opened with `start` when it is not open yet.
    fn block(&mut self, idx: u64, start: BlockStart, out: &mut Vec<StreamEvent>) -> usize {
        let item = self.items.entry(idx).or_insert_with(|| DecItem {
            block: None,
            kind: String::new(),
            saw_delta: false,
        });
        if let Some(b) = item.block {
            return b;
        }
        let b = self.next_block;
        self.next_block += 1;
        item.block = Some(b);
        out.push(StreamEvent::BlockStart {
            index: b,
            block: start,
        });
        b
    }

    fn item_done(&mut self, idx: u64, item: &Value, out: &mut Vec<StreamEvent>) {
        let saw = self.items.get(&idx).is_some_and(|i| i.saw_delta);
        match item_type(item) {
            "function_call" => {
                self.calls_done += 1;
                let b = self.block(idx, call_start(item), out);
                let args = str_field(item, "arguments");
                if !saw && !args.is_empty() {
                    out.push(StreamEvent::BlockDelta {
                        index: b,
                        delta: BlockDelta::ToolArguments(args.to_owned()),
                    });
                }
            }
            "reasoning" => {
                if let Some(enc) = item.get("encrypted_content").and_then(Value::as_str) {
                    let b = self.block(idx, BlockStart::Reasoning, out);
                    out.push(StreamEvent::BlockDelta {
                        index: b,
                        delta: BlockDelta::Signature(ReasoningOrigin::OpenAiResponses.tag(enc)),
                    });
                }
            }
            "message" if !saw => {
                let text: String = item
                    .get("content")
                    .and_then(Value::as_array)
                    .map(|c| c.iter().map(|p| str_field(p, "text")).collect())
                    .unwrap_or_default();
                if !text.is_empty() {
                    let b = self.block(idx, BlockStart::Text, out);
                    out.push(StreamEvent::BlockDelta {
                        index: b,
                        delta: BlockDelta::Text(text),
                    });
                }
            }
            _ => {}
        }
        if let Some(b) = self.items.get_mut(&idx).and_then(|i| i.block.take()) {
            out.push(StreamEvent::BlockStop { index: b });
        }
    }

    fn terminal(&mut self, ty: &str, resp: &ResponseObject) -> Vec<StreamEvent> {
        self.finished = true;
        let mut out = Vec::new();
        let mut open: Vec<usize> = self
            .items
            .values_mut()
            .filter_map(|i| i.block.take())
            .collect();
        open.sort_unstable();
        out.extend(
            open.into_iter()
                .map(|index| StreamEvent::BlockStop { index }),
        );
        if let Some(u) = &resp.usage {
            out.push(StreamEvent::Usage(usage_from_wire(u)));
        }
        if ty == "response.failed" {
            out.push(StreamEvent::Error(StreamError {
                kind: ErrorKind::Api,
                message: failure_message(resp),
            }));
            return out;
        }
        let status = resp
            .status
            .as_deref()
            .unwrap_or(if ty == "response.incomplete" {
                "incomplete"
            } else {
                "completed"
            });
        let reason = resp
            .incomplete_details
            .as_ref()
            .and_then(|d| d.reason.as_deref());
        match StopReason::from_responses(status, reason, self.calls_done > 0) {
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

fn call_start(item: &Value) -> BlockStart {
    BlockStart::ToolCall {
        id: str_field(item, "call_id").to_owned(),
        name: str_field(item, "name").to_owned(),
        signature: None,
    }
}

impl StreamDecoder for ResponsesDecoder {
    fn on_sse(&mut self, ev: &SseEvent) -> Vec<StreamEvent> {
        if self.finished || ev.data.trim() == "[DONE]" {
            return Vec::new();
        }
        let v: Value = match serde_json::from_str(&ev.data) {
            Ok(v) => v,
            Err(e) => return self.fail(ErrorKind::Api, format!("unreadable upstream event: {e}")),
        };
        let ty = item_type(&v).to_owned();
        let idx = v.get("output_index").and_then(Value::as_u64).unwrap_or(0);
        let mut out = Vec::new();
        if !self.started && ty != "error" {
            self.started = true;
            let r = v.get("response");
            out.push(StreamEvent::MessageStart {
                id: r.map(|r| str_field(r, "id")).unwrap_or_default().to_owned(),
                model: r
                    .map(|r| str_field(r, "model"))
                    .unwrap_or_default()
                    .to_owned(),
                usage: Usage::default(),
            });
        }
        match ty.as_str() {
            "response.output_item.added" => {
                let item = v.get("item").cloned().unwrap_or_default();
                let kind = item_type(&item).to_owned();
                self.items.insert(
                    idx,
                    DecItem {
                        block: None,
                        kind: kind.clone(),
                        saw_delta: false,
                    },
                );
                if kind == "function_call" {
                    self.block(idx, call_start(&item), &mut out);
                }
            }
            "response.output_text.delta" | "response.refusal.delta" => {
                let d = str_field(&v, "delta").to_owned();
                let b = self.block(idx, BlockStart::Text, &mut out);
                self.mark(idx);
                out.push(StreamEvent::BlockDelta {
                    index: b,
                    delta: BlockDelta::Text(d),
                });
            }
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                let d = str_field(&v, "delta").to_owned();
                let b = self.block(idx, BlockStart::Reasoning, &mut out);
                out.push(StreamEvent::BlockDelta {
                    index: b,
                    delta: BlockDelta::Reasoning(d),
                });
            }
            "response.function_call_arguments.delta" => {
                let d = str_field(&v, "delta").to_owned();
                if let Some(b) = self.items.get(&idx).and_then(|i| i.block) {
                    self.mark(idx);
                    out.push(StreamEvent::BlockDelta {
                        index: b,
                        delta: BlockDelta::ToolArguments(d),
                    });
                }
            }
            "response.function_call_arguments.done" => {
                let saw = self.items.get(&idx).is_some_and(|i| i.saw_delta);
                let args = str_field(&v, "arguments").to_owned();
                if let Some(b) = self.items.get(&idx).and_then(|i| i.block)
                    && !saw
                    && !args.is_empty()
                {
                    self.mark(idx);
                    out.push(StreamEvent::BlockDelta {
                        index: b,
                        delta: BlockDelta::ToolArguments(args),
                    });
                }
            }
            "response.output_item.done" => {
                let item = v.get("item").cloned().unwrap_or_default();
                self.item_done(idx, &item, &mut out);
            }
            "response.completed" | "response.incomplete" | "response.failed" => {
                let resp: ResponseObject = v
                    .get("response")
                    .cloned()
                    .and_then(|r| serde_json::from_value(r).ok())
                    .unwrap_or_default();
                out.extend(self.terminal(&ty, &resp));
            }
            "error" => {
                let message = v
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("upstream error")
                    .to_owned();
                out.extend(self.fail(ErrorKind::Api, message));
            }
            _ => {}
        }
        out
    }

    fn on_end(&mut self) -> Vec<StreamEvent> {
        if self.finished {
            return Vec::new();
        }
        self.fail(
            ErrorKind::Unavailable,
            "upstream stream ended before response.completed".to_owned(),
        )
    }
}

impl ResponsesDecoder {
    fn mark(&mut self, idx: u64) {
        if let Some(i) = self.items.get_mut(&idx) {
            i.saw_delta = true;
        }
    }

    /// Kind of item `idx` (tests).
    pub fn item_kind(&self, idx: u64) -> Option<&str> {
        self.items.get(&idx).map(|i| i.kind.as_str())
    }
}

#[derive(Debug)]
enum EncItem {
    Text(String),
    /// Summary text and, when the upstream was a Responses provider, its encrypted content.
    Reasoning(String, Option<String>),
    /// Anthropic `redacted_thinking`, tagged: a reasoning item with no summary, only
    /// `encrypted_content`.
    Redacted(String),
    Call(ToolCall),
}

/// Canonical events → Responses client SSE frames.
#[derive(Debug)]
pub struct ResponsesEncoder {
    id: String,
    seed: String,
    model: String,
    seq: u64,
    started: bool,
    done: bool,
    /// canonical block → output_index
    blocks: HashMap<usize, usize>,
    items: BTreeMap<usize, (EncItem, bool)>,
    usage: Usage,
}

impl ResponsesEncoder {
    pub fn new(id: String, model: String) -> Self {
        let seed = id.trim_start_matches("resp_").to_owned();
        Self {
            id,
            seed,
            model,
            seq: 0,
            started: false,
            done: false,
            blocks: HashMap::new(),
            items: BTreeMap::new(),
            usage: Usage::default(),
        }
    }

    fn frame(&mut self, ty: &str, mut data: Value, out: &mut Vec<Bytes>) {
        data["type"] = json!(ty);
        data["sequence_number"] = json!(self.seq);
        self.seq += 1;
        out.push(named_frame(ty, &data));
    }

    fn item_id(&self, n: usize, item: &EncItem) -> String {
        let prefix = match item {
            EncItem::Text(_) => "msg",
            EncItem::Reasoning(..) | EncItem::Redacted(_) => "rs",
            EncItem::Call(_) => "fc",
        };
        format!("{prefix}_{}_{n}", self.seed)
    }

    fn item_json(&self, n: usize, item: &EncItem, status: &str) -> Value {
        let id = self.item_id(n, item);
        match item {
            EncItem::Text(t) => message_item(&id, t.clone(), status),
            EncItem::Reasoning(s, enc) => reasoning_item(&id, s, enc.as_ref()),
            EncItem::Redacted(enc) => reasoning_item(&id, "", Some(enc)),
            EncItem::Call(c) => function_call_item(&id, c, status),
        }
    }

    fn ensure_started(&mut self, out: &mut Vec<Bytes>) {
        if self.started {
            return;
        }
        self.started = true;
        let resp =
            response_object(&self.id, &self.model, Vec::new(), None, None).unwrap_or_default();
        self.frame("response.created", json!({"response": resp}), out);
        let resp =
            response_object(&self.id, &self.model, Vec::new(), None, None).unwrap_or_default();
        self.frame("response.in_progress", json!({"response": resp}), out);
    }

    fn close(&mut self, n: usize, out: &mut Vec<Bytes>) {
        let Some((item, open)) = self.items.get(&n) else {
            return;
        };
        if !*open {
            return;
        }
        let id = self.item_id(n, item);
        let done_item = self.item_json(n, item, "completed");
        let frames: Vec<(&str, Value)> = match item {
            EncItem::Text(t) => vec![
                (
                    "response.output_text.done",
                    json!({"item_id": id, "output_index": n, "content_index": 0, "text": t, "logprobs": []}),
                ),
                (
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": n, "content_index": 0, "part": {"type": "output_text", "text": t, "annotations": []}}),
                ),
            ],
            EncItem::Reasoning(s, _) => vec![
                (
                    "response.reasoning_summary_text.done",
                    json!({"item_id": id, "output_index": n, "summary_index": 0, "text": s}),
                ),
                (
                    "response.reasoning_summary_part.done",
                    json!({"item_id": id, "output_index": n, "summary_index": 0, "part": {"type": "summary_text", "text": s}}),
                ),
            ],
            EncItem::Redacted(_) => Vec::new(),
            EncItem::Call(c) => vec![(
                "response.function_call_arguments.done",
                json!({"item_id": id, "output_index": n, "arguments": c.arguments}),
            )],
        };
        for (ty, data) in frames {
            self.frame(ty, data, out);
        }
        self.frame(
            "response.output_item.done",
            json!({"output_index": n, "item": done_item}),
            out,
        );
        if let Some(e) = self.items.get_mut(&n) {
            e.1 = false;
        }
    }

    fn error(&mut self, err: &StreamError, out: &mut Vec<Bytes>) {
        let (_, _, code) = err.kind.openai();
        let mut resp = response_object(&self.id, &self.model, Vec::new(), None, Some(&self.usage))
            .unwrap_or_default();
        resp["status"] = json!("failed");
        resp["error"] = json!({"code": code.unwrap_or("server_error"), "message": err.message});
        self.frame("response.failed", json!({"response": resp}), out);
        self.done = true;
    }
}

impl StreamEncoder for ResponsesEncoder {
    fn on_event(&mut self, ev: StreamEvent) -> Vec<Bytes> {
        let mut out = Vec::new();
        if self.done {
            return out;
        }
        match ev {
            StreamEvent::MessageStart { model, usage, .. } => {
                if !model.is_empty() {
                    self.model = model;
                }
                self.usage.merge(&usage);
                self.ensure_started(&mut out);
            }
            StreamEvent::BlockStart { index, block } => {
                self.ensure_started(&mut out);
                let item = match block {
                    BlockStart::Text => EncItem::Text(String::new()),
                    BlockStart::Reasoning => EncItem::Reasoning(String::new(), None),
                    BlockStart::ToolCall { id, name, .. } => EncItem::Call(ToolCall {
                        id,
                        name,
                        arguments: String::new(),
                        signature: None,
                    }),
                    BlockStart::RedactedReasoning { data } => {
                        EncItem::Redacted(crate::canonical::redacted_for_client(&data))
                    }
                };
                let n = self.items.len();
                self.blocks.insert(index, n);
                let id = self.item_id(n, &item);
                let added = self.item_json(n, &item, "in_progress");
                self.frame(
                    "response.output_item.added",
                    json!({"output_index": n, "item": added}),
                    &mut out,
                );
                match &item {
                    EncItem::Text(_) => self.frame("response.content_part.added", json!({"item_id": id, "output_index": n, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}), &mut out),
                    EncItem::Reasoning(..) => self.frame("response.reasoning_summary_part.added", json!({"item_id": id, "output_index": n, "summary_index": 0, "part": {"type": "summary_text", "text": ""}}), &mut out),
                    EncItem::Redacted(_) | EncItem::Call(_) => {}
                }
                self.items.insert(n, (item, true));
            }
            StreamEvent::BlockDelta { index, delta } => {
                let Some(&n) = self.blocks.get(&index) else {
                    return out;
                };
                let Some((item, _)) = self.items.get(&n) else {
                    return out;
                };
                let id = self.item_id(n, item);
                let frame = match (delta, self.items.get_mut(&n)) {
                    (BlockDelta::Text(t), Some((EncItem::Text(acc), _))) => {
                        acc.push_str(&t);
                        Some((
                            "response.output_text.delta",
                            json!({"item_id": id, "output_index": n, "content_index": 0, "delta": t, "logprobs": []}),
                        ))
                    }
                    (BlockDelta::Signature(sig), Some((EncItem::Reasoning(_, enc), _))) => {
                        let (origin, raw) =
                            ReasoningOrigin::from_client(Protocol::OpenAiResponses, &sig);
                        *enc = Some(origin.for_client(Protocol::OpenAiResponses, &raw));
                        None
                    }
                    (BlockDelta::Reasoning(t), Some((EncItem::Reasoning(acc, _), _))) => {
                        acc.push_str(&t);
                        Some((
                            "response.reasoning_summary_text.delta",
                            json!({"item_id": id, "output_index": n, "summary_index": 0, "delta": t}),
                        ))
                    }
                    (BlockDelta::ToolArguments(a), Some((EncItem::Call(c), _))) => {
                        c.arguments.push_str(&a);
                        Some((
                            "response.function_call_arguments.delta",
                            json!({"item_id": id, "output_index": n, "delta": a}),
                        ))
                    }
                    _ => None,
                };
                if let Some((ty, data)) = frame {
                    self.frame(ty, data, &mut out);
                }
            }
            StreamEvent::BlockStop { index } => {
                if let Some(&n) = self.blocks.get(&index) {
                    self.close(n, &mut out);
                }
            }
            StreamEvent::Usage(u) => self.usage.merge(&u),
            StreamEvent::MessageStop { stop, .. } => {
                self.ensure_started(&mut out);
                let open: Vec<usize> = self.items.keys().copied().collect();
                for n in open {
                    self.close(n, &mut out);
                }
                let output: Vec<Value> = self
                    .items
                    .iter()
                    .map(|(n, (item, _))| self.item_json(*n, item, "completed"))
                    .collect();
                match response_object(&self.id, &self.model, output, Some(stop), Some(&self.usage))
                {
                    Ok(resp) => {
                        let ty = if resp["status"] == "incomplete" {
                            "response.incomplete"
                        } else {
                            "response.completed"
                        };
                        self.frame(ty, json!({"response": resp}), &mut out);
                        self.done = true;
                    }
                    Err(e) => self.error(&e.to_stream_error(), &mut out),
                }
            }
            StreamEvent::Error(err) => {
                self.ensure_started(&mut out);
                self.error(&err, &mut out);
            }
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
