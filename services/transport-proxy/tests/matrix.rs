//! Every front ⇄ upstream protocol pair, streaming and not: the real proxy on 127.0.0.1:0 in
//! front of the scripted model server. Each case drives a tool-call turn and a tool-result turn
//! and asserts on what the client sees (calls, text, stop reason, usage) and on what the
//! upstream received (model override, tool result present, Gemini thoughtSignature re-attached).

#[path = "support/clients.rs"]
mod clients;
#[path = "support/fixture.rs"]
mod fixture;

use babysitter_transport_proxy::protocol::Protocol;
use babysitter_transport_proxy::scripted::Script;
use clients::{Seen, end_stop, first_turn, path, read_json, read_sse, second_turn, tool_stop};
use fixture::Fixture;
use serde_json::{Value, json};

fn script() -> Script {
    serde_json::from_value(json!({"turns": [
        {"when": {"has_tool_result": false}, "expect": {"tools_include": ["get_weather"]},
         "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "thought_signature": "sig-gem-1"}],
                   "usage": {"input": 11, "output": 7, "cache_read": 4}}},
        {"when": {"has_tool_result": true}, "expect": {"has_tool_result": true},
         "reply": {"text": "It is sunny.", "usage": {"input": 11, "output": 7, "cache_read": 4}}}
    ]}))
    .unwrap_or_else(|e| panic!("script: {e}"))
}

async fn turn(fx: &Fixture, front: Protocol, stream: bool, body: &Value) -> Seen {
    let (status, _, text) = fx.post(path(front, stream), body, &[]).await;
    assert_eq!(status, 200, "{front} stream={stream}: {text}");
    if stream {
        read_sse(front, &text)
    } else {
        read_json(front, &serde_json::from_str(&text).unwrap_or_default())
    }
}

async fn run_pairs(upstream: Protocol) {
    let fx = Fixture::simple(Some(script()), upstream).await;
    for front in Protocol::ALL {
        for stream in [false, true] {
            let case = format!("{front} -> {upstream}, stream={stream}");
            let seen = turn(&fx, front, stream, &first_turn(front, stream)).await;
            assert_eq!(seen.calls.len(), 1, "{case}: {seen:?}");
            let (id, name, args, _) = &seen.calls[0];
            assert!(
                !id.is_empty() || front == Protocol::Gemini,
                "{case}: call id"
            );
            assert_eq!(name, "get_weather", "{case}");
            assert_eq!(args, &json!({"city": "Paris"}), "{case}");
            assert_eq!(
                seen.stop,
                tool_stop(front),
                "{case}: T15 tool turn continues"
            );
            let want_input = if front == Protocol::Anthropic { 11 } else { 15 };
            assert_eq!(
                seen.input_tokens,
                Some(want_input),
                "{case}: T19/T22 input tokens"
            );
            assert_eq!(seen.output_tokens, Some(7), "{case}: output tokens");
            let log = fx.scripted.requests();
            let up = log
                .last()
                .unwrap_or_else(|| panic!("{case}: no upstream request"));
            assert_eq!(up.protocol, Some(upstream), "{case}");
            assert_eq!(up.status, 200, "{case}: upstream expectation {:?}", up.body);
            if upstream == Protocol::Gemini {
                assert!(
                    up.path.contains("/models/fake-upstream:"),
                    "{case}: {}",
                    up.path
                );
            } else {
                assert_eq!(up.body["model"], "fake-upstream", "{case}");
            }

            let second = second_turn(front, stream, &seen);
            let seen2 = turn(&fx, front, stream, &second).await;
            assert_eq!(seen2.text, "It is sunny.", "{case}: {seen2:?}");
            assert!(seen2.calls.is_empty(), "{case}");
            assert_eq!(seen2.stop, end_stop(front), "{case}");
            let log = fx.scripted.requests();
            let up = log
                .last()
                .unwrap_or_else(|| panic!("{case}: no upstream request"));
            assert_eq!(
                (up.turn, up.status),
                (Some(1), 200),
                "{case}: {:?}",
                up.body
            );
            if upstream == Protocol::Gemini {
                // T6: the signature is back on the functionCall part, whatever the client kept.
                let parts = up.body["contents"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|c| c["parts"].as_array().into_iter().flatten())
                    .find(|p| p.get("functionCall").is_some())
                    .cloned()
                    .unwrap_or_default();
                assert_eq!(
                    parts["thoughtSignature"], "sig-gem-1",
                    "{case}: T6 {}",
                    up.body
                );
                assert_eq!(parts["functionCall"]["name"], "get_weather", "{case}");
            }
        }
    }
    fx.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_front_to_anthropic_upstream() {
    run_pairs(Protocol::Anthropic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_front_to_chat_upstream() {
    run_pairs(Protocol::OpenAiChat).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_front_to_responses_upstream() {
    run_pairs(Protocol::OpenAiResponses).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_front_to_gemini_upstream() {
    run_pairs(Protocol::Gemini).await;
}
