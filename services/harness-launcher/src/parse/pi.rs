//! Pi `--mode json` (`harnesses.md` §6.4): a `session` header, then the agent's events —
//! `turn_start` / `turn_end`, `message_start` / `message_update` (text deltas in
//! `assistantMessageEvent`) / `message_end` per message (roles `user`, `assistant`,
//! `toolResult`), `tool_execution_start|update|end`, `agent_end`. Tool calls are the `toolCall`
//! parts of the assistant message (emitted at `message_end`), results come from
//! `tool_execution_end`; `toolResult` messages repeat them and are consumed silently.

use serde_json::{Value, json};

use super::{NativeParser, output_text, str_field, u64_at};
use crate::events::{Sink, reasoning_part, text_part};

#[derive(Debug, Default)]
pub struct Pi {
    /// The open assistant message item.
    open: Option<String>,
}

impl NativeParser for Pi {
    fn event(&mut self, v: &Value, sink: &mut Sink) -> Result<(), String> {
        match str_field(v, "type")? {
            "session" => {
                if let Some(id) = v["id"].as_str() {
                    sink.native_session_id = Some(id.to_owned());
                }
                sink.status(
                    "pi.session",
                    Some(json!({"cwd": v["cwd"], "version": v["version"]})),
                );
            }
            "agent_start" => sink.status("pi.agent_start", None),
            "turn_start" => sink.turn_started(None, false),
            "turn_end" => sink.turn_ended(false, None),
            "message_start" => {
                if v["message"]["role"] == "assistant" {
                    let id = sink.item_id();
                    sink.item_started(&id, "message", "assistant", None, &[]);
                    self.open = Some(id);
                }
            }
            "message_update" => {
                let e = &v["assistantMessageEvent"];
                if e["type"] == "text_delta"
                    && let (Some(id), Some(d)) = (self.open.clone(), e["delta"].as_str())
                {
                    sink.item_delta(&id, None, d);
                }
            }
            "message_end" => {
                let m = &v["message"];
                match str_field(m, "role")? {
                    "assistant" => self.assistant_end(m, sink),
                    "user" => {
                        let text = match &m["content"] {
                            Value::String(s) => s.clone(),
                            other => output_text(other),
                        };
                        sink.message("user", vec![text_part(&text)], None);
                    }
                    "toolResult" => {}
                    other => return Err(format!("unknown pi message role `{other}`")),
                }
            }
            "tool_execution_start" | "tool_execution_update" => {}
            "tool_execution_end" => {
                let id = str_field(v, "toolCallId")?;
                let failed = v["isError"].as_bool().unwrap_or(false);
                let out = output_text(&v["result"]["content"]);
                sink.tool_result(id, &out, failed);
            }
            "agent_end" => sink.outcome.finished = true,
            other if other.starts_with("auto_compaction_") || other.starts_with("auto_retry_") => {
                sink.status(&format!("pi.{other}"), None);
            }
            other => return Err(format!("unknown pi event type `{other}`")),
        }
        Ok(())
    }

    fn finish(&mut self, sink: &mut Sink) {
        sink.turn_ended(true, None);
    }
}

impl Pi {
    fn assistant_end(&mut self, m: &Value, sink: &mut Sink) {
        let id = self.open.take().unwrap_or_else(|| {
            let id = sink.item_id();
            sink.item_started(&id, "message", "assistant", None, &[]);
            id
        });
        let mut parts = Vec::new();
        let mut calls = Vec::new();
        let mut text = String::new();
        for p in m["content"].as_array().into_iter().flatten() {
            match p["type"].as_str().unwrap_or_default() {
                "text" => {
                    let t = p["text"].as_str().unwrap_or_default();
                    text.push_str(t);
                    parts.push(text_part(t));
                }
                "thinking" => {
                    parts.push(reasoning_part(p["thinking"].as_str().unwrap_or_default()))
                }
                "toolCall" => calls.push(p.clone()),
                _ => parts.push(json!({"type": "json", "json": p})),
            }
        }
        sink.item_completed(&id, "message", "assistant", None, parts, "completed");
        for c in calls {
            let call_id = c["id"].as_str().unwrap_or_default();
            sink.tool_call(
                c["name"].as_str().unwrap_or_default(),
                &c["arguments"],
                call_id,
            );
        }
        let t = &mut sink.outcome.tokens;
        t.input += u64_at(m, "/usage/input");
        t.output += u64_at(m, "/usage/output");
        t.cache_read += u64_at(m, "/usage/cacheRead");
        t.cache_write += u64_at(m, "/usage/cacheWrite");
        if let Some(model) = m["model"].as_str() {
            sink.outcome.model = Some(model.to_owned());
        }
        if !text.is_empty() {
            sink.outcome.final_text = Some(text);
        }
        if m["stopReason"] == "error" || m["stopReason"] == "aborted" {
            let msg = m["errorMessage"]
                .as_str()
                .unwrap_or("pi: the model call failed")
                .to_owned();
            sink.error(&msg, m["stopReason"].as_str());
            sink.outcome.failure = Some(msg);
        }
    }
}
