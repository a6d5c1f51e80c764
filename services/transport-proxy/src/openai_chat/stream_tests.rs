//! Anthropic upstream stream → Chat client stream, through the canonical events (T20, T21,
//! T22, T29, parallel tool indices).

use serde_json::{Value, json};

use super::*;
use crate::anthropic::stream::AnthropicDecoder;
use crate::pipeline::translate_chunks;

fn run(chunks: &[&[u8]], include_usage: bool) -> Vec<String> {
    let enc = ChatEncoder::new("chatcmpl-test".into(), "gpt-front".into(), include_usage);
    translate_chunks(AnthropicDecoder::new(), enc, chunks)
        .iter()
        .map(|b| {
            String::from_utf8_lossy(b)
                .trim_start_matches("data: ")
                .trim_end()
                .to_owned()
        })
        .collect()
}

fn json_of(frames: &[String]) -> Vec<Value> {
    frames
        .iter()
        .filter_map(|f| serde_json::from_str(f).ok())
        .collect()
}

/// T22/T21/T20: input and cache counts from `message_start` reach the Chat usage chunk;
/// output from `message_delta`; the tool call keeps index 0 and its fragments; reasoning is not
/// content; the stream ends with `[DONE]`.
#[test]
fn t22_anthropic_stream_to_chat_keeps_usage_and_tool_fragments() {
    let sse = include_bytes!("../../tests/fixtures/anthropic_tool_stream.sse");
    let frames = run(&sse.chunks(11).collect::<Vec<_>>(), true);
    assert_eq!(frames.last().map(String::as_str), Some("[DONE]"));
    let chunks = json_of(&frames);
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role":"assistant","content":""})
    );
    assert_eq!(chunks[0]["id"], "msg_1");
    let deltas: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0).map(|c| &c["delta"]))
        .collect();
    assert!(deltas.contains(&&json!({"reasoning_content":"hmm"})));
    assert!(deltas.contains(&&json!({"content":"Checking."})));
    assert!(deltas.contains(&&json!({"tool_calls":[{"index":0,"id":"toolu_9","type":"function","function":{"name":"get_weather","arguments":""}}]})));
    let args: String = deltas
        .iter()
        .filter_map(|d| d["tool_calls"][0]["function"]["arguments"].as_str())
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).ok(),
        Some(json!({"city":"Paris"}))
    );
    let finish = chunks
        .iter()
        .find(|c| c["choices"][0]["finish_reason"].is_string());
    assert_eq!(
        finish.map(|c| &c["choices"][0]["finish_reason"]),
        Some(&json!("tool_calls"))
    );
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens":100,"completion_tokens":25,"total_tokens":125,"prompt_tokens_details":{"cached_tokens":50}})
    );
}

/// Without `include_usage` there is no usage chunk.
#[test]
fn no_usage_chunk_unless_requested() {
    let sse = include_bytes!("../../tests/fixtures/anthropic_tool_stream.sse");
    let frames = run(&[sse], false);
    assert!(json_of(&frames).iter().all(|c| c.get("usage").is_none()));
}

fn ev(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// T20: final input/cache values that appear only on `message_delta` win (set semantics).
#[test]
fn t20_usage_only_on_message_delta_is_used() {
    let body = [
        ev("message_start", json!({"type":"message_start","message":{"id":"m","model":"c","content":[],"usage":{"input_tokens":0,"output_tokens":0}}})),
        ev("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})),
        ev("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}})),
        ev("content_block_stop", json!({"type":"content_block_stop","index":0})),
        ev("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":30,"cache_read_input_tokens":70,"output_tokens":5}})),
        ev("message_stop", json!({"type":"message_stop"})),
    ]
    .concat();
    let chunks = json_of(&run(&[body.as_bytes()], true));
    assert_eq!(chunks[chunks.len() - 1]["usage"]["prompt_tokens"], 100);
    assert_eq!(
        chunks[chunks.len() - 1]["usage"]["prompt_tokens_details"]["cached_tokens"],
        70
    );
    assert_eq!(chunks[chunks.len() - 1]["usage"]["completion_tokens"], 5);
}

/// T29: an Anthropic `event: error` mid-stream ⇒ a Chat `data: {"error":…}` frame, no `[DONE]`;
/// a body cut before `message_stop` ⇒ the same, never a clean finish.
#[test]
fn t29_mid_stream_error_becomes_chat_error_frame() {
    let start = ev(
        "message_start",
        json!({"type":"message_start","message":{"id":"m","model":"c","content":[],"usage":{"input_tokens":1}}}),
    );
    let body = [
        start.clone(),
        ev(
            "error",
            json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
        ),
    ]
    .concat();
    let frames = run(&[body.as_bytes()], true);
    let last: Value = serde_json::from_str(&frames[frames.len() - 1]).unwrap_or_default();
    assert_eq!(
        last,
        json!({"error":{"message":"Overloaded","type":"server_error","param":null,"code":"server_error"}})
    );
    assert!(!frames.iter().any(|f| f == "[DONE]"));

    let frames = run(&[start.as_bytes()], true);
    let last: Value = serde_json::from_str(&frames[frames.len() - 1]).unwrap_or_default();
    assert!(last.get("error").is_some(), "{frames:?}");
}

/// T17 streaming: pause_turn cannot be reported to a Chat client: an error frame, not `stop`.
#[test]
fn t17_pause_turn_is_an_error_towards_chat() {
    let body = [
        ev("message_start", json!({"type":"message_start","message":{"id":"m","model":"c","content":[],"usage":{"input_tokens":1}}})),
        ev("message_delta", json!({"type":"message_delta","delta":{"stop_reason":"pause_turn"},"usage":{"output_tokens":1}})),
        ev("message_stop", json!({"type":"message_stop"})),
    ]
    .concat();
    let frames = run(&[body.as_bytes()], false);
    let last: Value = serde_json::from_str(&frames[frames.len() - 1]).unwrap_or_default();
    assert!(last.get("error").is_some(), "{frames:?}");
}
