//! Provider routing: which model server a harness talks to, and whether a transport proxy has to
//! sit in between (`adapters-and-hooks.md` §5.2–§5.4, adapted to `harnesses.md`).
//!
//! A provider is a named model server speaking one wire protocol. If the task's harness speaks
//! that protocol natively, it is pointed straight at it; otherwise a transport proxy exposes the
//! harness's own protocol and translates: by default one started in-process for the task (the
//! proxy crate as a library, on 127.0.0.1:0, with a per-task token, stopped when the task ends),
//! or a remote one when configured. Keys are held as [`Secret`]s from the worker's environment
//! and never reach logs or errors.
//!
//! The in-process proxy collects a record of every model request it carried
//! ([`ProxyGuard::stop`] hands them over): the task's usage as the upstream reported it, request
//! by request, which the orchestrator journals instead of the harness's own per-task total.

use std::collections::BTreeMap;
use std::sync::Arc;

use babysitter_common::EnvMap;
use babysitter_transport_proxy::config::{self as pcfg, ProxyConfig, Secret};
use babysitter_transport_proxy::cost::{RequestLog, RequestRecord};
use babysitter_transport_proxy::forward::Proxy;
use babysitter_transport_proxy::protocol::Protocol;
use serde::{Deserialize, Serialize};

use crate::harness::{Endpoint, HarnessKind};

/// A provider as configured (`[agent.providers.<name>]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ProviderConfig {
    /// Wire protocol it speaks: anthropic, openai-chat, openai-responses, gemini. Since v0.1.
    pub protocol: Protocol,
    /// Origin without a version path, e.g. `https://api.anthropic.com`. Since v0.1.
    pub base_url: String,
    /// Env var holding the API key (read once at start). Since v0.1.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Model when the task names none. Since v0.1.
    #[serde(default)]
    pub model: Option<String>,
    /// URL layout and auth beyond the protocol's standard one (Azure OpenAI, Vertex AI); such a
    /// provider is always reached through the transport proxy, which knows them. Since v0.1.
    #[serde(default)]
    pub kind: ProviderKind,
}

/// Providers whose URLs or auth differ from their protocol's standard API.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", tag = "type")]
pub enum ProviderKind {
    /// The protocol's own API layout (`/v1/messages`, `/v1/responses`, …).
    #[default]
    Standard,
    /// `https://<resource>.openai.azure.com`, `api-key` header, deployment + api-version.
    #[serde(rename_all = "kebab-case")]
    AzureOpenai {
        #[serde(default)]
        deployment: Option<String>,
        #[serde(default)]
        api_version: Option<String>,
    },
    /// Vertex AI: `base-url` is the full publisher path, a bearer token as the key.
    Vertex,
}

/// The built-in providers (`adapters-and-hooks.md` §5.2 defaults).
pub fn default_providers() -> BTreeMap<String, ProviderConfig> {
    let p = |protocol, base_url: &str, key: &str, model: &str| ProviderConfig {
        protocol,
        base_url: base_url.into(),
        api_key_env: Some(key.into()),
        model: Some(model.into()),
        kind: ProviderKind::Standard,
    };
    BTreeMap::from([
        (
            "anthropic".into(),
            p(
                Protocol::Anthropic,
                "https://api.anthropic.com",
                "ANTHROPIC_API_KEY",
                "claude-sonnet-4-20250514",
            ),
        ),
        (
            "openai".into(),
            p(
                Protocol::OpenAiResponses,
                "https://api.openai.com",
                "OPENAI_API_KEY",
                "gpt-4o",
            ),
        ),
        (
            "gemini".into(),
            p(
                Protocol::Gemini,
                "https://generativelanguage.googleapis.com",
                "GEMINI_API_KEY",
                "gemini-3.1-pro-preview",
            ),
        ),
    ])
}

/// A provider ready to use: its key read from the environment.
#[derive(Debug, Clone)]
pub struct Provider {
    pub name: String,
    pub protocol: Protocol,
    pub origin: String,
    pub api_key: Option<Secret>,
    pub model: Option<String>,
    pub kind: ProviderKind,
}

