//! The universal agent event stream (`adapters-and-hooks.md` §8.1, schema v0.1) and the sink the
//! native parsers write into.
//!
//! Why a sink with helpers rather than parsers building JSON themselves: the schema's rules —
//! worker-assigned item ids, tool calls and tool results as *separate* items linked by
//! `call_id`, a delta before every completed assistant message, `agent.unparsed` for anything
//! not understood — then hold for all five harnesses by construction, and each parser is only
//! the mapping from its native shapes.

use std::time::SystemTime;

use babysitter_proto::common::v1 as cpb;
use bytes::Bytes;
use serde_json::{Value, json};

/// One universal event before its envelope (ids, sequence, time).
#[derive(Debug, Clone, PartialEq)]
pub struct Ev {
    /// `session.started`, `item.delta`, `agent.unparsed`, …
    pub kind: &'static str,
    pub data: Value,
    /// Filled in by the worker rather than parsed from agent output.
    pub synthetic: bool,
}

/// Token counts as the harness reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

/// What a finished native stream says about the run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// The agent's final answer.
    pub final_text: Option<String>,
    pub tokens: Tokens,
    /// Model as the harness reported it.
    pub model: Option<String>,
    /// The harness said the run failed (Claude `is_error`, Codex `turn.failed`, …).
    pub failure: Option<String>,
    /// The HTTP status of the provider error that ended the run, when the harness says
    /// (Claude Code's `api_error_status`).
    pub api_status: Option<u64>,
    /// The harness's end-of-run marker was seen (`harnesses.md` §6.6).
    pub finished: bool,
    /// Native events understood.
    pub recognised: usize,
    /// Native lines not understood.
    pub unparsed: usize,
}

/// Where parsers put events and what they learn.
#[derive(Debug, Default)]
pub struct Sink {
    pub out: Vec<Ev>,
    pub outcome: Outcome,
    pub native_session_id: Option<String>,
    next_item: u64,
    next_turn: u64,
    open_turn: Option<String>,
}

impl Sink {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn emit(&mut self, kind: &'static str, data: Value) {
        self.out.push(Ev {
            kind,
            data,
            synthetic: false,
        });
    }

    pub fn synthetic(&mut self, kind: &'static str, data: Value) {
        self.out.push(Ev {
            kind,
            data,
            synthetic: true,
        });
    }

    pub fn item_id(&mut self) -> String {
        self.next_item += 1;
        format!("itm_{}", self.next_item)
    }

    pub fn turn_started(&mut self, native: Option<&str>, synthetic: bool) {
        self.next_turn += 1;
        let id = native
            .map(str::to_owned)
            .unwrap_or_else(|| format!("turn_{}", self.next_turn));
        let data = json!({"phase": "started", "turn_id": id});
        self.open_turn = Some(id);
        if synthetic {
            self.synthetic("turn.started", data);
        } else {
            self.emit("turn.started", data);
        }
    }

    /// Ends the open turn, if any (harnesses end turns in several ways; one `turn.ended` each).
    pub fn turn_ended(&mut self, synthetic: bool, metadata: Option<Value>) {
        let Some(id) = self.open_turn.take() else {
            return;
        };
        let mut data = json!({"phase": "ended", "turn_id": id});
        if let Some(m) = metadata {
            data["metadata"] = m;
        }
        if synthetic {
            self.synthetic("turn.ended", data);
        } else {
            self.emit("turn.ended", data);
        }
    }

    pub fn turn_open(&self) -> bool {
        self.open_turn.is_some()
    }

    /// A complete message in one go: started, one delta (assistant text), completed.
    pub fn message(&mut self, role: &str, parts: Vec<Value>, native: Option<&str>) {
        let id = self.item_id();
        self.item_started(&id, "message", role, native, &[]);
        let text: String = parts
            .iter()
            .filter(|p| p["type"] == "text")
            .filter_map(|p| p["text"].as_str())
            .collect();
        if role == "assistant" && !text.is_empty() {
            self.synthetic("item.delta", delta_data(&id, native, &text));
        }
        self.item_completed(&id, "message", role, native, parts, "completed");
    }

    pub fn item_started(
        &mut self,
        id: &str,
        kind: &str,
        role: &str,
        native: Option<&str>,
        parts: &[Value],
    ) {
        let item = item(id, kind, role, native, parts.to_vec(), "in_progress");
        self.emit("item.started", json!({"item": item}));
    }

    pub fn item_delta(&mut self, id: &str, native: Option<&str>, delta: &str) {
        self.emit("item.delta", delta_data(id, native, delta));
    }

