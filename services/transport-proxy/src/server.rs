//! The HTTP front (axum): routes, client authentication, body limits, and the small
//! informational endpoints.
//!
//! Handlers stay thin: authenticate, read the body under the size limit, hand the request to
//! [`Proxy`] and render any failure in the *client's* protocol envelope (spec §13.2). Routes:
//! `POST /v1/messages` (any query, e.g. Claude Code's `?beta=true`), `/v1/messages/count_tokens`,
//! `/v1/count_tokens`, `/v1/chat/completions`, `/v1/responses`,
//! `/v1beta/models/{model}:generateContent|streamGenerateContent|countTokens`, `GET /v1/models`,
//! `GET /v1beta/models`, `GET /metrics`, `GET /health`, `GET /cache/stats`, `ANY /passthrough/*`
//! (unchanged, to the catch-all route's upstream). Anything else
//! (including Claude Code's `HEAD /` probe) gets a quick 404.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, get, post};
use axum::serve::ListenerExt;
use babysitter_common::telemetry::{W3cContext, set_remote_parent};
use http::{HeaderMap, HeaderValue, header};
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::Instrument as _;

use crate::error::{ProtocolError, ProxyError};
use crate::forward::{Inbound, Proxy};
use crate::metrics;
use crate::protocol::{Protocol, UrlFacts};

/// Shared state of the front.
pub type AppState = Proxy;

/// The router. Body limits are enforced in the handlers so the 413 has the protocol's shape.
pub fn router(state: Arc<Proxy>) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/metrics", get(metrics_handler))
        .route(
            "/cache/stats",
            get(|| async { axum::Json(json!({"enabled": false})) }),
        )
        .route("/v1/models", get(models_openai))
        .route("/v1beta/models", get(models_gemini))
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens_anthropic))
        .route("/v1/count_tokens", post(count_tokens_alias))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/responses", post(responses))
        .route("/v1beta/models/{action}", post(gemini))
        .route("/v1/models/{action}", post(gemini))
        .route("/passthrough/{*rest}", any(passthrough))
        .layer(axum::extract::DefaultBodyLimit::disable())
        .with_state(state)
}

async fn health() -> impl IntoResponse {
    axum::Json(json!({"ok": true, "transport": "anthropic,openai-chat,openai-responses,gemini"}))
}

async fn metrics_handler(State(st): State<Arc<Proxy>>, headers: HeaderMap) -> Response {
    let all = st.stats_by_name();
    let routes: Vec<(&str, &metrics::RouteStats)> =
        all.iter().map(|(n, s)| (n.as_str(), &**s)).collect();
    let wants_json = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json"));
    if wants_json {
        return axum::Json(metrics::json_summary(&routes, st.uptime_secs())).into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4"),
        )],
        metrics::prometheus(&routes, st.uptime_secs()),
    )
        .into_response()
}

async fn models_openai(State(st): State<Arc<Proxy>>) -> impl IntoResponse {
    let data: Vec<_> = st
        .model_ids()
        .into_iter()
        .map(|(id, owner)| json!({"id": id, "object": "model", "created": 0, "owned_by": owner}))
        .collect();
    axum::Json(json!({"object": "list", "data": data}))
}

async fn models_gemini(State(st): State<Arc<Proxy>>) -> impl IntoResponse {
    let models: Vec<_> = st
        .model_ids()
        .into_iter()
        .map(|(id, _)| json!({"name": format!("models/{id}"), "displayName": id,
            "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"]}))
        .collect();
    axum::Json(json!({"models": models}))
}

async fn messages(st: State<Arc<Proxy>>, q: RawQuery, h: HeaderMap, body: Body) -> Response {
    generate(st, Protocol::Anthropic, UrlFacts::default(), q, h, body).await
}

async fn chat_completions(st: State<Arc<Proxy>>, q: RawQuery, h: HeaderMap, b: Body) -> Response {
    generate(st, Protocol::OpenAiChat, UrlFacts::default(), q, h, b).await
}

