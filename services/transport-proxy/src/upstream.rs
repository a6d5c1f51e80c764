//! The upstream HTTP client: URL layout and authentication per provider (the one reading of a
//! configured base URL is [`api_base`]), header scrubbing, retries with back-off, and the
//! connect / first-byte timeouts.
//!
//! Why retries live here and stop at the first byte: a 429, a 5xx or a refused connection
//! before any response byte reached the client is safe to repeat (nothing was shown to the
//! harness yet); after that, only an in-band error is honest (spec §13.2). Back-off doubles from
//! the route's base and honours a short `retry-after`. Keys are only ever put into headers —
//! never into URLs, logs or error messages.

use std::borrow::Cow;
use std::time::Duration;

use babysitter_common::telemetry::W3cContext;
use http::{HeaderMap, HeaderName, HeaderValue, header};
use serde_json::Value;

use crate::config::{Policy, Provider, Secret, Upstream};
use crate::error::ProxyError;
use crate::metrics::RouteStats;
use crate::protocol::Protocol;

/// What an upstream call is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    Generate { stream: bool },
    CountTokens,
}

/// The root every request of `up` goes under: its configured `base-url` read the way the
/// official SDK of the protocol spoken reads its base-URL variable, so a value copied from
/// `ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL` or `GOOGLE_GEMINI_BASE_URL` works unchanged. This is
/// the one rule for a base URL: every upstream URL (generate, count tokens, passthrough) and
/// every way of configuring a route (`[[routes.upstream]]`, the control API, the
/// `AGENT_MUX_PROXY_*` environment) goes through it.
///
/// | upstream | base as configured | requests under |
/// |---|---|---|
/// | Anthropic Messages | host root or any path (`https://api.anthropic.com`) | `{base}/v1` |
/// | Gemini | host root or any path (`https://generativelanguage.googleapis.com`) | `{base}/v1beta` |
/// | OpenAI Chat / Responses | with its version (`https://api.openai.com/v1`) | `{base}` |
/// | OpenAI Chat / Responses | host root only (`http://localhost:11434`) | `{base}/v1` |
/// | Azure OpenAI | resource endpoint (`https://r.openai.azure.com`) | `{base}` (`/openai/…` follows) |
/// | Vertex AI | full publisher path (`…/v1/projects/p/locations/l/publishers/google`) | `{base}` |
///
/// A base whose last segment already is a version (`/v1`, `/v2`, `/v1beta`, `/v1beta1`,
/// `/v1alpha`) never gets a second one, so `http://h/v1` and `…/v1beta` bases keep working.
/// Why OpenAI bases differ: the OpenAI SDK appends `/chat/completions` to its base as is, and
/// compatible providers put the version under their own prefix (`/api/v1`, `/openai/v1`,
/// `/v1beta/openai`), so a base with a path is taken at its word; a bare host cannot be a
/// Chat endpoint, and the `AGENT_MUX_PROXY_API_BASE` contract passes hosts that way.
pub fn api_base(up: &Upstream) -> Cow<'_, str> {
    let base = up.base_url.trim_end_matches('/');
    let path = url_path(base);
    let version = match (up.provider, up.protocol) {
        (Provider::AzureOpenai | Provider::Vertex, _) => None,
        (_, Protocol::Anthropic) => Some("v1"),
        (_, Protocol::Gemini) => Some("v1beta"),
        (_, Protocol::OpenAiChat | Protocol::OpenAiResponses) => path.is_empty().then_some("v1"),
    };
    match version {
        Some(v) if !ends_with_version(path) => Cow::Owned(format!("{base}/{v}")),
        _ => Cow::Borrowed(base),
    }
}

/// The path of `url` (`/a/b` of `https://h/a/b`), empty for a bare host.
fn url_path(url: &str) -> &str {
    let after_scheme = url.split_once("://").map_or(url, |(_, rest)| rest);
    after_scheme.find('/').map_or("", |i| &after_scheme[i..])
}

