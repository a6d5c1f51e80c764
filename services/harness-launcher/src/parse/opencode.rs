//! OpenCode `run --format json` (`harnesses.md` §6.5): `step_start` / `step_finish` around each
//! model step (usage on the finish; `reason: "stop"` on the last), `text` and `reasoning` parts,
//! `tool_use` parts whose `state` holds input, output and status (one line per finished tool:
//! a tool-call item and a separate tool-result item), and `error`. Every line carries the
//! `sessionID`. A session has several steps; one universal turn spans them all, since the
//! harness ends its turn only with the `stop` step.

use serde_json::{Value, json};

use super::{NativeParser, output_text, str_field, u64_at};
use crate::events::{Sink, reasoning_part, text_part};

#[derive(Debug, Default)]
pub struct OpenCode;

impl NativeParser for OpenCode {
    fn event(&mut self, v: &Value, sink: &mut Sink) -> Result<(), String> {
        if sink.native_session_id.is_none()
            && let Some(id) = v["sessionID"].as_str()
        {
            sink.native_session_id = Some(id.to_owned());
        }
        let part = &v["part"];
        match str_field(v, "type")? {
            "step_start" => {
                if !sink.turn_open() {
                    sink.turn_started(None, true);
                }
                sink.status("opencode.step_start", None);
            }
            "step_finish" => {
                let t = &mut sink.outcome.tokens;
                t.input += u64_at(part, "/tokens/input");
                t.output += u64_at(part, "/tokens/output");
                t.cache_read += u64_at(part, "/tokens/cache/read");
                t.cache_write += u64_at(part, "/tokens/cache/write");
                let reason = part["reason"].as_str().unwrap_or_default();
                sink.status("opencode.step_finish", Some(json!({"reason": reason})));
                if reason == "stop" {
                    sink.outcome.finished = true;
                    sink.turn_ended(true, None);
                }
            }
            "text" => {
                let t = part["text"].as_str().unwrap_or_default();
                sink.outcome.final_text = Some(t.to_owned());
                sink.message("assistant", vec![text_part(t)], part["id"].as_str());
            }
            "reasoning" => {
                let t = part["text"].as_str().unwrap_or_default();
                sink.message("assistant", vec![reasoning_part(t)], part["id"].as_str());
            }
            "tool_use" => {
                let call_id = part["callID"]
                    .as_str()
                    .or_else(|| part["id"].as_str())
                    .ok_or("tool_use without callID")?;
                let state = &part["state"];
                let tool = part["tool"].as_str().unwrap_or("tool");
                sink.tool_call(tool, &state["input"], call_id);
                let status = state["status"].as_str().unwrap_or_default();
                if matches!(status, "completed" | "error") {
                    let out = if status == "error" {
                        &state["error"]
                    } else {
                        &state["output"]
                    };
                    sink.tool_result(call_id, &output_text(out), status == "error");
                }
            }
            "error" => {
                let e = &v["error"];
                let msg = e["data"]["message"]
                    .as_str()
                    .or_else(|| e["message"].as_str())
                    .map(str::to_owned)
                    .unwrap_or_else(|| e.to_string());
                sink.error(&msg, e["name"].as_str());
                sink.outcome.failure = Some(msg);
            }
            other => return Err(format!("unknown opencode event type `{other}`")),
        }
        Ok(())
    }

    fn finish(&mut self, sink: &mut Sink) {
        sink.turn_ended(true, None);
    }
}
