//! Table-driven Chat ⇄ canonical ⇄ Anthropic request/response translation tests.

use serde_json::{Value, json};

use super::*;
use crate::anthropic;
use crate::server::parse_json;

fn to_anthropic(body: Value) -> Value {
    let req: ChatRequest =
        parse_json(body.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    let canon = request_to_canonical(req).unwrap_or_else(|e| panic!("{e}"));
    serde_json::to_value(anthropic::convert::canonical_to_request(
        &canon, "claude-x", 8192,
    ))
    .unwrap_or_default()
}

/// Chat history with a developer prompt, a tool turn with two parallel calls and their results,
/// and text after them ⇒ Anthropic system, one user message with both tool_result blocks first.
#[test]
fn chat_tool_history_translates_to_anthropic() {
    let got = to_anthropic(json!({
        "model": "gpt-x", "stream": true, "stream_options": {"include_usage": true},
        "max_completion_tokens": 1000, "stop": "END",
        "tool_choice": "required", "parallel_tool_calls": false,
        "tools": [{"type":"function","function":{"name":"get_weather","parameters":{"type":"object"}}}],
        "messages": [
            {"role":"developer","content":"Be brief."},
            {"role":"user","content":[{"type":"text","text":"weather?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAA"}}]},
            {"role":"assistant","content":null,"tool_calls":[
                {"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}},
                {"id":"call_2","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Rome\"}"}}]},
            {"role":"tool","tool_call_id":"call_1","content":"sunny"},
            {"role":"tool","tool_call_id":"call_2","content":"rain"},
            {"role":"user","content":"thanks"}
        ]
    }));
    assert_eq!(got["model"], "claude-x");
    assert_eq!(got["system"], json!([{"type":"text","text":"Be brief."}]));
    assert_eq!(got["max_tokens"], 1000);
    assert_eq!(got["stop_sequences"], json!(["END"]));
    // T12 reverse direction.
    assert_eq!(
        got["tool_choice"],
        json!({"type":"any","disable_parallel_tool_use":true})
    );
    assert_eq!(
        got["tools"][0],
        json!({"name":"get_weather","input_schema":{"type":"object"}})
    );
    assert_eq!(
        got["messages"][0]["content"][1],
        json!({"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAA"}})
    );
    assert_eq!(
        got["messages"][1]["content"][1],
        json!({"type":"tool_use","id":"call_2","name":"get_weather","input":{"city":"Rome"}})
    );
    assert_eq!(
        got["messages"][2]["content"],
        json!([
            {"type":"tool_result","tool_use_id":"call_1","content":[{"type":"text","text":"sunny"}]},
            {"type":"tool_result","tool_use_id":"call_2","content":[{"type":"text","text":"rain"}]},
            {"type":"text","text":"thanks"}
        ])
    );
    assert_eq!(got["messages"].as_array().map(Vec::len), Some(3));
}

#[test]
fn malformed_chat_requests_name_the_field() {
    let cases: &[(Value, &str)] = &[
        (
            json!({"model":"m","messages":[{"role":"tool","content":"x"}]}),
            "messages[0].tool_call_id",
        ),
        (
            json!({"model":"m","messages":[{"role":"wizard","content":"x"}]}),
            "messages[0].role",
        ),
        (json!({"model":"m"}), "messages"),
        (
            json!({"model":"m","messages":[],"tool_choice":{"type":"function"}}),
            "tool_choice.function.name",
        ),
    ];
    for (body, field) in cases {
        match parse_json::<ChatRequest>(body.to_string().as_bytes()).and_then(request_to_canonical)
        {
            Err(crate::error::ProxyError::InvalidRequest { field: f, .. }) => {
                assert_eq!(&f, field, "{body}")
            }
            other => panic!("{body}: expected invalid request, got {other:?}"),
        }
    }
}

/// Non-streaming response table: Anthropic upstream answers → Chat client bodies (T15 rows,
/// T19 cache counted once, T17 pause_turn is an error towards Chat).
#[test]
fn anthropic_responses_translate_to_chat() {
    let rows: &[(Value, Option<Value>)] = &[
        (
            json!({"id":"msg_1","model":"claude-x","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":40,"output_tokens":7,"cache_read_input_tokens":50,"cache_creation_input_tokens":10}}),
            Some(
                json!({"message":{"role":"assistant","content":"hi"},"finish_reason":"stop","usage":{"prompt_tokens":100,"completion_tokens":7,"total_tokens":107,"prompt_tokens_details":{"cached_tokens":50}}}),
            ),
        ),
        (
            json!({"id":"msg_2","model":"claude-x","content":[{"type":"thinking","thinking":"t","signature":"s"},{"type":"redacted_thinking","data":"r+/="},{"type":"tool_use","id":"toolu_1","name":"f","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":4}}),
            Some(
                json!({"message":{"role":"assistant","content":null,"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}],"reasoning_content":"t",
                    "reasoning_details":[{"type":"reasoning.text","text":"t","signature":"babysitter.anthropic.s","index":0},
                        {"type":"reasoning.encrypted","data":"babysitter.anthropic-redacted.r+/=","index":1}]},"finish_reason":"tool_calls","usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}),
            ),
        ),
        (
            json!({"id":"msg_3","model":"claude-x","content":[{"type":"text","text":"cut"}],"stop_reason":"max_tokens","usage":{"input_tokens":1,"output_tokens":2}}),
            Some(
                json!({"message":{"role":"assistant","content":"cut"},"finish_reason":"length","usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}),
            ),
        ),
        (
            json!({"id":"msg_4","model":"claude-x","content":[],"stop_reason":"refusal","usage":{"input_tokens":1,"output_tokens":0}}),
            Some(
                json!({"message":{"role":"assistant","content":null},"finish_reason":"content_filter","usage":{"prompt_tokens":1,"completion_tokens":0,"total_tokens":1}}),
            ),
        ),
        (
            json!({"id":"msg_5","model":"claude-x","content":[],"stop_reason":"pause_turn"}),
            None,
        ),
        (
            json!({"id":"msg_6","model":"claude-x","content":[],"stop_reason":"surprise"}),
            None,
        ),
    ];
    for (upstream, want) in rows {
        let msg: anthropic::MessagesResponse =
            serde_json::from_value(upstream.clone()).unwrap_or_else(|e| panic!("{e}"));
        let got =
            anthropic::convert::response_to_canonical(msg).and_then(|c| canonical_to_response(&c));
        match (got, want) {
            (Ok(got), Some(want)) => {
                assert_eq!(got["choices"][0]["message"], want["message"], "{upstream}");
                assert_eq!(
                    got["choices"][0]["finish_reason"], want["finish_reason"],
                    "{upstream}"
                );
                assert_eq!(got["usage"], want["usage"], "{upstream}");
                assert_eq!(got["object"], "chat.completion");
            }
            (Err(_), None) => {}
            (got, want) => panic!("{upstream}: got {got:?}, want {want:?}"),
        }
    }
}
