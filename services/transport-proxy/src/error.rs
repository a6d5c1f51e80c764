//! Proxy errors and their rendering in the *client's* protocol (spec §13.2).
//!
//! Why one canonical [`ErrorKind`]: an upstream 429 from a Chat provider must reach Claude Code
//! as an Anthropic `rate_limit_error` with status 429 (its retry logic keys on both), and a 529
//! from Anthropic must reach a Chat client as a 503 `server_error`. Errors therefore carry a
//! protocol-neutral kind and are rendered only at the edge, with the status preserved where the
//! client protocol has it. Internal detail stays in logs; messages are lowercase.

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use serde_json::json;

use crate::canonical::UnknownStopReason;

/// Protocol-neutral error classes, one row of the spec §13.2 table each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    InvalidRequest,
    Authentication,
    Permission,
    NotFound,
    Timeout,
    RequestTooLarge,
    RateLimit,
    Api,
    Unavailable,
    Overloaded,
}

impl ErrorKind {
    /// Upstream HTTP status → kind.
    pub fn from_status(status: u16) -> Self {
        match status {
            400 | 422 => Self::InvalidRequest,
            401 => Self::Authentication,
            403 => Self::Permission,
            404 => Self::NotFound,
            408 | 504 => Self::Timeout,
            413 => Self::RequestTooLarge,
            429 => Self::RateLimit,
            502 => Self::Unavailable,
            503 | 529 => Self::Overloaded,
            400..=499 => Self::InvalidRequest,
            _ => Self::Api,
        }
    }

    /// `(status, error.type)` for an Anthropic client.
    pub fn anthropic(self) -> (u16, &'static str) {
        match self {
            Self::InvalidRequest => (400, "invalid_request_error"),
            Self::Authentication => (401, "authentication_error"),
            Self::Permission => (403, "permission_error"),
            Self::NotFound => (404, "not_found_error"),
            Self::Timeout => (408, "timeout_error"),
            Self::RequestTooLarge => (413, "request_too_large"),
            Self::RateLimit => (429, "rate_limit_error"),
            Self::Api => (500, "api_error"),
            Self::Unavailable => (502, "api_error"),
            Self::Overloaded => (529, "overloaded_error"),
        }
    }

    /// `(status, error.type, error.code)` for an OpenAI client.
    pub fn openai(self) -> (u16, &'static str, Option<&'static str>) {
        match self {
            Self::InvalidRequest => (400, "invalid_request_error", None),
            Self::Authentication => (401, "invalid_request_error", Some("invalid_api_key")),
            Self::Permission => (403, "invalid_request_error", None),
            Self::NotFound => (404, "invalid_request_error", Some("model_not_found")),
            Self::Timeout => (408, "timeout", Some("timeout")),
            Self::RequestTooLarge => (413, "invalid_request_error", None),
            Self::RateLimit => (429, "rate_limit_exceeded", Some("rate_limit_exceeded")),
            Self::Api => (500, "server_error", Some("server_error")),
            Self::Unavailable => (502, "server_error", Some("server_error")),
            Self::Overloaded => (503, "server_error", Some("server_error")),
        }
    }

    /// `(status, error.status)` for a Gemini client.
    pub fn gemini(self) -> (u16, &'static str) {
        match self {
            Self::InvalidRequest => (400, "INVALID_ARGUMENT"),
            Self::Authentication => (401, "UNAUTHENTICATED"),
            Self::Permission => (403, "PERMISSION_DENIED"),
            Self::NotFound => (404, "NOT_FOUND"),
            Self::Timeout => (504, "DEADLINE_EXCEEDED"),
            Self::RequestTooLarge => (413, "INVALID_ARGUMENT"),
            Self::RateLimit => (429, "RESOURCE_EXHAUSTED"),
            Self::Api => (500, "INTERNAL"),
            Self::Unavailable => (502, "UNAVAILABLE"),
            Self::Overloaded => (503, "UNAVAILABLE"),
        }
    }

    /// The error class reported by the control API's `errors_by_class`.
    pub fn class(self) -> &'static str {
        match self {
            Self::InvalidRequest | Self::RequestTooLarge => "invalid_request",
            Self::Authentication | Self::Permission => "upstream_auth",
            Self::NotFound => "not_found",
            Self::Timeout => "timeout",
            Self::RateLimit => "rate_limited",
            Self::Api => "upstream_5xx",
            Self::Unavailable => "unavailable",
            Self::Overloaded => "overloaded",
        }
    }

    /// Whether a retry before the first byte may succeed (429, 5xx, connection failures).
    pub fn retryable(self) -> bool {
        matches!(
            self,
            Self::RateLimit | Self::Api | Self::Unavailable | Self::Overloaded | Self::Timeout
        )
    }
}

/// An in-band stream failure, rendered as the client protocol's error event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StreamError {
    pub kind: ErrorKind,
    pub message: String,
}

impl From<UnknownStopReason> for StreamError {
    /// A stop reason the client protocol cannot express ends the stream as an API error.
    fn from(e: UnknownStopReason) -> Self {
        Self {
            kind: ErrorKind::Api,
            message: e.to_string(),
        }
    }
}

