//! The conformance checklist of `transport-proxy.md` §16, one named test per item (T1–T30),
//! each through the real proxy against the scripted upstream, asserting on what the client
//! sees and what the upstream received. T31–T33 (soak and throughput) are measured by the
//! bench binary, not asserted here (no timing assertions in tests).

#[path = "support/clients.rs"]
mod clients;
#[path = "support/fixture.rs"]
mod fixture;

use babysitter_transport_proxy::canonical::StopReason;
use babysitter_transport_proxy::config::{ProxyConfig, Route};
use babysitter_transport_proxy::protocol::Protocol;
use babysitter_transport_proxy::scripted::Script;
use clients::{Seen, first_turn, path, read_json, read_sse, sse_events};
use fixture::{Fixture, script, upstream_for};
use serde_json::{Value, json};

fn claude_code() -> Value {
    serde_json::from_str(include_str!("fixtures/claude_code_request.json")).unwrap_or_default()
}

/// A proxy with one route to `upstream` answering from `turns` (a single reply when one).
async fn one(upstream: Protocol, reply: Value) -> Fixture {
    Fixture::simple(
        Some(script(json!({"turns": [{"when": {}, "reply": reply}]}))),
        upstream,
    )
    .await
}

async fn call(fx: &Fixture, front: Protocol, stream: bool, body: &Value) -> (u16, Seen, String) {
    let (status, _, text) = fx.post(path(front, stream), body, &[]).await;
    if status != 200 {
        return (status, Seen::default(), text);
    }
    let seen = if stream {
        read_sse(front, &text)
    } else {
        read_json(front, &serde_json::from_str(&text).unwrap_or_default())
    };
    (status, seen, text)
}

fn chat_chunk(delta: Value, finish: Value, usage: Option<Value>) -> String {
    let mut c = json!({"id":"chatcmpl-x","object":"chat.completion.chunk","created":1,"model":"m",
        "choices":[{"index":0,"delta":delta,"finish_reason":finish}]});
    if let Some(u) = usage {
        c["usage"] = u;
    }
    format!("data: {c}\n\n")
}

fn ev(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn anthropic_history_with_thinking(stream: bool) -> Value {
    json!({"model":"claude-front","max_tokens":512,"stream":stream,
    "thinking":{"type":"enabled","budget_tokens":2000},
    "tools":[{"name":"get_weather","input_schema":{"type":"object"}}],
    "messages":[
        {"role":"user","content":"weather?"},
        {"role":"assistant","content":[
            {"type":"thinking","thinking":"secret thoughts","signature":"EqQBCkYIARgCKkD+/=="},
            {"type":"redacted_thinking","data":"EmwKAhgBEgy3/redacted=="},
            {"type":"thinking","thinking":"","signature":"EoEBomitted==","display":"omitted"},
            {"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"}]}
    ]})
}

/// T1: thinking + signature, redacted_thinking and an empty signed `display:"omitted"` block
/// reach an Anthropic upstream byte-exact: the body differs only by the model override.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t01_anthropic_thinking_reaches_anthropic_upstream_byte_exact() {
    let fx = one(Protocol::Anthropic, json!({"text": "ok"})).await;
    for stream in [false, true] {
        let body = anthropic_history_with_thinking(stream);
        let (status, _, text) = call(&fx, Protocol::Anthropic, stream, &body).await;
        assert_eq!(status, 200, "{text}");
        let mut expected = body.clone();
        expected["model"] = json!("fake-upstream");
        let got = fx.last_upstream().body;
        assert_eq!(
            got.to_string(),
            expected.to_string(),
            "only the model differs, key order kept"
        );
    }
    fx.stop().await;
}

/// T2: Anthropic thinking in history never reaches a Responses or Chat upstream as visible
/// text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t02_thinking_never_replayed_as_output_text() {
    for up in [
        Protocol::OpenAiResponses,
        Protocol::OpenAiChat,
        Protocol::Gemini,
    ] {
        let fx = one(up, json!({"text": "ok"})).await;
        let (status, _, text) = call(
            &fx,
            Protocol::Anthropic,
            false,
            &anthropic_history_with_thinking(false),
        )
        .await;
        assert_eq!(status, 200, "{up}: {text}");
        let sent = fx.last_upstream().body.to_string();
        assert!(!sent.contains("secret thoughts"), "{up}: {sent}");
        assert!(
            !sent.contains("EqQBCkYIARgCKkD"),
            "{up}: foreign signature not forged"
        );
        fx.stop().await;
    }
}

/// T3: with thinking and tools, the assistant turn sent to an Anthropic upstream starts with
/// its thinking block (Claude Code history, through the proxy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t03_assistant_turn_upstream_starts_with_thinking() {
    let s = script(
        json!({"turns": [{"when": {}, "expect": {"body": {"/messages/2/content/0/type": "thinking", "/messages/2/content/0/signature": "sig-abc=="}}, "reply": {"text": "ok"}}]}),
    );
    let fx = Fixture::simple(Some(s), Protocol::Anthropic).await;
    let (status, _, text) = fx.post("/v1/messages?beta=true", &claude_code(), &[]).await;
    assert_eq!(status, 200, "{text}");
    fx.stop().await;
}

/// T4: thinking requested against a Chat upstream with `reasoning_effort`: the returned
/// reasoning comes back as thinking blocks, streaming and not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t04_chat_reasoning_comes_back_as_thinking_blocks() {
    let s = script(
        json!({"turns": [{"when": {}, "expect": {"body": {"/reasoning_effort": "low"}},
        "reply": {"thinking": {"text": "pondering"}, "text": "42"}}]}),
    );
    let fx = Fixture::start(Some(s), |b| {
        let mut up = upstream_for(Protocol::OpenAiChat, b);
        up.forward_reasoning_effort = true;
        ProxyConfig::with_routes(vec![Route::new("r", up)])
    })
    .await;
    for stream in [false, true] {
        let mut body = first_turn(Protocol::Anthropic, stream);
        body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
        let (status, seen, text) = call(&fx, Protocol::Anthropic, stream, &body).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(
            (seen.thinking.as_str(), seen.text.as_str()),
            ("pondering", "42"),
            "stream={stream}"
        );
    }
    fx.stop().await;
}

