//! The canonical model every protocol is decoded into and encoded from (spec §3.2).
//!
//! Why a separate model instead of translating pair by pair: each fidelity rule (reasoning never
//! demoted to text, truncation never reported as a clean end, cache tokens counted once) is then
//! written once, and each protocol only has to say how its own fields map onto these types.
//!
//! The model keeps what the *richest* protocol can say: reasoning parts carry their opaque
//! signature byte for byte, tool results hold nested text and image parts, tool arguments stay
//! the exact JSON text the model produced (a Chat upstream's unparseable arguments are not
//! "fixed"), and the stop reason is an enum whose mapping tables are total.

use serde_json::{Map, Value};

/// A request, independent of the protocol it arrived in.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Request {
    /// Model name as asked by the client; the route may override it.
    pub model: String,
    /// Top-level system prompt parts (Anthropic `system`, leading Chat system/developer messages).
    pub system: Vec<TextPart>,
    /// Conversation in order; mid-conversation system messages are kept in place.
    pub messages: Vec<Message>,
    pub max_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_k: Option<u64>,
    pub stop_sequences: Vec<String>,
    pub tools: Vec<Tool>,
    pub tool_choice: Option<ToolChoice>,
    /// `Some(false)` = Anthropic `disable_parallel_tool_use: true` = Chat `parallel_tool_calls: false`.
    pub parallel_tool_calls: Option<bool>,
    pub reasoning: Option<ReasoningControl>,
    pub metadata: Metadata,
    pub stream: bool,
    /// The client asked for a usage chunk at the end of a Chat stream.
    pub include_usage: bool,
    /// Structured output: JSON (optionally to a schema) instead of free text.
    pub response_format: Option<ResponseFormat>,
}

/// Structured-output hint (Chat `response_format`, Responses `text.format`, Anthropic
/// `output_config.format`, Gemini `responseMimeType` + `responseJsonSchema`).
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object.
    JsonObject,
    /// JSON matching `schema`.
    JsonSchema {
        name: Option<String>,
        schema: Value,
        strict: Option<bool>,
    },
}

impl ResponseFormat {
    /// From an OpenAI-style `{type, json_schema:{name, schema, strict}}` (Chat) or flat
    /// `{type, name, schema, strict}` (Responses, Anthropic) object; `text` = none.
    pub fn from_openai(v: &Value) -> Option<Self> {
        match v.get("type").and_then(Value::as_str) {
            Some("json_object") => Some(Self::JsonObject),
            Some("json_schema") => {
                let inner = v.get("json_schema").unwrap_or(v);
                Some(Self::JsonSchema {
                    name: inner.get("name").and_then(Value::as_str).map(str::to_owned),
                    schema: inner
                        .get("schema")
                        .cloned()
                        .unwrap_or_else(|| serde_json::json!({})),
                    strict: inner.get("strict").and_then(Value::as_bool),
                })
            }
            _ => None,
        }
    }

    /// Flat form (Responses `text.format`, Anthropic `output_config.format`); `None` for
    /// [`ResponseFormat::JsonObject`] when `json_object_ok` is false (Anthropic has none).
    pub fn to_flat(&self, json_object_ok: bool) -> Option<Value> {
        match self {
            Self::JsonObject => json_object_ok.then(|| serde_json::json!({"type": "json_object"})),
            Self::JsonSchema {
                name,
                schema,
                strict,
            } => {
                let mut v = serde_json::json!({"type": "json_schema", "schema": schema});
                if let Some(n) = name {
                    v["name"] = serde_json::json!(n);
                }
                if let Some(s) = strict {
                    v["strict"] = serde_json::json!(s);
                }
                Some(v)
            }
        }
    }
}

/// A text part with an optional cache hint (Anthropic `cache_control`, kept opaque).
#[derive(Debug, Clone, PartialEq)]
pub struct TextPart {
    pub text: String,
    pub cache_control: Option<Value>,
}