/// Everything that can fail while serving one request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    #[error("invalid request at {field}: {message}")]
    InvalidRequest { field: String, message: String },
    #[error("request body larger than {limit} bytes")]
    TooLarge { limit: usize },
    #[error("missing or invalid proxy token")]
    Unauthorized,
    #[error("no upstream configured for this route")]
    NoRoute,
    #[error("upstream answered {status}: {message}")]
    Upstream {
        status: u16,
        message: String,
        retry_after: Option<HeaderValue>,
    },
    #[error("upstream unreachable: {0}")]
    Connect(String),
    #[error("upstream timed out")]
    Timeout,
    #[error("upstream sent an unreadable body: {0}")]
    UpstreamProtocol(String),
    #[error(transparent)]
    StopReason(#[from] UnknownStopReason),
}

impl ProxyError {
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::InvalidRequest {
            field: field.into(),
            message: message.into(),
        }
    }

    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidRequest { .. } => ErrorKind::InvalidRequest,
            Self::TooLarge { .. } => ErrorKind::RequestTooLarge,
            Self::Unauthorized => ErrorKind::Authentication,
            Self::NoRoute => ErrorKind::NotFound,
            Self::Upstream { status, .. } => ErrorKind::from_status(*status),
            Self::Connect(_) => ErrorKind::Unavailable,
            Self::Timeout => ErrorKind::Timeout,
            Self::UpstreamProtocol(_) | Self::StopReason(_) => ErrorKind::Api,
        }
    }

    /// The error class for metrics: upstream answers by status class, the proxy's own
    /// failures by cause.
    pub fn class(&self) -> &'static str {
        match self {
            Self::InvalidRequest { .. } | Self::TooLarge { .. } => "invalid_request",
            Self::Unauthorized => "unauthorized",
            Self::NoRoute => "no_route",
            Self::Upstream { status, .. } if *status >= 500 => "upstream_5xx",
            Self::Upstream { .. } => "upstream_4xx",
            Self::Connect(_) => "connect",
            Self::Timeout => "timeout",
            Self::UpstreamProtocol(_) | Self::StopReason(_) => "translation",
        }
    }

    /// The same failure as an in-band stream error.
    pub fn to_stream_error(&self) -> StreamError {
        StreamError {
            kind: self.kind(),
            message: self.to_string(),
        }
    }
}

/// The protocol a client spoke, which decides the error envelope.
pub type ClientProtocol = crate::protocol::Protocol;

/// Anthropic envelope `{"type":"error","error":{"type","message"}}`.
pub fn anthropic_error_body(kind: ErrorKind, message: &str) -> serde_json::Value {
    json!({ "type": "error", "error": { "type": kind.anthropic().1, "message": message } })
}

/// OpenAI envelope `{"error":{"message","type","param","code"}}`.
pub fn openai_error_body(kind: ErrorKind, message: &str) -> serde_json::Value {
    let (_, ty, code) = kind.openai();
    json!({ "error": { "message": message, "type": ty, "param": null, "code": code } })
}

/// Gemini envelope `{"error":{"code","message","status"}}`.
pub fn gemini_error_body(kind: ErrorKind, message: &str) -> serde_json::Value {
    let (code, status) = kind.gemini();
    json!({ "error": { "code": code, "message": message, "status": status } })
}

/// `(status, body)` of an error in `protocol`'s own envelope.
pub fn render(
    protocol: ClientProtocol,
    kind: ErrorKind,
    message: &str,
) -> (u16, serde_json::Value) {
    match protocol {
        ClientProtocol::Anthropic => (kind.anthropic().0, anthropic_error_body(kind, message)),
        ClientProtocol::OpenAiChat | ClientProtocol::OpenAiResponses => {
            (kind.openai().0, openai_error_body(kind, message))
        }
        ClientProtocol::Gemini => (kind.gemini().0, gemini_error_body(kind, message)),
    }
}

/// A [`ProxyError`] bound to the client protocol, ready to become an HTTP response.
#[derive(Debug)]
pub struct ProtocolError {
    pub protocol: ClientProtocol,
    pub error: ProxyError,
}

impl IntoResponse for ProtocolError {
    fn into_response(self) -> Response {
        let kind = self.error.kind();
        let message = self.error.to_string();
        tracing::debug!(error = %message, "request failed");
        let (status, body) = render(self.protocol, kind, &message);
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = (status, axum::Json(body)).into_response();
        if let ProxyError::Upstream {
            retry_after: Some(v),
            ..
        } = &self.error
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v.clone());
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// T28 (rendering half): upstream 429 and 529/503 keep a retryable status and the client's
    /// own envelope.
    #[test]
    fn t28_retryable_statuses_keep_their_meaning() {
        assert_eq!(
            ErrorKind::from_status(429).anthropic(),
            (429, "rate_limit_error")
        );
        assert_eq!(ErrorKind::from_status(429).openai().0, 429);
        assert_eq!(
            ErrorKind::from_status(529).anthropic(),
            (529, "overloaded_error")
        );
        assert_eq!(ErrorKind::from_status(529).openai().0, 503);
        assert_eq!(ErrorKind::from_status(503).openai().0, 503);
        assert_eq!(
            anthropic_error_body(ErrorKind::RateLimit, "slow down"),
            json!({"type":"error","error":{"type":"rate_limit_error","message":"slow down"}})
        );
        assert_eq!(
            openai_error_body(ErrorKind::RateLimit, "slow down"),
            json!({"error":{"message":"slow down","type":"rate_limit_exceeded","param":null,"code":"rate_limit_exceeded"}})
        );
    }
}