/// T5: on a provider switch, reasoning the new provider cannot verify is dropped (never
/// forged) and the request is accepted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t05_unverifiable_reasoning_dropped_on_provider_switch() {
    let fx = one(Protocol::Anthropic, json!({"text": "ok"})).await;
    let body = json!({"model":"m","input":[
        {"role":"user","content":"hi"},
        {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"openai thoughts"}],"encrypted_content":"gAAAA-openai-blob"},
        {"type":"message","role":"assistant","content":[{"type":"output_text","text":"hello"}]},
        {"role":"user","content":"again"}]});
    let (status, _, text) = call(&fx, Protocol::OpenAiResponses, false, &body).await;
    assert_eq!(status, 200, "{text}");
    let sent = fx.last_upstream().body;
    assert!(!sent.to_string().contains("gAAAA-openai-blob"));
    assert!(!sent.to_string().contains("\"thinking\""), "{sent}");
    assert_eq!(
        sent["messages"][1]["content"],
        json!([{"type":"text","text":"hello"}])
    );
    fx.stop().await;
}

fn gemini_call_reply() -> Value {
    json!({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "thought_signature": "gem-sig/A=="}]})
}

/// T6: a Gemini upstream returns functionCall + thoughtSignature; the Anthropic client sends
/// history back without it; the next upstream request carries the same signature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t06_gemini_thought_signature_reattached_for_claude_code_history() {
    let s = script(json!({"turns": [
        {"when": {"has_tool_result": false}, "reply": gemini_call_reply()},
        {"when": {"has_tool_result": true}, "expect": {"body": {"/contents/1/parts/0/thoughtSignature": "gem-sig/A=="}}, "reply": {"text": "done"}}]}));
    let fx = Fixture::simple(Some(s), Protocol::Gemini).await;
    for stream in [false, true] {
        let (_, seen, _) = call(
            &fx,
            Protocol::Anthropic,
            stream,
            &first_turn(Protocol::Anthropic, stream),
        )
        .await;
        let second = clients::second_turn(Protocol::Anthropic, stream, &seen);
        assert!(
            !second.to_string().contains("gem-sig"),
            "the client never had it"
        );
        let (status, seen2, text) = call(&fx, Protocol::Anthropic, stream, &second).await;
        assert_eq!(
            (status, seen2.text.as_str()),
            (200, "done"),
            "stream={stream}: {text}"
        );
    }
    fx.stop().await;
}

/// T7: as T6 across a proxy restart (same data dir) and after many unrelated conversations.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t07_thought_signature_survives_restart_and_store_is_bounded() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let data_dir = dir.path().to_path_buf();
    let s = || {
        script(json!({"turns": [
            {"when": {"has_tool_result": false}, "reply": gemini_call_reply()},
            {"when": {"has_tool_result": true}, "expect": {"body": {"/contents/1/parts/0/thoughtSignature": "gem-sig/A=="}}, "reply": {"text": "done"}}]}))
    };
    let config = |b: &str, dir: &std::path::Path| {
        let mut c =
            ProxyConfig::with_routes(vec![Route::new("g", upstream_for(Protocol::Gemini, b))]);
        c.data_dir = Some(dir.to_path_buf());
        c.signature_store_max_entries = 64;
        c
    };
    let fx1 = Fixture::start(Some(s()), |b| config(b, &data_dir)).await;
    let (_, seen, _) = call(
        &fx1,
        Protocol::Anthropic,
        false,
        &first_turn(Protocol::Anthropic, false),
    )
    .await;
    for _ in 0..20 {
        call(
            &fx1,
            Protocol::OpenAiChat,
            false,
            &first_turn(Protocol::OpenAiChat, false),
        )
        .await;
    }
    fx1.stop().await;
    let fx2 = Fixture::start(Some(s()), |b| config(b, &data_dir)).await;
    let (status, seen2, text) = call(
        &fx2,
        Protocol::Anthropic,
        false,
        &clients::second_turn(Protocol::Anthropic, false, &seen),
    )
    .await;
    assert_eq!((status, seen2.text.as_str()), (200, "done"), "{text}");
    assert!(fx2.state.store.len() <= 64);
    fx2.stop().await;
}

/// T8: two calls of one function in one Gemini response get distinct ids; results map back
/// to the right `functionResponse.name` and each call keeps its own signature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t08_parallel_gemini_calls_get_distinct_ids() {
    let s = script(json!({"turns": [
        {"when": {"has_tool_result": false}, "reply": {"tool_calls": [
            {"name": "get_weather", "arguments": {"city": "Paris"}, "thought_signature": "s1"},
            {"name": "get_weather", "arguments": {"city": "Rome"}, "thought_signature": "s2"}]}},
        {"when": {"has_tool_result": true}, "reply": {"text": "done"}}]}));
    let fx = Fixture::simple(Some(s), Protocol::Gemini).await;
    for stream in [false, true] {
        let (_, seen, _) = call(
            &fx,
            Protocol::Anthropic,
            stream,
            &first_turn(Protocol::Anthropic, stream),
        )
        .await;
        assert_eq!(seen.calls.len(), 2);
        assert_ne!(seen.calls[0].0, seen.calls[1].0, "distinct ids");
        let mut body = first_turn(Protocol::Anthropic, stream);
        let uses: Vec<Value> = seen
            .calls
            .iter()
            .map(|(id, n, a, _)| json!({"type":"tool_use","id":id,"name":n,"input":a}))
            .collect();
        body["messages"] = json!([{"role":"user","content":"weather?"},{"role":"assistant","content":uses},
            {"role":"user","content":[
                {"type":"tool_result","tool_use_id":seen.calls[1].0,"content":"rain"},
                {"type":"tool_result","tool_use_id":seen.calls[0].0,"content":"sun"}]}]);
        let (status, _, text) = call(&fx, Protocol::Anthropic, stream, &body).await;
        assert_eq!(status, 200, "{text}");
        let up = fx.last_upstream().body;
        let parts = &up["contents"][1]["parts"];
        assert_eq!(
            (
                parts[0]["thoughtSignature"].as_str(),
                parts[1]["thoughtSignature"].as_str()
            ),
            (Some("s1"), Some("s2"))
        );
        assert_eq!(parts[0]["functionCall"]["args"]["city"], "Paris");
        let results = &up["contents"][2]["parts"];
        assert_eq!(
            results[0]["functionResponse"],
            json!({"name":"get_weather","response":{"content":"rain"}})
        );
    }
    fx.stop().await;
}

