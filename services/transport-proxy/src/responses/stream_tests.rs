//! Responses stream machines: sequence numbers, per-item output indices, terminal events.

use serde_json::Value;

use super::*;
use crate::openai_chat::stream::ChatDecoder;
use crate::pipeline::translate_chunks;

fn frames(chunks: &[&[u8]]) -> Vec<(String, Value)> {
    translate_chunks(
        ChatDecoder::new(),
        ResponsesEncoder::new("resp_t".into(), "m".into()),
        chunks,
    )
    .iter()
    .map(|b| {
        let t = String::from_utf8_lossy(b).into_owned();
        let name = t
            .lines()
            .next()
            .unwrap_or_default()
            .trim_start_matches("event: ")
            .to_owned();
        let data = t
            .lines()
            .nth(1)
            .unwrap_or_default()
            .trim_start_matches("data: ")
            .to_owned();
        (name, serde_json::from_str(&data).unwrap_or(Value::Null))
    })
    .collect()
}

#[test]
fn chat_text_then_call_becomes_two_items_with_increasing_sequence() {
    let f = frames(&[
        b"data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n",
        b"data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"c\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}}]}\n\n",
        b"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":2}}\n\n",
        b"data: [DONE]\n\n",
    ]);
    let names: Vec<&str> = f.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..2], ["response.created", "response.in_progress"]);
    assert_eq!(names.last(), Some(&"response.completed"));
    let seq: Vec<u64> = f
        .iter()
        .filter_map(|(_, d)| d["sequence_number"].as_u64())
        .collect();
    assert!(seq.windows(2).all(|w| w[1] == w[0] + 1), "{seq:?}");
    let added: Vec<(u64, String)> = f
        .iter()
        .filter(|(n, _)| n == "response.output_item.added")
        .map(|(_, d)| {
            (
                d["output_index"].as_u64().unwrap_or(99),
                d["item"]["type"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    assert_eq!(
        added,
        [(0, "message".to_owned()), (1, "function_call".to_owned())]
    );
    let done = &f.last().map(|e| e.1.clone()).unwrap_or_default()["response"];
    assert_eq!(done["output"].as_array().map(Vec::len), Some(2));
    assert_eq!(done["usage"]["input_tokens"], 4);
}

#[test]
fn upstream_ending_without_completed_is_an_error() {
    let mut d = ResponsesDecoder::new();
    let ev = SseEvent {
        event: None,
        data: "{\"type\":\"response.created\",\"response\":{\"id\":\"r\",\"model\":\"m\"}}".into(),
    };
    assert_eq!(d.on_sse(&ev).len(), 1);
    assert!(matches!(d.on_end().as_slice(), [StreamEvent::Error(_)]));
}
