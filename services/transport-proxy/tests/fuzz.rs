//! Property tests: request parsers, response parsers and stream decoders/encoders never panic,
//! whatever the bytes. Inputs are biased towards each protocol's own vocabulary (keys, types,
//! event names) so that deep paths are reached, not just the first JSON syntax error.

use babysitter_transport_proxy::pipeline::translate_chunks;
use babysitter_transport_proxy::protocol::{
    EncodeOptions, Protocol, UrlFacts, decode_request, decode_response, encode_request,
    encode_response, stream_decoder, stream_encoder,
};
use babysitter_transport_proxy::sigstore::SignatureStore;
use proptest::prelude::*;
use serde_json::{Map, Value};

const KEYS: &[&str] = &[
    "model",
    "messages",
    "role",
    "content",
    "type",
    "text",
    "id",
    "name",
    "input",
    "arguments",
    "tool_use_id",
    "tool_call_id",
    "call_id",
    "tools",
    "tool_choice",
    "system",
    "max_tokens",
    "stream",
    "thinking",
    "signature",
    "data",
    "source",
    "image_url",
    "url",
    "tool_calls",
    "function",
    "parameters",
    "input_schema",
    "contents",
    "parts",
    "functionCall",
    "functionResponse",
    "args",
    "response",
    "thoughtSignature",
    "thought",
    "systemInstruction",
    "generationConfig",
    "toolConfig",
    "instructions",
    "output",
    "summary",
    "encrypted_content",
    "choices",
    "delta",
    "finish_reason",
    "stop_reason",
    "usage",
    "candidates",
    "finishReason",
    "usageMetadata",
    "index",
    "output_index",
    "item",
    "status",
    "partial_json",
    "message",
    "content_block",
    "error",
    "functionDeclarations",
    "is_error",
    "cache_control",
];

const STRINGS: &[&str] = &[
    "user",
    "assistant",
    "system",
    "developer",
    "tool",
    "model",
    "function",
    "text",
    "image",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "input_text",
    "output_text",
    "input_image",
    "base64",
    "auto",
    "any",
    "required",
    "none",
    "STOP",
    "MAX_TOKENS",
    "end_turn",
    "tool_calls",
    "length",
    "completed",
    "incomplete",
    "message_start",
    "content_block_start",
    "content_block_delta",
    "text_delta",
    "input_json_delta",
    "response.output_item.added",
    "response.completed",
    "{\"a\":",
    "data:image/png;base64,AA",
    "",
    "\u{0}",
    "é",
];

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        prop::sample::select(STRINGS).prop_map(|s| Value::String(s.to_owned())),
        ".{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(5, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..7).prop_map(|kv| {
                Value::Object(
                    kv.into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

fn protocol() -> impl Strategy<Value = Protocol> {
    prop::sample::select(Protocol::ALL.to_vec())
}

/// SSE-ish upstream chunks: frames with protocol-looking JSON, split at arbitrary points.
fn arb_chunks() -> impl Strategy<Value = Vec<Vec<u8>>> {
    let frame = prop_oneof![
        arb_json().prop_map(|v| format!("data: {v}\n\n")),
        (prop::sample::select(STRINGS), arb_json())
            .prop_map(|(e, v)| format!("event: {e}\ndata: {v}\n\n")),
        Just("data: [DONE]\n\n".to_owned()),
        ".{0,20}".prop_map(|s| s),
    ];
    (
        prop::collection::vec(frame, 0..12),
        prop::collection::vec(1usize..40, 1..6),
    )
        .prop_map(|(frames, cuts)| {
            let bytes = frames.concat().into_bytes();
            let mut out = Vec::new();
            let mut at = 0;
            let mut i = 0;
            while at < bytes.len() {
                let n = cuts[i % cuts.len()].min(bytes.len() - at);
                out.push(bytes[at..at + n].to_vec());
                at += n;
                i += 1;
            }
            out
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn request_parsers_never_panic_on_bytes(p in protocol(), bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = decode_request(p, &bytes, &UrlFacts::default());
    }

    #[test]
    fn request_translation_never_panics_on_json(front in protocol(), up in protocol(), v in arb_json(), stream in any::<bool>()) {
        let url = UrlFacts { model: Some("m".into()), stream: Some(stream) };
        if let Ok(canon) = decode_request(front, v.to_string().as_bytes(), &url) {
            let opts = EncodeOptions { default_max_tokens: 10, forward_reasoning_effort: true };
            let _ = encode_request(up, &canon, "m", opts, &SignatureStore::memory(4));
        }
    }

    #[test]
    fn response_translation_never_panics(up in protocol(), front in protocol(), v in arb_json()) {
        let store = SignatureStore::memory(4);
        if let Ok(r) = decode_response(up, v.to_string().as_bytes(), &store) {
            let _ = encode_response(front, &r);
        }
    }

    #[test]
    fn stream_decoders_and_encoders_never_panic(up in protocol(), front in protocol(), chunks in arb_chunks()) {
        let store = SignatureStore::memory(4);
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let frames = translate_chunks(stream_decoder(up, &store), stream_encoder(front, "seed", "m".into(), true), &refs);
        // Every stream ends with the client protocol's terminal frame or error frame.
        prop_assert!(!frames.is_empty());
    }
}
