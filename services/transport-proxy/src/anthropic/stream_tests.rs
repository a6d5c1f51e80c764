//! Chat upstream stream → Anthropic client stream, through the canonical events (T11, T13,
//! T18, T21, T29).

use serde_json::{Value, json};

use super::*;
use crate::openai_chat::stream::ChatDecoder;
use crate::pipeline::translate_chunks;

/// Frames as `(event name, data)`.
fn run(chunks: &[&[u8]]) -> Vec<(String, Value)> {
    let enc = AnthropicEncoder::new("msg_test".into(), "claude-front".into());
    translate_chunks(ChatDecoder::new(), enc, chunks)
        .iter()
        .map(|b| {
            let text = String::from_utf8_lossy(b);
            let mut lines = text.lines();
            let ev = lines
                .next()
                .unwrap_or_default()
                .trim_start_matches("event: ")
                .to_owned();
            let data = lines
                .next()
                .unwrap_or_default()
                .trim_start_matches("data: ");
            (ev, serde_json::from_str(data).unwrap_or(Value::Null))
        })
        .collect()
}

fn names(frames: &[(String, Value)]) -> Vec<&str> {
    frames.iter().map(|(e, _)| e.as_str()).collect()
}

/// Input JSON of each tool_use block, reassembled as a client SDK does.
fn tool_inputs(frames: &[(String, Value)]) -> Vec<(String, Value)> {
    let mut out: Vec<(String, String)> = Vec::new();
    let mut by_index = std::collections::HashMap::new();
    for (ev, d) in frames {
        match ev.as_str() {
            "content_block_start" if d["content_block"]["type"] == "tool_use" => {
                by_index.insert(d["index"].as_u64(), out.len());
                out.push((
                    d["content_block"]["id"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    String::new(),
                ));
            }
            "content_block_delta" if d["delta"]["type"] == "input_json_delta" => {
                let slot = by_index.get(&d["index"].as_u64()).copied();
                match slot {
                    Some(i) => out[i]
                        .1
                        .push_str(d["delta"]["partial_json"].as_str().unwrap_or_default()),
                    None => panic!("fragment for a block that is not a tool block: {d}"),
                }
            }
            _ => {}
        }
    }
    out.into_iter()
        .map(|(id, s)| {
            (
                id,
                serde_json::from_str(if s.is_empty() { "{}" } else { &s }).unwrap_or(Value::Null),
            )
        })
        .collect()
}

/// Blocks are strictly sequential: every start is closed before the next start.
fn assert_sequential(frames: &[(String, Value)]) {
    let mut open: Option<u64> = None;
    let mut next = 0;
    for (ev, d) in frames {
        match ev.as_str() {
            "content_block_start" => {
                assert_eq!(open, None, "block opened while another is open: {d}");
                assert_eq!(d["index"].as_u64(), Some(next));
                open = d["index"].as_u64();
                next += 1;
            }
            "content_block_delta" => {
                assert_eq!(d["index"].as_u64(), open, "delta outside its block")
            }
            "content_block_stop" => {
                assert_eq!(d["index"].as_u64(), open);
                open = None;
            }
            _ => {}
        }
    }
    assert_eq!(open, None);
}

/// T11: three interleaved tool calls ⇒ three sequential tool_use blocks, each complete;
/// T21: cache fields present in the streamed usage; T15: the tool turn ends with tool_use.
#[test]
fn t11_interleaved_parallel_calls_become_separate_blocks() {
    let sse = include_bytes!("../../tests/fixtures/chat_interleaved_tools.sse");
    let frames = run(&sse.chunks(7).collect::<Vec<_>>());
    assert_eq!(frames[0].0, "message_start");
    assert_sequential(&frames);
    assert_eq!(
        tool_inputs(&frames),
        vec![
            ("call_a".to_owned(), json!({"path": "a.txt"})),
            ("call_b".to_owned(), json!({"pat": "x"})),
            ("call_c".to_owned(), json!({})),
        ]
    );
    let (ev, delta) = &frames[frames.len() - 2];
    assert_eq!(ev, "message_delta");
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(
        delta["usage"],
        json!({"input_tokens": 40, "output_tokens": 20, "cache_read_input_tokens": 60})
    );
    assert_eq!(frames[frames.len() - 1].0, "message_stop");
}

fn chunk(delta: Value, finish: Value) -> String {
    format!(
        "data: {}\n\n",
        json!({"id":"c","model":"gpt-x","choices":[{"index":0,"delta":delta,"finish_reason":finish}]})
    )
}

/// T13: first upstream chunk is a tool call ⇒ message_start still first, no empty text block.
#[test]
fn t13_message_start_first_even_when_a_tool_call_comes_first() {
    let body = [
        chunk(json!({"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]}), Value::Null),
        chunk(json!({}), json!("tool_calls")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let frames = run(&[body.as_bytes()]);
    assert_eq!(
        names(&frames),
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(frames[0].1["message"]["id"], "c");
    assert_eq!(frames[1].1["content_block"]["type"], "tool_use");
}

/// Reasoning then text: a thinking block, then a text block (T4, streaming).
#[test]
fn text_and_reasoning_stream() {
    let body = [
        chunk(json!({"role":"assistant","content":""}), Value::Null),
        chunk(json!({"reasoning_content":"hmm"}), Value::Null),
        chunk(json!({"content":"Hello "}), Value::Null),
        chunk(json!({"content":"world"}), Value::Null),
        chunk(json!({}), json!("stop")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let frames = run(&[body.as_bytes()]);
    assert_sequential(&frames);
    assert_eq!(frames[1].1["content_block"]["type"], "thinking");
    assert_eq!(
        frames[2].1["delta"],
        json!({"type":"thinking_delta","thinking":"hmm"})
    );
    assert_eq!(frames[4].1["content_block"]["type"], "text");
    assert_eq!(
        frames[frames.len() - 2].1["delta"]["stop_reason"],
        "end_turn"
    );
}

/// T18: `length` with a partial call is reported as max_tokens; a stream ending without any
/// finish reason is an error event, never a clean end.
#[test]
fn t18_truncated_stream_is_never_a_clean_end() {
    let partial = chunk(
        json!({"tool_calls":[{"index":0,"id":"call_1","function":{"name":"f","arguments":"{\"a\""}}]}),
        Value::Null,
    );
    let body = [
        partial.clone(),
        chunk(json!({}), json!("length")),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let frames = run(&[body.as_bytes()]);
    assert_eq!(
        frames[frames.len() - 2].1["delta"]["stop_reason"],
        "max_tokens"
    );

    let frames = run(&[partial.as_bytes()]);
    let (ev, data) = &frames[frames.len() - 1];
    assert_eq!(ev, "error");
    assert_eq!(data["type"], "error");
}

/// T29: an in-band upstream error mid-stream becomes Anthropic's `event: error`, then the end.
#[test]
fn t29_mid_stream_error_becomes_anthropic_error_event() {
    let body = [
        chunk(json!({"content":"par"}), Value::Null),
        "data: {\"error\":{\"message\":\"upstream exploded\",\"type\":\"server_error\"}}\n\n"
            .to_owned(),
        chunk(json!({"content":"ignored"}), Value::Null),
    ]
    .concat();
    let frames = run(&[body.as_bytes()]);
    assert_eq!(
        names(&frames),
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "error"
        ]
    );
    assert_eq!(
        frames[3].1,
        json!({"type":"error","error":{"type":"api_error","message":"upstream exploded"}})
    );
}