async fn responses(st: State<Arc<Proxy>>, q: RawQuery, h: HeaderMap, body: Body) -> Response {
    generate(
        st,
        Protocol::OpenAiResponses,
        UrlFacts::default(),
        q,
        h,
        body,
    )
    .await
}

/// `{model}:{method}` of a Gemini path.
async fn gemini(
    st: State<Arc<Proxy>>,
    Path(action): Path<String>,
    q: RawQuery,
    h: HeaderMap,
    body: Body,
) -> Response {
    let (model, method) = action.rsplit_once(':').unwrap_or((action.as_str(), ""));
    let url = |stream| UrlFacts {
        model: Some(model.to_owned()),
        stream: Some(stream),
    };
    match method {
        "generateContent" => generate(st, Protocol::Gemini, url(false), q, h, body).await,
        "streamGenerateContent" => generate(st, Protocol::Gemini, url(true), q, h, body).await,
        "countTokens" => {
            count(
                st,
                Protocol::Gemini,
                url(false),
                q,
                h,
                body,
                |n| json!({"totalTokens": n}),
            )
            .await
        }
        _ => fail(
            Protocol::Gemini,
            ProxyError::invalid("path", format!("unknown method {method}")),
            request_id(&h),
        ),
    }
}

/// `ANY /passthrough/*`: forwarded unchanged (errors of the proxy itself in OpenAI shape, the
/// reference's generic `{"error":{"message"}}` being a subset of it).
async fn passthrough(
    State(st): State<Arc<Proxy>>,
    method: http::Method,
    Path(rest): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let front = Protocol::OpenAiChat;
    let id = request_id(&headers);
    let span = request_span(front, "passthrough", &headers);
    let result = async {
        let inb = read(&st, front, UrlFacts::default(), query, headers, body, &id).await?;
        st.passthrough(method, &rest, inb).await
    }
    .instrument(span)
    .await;
    match result {
        Ok(r) => with_request_id(r, id),
        Err(e) => fail(front, e, id),
    }
}

async fn count_tokens_anthropic(
    st: State<Arc<Proxy>>,
    q: RawQuery,
    h: HeaderMap,
    body: Body,
) -> Response {
    count(
        st,
        Protocol::Anthropic,
        UrlFacts::default(),
        q,
        h,
        body,
        |n| json!({"input_tokens": n}),
    )
    .await
}

async fn count_tokens_alias(
    st: State<Arc<Proxy>>,
    q: RawQuery,
    h: HeaderMap,
    body: Body,
) -> Response {
    count(
        st,
        Protocol::Anthropic,
        UrlFacts::default(),
        q,
        h,
        body,
        |n| json!({"count": n}),
    )
    .await
}

async fn read(
    st: &Proxy,
    front: Protocol,
    url: UrlFacts,
    query: Option<String>,
    headers: HeaderMap,
    body: Body,
    id: &HeaderValue,
) -> Result<Inbound, ProxyError> {
    authorize(st, &headers, query.as_deref())?;
    let limit = st.config.max_body_bytes;
    let body = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ProxyError::TooLarge { limit })?;
    Ok(Inbound {
        front,
        body,
        headers,
        query,
        url,
        // Visible ASCII by construction (`request_id`).
        request_id: id.to_str().unwrap_or_default().to_owned(),
    })
}

async fn generate(
    State(st): State<Arc<Proxy>>,
    front: Protocol,
    url: UrlFacts,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let id = request_id(&headers);
    let span = request_span(front, "generate", &headers);
    let result = async {
        let inb = read(&st, front, url, query, headers, body, &id).await?;
        st.generate(inb).await
    }
    .instrument(span)
    .await;
    match result {
        Ok(r) => with_request_id(r, id),
        Err(e) => fail(front, e, id),
    }
}

