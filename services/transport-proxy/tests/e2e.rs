//! End-to-end behaviour of the proxy around translation: errors in each protocol's envelope,
//! client auth, size limits, retries and timeouts, token counting, model listing, metrics,
//! provider URL/auth layouts, and the official Python SDKs as clients.

#[path = "support/clients.rs"]
mod clients;
#[path = "support/fixture.rs"]
mod fixture;
#[path = "../../../tests/src/skip.rs"]
mod skip;

use std::time::Duration;

use babysitter_transport_proxy::config::{
    ConfigFile, Provider, ProxyConfig, Route, Secret, Upstream,
};
use babysitter_transport_proxy::protocol::Protocol;
use clients::{first_turn, path};
use fixture::{Fixture, script, upstream_for};
use serde_json::{Value, json};

fn weather_script() -> babysitter_transport_proxy::scripted::Script {
    script(json!({"turns": [
        {"when": {"has_tool_result": false},
         "reply": {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}],
                   "usage": {"input": 11, "output": 7, "cache_read": 4}}},
        {"when": {"has_tool_result": true},
         "reply": {"text": "It is sunny.", "usage": {"input": 11, "output": 7, "cache_read": 4}}}
    ]}))
}

fn error_script(
    status: u16,
    retry_after: Option<&str>,
) -> babysitter_transport_proxy::scripted::Script {
    script(
        json!({"turns": [{"when": {}, "reply": {"error": {"status": status, "message": "scripted failure", "retry_after": retry_after}}}]}),
    )
}

fn no_retry(base: &str, upstream: Protocol) -> ProxyConfig {
    let mut r = Route::new("all", upstream_for(upstream, base));
    r.policy.max_retries = 0;
    ProxyConfig::with_routes(vec![r])
}

/// T28: upstream 429 / 529 / 503 reach every client protocol with a retryable status, the
/// client's own envelope and `retry-after` kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t28_upstream_429_and_overload_keep_status_envelope_and_retry_after() {
    for (status, anth, openai, gemini) in [
        (429u16, 429u16, 429u16, 429u16),
        (529, 529, 503, 503),
        (503, 529, 503, 503),
    ] {
        let fx = Fixture::start(Some(error_script(status, Some("7"))), |b| {
            no_retry(b, Protocol::OpenAiChat)
        })
        .await;
        for front in Protocol::ALL {
            let (got, headers, body) = fx
                .post(path(front, false), &first_turn(front, false), &[])
                .await;
            let want = match front {
                Protocol::Anthropic => anth,
                Protocol::Gemini => gemini,
                _ => openai,
            };
            assert_eq!(got, want, "{status} → {front}: {body}");
            assert_eq!(
                headers.get("retry-after").and_then(|v| v.to_str().ok()),
                Some("7"),
                "{front}"
            );
            let v: Value = serde_json::from_str(&body).unwrap_or_default();
            match front {
                Protocol::Anthropic => {
                    assert_eq!(v["type"], "error");
                    let ty = if status == 429 {
                        "rate_limit_error"
                    } else {
                        "overloaded_error"
                    };
                    assert_eq!(v["error"]["type"], ty);
                }
                Protocol::Gemini => {
                    let st = if status == 429 {
                        "RESOURCE_EXHAUSTED"
                    } else {
                        "UNAVAILABLE"
                    };
                    assert_eq!(v["error"]["status"], st, "{body}");
                }
                _ => {
                    let ty = if status == 429 {
                        "rate_limit_exceeded"
                    } else {
                        "server_error"
                    };
                    assert_eq!(v["error"]["type"], ty, "{body}");
                }
            }
        }
        fx.stop().await;
    }
}

