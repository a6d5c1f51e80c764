//! Test clients of the four protocols: request bodies for a tool-call turn and a tool-result
//! turn, and readers that reassemble what a client SDK would see from a JSON or SSE answer.

#![allow(dead_code)]

use babysitter_transport_proxy::protocol::Protocol;
use serde_json::{Value, json};

/// What a client ends up with after one turn.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Seen {
    /// (id, name, arguments, gemini thoughtSignature)
    pub calls: Vec<(String, String, Value, Option<String>)>,
    pub text: String,
    pub thinking: String,
    /// The front's own stop value (stop_reason / finish_reason / status / finishReason).
    pub stop: String,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
}

pub fn path(front: Protocol, stream: bool) -> &'static str {
    match (front, stream) {
        (Protocol::Anthropic, _) => "/v1/messages?beta=true",
        (Protocol::OpenAiChat, _) => "/v1/chat/completions",
        (Protocol::OpenAiResponses, _) => "/v1/responses",
        (Protocol::Gemini, false) => "/v1beta/models/gemini-front:generateContent",
        (Protocol::Gemini, true) => "/v1beta/models/gemini-front:streamGenerateContent?alt=sse",
    }
}

pub fn tool_stop(front: Protocol) -> &'static str {
    match front {
        Protocol::Anthropic => "tool_use",
        Protocol::OpenAiChat => "tool_calls",
        Protocol::OpenAiResponses => "completed",
        Protocol::Gemini => "STOP",
    }
}

pub fn end_stop(front: Protocol) -> &'static str {
    match front {
        Protocol::Anthropic => "end_turn",
        Protocol::OpenAiChat => "stop",
        Protocol::OpenAiResponses => "completed",
        Protocol::Gemini => "STOP",
    }
}

const QUESTION: &str = "weather in Paris?";

/// First turn: a question with the weather tool offered.
pub fn first_turn(front: Protocol, stream: bool) -> Value {
    let schema = json!({"type":"object","properties":{"city":{"type":"string"}},"required":["city"],"additionalProperties":false});
    match front {
        Protocol::Anthropic => json!({"model":"claude-front","max_tokens":256,"stream":stream,
            "system":[{"type":"text","text":"be brief"}],
            "tools":[{"name":"get_weather","description":"Get weather","input_schema":schema}],
            "messages":[{"role":"user","content":QUESTION}]}),
        Protocol::OpenAiChat => {
            json!({"model":"chat-front","stream":stream,"stream_options":{"include_usage":true},
            "tools":[{"type":"function","function":{"name":"get_weather","description":"Get weather","parameters":schema}}],
            "messages":[{"role":"system","content":"be brief"},{"role":"user","content":QUESTION}]})
        }
        Protocol::OpenAiResponses => {
            json!({"model":"responses-front","stream":stream,"store":false,
            "tools":[{"type":"function","name":"get_weather","description":"Get weather","parameters":schema}],
            "input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"be brief"}]},
                     {"type":"message","role":"user","content":[{"type":"input_text","text":QUESTION}]}]})
        }
        Protocol::Gemini => json!({"systemInstruction":{"parts":[{"text":"be brief"}]},
            "tools":[{"functionDeclarations":[{"name":"get_weather","description":"Get weather","parameters":schema}]}],
            "contents":[{"role":"user","parts":[{"text":QUESTION}]}]}),
    }
}

/// Second turn: the history with the call `seen` made and its result "sunny, 24C".
pub fn second_turn(front: Protocol, stream: bool, seen: &Seen) -> Value {
    let mut body = first_turn(front, stream);
    let (id, name, args, sig) = seen.calls.first().cloned().unwrap_or_default();
    match front {
        Protocol::Anthropic => {
            body["messages"] = json!([
                {"role":"user","content":QUESTION},
                {"role":"assistant","content":[{"type":"tool_use","id":id,"name":name,"input":args}]},
                {"role":"user","content":[{"type":"tool_result","tool_use_id":id,"content":"sunny, 24C"}]}
            ]);
        }
        Protocol::OpenAiChat => {
            body["messages"] = json!([
                {"role":"system","content":"be brief"},
                {"role":"user","content":QUESTION},
                {"role":"assistant","content":null,"tool_calls":[{"id":id,"type":"function","function":{"name":name,"arguments":args.to_string()}}]},
                {"role":"tool","tool_call_id":id,"content":"sunny, 24C"}
            ]);
        }
        Protocol::OpenAiResponses => {
            if let Some(input) = body["input"].as_array_mut() {
                input.push(json!({"type":"function_call","call_id":id,"name":name,"arguments":args.to_string()}));
                input.push(
                    json!({"type":"function_call_output","call_id":id,"output":"sunny, 24C"}),
                );
            }
        }
        Protocol::Gemini => {
            // Like Gemini CLI: the call goes back with its signature, the response by name.
            let mut call = json!({"functionCall":{"name":name,"args":args}});
            if let Some(s) = sig {
                call["thoughtSignature"] = json!(s);
            }
            if let Some(c) = body["contents"].as_array_mut() {
                c.push(json!({"role":"model","parts":[call]}));
                c.push(json!({"role":"user","parts":[{"functionResponse":{"name":name,"response":{"output":"sunny, 24C"}}}]}));
            }
        }
    }
    body
}

