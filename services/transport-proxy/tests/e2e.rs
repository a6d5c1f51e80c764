//! End-to-end: the real proxy on 127.0.0.1:0 in front of a scripted upstream (a tiny axum
//! server in this test that answers like OpenAI Chat or Anthropic Messages, JSON or SSE).
//! Each test drives a tool-call turn and a tool-result turn through the proxy and asserts on
//! what the client sees and on what the upstream received.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use babysitter_transport_proxy::config::{ProxyConfig, Secret, Upstream};
use babysitter_transport_proxy::server::{AppState, serve};
use serde_json::{Value, json};

type Seen = Arc<Mutex<Vec<(Option<String>, Value)>>>;

fn sse(frames: &[String]) -> Response {
    ([("content-type", "text/event-stream")], frames.concat()).into_response()
}

fn record(seen: &Seen, headers: &http::HeaderMap, body: &Value) {
    let auth = headers
        .get("authorization")
        .or_else(|| headers.get("x-api-key"))
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Ok(mut s) = seen.lock() {
        s.push((auth, body.clone()));
    }
}

/// Scripted Chat upstream: a tool call `get_weather({"city":"Paris"})` when the last message is
/// not a tool result, else the text "It is sunny."; usage 11/7.
async fn chat_upstream(
    State(seen): State<Seen>,
    headers: http::HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    record(&seen, &headers, &body);
    if body["model"] == "rate-limited" {
        let err = json!({"error":{"message":"slow down","type":"rate_limit_exceeded"}});
        return (
            http::StatusCode::TOO_MANY_REQUESTS,
            [("retry-after", "7")],
            Json(err),
        )
            .into_response();
    }
    let after_tool = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "tool");
    let usage = json!({"prompt_tokens":11,"completion_tokens":7,"total_tokens":18});
    if body["stream"] != true {
        let message = if after_tool {
            json!({"role":"assistant","content":"It is sunny."})
        } else {
            json!({"role":"assistant","content":null,"tool_calls":[{"id":"call_fake_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\": \"Paris\"}"}}]})
        };
        let finish = if after_tool { "stop" } else { "tool_calls" };
        return Json(json!({"id":"chatcmpl-fake","object":"chat.completion","created":1,"model":"fake-gpt","choices":[{"index":0,"message":message,"finish_reason":finish}],"usage":usage})).into_response();
    }
    let chunk = |delta: Value, finish: Value, usage: Option<&Value>| {
        let mut c = json!({"id":"chatcmpl-fake","object":"chat.completion.chunk","created":1,"model":"fake-gpt","choices":[{"index":0,"delta":delta,"finish_reason":finish}]});
        if let Some(u) = usage {
            c["usage"] = u.clone();
        }
        format!("data: {c}\n\n")
    };
    let mut frames = vec![chunk(
        json!({"role":"assistant","content":""}),
        Value::Null,
        None,
    )];
    if after_tool {
        for t in ["It is ", "sunny."] {
            frames.push(chunk(json!({"content": t}), Value::Null, None));
        }
        frames.push(chunk(json!({}), json!("stop"), Some(&usage)));
    } else {
        frames.push(chunk(json!({"tool_calls":[{"index":0,"id":"call_fake_1","type":"function","function":{"name":"get_weather","arguments":""}}]}), Value::Null, None));
        for a in ["{\"city\": ", "\"Paris\"}"] {
            frames.push(chunk(
                json!({"tool_calls":[{"index":0,"function":{"arguments":a}}]}),
                Value::Null,
                None,
            ));
        }
        frames.push(chunk(json!({}), json!("tool_calls"), Some(&usage)));
    }
    frames.push("data: [DONE]\n\n".to_owned());
    sse(&frames)
}