/// The span of one proxied request, an OpenTelemetry server span that is the child of the
/// caller's `traceparent`; the upstream request carries its context (`upstream::headers`).
///
/// At info level when the caller sent a sampled trace context — it asked for the request to be
/// traced (a harness of a traced run does) — else at debug level, so that one exported span per
/// untraced request on the hot path stays opt-in through `telemetry.log-filter`.
pub fn request_span(front: Protocol, op: &'static str, headers: &HeaderMap) -> tracing::Span {
    let parent = W3cContext::from_headers(headers);
    let span = if parent.as_ref().is_some_and(W3cContext::sampled) {
        tracing::info_span!("proxy.request", otel.kind = "server", front = %front, op)
    } else {
        tracing::debug_span!("proxy.request", otel.kind = "server", front = %front, op)
    };
    if let Some(parent) = &parent {
        set_remote_parent(&span, parent);
    }
    span
}

async fn count(
    State(st): State<Arc<Proxy>>,
    front: Protocol,
    url: UrlFacts,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
    shape: fn(u64) -> serde_json::Value,
) -> Response {
    let id = request_id(&headers);
    let span = request_span(front, "count_tokens", &headers);
    let result = async {
        let inb = read(&st, front, url, query, headers, body, &id).await?;
        st.count_tokens(inb).await
    }
    .instrument(span)
    .await;
    match result {
        Ok(n) => with_request_id(axum::Json(shape(n)).into_response(), id),
        Err(e) => fail(front, e, id),
    }
}

fn fail(protocol: Protocol, error: ProxyError, id: HeaderValue) -> Response {
    with_request_id(ProtocolError { protocol, error }.into_response(), id)
}

/// Longest client `x-request-id` echoed; a longer one is replaced by a minted id.
const MAX_REQUEST_ID: usize = 128;

/// The request's id, decided before the headers move into the request: the client's
/// `x-request-id` when it is 1 to [`MAX_REQUEST_ID`] visible ASCII characters, else a minted
/// `req_<ulid>`. Cost records carry the same id the answer does.
fn request_id(headers: &HeaderMap) -> HeaderValue {
    headers
        .get("x-request-id")
        .filter(|v| {
            let b = v.as_bytes();
            !b.is_empty() && b.len() <= MAX_REQUEST_ID && b.iter().all(|c| c.is_ascii_graphic())
        })
        .cloned()
        .unwrap_or_else(|| {
            HeaderValue::from_str(&format!("req_{}", ulid::Ulid::generate()))
                .unwrap_or_else(|_| HeaderValue::from_static("req_unknown"))
        })
}

/// The answer with the request's id (`x-request-id` and `request-id`).
fn with_request_id(mut resp: Response, id: HeaderValue) -> Response {
    resp.headers_mut().insert("x-request-id", id.clone());
    resp.headers_mut().insert("request-id", id);
    resp
}

/// Client token check: `x-api-key`, `Authorization: Bearer`, `x-goog-api-key` or `?key=`
/// (spec §2.2). Open when no token is configured.
fn authorize(st: &Proxy, headers: &HeaderMap, query: Option<&str>) -> Result<(), ProxyError> {
    let Some(token) = &st.config.proxy_token else {
        return Ok(());
    };
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    let candidates = [
        h("x-api-key"),
        h("authorization").and_then(|v| v.strip_prefix("Bearer ")),
        h("x-goog-api-key"),
        query.and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("key="))),
    ];
    if candidates.iter().flatten().any(|c| *c == token.expose()) {
        Ok(())
    } else {
        Err(ProxyError::Unauthorized)
    }
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

/// Serves `router` on TLS connections (`[tls]`; handshakes done by the listener, which sets
/// `TCP_NODELAY` itself) until `shutdown` resolves.
pub async fn serve_tls(
    listener: babysitter_common::tls::TlsListener,
    state: Arc<Proxy>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Serves `router` on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<Proxy>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    // axum 0.8 leaves Nagle on: streamed frames would wait for the client's delayed ACK
    // (~40 ms per stream), so every accepted socket gets TCP_NODELAY.
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set");
        }
    });
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}