/// Retries before the first byte: two scripted 503s, then success; the client sees only the
/// success and the metrics count two retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_upstream_failures_are_retried_before_the_first_byte() {
    let s = script(json!({"turns": [{"when": {}, "fail_times": 2, "reply": {"text": "ok"}}]}));
    let fx = Fixture::start(Some(s), |b| {
        let mut r = Route::new("all", upstream_for(Protocol::OpenAiChat, b));
        r.policy.retry_backoff = Duration::from_millis(1);
        ProxyConfig::with_routes(vec![r])
    })
    .await;
    let (status, _, body) = fx
        .post(
            path(Protocol::Anthropic, false),
            &first_turn(Protocol::Anthropic, false),
            &[],
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(fx.scripted.requests().len(), 3);
    let (_, metrics) = fx.get("/metrics", &[]).await;
    assert!(
        metrics.contains("babysitter_proxy_upstream_retries_total{route=\"all\"} 2"),
        "{metrics}"
    );
    fx.stop().await;

    // More failures than retries: the last upstream status reaches the client.
    let s = script(json!({"turns": [{"when": {}, "fail_times": 9, "reply": {"text": "ok"}}]}));
    let fx = Fixture::start(Some(s), |b| {
        let mut r = Route::new("all", upstream_for(Protocol::OpenAiChat, b));
        r.policy.retry_backoff = Duration::from_millis(1);
        r.policy.max_retries = 1;
        ProxyConfig::with_routes(vec![r])
    })
    .await;
    let (status, _, _) = fx
        .post(
            path(Protocol::OpenAiChat, false),
            &first_turn(Protocol::OpenAiChat, false),
            &[],
        )
        .await;
    assert_eq!(status, 503);
    assert_eq!(fx.scripted.requests().len(), 2);
    fx.stop().await;
}

/// A connection refused before the first byte is retried, then reported as a 502-class error
/// in the client's envelope; nothing about the upstream key leaks into the message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_errors_are_retried_then_reported_without_secrets() {
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let addr = dead.local_addr().unwrap_or_else(|e| panic!("{e}"));
    drop(dead);
    let fx = Fixture::start(None, |_| {
        let mut up = Upstream::new(Provider::Openai, format!("http://{addr}/v1"));
        up.api_key = Some(Secret::new("sk-very-secret-key"));
        let mut r = Route::new("dead", up);
        r.policy.retry_backoff = Duration::from_millis(1);
        ProxyConfig::with_routes(vec![r])
    })
    .await;
    let (status, _, body) = fx
        .post(
            path(Protocol::Anthropic, false),
            &first_turn(Protocol::Anthropic, false),
            &[],
        )
        .await;
    assert_eq!(status, 502, "{body}");
    assert!(!body.contains("sk-very-secret-key"));
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(v["error"]["type"], "api_error");
    let (_, metrics) = fx.get("/metrics", &[]).await;
    assert!(
        metrics.contains("babysitter_proxy_upstream_retries_total{route=\"dead\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics
            .contains("babysitter_proxy_errors_by_class_total{route=\"dead\",class=\"connect\"} 1"),
        "{metrics}"
    );
    fx.stop().await;
}

/// T29 + idle timeout: an upstream stream that goes silent is ended by the proxy with the
/// client protocol's in-band error, for a translated and for a passthrough stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t29_idle_upstream_stream_ends_with_in_band_error() {
    let frames = vec![
        "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n".to_owned(),
    ];
    let s = script(json!({"turns": [{"when": {}, "reply": {"raw_sse": frames, "stall": true}}]}));
    let fx = Fixture::start(Some(s), |b| {
        let mut r = Route::new("all", upstream_for(Protocol::OpenAiChat, b));
        r.policy.idle_timeout = Duration::from_millis(300);
        ProxyConfig::with_routes(vec![r])
    })
    .await;
    let (status, _, body) = fx
        .post(
            path(Protocol::Anthropic, true),
            &first_turn(Protocol::Anthropic, true),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    let seen = clients::read_sse(Protocol::Anthropic, &body);
    assert_eq!(seen.text, "Hel");
    assert_eq!(seen.stop, "error:timeout_error", "{body}");
    let (_, _, body) = fx
        .post(
            path(Protocol::OpenAiChat, true),
            &first_turn(Protocol::OpenAiChat, true),
            &[],
        )
        .await;
    let last = clients::sse_events(&body)
        .pop()
        .map(|e| e.1)
        .unwrap_or_default();
    assert_eq!(
        last["error"]["type"], "timeout",
        "passthrough stream: {body}"
    );
    fx.stop().await;
}

