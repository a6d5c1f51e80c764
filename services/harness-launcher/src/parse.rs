//! Native stream parsers: each harness's JSON-lines output (`harnesses.md` §6) → universal
//! events ([`crate::events`]).
//!
//! Harness output is outside input: a line that is not JSON, not an object, or an event type a
//! parser does not know becomes one `agent.unparsed` event naming the line, never a panic and
//! never a silently dropped line. Known events that carry nothing for the universal stream are
//! consumed explicitly (listed in each parser), so "zero `agent.unparsed`" in the real-harness
//! tests means every line was understood.

use serde_json::Value;

use crate::events::Sink;
use crate::harness::HarnessKind;

mod claude;
mod codex;
mod gemini;
mod opencode;
mod pi;

/// One harness's native-event mapping.
pub trait NativeParser: Send {
    /// Maps one native event; `Err` = not understood (becomes `agent.unparsed`).
    fn event(&mut self, v: &Value, sink: &mut Sink) -> Result<(), String>;
    /// The stream ended: close what is still open.
    fn finish(&mut self, _sink: &mut Sink) {}
}

pub fn parser_for(kind: HarnessKind) -> Box<dyn NativeParser> {
    match kind {
        HarnessKind::ClaudeCode => Box::new(claude::Claude),
        HarnessKind::Codex => Box::new(codex::Codex::default()),
        HarnessKind::GeminiCli => Box::new(gemini::Gemini::default()),
        HarnessKind::Pi => Box::new(pi::Pi::default()),
        HarnessKind::OpenCode => Box::new(opencode::OpenCode),
    }
}

/// A parser plus line handling.
pub struct LineParser {
    inner: Box<dyn NativeParser>,
    line_no: usize,
    pub sink: Sink,
}

impl LineParser {
    pub fn new(kind: HarnessKind) -> Self {
        Self {
            inner: parser_for(kind),
            line_no: 0,
            sink: Sink::new(),
        }
    }

    /// One stdout line; blank lines are ignored.
    pub fn line(&mut self, line: &str) {
        self.line_no += 1;
        let line = line.trim();
        if line.is_empty() {
            return;
        }
        let location = format!("stdout line {}", self.line_no);
        match serde_json::from_str::<Value>(line) {
            Ok(v) if v.is_object() => match self.inner.event(&v, &mut self.sink) {
                Ok(()) => self.sink.outcome.recognised += 1,
                Err(e) => self.sink.unparsed(&e, &location),
            },
            Ok(_) => self.sink.unparsed("not a JSON object", &location),
            Err(e) => self.sink.unparsed(&format!("not JSON: {e}"), &location),
        }
    }

    pub fn finish(&mut self) {
        self.inner.finish(&mut self.sink);
    }

    /// Events produced since the last call.
    pub fn take(&mut self) -> Vec<crate::events::Ev> {
        std::mem::take(&mut self.sink.out)
    }
}

/// `v[key]` as a string, or an error naming the missing field.
fn str_field<'a>(v: &'a Value, key: &str) -> Result<&'a str, String> {
    v[key]
        .as_str()
        .ok_or_else(|| format!("field `{key}` missing or not a string"))
}

fn u64_at(v: &Value, pointer: &str) -> u64 {
    v.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

/// Text of a tool output that may be a string, a list of text blocks, or any JSON.
fn output_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p["text"].as_str() {
                Some(t) => t.to_owned(),
                None => p.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