/// T9: a Gemini client's id-less history reaches an Anthropic upstream with tool_result ids
/// equal to the tool_use ids of the same request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t09_tool_result_ids_match_upstream_tool_use_ids() {
    let fx = one(Protocol::Anthropic, json!({"text": "ok"})).await;
    let body = json!({"contents":[
        {"role":"user","parts":[{"text":"weather?"}]},
        {"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}},{"functionCall":{"name":"get_weather","args":{"city":"Rome"}}}]},
        {"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"output":"sun"}}},{"functionResponse":{"name":"get_weather","response":{"output":"rain"}}}]}],
        "tools":[{"functionDeclarations":[{"name":"get_weather","parameters":{"type":"OBJECT"}}]}]});
    let (status, _, text) = call(&fx, Protocol::Gemini, false, &body).await;
    assert_eq!(status, 200, "{text}");
    let up = fx.last_upstream().body;
    let uses: Vec<&str> = up["messages"][1]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["id"].as_str())
        .collect();
    let results: Vec<&str> = up["messages"][2]["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["tool_use_id"].as_str())
        .collect();
    assert_eq!(uses.len(), 2);
    assert_eq!(uses, results);
    assert!(uses.iter().all(|id| {
        id.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    }));
    assert_eq!(
        up["tools"][0]["input_schema"]["type"], "object",
        "OpenAPI types lowered"
    );
    fx.stop().await;
}

/// T10: an orphan tool result or an unanswered tool call is a protocol-native 400 naming the
/// id, before any upstream call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t10_orphan_and_unanswered_calls_rejected_before_upstream() {
    let fx = one(Protocol::OpenAiChat, json!({"text": "ok"})).await;
    let orphan = json!({"model":"m","max_tokens":10,"messages":[{"role":"user","content":"x"},
        {"role":"assistant","content":[{"type":"tool_use","id":"toolu_a","name":"f","input":{}}]},
        {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_a","content":"1"},{"type":"tool_result","tool_use_id":"toolu_ghost","content":"2"}]}]});
    let (status, _, text) = fx.post("/v1/messages", &orphan, &[]).await;
    assert_eq!(status, 400);
    assert!(
        text.contains("toolu_ghost") && text.contains("invalid_request_error"),
        "{text}"
    );
    let unanswered = json!({"model":"m","messages":[{"role":"user","content":"x"},
        {"role":"assistant","content":null,"tool_calls":[{"id":"call_a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"call_b","type":"function","function":{"name":"f","arguments":"{}"}}]},
        {"role":"tool","tool_call_id":"call_a","content":"1"}]});
    let (status, _, text) = fx.post("/v1/chat/completions", &unanswered, &[]).await;
    assert_eq!(status, 400);
    assert!(text.contains("call_b"), "{text}");
    assert!(fx.scripted.requests().is_empty());
    fx.stop().await;
}

fn three_interleaved_calls() -> Vec<String> {
    let tc = |i: u64, id: Option<&str>, name: Option<&str>, args: &str| {
        let mut t = json!({"index": i, "function": {"arguments": args}});
        if let Some(id) = id {
            t["id"] = json!(id);
            t["type"] = json!("function");
        }
        if let Some(n) = name {
            t["function"]["name"] = json!(n);
        }
        chat_chunk(json!({"tool_calls": [t]}), Value::Null, None)
    };
    vec![
        tc(0, Some("call_0"), Some("get_weather"), ""),
        tc(1, Some("call_1"), Some("get_weather"), ""),
        tc(0, None, None, "{\"city\":"),
        tc(2, Some("call_2"), Some("get_time"), "{\"tz\":"),
        tc(1, None, None, "{\"city\":\"Rome\"}"),
        tc(0, None, None, "\"Paris\"}"),
        tc(2, None, None, "\"UTC\"}"),
        chat_chunk(
            json!({}),
            json!("tool_calls"),
            Some(json!({"prompt_tokens": 5, "completion_tokens": 3})),
        ),
        "data: [DONE]\n\n".to_owned(),
    ]
}

/// T11: three interleaved Chat tool calls become three complete Anthropic blocks, and three
/// Responses function_call items with their own output_index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t11_interleaved_parallel_calls_stay_separate() {
    let fx = one(
        Protocol::OpenAiChat,
        json!({"raw_sse": three_interleaved_calls()}),
    )
    .await;
    let want = vec![
        (
            "call_0".to_owned(),
            "get_weather".to_owned(),
            json!({"city":"Paris"}),
        ),
        (
            "call_1".to_owned(),
            "get_weather".to_owned(),
            json!({"city":"Rome"}),
        ),
        (
            "call_2".to_owned(),
            "get_time".to_owned(),
            json!({"tz":"UTC"}),
        ),
    ];
    for front in [
        Protocol::Anthropic,
        Protocol::OpenAiResponses,
        Protocol::Gemini,
    ] {
        let (status, seen, text) = call(&fx, front, true, &first_turn(front, true)).await;
        assert_eq!(status, 200);
        let got: Vec<_> = seen
            .calls
            .iter()
            .map(|(i, n, a, _)| (i.clone(), n.clone(), a.clone()))
            .collect();
        assert_eq!(got, want, "{front}: {text}");
        if front == Protocol::OpenAiResponses {
            let idx: Vec<u64> = sse_events(&text)
                .iter()
                .filter(|(n, d)| {
                    n == "response.output_item.added" && d["item"]["type"] == "function_call"
                })
                .filter_map(|(_, d)| d["output_index"].as_u64())
                .collect();
            assert_eq!(idx, [0, 1, 2]);
        }
    }
    fx.stop().await;
}

/// T12: `disable_parallel_tool_use: true` ⇄ `parallel_tool_calls: false`, both directions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t12_parallel_tool_flag_honoured_both_directions() {
    let s = script(
        json!({"turns": [{"when": {}, "expect": {"body": {"/parallel_tool_calls": false, "/tool_choice": "required"}}, "reply": {"text": "ok"}}]}),
    );
    let fx = Fixture::simple(Some(s), Protocol::OpenAiChat).await;
    let mut body = first_turn(Protocol::Anthropic, false);
    body["tool_choice"] = json!({"type": "any", "disable_parallel_tool_use": true});
    let (status, _, text) = call(&fx, Protocol::Anthropic, false, &body).await;
    assert_eq!(status, 200, "{text}");
    fx.stop().await;
    let s = script(
        json!({"turns": [{"when": {}, "expect": {"body": {"/tool_choice": {"type": "auto", "disable_parallel_tool_use": true}}}, "reply": {"text": "ok"}}]}),
    );
    let fx = Fixture::simple(Some(s), Protocol::Anthropic).await;
    let mut body = first_turn(Protocol::OpenAiChat, false);
    body["parallel_tool_calls"] = json!(false);
    body["tool_choice"] = json!("auto");
    let (status, _, text) = call(&fx, Protocol::OpenAiChat, false, &body).await;
    assert_eq!(status, 200, "{text}");
    fx.stop().await;
}

/// T13: when the first upstream chunk is a tool call, `message_start` / `response.created` is
/// still the first client event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t13_start_event_first_even_when_tool_call_comes_first() {
    let frames = vec![
        chat_chunk(
            json!({"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"get_weather","arguments":"{}"}}]}),
            Value::Null,
            None,
        ),
        chat_chunk(json!({}), json!("tool_calls"), None),
        "data: [DONE]\n\n".to_owned(),
    ];
    let fx = one(Protocol::OpenAiChat, json!({"raw_sse": frames})).await;
    for (front, first) in [
        (Protocol::Anthropic, "message_start"),
        (Protocol::OpenAiResponses, "response.created"),
    ] {
        let (_, _, text) = fx
            .post(path(front, true), &first_turn(front, true), &[])
            .await;
        let evs = sse_events(&text);
        assert_eq!(evs.first().map(|e| e.0.as_str()), Some(first), "{text}");
        let seen = read_sse(front, &text);
        assert_eq!(seen.calls.len(), 1);
    }
    fx.stop().await;
}

/// T14: a Responses upstream that sends arguments only in `function_call_arguments.done`
/// gives the client the real input, not `{}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t14_done_only_arguments_are_kept() {
    let item = json!({"id":"fc_1","type":"function_call","call_id":"call_9","name":"get_weather","arguments":"","status":"in_progress"});
    let mut done_item = item.clone();
    done_item["arguments"] = json!("{\"city\":\"Oslo\"}");
    done_item["status"] = json!("completed");
    let frames = vec![
        ev(
            "response.created",
            json!({"type":"response.created","response":{"id":"resp_1","model":"m","status":"in_progress","output":[]}}),
        ),
        ev(
            "response.output_item.added",
            json!({"type":"response.output_item.added","output_index":0,"item":item}),
        ),
        ev(
            "response.function_call_arguments.done",
            json!({"type":"response.function_call_arguments.done","output_index":0,"item_id":"fc_1","arguments":"{\"city\":\"Oslo\"}"}),
        ),
        ev(
            "response.output_item.done",
            json!({"type":"response.output_item.done","output_index":0,"item":done_item}),
        ),
        ev(
            "response.completed",
            json!({"type":"response.completed","response":{"id":"resp_1","model":"m","status":"completed","output":[done_item],"usage":{"input_tokens":3,"output_tokens":2}}}),
        ),
    ];
    let fx = one(Protocol::OpenAiResponses, json!({"raw_sse": frames})).await;
    for front in [Protocol::Anthropic, Protocol::OpenAiChat] {
        let (_, seen, text) = call(&fx, front, true, &first_turn(front, true)).await;
        assert_eq!(
            seen.calls.first().map(|c| c.2.clone()),
            Some(json!({"city":"Oslo"})),
            "{front}: {text}"
        );
        assert_eq!(seen.stop, clients::tool_stop(front));
    }
    fx.stop().await;
}

/// (canonical, anthropic, chat, responses status/reason, gemini)
type Row = (
    StopReason,
    Option<&'static str>,
    Option<&'static str>,
    Option<(&'static str, Option<&'static str>)>,
    Option<&'static str>,
);

/// T15: every row of the §11 table, both directions, all four protocols.
#[test]
fn t15_stop_reason_table_rows_all_protocols() {
    use StopReason::*;
    // (canonical, anthropic, chat, responses status/reason, gemini)
    let rows: &[Row] = &[
        (
            EndTurn,
            Some("end_turn"),
            Some("stop"),
            Some(("completed", None)),
            Some("STOP"),
        ),
        (
            StopSequence,
            Some("stop_sequence"),
            Some("stop"),
            Some(("completed", None)),
            Some("STOP"),
        ),
        (
            ToolUse,
            Some("tool_use"),
            Some("tool_calls"),
            Some(("completed", None)),
            Some("STOP"),
        ),
        (
            MaxTokens,
            Some("max_tokens"),
            Some("length"),
            Some(("incomplete", Some("max_output_tokens"))),
            Some("MAX_TOKENS"),
        ),
        (
            ContextWindowExceeded,
            Some("model_context_window_exceeded"),
            Some("length"),
            Some(("incomplete", Some("max_output_tokens"))),
            Some("MAX_TOKENS"),
        ),
        (
            Refusal,
            Some("refusal"),
            Some("content_filter"),
            Some(("incomplete", Some("content_filter"))),
            Some("SAFETY"),
        ),
        (PauseTurn, Some("pause_turn"), None, None, None),
        (
            MalformedToolCall,
            None,
            None,
            None,
            Some("MALFORMED_FUNCTION_CALL"),
        ),
    ];
    for (c, a, ch, r, g) in rows {
        assert_eq!(c.to_anthropic().ok(), *a, "{c:?}");
        assert_eq!(c.to_chat().ok(), *ch, "{c:?}");
        assert_eq!(
            c.to_responses()
                .ok()
                .map(|s| (s.status, s.incomplete_reason)),
            *r,
            "{c:?}"
        );
        assert_eq!(c.to_gemini().ok(), *g, "{c:?}");
    }
    // Inbound: tool turns derived from complete calls (rule 3); the rest by value.
    assert_eq!(
        StopReason::from_responses("completed", None, true),
        Ok(ToolUse)
    );
    assert_eq!(
        StopReason::from_responses("incomplete", Some("max_output_tokens"), true),
        Ok(MaxTokens)
    );
    assert_eq!(
        StopReason::from_responses("incomplete", Some("content_filter"), false),
        Ok(Refusal)
    );
    assert_eq!(StopReason::from_gemini("STOP", true), Ok(ToolUse));
    assert_eq!(StopReason::from_gemini("STOP", false), Ok(EndTurn));
    for v in [
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
    ] {
        assert_eq!(StopReason::from_gemini(v, false), Ok(Refusal), "{v}");
    }
    assert_eq!(
        StopReason::from_gemini("UNEXPECTED_TOOL_CALL", false),
        Ok(MalformedToolCall)
    );
    for bad in ["OTHER", "FINISH_REASON_UNSPECIFIED", "bogus"] {
        assert!(StopReason::from_gemini(bad, false).is_err(), "{bad}");
    }
    assert!(StopReason::from_responses("failed", None, false).is_err());
    assert!(StopReason::from_responses("cancelled", None, false).is_err());
}

/// T16: Gemini `MAX_TOKENS` ⇒ `max_tokens` / `length` / `incomplete`, streaming and not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t16_gemini_max_tokens_is_truncation_everywhere() {
    let frame = json!({"candidates":[{"content":{"role":"model","parts":[{"text":"Once upon"}]},"finishReason":"MAX_TOKENS"}],"usageMetadata":{"promptTokenCount":4,"candidatesTokenCount":2}});
    for stream in [false, true] {
        let reply = if stream {
            json!({"raw_sse": [format!("data: {frame}\n\n")]})
        } else {
            json!({"raw_json": frame})
        };
        let fx = one(Protocol::Gemini, reply).await;
        for (front, want) in [
            (Protocol::Anthropic, "max_tokens"),
            (Protocol::OpenAiChat, "length"),
            (Protocol::OpenAiResponses, "incomplete"),
        ] {
            let (status, seen, text) = call(&fx, front, stream, &first_turn(front, stream)).await;
            assert_eq!(
                (status, seen.stop.as_str()),
                (200, want),
                "{front} stream={stream}: {text}"
            );
            if front == Protocol::OpenAiResponses {
                assert!(text.contains("max_output_tokens"), "{text}");
            }
        }
        fx.stop().await;
    }
}

/// T17: `refusal` maps per §11, `pause_turn` towards a non-Anthropic client and an unknown
/// reason are errors, never clean ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t17_refusal_pause_turn_and_unknown_reasons() {
    let msg = |stop: &str| json!({"raw_json": {"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"no"}],"stop_reason":stop,"usage":{"input_tokens":1,"output_tokens":1}}});
    let fx = one(Protocol::Anthropic, msg("refusal")).await;
    let (_, seen, _) = call(
        &fx,
        Protocol::OpenAiChat,
        false,
        &first_turn(Protocol::OpenAiChat, false),
    )
    .await;
    assert_eq!(seen.stop, "content_filter");
    let (_, seen, _) = call(
        &fx,
        Protocol::Gemini,
        false,
        &first_turn(Protocol::Gemini, false),
    )
    .await;
    assert_eq!(seen.stop, "SAFETY");
    fx.stop().await;
    for stop in ["pause_turn", "bogus_reason"] {
        let fx = one(Protocol::Anthropic, msg(stop)).await;
        let (status, _, text) = call(
            &fx,
            Protocol::OpenAiChat,
            false,
            &first_turn(Protocol::OpenAiChat, false),
        )
        .await;
        assert_eq!(status, 500, "{stop}: {text}");
        assert!(text.contains(stop), "{text}");
        fx.stop().await;
    }
}

/// T18: a truncated stream holding a partial tool call is reported as truncated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t18_truncated_partial_tool_call_is_truncation() {
    let frames = vec![
        chat_chunk(
            json!({"tool_calls":[{"index":0,"id":"call_t","type":"function","function":{"name":"get_weather","arguments":"{\"ci"}}]}),
            Value::Null,
            None,
        ),
        chat_chunk(json!({}), json!("length"), None),
        "data: [DONE]\n\n".to_owned(),
    ];
    let fx = one(Protocol::OpenAiChat, json!({"raw_sse": frames})).await;
    for (front, want) in [
        (Protocol::Anthropic, "max_tokens"),
        (Protocol::OpenAiResponses, "incomplete"),
        (Protocol::Gemini, "MAX_TOKENS"),
    ] {
        let (_, seen, text) = call(&fx, front, true, &first_turn(front, true)).await;
        assert_eq!(seen.stop, want, "{front}: {text}");
    }
    fx.stop().await;
}

/// T19: cache tokens are counted once between exclusive (Anthropic) and total protocols.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t19_cache_tokens_not_double_counted() {
    let fx = one(Protocol::Anthropic, json!({"text": "x", "usage": {"input": 40, "cache_read": 50, "cache_write": 10, "output": 5}})).await;
    for front in [
        Protocol::OpenAiChat,
        Protocol::OpenAiResponses,
        Protocol::Gemini,
    ] {
        let (_, seen, _) = call(&fx, front, false, &first_turn(front, false)).await;
        assert_eq!(seen.input_tokens, Some(100), "{front}");
    }
    fx.stop().await;
    let fx = fx_chat_usage(json!({"prompt_tokens": 100, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 60}})).await;
    let (_, _, text) = fx
        .post(
            path(Protocol::Anthropic, false),
            &first_turn(Protocol::Anthropic, false),
            &[],
        )
        .await;
    let v: Value = serde_json::from_str(&text).unwrap_or_default();
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 40, "output_tokens": 5, "cache_read_input_tokens": 60})
    );
    fx.stop().await;
}

async fn fx_chat_usage(usage: Value) -> Fixture {
    one(Protocol::OpenAiChat, json!({"raw_json": {"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"x"},"finish_reason":"stop"}],"usage":usage}})).await
}

fn anthropic_stream(start_usage: Value, delta_usage: Value) -> Vec<String> {
    vec![
        ev(
            "message_start",
            json!({"type":"message_start","message":{"id":"msg_u","type":"message","role":"assistant","model":"m","content":[],"usage":start_usage}}),
        ),
        ev(
            "content_block_start",
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        ),
        ev(
            "content_block_delta",
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}),
        ),
        ev(
            "content_block_stop",
            json!({"type":"content_block_stop","index":0}),
        ),
        ev(
            "message_delta",
            json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":delta_usage}),
        ),
        ev("message_stop", json!({"type":"message_stop"})),
    ]
}

/// T20: final usage (input and cache fields) only on `message_delta` still reaches the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t20_usage_only_on_message_delta_is_used() {
    let frames = anthropic_stream(
        json!({"input_tokens": 0, "output_tokens": 0}),
        json!({"input_tokens": 30, "cache_read_input_tokens": 20, "output_tokens": 9}),
    );
    let fx = one(Protocol::Anthropic, json!({"raw_sse": frames})).await;
    let (_, seen, text) = call(
        &fx,
        Protocol::OpenAiChat,
        true,
        &first_turn(Protocol::OpenAiChat, true),
    )
    .await;
    assert_eq!(
        (seen.input_tokens, seen.output_tokens),
        (Some(50), Some(9)),
        "{text}"
    );
    fx.stop().await;
}

/// T21: cache fields are present in streamed usage, in both directions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t21_cache_fields_in_streamed_usage() {
    let fx = one(
        Protocol::Anthropic,
        json!({"text": "x", "usage": {"input": 10, "cache_read": 90, "output": 3}}),
    )
    .await;
    let (_, _, text) = fx
        .post(
            path(Protocol::OpenAiChat, true),
            &first_turn(Protocol::OpenAiChat, true),
            &[],
        )
        .await;
    let usage = sse_events(&text)
        .into_iter()
        .filter_map(|(_, d)| d.get("usage").filter(|u| !u.is_null()).cloned())
        .next_back()
        .unwrap_or_default();
    assert_eq!(
        usage["prompt_tokens_details"]["cached_tokens"], 90,
        "{text}"
    );
    fx.stop().await;
    let fx = one(
        Protocol::OpenAiChat,
        json!({"text": "x", "usage": {"input": 10, "cache_read": 90, "output": 3}}),
    )
    .await;
    let (_, _, text) = fx
        .post(
            path(Protocol::Anthropic, true),
            &first_turn(Protocol::Anthropic, true),
            &[],
        )
        .await;
    let delta = sse_events(&text)
        .into_iter()
        .find(|(n, _)| n == "message_delta")
        .map(|e| e.1)
        .unwrap_or_default();
    assert_eq!(delta["usage"]["cache_read_input_tokens"], 90, "{text}");
    assert_eq!(delta["usage"]["input_tokens"], 10);
    fx.stop().await;
}

/// T22: an Anthropic upstream stream's input count (only in `message_start`) reaches Chat and
/// Responses clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t22_input_tokens_taken_from_message_start() {
    let frames = anthropic_stream(
        json!({"input_tokens": 321, "output_tokens": 1}),
        json!({"output_tokens": 12}),
    );
    let fx = one(Protocol::Anthropic, json!({"raw_sse": frames})).await;
    for front in [
        Protocol::OpenAiChat,
        Protocol::OpenAiResponses,
        Protocol::Gemini,
    ] {
        let (_, seen, text) = call(&fx, front, true, &first_turn(front, true)).await;
        assert_eq!(
            (seen.input_tokens, seen.output_tokens),
            (Some(321), Some(12)),
            "{front}: {text}"
        );
    }
    fx.stop().await;
}