/// Client auth: 401 in every protocol's envelope; the token is accepted from `x-api-key`,
/// `Authorization: Bearer`, `x-goog-api-key` and `?key=`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_token_is_required_and_accepted_from_every_harness_header() {
    let fx = Fixture::start(Some(weather_script()), |b| {
        let mut c = ProxyConfig::with_routes(vec![Route::new(
            "all",
            upstream_for(Protocol::OpenAiChat, b),
        )]);
        c.proxy_token = Some(Secret::new("tok"));
        c
    })
    .await;
    for front in Protocol::ALL {
        let (status, _, body) = fx
            .post(path(front, false), &first_turn(front, false), &[])
            .await;
        assert_eq!(status, 401, "{front}");
        let v: Value = serde_json::from_str(&body).unwrap_or_default();
        match front {
            Protocol::Anthropic => assert_eq!(v["error"]["type"], "authentication_error"),
            Protocol::Gemini => assert_eq!(v["error"]["status"], "UNAUTHENTICATED"),
            _ => assert_eq!(v["error"]["code"], "invalid_api_key"),
        }
    }
    let ok = [
        (Protocol::Anthropic, ("x-api-key", "tok")),
        (Protocol::OpenAiChat, ("authorization", "Bearer tok")),
        (Protocol::Gemini, ("x-goog-api-key", "tok")),
    ];
    for (front, header) in ok {
        let (status, _, body) = fx
            .post(path(front, false), &first_turn(front, false), &[header])
            .await;
        assert_eq!(status, 200, "{front}: {body}");
    }
    let (status, _, _) = fx
        .post(
            "/v1beta/models/m:generateContent?key=tok",
            &first_turn(Protocol::Gemini, false),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = fx.get("/health", &[]).await;
    assert_eq!(status, 200, "health stays open");
    fx.stop().await;
}

/// Malformed requests get a 400 naming the field, in each protocol's envelope, before any
/// upstream call; an oversized body gets a 413.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_400_naming_the_field_and_large_bodies_413() {
    let fx = Fixture::start(Some(weather_script()), |b| {
        let mut c = ProxyConfig::with_routes(vec![Route::new(
            "all",
            upstream_for(Protocol::OpenAiChat, b),
        )]);
        c.max_body_bytes = 4096;
        c
    })
    .await;
    let cases = [
        (
            Protocol::Anthropic,
            json!({"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result"}]}]}),
            "messages[0].content",
        ),
        (
            Protocol::OpenAiChat,
            json!({"model":"m","messages":"nope"}),
            "messages",
        ),
        (
            Protocol::OpenAiResponses,
            json!({"model":"m","input":[{"type":"function_call","name":"f"}]}),
            "input[0].call_id",
        ),
        (
            Protocol::Gemini,
            json!({"contents":[{"role":"robot","parts":[]}]}),
            "contents[0].role",
        ),
    ];
    for (front, body, field) in cases {
        let (status, _, text) = fx.post(path(front, false), &body, &[]).await;
        assert_eq!(status, 400, "{front}: {text}");
        let v: Value = serde_json::from_str(&text).unwrap_or_default();
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(field), "{front}: {msg}");
    }
    assert!(
        fx.scripted.requests().is_empty(),
        "nothing reached the upstream"
    );
    let big =
        json!({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x".repeat(8000)}]});
    let (status, _, body) = fx.post("/v1/messages", &big, &[]).await;
    assert_eq!(status, 413, "{body}");
    let v: Value = serde_json::from_str(&body).unwrap_or_default();
    assert_eq!(v["error"]["type"], "request_too_large");
    fx.stop().await;
}

/// T30 + spec §14: Anthropic count_tokens is forwarded to an Anthropic upstream, estimated
/// otherwise; Gemini countTokens and the `/v1/count_tokens` alias answer in their shapes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t30_count_tokens_endpoints() {
    let body = json!({"model":"claude-x","messages":[{"role":"user","content":"x".repeat(400)}]});
    let fx = Fixture::simple(None, Protocol::Anthropic).await;
    let (status, _, text) = fx
        .post("/v1/messages/count_tokens?beta=true", &body, &[])
        .await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    assert!(
        v["input_tokens"].as_u64().is_some_and(|n| n >= 100),
        "{text}"
    );
    let up = fx.last_upstream();
    assert!(
        up.path.ends_with("/v1/messages/count_tokens"),
        "forwarded: {}",
        up.path
    );
    assert_eq!(up.body["model"], "fake-upstream");
    fx.stop().await;

    let fx = Fixture::simple(None, Protocol::OpenAiChat).await;
    let (_, _, text) = fx.post("/v1/messages/count_tokens", &body, &[]).await;
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap_or_default(),
        json!({"input_tokens": 100})
    );
    let (_, _, text) = fx.post("/v1/count_tokens", &body, &[]).await;
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap_or_default(),
        json!({"count": 100})
    );
    let g = json!({"contents":[{"role":"user","parts":[{"text":"y".repeat(40)}]}]});
    let (_, _, text) = fx.post("/v1beta/models/gem:countTokens", &g, &[]).await;
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap_or_default(),
        json!({"totalTokens": 10})
    );
    assert!(fx.scripted.requests().is_empty(), "estimated locally");
    fx.stop().await;
}

