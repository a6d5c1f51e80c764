//! The four wire protocols and the dispatch from a protocol to its codec.
//!
//! Why one dispatch module: the server, the scripted model server and the tests all need "decode
//! a request of protocol P", "encode a stream for protocol Q" without naming a module per pair.
//! Each protocol module keeps its own serde types and state machines; this file only routes to
//! them, so adding a protocol is one new arm per function here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::canonical::{Request, Response};
use crate::error::ProxyError;
use crate::pipeline::{StreamDecoder, StreamEncoder};
use crate::sigstore::SignatureStore;
use crate::{anthropic, gemini, openai_chat, responses};

/// An LLM HTTP protocol, spoken by a harness (front) or a provider (upstream).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// Anthropic Messages, `POST /v1/messages`.
    Anthropic,
    /// OpenAI Chat Completions, `POST /v1/chat/completions`.
    #[serde(rename = "openai-chat")]
    OpenAiChat,
    /// OpenAI Responses, `POST /v1/responses`.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// Gemini `generateContent` / `streamGenerateContent`.
    Gemini,
}

impl Protocol {
    pub const ALL: [Protocol; 4] = [
        Protocol::Anthropic,
        Protocol::OpenAiChat,
        Protocol::OpenAiResponses,
        Protocol::Gemini,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Anthropic => "anthropic",
            Protocol::OpenAiChat => "openai-chat",
            Protocol::OpenAiResponses => "openai-responses",
            Protocol::Gemini => "gemini",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the URL says about a request (Gemini puts the model and streaming there).
#[derive(Debug, Clone, Default)]
pub struct UrlFacts {
    pub model: Option<String>,
    pub stream: Option<bool>,
}

/// Client request body → canonical. Errors name the offending field.
pub fn decode_request(p: Protocol, body: &[u8], url: &UrlFacts) -> Result<Request, ProxyError> {
    match p {
        Protocol::Anthropic => {
            anthropic::convert::request_to_canonical(crate::server::parse_json(body)?)
        }
        Protocol::OpenAiChat => {
            openai_chat::convert::request_to_canonical(crate::server::parse_json(body)?)
        }
        Protocol::OpenAiResponses => {
            responses::convert::request_to_canonical(crate::server::parse_json(body)?)
        }
        Protocol::Gemini => gemini::convert::request_to_canonical(
            crate::server::parse_json(body)?,
            url.model.clone().unwrap_or_default(),
            url.stream.unwrap_or(false),
        ),
    }
}

/// Knobs of the upstream encoding that come from the route.
#[derive(Debug, Clone, Copy)]
pub struct EncodeOptions {
    pub default_max_tokens: u64,
    pub forward_reasoning_effort: bool,
}

/// Canonical → upstream request body. `model` is the model to send (Gemini carries it in the
/// URL; the body then has no model field).
pub fn encode_request(
    p: Protocol,
    req: &Request,
    model: &str,
    opts: EncodeOptions,
    store: &SignatureStore,
) -> Result<Value, ProxyError> {
    let v = match p {
        Protocol::Anthropic => serde_json::to_value(anthropic::convert::canonical_to_request(
            req,
            model,
            opts.default_max_tokens,
        )),
        Protocol::OpenAiChat => serde_json::to_value(openai_chat::convert::canonical_to_request(
            req,
            model,
            opts.forward_reasoning_effort,
        )),
        Protocol::OpenAiResponses => {
            serde_json::to_value(responses::convert::canonical_to_request(req, model))
        }
        Protocol::Gemini => serde_json::to_value(gemini::convert::canonical_to_request(req, store)),
    };
    v.map_err(|e| ProxyError::invalid("body", format!("cannot encode upstream request: {e}")))
}

/// Upstream JSON response → canonical.
pub fn decode_response(
    p: Protocol,
    body: &[u8],
    store: &SignatureStore,
) -> Result<Response, ProxyError> {
    let bad = |e: serde_json::Error| ProxyError::UpstreamProtocol(e.to_string());
    match p {
        Protocol::Anthropic => {
            anthropic::convert::response_to_canonical(serde_json::from_slice(body).map_err(bad)?)
        }
        Protocol::OpenAiChat => {
            openai_chat::convert::response_to_canonical(serde_json::from_slice(body).map_err(bad)?)
        }
        Protocol::OpenAiResponses => {
            responses::convert::response_to_canonical(serde_json::from_slice(body).map_err(bad)?)
        }
        Protocol::Gemini => gemini::convert::response_to_canonical(
            serde_json::from_slice(body).map_err(bad)?,
            store,
        ),
    }
}

/// Canonical → client JSON response.
pub fn encode_response(p: Protocol, resp: &Response) -> Result<Value, ProxyError> {
    match p {
        Protocol::Anthropic => anthropic::convert::canonical_to_response(resp),
        Protocol::OpenAiChat => openai_chat::convert::canonical_to_response(resp),
        Protocol::OpenAiResponses => responses::convert::canonical_to_response(resp),
        Protocol::Gemini => gemini::convert::canonical_to_response(resp),
    }
}

/// The upstream stream decoder of `p`.
pub fn stream_decoder(p: Protocol, store: &SignatureStore) -> Box<dyn StreamDecoder> {
    match p {
        Protocol::Anthropic => Box::new(anthropic::stream::AnthropicDecoder::new()),
        Protocol::OpenAiChat => Box::new(openai_chat::stream::ChatDecoder::new()),
        Protocol::OpenAiResponses => Box::new(responses::stream::ResponsesDecoder::new()),
        Protocol::Gemini => Box::new(gemini::stream::GeminiDecoder::new(store.clone())),
    }
}

/// The client stream encoder of `p`; `id`/`model` are used until the upstream names its own.
pub fn stream_encoder(
    p: Protocol,
    id_seed: &str,
    model: String,
    include_usage: bool,
) -> Box<dyn StreamEncoder> {
    match p {
        Protocol::Anthropic => Box::new(anthropic::stream::AnthropicEncoder::new(
            format!("msg_{id_seed}"),
            model,
        )),
        Protocol::OpenAiChat => Box::new(openai_chat::stream::ChatEncoder::new(
            format!("chatcmpl-{id_seed}"),
            model,
            include_usage,
        )),
        Protocol::OpenAiResponses => Box::new(responses::stream::ResponsesEncoder::new(
            format!("resp_{id_seed}"),
            model,
        )),
        Protocol::Gemini => Box::new(gemini::stream::GeminiEncoder::new(model)),
    }
}