    pub fn item_completed(
        &mut self,
        id: &str,
        kind: &str,
        role: &str,
        native: Option<&str>,
        parts: Vec<Value>,
        status: &str,
    ) {
        let item = item(id, kind, role, native, parts, status);
        self.emit("item.completed", json!({"item": item}));
    }

    /// A tool call as its own item (`arguments` is JSON text, as the schema wants).
    pub fn tool_call(&mut self, name: &str, arguments: &Value, call_id: &str) {
        let id = self.item_id();
        let args = match arguments {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let part =
            json!({"type": "tool_call", "name": name, "arguments": args, "call_id": call_id});
        self.item_started(&id, "tool_call", "assistant", Some(call_id), &[]);
        self.item_completed(
            &id,
            "tool_call",
            "assistant",
            Some(call_id),
            vec![part],
            "completed",
        );
    }

    /// A tool result as its own item, linked to its call by `call_id`.
    pub fn tool_result(&mut self, call_id: &str, output: &str, failed: bool) {
        let id = self.item_id();
        let part = json!({"type": "tool_result", "call_id": call_id, "output": output});
        self.item_started(&id, "tool_result", "tool", Some(call_id), &[]);
        let status = if failed { "failed" } else { "completed" };
        self.item_completed(
            &id,
            "tool_result",
            "tool",
            Some(call_id),
            vec![part],
            status,
        );
    }

    /// A status item (native lifecycle events that carry no content: init, hooks, retries).
    pub fn status(&mut self, label: &str, detail: Option<Value>) {
        let id = self.item_id();
        let mut part = json!({"type": "status", "label": label});
        if let Some(d) = detail {
            part["detail"] = Value::String(match d {
                Value::String(s) => s,
                other => other.to_string(),
            });
        }
        self.item_completed(&id, "status", "system", None, vec![part], "completed");
    }

    pub fn error(&mut self, message: &str, code: Option<&str>) {
        let mut data = json!({"message": message});
        if let Some(c) = code {
            data["code"] = Value::String(c.to_owned());
        }
        self.emit("error", data);
    }

    /// Something in the native stream was not understood (tests assert there are none).
    pub fn unparsed(&mut self, error: &str, location: &str) {
        self.outcome.unparsed += 1;
        self.synthetic(
            "agent.unparsed",
            json!({"error": error, "location": location}),
        );
    }
}

fn delta_data(id: &str, native: Option<&str>, delta: &str) -> Value {
    let mut d = json!({"item_id": id, "delta": delta});
    if let Some(n) = native {
        d["native_item_id"] = Value::String(n.to_owned());
    }
    d
}

fn item(
    id: &str,
    kind: &str,
    role: &str,
    native: Option<&str>,
    content: Vec<Value>,
    status: &str,
) -> Value {
    let mut it =
        json!({"item_id": id, "kind": kind, "role": role, "content": content, "status": status});
    if let Some(n) = native {
        it["native_item_id"] = Value::String(n.to_owned());
    }
    it
}

/// `{"type":"text","text":…}`.
pub fn text_part(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

/// `{"type":"reasoning","text":…,"visibility":"public"}`.
pub fn reasoning_part(text: &str) -> Value {
    json!({"type": "reasoning", "text": text, "visibility": "public"})
}

/// Puts envelopes on events: ids, a per-session sequence starting at 1, time.
#[derive(Debug)]
pub struct Envelope {
    pub session_id: String,
    seq: u64,
}

impl Envelope {
    pub fn new(session_id: impl Into<String>) -> Self {
        Self {
            session_id: session_id.into(),
            seq: 0,
        }
    }

    pub fn wrap(&mut self, ev: Ev, native_session_id: Option<&str>) -> cpb::AgentEvent {
        self.seq += 1;
        let source = if ev.synthetic {
            cpb::AgentEventSource::Daemon
        } else {
            cpb::AgentEventSource::Agent
        };
        cpb::AgentEvent {
            event_id: format!("{}-{}", self.session_id, self.seq),
            sequence: self.seq,
            time: Some(SystemTime::now().into()),
            session_id: self.session_id.clone(),
            native_session_id: native_session_id.map(str::to_owned),
            synthetic: ev.synthetic,
            source: source as i32,
            r#type: ev.kind.to_owned(),
            data_json: Bytes::from(serde_json::to_vec(&ev.data).unwrap_or_default()),
            raw_json: Bytes::new(),
        }
    }
}