/// Whether the last segment of `path` is an API version: `v1`, `v2`, `v1beta`, `v1beta1`,
/// `v1alpha`.
fn ends_with_version(path: &str) -> bool {
    let last = path.rsplit('/').next().unwrap_or_default();
    let Some(rest) = last.strip_prefix('v') else {
        return false;
    };
    let tail = rest.trim_start_matches(|c: char| c.is_ascii_digit());
    if tail.len() == rest.len() {
        return false;
    }
    let tail = tail
        .strip_prefix("alpha")
        .or_else(|| tail.strip_prefix("beta"))
        .unwrap_or(tail);
    tail.chars().all(|c| c.is_ascii_digit())
}

/// `<api base of up>/<path>` without a doubled slash.
fn under(up: &Upstream, path: &str) -> String {
    format!("{}/{}", api_base(up), path.trim_start_matches('/'))
}

/// The URL of a call to `up` for `model`.
pub fn url(up: &Upstream, model: &str, call: Call) -> String {
    let stream = matches!(call, Call::Generate { stream: true });
    match (up.protocol, call) {
        (Protocol::Anthropic, Call::CountTokens) => under(up, "messages/count_tokens"),
        (Protocol::Anthropic, _) => under(up, "messages"),
        (Protocol::Gemini, Call::CountTokens) => under(up, &format!("models/{model}:countTokens")),
        (Protocol::Gemini, _) if stream => {
            under(up, &format!("models/{model}:streamGenerateContent?alt=sse"))
        }
        (Protocol::Gemini, _) => under(up, &format!("models/{model}:generateContent")),
        (Protocol::OpenAiChat | Protocol::OpenAiResponses, _)
            if up.provider == Provider::AzureOpenai =>
        {
            let version = up
                .azure_api_version
                .as_deref()
                .unwrap_or("2025-04-01-preview");
            if up.protocol == Protocol::OpenAiResponses {
                under(up, &format!("openai/responses?api-version={version}"))
            } else {
                let deployment = up.azure_deployment.as_deref().unwrap_or(model);
                under(
                    up,
                    &format!(
                        "openai/deployments/{deployment}/chat/completions?api-version={version}"
                    ),
                )
            }
        }
        (Protocol::OpenAiChat, _) => under(up, "chat/completions"),
        (Protocol::OpenAiResponses, _) => under(up, "responses"),
    }
}

/// The generate URL of `up` parsed once, when it does not depend on the requested model (the
/// route fixes the upstream model, or the layout has no model in it): saves a URL parse per
/// request on the hot path. `None` otherwise, or when it does not parse (the error then comes
/// from the request itself).
pub fn fixed_generate_url(up: &Upstream, stream: bool) -> Option<reqwest::Url> {
    let in_url = match up.protocol {
        Protocol::Gemini => true,
        Protocol::OpenAiChat => {
            up.provider == Provider::AzureOpenai && up.azure_deployment.is_none()
        }
        Protocol::Anthropic | Protocol::OpenAiResponses => false,
    };
    if in_url && up.model.is_none() {
        return None;
    }
    let model = up.model.as_deref().unwrap_or_default();
    reqwest::Url::parse(&url(up, model, Call::Generate { stream })).ok()
}

/// The harness's own key, from whichever header (or `?key=`) carried it.
pub fn client_key(headers: &HeaderMap, query: Option<&str>) -> Option<String> {
    let h = |n: &str| headers.get(n).and_then(|v| v.to_str().ok());
    h("x-api-key")
        .or_else(|| h("authorization").and_then(|v| v.strip_prefix("Bearer ")))
        .or_else(|| h("x-goog-api-key"))
        .or_else(|| h("api-key"))
        .map(str::to_owned)
        .or_else(|| {
            query?
                .split('&')
                .find_map(|kv| kv.strip_prefix("key="))
                .map(str::to_owned)
        })
}

/// Headers passed from the client to a same-protocol upstream (everything else is dropped:
/// hop-by-hop headers, client credentials, `x-babysitter-*` cost headers).
fn forwarded(name: &str, up: &Upstream) -> bool {
    match up.protocol {
        Protocol::Anthropic => name == "anthropic-beta" || name == "anthropic-version",
        Protocol::OpenAiChat | Protocol::OpenAiResponses => {
            name == "openai-beta" || name == "session_id" || name == "x-client-request-id"
        }
        Protocol::Gemini => false,
    }
}

