//! The upstream HTTP client: URL layout and authentication per provider, header scrubbing,
//! retries with back-off, and the connect / first-byte timeouts.
//!
//! Why retries live here and stop at the first byte: a 429, a 5xx or a refused connection
//! before any response byte reached the client is safe to repeat (nothing was shown to the
//! harness yet); after that, only an in-band error is honest (spec §13.2). Back-off doubles from
//! the route's base and honours a short `retry-after`. Keys are only ever put into headers —
//! never into URLs, logs or error messages.

use std::time::Duration;

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

/// The URL of a call to `up` for `model`.
pub fn url(up: &Upstream, model: &str, call: Call) -> String {
    let stream = matches!(call, Call::Generate { stream: true });
    match (up.protocol, call) {
        (Protocol::Anthropic, Call::CountTokens) => up.url("messages/count_tokens"),
        (Protocol::Anthropic, _) => up.url("messages"),
        (Protocol::Gemini, Call::CountTokens) => up.url(&format!("models/{model}:countTokens")),
        (Protocol::Gemini, _) if stream => {
            up.url(&format!("models/{model}:streamGenerateContent?alt=sse"))
        }
        (Protocol::Gemini, _) => up.url(&format!("models/{model}:generateContent")),
        (Protocol::OpenAiChat | Protocol::OpenAiResponses, _)
            if up.provider == Provider::AzureOpenai =>
        {
            let version = up
                .azure_api_version
                .as_deref()
                .unwrap_or("2025-04-01-preview");
            if up.protocol == Protocol::OpenAiResponses {
                up.url(&format!("openai/responses?api-version={version}"))
            } else {
                let deployment = up.azure_deployment.as_deref().unwrap_or(model);
                up.url(&format!(
                    "openai/deployments/{deployment}/chat/completions?api-version={version}"
                ))
            }
        }
        (Protocol::OpenAiChat, _) => up.url("chat/completions"),
        (Protocol::OpenAiResponses, _) => up.url("responses"),
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
/// headers, the upstream key in the provider's header, and `traceparent`.
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
    if let Some(traceparent) = client_headers.get("traceparent") {
        headers.insert(HeaderName::from_static("traceparent"), traceparent.clone());
    }
    headers
}

/// `<base without its version segment>/<rest>`: `/passthrough/v1/embeddings` on a route whose
/// base is `https://api.openai.com/v1` goes to `https://api.openai.com/v1/embeddings`.
pub fn passthrough_url(up: &Upstream, rest: &str, query: Option<&str>) -> String {
    let base = up.base_url.trim_end_matches('/');
    let base = ["/v1", "/v1beta", "/v1beta1"]
        .iter()
        .find_map(|v| base.strip_suffix(v))
        .unwrap_or(base);
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