impl TextPart {
    pub fn plain(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            cache_control: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
    /// A system message inside the conversation (Claude Code's mid-conversation system beta,
    /// Chat `system`/`developer` messages after the first user turn).
    System,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Part>,
}

/// One ordered content part of a message.
#[derive(Debug, Clone, PartialEq)]
pub enum Part {
    Text(TextPart),
    Image(Image),
    ToolCall(ToolCall),
    ToolResult(ToolResult),
    /// Visible-to-nobody reasoning; `signature` is opaque and round-tripped byte for byte.
    Reasoning {
        text: String,
        signature: Option<String>,
        origin: ReasoningOrigin,
    },
    /// Anthropic `redacted_thinking`: encrypted reasoning, opaque.
    RedactedReasoning {
        data: String,
    },
}

/// Which provider produced a reasoning part: a signature only validates with its own provider
/// (spec §10 rule 3), so encoders drop reasoning from another origin instead of forging it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReasoningOrigin {
    Anthropic,
    OpenAiChat,
    /// A Responses `reasoning` item; the signature is its `encrypted_content`.
    OpenAiResponses,
    /// A Gemini `thought` part; the signature is its `thoughtSignature`.
    Gemini,
}

const SIGNATURE_TAG: &str = "babysitter.";

impl ReasoningOrigin {
    fn tag_name(self) -> &'static str {
        match self {
            ReasoningOrigin::Anthropic => "anthropic",
            ReasoningOrigin::OpenAiChat => "openai-chat",
            ReasoningOrigin::OpenAiResponses => "openai-responses",
            ReasoningOrigin::Gemini => "gemini",
        }
    }

    /// The origin of reasoning a provider speaking `p` produced.
    pub fn of(p: crate::protocol::Protocol) -> Self {
        match p {
            crate::protocol::Protocol::Anthropic => ReasoningOrigin::Anthropic,
            crate::protocol::Protocol::OpenAiChat => ReasoningOrigin::OpenAiChat,
            crate::protocol::Protocol::OpenAiResponses => ReasoningOrigin::OpenAiResponses,
            crate::protocol::Protocol::Gemini => ReasoningOrigin::Gemini,
        }
    }

    /// `babysitter.<origin>.<opaque>`: the form a signature takes in canonical stream events
    /// (so encoders know whose it is) and towards clients of another protocol.
    pub fn tag(self, signature: &str) -> String {
        format!("{SIGNATURE_TAG}{}.{signature}", self.tag_name())
    }

    /// The origin and opaque value of a tagged signature; `None` when untagged.
    pub fn untag(signature: &str) -> Option<(ReasoningOrigin, String)> {
        let rest = signature.strip_prefix(SIGNATURE_TAG)?;
        [
            ReasoningOrigin::Anthropic,
            ReasoningOrigin::OpenAiChat,
            ReasoningOrigin::OpenAiResponses,
            ReasoningOrigin::Gemini,
        ]
        .into_iter()
        .find_map(|o| {
            rest.strip_prefix(o.tag_name())
                .and_then(|r| r.strip_prefix('.'))
                .map(|sig| (o, sig.to_owned()))
        })
    }

    /// The signature a client speaking `client` is given: its own provider's unchanged, any
    /// other tagged with its origin. Clients return signatures verbatim (Claude Code's thinking
    /// `signature`, Codex's reasoning `encrypted_content`, Gemini CLI's `thoughtSignature`), so
    /// the proxy learns on the next turn whose reasoning it is and replays it to that provider
    /// only (spec §10 rules 1 and 3) — across every pair, not just the same-provider one.
    pub fn for_client(self, client: crate::protocol::Protocol, signature: &str) -> String {
        if self == Self::of(client) {
            signature.to_owned()
        } else {
            self.tag(signature)
        }
    }

    /// Inverse of [`ReasoningOrigin::for_client`] for a signature a `client` sent back.
    pub fn from_client(client: crate::protocol::Protocol, signature: &str) -> (Self, String) {
        Self::untag(signature).unwrap_or_else(|| (Self::of(client), signature.to_owned()))
    }
}

/// Tag of Anthropic `redacted_thinking` data carried in another protocol's opaque reasoning
/// field. Distinct from the signature tags: the client gets no thinking text, only this.
const REDACTED_TAG: &str = "babysitter.anthropic-redacted.";

/// Anthropic `redacted_thinking` data as a client of another protocol holds it — a Responses
/// reasoning item's `encrypted_content`, a Gemini thought part's `thoughtSignature`, a Chat
/// `reasoning_details` `reasoning.encrypted` entry's `data` — so that when the client sends the
/// conversation back, [`redacted_from_client`] recovers the block byte for byte and an
/// Anthropic upstream receives it unchanged (spec §10 rules 1 and 3; other upstreams drop it).
pub fn redacted_for_client(data: &str) -> String {
    format!("{REDACTED_TAG}{data}")
}

