//! Table-driven request translation for every front ⇄ upstream pair: one rich conversation
//! written in each front protocol (system prompt, tools, a specific tool choice, sampling,
//! an assistant tool call and its result with text, a follow-up question) is decoded and
//! encoded for each upstream protocol, and the same facts are read back out of every
//! upstream body. Responses (JSON and streams) for every pair are in matrix.rs.

use babysitter_transport_proxy::protocol::{
    EncodeOptions, Protocol, UrlFacts, decode_request, encode_request,
};
use babysitter_transport_proxy::sigstore::SignatureStore;
use serde_json::{Value, json};

/// The facts every translation must keep.
#[derive(Debug, PartialEq)]
struct Facts {
    system: String,
    tools: Vec<String>,
    forced_tool: Option<String>,
    max_tokens: Option<u64>,
    temperature: Option<f64>,
    call: (String, Value),
    result_text: String,
    last_user: String,
}

fn expected() -> Facts {
    Facts {
        system: "be brief".into(),
        tools: vec!["get_weather".into(), "get_time".into()],
        forced_tool: Some("get_weather".into()),
        max_tokens: Some(300),
        temperature: Some(0.5),
        call: ("get_weather".into(), json!({"city": "Paris"})),
        result_text: "sunny".into(),
        last_user: "and tomorrow?".into(),
    }
}

fn params() -> Value {
    json!({"type":"object","properties":{"city":{"type":"string"}},"additionalProperties":false})
}