/// T23: repeated cumulative usage frames are set, not added; input = prompt − cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t23_cumulative_usage_frames_are_set_not_added() {
    let frame = |text: &str, out: u64, finish: Option<&str>| {
        let mut c = json!({"content":{"role":"model","parts":[{"text":text}]}});
        if let Some(f) = finish {
            c["finishReason"] = json!(f);
        }
        format!(
            "data: {}\n\n",
            json!({"candidates":[c],"usageMetadata":{"promptTokenCount":50,"cachedContentTokenCount":20,"candidatesTokenCount":out}})
        )
    };
    let frames = vec![
        frame("a", 1, None),
        frame("b", 2, None),
        frame("c", 3, Some("STOP")),
    ];
    let fx = one(Protocol::Gemini, json!({"raw_sse": frames})).await;
    let (_, _, text) = fx
        .post(
            path(Protocol::Anthropic, true),
            &first_turn(Protocol::Anthropic, true),
            &[],
        )
        .await;
    let delta = sse_events(&text)
        .into_iter()
        .find(|(n, _)| n == "message_delta")
        .map(|e| e.1)
        .unwrap_or_default();
    assert_eq!(
        delta["usage"],
        json!({"input_tokens": 30, "output_tokens": 3, "cache_read_input_tokens": 20}),
        "{text}"
    );
    fx.stop().await;
}