/// Splits an SSE body into (event name, data).
pub fn sse_events(body: &str) -> Vec<(String, Value)> {
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

fn parse_args(s: &str) -> Value {
    if s.is_empty() {
        return json!({});
    }
    serde_json::from_str(s).unwrap_or(Value::String(s.to_owned()))
}

/// Reads a non-streamed answer of `front`.
pub fn read_json(front: Protocol, v: &Value) -> Seen {
    let mut s = Seen::default();
    let str_of = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match front {
        Protocol::Anthropic => {
            for b in v["content"].as_array().into_iter().flatten() {
                match b["type"].as_str() {
                    Some("tool_use") => s.calls.push((
                        str_of(&b["id"]),
                        str_of(&b["name"]),
                        b["input"].clone(),
                        None,
                    )),
                    Some("text") => s.text.push_str(b["text"].as_str().unwrap_or_default()),
                    Some("thinking") => s
                        .thinking
                        .push_str(b["thinking"].as_str().unwrap_or_default()),
                    _ => {}
                }
            }
            s.stop = str_of(&v["stop_reason"]);
            s.input_tokens = v["usage"]["input_tokens"].as_u64();
            s.output_tokens = v["usage"]["output_tokens"].as_u64();
        }
        Protocol::OpenAiChat => {
            let m = &v["choices"][0]["message"];
            for c in m["tool_calls"].as_array().into_iter().flatten() {
                s.calls.push((
                    str_of(&c["id"]),
                    str_of(&c["function"]["name"]),
                    parse_args(c["function"]["arguments"].as_str().unwrap_or_default()),
                    None,
                ));
            }
            s.text = m["content"].as_str().unwrap_or_default().to_owned();
            s.thinking = m["reasoning_content"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            s.stop = str_of(&v["choices"][0]["finish_reason"]);
            s.input_tokens = v["usage"]["prompt_tokens"].as_u64();
            s.output_tokens = v["usage"]["completion_tokens"].as_u64();
        }
        Protocol::OpenAiResponses => {
            for item in v["output"].as_array().into_iter().flatten() {
                match item["type"].as_str() {
                    Some("function_call") => s.calls.push((
                        str_of(&item["call_id"]),
                        str_of(&item["name"]),
                        parse_args(item["arguments"].as_str().unwrap_or_default()),
                        None,
                    )),
                    Some("message") => {
                        for c in item["content"].as_array().into_iter().flatten() {
                            s.text.push_str(c["text"].as_str().unwrap_or_default());
                        }
                    }
                    Some("reasoning") => {
                        for c in item["summary"].as_array().into_iter().flatten() {
                            s.thinking.push_str(c["text"].as_str().unwrap_or_default());
                        }
                    }
                    _ => {}
                }
            }
            s.stop = str_of(&v["status"]);
            s.input_tokens = v["usage"]["input_tokens"].as_u64();
            s.output_tokens = v["usage"]["output_tokens"].as_u64();
        }
        Protocol::Gemini => {
            read_gemini_frame(v, &mut s);
        }
    }
    s
}

fn read_gemini_frame(v: &Value, s: &mut Seen) {
    let c = &v["candidates"][0];
    for p in c["content"]["parts"].as_array().into_iter().flatten() {
        if let Some(fc) = p.get("functionCall") {
            s.calls.push((
                fc["id"].as_str().unwrap_or_default().to_owned(),
                fc["name"].as_str().unwrap_or_default().to_owned(),
                fc["args"].clone(),
                p["thoughtSignature"].as_str().map(str::to_owned),
            ));
        } else if p["thought"] == true {
            s.thinking.push_str(p["text"].as_str().unwrap_or_default());
        } else if let Some(t) = p["text"].as_str() {
            s.text.push_str(t);
        }
    }
    if let Some(f) = c["finishReason"].as_str() {
        s.stop = f.to_owned();
    }
    if let Some(u) = v["usageMetadata"]["promptTokenCount"].as_u64() {
        s.input_tokens = Some(u);
        s.output_tokens = v["usageMetadata"]["candidatesTokenCount"].as_u64();
    }
}

/// Reads a streamed answer of `front`, checking the protocol's framing rules on the way.
pub fn read_sse(front: Protocol, body: &str) -> Seen {
    let evs = sse_events(body);
    let mut s = Seen::default();
    match front {
        Protocol::Anthropic => {
            assert_eq!(
                evs.first().map(|e| e.0.as_str()),
                Some("message_start"),
                "T13: {body}"
            );
            let mut args: Vec<String> = Vec::new();
            let mut block_kind: Vec<String> = Vec::new();
            for (name, d) in &evs {
                match name.as_str() {
                    "message_start" => {
                        s.input_tokens = d["message"]["usage"]["input_tokens"].as_u64()
                    }
                    "content_block_start" => {
                        let b = &d["content_block"];
                        let kind = b["type"].as_str().unwrap_or_default().to_owned();
                        assert_eq!(
                            d["index"].as_u64(),
                            Some(block_kind.len() as u64),
                            "sequential blocks"
                        );
                        if kind == "tool_use" {
                            s.calls.push((
                                b["id"].as_str().unwrap_or_default().to_owned(),
                                b["name"].as_str().unwrap_or_default().to_owned(),
                                Value::Null,
                                None,
                            ));
                        }
                        block_kind.push(kind);
                        args.push(String::new());
                    }
                    "content_block_delta" => {
                        let i = d["index"].as_u64().unwrap_or(0) as usize;
                        let delta = &d["delta"];
                        match delta["type"].as_str() {
                            Some("text_delta") => {
                                s.text.push_str(delta["text"].as_str().unwrap_or_default())
                            }
                            Some("thinking_delta") => s
                                .thinking
                                .push_str(delta["thinking"].as_str().unwrap_or_default()),
                            Some("input_json_delta") => {
                                if let Some(a) = args.get_mut(i) {
                                    a.push_str(delta["partial_json"].as_str().unwrap_or_default());
                                }
                            }
                            _ => {}
                        }
                    }
                    "message_delta" => {
                        s.stop = d["delta"]["stop_reason"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned();
                        s.output_tokens = d["usage"]["output_tokens"].as_u64();
                        if let Some(i) = d["usage"]["input_tokens"].as_u64() {
                            s.input_tokens = Some(i);
                        }
                    }
                    "error" => {
                        s.stop =
                            format!("error:{}", d["error"]["type"].as_str().unwrap_or_default())
                    }
                    _ => {}
                }
            }
            let mut k = 0;
            for (kind, a) in block_kind.iter().zip(&args) {
                if kind == "tool_use" {
                    s.calls[k].2 = parse_args(a);
                    k += 1;
                }
            }
        }
        Protocol::OpenAiChat => {
            let mut calls: Vec<(String, String, String)> = Vec::new();
            for (_, d) in &evs {
                if d == "[DONE]" {
                    continue;
                }
                if let Some(e) = d.get("error") {
                    s.stop = format!("error:{}", e["type"].as_str().unwrap_or_default());
                }
                if let Some(u) = d.get("usage").filter(|u| !u.is_null()) {
                    s.input_tokens = u["prompt_tokens"].as_u64();
                    s.output_tokens = u["completion_tokens"].as_u64();
                }
                let c = &d["choices"][0];
                let delta = &c["delta"];
                s.text
                    .push_str(delta["content"].as_str().unwrap_or_default());
                s.thinking
                    .push_str(delta["reasoning_content"].as_str().unwrap_or_default());
                for tc in delta["tool_calls"].as_array().into_iter().flatten() {
                    let i = tc["index"].as_u64().unwrap_or(0) as usize;
                    while calls.len() <= i {
                        calls.push(Default::default());
                    }
                    if let Some(id) = tc["id"].as_str() {
                        calls[i].0 = id.to_owned();
                    }
                    if let Some(n) = tc["function"]["name"].as_str() {
                        calls[i].1.push_str(n);
                    }
                    calls[i]
                        .2
                        .push_str(tc["function"]["arguments"].as_str().unwrap_or_default());
                }
                if let Some(f) = c["finish_reason"].as_str() {
                    s.stop = f.to_owned();
                }
            }
            if !s.stop.starts_with("error:") {
                assert_eq!(
                    evs.last().map(|e| e.1.clone()),
                    Some(json!("[DONE]")),
                    "{body}"
                );
            }
            s.calls = calls
                .into_iter()
                .map(|(i, n, a)| (i, n, parse_args(&a), None))
                .collect();
        }
        Protocol::OpenAiResponses => {
            assert_eq!(
                evs.first().map(|e| e.0.as_str()),
                Some("response.created"),
                "T13: {body}"
            );
            let mut seq = None;
            for (name, d) in &evs {
                let n = d["sequence_number"].as_u64();
                assert!(n.is_some() && n > seq, "sequence numbers increase: {name}");
                seq = n;
                if name == "response.output_text.delta" {
                    s.text.push_str(d["delta"].as_str().unwrap_or_default());
                }
            }
            let (last, d) = evs.last().cloned().unwrap_or_default();
            if last == "response.failed" {
                s.stop = format!(
                    "error:{}",
                    d["response"]["error"]["code"].as_str().unwrap_or_default()
                );
                return s;
            }
            let streamed_text = std::mem::take(&mut s.text);
            s = read_json(Protocol::OpenAiResponses, &d["response"]);
            assert_eq!(
                s.text, streamed_text,
                "terminal output equals streamed items"
            );
        }
        Protocol::Gemini => {
            for (_, d) in &evs {
                if let Some(e) = d.get("error") {
                    s.stop = format!("error:{}", e["status"].as_str().unwrap_or_default());
                }
                read_gemini_frame(d, &mut s);
            }
        }
    }
    s
}
