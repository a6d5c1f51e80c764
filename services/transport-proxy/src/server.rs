//! The HTTP front (axum) and the upstream client (reqwest).
//!
//! Handlers stay thin: authenticate, read the body under the size limit, decode it into the
//! canonical model (a malformed body is a 400 naming the field, in the client's envelope),
//! encode it for the upstream, and either translate the JSON answer or hand the upstream body to
//! the streaming pipeline. Upstream failures keep their status class and `retry-after`
//! (spec §13.2). Routes: `POST /v1/messages` (any query, e.g. Claude Code's `?beta=true`) →
//! Chat upstream; `POST /v1/chat/completions` → Anthropic upstream; `GET /health`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio_stream::wrappers::ReceiverStream;

use crate::anthropic::{self, MessagesRequest, MessagesResponse};
use crate::config::{ProxyConfig, Upstream};
use crate::error::{ClientProtocol, ProtocolError, ProxyError};
use crate::openai_chat::{self, ChatRequest, ChatResponse};
use crate::pipeline::spawn_translation;

/// Shared state of the front.
#[derive(Debug)]
pub struct AppState {
    pub config: ProxyConfig,
    client: reqwest::Client,
}

impl AppState {
    /// Builds the upstream client. Fails when TLS roots cannot be loaded (reqwest 0.13).
    pub fn new(config: ProxyConfig) -> Result<Arc<Self>, reqwest::Error> {
        let client = reqwest::Client::builder().build()?;
        Ok(Arc::new(Self { config, client }))
    }
}

/// The router. Body limits are enforced in the handlers so the 413 has the protocol's shape.
pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/messages", post(messages))
        .route("/v1/chat/completions", post(chat_completions))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
}

async fn health() -> impl IntoResponse {
    axum::Json(json!({"ok": true, "transport": "anthropic,openai-chat"}))
}

async fn messages(State(st): State<Arc<AppState>>, headers: HeaderMap, body: Body) -> Response {
    let p = ClientProtocol::Anthropic;
    match anthropic_front(&st, &headers, body).await {
        Ok(r) => with_request_id(r, &headers),
        Err(error) => with_request_id(
            ProtocolError { protocol: p, error }.into_response(),
            &headers,
        ),
    }
}

async fn chat_completions(
    State(st): State<Arc<AppState>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let p = ClientProtocol::OpenAiChat;
    match chat_front(&st, &headers, body).await {
        Ok(r) => with_request_id(r, &headers),
        Err(error) => with_request_id(
            ProtocolError { protocol: p, error }.into_response(),
            &headers,
        ),
    }
}

fn with_request_id(mut resp: Response, headers: &HeaderMap) -> Response {
    let id = headers
        .get("x-request-id")
        .cloned()
        .or_else(|| HeaderValue::from_str(&format!("req_{}", ulid::Ulid::generate())).ok());
    if let Some(id) = id {
        resp.headers_mut().insert("x-request-id", id);
    }
    resp
}

fn authorize(cfg: &ProxyConfig, headers: &HeaderMap) -> Result<(), ProxyError> {
    let Some(token) = &cfg.proxy_token else {
        return Ok(());
    };
    let given = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .or_else(|| {
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
        });
    if given == Some(token.expose()) {
        Ok(())
    } else {
        Err(ProxyError::Unauthorized)
    }
}

async fn read_json<T: DeserializeOwned>(body: Body, limit: usize) -> Result<T, ProxyError> {
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ProxyError::TooLarge { limit })?;
    parse_json(&bytes)
}

/// Parses a request body; the error names the offending field path.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ProxyError> {
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let message = e.into_inner().to_string();
        // serde reports a missing field at its parent: name the field itself.
        let missing = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.split_once('`'))
            .map(|(name, _)| name.to_owned());
        let field = match (path.as_str(), missing) {
            (".", Some(name)) => name,
            (".", None) => "body".to_owned(),
            (_, Some(name)) => format!("{path}.{name}"),
            (_, None) => path,
        };
        ProxyError::invalid(field, message)
    })
}

