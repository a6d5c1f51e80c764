//! A collecting proxy ([`Proxy::collecting`], what the harness launcher runs per task) keeps one
//! record of every finished generate request — babysitter headers or not — with the request id
//! its answer carried, the route, the model sent upstream, the scripted usage in canonical
//! quantities, and whether it failed; the owner takes them once.

#[path = "support/clients.rs"]
mod clients;
#[path = "support/fixture.rs"]
mod fixture;

use std::sync::Arc;
use std::time::Duration;

use babysitter_transport_proxy::config::{ProxyConfig, Route};
use babysitter_transport_proxy::cost::{RequestLog, RequestRecord};
use babysitter_transport_proxy::forward::Proxy;
use babysitter_transport_proxy::protocol::Protocol;
use babysitter_transport_proxy::scripted::ScriptedServer;
use babysitter_transport_proxy::server::serve;
use clients::{first_turn, path};
use fixture::{script, upstream_for};
use serde_json::json;

/// A collecting proxy with one route to an OpenAI-Chat upstream on the scripted server.
struct Collecting {
    scripted: ScriptedServer,
    origin: String,
    log: RequestLog,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

async fn start(script_json: serde_json::Value) -> Collecting {
    let scripted =
        ScriptedServer::start(([127, 0, 0, 1], 0).into(), Some(script(script_json)), None)
            .await
            .unwrap_or_else(|e| panic!("scripted: {e}"));
    let mut route = Route::new("task", upstream_for(Protocol::OpenAiChat, &scripted.url()));
    route.policy.max_retries = 0;
    let (state, log): (Arc<Proxy>, RequestLog) =
        Proxy::collecting(ProxyConfig::with_routes(vec![route]))
            .unwrap_or_else(|e| panic!("proxy: {e}"));
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let origin = format!(
        "http://{}",
        l.local_addr().unwrap_or_else(|e| panic!("{e}"))
    );
    let (stop, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(serve(l, state, async {
        let _ = rx.await;
    }));
    Collecting {
        scripted,
        origin,
        log,
        stop,
        task,
    }
}

impl Collecting {
    /// Posts an Anthropic request; (status, the answer's x-request-id).
    async fn post(&self, stream: bool, request_id: Option<&str>) -> (u16, String) {
        let mut rb = reqwest::Client::new()
            .post(format!(
                "{}{}",
                self.origin,
                path(Protocol::Anthropic, stream)
            ))
            .json(&first_turn(Protocol::Anthropic, stream));
        if let Some(id) = request_id {
            rb = rb.header("x-request-id", id);
        }
        let resp = rb.send().await.unwrap_or_else(|e| panic!("post: {e}"));
        let status = resp.status().as_u16();
        let id = resp
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        // Read to the end: a stream's record lands when it ends.
        let _ = resp.text().await;
        (status, id)
    }

    async fn finish(self) -> Vec<RequestRecord> {
        let _ = self.stop.send(());
        let _ = self.task.await;
        let records = self.log.settle(Duration::from_secs(30)).await;
        self.scripted.stop().await;
        records
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_through_a_collecting_proxy_leaves_one_record_with_its_usage() {
    let p = start(json!({"turns": [{"when": {}, "reply": {"text": "hi",
        "usage": {"input": 120, "output": 30, "cache_read": 40}}}]}))
    .await;
    let (s1, id1) = p.post(false, None).await;
    let (s2, id2) = p.post(true, Some("client-chosen-id")).await;
    assert_eq!((s1, s2), (200, 200));
    assert!(id1.starts_with("req_"), "a minted id: {id1}");
    assert_eq!(id2, "client-chosen-id", "the client's id is echoed");
    let answered = p.scripted.requests().len();
    let records = p.finish().await;
    assert_eq!(records.len(), answered, "one record per upstream request");
    assert_eq!(
        records
            .iter()
            .map(|r| r.request_id.as_str())
            .collect::<Vec<_>>(),
        [id1.as_str(), id2.as_str()],
        "records carry the ids the answers did, in order"
    );
    for r in &records {
        assert_eq!(
            (r.route.as_str(), r.model.as_str()),
            ("task", "fake-upstream")
        );
        assert!(!r.failed, "{r:?}");
        // Canonical quantities: input without the cache (the upstream's prompt_tokens of 160
        // include it; OpenAI Chat has no cache writes).
        assert_eq!(
            (r.usage.input, r.usage.output, r.usage.cache_read),
            (Some(120), Some(30), Some(40)),
            "{r:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_request_is_recorded_as_failed_and_a_reused_id_made_unique() {
    let p = start(json!({"turns": [
        {"when": {}, "reply": {"error": {"status": 400, "message": "scripted refusal"}}}]}))
    .await;
    let (s1, _) = p.post(false, Some("same")).await;
    let (s2, _) = p.post(false, Some("same")).await;
    assert_eq!((s1, s2), (400, 400));
    let records = p.finish().await;
    assert_eq!(
        records
            .iter()
            .map(|r| (r.request_id.as_str(), r.failed))
            .collect::<Vec<_>>(),
        [("same", true), ("same#2", true)]
    );
}
