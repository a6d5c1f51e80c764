//! Table-driven Anthropic ⇄ canonical ⇄ Chat request/response translation tests.

use serde_json::{Value, json};

use super::*;
use crate::openai_chat;
use crate::server::parse_json;

fn to_chat(body: Value, forward_reasoning: bool) -> Value {
    let req: MessagesRequest = match parse_json(body.to_string().as_bytes()) {
        Ok(r) => r,
        Err(e) => panic!("fixture rejected: {e}"),
    };
    let canon = match request_to_canonical(req) {
        Ok(c) => c,
        Err(e) => panic!("translation failed: {e}"),
    };
    let wire = openai_chat::convert::canonical_to_request(&canon, "gpt-x", forward_reasoning);
    serde_json::to_value(wire).unwrap_or_default()
}

fn claude_code() -> Value {
    serde_json::from_str(include_str!(
        "../../tests/fixtures/claude_code_request.json"
    ))
    .unwrap_or_default()
}

/// T25: the Claude Code request shape (mid-conversation system role, adaptive thinking,
/// output_config, context_management, metadata.user_id as a JSON string, 24 tools incl. a
/// server tool) is accepted and translated for a Chat upstream.
#[test]
fn t25_claude_code_request_translates_to_chat() {
    let chat = to_chat(claude_code(), true);
    let msgs = chat["messages"].as_array().cloned().unwrap_or_default();
    let roles: Vec<&str> = msgs.iter().filter_map(|m| m["role"].as_str()).collect();
    assert_eq!(
        roles,
        [
            "system",
            "user",
            "system",
            "assistant",
            "tool",
            "tool",
            "user"
        ]
    );
    assert_eq!(msgs[0]["content"], "You are Claude Code.\n\nBe terse.");
    assert_eq!(msgs[2]["content"], "Mid-conversation reminder.");
    assert_eq!(chat["model"], "gpt-x");
    assert_eq!(chat["stream"], true);
    assert_eq!(chat["stream_options"], json!({"include_usage": true}));
    assert_eq!(chat["max_tokens"], 64000);
    // 23 function tools; the hosted web_search cannot run on a Chat upstream.
    assert_eq!(chat["tools"].as_array().map(Vec::len), Some(23));
    assert_eq!(chat["tools"][0]["function"]["name"], "Bash");
    assert_eq!(chat["reasoning_effort"], "high");
}

/// T12: `disable_parallel_tool_use: true` ⇒ `parallel_tool_calls: false`; `any` ⇒ `required`.
#[test]
fn t12_disable_parallel_maps_to_parallel_tool_calls_false() {
    let chat = to_chat(claude_code(), false);
    assert_eq!(chat["parallel_tool_calls"], false);
    assert_eq!(chat["tool_choice"], "required");
    assert!(
        chat.get("reasoning_effort").is_none(),
        "not forwarded unless configured"
    );
}

/// T2/T3 (Chat side): thinking in history is never replayed as visible content; the assistant
/// turn keeps its text and both tool calls, in order.
#[test]
fn t2_thinking_never_replayed_as_chat_content() {
    let chat = to_chat(claude_code(), false);
    let asst = &chat["messages"][3];
    assert_eq!(asst["content"], "Running ls.");
    assert!(!asst.to_string().contains("I should run ls"));
    assert_eq!(asst["tool_calls"][0]["id"], "toolu_01");
    assert_eq!(
        asst["tool_calls"][0]["function"]["arguments"],
        "{\"command\":\"ls\"}"
    );
    assert_eq!(asst["tool_calls"][1]["id"], "toolu_02");
}

