//! The gRPC control API (`TransportProxyService`) over the network: routes listed, added,
//! replaced and deleted at runtime with compare-and-set revisions and taking effect on the HTTP
//! front at once; per-route stats; admin token required.

#[path = "support/clients.rs"]
mod clients;
#[path = "support/fixture.rs"]
mod fixture;

use babysitter_common::auth::{Role, Secret as AuthSecret, TokenEntry};
use babysitter_common::client::{AuthedChannel, connect_lazy};
use babysitter_common::env::EnvMap;
use babysitter_common::server::{ServerBuilder, ServerConfig};
use babysitter_proto::transport_proxy::v1 as pb;
use babysitter_transport_proxy::config::{ProxyConfig, Route};
use babysitter_transport_proxy::grpc::TransportProxyGrpcServer;
use babysitter_transport_proxy::protocol::Protocol;
use clients::{first_turn, path};
use fixture::{Fixture, upstream_for};
use pb::transport_proxy_service_client::TransportProxyServiceClient;
use serde_json::json;
use tokio_util::sync::CancellationToken;

type Client = TransportProxyServiceClient<AuthedChannel>;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_change_at_runtime_and_stats_are_reported() {
    let s = fixture::script(
        json!({"turns": [{"when": {}, "reply": {"text": "ok", "usage": {"input": 3, "output": 2}}}]}),
    );
    let fx = Fixture::start(Some(s), |b| {
        let mut r = Route::new("chat-only", upstream_for(Protocol::Anthropic, b));
        r.front = Some(Protocol::OpenAiChat);
        ProxyConfig::with_routes(vec![r])
    })
    .await;
    let mut cfg = ServerConfig::with_listen_addr(([127, 0, 0, 1], 0).into());
    cfg.auth.tokens = vec![TokenEntry {
        token: Some(AuthSecret::new("admin-tok")),
        token_file: None,
        role: Role::Admin,
        name: None,
        namespaces: Vec::new(),
    }];
    let env = EnvMap::new().with("GEMINI_KEY", "gk-123");
    let server = ServerBuilder::new("transport-proxy", &cfg).add_service(
        TransportProxyGrpcServer::new(fx.state.clone(), env).into_service(),
        babysitter_proto::FILE_DESCRIPTOR_SET,
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let url = format!(
        "http://{}",
        listener.local_addr().unwrap_or_else(|e| panic!("{e}"))
    );
    let stop = CancellationToken::new();
    let task = tokio::spawn(server.serve_with_listener(listener, stop.clone()));
    let client = |tok: Option<&str>| -> Client {
        TransportProxyServiceClient::new(
            connect_lazy(&url, tok.map(AuthSecret::new).as_ref()).unwrap_or_else(|e| panic!("{e}")),
        )
    };
    let mut admin = client(Some("admin-tok"));

    let denied = client(None).list_routes(pb::ListRoutesRequest {}).await;
    assert_eq!(
        denied.err().map(|s| s.code()),
        Some(tonic::Code::Unauthenticated)
    );

    let listed = admin
        .list_routes(pb::ListRoutesRequest {})
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_inner();
    assert_eq!(listed.routes.len(), 1);
    assert_eq!(listed.routes[0].name, "chat-only");
    let rev = listed.revision;

    // Anthropic clients have no route yet.
    let (status, _, _) = fx
        .post(
            path(Protocol::Anthropic, false),
            &first_turn(Protocol::Anthropic, false),
            &[],
        )
        .await;
    assert_eq!(status, 404);

    let new_route = pb::Route {
        name: "claude-to-gemini".into(),
        r#match: Some(pb::RouteMatch {
            inbound_protocol: pb::Protocol::AnthropicMessages as i32,
            models: vec!["claude-*".into()],
        }),
        upstream: Some(pb::Upstream {
            provider: pb::ProviderKind::Gemini as i32,
            base_url: format!("{}/v1beta", fx.scripted.url()),
            model: "gem-up".into(),
            api_key_env: "GEMINI_KEY".into(),
            ..pb::Upstream::default()
        }),
        policy: None,
        priority: 5,
    };
    let up = admin
        .upsert_route(pb::UpsertRouteRequest {
            route: Some(new_route.clone()),
            expected_revision: rev,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_inner();
    assert!(up.created);
    assert_eq!(up.revision, rev + 1);
    let stale = admin
        .upsert_route(pb::UpsertRouteRequest {
            route: Some(new_route),
            expected_revision: rev,
        })
        .await;
    assert_eq!(
        stale.err().map(|s| s.code()),
        Some(tonic::Code::FailedPrecondition)
    );

    let (status, _, body) = fx
        .post(
            path(Protocol::Anthropic, true),
            &first_turn(Protocol::Anthropic, true),
            &[],
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let logged = fx.last_upstream();
    assert!(
        logged
            .path
            .ends_with("/models/gem-up:streamGenerateContent"),
        "{}",
        logged.path
    );
    assert_eq!(
        logged.auth_header.as_deref(),
        Some("x-goog-api-key"),
        "key read from the injected env"
    );

    let stats = admin
        .get_route_stats(pb::GetRouteStatsRequest {
            route_names: vec!["claude-to-gemini".into()],
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_inner();
    let st = &stats.routes[0];
    assert_eq!((st.requests, st.streaming_requests, st.errors), (1, 1, 0));
    assert_eq!((st.input_tokens, st.output_tokens), (3, 2));
    assert_eq!(
        st.first_byte_latency.as_ref().map(|h| h.count),
        Some(1),
        "streaming request"
    );
    assert_eq!(st.latency.as_ref().map(|h| h.count), Some(1));

    let del = admin
        .delete_route(pb::DeleteRouteRequest {
            name: "claude-to-gemini".into(),
            expected_revision: 0,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_inner();
    assert_eq!(del.revision, rev + 2);
    let (status, _, _) = fx
        .post(
            path(Protocol::Anthropic, false),
            &first_turn(Protocol::Anthropic, false),
            &[],
        )
        .await;
    assert_eq!(status, 404, "route gone");
    let missing = admin
        .delete_route(pb::DeleteRouteRequest {
            name: "nope".into(),
            expected_revision: 0,
        })
        .await;
    assert_eq!(missing.err().map(|s| s.code()), Some(tonic::Code::NotFound));

    stop.cancel();
    let _ = task.await;
    fx.stop().await;
}