/// `/v1/models`, `/v1beta/models`, `/health`, `/cache/stats`, `HEAD /` and the request id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn informational_endpoints_and_request_id() {
    let fx = Fixture::simple(Some(weather_script()), Protocol::OpenAiChat).await;
    let (_, text) = fx.get("/v1/models", &[]).await;
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(v["data"][0]["id"], "fake-upstream");
    let (_, text) = fx.get("/v1beta/models", &[]).await;
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(v["models"][0]["name"], "models/fake-upstream");
    let (_, text) = fx.get("/cache/stats", &[]).await;
    assert_eq!(text, "{\"enabled\":false}");
    let head = fx
        .http
        .head(format!("{}/", fx.proxy))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(head.status().as_u16(), 404);
    let (_, headers, _) = fx
        .post(
            path(Protocol::Anthropic, false),
            &first_turn(Protocol::Anthropic, false),
            &[("x-request-id", "req-abc")],
        )
        .await;
    assert_eq!(
        headers.get("x-request-id").and_then(|v| v.to_str().ok()),
        Some("req-abc")
    );
    let (_, text) = fx.get("/metrics", &[("accept", "application/json")]).await;
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(v["total_requests"], 1);
    assert_eq!(v["total_input_tokens"], 15, "cache counted once");
    assert_eq!(v["total_output_tokens"], 7);
    fx.stop().await;
}

/// Azure OpenAI (deployment URL, api-version, `api-key`), Vertex (bearer) and the harness's
/// own key passed through; `x-babysitter-*` headers never reach the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_url_and_auth_layouts() {
    let fx = Fixture::start(Some(weather_script()), |b| {
        let mut az = Upstream::new(Provider::AzureOpenai, b);
        az.azure_deployment = Some("dep-1".into());
        az.azure_api_version = Some("2025-04-01-preview".into());
        az.api_key = Some(Secret::new("az-key-0123456789"));
        let mut azure = Route::new("azure", az);
        azure.front = Some(Protocol::Anthropic);
        let mut vx = Upstream::new(
            Provider::Vertex,
            format!("{b}/v1/projects/p/locations/global/publishers/google"),
        );
        vx.api_key = Some(Secret::new("ya29.token"));
        vx.model = Some("gemini-x".into());
        let mut vertex = Route::new("vertex", vx);
        vertex.front = Some(Protocol::OpenAiChat);
        let mut own = Upstream::new(Provider::Anthropic, format!("{b}/v1"));
        own.pass_through_client_key = true;
        let mut own = Route::new("own-key", own);
        own.front = Some(Protocol::OpenAiResponses);
        ProxyConfig::with_routes(vec![azure, vertex, own])
    })
    .await;
    fx.post(
        path(Protocol::Anthropic, false),
        &first_turn(Protocol::Anthropic, false),
        &[("x-babysitter-run-id", "r1")],
    )
    .await;
    let up = fx.last_upstream();
    assert_eq!(up.path, "/openai/deployments/dep-1/chat/completions");
    assert_eq!(up.query.as_deref(), Some("api-version=2025-04-01-preview"));
    assert_eq!(up.auth_header.as_deref(), Some("api-key"));
    assert!(
        up.headers
            .iter()
            .all(|(k, _)| !k.starts_with("x-babysitter"))
    );
    assert!(
        up.headers.iter().all(|(_, v)| !v.contains("0123456789")),
        "log redacted"
    );
    fx.post(
        path(Protocol::OpenAiChat, false),
        &first_turn(Protocol::OpenAiChat, false),
        &[],
    )
    .await;
    let up = fx.last_upstream();
    assert_eq!(
        up.path,
        "/v1/projects/p/locations/global/publishers/google/models/gemini-x:generateContent"
    );
    assert_eq!(up.auth_header.as_deref(), Some("authorization"));
    fx.post(
        path(Protocol::OpenAiResponses, false),
        &first_turn(Protocol::OpenAiResponses, false),
        &[("authorization", "Bearer harness-own-key")],
    )
    .await;
    let up = fx.last_upstream();
    assert_eq!(up.auth_header.as_deref(), Some("x-api-key"));
    let x = up
        .headers
        .iter()
        .find(|(k, _)| k == "x-api-key")
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    assert!(x.starts_with("harnes"), "{x}");
    fx.stop().await;
}

