//! Gemini CLI `--output-format stream-json` (`harnesses.md` §6.3): `init`, `message` (the user
//! prompt whole; assistant text as `delta: true` pieces), `tool_use` / `tool_result` linked by
//! `tool_id`, `error`, and `result` with `status` and token stats. Assistant pieces are one
//! message item, open until something else happens; no turn events, so one turn is synthesised
//! from `init` to `result`.

use serde_json::{Value, json};

use super::{NativeParser, output_text, str_field, u64_at};
use crate::events::{Sink, text_part};

#[derive(Debug, Default)]
pub struct Gemini {
    /// The open assistant message: item id and text so far.
    open: Option<(String, String)>,
}

impl Gemini {
    fn close(&mut self, sink: &mut Sink) {
        if let Some((id, text)) = self.open.take() {
            sink.item_completed(
                &id,
                "message",
                "assistant",
                None,
                vec![text_part(&text)],
                "completed",
            );
            sink.outcome.final_text = Some(text);
        }
    }
}

impl NativeParser for Gemini {
    fn event(&mut self, v: &Value, sink: &mut Sink) -> Result<(), String> {
        let kind = str_field(v, "type")?;
        if kind != "message" || v["role"] != "assistant" {
            self.close(sink);
        }
        match kind {
            "init" => {
                if let Some(id) = v["session_id"].as_str() {
                    sink.native_session_id = Some(id.to_owned());
                }
                if let Some(m) = v["model"].as_str() {
                    sink.outcome.model = Some(m.to_owned());
                }
                sink.status("gemini.init", Some(json!({"model": v["model"]})));
                sink.turn_started(None, true);
            }
            "message" => {
                let text = v["content"].as_str().unwrap_or_default();
                match str_field(v, "role")? {
                    "assistant" => match &mut self.open {
                        Some((id, so_far)) => {
                            so_far.push_str(text);
                            let id = id.clone();
                            sink.item_delta(&id, None, text);
                        }
                        None => {
                            let id = sink.item_id();
                            sink.item_started(&id, "message", "assistant", None, &[]);
                            sink.item_delta(&id, None, text);
                            self.open = Some((id, text.to_owned()));
                        }
                    },
                    "user" => sink.message("user", vec![text_part(text)], None),
                    other => return Err(format!("unknown gemini message role `{other}`")),
                }
            }
            "tool_use" => {
                let id = str_field(v, "tool_id")?;
                sink.tool_call(str_field(v, "tool_name")?, &v["parameters"], id);
            }
            "tool_result" => {
                let id = str_field(v, "tool_id")?;
                let failed = v["status"].as_str().is_some_and(|s| s != "success");
                let out = if v["output"].is_null() {
                    &v["error"]
                } else {
                    &v["output"]
                };
                sink.tool_result(id, &output_text(out), failed);
            }
            "error" => {
                let msg = v["message"].as_str().unwrap_or("gemini cli error");
                sink.error(msg, v["severity"].as_str());
            }
            "result" => {
                let o = &mut sink.outcome;
                o.finished = true;
                o.tokens.input = u64_at(v, "/stats/input_tokens");
                o.tokens.output = u64_at(v, "/stats/output_tokens");
                o.tokens.cache_read = u64_at(v, "/stats/cached");
                o.tokens.input = o.tokens.input.saturating_sub(o.tokens.cache_read);
                if o.model.as_deref().is_none_or(|m| m == "auto")
                    && let Some(m) = v["stats"]["models"]
                        .as_object()
                        .and_then(|m| m.keys().next())
                {
                    o.model = Some(m.clone());
                }
                let status = v["status"].as_str().unwrap_or("unknown");
                if status != "success" {
                    let msg = format!(
                        "gemini cli ended with status {status}: {}",
                        output_text(&v["error"])
                    );
                    sink.error(&msg, Some(status));
                    sink.outcome.failure = Some(msg);
                }
                sink.turn_ended(true, Some(json!({"stats": v["stats"]})));
            }
            other => return Err(format!("unknown gemini event type `{other}`")),
        }
        Ok(())
    }

    fn finish(&mut self, sink: &mut Sink) {
        self.close(sink);
        sink.turn_ended(true, None);
    }
}
