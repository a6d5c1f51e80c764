//! Gemini ⇄ canonical unit tests: synthesised ids, pairing by name, schema stripping.

use serde_json::json;

use super::*;
use crate::server::parse_json;

fn decode(v: serde_json::Value) -> Result<Request, ProxyError> {
    let req: GenerateRequest = parse_json(v.to_string().as_bytes())?;
    request_to_canonical(req, "m".into(), false)
}

#[test]
fn id_less_calls_get_stable_ids_and_results_pair_by_name() {
    let body = json!({"contents":[
        {"role":"user","parts":[{"text":"q"}]},
        {"role":"model","parts":[{"functionCall":{"name":"a.b","args":{}}},{"functionCall":{"name":"f","args":{}}}]},
        {"role":"user","parts":[{"functionResponse":{"name":"f","response":{"output":"1"}}},{"functionResponse":{"name":"a.b","response":{"x":1,"y":2}}}]}]});
    let one = decode(body.clone()).unwrap_or_else(|e| panic!("{e}"));
    let two = decode(body).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(one, two, "same history, same ids");
    let ids: Vec<String> = one.messages[1]
        .content
        .iter()
        .filter_map(|p| match p {
            Part::ToolCall(c) => Some(c.id.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["call_a_b_1_0", "call_f_1_1"]);
    let results: Vec<(String, String)> = one.messages[2]
        .content
        .iter()
        .filter_map(|p| match p {
            Part::ToolResult(r) => Some((
                r.tool_call_id.clone(),
                match &r.content[0] {
                    Part::Text(t) => t.text.clone(),
                    _ => String::new(),
                },
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ("call_f_1_1".to_owned(), "1".to_owned()),
            ("call_a_b_1_0".to_owned(), "{\"x\":1,\"y\":2}".to_owned())
        ]
    );
}

#[test]
fn response_without_a_call_is_a_400_naming_the_part() {
    let e = decode(
        json!({"contents":[{"role":"user","parts":[{"functionResponse":{"name":"f","response":{}}}]}]}),
    );
    let msg = e.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(
        msg.contains("contents[0].parts[0].functionResponse.name"),
        "{msg}"
    );
}

#[test]
fn schemas_lose_additional_properties_at_every_depth() {
    let s = strip_schema(
        &json!({"type":"object","$schema":"x","additionalProperties":false,
        "properties":{"a":{"type":"object","additionalProperties":{"type":"string"}},"additionalProperties":{"type":"string"}}}),
    );
    assert_eq!(
        s,
        json!({"type":"object","properties":{"a":{"type":"object"}}})
    );
}
