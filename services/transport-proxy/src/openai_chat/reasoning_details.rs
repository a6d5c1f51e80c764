//! Opaque reasoning towards Chat clients, in OpenRouter's `reasoning_details` shape.
//!
//! Why: Chat has no standard field for reasoning signatures, so a Chat client of an Anthropic
//! (or Responses, or Gemini) upstream would otherwise lose the thinking `signature` and every
//! `redacted_thinking` block, and the next turn could not replay them (issue 5 §2: nothing
//! lost, reasoning round-tripped byte for byte). `reasoning_details` is the field clients that
//! speak OpenRouter already keep and send back on the assistant message:
//!
//! * thinking with a signature → `{"type":"reasoning.text","text","signature","index"}`, the
//!   signature tagged with its origin as for every foreign client
//!   ([`ReasoningOrigin::for_client`]);
//! * `redacted_thinking` → `{"type":"reasoning.encrypted","data","index"}`, `data` tagged by
//!   [`redacted_for_client`].
//!
//! The visible `reasoning_content` text is still sent as before. In a stream each entry is
//! emitted once, complete (text and signature together, when the signature arrives), so a client
//! that appends entries and one that merges them by `index` end up with the same list.

use serde_json::{Value, json};

use crate::canonical::{Part, ReasoningOrigin, redacted_for_client, redacted_from_client};
use crate::protocol::Protocol;

/// A `reasoning.text` entry; `signature` is already in its client form.
pub fn text_entry(index: usize, text: &str, signature: &str) -> Value {
    json!({"type": "reasoning.text", "text": text, "signature": signature, "index": index})
}

/// A `reasoning.encrypted` entry for Anthropic `redacted_thinking` `data`.
pub fn redacted_entry(index: usize, data: &str) -> Value {
    json!({"type": "reasoning.encrypted", "data": redacted_for_client(data), "index": index})
}

/// The `reasoning_details` of a response, `None` when no part carries anything opaque (plain
/// Chat reasoning stays as `reasoning_content` only, as before).
pub fn to_client(parts: &[Part]) -> Option<Vec<Value>> {
    let mut out = Vec::new();
    for p in parts {
        match p {
            Part::Reasoning {
                text,
                signature: Some(sig),
                origin,
            } => out.push(text_entry(
                out.len(),
                text,
                &origin.for_client(Protocol::OpenAiChat, sig),
            )),
            Part::RedactedReasoning { data } => out.push(redacted_entry(out.len(), data)),
            _ => {}
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Reasoning parts from an assistant message's `reasoning_details`, in order, and whether any
/// entry carried reasoning text (then `reasoning_content`, which repeats it, is not used).
/// Entries of other shapes (summaries without signature, unknown types) keep their text as
/// unsigned Chat reasoning; nothing is forged.
pub fn from_client(details: &[Value]) -> (Vec<Part>, bool) {
    let mut parts = Vec::new();
    let mut has_text = false;
    for d in details {
        let text = d
            .get("text")
            .or_else(|| d.get("summary"))
            .and_then(Value::as_str);
        match d.get("type").and_then(Value::as_str) {
            Some("reasoning.encrypted") => {
                let data = d.get("data").and_then(Value::as_str).unwrap_or_default();
                match redacted_from_client(data) {
                    Some(data) => parts.push(Part::RedactedReasoning { data }),
                    None => tracing::debug!("encrypted reasoning of unknown origin dropped"),
                }
            }
            _ => {
                has_text |= text.is_some();
                let signature = d.get("signature").and_then(Value::as_str);
                let (origin, signature) = match signature {
                    Some(s) => {
                        let (o, s) = ReasoningOrigin::from_client(Protocol::OpenAiChat, s);
                        (o, Some(s))
                    }
                    None => (ReasoningOrigin::OpenAiChat, None),
                };
                if text.is_some() || signature.is_some() {
                    parts.push(Part::Reasoning {
                        text: text.unwrap_or_default().to_owned(),
                        signature,
                        origin,
                    });
                }
            }
        }
    }
    (parts, has_text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_round_trip_signed_thinking_and_redacted_data_byte_for_byte() {
        let parts = vec![
            Part::Reasoning {
                text: "plan".into(),
                signature: Some("EqQB+/sig==".into()),
                origin: ReasoningOrigin::Anthropic,
            },
            Part::RedactedReasoning {
                data: "EmwKAhgBEgy+/=".into(),
            },
            Part::Reasoning {
                text: "unsigned".into(),
                signature: None,
                origin: ReasoningOrigin::OpenAiChat,
            },
        ];
        let details = to_client(&parts).unwrap_or_default();
        assert_eq!(details.len(), 2, "{details:?}");
        assert_eq!(details[0]["signature"], "babysitter.anthropic.EqQB+/sig==");
        assert_eq!(
            details[1]["data"],
            "babysitter.anthropic-redacted.EmwKAhgBEgy+/="
        );
        let (back, has_text) = from_client(&details);
        assert!(has_text);
        assert_eq!(back, parts[..2].to_vec());
        assert_eq!(to_client(&parts[2..]), None);
        let (none, _) = from_client(&[json!({"type": "reasoning.encrypted", "data": "x"})]);
        assert!(
            none.is_empty(),
            "untagged encrypted data is not forged into a block"
        );
    }
}