/// T24: images inside an Anthropic tool_result reach Chat, Responses and Gemini upstreams.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t24_images_in_tool_results_reach_every_upstream() {
    for up in [
        Protocol::OpenAiChat,
        Protocol::OpenAiResponses,
        Protocol::Gemini,
    ] {
        let fx = one(up, json!({"text": "ok"})).await;
        let (status, _, text) = fx.post("/v1/messages?beta=true", &claude_code(), &[]).await;
        assert_eq!(status, 200, "{up}: {text}");
        let sent = fx.last_upstream().body.to_string();
        assert!(sent.contains("iVBORw0KGgo="), "{up}: image kept: {sent}");
        fx.stop().await;
    }
}

/// T25: the Claude Code 2.1.197 request is accepted and translated for each upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t25_claude_code_request_accepted_for_every_upstream() {
    let beta = (
        "anthropic-beta",
        "claude-code-20250219,interleaved-thinking-2025-05-14,mid-conversation-system-2026-04-07",
    );
    for up in Protocol::ALL {
        let fx = one(up, json!({"text": "ok"})).await;
        let (status, _, text) = fx
            .post(
                "/v1/messages?beta=true",
                &claude_code(),
                &[beta, ("anthropic-version", "2023-06-01")],
            )
            .await;
        assert_eq!(status, 200, "{up}: {text}");
        let seen = read_sse(Protocol::Anthropic, &text);
        assert_eq!(seen.text, "ok", "{up}");
        let logged = fx.last_upstream();
        let has_beta = logged.headers.iter().any(|(k, _)| k == "anthropic-beta");
        assert_eq!(
            has_beta,
            up == Protocol::Anthropic,
            "{up}: betas only to Anthropic"
        );
        fx.stop().await;
    }
}