/// Builds one upstream request.
pub fn build(
    client: &reqwest::Client,
    up: &Upstream,
    url: impl reqwest::IntoUrl,
    body: &Value,
    client_headers: &HeaderMap,
    client_key: Option<&str>,
) -> reqwest::RequestBuilder {
    client
        .post(url)
        .headers(headers(up, client_headers, client_key))
        .json(body)
}

/// The headers of an upstream request: the allow-listed client headers, the route's extra
/// headers, the upstream key in the provider's header, and the trace context (`traceparent`,
/// `tracestate`).
pub fn headers(up: &Upstream, client_headers: &HeaderMap, client_key: Option<&str>) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in client_headers {
        if forwarded(name.as_str(), up) {
            headers.insert(name.clone(), value.clone());
        }
    }
    if up.protocol == Protocol::Anthropic && !headers.contains_key("anthropic-version") {
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static("2023-06-01"),
        );
    }
    for (k, v) in &up.extra_headers {
        if let (Ok(k), Ok(v)) = (
            HeaderName::from_bytes(k.as_bytes()),
            HeaderValue::from_str(v),
        ) {
            headers.insert(k, v);
        }
    }
    let key = if up.pass_through_client_key {
        client_key.map(Secret::new)
    } else {
        up.api_key.clone()
    };
    if let Some(key) = key {
        let (name, value) = match up.provider {
            Provider::Anthropic => ("x-api-key", key.expose().to_owned()),
            Provider::Openai | Provider::Vertex => {
                ("authorization", format!("Bearer {}", key.expose()))
            }
            Provider::AzureOpenai => ("api-key", key.expose().to_owned()),
            Provider::Gemini => ("x-goog-api-key", key.expose().to_owned()),
        };
        if let Ok(mut v) = HeaderValue::from_str(&value) {
            v.set_sensitive(true);
            headers.insert(HeaderName::from_static(name), v);
        }
    }
    // The request span's context (its child on the upstream side), else — the span not
    // recorded — the client's as it came.
    let trace = W3cContext::of_span(&tracing::Span::current())
        .or_else(|| W3cContext::from_headers(client_headers));
    for (name, value) in trace.iter().flat_map(W3cContext::headers) {
        if let Ok(v) = HeaderValue::from_str(value) {
            headers.insert(HeaderName::from_static(name), v);
        }
    }
    headers
}

/// `<api base without its version segment>/<rest>` ([`api_base`]; the client's path carries the
/// version): `/passthrough/v1/embeddings` on a route whose base is `https://api.openai.com/v1`
/// goes to `https://api.openai.com/v1/embeddings`, `/passthrough/v1/models` on an Anthropic
/// route at `https://api.anthropic.com` to `https://api.anthropic.com/v1/models`.
pub fn passthrough_url(up: &Upstream, rest: &str, query: Option<&str>) -> String {
    let api = api_base(up);
    let base = match api.rsplit_once('/') {
        Some((root, _)) if ends_with_version(url_path(&api)) => root,
        _ => &api,
    };
    // The client's `?key=` is a proxy credential, never forwarded.
    let query: Vec<&str> = query
        .unwrap_or("")
        .split('&')
        .filter(|kv| !kv.is_empty() && !kv.starts_with("key="))
        .collect();
    let mut url = format!("{base}/{}", rest.trim_start_matches('/'));
    if !query.is_empty() {
        url.push('?');
        url.push_str(&query.join("&"));
    }
    url
}

