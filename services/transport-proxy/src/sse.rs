//! Incremental server-sent-events parsing (upstream side) and frame writing (client side).
//!
//! Why hand-written: upstream bodies arrive in arbitrary chunks (a frame, a UTF-8 character, or
//! a `\r\n` pair may be split across reads), and the proxy must not buffer a whole stream. The
//! parser keeps only the unfinished tail and yields complete events as soon as their blank line
//! arrives. Only `event:` and `data:` matter to the LLM protocols; `id:`, `retry:` and comments
//! are ignored.

use bytes::Bytes;

/// One parsed SSE event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// Feed it chunks, get complete events back.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
}

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `chunk` and returns the events it completed.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        self.buf.extend_from_slice(chunk);
        let mut out = Vec::new();
        let mut start = 0;
        while let Some(pos) = self.buf[start..].iter().position(|&b| b == b'\n') {
            let end = start + pos;
            let mut line = &self.buf[start..end];
            if line.last() == Some(&b'\r') {
                line = &line[..line.len() - 1];
            }
            let line = String::from_utf8_lossy(line).into_owned();
            start = end + 1;
            self.line(&line, &mut out);
        }
        self.buf.drain(..start);
        out
    }

    /// Ends the input: a final event without its blank line is still delivered.
    pub fn finish(&mut self) -> Vec<SseEvent> {
        let mut out = Vec::new();
        if !self.buf.is_empty() {
            let rest = String::from_utf8_lossy(&self.buf)
                .trim_end_matches('\r')
                .to_owned();
            self.buf.clear();
            self.line(&rest, &mut out);
        }
        self.line("", &mut out);
        out
    }

    fn line(&mut self, line: &str, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            if !self.data.is_empty() {
                out.push(SseEvent {
                    event: self.event.take(),
                    data: self.data.join("\n"),
                });
                self.data.clear();
            }
            self.event = None;
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => self.data.push(value.to_owned()),
            _ => {}
        }
    }
}

/// `event: <name>\ndata: <json>\n\n` (Anthropic framing).
pub fn named_frame(event: &str, data: &serde_json::Value) -> Bytes {
    Bytes::from(format!("event: {event}\ndata: {data}\n\n"))
}

/// `data: <json>\n\n` (Chat framing).
pub fn data_frame(data: &serde_json::Value) -> Bytes {
    Bytes::from(format!("data: {data}\n\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_and_crlf() {
        let mut p = SseParser::new();
        let input = b"event: a\r\ndata: {\"x\":1}\r\n\r\n: comment\ndata: [DONE]\n\ndata: tail";
        let mut events = Vec::new();
        for chunk in input.chunks(3) {
            events.extend(p.push(chunk));
        }
        events.extend(p.finish());
        assert_eq!(
            events,
            vec![
                SseEvent {
                    event: Some("a".into()),
                    data: "{\"x\":1}".into()
                },
                SseEvent {
                    event: None,
                    data: "[DONE]".into()
                },
                SseEvent {
                    event: None,
                    data: "tail".into()
                },
            ]
        );
    }

    #[test]
    fn multibyte_character_split_is_kept() {
        let mut p = SseParser::new();
        let bytes = "data: héllo\n\n".as_bytes();
        let mut events = p.push(&bytes[..8]);
        events.extend(p.push(&bytes[8..]));
        assert_eq!(events[0].data, "héllo");
    }
}
