//! Gemini stream machines: unique call ids remembered with their signatures, end handling.

use super::*;

fn sse(data: &str) -> SseEvent {
    SseEvent {
        event: None,
        data: data.to_owned(),
    }
}

#[test]
fn two_calls_of_one_function_get_distinct_ids_and_signatures_stored() {
    let store = SignatureStore::memory(8);
    let mut d = GeminiDecoder::new(store.clone());
    let mut evs = d.on_sse(&sse(r#"{"candidates":[{"content":{"role":"model","parts":[
        {"functionCall":{"name":"f","args":{"x":1}},"thoughtSignature":"S1"},
        {"functionCall":{"name":"f","args":{"x":2}},"thoughtSignature":"S2"}]},"finishReason":"STOP"}]}"#));
    evs.extend(d.on_end());
    let ids: Vec<String> = evs
        .iter()
        .filter_map(|e| match e {
            StreamEvent::BlockStart {
                block: BlockStart::ToolCall { id, .. },
                ..
            } => Some(id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
    assert_eq!(
        store.get(&ids[1]).and_then(|c| c.signature).as_deref(),
        Some("S2")
    );
    assert!(matches!(
        evs.last(),
        Some(StreamEvent::MessageStop {
            stop: StopReason::ToolUse,
            ..
        })
    ));
}

#[test]
fn stream_without_finish_reason_is_an_error() {
    let mut d = GeminiDecoder::new(SignatureStore::memory(1));
    d.on_sse(&sse(
        r#"{"candidates":[{"content":{"parts":[{"text":"hi"}]}}]}"#,
    ));
    assert!(matches!(d.on_end().last(), Some(StreamEvent::Error(_))));
}

#[test]
fn encoder_emits_calls_whole_and_a_final_frame() {
    let mut e = GeminiEncoder::new("m".into());
    let mut out = Vec::new();
    out.extend(e.on_event(StreamEvent::BlockStart {
        index: 0,
        block: BlockStart::ToolCall {
            id: "c".into(),
            name: "f".into(),
            signature: Some("S".into()),
        },
    }));
    out.extend(e.on_event(StreamEvent::BlockDelta {
        index: 0,
        delta: BlockDelta::ToolArguments("{\"a\":".into()),
    }));
    assert!(out.is_empty(), "arguments buffered until complete");
    out.extend(e.on_event(StreamEvent::BlockDelta {
        index: 0,
        delta: BlockDelta::ToolArguments("1}".into()),
    }));
    out.extend(e.on_event(StreamEvent::BlockStop { index: 0 }));
    out.extend(e.on_event(StreamEvent::MessageStop {
        stop: StopReason::ToolUse,
        stop_sequence: None,
    }));
    let text: String = out
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    assert!(
        text.contains(
            r#""functionCall":{"id":"c","name":"f","args":{"a":1}},"thoughtSignature":"S""#
        ),
        "{text}"
    );
    assert!(text.contains(r#""finishReason":"STOP""#));
    assert!(e.is_done());
}