/// Scripted Anthropic upstream, same script as [`chat_upstream`].
async fn anthropic_upstream(
    State(seen): State<Seen>,
    headers: http::HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    record(&seen, &headers, &body);
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    let after_tool = last["content"]
        .as_array()
        .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"));
    let usage = json!({"input_tokens":11,"output_tokens":7,"cache_read_input_tokens":4});
    if body["stream"] != true {
        let (content, stop) = if after_tool {
            (json!([{"type":"text","text":"It is sunny."}]), "end_turn")
        } else {
            (
                json!([{"type":"tool_use","id":"toolu_fake_1","name":"get_weather","input":{"city":"Paris"}}]),
                "tool_use",
            )
        };
        return Json(json!({"id":"msg_fake","type":"message","role":"assistant","model":"fake-claude","content":content,"stop_reason":stop,"stop_sequence":null,"usage":usage})).into_response();
    }
    let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
    let mut frames = vec![ev(
        "message_start",
        json!({"type":"message_start","message":{"id":"msg_fake","type":"message","role":"assistant","model":"fake-claude","content":[],"stop_reason":null,"usage":{"input_tokens":11,"output_tokens":1,"cache_read_input_tokens":4}}}),
    )];
    let stop = if after_tool {
        frames.push(ev("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}})));
        for t in ["It is ", "sunny."] {
            frames.push(ev("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":t}})));
        }
        "end_turn"
    } else {
        frames.push(ev("content_block_start", json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_fake_1","name":"get_weather","input":{}}})));
        for a in ["{\"city\": ", "\"Paris\"}"] {
            frames.push(ev("content_block_delta", json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":a}})));
        }
        "tool_use"
    };
    frames.push(ev(
        "content_block_stop",
        json!({"type":"content_block_stop","index":0}),
    ));
    frames.push(ev("message_delta", json!({"type":"message_delta","delta":{"stop_reason":stop,"stop_sequence":null},"usage":{"output_tokens":7}})));
    frames.push(ev("message_stop", json!({"type":"message_stop"})));
    sse(&frames)
}

struct Fixture {
    proxy: String,
    seen: Seen,
    http: reqwest::Client,
}

async fn bind() -> (tokio::net::TcpListener, String) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = l.local_addr().unwrap_or_else(|e| panic!("addr: {e}"));
    (l, format!("http://{addr}"))
}

async fn start(token: Option<&str>, chat_model: &str, max_body_bytes: usize) -> Fixture {
    let seen: Seen = Arc::default();
    let upstream = Router::new()
        .route("/v1/chat/completions", post(chat_upstream))
        .route("/v1/messages", post(anthropic_upstream))
        .with_state(seen.clone());
    let (ul, upstream_url) = bind().await;
    tokio::spawn(async move { axum::serve(ul, upstream).await });

    let mut chat = Upstream::new(format!("{upstream_url}/v1"));
    chat.api_key = Some(Secret::new("sk-upstream-openai"));
    chat.model = Some(chat_model.to_owned());
    chat.timeout = Duration::from_secs(10);
    let mut anth = Upstream::new(format!("{upstream_url}/v1/"));
    anth.api_key = Some(Secret::new("sk-upstream-anthropic"));
    anth.model = Some("fake-claude".to_owned());
    let config = ProxyConfig {
        listen: ([127, 0, 0, 1], 0).into(),
        max_body_bytes,
        proxy_token: token.map(Secret::new),
        anthropic_front: Some(chat),
        chat_front: Some(anth),
    };
    let state = AppState::new(config).unwrap_or_else(|e| panic!("state: {e}"));
    let (pl, proxy) = bind().await;
    tokio::spawn(serve(pl, state, std::future::pending()));
    Fixture {
        proxy,
        seen,
        http: reqwest::Client::new(),
    }
}

impl Fixture {
    async fn post(&self, path: &str, body: &Value) -> (u16, http::HeaderMap, String) {
        let resp = self
            .http
            .post(format!("{}{path}", self.proxy))
            .header("x-api-key", "proxy-token")
            .json(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("post {path}: {e}"));
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        (status, headers, resp.text().await.unwrap_or_default())
    }

    fn last_upstream(&self) -> (Option<String>, Value) {
        self.seen
            .lock()
            .ok()
            .and_then(|s| s.last().cloned())
            .unwrap_or_default()
    }
}

fn weather_tool_anthropic() -> Value {
    json!([{"name":"get_weather","description":"Get weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}])
}

fn anthropic_turns(stream: bool) -> (Value, Value) {
    let first = json!({"model":"claude-opus-4-8","max_tokens":256,"stream":stream,"tools":weather_tool_anthropic(),
        "messages":[{"role":"user","content":"weather in Paris?"}]});
    let mut second = first.clone();
    second["messages"] = json!([
        {"role":"user","content":"weather in Paris?"},
        {"role":"assistant","content":[{"type":"tool_use","id":"call_fake_1","name":"get_weather","input":{"city":"Paris"}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"call_fake_1","content":"sunny, 24C"}]}
    ]);
    (first, second)
}

fn sse_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|f| !f.trim().is_empty())
        .map(|f| {
            let mut name = String::new();
            let mut data = Value::Null;
            for line in f.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_owned();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap_or(Value::String(d.to_owned()));
                }
            }
            (name, data)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_front_non_streaming_tool_turn_and_result_turn() {
    let fx = start(Some("proxy-token"), "fake-gpt", 1 << 20).await;
    let (first, second) = anthropic_turns(false);
    let (status, headers, body) = fx.post("/v1/messages?beta=true", &first).await;
    assert_eq!(status, 200, "{body}");
    assert!(headers.contains_key("x-request-id"));
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(
        v["content"],
        json!([{"type":"tool_use","id":"call_fake_1","name":"get_weather","input":{"city":"Paris"}}])
    );
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(v["usage"], json!({"input_tokens":11,"output_tokens":7}));
    let (auth, up) = fx.last_upstream();
    assert_eq!(auth.as_deref(), Some("Bearer sk-upstream-openai"));
    assert_eq!(up["model"], "fake-gpt");
    assert_eq!(up["tools"][0]["function"]["name"], "get_weather");

    let (status, _, body) = fx.post("/v1/messages?beta=true", &second).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(v["content"], json!([{"type":"text","text":"It is sunny."}]));
    assert_eq!(v["stop_reason"], "end_turn");
    let (_, up) = fx.last_upstream();
    assert_eq!(
        up["messages"][2],
        json!({"role":"tool","content":"sunny, 24C","tool_call_id":"call_fake_1"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_front_streaming_tool_turn_and_result_turn() {
    let fx = start(None, "fake-gpt", 1 << 20).await;
    let (first, second) = anthropic_turns(true);
    let (status, headers, body) = fx.post("/v1/messages?beta=true", &first).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        headers.get("content-type").and_then(|v| v.to_str().ok()),
        Some("text/event-stream; charset=utf-8")
    );
    let evs = sse_events(&body);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(
        evs[1].1["content_block"],
        json!({"type":"tool_use","id":"call_fake_1","name":"get_weather","input":{}})
    );
    assert_eq!(evs[5].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(
        evs[5].1["usage"],
        json!({"input_tokens":11,"output_tokens":7})
    );
    let (_, up) = fx.last_upstream();
    assert_eq!(up["stream_options"], json!({"include_usage": true}));

    let (status, _, body) = fx.post("/v1/messages", &second).await;
    assert_eq!(status, 200, "{body}");
    let evs = sse_events(&body);
    let text: String = evs
        .iter()
        .filter_map(|(_, d)| d["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "It is sunny.");
    assert_eq!(evs[evs.len() - 2].1["delta"]["stop_reason"], "end_turn");
}

fn chat_turns(stream: bool) -> (Value, Value) {
    let tools = json!([{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}]);
    let first = json!({"model":"gpt-4o","stream":stream,"stream_options":{"include_usage":true},"tools":tools,
        "messages":[{"role":"system","content":"be brief"},{"role":"user","content":"weather in Paris?"}]});
    let mut second = first.clone();
    second["messages"] = json!([
        {"role":"system","content":"be brief"},
        {"role":"user","content":"weather in Paris?"},
        {"role":"assistant","content":null,"tool_calls":[{"id":"toolu_fake_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
        {"role":"tool","tool_call_id":"toolu_fake_1","content":"sunny, 24C"}
    ]);
    (first, second)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_front_non_streaming_tool_turn_and_result_turn() {
    let fx = start(None, "fake-gpt", 1 << 20).await;
    let (first, second) = chat_turns(false);
    let (status, _, body) = fx.post("/v1/chat/completions", &first).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        v["choices"][0]["message"]["tool_calls"][0]["function"],
        json!({"name":"get_weather","arguments":"{\"city\":\"Paris\"}"})
    );
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens":15,"completion_tokens":7,"total_tokens":22,"prompt_tokens_details":{"cached_tokens":4}})
    );
    let (auth, up) = fx.last_upstream();
    assert_eq!(auth.as_deref(), Some("sk-upstream-anthropic"));
    assert_eq!(up["system"], json!([{"type":"text","text":"be brief"}]));
    assert_eq!(up["max_tokens"], 8192);

    let (status, _, body) = fx.post("/v1/chat/completions", &second).await;
    assert_eq!(status, 200, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(v["choices"][0]["message"]["content"], "It is sunny.");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    let (_, up) = fx.last_upstream();
    assert_eq!(
        up["messages"][2]["content"][0],
        json!({"type":"tool_result","tool_use_id":"toolu_fake_1","content":[{"type":"text","text":"sunny, 24C"}]})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_front_streaming_tool_turn_and_result_turn() {
    let fx = start(None, "fake-gpt", 1 << 20).await;
    let (first, second) = chat_turns(true);
    let (status, _, body) = fx.post("/v1/chat/completions", &first).await;
    assert_eq!(status, 200, "{body}");
    let evs = sse_events(&body);
    assert_eq!(
        evs.last().map(|(_, d)| d.clone()),
        Some(Value::String("[DONE]".into()))
    );
    let args: String = evs
        .iter()
        .filter_map(|(_, d)| {
            d["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
        })
        .collect();
    assert_eq!(
        serde_json::from_str::<Value>(&args).ok(),
        Some(json!({"city":"Paris"}))
    );
    assert!(
        evs.iter()
            .any(|(_, d)| d["choices"][0]["finish_reason"] == "tool_calls")
    );
    let usage = &evs[evs.len() - 2].1["usage"];
    assert_eq!(
        usage["prompt_tokens"], 15,
        "T22: input taken from message_start"
    );

    let (status, _, body) = fx.post("/v1/chat/completions", &second).await;
    assert_eq!(status, 200, "{body}");
    let evs = sse_events(&body);
    let text: String = evs
        .iter()
        .filter_map(|(_, d)| d["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "It is sunny.");
}

/// T28 end to end, plus the proxy's own errors: auth, malformed body naming the field, size
/// limit — each in the client's envelope.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_keep_status_and_protocol_envelope() {
    let fx = start(Some("proxy-token"), "rate-limited", 4096).await;
    let (first, _) = anthropic_turns(false);
    let (status, headers, body) = fx.post("/v1/messages", &first).await;
    assert_eq!(status, 429);
    assert_eq!(
        headers.get("retry-after").and_then(|v| v.to_str().ok()),
        Some("7")
    );
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "rate_limit_error");

    let (status, _, body) = fx.post("/v1/messages", &json!({"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result"}]}]})).await;
    assert_eq!(status, 400);
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("messages[0].content"),
        "{v}"
    );

    let (status, _, body) = fx
        .post(
            "/v1/chat/completions",
            &json!({"model":"m","messages":"nope"}),
        )
        .await;
    assert_eq!(status, 400);
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("messages"),
        "{v}"
    );
    assert_eq!(v["error"]["type"], "invalid_request_error");

    let big =
        json!({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x".repeat(8000)}]});
    let (status, _, body) = fx.post("/v1/messages", &big).await;
    assert_eq!(status, 413, "{body}");

    let resp = fx
        .http
        .post(format!("{}/v1/chat/completions", fx.proxy))
        .json(&json!({}))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(resp.status().as_u16(), 401);
    let v: Value = resp.json().await.unwrap_or_default();
    assert_eq!(v["error"]["code"], "invalid_api_key");

    let health: Value = fx
        .http
        .get(format!("{}/health", fx.proxy))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .json()
        .await
        .unwrap_or_default();
    assert_eq!(health["ok"], true);
}

/// The official Python `anthropic` and `openai` SDKs drive the proxy (tests/sdk_clients.py):
/// tool-call and tool-result turns, streaming and not. Needs the venv that
/// `scripts/ensure-sdk-venv.sh` creates (`.ci/run` does); skips, saying why, without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_clients_drive_the_proxy() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("../../.ci-work/venv-sdk/bin/python");
    if !std::fs::metadata(&python).is_ok_and(|m| m.is_file()) {
        eprintln!(
            "SKIPPED: {} missing; run scripts/ensure-sdk-venv.sh",
            python.display()
        );
        return;
    }
    let fx = start(Some("proxy-token"), "fake-gpt", 1 << 20).await;
    let out = tokio::process::Command::new(&python)
        .arg(root.join("tests/sdk_clients.py"))
        .arg(&fx.proxy)
        .output()
        .await
        .unwrap_or_else(|e| panic!("running python: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "sdk script failed\n{stdout}\n{stderr}"
    );
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("ok: ")).count(),
        8,
        "{stdout}"
    );
}