/// T26: the Codex 0.171.0 request (developer items, no instructions, namespace + hosted
/// tools, encrypted reasoning include, store:false) is translated to a Chat upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t26_codex_request_translated_to_chat() {
    let fx = one(Protocol::OpenAiChat, json!({"text": "ok"})).await;
    let f = |n: &str| json!({"type":"function","name":n,"description":"d","strict":false,"parameters":{"type":"object","properties":{}}});
    let mut tools: Vec<Value> = [
        "exec_command",
        "write_stdin",
        "request_user_input",
        "view_image",
        "get_goal",
        "create_goal",
        "update_goal",
    ]
    .iter()
    .map(|n| f(n))
    .collect();
    tools.push(json!({"type":"namespace","name":"multi_agent_v1","tools":[f("spawn")]}));
    tools.push(json!({"type":"web_search"}));
    let body = json!({"model":"fake-model","stream":true,"tools":tools,"tool_choice":"auto","parallel_tool_calls":true,
        "reasoning":{"summary":"auto"},"store":false,"include":["reasoning.encrypted_content"],
        "prompt_cache_key":"thread-1","client_metadata":{"x":"y"},
        "input":[
            {"type":"message","role":"developer","content":[{"type":"input_text","text":"base prompt"}]},
            {"type":"message","role":"developer","content":[{"type":"input_text","text":"permissions"}]},
            {"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context>cwd</environment_context>"}]},
            {"type":"message","role":"user","content":[{"type":"input_text","text":"write hello"}]}]});
    let (status, _, text) = fx
        .post("/v1/responses", &body, &[("accept", "text/event-stream")])
        .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(read_sse(Protocol::OpenAiResponses, &text).text, "ok");
    let up = fx.last_upstream().body;
    assert_eq!(
        up["messages"][0],
        json!({"role":"system","content":"base prompt\n\npermissions"})
    );
    assert_eq!(up["messages"].as_array().map(Vec::len), Some(3));
    assert_eq!(
        up["tools"].as_array().map(Vec::len),
        Some(7),
        "namespace and hosted tools dropped"
    );
    assert_eq!(up["parallel_tool_calls"], true);
    fx.stop().await;
}

