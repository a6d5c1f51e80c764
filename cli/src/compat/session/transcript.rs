//! The agent's last message, as the stop hook and `session:last-message` read it: the text of
//! the last assistant entry of a JSONL transcript, and the `<promise>` it may carry (F17).

use serde_json::Value;

/// The first `<promise>…</promise>`, trimmed, whitespace runs collapsed (F17).
pub fn extract_promise(text: &str) -> Option<String> {
    let start = text.find("<promise>")? + "<promise>".len();
    let len = text[start..].find("</promise>")?;
    Some(
        text[start..start + len]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// The text of the last assistant entry of a JSONL transcript (`role`, `type` or
/// `message.role` is `assistant`): its `text` blocks joined by `\n`; `None` when there is no
/// assistant entry, its content is not a block array, or it has no text block.
pub fn transcript_text(raw: &str) -> Option<String> {
    let last = raw
        .split('\n')
        .rev()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| {
            v.get("role").and_then(Value::as_str) == Some("assistant")
                || v.get("type").and_then(Value::as_str) == Some("assistant")
                || v.get("message")
                    .and_then(|m| m.get("role"))
                    .and_then(Value::as_str)
                    == Some("assistant")
        })?;
    let content = match last.get("message") {
        Some(m) if m.is_object() => m.get("content"),
        _ => last.get("content"),
    };
    let parts: Vec<&str> = content?
        .as_array()?
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promise_is_first_trimmed_and_collapsed() {
        assert_eq!(
            extract_promise("x <promise>\n  ab \n\t cd  </promise> <promise>zz</promise>"),
            Some("ab cd".into())
        );
        assert_eq!(extract_promise("<promise>unterminated"), None);
        assert_eq!(extract_promise("none"), None);
    }
}
