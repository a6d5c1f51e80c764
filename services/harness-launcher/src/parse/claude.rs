//! Claude Code `--output-format stream-json --verbose` (`harnesses.md` §6.1).
//!
//! One `assistant` event per content block, emitted before `message_delta` (so no stop reason
//! and only the `message_start` usage): a text block is a whole assistant message, a
//! `tool_use` block a tool call; `user` events carry tool results (and the synthetic Stop-hook
//! feedback); `result` ends the turn with the final text, usage and success. Claude has no turn
//! events, so turns are synthesised: started at `system/init`, ended at `result`.

use serde_json::{Value, json};

use super::{NativeParser, output_text, str_field, u64_at};
use crate::events::{Sink, reasoning_part, text_part};

#[derive(Debug, Default)]
pub struct Claude;

impl NativeParser for Claude {
    fn event(&mut self, v: &Value, sink: &mut Sink) -> Result<(), String> {
        match str_field(v, "type")? {
            "system" => {
                let subtype = v["subtype"].as_str().unwrap_or("unknown");
                if subtype == "init" {
                    if let Some(id) = v["session_id"].as_str() {
                        sink.native_session_id = Some(id.to_owned());
                    }
                    if let Some(m) = v["model"].as_str() {
                        sink.outcome.model.get_or_insert_with(|| m.to_owned());
                    }
                    sink.status(
                        "claude.init",
                        Some(json!({"model": v["model"], "cwd": v["cwd"],
                                    "permission_mode": v["permissionMode"],
                                    "version": v["claude_code_version"]})),
                    );
                    if !sink.turn_open() {
                        sink.turn_started(None, true);
                    }
                } else {
                    // hook_started / hook_response / notification (a blocking Stop hook shows as
                    // "stop-hook-error", harmless: Z3) / compact_boundary / status …
                    sink.status(&format!("claude.system.{subtype}"), None);
                }
            }
            "assistant" => {
                let msg = &v["message"];
                if let Some(m) = msg["model"].as_str() {
                    sink.outcome.model = Some(m.to_owned());
                }
                if !sink.turn_open() {
                    sink.turn_started(None, true);
                }
                let native = msg["id"].as_str();
                let blocks = msg["content"]
                    .as_array()
                    .ok_or("assistant event without message.content")?;
                for b in blocks {
                    match b["type"].as_str().unwrap_or_default() {
                        "text" => {
                            let t = b["text"].as_str().unwrap_or_default();
                            sink.message("assistant", vec![text_part(t)], native);
                        }
                        "thinking" => {
                            let t = b["thinking"].as_str().unwrap_or_default();
                            sink.message("assistant", vec![reasoning_part(t)], native);
                        }
                        "redacted_thinking" => {
                            sink.message("assistant", vec![reasoning_part("[redacted]")], native);
                        }
                        "tool_use" => {
                            let name = str_field(b, "name")?;
                            let id = str_field(b, "id")?;
                            sink.tool_call(name, &b["input"], id);
                            question(name, id, &b["input"], sink);
                        }
                        other => return Err(format!("unknown assistant content block `{other}`")),
                    }
                }
            }
            "user" => {
                let content = &v["message"]["content"];
                if let Some(t) = content.as_str() {
                    sink.message("user", vec![text_part(t)], None);
                    return Ok(());
                }
                let blocks = content
                    .as_array()
                    .ok_or("user event without message.content")?;
                for b in blocks {
                    match b["type"].as_str().unwrap_or_default() {
                        "tool_result" => {
                            let id = str_field(b, "tool_use_id")?;
                            let failed = b["is_error"].as_bool().unwrap_or(false);
                            sink.tool_result(id, &output_text(&b["content"]), failed);
                        }
                        "text" => {
                            let t = b["text"].as_str().unwrap_or_default();
                            sink.message("user", vec![text_part(t)], None);
                        }
                        other => return Err(format!("unknown user content block `{other}`")),
                    }
                }
            }
            "result" => {
                let o = &mut sink.outcome;
                o.finished = true;
                o.final_text = v["result"].as_str().map(str::to_owned);
                o.tokens.input = u64_at(v, "/usage/input_tokens");
                o.tokens.output = u64_at(v, "/usage/output_tokens");
                o.tokens.cache_read = u64_at(v, "/usage/cache_read_input_tokens");
                o.tokens.cache_write = u64_at(v, "/usage/cache_creation_input_tokens");
                if v["is_error"].as_bool().unwrap_or(false) {
                    let subtype = v["subtype"].as_str().unwrap_or("error");
                    let errors = v["errors"]
                        .as_array()
                        .map(|e| {
                            e.iter()
                                .filter_map(Value::as_str)
                                .collect::<Vec<_>>()
                                .join("; ")
                        })
                        .filter(|s| !s.is_empty())
                        .or_else(|| v["result"].as_str().map(str::to_owned))
                        .unwrap_or_default();
                    sink.outcome.api_status = v["api_error_status"].as_u64();
                    let msg = format!("claude code ended with {subtype}: {errors}");
                    sink.error(&msg, Some(subtype));
                    sink.outcome.failure = Some(msg);
                }
                for d in v["permission_denials"].as_array().into_iter().flatten() {
                    let id = d["tool_use_id"].as_str().unwrap_or_default();
                    let action = d["tool_name"].as_str().unwrap_or_default();
                    sink.emit(
                        "permission.requested",
                        json!({"permission_id": id, "action": action, "status": "requested",
                               "metadata": {"input": d["tool_input"]}}),
                    );
                    sink.emit(
                        "permission.resolved",
                        json!({"permission_id": id, "action": action, "status": "reject"}),
                    );
                }
                sink.turn_ended(
                    true,
                    Some(
                        json!({"num_turns": v["num_turns"], "terminal_reason": v["terminal_reason"],
                                "total_cost_usd": v["total_cost_usd"]}),
                    ),
                );
            }
            // Raw Anthropic stream events (only with --include-partial-messages) and rate-limit
            // notices carry nothing the whole-block events do not.
            "stream_event" | "rate_limit_event" => {}
            other => return Err(format!("unknown claude code event type `{other}`")),
        }
        Ok(())
    }

    fn finish(&mut self, sink: &mut Sink) {
        sink.turn_ended(true, None);
    }
}

/// `AskUserQuestion` / `ExitPlanMode` are questions to a human (`adapters-and-hooks.md` §8.3).
fn question(name: &str, id: &str, input: &Value, sink: &mut Sink) {
    let lower = name.to_ascii_lowercase();
    if lower == "askuserquestion" {
        let q = &input["questions"][0];
        let options: Vec<Value> = q["options"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o["label"].as_str().map(|s| Value::String(s.to_owned())))
            .collect();
        sink.emit(
            "question.requested",
            json!({"question_id": id, "prompt": q["question"].as_str().unwrap_or_default(),
                   "options": options, "status": "requested"}),
        );
    } else if lower == "exitplanmode" {
        sink.emit(
            "question.requested",
            json!({"question_id": id, "prompt": input["plan"].as_str().unwrap_or("approve the plan?"),
                   "options": ["approve", "reject"], "status": "requested"}),
        );
    }
}