impl Provider {
    pub fn resolve(name: &str, c: &ProviderConfig, env: &EnvMap) -> Self {
        let api_key = c
            .api_key_env
            .as_deref()
            .and_then(|k| env.get_non_empty(k))
            .map(Secret::new);
        Self {
            name: name.to_owned(),
            protocol: c.protocol,
            origin: c.base_url.trim_end_matches('/').to_owned(),
            api_key,
            model: c.model.clone(),
            kind: c.kind.clone(),
        }
    }
}

/// A remote transport proxy (`[agent.proxy]`).
#[derive(Debug, Clone)]
pub struct RemoteProxy {
    pub origin: String,
    pub token: Option<Secret>,
}

/// Why a provider could not be routed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RouteError {
    #[error("unknown provider `{0}`")]
    UnknownProvider(String),
    #[error("no model: the task names none and provider `{0}` has no default")]
    NoModel(String),
    #[error("cannot start the transport proxy: {0}")]
    Proxy(String),
}

/// How long [`ProxyGuard::stop`] waits for requests still finishing (a stream's record is
/// written just after its last byte; the harness has exited by then, so this is a bound, not a
/// wait that normally happens).
const RECORDS_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// A running in-process proxy; stopped when dropped.
#[derive(Debug)]
pub struct ProxyGuard {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    requests: RequestLog,
}

impl ProxyGuard {
    /// Stops the proxy; the records of the requests it carried, in the order they finished.
    pub async fn stop(mut self) -> Vec<RequestRecord> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
        self.requests.settle(RECORDS_GRACE).await
    }
}

impl Drop for ProxyGuard {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        self.task.abort();
    }
}

/// Where the harness goes, and the proxy kept alive for it (if any).
#[derive(Debug)]
pub struct Routed {
    pub endpoint: Endpoint,
    /// Set when a proxy translates: the protocol pair, for the task's metadata.
    pub via_proxy: Option<(Protocol, Protocol)>,
    pub guard: Option<ProxyGuard>,
}