/// T24 + Q7: an image inside a tool result reaches the Chat upstream in a user message right
/// after the tool messages, with a marker naming the call; the user's own text is kept.
#[test]
fn t24_images_inside_tool_results_reach_chat() {
    let chat = to_chat(claude_code(), false);
    let msgs = &chat["messages"];
    assert_eq!(
        msgs[4],
        json!({"role":"tool","content":"(Bash completed with no output)","tool_call_id":"toolu_01"})
    );
    assert_eq!(msgs[5]["content"], "/work");
    assert_eq!(
        msgs[6]["content"],
        json!([
            {"type":"text","text":"[image(s) from tool result toolu_02]"},
            {"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},
            {"type":"text","text":"continue"}
        ])
    );
}

/// A malformed request is a 400 naming the field.
#[test]
fn malformed_requests_name_the_field() {
    let cases: &[(Value, &str)] = &[
        (
            json!({"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"tool_use","name":"x","input":{}}]}]}),
            "messages[0].content",
        ),
        (
            json!({"model":"m","max_tokens":5,"messages":[{"role":"robot","content":"hi"}]}),
            "messages[0].role",
        ),
        (json!({"model":"m","messages":[]}), "max_tokens"),
        (json!({"max_tokens":5,"messages":[]}), "model"),
        (
            json!({"model":"m","max_tokens":5,"messages":[],"tool_choice":{"type":"tool"}}),
            "tool_choice.name",
        ),
    ];
    for (body, field) in cases {
        let err = parse_json::<MessagesRequest>(body.to_string().as_bytes())
            .and_then(request_to_canonical)
            .err();
        match err {
            Some(crate::error::ProxyError::InvalidRequest { field: f, message }) => {
                assert!(f.starts_with(field), "{body}: got field {f} ({message})");
            }
            other => panic!("{body}: expected invalid request, got {other:?}"),
        }
    }
}

/// Non-streaming response table: Chat upstream answers → Anthropic client bodies.
#[test]
fn chat_responses_translate_to_anthropic() {
    let rows: &[(Value, Value)] = &[
        (
            json!({"id":"c1","model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":7,"total_tokens":18}}),
            json!({"content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":11,"output_tokens":7}}),
        ),
        (
            json!({"id":"c2","model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}},{"id":"call_2","type":"function","function":{"name":"get_time","arguments":"{}"}}]},"finish_reason":"tool_calls"}],"usage":{"prompt_tokens":100,"completion_tokens":7,"prompt_tokens_details":{"cached_tokens":60}}}),
            json!({"content":[{"type":"tool_use","id":"call_1","name":"get_weather","input":{"city":"Paris"}},{"type":"tool_use","id":"call_2","name":"get_time","input":{}}],"stop_reason":"tool_use","usage":{"input_tokens":40,"output_tokens":7,"cache_read_input_tokens":60}}),
        ),
        // T18: truncated with a partial call stays max_tokens, arguments kept verbatim.
        (
            json!({"id":"c3","model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":"}}]},"finish_reason":"length"}]}),
            json!({"content":[{"type":"tool_use","id":"call_1","name":"f","input":{"_parseError":true,"_rawArguments":"{\"a\":"}}],"stop_reason":"max_tokens","usage":{"input_tokens":0,"output_tokens":0}}),
        ),
        // T4: returned reasoning appears as a thinking block, not as text.
        (
            json!({"id":"c4","model":"gpt-x","choices":[{"index":0,"message":{"role":"assistant","content":"42","reasoning_content":"think"},"finish_reason":"stop"}]}),
            json!({"content":[{"type":"thinking","thinking":"think","signature":""},{"type":"text","text":"42"}],"stop_reason":"end_turn","usage":{"input_tokens":0,"output_tokens":0}}),
        ),
    ];
    for (upstream, want) in rows {
        let chat: openai_chat::ChatResponse =
            serde_json::from_value(upstream.clone()).unwrap_or_else(|e| panic!("{e}"));
        let canon =
            openai_chat::convert::response_to_canonical(chat).unwrap_or_else(|e| panic!("{e}"));
        let got = canonical_to_response(&canon).unwrap_or_else(|e| panic!("{e}"));
        for key in ["content", "stop_reason", "usage"] {
            assert_eq!(got[key], want[key], "{key} for {upstream}");
        }
        assert_eq!(got["type"], "message");
    }
}

/// T17: an unknown Chat finish reason is an error, never a clean end.
#[test]
fn t17_unknown_finish_reason_is_an_error() {
    let chat: openai_chat::ChatResponse = serde_json::from_value(
        json!({"choices":[{"message":{"role":"assistant","content":"x"},"finish_reason":"weird"}]}),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(openai_chat::convert::response_to_canonical(chat).is_err());
}