/// Sends with retries before the first byte; a non-2xx answer becomes
/// [`ProxyError::Upstream`] (status and `retry-after` kept, message taken from any envelope).
pub async fn send(
    make: impl Fn() -> reqwest::RequestBuilder,
    policy: &Policy,
    stats: &RouteStats,
) -> Result<reqwest::Response, ProxyError> {
    let mut attempt = 0u32;
    loop {
        let result = match tokio::time::timeout(policy.first_byte_timeout, make().send()).await {
            Err(_) => Err(ProxyError::Timeout),
            Ok(Err(e)) if e.is_timeout() => Err(ProxyError::Timeout),
            Ok(Err(e)) => {
                // reqwest errors may carry the URL; it never holds a key (keys go in headers).
                tracing::warn!(error = %e, "upstream request failed");
                Err(ProxyError::Connect(
                    "connection to upstream failed".to_owned(),
                ))
            }
            Ok(Ok(resp)) if resp.status().is_success() => return Ok(resp),
            Ok(Ok(resp)) => Err(upstream_error(resp).await),
        };
        let err = match result {
            Ok(r) => return Ok(r),
            Err(e) => e,
        };
        let retryable = match &err {
            ProxyError::Upstream { status, .. } => *status == 429 || *status >= 500,
            ProxyError::Connect(_) => true,
            _ => false,
        };
        if !retryable || attempt >= policy.max_retries {
            return Err(err);
        }
        let hinted = match &err {
            ProxyError::Upstream {
                retry_after: Some(v),
                ..
            } => v
                .to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .map(Duration::from_secs),
            _ => None,
        };
        let backoff = policy
            .retry_backoff
            .saturating_mul(1 << attempt.min(5))
            .min(Duration::from_secs(8));
        let wait = hinted
            .filter(|h| *h <= Duration::from_secs(8))
            .unwrap_or(backoff);
        tracing::debug!(attempt, ?wait, "retrying upstream");
        stats
            .retries
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tokio::time::sleep(wait).await;
        attempt += 1;
    }
}

async fn upstream_error(resp: reqwest::Response) -> ProxyError {
    let status = resp.status().as_u16();
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
    ProxyError::Upstream {
        status,
        message,
        retry_after,
    }
}