fn front_body(p: Protocol) -> Value {
    match p {
        Protocol::Anthropic => json!({"model":"m","max_tokens":300,"temperature":0.5,
            "system":"be brief","tool_choice":{"type":"tool","name":"get_weather"},
            "tools":[{"name":"get_weather","input_schema":params()},{"name":"get_time","input_schema":{"type":"object"}}],
            "messages":[{"role":"user","content":"weather?"},
                {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{"city":"Paris"}}]},
                {"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"sunny"},{"type":"text","text":"and tomorrow?"}]}]}),
        Protocol::OpenAiChat => json!({"model":"m","max_completion_tokens":300,"temperature":0.5,
            "tool_choice":{"type":"function","function":{"name":"get_weather"}},
            "tools":[{"type":"function","function":{"name":"get_weather","parameters":params()}},{"type":"function","function":{"name":"get_time"}}],
            "messages":[{"role":"system","content":"be brief"},{"role":"user","content":"weather?"},
                {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
                {"role":"tool","tool_call_id":"call_1","content":"sunny"},
                {"role":"user","content":"and tomorrow?"}]}),
        Protocol::OpenAiResponses => json!({"model":"m","max_output_tokens":300,"temperature":0.5,
            "instructions":"be brief","tool_choice":{"type":"function","name":"get_weather"},
            "tools":[{"type":"function","name":"get_weather","parameters":params()},{"type":"function","name":"get_time","parameters":{"type":"object"}}],
            "input":[{"role":"user","content":"weather?"},
                {"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},
                {"type":"function_call_output","call_id":"call_1","output":"sunny"},
                {"type":"message","role":"user","content":[{"type":"input_text","text":"and tomorrow?"}]}]}),
        Protocol::Gemini => json!({"systemInstruction":{"parts":[{"text":"be brief"}]},
            "generationConfig":{"maxOutputTokens":300,"temperature":0.5},
            "toolConfig":{"functionCallingConfig":{"mode":"ANY","allowedFunctionNames":["get_weather"]}},
            "tools":[{"functionDeclarations":[{"name":"get_weather","parameters":params()},{"name":"get_time"}]}],
            "contents":[{"role":"user","parts":[{"text":"weather?"}]},
                {"role":"model","parts":[{"functionCall":{"name":"get_weather","args":{"city":"Paris"}}}]},
                {"role":"user","parts":[{"functionResponse":{"name":"get_weather","response":{"output":"sunny"}}},{"text":"and tomorrow?"}]}]}),
    }
}

fn s(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

/// Reads the facts back out of an upstream body of protocol `p`.
fn read(p: Protocol, b: &Value) -> Facts {
    let arr = |v: &Value| v.as_array().cloned().unwrap_or_default();
    match p {
        Protocol::Anthropic => {
            let msgs = arr(&b["messages"]);
            let call = msgs
                .iter()
                .flat_map(|m| arr(&m["content"]))
                .find(|c| c["type"] == "tool_use")
                .unwrap_or_default();
            let result = msgs
                .iter()
                .flat_map(|m| arr(&m["content"]))
                .find(|c| c["type"] == "tool_result")
                .unwrap_or_default();
            assert_eq!(result["tool_use_id"], call["id"], "pairing");
            let last = msgs.last().cloned().unwrap_or_default();
            Facts {
                system: s(&b["system"][0]["text"]),
                tools: arr(&b["tools"]).iter().map(|t| s(&t["name"])).collect(),
                forced_tool: b["tool_choice"]["name"].as_str().map(str::to_owned),
                max_tokens: b["max_tokens"].as_u64(),
                temperature: b["temperature"].as_f64(),
                call: (s(&call["name"]), call["input"].clone()),
                result_text: s(&result["content"][0]["text"]),
                last_user: arr(&last["content"])
                    .iter()
                    .filter(|c| c["type"] == "text")
                    .map(|c| s(&c["text"]))
                    .collect(),
            }
        }
        Protocol::OpenAiChat => {
            let msgs = arr(&b["messages"]);
            let call = msgs
                .iter()
                .flat_map(|m| arr(&m["tool_calls"]))
                .next()
                .unwrap_or_default();
            let tool = msgs
                .iter()
                .find(|m| m["role"] == "tool")
                .cloned()
                .unwrap_or_default();
            assert_eq!(tool["tool_call_id"], call["id"], "pairing");
            Facts {
                system: s(&msgs[0]["content"]),
                tools: arr(&b["tools"])
                    .iter()
                    .map(|t| s(&t["function"]["name"]))
                    .collect(),
                forced_tool: b["tool_choice"]["function"]["name"]
                    .as_str()
                    .map(str::to_owned),
                max_tokens: b["max_tokens"].as_u64(),
                temperature: b["temperature"].as_f64(),
                call: (
                    s(&call["function"]["name"]),
                    serde_json::from_str(call["function"]["arguments"].as_str().unwrap_or("null"))
                        .unwrap_or_default(),
                ),
                result_text: s(&tool["content"]),
                last_user: s(&msgs.last().cloned().unwrap_or_default()["content"]),
            }
        }
        Protocol::OpenAiResponses => {
            let input = arr(&b["input"]);
            let call = input
                .iter()
                .find(|i| i["type"] == "function_call")
                .cloned()
                .unwrap_or_default();
            let out = input
                .iter()
                .find(|i| i["type"] == "function_call_output")
                .cloned()
                .unwrap_or_default();
            assert_eq!(out["call_id"], call["call_id"], "pairing");
            Facts {
                system: s(&b["instructions"]),
                tools: arr(&b["tools"]).iter().map(|t| s(&t["name"])).collect(),
                forced_tool: b["tool_choice"]["name"].as_str().map(str::to_owned),
                max_tokens: b["max_output_tokens"].as_u64(),
                temperature: b["temperature"].as_f64(),
                call: (
                    s(&call["name"]),
                    serde_json::from_str(call["arguments"].as_str().unwrap_or("null"))
                        .unwrap_or_default(),
                ),
                result_text: s(&out["output"]),
                last_user: s(&input.last().cloned().unwrap_or_default()["content"][0]["text"]),
            }
        }
        Protocol::Gemini => {
            let contents = arr(&b["contents"]);
            let parts: Vec<Value> = contents.iter().flat_map(|c| arr(&c["parts"])).collect();
            let call = parts
                .iter()
                .find_map(|p| p.get("functionCall").cloned())
                .unwrap_or_default();
            let resp = parts
                .iter()
                .find_map(|p| p.get("functionResponse").cloned())
                .unwrap_or_default();
            assert_eq!(resp["name"], call["name"], "pairing by name");
            let decl = arr(&b["tools"][0]["functionDeclarations"]);
            assert!(
                !decl[0]["parameters"]
                    .to_string()
                    .contains("additionalProperties"),
                "schema stripped"
            );
            let gc = &b["generationConfig"];
            let fcc = &b["toolConfig"]["functionCallingConfig"];
            assert_eq!(fcc["mode"], "ANY");
            Facts {
                system: s(&b["systemInstruction"]["parts"][0]["text"]),
                tools: decl.iter().map(|t| s(&t["name"])).collect(),
                forced_tool: fcc["allowedFunctionNames"][0].as_str().map(str::to_owned),
                max_tokens: gc["maxOutputTokens"].as_u64(),
                temperature: gc["temperature"].as_f64(),
                call: (s(&call["name"]), call["args"].clone()),
                result_text: s(&resp["response"]["content"]),
                last_user: parts
                    .iter()
                    .rev()
                    .find_map(|p| p["text"].as_str())
                    .unwrap_or_default()
                    .to_owned(),
            }
        }
    }
}

#[test]
fn every_pair_keeps_system_tools_choice_sampling_history_and_pairing() {
    let store = SignatureStore::memory(16);
    let opts = EncodeOptions {
        default_max_tokens: 8192,
        forward_reasoning_effort: false,
    };
    for front in Protocol::ALL {
        let url = UrlFacts {
            model: Some("m".into()),
            stream: Some(false),
        };
        let body = front_body(front).to_string();
        let canon =
            decode_request(front, body.as_bytes(), &url).unwrap_or_else(|e| panic!("{front}: {e}"));
        for up in Protocol::ALL {
            let wire = encode_request(up, &canon, "target-model", opts, &store)
                .unwrap_or_else(|e| panic!("{front}->{up}: {e}"));
            if up != Protocol::Gemini {
                assert_eq!(wire["model"], "target-model", "{front}->{up}");
            }
            assert_eq!(read(up, &wire), expected(), "{front} -> {up}: {wire}");
        }
    }
}

fn schema() -> Value {
    json!({"type":"object","properties":{"complexity_score":{"type":"integer","minimum":1}},"required":["complexity_score"]})
}

/// A structured-output request in each front protocol.
fn json_mode_body(p: Protocol) -> Value {
    let msgs = json!([{"role":"user","content":"route me"}]);
    match p {
        Protocol::Anthropic => json!({"model":"m","max_tokens":50,"messages":msgs,
            "output_config":{"format":{"type":"json_schema","schema":schema()}}}),
        Protocol::OpenAiChat => json!({"model":"m","messages":msgs,
            "response_format":{"type":"json_schema","json_schema":{"name":"router","schema":schema()}}}),
        Protocol::OpenAiResponses => json!({"model":"m","input":msgs,
            "text":{"format":{"type":"json_schema","name":"router","schema":schema()}}}),
        Protocol::Gemini => json!({"contents":[{"role":"user","parts":[{"text":"route me"}]}],
            "generationConfig":{"responseMimeType":"application/json","responseSchema":{"type":"OBJECT","properties":{"complexity_score":{"type":"INTEGER","minimum":1}},"required":["complexity_score"]}}}),
    }
}

/// The schema an upstream body of protocol `p` asks for.
fn requested_schema(p: Protocol, b: &Value) -> Value {
    match p {
        Protocol::Anthropic => b["output_config"]["format"]["schema"].clone(),
        Protocol::OpenAiChat => {
            assert_eq!(b["response_format"]["type"], "json_schema");
            b["response_format"]["json_schema"]["schema"].clone()
        }
        Protocol::OpenAiResponses => b["text"]["format"]["schema"].clone(),
        Protocol::Gemini => {
            assert_eq!(
                b["generationConfig"]["responseMimeType"],
                "application/json"
            );
            b["generationConfig"]["responseJsonSchema"].clone()
        }
    }
}

/// Structured output (Gemini CLI's router call, Claude Code's title call, Codex
/// `--output-schema`) keeps its JSON schema across every pair.
#[test]
fn every_pair_keeps_structured_output_schema() {
    let store = SignatureStore::memory(4);
    let opts = EncodeOptions {
        default_max_tokens: 100,
        forward_reasoning_effort: false,
    };
    for front in Protocol::ALL {
        let url = UrlFacts {
            model: Some("m".into()),
            stream: Some(false),
        };
        let canon = decode_request(front, json_mode_body(front).to_string().as_bytes(), &url)
            .unwrap_or_else(|e| panic!("{front}: {e}"));
        for up in Protocol::ALL {
            let wire =
                encode_request(up, &canon, "t", opts, &store).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                requested_schema(up, &wire),
                schema(),
                "{front} -> {up}: {wire}"
            );
        }
    }
}