/// Points `kind` at `provider` for `model`, starting a proxy when the protocols differ.
pub async fn route(
    kind: HarnessKind,
    provider: &Provider,
    model: &str,
    remote: Option<&RemoteProxy>,
) -> Result<Routed, RouteError> {
    let key = provider
        .api_key
        .as_ref()
        .map(|s| s.expose().to_owned())
        // Local model servers accept any key; harnesses refuse to start without one.
        .unwrap_or_else(|| "babysitter-no-key".into());
    if provider.kind == ProviderKind::Standard
        && kind.native_protocols().contains(&provider.protocol)
    {
        return Ok(Routed {
            endpoint: Endpoint {
                protocol: provider.protocol,
                origin: provider.origin.clone(),
                api_key: key,
                model: model.to_owned(),
            },
            via_proxy: None,
            guard: None,
        });
    }
    let front = kind.proxy_front();
    if let Some(r) = remote {
        return Ok(Routed {
            endpoint: Endpoint {
                protocol: front,
                origin: r.origin.clone(),
                api_key: r
                    .token
                    .as_ref()
                    .map(|t| t.expose().to_owned())
                    .unwrap_or_else(|| "babysitter-no-key".into()),
                model: model.to_owned(),
            },
            via_proxy: Some((front, provider.protocol)),
            guard: None,
        });
    }
    let mut up = match &provider.kind {
        ProviderKind::Standard => {
            let (pkind, suffix) = match provider.protocol {
                Protocol::Anthropic => (pcfg::Provider::Anthropic, "/v1"),
                Protocol::OpenAiChat | Protocol::OpenAiResponses => (pcfg::Provider::Openai, "/v1"),
                Protocol::Gemini => (pcfg::Provider::Gemini, "/v1beta"),
            };
            pcfg::Upstream::new(pkind, format!("{}{suffix}", provider.origin))
        }
        ProviderKind::AzureOpenai {
            deployment,
            api_version,
        } => {
            let mut up = pcfg::Upstream::new(pcfg::Provider::AzureOpenai, provider.origin.clone());
            up.azure_deployment = deployment.clone();
            up.azure_api_version = api_version.clone();
            up
        }
        ProviderKind::Vertex => {
            pcfg::Upstream::new(pcfg::Provider::Vertex, provider.origin.clone())
        }
    };
    up.protocol = provider.protocol;
    up.model = Some(model.to_owned());
    up.api_key = provider.api_key.clone();
    let token = format!("bsp-{}", ulid::Ulid::generate());
    let mut config = ProxyConfig::with_routes(vec![pcfg::Route::new("task", up)]);
    config.proxy_token = Some(Secret::new(token.clone()));
    let (state, requests): (Arc<Proxy>, RequestLog) =
        Proxy::collecting(config).map_err(|e| RouteError::Proxy(e.to_string()))?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| RouteError::Proxy(e.to_string()))?;
    let addr = listener
        .local_addr()
        .map_err(|e| RouteError::Proxy(e.to_string()))?;
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async {
            let _ = rx.await;
        };
        if let Err(e) = babysitter_transport_proxy::server::serve(listener, state, shutdown).await {
            tracing::warn!(error = %e, "in-process transport proxy stopped with an error");
        }
    });
    tracing::debug!(harness = %kind, front = %front, upstream = %provider.protocol, %addr, "in-process transport proxy started");
    Ok(Routed {
        endpoint: Endpoint {
            protocol: front,
            origin: format!("http://{addr}"),
            api_key: token,
            model: model.to_owned(),
        },
        via_proxy: Some((front, provider.protocol)),
        guard: Some(ProxyGuard {
            stop: Some(tx),
            task,
            requests,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(protocol: Protocol) -> Provider {
        Provider {
            name: "p".into(),
            protocol,
            origin: "http://127.0.0.1:9".into(),
            api_key: Some(Secret::new("sk-upstream-secret")),
            model: None,
            kind: ProviderKind::Standard,
        }
    }

    #[tokio::test]
    async fn a_native_pair_goes_direct_with_the_provider_key() {
        let r = route(
            HarnessKind::Codex,
            &provider(Protocol::OpenAiResponses),
            "m",
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(r.guard.is_none() && r.via_proxy.is_none());
        assert_eq!(r.endpoint.origin, "http://127.0.0.1:9");
        assert_eq!(r.endpoint.api_key, "sk-upstream-secret");
    }

    #[tokio::test]
    async fn a_foreign_pair_gets_an_in_process_proxy_with_its_own_token() {
        let r = route(
            HarnessKind::ClaudeCode,
            &provider(Protocol::OpenAiChat),
            "m",
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            r.via_proxy,
            Some((Protocol::Anthropic, Protocol::OpenAiChat))
        );
        assert_eq!(r.endpoint.protocol, Protocol::Anthropic);
        assert!(r.endpoint.origin.starts_with("http://127.0.0.1:"));
        // The harness never sees the upstream key.
        assert_ne!(r.endpoint.api_key, "sk-upstream-secret");
        // The proxy answers (its health route) until stopped.
        let health = reqwest_get(&format!("{}/health", r.endpoint.origin)).await;
        assert!(health.is_some(), "proxy did not answer");
        if let Some(g) = r.guard {
            g.stop().await;
        }
        assert!(
            reqwest_get(&format!("{}/health", r.endpoint.origin))
                .await
                .is_none()
        );
    }

    /// The task's in-process proxy hands over one record per model request when stopped, each
    /// priced from the worker's table by the model sent upstream.
    #[tokio::test]
    async fn the_in_process_proxy_returns_its_requests_priced_when_stopped() {
        use babysitter_transport_proxy::scripted::{ScriptedServer, Turn};
        let script = babysitter_transport_proxy::scripted::Script {
            turns: vec![Turn::text_when_asked("hello", "hi")],
        };
        let scripted = ScriptedServer::start(([127, 0, 0, 1], 0).into(), Some(script), None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let mut p = provider(Protocol::OpenAiChat);
        p.origin = scripted.url();
        let r = route(HarnessKind::ClaudeCode, &p, "gpt-4o", None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let body = serde_json::json!({"model": "claude-x", "max_tokens": 64,
            "messages": [{"role": "user", "content": "hello"}]});
        for _ in 0..2 {
            let status = post(&r.endpoint.origin, &r.endpoint.api_key, &body.to_string()).await;
            assert_eq!(status.as_deref(), Some("HTTP/1.1 200 OK"));
        }
        let records = match r.guard {
            Some(g) => g.stop().await,
            None => panic!("no proxy"),
        };
        assert_eq!(records.len(), scripted.requests().len(), "{records:?}");
        assert_eq!(records.len(), 2);
        let priced =
            crate::outcome::priced_requests(&crate::outcome::default_prices(), "p", records);
        for u in &priced {
            // The scripted server's default usage: 100 in, 10 out; gpt-4o at $2.5 / $10.
            assert_eq!((u.provider.as_str(), u.model.as_str()), ("p", "gpt-4o"));
            assert_eq!((u.input_tokens, u.output_tokens), (100, 10));
            assert!(
                (u.cost_usd - (100.0 * 2.5 + 10.0 * 10.0) / 1e6).abs() < 1e-12,
                "{u:?}"
            );
            assert!(!u.failed && u.request_id.starts_with("req_"), "{u:?}");
        }
        assert_ne!(priced[0].request_id, priced[1].request_id);
        scripted.stop().await;
    }

    #[tokio::test]
    async fn azure_goes_through_the_proxy_even_when_the_protocol_matches() {
        let mut p = provider(Protocol::OpenAiResponses);
        p.kind = ProviderKind::AzureOpenai {
            deployment: Some("dep".into()),
            api_version: None,
        };
        let r = route(HarnessKind::Codex, &p, "m", None)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            r.via_proxy,
            Some((Protocol::OpenAiResponses, Protocol::OpenAiResponses))
        );
        assert!(r.guard.is_some());
        let c: ProviderConfig = serde_json::from_value(serde_json::json!({
            "protocol": "openai-chat", "base-url": "https://r.openai.azure.com",
            "kind": {"type": "azure-openai", "deployment": "dep", "api-version": "2025-04-01-preview"}}))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            c.kind,
            ProviderKind::AzureOpenai {
                deployment: Some("dep".into()),
                api_version: Some("2025-04-01-preview".into())
            }
        );
    }

    #[tokio::test]
    async fn a_remote_proxy_is_used_when_configured() {
        let remote = RemoteProxy {
            origin: "http://127.0.0.1:7777".into(),
            token: Some(Secret::new("remote-token")),
        };
        let r = route(
            HarnessKind::GeminiCli,
            &provider(Protocol::Anthropic),
            "m",
            Some(&remote),
        )
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(r.guard.is_none());
        assert_eq!(r.endpoint.protocol, Protocol::Gemini);
        assert_eq!(r.endpoint.origin, "http://127.0.0.1:7777");
        assert_eq!(r.endpoint.api_key, "remote-token");
    }

    /// A plain HTTP/1.1 POST of an Anthropic Messages body: status line or None.
    async fn post(origin: &str, key: &str, body: &str) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let host = origin.strip_prefix("http://")?;
        let mut s = tokio::net::TcpStream::connect(host).await.ok()?;
        s.write_all(
            format!(
                "POST /v1/messages HTTP/1.1\r\nHost: {host}\r\nx-api-key: {key}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        String::from_utf8_lossy(&buf)
            .lines()
            .next()
            .map(str::to_owned)
    }

    /// A plain HTTP/1.1 GET over a TCP socket: status line or None.
    async fn reqwest_get(url: &str) -> Option<String> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let rest = url.strip_prefix("http://")?;
        let (host, path) = rest.split_once('/')?;
        let mut s = tokio::net::TcpStream::connect(host).await.ok()?;
        s.write_all(
            format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        text.lines()
            .next()
            .map(str::to_owned)
            .filter(|l| l.starts_with("HTTP/1.1"))
    }
}