/// T27: Gemini streaming is chosen by the URL alone; a JSON-mode `:generateContent` router
/// call is answered as one JSON object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t27_gemini_streaming_by_url_and_json_mode_call() {
    for up in [Protocol::Gemini, Protocol::Anthropic] {
        let fx = Fixture::simple(None, up).await;
        let router = json!({"contents":[{"role":"user","parts":[{"text":"route me"}]}],
            "generationConfig":{"responseMimeType":"application/json","responseJsonSchema":{"type":"object","properties":{"complexity_reasoning":{"type":"string"},"complexity_score":{"type":"integer","minimum":1}}}}});
        let (status, headers, text) = fx
            .post(
                "/v1beta/models/gemini-3.5-flash-lite:generateContent",
                &router,
                &[],
            )
            .await;
        assert_eq!(status, 200, "{up}: {text}");
        assert!(
            headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|c| c.starts_with("application/json"))
        );
        if up == Protocol::Gemini {
            let seen = read_json(
                Protocol::Gemini,
                &serde_json::from_str(&text).unwrap_or_default(),
            );
            let obj: Value = serde_json::from_str(&seen.text).unwrap_or_default();
            assert!(
                obj["complexity_score"].as_i64().is_some_and(|n| n >= 1),
                "{text}"
            );
        }
        let (status, headers, text) = fx
            .post(
                "/v1beta/models/fake:streamGenerateContent?alt=sse",
                &first_turn(Protocol::Gemini, false),
                &[],
            )
            .await;
        assert_eq!(status, 200);
        assert!(
            headers
                .get("content-type")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|c| c.starts_with("text/event-stream")),
            "{up}"
        );
        assert!(text.starts_with("data: "), "{up}: {text}");
        fx.stop().await;
    }
}

