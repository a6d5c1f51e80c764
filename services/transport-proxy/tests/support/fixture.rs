//! The proxy on 127.0.0.1:0 in front of the scripted model server; both stopped by
//! [`Fixture::stop`] (and the scripted server also on drop).

#![allow(dead_code)]

use std::sync::Arc;

use babysitter_transport_proxy::config::{Provider, ProxyConfig, Route, Upstream};
use babysitter_transport_proxy::forward::Proxy;
use babysitter_transport_proxy::protocol::Protocol;
use babysitter_transport_proxy::scripted::{Script, ScriptedServer};
use babysitter_transport_proxy::server::serve;
use serde_json::Value;

/// An upstream of `protocol` on the scripted server at `base`, model `fake-upstream`.
pub fn upstream_for(protocol: Protocol, base: &str) -> Upstream {
    let (provider, suffix) = match protocol {
        Protocol::Anthropic => (Provider::Anthropic, "/v1"),
        Protocol::OpenAiChat | Protocol::OpenAiResponses => (Provider::Openai, "/v1"),
        Protocol::Gemini => (Provider::Gemini, "/v1beta"),
    };
    let mut up = Upstream::new(provider, format!("{base}{suffix}"));
    up.protocol = protocol;
    up.model = Some("fake-upstream".into());
    up
}

pub fn script(v: Value) -> Script {
    serde_json::from_value(v).unwrap_or_else(|e| panic!("script: {e}"))
}

pub struct Fixture {
    pub scripted: ScriptedServer,
    pub proxy: String,
    pub state: Arc<Proxy>,
    pub http: reqwest::Client,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl Fixture {
    /// A proxy whose config `configure` builds from the scripted server's base URL.
    pub async fn start(
        script: Option<Script>,
        configure: impl FnOnce(&str) -> ProxyConfig,
    ) -> Self {
        let scripted = ScriptedServer::start(([127, 0, 0, 1], 0).into(), script, None)
            .await
            .unwrap_or_else(|e| panic!("scripted: {e}"));
        let config = configure(&scripted.url());
        let state: Arc<Proxy> = Proxy::new(config).unwrap_or_else(|e| panic!("proxy: {e}"));
        let l = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let proxy = format!(
            "http://{}",
            l.local_addr().unwrap_or_else(|e| panic!("{e}"))
        );
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(serve(l, state.clone(), async {
            let _ = rx.await;
        }));
        Self {
            scripted,
            proxy,
            state,
            http: reqwest::Client::new(),
            stop: Some(tx),
            task,
        }
    }

    /// One catch-all route to `upstream`.
    pub async fn simple(script: Option<Script>, upstream: Protocol) -> Self {
        Self::start(script, |base| {
            ProxyConfig::with_routes(vec![Route::new("all", upstream_for(upstream, base))])
        })
        .await
    }

    pub async fn post(
        &self,
        path: &str,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> (u16, http::HeaderMap, String) {
        let mut rb = self.http.post(format!("{}{path}", self.proxy)).json(body);
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        let resp = rb
            .send()
            .await
            .unwrap_or_else(|e| panic!("post {path}: {e}"));
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        (status, headers, resp.text().await.unwrap_or_default())
    }

    pub async fn get(&self, path: &str, headers: &[(&str, &str)]) -> (u16, String) {
        let mut rb = self.http.get(format!("{}{path}", self.proxy));
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        let resp = rb
            .send()
            .await
            .unwrap_or_else(|e| panic!("get {path}: {e}"));
        (
            resp.status().as_u16(),
            resp.text().await.unwrap_or_default(),
        )
    }

    /// The last request the scripted upstream saw.
    pub fn last_upstream(&self) -> babysitter_transport_proxy::scripted::LoggedRequest {
        self.scripted
            .requests()
            .pop()
            .unwrap_or_else(|| panic!("no upstream request"))
    }

    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        let _ = (&mut self.task).await;
        self.scripted.stop().await;
    }
}