async fn anthropic_front(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ProxyError> {
    authorize(&st.config, headers)?;
    let up = st
        .config
        .anthropic_front
        .as_ref()
        .ok_or(ProxyError::NoRoute)?;
    let req: MessagesRequest = read_json(body, st.config.max_body_bytes).await?;
    let canon = anthropic::convert::request_to_canonical(req)?;
    let model = up.model.clone().unwrap_or_else(|| canon.model.clone());
    let wire =
        openai_chat::convert::canonical_to_request(&canon, &model, up.forward_reasoning_effort);
    let mut rb = st
        .client
        .post(up.url("chat/completions"))
        .timeout(up.timeout)
        .json(&wire);
    if let Some(k) = &up.api_key {
        rb = rb.bearer_auth(k.expose());
    }
    let resp = send(rb).await?;
    if canon.stream {
        let enc = anthropic::stream::AnthropicEncoder::new(
            format!("msg_{}", ulid::Ulid::generate()),
            model,
        );
        let rx = spawn_translation(
            resp.bytes_stream(),
            openai_chat::stream::ChatDecoder::new(),
            enc,
        );
        return Ok(sse_response(rx));
    }
    let chat: ChatResponse = upstream_json(resp).await?;
    let canon_resp = openai_chat::convert::response_to_canonical(chat)?;
    Ok(axum::Json(anthropic::convert::canonical_to_response(&canon_resp)?).into_response())
}

async fn chat_front(
    st: &AppState,
    headers: &HeaderMap,
    body: Body,
) -> Result<Response, ProxyError> {
    authorize(&st.config, headers)?;
    let up = st.config.chat_front.as_ref().ok_or(ProxyError::NoRoute)?;
    let req: ChatRequest = read_json(body, st.config.max_body_bytes).await?;
    let canon = openai_chat::convert::request_to_canonical(req)?;
    let model = up.model.clone().unwrap_or_else(|| canon.model.clone());
    let wire = anthropic::convert::canonical_to_request(&canon, &model, up.default_max_tokens);
    let resp = send(anthropic_request(st, up, &wire)).await?;
    if canon.stream {
        let enc = openai_chat::stream::ChatEncoder::new(
            format!("chatcmpl-{}", ulid::Ulid::generate()),
            model,
            canon.include_usage,
        );
        let rx = spawn_translation(
            resp.bytes_stream(),
            anthropic::stream::AnthropicDecoder::new(),
            enc,
        );
        return Ok(sse_response(rx));
    }
    let msg: MessagesResponse = upstream_json(resp).await?;
    let canon_resp = anthropic::convert::response_to_canonical(msg)?;
    Ok(axum::Json(openai_chat::convert::canonical_to_response(&canon_resp)?).into_response())
}

fn anthropic_request(
    st: &AppState,
    up: &Upstream,
    wire: &MessagesRequest,
) -> reqwest::RequestBuilder {
    let mut rb = st
        .client
        .post(up.url("messages"))
        .timeout(up.timeout)
        .header("anthropic-version", "2023-06-01")
        .json(wire);
    if let Some(k) = &up.api_key {
        rb = rb.header("x-api-key", k.expose());
    }
    rb
}

/// Sends and turns a non-2xx answer into [`ProxyError::Upstream`] (status and `retry-after`
/// kept, message taken from either protocol's envelope).
async fn send(rb: reqwest::RequestBuilder) -> Result<reqwest::Response, ProxyError> {
    let resp = rb.send().await.map_err(|e| {
        if e.is_timeout() {
            ProxyError::Timeout
        } else {
            tracing::warn!(error = %e, "upstream request failed");
            ProxyError::Connect("connection to upstream failed".to_owned())
        }
    })?;
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let retry_after = resp.headers().get(header::RETRY_AFTER).cloned();
    let text = resp.text().await.unwrap_or_default();
    let message = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| text.chars().take(500).collect());
    Err(ProxyError::Upstream {
        status: status.as_u16(),
        message,
        retry_after,
    })
}

async fn upstream_json<T: DeserializeOwned>(resp: reqwest::Response) -> Result<T, ProxyError> {
    let bytes = resp.bytes().await.map_err(|e| {
        if e.is_timeout() {
            ProxyError::Timeout
        } else {
            ProxyError::Connect(e.to_string())
        }
    })?;
    serde_json::from_slice(&bytes).map_err(|e| ProxyError::UpstreamProtocol(e.to_string()))
}

fn sse_response(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Response {
    let stream = ReceiverStream::new(rx).map(Ok::<Bytes, Infallible>);
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

/// Serves `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
