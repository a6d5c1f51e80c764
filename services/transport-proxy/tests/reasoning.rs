//! Opaque reasoning from an Anthropic upstream through a client of every other protocol and
//! back (issue 5 §2, spec §10 rule 1): a signed thinking block and a `redacted_thinking` block
//! reach a Chat client (`reasoning_details`), a Responses client (`reasoning` items with
//! `encrypted_content`) and a Gemini client (thought parts with `thoughtSignature`) in tagged
//! form only; when the client sends the conversation back as it got it, the Anthropic upstream
//! receives both blocks unchanged — thinking text, signature and redacted `data` byte for byte.
//! One table: client protocol × streaming.

#[path = "support/clients.rs"]
mod clients;
#[path = "support/fixture.rs"]
mod fixture;

use babysitter_transport_proxy::protocol::Protocol;
use clients::{first_turn, path, read_json, read_sse, sse_events};
use fixture::{Fixture, script};
use serde_json::{Value, json};

const SIG: &str = "EqQBCkYIARgCKkD+/sig==";
const REDACTED: &str = "EmwKAhgBEgwnQ+/redacted/data==";

/// The Chat assistant message a client assembles from the answer (`reasoning_content`,
/// `reasoning_details`, `tool_calls`), non-streamed or streamed.
fn chat_assistant(stream: bool, text: &str) -> Value {
    if !stream {
        let v: Value = serde_json::from_str(text).unwrap_or_default();
        let m = &v["choices"][0]["message"];
        return json!({"role": "assistant", "content": m["content"], "tool_calls": m["tool_calls"],
            "reasoning_content": m["reasoning_content"], "reasoning_details": m["reasoning_details"]});
    }
    let (mut reasoning, mut details) = (String::new(), Vec::new());
    for (_, chunk) in sse_events(text) {
        let delta = &chunk["choices"][0]["delta"];
        reasoning.push_str(delta["reasoning_content"].as_str().unwrap_or_default());
        details.extend(
            delta["reasoning_details"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        );
    }
    let calls: Vec<Value> = read_sse(Protocol::OpenAiChat, text)
        .calls
        .into_iter()
        .map(|(id, name, args, _)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": calls,
        "reasoning_content": reasoning, "reasoning_details": details})
}

/// The next request of a `front` client: the first turn, the answer as the client keeps it,
/// and the tool result.
fn history(front: Protocol, stream: bool, text: &str) -> Value {
    let mut body = first_turn(front, stream);
    match front {
        Protocol::OpenAiChat => {
            let assistant = chat_assistant(stream, text);
            let id = assistant["tool_calls"][0]["id"].clone();
            if let Some(m) = body["messages"].as_array_mut() {
                m.push(assistant);
                m.push(json!({"role": "tool", "tool_call_id": id, "content": "sun"}));
            }
        }
        Protocol::OpenAiResponses => {
            let resp = if stream {
                sse_events(text)
                    .pop()
                    .map(|e| e.1["response"].clone())
                    .unwrap_or_default()
            } else {
                serde_json::from_str::<Value>(text).unwrap_or_default()
            };
            let output = resp["output"].as_array().cloned().unwrap_or_default();
            let call = output
                .iter()
                .find(|i| i["type"] == "function_call")
                .cloned()
                .unwrap_or_default();
            if let Some(input) = body["input"].as_array_mut() {
                // Codex sends reasoning items back as it got them.
                input.extend(output.iter().filter(|i| i["type"] == "reasoning").cloned());
                input.push(json!({"type":"function_call","call_id":call["call_id"],"name":call["name"],"arguments":call["arguments"]}));
                input.push(
                    json!({"type":"function_call_output","call_id":call["call_id"],"output":"sun"}),
                );
            }
        }
        _ => {
            let frames: Vec<Value> = if stream {
                sse_events(text).into_iter().map(|e| e.1).collect()
            } else {
                vec![serde_json::from_str::<Value>(text).unwrap_or_default()]
            };
            // Gemini CLI keeps the model's parts (thoughts with signatures included).
            let parts: Vec<Value> = frames
                .iter()
                .flat_map(|f| {
                    f["candidates"][0]["content"]["parts"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default()
                })
                .filter(|p| p.get("functionCall").is_some() || p["thought"] == true)
                .collect();
            if let Some(c) = body["contents"].as_array_mut() {
                c.push(json!({"role":"model","parts":parts}));
                c.push(json!({"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"output":"sun"}}}]}));
            }
        }
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_thinking_and_redacted_thinking_round_trip_through_every_client() {
    let s = script(json!({"turns": [
        {"when": {"has_tool_result": false}, "reply": {
            "thinking": {"text": "plan", "signature": SIG}, "redacted_thinking": [REDACTED],
            "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}},
        {"when": {"has_tool_result": true}, "reply": {"text": "done"}}]}));
    let fx = Fixture::simple(Some(s), Protocol::Anthropic).await;
    let table = [
        (Protocol::OpenAiChat, false),
        (Protocol::OpenAiChat, true),
        (Protocol::OpenAiResponses, false),
        (Protocol::OpenAiResponses, true),
        (Protocol::Gemini, false),
        (Protocol::Gemini, true),
    ];
    for (front, stream) in table {
        let case = format!("{front} stream={stream}");
        let (status, _, text) = fx
            .post(path(front, stream), &first_turn(front, stream), &[])
            .await;
        assert_eq!(status, 200, "{case}: {text}");
        let body = history(front, stream, &text);
        let held = body.to_string();
        assert!(
            held.contains(&format!("babysitter.anthropic-redacted.{REDACTED}")),
            "{case}: the client holds the redacted block, tagged: {text}"
        );
        assert!(
            held.contains(&format!("babysitter.anthropic.{SIG}")),
            "{case}: the client holds the signature, tagged: {text}"
        );
        assert!(
            !held.contains(&format!("\"{REDACTED}\"")) && !held.contains(&format!("\"{SIG}\"")),
            "{case}: only tagged forms reach the client"
        );

        let (status, _, text) = fx.post(path(front, stream), &body, &[]).await;
        assert_eq!(status, 200, "{case}: {text}");
        let seen = if stream {
            read_sse(front, &text)
        } else {
            read_json(front, &serde_json::from_str(&text).unwrap_or_default())
        };
        assert_eq!(seen.text, "done", "{case}: {text}");
        let sent = fx.last_upstream().body;
        let turn = &sent["messages"][1]["content"];
        assert_eq!(
            (
                &turn[0]["type"],
                &turn[0]["thinking"],
                &turn[0]["signature"]
            ),
            (&json!("thinking"), &json!("plan"), &json!(SIG)),
            "{case}: {sent}"
        );
        assert_eq!(
            turn[1],
            json!({"type": "redacted_thinking", "data": REDACTED}),
            "{case}: {sent}"
        );
        assert_eq!(turn[2]["type"], "tool_use", "{case}: {sent}");
    }
    fx.stop().await;
}