/// A `[[routes.upstream]]` base-url means what the provider's SDK makes of it: an Anthropic
/// base without a version (as `ANTHROPIC_BASE_URL` holds it) lands on `/v1/messages`, not on
/// `/messages` at the host root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn anthropic_route_base_without_version_lands_on_v1_messages() {
    let fx = Fixture::start(Some(weather_script()), |b| {
        let toml = format!(
            "[[routes]]\nname = \"anthropic-root\"\n[routes.upstream]\nprovider = \"anthropic\"\n\
             base-url = \"{b}\"\nmodel = \"fake-upstream\"\n"
        );
        ConfigFile::from_toml(&toml)
            .and_then(|f| f.resolve(&|_| None))
            .unwrap_or_else(|e| panic!("{e}"))
    })
    .await;
    assert!(!fx.scripted.url().ends_with("/v1"), "{}", fx.scripted.url());
    for front in [Protocol::Anthropic, Protocol::OpenAiChat] {
        let (status, _, body) = fx
            .post(path(front, false), &first_turn(front, false), &[])
            .await;
        assert_eq!(status, 200, "{front:?}: {body}");
        assert_eq!(fx.last_upstream().path, "/v1/messages", "{front:?}");
    }
    fx.stop().await;
}

/// The official Python `anthropic`, `openai` (Chat and Responses) and `google-genai` SDKs
/// drive the proxy (tests/sdk_clients.py): tool-call and tool-result turns, streaming and not.
/// Needs the venv that `scripts/ensure-sdk-venv.sh` creates (`.ci/run` does); skips, saying
/// why, without it (a failure under `BABYSITTER_REQUIRE_ALL=1`, as in CI).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sdk_clients_drive_the_proxy() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("../../.ci-work/venv-sdk/bin/python");
    if skip::installed(&python).is_none() {
        return skip::skip(format!(
            "needs the Python SDK venv at {}: run scripts/ensure-sdk-venv.sh",
            skip::tidy(&python).display()
        ));
    }
    let fx = Fixture::start(Some(weather_script()), |b| {
        let route = |name: &str, front, up| {
            let mut r = Route::new(name, upstream_for(up, b));
            r.front = Some(front);
            r
        };
        let mut c = ProxyConfig::with_routes(vec![
            route("a", Protocol::Anthropic, Protocol::OpenAiChat),
            route("c", Protocol::OpenAiChat, Protocol::Anthropic),
            route("r", Protocol::OpenAiResponses, Protocol::OpenAiChat),
            route("g", Protocol::Gemini, Protocol::Anthropic),
        ]);
        c.proxy_token = Some(Secret::new("proxy-token"));
        c
    })
    .await;
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
        16,
        "{stdout}"
    );
    fx.stop().await;
}

/// Babysitter-keyed requests leave one cost record each (spec §2.3), streamed or not, and
/// their `x-babysitter-*` headers never reach the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn babysitter_headers_produce_cost_records() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let data_dir = dir.path().to_path_buf();
    let fx = Fixture::start(Some(weather_script()), |b| {
        let mut c =
            ProxyConfig::with_routes(vec![Route::new("r", upstream_for(Protocol::OpenAiChat, b))]);
        c.data_dir = Some(data_dir.clone());
        c
    })
    .await;
    let headers = [
        ("x-babysitter-run-id", "run-7"),
        ("x-babysitter-effect-id", "eff-3"),
    ];
    for stream in [false, true] {
        let (status, _, _) = fx
            .post(
                path(Protocol::Anthropic, stream),
                &first_turn(Protocol::Anthropic, stream),
                &headers,
            )
            .await;
        assert_eq!(status, 200);
        let up = fx.last_upstream();
        assert!(
            up.headers
                .iter()
                .all(|(k, _)| !k.starts_with("x-babysitter"))
        );
    }
    fx.post(
        path(Protocol::Anthropic, false),
        &first_turn(Protocol::Anthropic, false),
        &[],
    )
    .await;
    fx.stop().await;
    let text = std::fs::read_to_string(dir.path().join("cost.jsonl")).unwrap_or_default();
    let records: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert_eq!(records.len(), 2, "only keyed requests: {text}");
    for r in &records {
        assert_eq!(
            (r["run_id"].as_str(), r["effect_id"].as_str()),
            (Some("run-7"), Some("eff-3"))
        );
        assert_eq!(
            (r["input_tokens"].as_u64(), r["cache_read_tokens"].as_u64()),
            (Some(11), Some(4))
        );
        assert_eq!(r["output_tokens"], 7);
        assert_eq!(r["route"], "r");
    }
}

