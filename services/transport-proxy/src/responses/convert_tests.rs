//! Responses ⇄ canonical unit tests: item grouping, reasoning kept opaque, terminal status.

use serde_json::json;

use super::*;
use crate::server::parse_json;

fn decode(v: serde_json::Value) -> Request {
    let req: ResponsesRequest =
        parse_json(v.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    request_to_canonical(req).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn items_group_into_turns_and_reasoning_stays_opaque() {
    let c = decode(json!({"model":"m","input":[
        {"role":"developer","content":"sys"},
        {"role":"user","content":"q"},
        {"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"hmm"}],"encrypted_content":"ENC"},
        {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
        {"type":"function_call","call_id":"c2","name":"f","arguments":"{}"},
        {"type":"function_call_output","call_id":"c1","output":"a"},
        {"type":"function_call_output","call_id":"c2","output":"b"},
        {"role":"developer","content":"late"},
        {"type":"web_search_call","id":"ws"}]}));
    assert_eq!(c.system[0].text, "sys");
    let roles: Vec<Role> = c.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::User, Role::Assistant, Role::User, Role::System]
    );
    assert_eq!(
        c.messages[1].content.len(),
        3,
        "reasoning + two calls in one turn"
    );
    assert!(
        matches!(&c.messages[1].content[0], Part::Reasoning { signature: Some(s), origin: ReasoningOrigin::OpenAiResponses, .. } if s == "ENC")
    );
    assert_eq!(
        c.messages[2].content.len(),
        2,
        "both results in one user turn"
    );
    // Replayed to a Responses upstream as a reasoning item, never as output_text.
    let wire = canonical_to_request(&c, "up");
    let items = wire["input"].as_array().cloned().unwrap_or_default();
    assert!(
        items
            .iter()
            .any(|i| i["type"] == "reasoning" && i["encrypted_content"] == "ENC")
    );
    assert!(
        !wire
            .to_string()
            .contains("\"output_text\",\"text\":\"hmm\"")
    );
}

#[test]
fn truncation_is_incomplete_with_reason() {
    let r = Response {
        id: "resp_x".into(),
        model: "m".into(),
        content: vec![Part::Text(TextPart::plain("par"))],
        stop: StopReason::MaxTokens,
        stop_sequence: None,
        usage: Usage {
            input: Some(3),
            cache_read: Some(2),
            output: Some(1),
            ..Usage::default()
        },
    };
    let v = canonical_to_response(&r).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["status"], "incomplete");
    assert_eq!(
        v["incomplete_details"],
        json!({"reason": "max_output_tokens"})
    );
    assert_eq!(v["usage"]["input_tokens"], 5);
    assert_eq!(v["usage"]["input_tokens_details"]["cached_tokens"], 2);
    assert_eq!(v["output"][0]["content"][0]["text"], "par");
}