/// T28: covered end to end in e2e.rs (`t28_upstream_429_and_overload_keep_status_envelope_
/// and_retry_after`); here the Anthropic-specific 529 towards an Anthropic client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t28_overloaded_is_529_towards_anthropic_clients() {
    let s: Script = script(
        json!({"turns": [{"when": {}, "reply": {"error": {"status": 503, "message": "busy"}}}]}),
    );
    let fx = Fixture::start(Some(s), |b| {
        let mut r = Route::new("r", upstream_for(Protocol::OpenAiChat, b));
        r.policy.max_retries = 0;
        ProxyConfig::with_routes(vec![r])
    })
    .await;
    let (status, _, text) = fx
        .post("/v1/messages", &first_turn(Protocol::Anthropic, false), &[])
        .await;
    assert_eq!(status, 529, "{text}");
    assert!(text.contains("overloaded_error"));
    fx.stop().await;
}

/// T29: a mid-stream upstream error becomes each client protocol's in-band error frame and
/// the stream is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t29_mid_stream_error_becomes_in_band_error_frame() {
    let mut frames = anthropic_stream(json!({"input_tokens": 1}), json!({"output_tokens": 1}));
    frames.truncate(3);
    frames.push(ev(
        "error",
        json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
    ));
    let fx = one(Protocol::Anthropic, json!({"raw_sse": frames})).await;
    let want = [
        (Protocol::OpenAiChat, "error:server_error"),
        (Protocol::OpenAiResponses, "error:server_error"),
        (Protocol::Gemini, "error:UNAVAILABLE"),
    ];
    for (front, stop) in want {
        let (_, seen, text) = call(&fx, front, true, &first_turn(front, true)).await;
        assert_eq!(seen.stop, stop, "{front}: {text}");
        assert_eq!(seen.text, "hi");
    }
    fx.stop().await;
}

/// T30: see e2e.rs `t30_count_tokens_endpoints`; the Anthropic shape once more here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn t30_messages_count_tokens_answers_input_tokens() {
    let fx = one(Protocol::OpenAiChat, json!({"text": "x"})).await;
    let (status, _, text) = fx
        .post(
            "/v1/messages/count_tokens",
            &json!({"model":"m","messages":[{"role":"user","content":"abcd"}]}),
            &[],
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap_or_default(),
        json!({"input_tokens": 1})
    );
    fx.stop().await;
}

/// Spec §10 rule 1 across protocols: a Responses provider's `encrypted_content` and a Gemini
/// thought signature reach Claude Code as tagged thinking signatures and go back to the same
/// provider byte for byte on the next turn, streaming and not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_signatures_round_trip_through_an_anthropic_client() {
    for (up, sig) in [
        (Protocol::OpenAiResponses, "gAAAA-ENC-1+/="),
        (Protocol::Gemini, "TS-gem-1+/="),
    ] {
        let s = script(json!({"turns": [
            {"when": {"has_tool_result": false}, "reply": {"thinking": {"text": "plan", "signature": sig},
                "tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]}},
            {"when": {"has_tool_result": true}, "reply": {"text": "done"}}]}));
        let fx = Fixture::simple(Some(s), up).await;
        for stream in [false, true] {
            let (_, _, text) = fx
                .post(
                    path(Protocol::Anthropic, stream),
                    &first_turn(Protocol::Anthropic, stream),
                    &[],
                )
                .await;
            let (thinking, signature, call) = if stream {
                let evs = sse_events(&text);
                let t: String = evs
                    .iter()
                    .filter_map(|(_, d)| d["delta"]["thinking"].as_str())
                    .collect();
                let s: String = evs
                    .iter()
                    .filter_map(|(_, d)| d["delta"]["signature"].as_str())
                    .collect();
                let seen = read_sse(Protocol::Anthropic, &text);
                (t, s, seen.calls[0].clone())
            } else {
                let v: Value = serde_json::from_str(&text).unwrap_or_default();
                let seen = read_json(Protocol::Anthropic, &v);
                (
                    s_of(&v["content"][0]["thinking"]),
                    s_of(&v["content"][0]["signature"]),
                    seen.calls[0].clone(),
                )
            };
            assert_eq!(thinking, "plan", "{up} stream={stream}: {text}");
            assert!(
                signature.ends_with(sig) && signature.starts_with("babysitter."),
                "{up} stream={stream}: {signature}: {text}"
            );
            let mut body = first_turn(Protocol::Anthropic, stream);
            body["messages"] = json!([{"role":"user","content":"weather?"},
                {"role":"assistant","content":[{"type":"thinking","thinking":thinking,"signature":signature},
                    {"type":"tool_use","id":call.0,"name":call.1,"input":call.2}]},
                {"role":"user","content":[{"type":"tool_result","tool_use_id":call.0,"content":"sun"}]}]);
            let (status, _, text) = fx.post(path(Protocol::Anthropic, stream), &body, &[]).await;
            assert_eq!(status, 200, "{text}");
            let sent = fx.last_upstream().body;
            let replayed = match up {
                Protocol::OpenAiResponses => sent["input"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|i| i["type"] == "reasoning")
                    .map(|i| s_of(&i["encrypted_content"])),
                _ => sent["contents"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|c| c["parts"].as_array().into_iter().flatten())
                    .find(|p| p["thought"] == true)
                    .map(|p| s_of(&p["thoughtSignature"])),
            };
            assert_eq!(
                replayed.as_deref(),
                Some(sig),
                "{up} stream={stream}: {sent}"
            );
        }
        fx.stop().await;
    }
}

fn s_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}