/// Reads a whole (non-streamed) body, bounded by the idle timeout.
pub async fn read_body(
    resp: reqwest::Response,
    idle: Duration,
) -> Result<bytes::Bytes, ProxyError> {
    match tokio::time::timeout(idle, resp.bytes()).await {
        Err(_) => Err(ProxyError::Timeout),
        Ok(Err(e)) if e.is_timeout() => Err(ProxyError::Timeout),
        Ok(Err(_)) => Err(ProxyError::Connect("upstream body interrupted".to_owned())),
        Ok(Ok(b)) => Ok(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Outside a recorded span (no OpenTelemetry layer here) the client's trace context goes
    /// upstream as it came; a malformed one does not go at all.
    #[test]
    fn the_clients_trace_context_goes_upstream_when_the_proxy_records_none() {
        let up = Upstream::new(Provider::Openai, "https://api.openai.com/v1");
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let mut client = HeaderMap::new();
        client.insert("traceparent", HeaderValue::from_static(tp));
        client.insert("tracestate", HeaderValue::from_static("k=v"));
        let sent = headers(&up, &client, None);
        assert_eq!(sent.get("traceparent").unwrap(), tp);
        assert_eq!(sent.get("tracestate").unwrap(), "k=v");
        client.insert("traceparent", HeaderValue::from_static("garbage"));
        assert!(headers(&up, &client, None).get("traceparent").is_none());
    }

    /// The once-parsed URL is the per-request one whenever it exists, and absent exactly when
    /// the URL names a model the route does not fix.
    #[test]
    fn fixed_generate_urls_equal_the_per_request_ones() {
        let mut az = Upstream::new(Provider::AzureOpenai, "https://r.openai.azure.com/");
        az.azure_api_version = Some("2025-04-01-preview".into());
        let mut az_dep = az.clone();
        az_dep.azure_deployment = Some("dep".into());
        let mut gem_fixed = Upstream::new(Provider::Gemini, "https://g/v1beta");
        gem_fixed.model = Some("gem-up".into());
        let cases = [
            (Upstream::new(Provider::Anthropic, "https://a/v1"), true),
            (Upstream::new(Provider::Openai, "https://o/v1"), true),
            (az_dep, true),
            (az, false),
            (Upstream::new(Provider::Gemini, "https://g/v1beta"), false),
            (gem_fixed, true),
        ];
        for (up, fixed) in cases {
            for stream in [false, true] {
                let got = fixed_generate_url(&up, stream);
                assert_eq!(got.is_some(), fixed, "{up:?}");
                if let Some(u) = got {
                    let model = up.model.as_deref().unwrap_or("client-model");
                    assert_eq!(u.as_str(), url(&up, model, Call::Generate { stream }));
                }
            }
        }
    }

    #[test]
    fn urls_per_provider_and_protocol() {
        let mut az = Upstream::new(Provider::AzureOpenai, "https://r.openai.azure.com/");
        az.azure_deployment = Some("dep".into());
        az.azure_api_version = Some("2025-04-01-preview".into());
        assert_eq!(
            url(&az, "gpt", Call::Generate { stream: true }),
            "https://r.openai.azure.com/openai/deployments/dep/chat/completions?api-version=2025-04-01-preview"
        );
        let g = Upstream::new(Provider::Gemini, "https://g/v1beta");
        assert_eq!(
            url(&g, "gem", Call::Generate { stream: true }),
            "https://g/v1beta/models/gem:streamGenerateContent?alt=sse"
        );
        assert_eq!(
            url(&g, "gem", Call::CountTokens),
            "https://g/v1beta/models/gem:countTokens"
        );
        let a = Upstream::new(Provider::Anthropic, "https://a/v1");
        assert_eq!(
            url(&a, "m", Call::CountTokens),
            "https://a/v1/messages/count_tokens"
        );
        let mut r = Upstream::new(Provider::Openai, "https://o/v1");
        r.protocol = Protocol::OpenAiResponses;
        assert_eq!(
            url(&r, "m", Call::Generate { stream: false }),
            "https://o/v1/responses"
        );
    }

    /// One rule for a configured base, each protocol's SDK convention: Anthropic and Gemini
    /// bases are host roots (or any path) that get `/v1` / `/v1beta`, OpenAI bases carry their
    /// version (a bare host gets `/v1`); a base already ending in a version gets no second one.
    #[test]
    fn base_urls_follow_each_sdk_convention() {
        use Protocol::{Anthropic, Gemini, OpenAiChat, OpenAiResponses};
        let generate = Call::Generate { stream: false };
        let stream = Call::Generate { stream: true };
        type Cases<'a> = &'a [(&'a str, &'a str)];
        let groups: &[(Provider, Protocol, Call, Cases)] = &[
            // What ANTHROPIC_BASE_URL holds, the older `/v1` form, a gateway under a prefix.
            (
                Provider::Anthropic,
                Anthropic,
                generate,
                &[
                    (
                        "https://api.anthropic.com",
                        "https://api.anthropic.com/v1/messages",
                    ),
                    (
                        "https://api.anthropic.com/",
                        "https://api.anthropic.com/v1/messages",
                    ),
                    ("http://h/v1", "http://h/v1/messages"),
                    ("http://h/v1/", "http://h/v1/messages"),
                    ("http://h:9/anthropic", "http://h:9/anthropic/v1/messages"),
                ],
            ),
            (
                Provider::Anthropic,
                Anthropic,
                Call::CountTokens,
                &[
                    ("http://h", "http://h/v1/messages/count_tokens"),
                    ("http://h/v1", "http://h/v1/messages/count_tokens"),
                ],
            ),
            (
                Provider::Openai,
                Anthropic,
                stream,
                &[(
                    "https://openrouter.ai/api",
                    "https://openrouter.ai/api/v1/messages",
                )],
            ),
            // What OPENAI_BASE_URL holds (with its version) is used as given; a bare host,
            // which no OpenAI-style API serves at its root, gets `/v1`.
            (
                Provider::Openai,
                OpenAiChat,
                generate,
                &[
                    (
                        "https://api.openai.com/v1",
                        "https://api.openai.com/v1/chat/completions",
                    ),
                    ("http://h/openai/v1/", "http://h/openai/v1/chat/completions"),
                    (
                        "http://h/v1beta/openai",
                        "http://h/v1beta/openai/chat/completions",
                    ),
                    (
                        "https://api.openai.com",
                        "https://api.openai.com/v1/chat/completions",
                    ),
                    ("http://h:11434/", "http://h:11434/v1/chat/completions"),
                ],
            ),
            (
                Provider::Openai,
                OpenAiResponses,
                stream,
                &[
                    ("http://h/v1", "http://h/v1/responses"),
                    ("http://h", "http://h/v1/responses"),
                ],
            ),
            (
                Provider::Anthropic,
                OpenAiChat,
                generate,
                &[(
                    "https://api.anthropic.com/v1/",
                    "https://api.anthropic.com/v1/chat/completions",
                )],
            ),
            // What GOOGLE_GEMINI_BASE_URL holds (the host root); the client adds `/v1beta`.
            (
                Provider::Gemini,
                Gemini,
                generate,
                &[
                    ("http://h", "http://h/v1beta/models/m:generateContent"),
                    (
                        "http://h/v1beta",
                        "http://h/v1beta/models/m:generateContent",
                    ),
                    ("http://h/v1/", "http://h/v1/models/m:generateContent"),
                    (
                        "http://h/v1alpha",
                        "http://h/v1alpha/models/m:generateContent",
                    ),
                ],
            ),
            (
                Provider::Gemini,
                Gemini,
                Call::CountTokens,
                &[("http://h/", "http://h/v1beta/models/m:countTokens")],
            ),
            // Vertex and Azure have full layouts of their own: used as given.
            (
                Provider::Vertex,
                Gemini,
                generate,
                &[(
                    "http://h/v1/projects/p/publishers/google",
                    "http://h/v1/projects/p/publishers/google/models/m:generateContent",
                )],
            ),
            (
                Provider::AzureOpenai,
                OpenAiResponses,
                generate,
                &[(
                    "http://h",
                    "http://h/openai/responses?api-version=2025-04-01-preview",
                )],
            ),
        ];
        for (provider, protocol, call, cases) in groups {
            for (base, want) in *cases {
                let mut up = Upstream::new(*provider, *base);
                up.protocol = *protocol;
                assert_eq!(
                    url(&up, "m", *call),
                    *want,
                    "{provider:?} {protocol:?} {base}"
                );
            }
        }
    }

    #[test]
    fn version_segments() {
        for v in [
            "/v1", "/v2", "/v1beta", "/v1beta1", "/v1alpha", "/api/v1", "/v10",
        ] {
            assert!(ends_with_version(v), "{v}");
        }
        for v in [
            "",
            "/",
            "/v",
            "/vertex",
            "/v1x",
            "/openai",
            "/v1/openai",
            "/beta1",
        ] {
            assert!(!ends_with_version(v), "{v}");
        }
        assert_eq!(url_path("https://h:1/a/b"), "/a/b");
        assert_eq!(url_path("https://h:1"), "");
    }

    /// Passthrough paths carry their version, so they go under the api base without it.
    #[test]
    fn passthrough_urls_share_the_rule() {
        let a = Upstream::new(Provider::Anthropic, "https://api.anthropic.com");
        assert_eq!(
            passthrough_url(&a, "/v1/models", Some("key=k&limit=2")),
            "https://api.anthropic.com/v1/models?limit=2"
        );
        let a1 = Upstream::new(Provider::Anthropic, "https://api.anthropic.com/v1/");
        assert_eq!(
            passthrough_url(&a1, "v1/models", None),
            "https://api.anthropic.com/v1/models"
        );
        let o = Upstream::new(Provider::Openai, "https://openrouter.ai/api/v1");
        assert_eq!(
            passthrough_url(&o, "/v1/embeddings", None),
            "https://openrouter.ai/api/v1/embeddings"
        );
        let bare = Upstream::new(Provider::Openai, "http://localhost:11434");
        assert_eq!(
            passthrough_url(&bare, "/v1/embeddings", None),
            "http://localhost:11434/v1/embeddings"
        );
        let g = Upstream::new(
            Provider::Gemini,
            "https://generativelanguage.googleapis.com/v1beta",
        );
        assert_eq!(
            passthrough_url(&g, "/v1beta/files", None),
            "https://generativelanguage.googleapis.com/v1beta/files"
        );
        let vx = Upstream::new(
            Provider::Vertex,
            "https://x/v1/projects/p/locations/l/publishers/google",
        );
        assert_eq!(
            passthrough_url(&vx, "/models", None),
            "https://x/v1/projects/p/locations/l/publishers/google/models"
        );
    }

    #[test]
    fn client_key_from_any_header_or_query() {
        let mut h = HeaderMap::new();
        assert_eq!(client_key(&h, Some("alt=sse&key=q1")), Some("q1".into()));
        h.insert("x-goog-api-key", HeaderValue::from_static("g1"));
        assert_eq!(client_key(&h, None), Some("g1".into()));
        h.insert("authorization", HeaderValue::from_static("Bearer b1"));
        assert_eq!(client_key(&h, None), Some("b1".into()));
    }
}