/// `previous_response_id` names state only an OpenAI upstream holds: refused (400 naming it)
/// when translating, passed through to a Responses upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previous_response_id_is_refused_only_when_translating() {
    let mut body = first_turn(Protocol::OpenAiResponses, false);
    body["previous_response_id"] = json!("resp_earlier");
    let fx = Fixture::simple(Some(weather_script()), Protocol::OpenAiChat).await;
    let (status, _, text) = fx.post("/v1/responses", &body, &[]).await;
    assert_eq!(status, 400);
    assert!(text.contains("previous_response_id"), "{text}");
    fx.stop().await;
    let fx = Fixture::simple(Some(weather_script()), Protocol::OpenAiResponses).await;
    let (status, _, text) = fx.post("/v1/responses", &body, &[]).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        fx.last_upstream().body["previous_response_id"],
        "resp_earlier"
    );
    fx.stop().await;
}

/// `ANY /passthrough/*` (spec §2.1, P3): method, path and body go unchanged to the catch-all
/// route's upstream with its key; the client's `?key=` stays at the proxy; the answer and its
/// status come back unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passthrough_forwards_unchanged_with_the_route_key() {
    let fx = Fixture::start(Some(weather_script()), |b| {
        let mut up = upstream_for(Protocol::OpenAiChat, b);
        up.api_key = Some(Secret::new("sk-route-key-0123456789"));
        let mut c = ProxyConfig::with_routes(vec![Route::new("all", up)]);
        c.proxy_token = Some(Secret::new("tok"));
        c
    })
    .await;
    let (status, text) = fx.get("/passthrough/v1/models?key=tok&limit=5", &[]).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("fake-model"), "{text}");
    let up = fx.last_upstream();
    assert_eq!(
        (up.method.as_str(), up.path.as_str()),
        ("GET", "/v1/models")
    );
    assert_eq!(
        up.query.as_deref(),
        Some("limit=5"),
        "proxy credential not forwarded"
    );
    assert_eq!(up.auth_header.as_deref(), Some("authorization"));
    let (status, _, text) = fx
        .post(
            "/passthrough/v1/chat/completions",
            &first_turn(Protocol::OpenAiChat, false),
            &[("x-api-key", "tok")],
        )
        .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("chat.completion"), "{text}");
    assert_eq!(
        fx.last_upstream().body["model"],
        "chat-front",
        "body unchanged (no model override)"
    );
    let (status, _, _) = fx
        .post(
            "/passthrough/v1/nowhere",
            &json!({}),
            &[("x-api-key", "tok")],
        )
        .await;
    assert_eq!(status, 404, "upstream status relayed");
    fx.stop().await;
}

/// A client that disconnects mid-stream ends the proxy's stream task at once (the upstream
/// connection is dropped, so the provider stops generating), even while the upstream is silent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_ends_the_upstream_stream_at_once() {
    let frames = vec!["data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n".to_owned()];
    let s = script(json!({"turns": [{"when": {}, "reply": {"raw_sse": frames, "stall": true}}]}));
    let fx = Fixture::start(Some(s), |b| {
        let mut r = Route::new("all", upstream_for(Protocol::OpenAiChat, b));
        r.policy.idle_timeout = Duration::from_secs(3600);
        ProxyConfig::with_routes(vec![r])
    })
    .await;
    let mut resp = fx
        .http
        .post(format!("{}{}", fx.proxy, path(Protocol::Anthropic, true)))
        .json(&first_turn(Protocol::Anthropic, true))
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let first = resp.chunk().await.unwrap_or_else(|e| panic!("{e}"));
    assert!(first.is_some_and(|c| !c.is_empty()));
    drop(resp);
    // Wait for the request to be accounted as finished (bounded; not a timing assertion).
    let finished = "babysitter_proxy_request_duration_seconds_count{route=\"all\"} 1";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, metrics) = fx.get("/metrics", &[]).await;
        if metrics.contains(finished) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "stream task still waiting on the silent upstream:\n{metrics}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    fx.stop().await;
}