/// Inverse of [`redacted_for_client`]; `None` for anything else (check it before
/// [`ReasoningOrigin::from_client`], which would take the value for the client's own).
pub fn redacted_from_client(opaque: &str) -> Option<String> {
    opaque.strip_prefix(REDACTED_TAG).map(str::to_owned)
}

#[derive(Debug, Clone, PartialEq)]
pub enum Image {
    Base64 { media_type: String, data: String },
    Url(String),
}

impl Image {
    /// `data:` URL or plain URL, as Chat's `image_url.url` wants it.
    pub fn to_url(&self) -> String {
        match self {
            Image::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
            Image::Url(u) => u.clone(),
        }
    }

    /// Inverse of [`Image::to_url`]: a `data:<mime>;base64,<data>` URL becomes inline bytes.
    pub fn from_url(url: &str) -> Self {
        if let Some(rest) = url.strip_prefix("data:")
            && let Some((media_type, data)) = rest.split_once(";base64,")
        {
            return Image::Base64 {
                media_type: media_type.to_owned(),
                data: data.to_owned(),
            };
        }
        Image::Url(url.to_owned())
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as JSON text, exactly as produced upstream.
    pub arguments: String,
    /// Gemini `thoughtSignature` of the `functionCall` part, byte for byte (spec §10).
    pub signature: Option<String>,
}

impl ToolCall {
    /// Arguments as a JSON object for object-shaped protocols. Unparseable text is never
    /// replaced silently: it is wrapped as `{"_parseError":true,"_rawArguments":…}` (spec §17 P8).
    pub fn arguments_object(&self) -> Value {
        if self.arguments.trim().is_empty() {
            return Value::Object(Map::new());
        }
        match serde_json::from_str::<Value>(&self.arguments) {
            Ok(v) => v,
            Err(_) => {
                tracing::warn!(tool_call_id = %self.id, "unparseable tool arguments wrapped");
                serde_json::json!({ "_parseError": true, "_rawArguments": self.arguments })
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    pub tool_call_id: String,
    /// Text and image parts, in order.
    pub content: Vec<Part>,
    pub is_error: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Tool {
    Function {
        name: String,
        description: Option<String>,
        parameters: Value,
    },
    /// A provider-hosted tool (Anthropic `web_search_…`, …) kept opaque; dropped towards
    /// protocols that cannot run it (spec §4.1).
    Hosted(Value),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    /// Anthropic `any` = Chat `required`.
    Required,
    None,
    Specific(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum ReasoningControl {
    /// Anthropic `thinking: {type: enabled, budget_tokens}`.
    Budget(u64),
    /// Anthropic `thinking: {type: adaptive}`.
    Adaptive,
    /// Chat `reasoning_effort` / Anthropic `output_config.effort`.
    Effort(String),
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Metadata {
    /// Anthropic `metadata.user_id` (Claude Code sends a JSON *string*) / Chat `user`.
    pub user_id: Option<String>,
}

/// A complete, non-streamed answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub id: String,
    pub model: String,
    pub content: Vec<Part>,
    pub stop: StopReason,
    pub stop_sequence: Option<String>,
    pub usage: Usage,
}

/// Canonical stop reasons (spec §11). Every protocol value maps to exactly one of these or to
/// an error ([`UnknownStopReason`]); nothing unknown is ever reported as a clean end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    StopSequence,
    ToolUse,
    MaxTokens,
    ContextWindowExceeded,
    Refusal,
    PauseTurn,
    MalformedToolCall,
}

/// An upstream stop value outside the table, or a canonical reason the client protocol has no
/// encoding for. Rendered as a protocol-native error, never as a clean end.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stop reason {value} has no mapping for {protocol}")]
pub struct UnknownStopReason {
    pub protocol: &'static str,
    pub value: String,
}

impl StopReason {
    /// Anthropic `stop_reason` → canonical.
    pub fn from_anthropic(value: &str) -> Result<Self, UnknownStopReason> {
        Ok(match value {
            "end_turn" => Self::EndTurn,
            "stop_sequence" => Self::StopSequence,
            "tool_use" => Self::ToolUse,
            "max_tokens" => Self::MaxTokens,
            "model_context_window_exceeded" => Self::ContextWindowExceeded,
            "refusal" => Self::Refusal,
            "pause_turn" => Self::PauseTurn,
            other => return Err(unknown("anthropic", other)),
        })
    }

    /// Canonical → Anthropic `stop_reason`. A malformed tool call has no Anthropic value.
    pub fn to_anthropic(self) -> Result<&'static str, UnknownStopReason> {
        Ok(match self {
            Self::EndTurn => "end_turn",
            Self::StopSequence => "stop_sequence",
            Self::ToolUse => "tool_use",
            Self::MaxTokens => "max_tokens",
            Self::ContextWindowExceeded => "model_context_window_exceeded",
            Self::Refusal => "refusal",
            Self::PauseTurn => "pause_turn",
            Self::MalformedToolCall => return Err(unknown("anthropic", "malformed_tool_call")),
        })
    }

    /// Chat `finish_reason` → canonical. `has_complete_tool_calls` derives a tool turn when an
    /// upstream says `stop` but returned calls (rule 3); `length` stays truncation even with a
    /// partial call (rule 2). `None` (a stream that ended without a reason) is an error.
    pub fn from_chat(
        value: Option<&str>,
        has_complete_tool_calls: bool,
    ) -> Result<Self, UnknownStopReason> {
        Ok(match value {
            Some("stop") if has_complete_tool_calls => Self::ToolUse,
            Some("stop") => Self::EndTurn,
            Some("tool_calls" | "function_call") => Self::ToolUse,
            Some("length") => Self::MaxTokens,
            Some("content_filter") => Self::Refusal,
            Some(other) => return Err(unknown("openai-chat", other)),
            None => return Err(unknown("openai-chat", "null")),
        })
    }

    /// Canonical → Chat `finish_reason`. `pause_turn` would need a continuation upstream
    /// (spec §11 rule 4), which this version does not do, so it is an error.
    pub fn to_chat(self) -> Result<&'static str, UnknownStopReason> {
        Ok(match self {
            Self::EndTurn | Self::StopSequence => "stop",
            Self::ToolUse => "tool_calls",
            Self::MaxTokens | Self::ContextWindowExceeded => "length",
            Self::Refusal => "content_filter",
            Self::PauseTurn => return Err(unknown("openai-chat", "pause_turn")),
            Self::MalformedToolCall => return Err(unknown("openai-chat", "malformed_tool_call")),
        })
    }
}

/// How a Responses response ended: `status` plus `incomplete_details.reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponsesStatus {
    pub status: &'static str,
    pub incomplete_reason: Option<&'static str>,
}

impl StopReason {
    /// Responses `status` (+ `incomplete_details.reason`) → canonical. A completed response with
    /// `function_call` items is a tool turn (rule 3); `incomplete` stays truncation even when a
    /// call is present (rule 2); `failed`, `cancelled` and unknown values are errors.
    pub fn from_responses(
        status: &str,
        incomplete_reason: Option<&str>,
        has_complete_tool_calls: bool,
    ) -> Result<Self, UnknownStopReason> {
        Ok(match (status, incomplete_reason) {
            ("completed", _) if has_complete_tool_calls => Self::ToolUse,
            ("completed", _) => Self::EndTurn,
            ("incomplete", Some("content_filter")) => Self::Refusal,
            ("incomplete", Some("max_output_tokens") | None) => Self::MaxTokens,
            ("incomplete", Some(other)) => return Err(unknown("openai-responses", other)),
            (other, _) => return Err(unknown("openai-responses", other)),
        })
    }

    /// Canonical → Responses terminal status. `pause_turn` and malformed calls have none.
    pub fn to_responses(self) -> Result<ResponsesStatus, UnknownStopReason> {
        let done = |status, incomplete_reason| ResponsesStatus {
            status,
            incomplete_reason,
        };
        Ok(match self {
            Self::EndTurn | Self::StopSequence | Self::ToolUse => done("completed", None),
            Self::MaxTokens | Self::ContextWindowExceeded => {
                done("incomplete", Some("max_output_tokens"))
            }
            Self::Refusal => done("incomplete", Some("content_filter")),
            Self::PauseTurn => return Err(unknown("openai-responses", "pause_turn")),
            Self::MalformedToolCall => {
                return Err(unknown("openai-responses", "malformed_tool_call"));
            }
        })
    }

    /// Gemini `finishReason` → canonical. `STOP` with complete calls is a tool turn (rule 3);
    /// `MAX_TOKENS` stays truncation (T16); `OTHER`/unspecified/unknown are errors.
    pub fn from_gemini(
        value: &str,
        has_complete_tool_calls: bool,
    ) -> Result<Self, UnknownStopReason> {
        Ok(match value {
            "STOP" if has_complete_tool_calls => Self::ToolUse,
            "STOP" => Self::EndTurn,
            "MAX_TOKENS" => Self::MaxTokens,
            "SAFETY" | "RECITATION" | "BLOCKLIST" | "PROHIBITED_CONTENT" | "SPII"
            | "IMAGE_SAFETY" | "LANGUAGE" => Self::Refusal,
            "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" => Self::MalformedToolCall,
            other => return Err(unknown("gemini", other)),
        })
    }

    /// Canonical → Gemini `finishReason`.
    pub fn to_gemini(self) -> Result<&'static str, UnknownStopReason> {
        Ok(match self {
            Self::EndTurn | Self::StopSequence | Self::ToolUse => "STOP",
            Self::MaxTokens | Self::ContextWindowExceeded => "MAX_TOKENS",
            Self::Refusal => "SAFETY",
            Self::MalformedToolCall => "MALFORMED_FUNCTION_CALL",
            Self::PauseTurn => return Err(unknown("gemini", "pause_turn")),
        })
    }
}

fn unknown(protocol: &'static str, value: &str) -> UnknownStopReason {
    UnknownStopReason {
        protocol,
        value: value.to_owned(),
    }
}

/// Token usage in canonical quantities (spec §12). `input` excludes cache reads and writes (the
/// Anthropic convention); total-input protocols add them back when encoding. Every field is
/// optional so that a partial report cannot erase a known value when merged.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: Option<u64>,
    pub cache_read: Option<u64>,
    pub cache_write: Option<u64>,
    /// Output tokens, reasoning included.
    pub output: Option<u64>,
    /// Of which reasoning.
    pub reasoning: Option<u64>,
}

impl Usage {
    /// Set-not-add merge: each field reported by `later` replaces the earlier value (streams
    /// repeat cumulative counts; adding them would double-count).
    pub fn merge(&mut self, later: &Usage) {
        fn set(slot: &mut Option<u64>, v: Option<u64>) {
            if v.is_some() {
                *slot = v;
            }
        }
        set(&mut self.input, later.input);
        set(&mut self.cache_read, later.cache_read);
        set(&mut self.cache_write, later.cache_write);
        set(&mut self.output, later.output);
        set(&mut self.reasoning, later.reasoning);
    }

