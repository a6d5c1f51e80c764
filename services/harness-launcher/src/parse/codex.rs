//! Codex `exec --json` (`harnesses.md` §6.2): `thread.started`, `turn.started` /
//! `turn.completed` (usage) / `turn.failed`, and `item.started|updated|completed` whose
//! `item.type` says what happened. A `command_execution` (or MCP / file-change / web-search)
//! item becomes a tool-call item when it starts and a separate tool-result item when it
//! completes; an `error` *item* is a warning (e.g. unknown model metadata, Z7) and the run goes
//! on, while a top-level `error` + `turn.failed` is a failure.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::{NativeParser, output_text, str_field, u64_at};
use crate::events::{Sink, reasoning_part, text_part};

#[derive(Debug, Default)]
pub struct Codex {
    /// Tool items whose call was already emitted.
    called: HashSet<String>,
}

impl Codex {
    fn call(&mut self, item: &Value, id: &str, sink: &mut Sink) -> Result<(), String> {
        if !self.called.insert(id.to_owned()) {
            return Ok(());
        }
        let (name, args) = match str_field(item, "type")? {
            "command_execution" => ("shell", json!({"command": item["command"]})),
            "file_change" => ("apply_patch", json!({"changes": item["changes"]})),
            "mcp_tool_call" => (
                item["tool"].as_str().unwrap_or("mcp_tool"),
                item["arguments"].clone(),
            ),
            "web_search" => ("web_search", json!({"query": item["query"]})),
            other => return Err(format!("not a tool item `{other}`")),
        };
        sink.tool_call(name, &args, id);
        Ok(())
    }
}

impl NativeParser for Codex {
    fn event(&mut self, v: &Value, sink: &mut Sink) -> Result<(), String> {
        match str_field(v, "type")? {
            "thread.started" => {
                let id = str_field(v, "thread_id")?;
                sink.native_session_id = Some(id.to_owned());
                sink.status("codex.thread.started", None);
            }
            "turn.started" => sink.turn_started(None, false),
            "turn.completed" => {
                let t = &mut sink.outcome.tokens;
                // Codex counts cached input inside input_tokens; keep them apart (counted once).
                let cached = u64_at(v, "/usage/cached_input_tokens");
                t.input += u64_at(v, "/usage/input_tokens").saturating_sub(cached);
                t.cache_read += cached;
                t.cache_write += u64_at(v, "/usage/cache_write_input_tokens");
                t.output += u64_at(v, "/usage/output_tokens");
                sink.outcome.finished = true;
                sink.turn_ended(false, Some(json!({"usage": v["usage"]})));
            }
            "turn.failed" => {
                let msg = v["error"]["message"]
                    .as_str()
                    .unwrap_or("codex turn failed")
                    .to_owned();
                sink.error(&msg, Some("turn.failed"));
                sink.outcome.failure = Some(msg);
                sink.outcome.finished = true;
                sink.turn_ended(false, None);
            }
            "error" => {
                let msg = v["message"].as_str().unwrap_or("codex error");
                sink.error(msg, None);
            }
            kind @ ("item.started" | "item.updated" | "item.completed") => {
                let item = &v["item"];
                let id = str_field(item, "id")?;
                let done = kind == "item.completed";
                match str_field(item, "type")? {
                    "agent_message" => {
                        if done {
                            let t = item["text"].as_str().unwrap_or_default();
                            sink.outcome.final_text = Some(t.to_owned());
                            sink.message("assistant", vec![text_part(t)], Some(id));
                        }
                    }
                    "reasoning" => {
                        if done {
                            let t = item["text"].as_str().unwrap_or_default();
                            sink.message("assistant", vec![reasoning_part(t)], Some(id));
                        }
                    }
                    "command_execution" | "file_change" | "mcp_tool_call" | "web_search" => {
                        self.call(item, id, sink)?;
                        if done {
                            let failed = item["status"] == "failed"
                                || item["exit_code"].as_i64().is_some_and(|c| c != 0)
                                || !item["error"].is_null();
                            let output = if !item["aggregated_output"].is_null() {
                                output_text(&item["aggregated_output"])
                            } else if !item["result"].is_null() {
                                output_text(&item["result"])
                            } else if !item["error"].is_null() {
                                output_text(&item["error"])
                            } else {
                                output_text(&item["status"])
                            };
                            sink.tool_result(id, &output, failed);
                        }
                    }
                    "todo_list" => sink.status("codex.todo_list", Some(item["items"].clone())),
                    "error" => {
                        if done {
                            let msg = item["message"].as_str().unwrap_or("codex error item");
                            sink.error(msg, Some("item"));
                        }
                    }
                    other => return Err(format!("unknown codex item type `{other}`")),
                }
            }
            other => return Err(format!("unknown codex event type `{other}`")),
        }
        Ok(())
    }

    fn finish(&mut self, sink: &mut Sink) {
        sink.turn_ended(true, None);
    }
}