    /// From a total-input report (Chat `prompt_tokens` includes cached tokens): cache counted
    /// once, input = prompt − cache_read − cache_write (saturating).
    pub fn from_total_input(
        prompt: Option<u64>,
        cache_read: Option<u64>,
        output: Option<u64>,
        reasoning: Option<u64>,
    ) -> Self {
        Self {
            input: prompt.map(|p| p.saturating_sub(cache_read.unwrap_or(0))),
            cache_read,
            cache_write: None,
            output,
            reasoning,
        }
    }

    /// Input including cache reads and writes, as total-input protocols report it.
    pub fn total_input(&self) -> u64 {
        self.input.unwrap_or(0) + self.cache_read.unwrap_or(0) + self.cache_write.unwrap_or(0)
    }
}

/// Canonical stream events (spec §3.2). Blocks are identified by a canonical index assigned
/// in order of their start; an upstream may interleave blocks (Chat parallel tool calls), and
/// client encoders that need strictly sequential blocks buffer (see `anthropic::stream`).
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEvent {
    MessageStart {
        id: String,
        model: String,
        usage: Usage,
    },
    BlockStart {
        index: usize,
        block: BlockStart,
    },
    BlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    BlockStop {
        index: usize,
    },
    /// A usage report; merged with set semantics.
    Usage(Usage),
    MessageStop {
        stop: StopReason,
        stop_sequence: Option<String>,
    },
    /// An in-band failure; the stream ends after it.
    Error(crate::error::StreamError),
}

#[derive(Debug, Clone, PartialEq)]
pub enum BlockStart {
    Text,
    Reasoning,
    RedactedReasoning {
        data: String,
    },
    ToolCall {
        id: String,
        name: String,
        /// Gemini `thoughtSignature` carried by the call (Gemini upstreams emit calls whole).
        signature: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub enum BlockDelta {
    Text(String),
    Reasoning(String),
    Signature(String),
    ToolArguments(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// T15/T17: every Anthropic value, and the Chat values, map both directions; unknown is an
    /// error, never a clean end.
    #[test]
    fn t15_stop_reason_table_is_total_both_directions() {
        let rows: &[(&str, StopReason, Option<&str>)] = &[
            ("end_turn", StopReason::EndTurn, Some("stop")),
            ("stop_sequence", StopReason::StopSequence, Some("stop")),
            ("tool_use", StopReason::ToolUse, Some("tool_calls")),
            ("max_tokens", StopReason::MaxTokens, Some("length")),
            (
                "model_context_window_exceeded",
                StopReason::ContextWindowExceeded,
                Some("length"),
            ),
            ("refusal", StopReason::Refusal, Some("content_filter")),
            ("pause_turn", StopReason::PauseTurn, None),
        ];
        for (anthropic, canonical, chat) in rows {
            assert_eq!(
                StopReason::from_anthropic(anthropic).as_ref(),
                Ok(canonical)
            );
            assert_eq!(canonical.to_anthropic(), Ok(*anthropic));
            assert_eq!(canonical.to_chat().ok(), *chat, "{anthropic}");
        }
        let chat_rows: &[(&str, StopReason)] = &[
            ("stop", StopReason::EndTurn),
            ("tool_calls", StopReason::ToolUse),
            ("function_call", StopReason::ToolUse),
            ("length", StopReason::MaxTokens),
            ("content_filter", StopReason::Refusal),
        ];
        for (chat, canonical) in chat_rows {
            assert_eq!(
                StopReason::from_chat(Some(chat), false).as_ref(),
                Ok(canonical)
            );
        }
    }

    #[test]
    fn t17_unknown_and_missing_reasons_are_errors() {
        assert!(StopReason::from_anthropic("bogus").is_err());
        assert!(StopReason::from_chat(Some("bogus"), false).is_err());
        assert!(StopReason::from_chat(None, true).is_err());
        assert!(StopReason::MalformedToolCall.to_anthropic().is_err());
        assert!(StopReason::PauseTurn.to_chat().is_err());
    }

    /// T18: truncation with a (partial) tool call stays truncation; `stop` with complete calls is
    /// a tool turn so Claude Code continues.
    #[test]
    fn t18_truncation_never_looks_like_a_tool_turn() {
        assert_eq!(
            StopReason::from_chat(Some("length"), true),
            Ok(StopReason::MaxTokens)
        );
        assert_eq!(
            StopReason::from_chat(Some("stop"), true),
            Ok(StopReason::ToolUse)
        );
    }

    /// T23: repeated cumulative frames do not add up; a later partial report keeps earlier fields.
    #[test]
    fn t23_usage_merge_sets_not_adds() {
        let mut u = Usage {
            input: Some(10),
            cache_read: Some(5),
            ..Usage::default()
        };
        u.merge(&Usage {
            output: Some(3),
            ..Usage::default()
        });
        u.merge(&Usage {
            output: Some(7),
            ..Usage::default()
        });
        u.merge(&Usage {
            input: Some(10),
            ..Usage::default()
        });
        assert_eq!(
            u,
            Usage {
                input: Some(10),
                cache_read: Some(5),
                output: Some(7),
                ..Usage::default()
            }
        );
    }

    /// T19: cache tokens counted once across exclusive/total conventions.
    #[test]
    fn t19_cache_tokens_not_double_counted() {
        let u = Usage::from_total_input(Some(100), Some(60), Some(5), None);
        assert_eq!(u.input, Some(40));
        assert_eq!(u.total_input(), 100);
        let anth = Usage {
            input: Some(40),
            cache_read: Some(50),
            cache_write: Some(10),
            ..Usage::default()
        };
        assert_eq!(anth.total_input(), 100);
    }

    #[test]
    fn image_data_url_round_trips() {
        let img = Image::Base64 {
            media_type: "image/png".into(),
            data: "AAAA".into(),
        };
        assert_eq!(Image::from_url(&img.to_url()), img);
        assert_eq!(
            Image::from_url("https://x/y.png"),
            Image::Url("https://x/y.png".into())
        );
    }

    #[test]
    fn unparseable_arguments_are_wrapped_not_replaced() {
        let call = ToolCall {
            id: "c".into(),
            name: "n".into(),
            arguments: "{\"a\":".into(),
            signature: None,
        };
        assert_eq!(
            call.arguments_object(),
            serde_json::json!({"_parseError": true, "_rawArguments": "{\"a\":"})
        );
    }
}
