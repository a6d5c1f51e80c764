//! The gRPC control API (`TransportProxyService`) over the network: routes listed, added,
//! replaced and deleted at runtime with compare-and-set revisions and taking effect on the HTTP
//! front at once; per-route stats; admin token required. With `routes-state-file` the changes
//! survive a restart (revision included), and a change that cannot be written is refused.

#[path = "support/clients.rs"]
mod clients;
#[path = "support/fixture.rs"]
mod fixture;

use babysitter_common::auth::{Role, Secret as AuthSecret, TokenEntry};
use babysitter_common::client::{AuthedChannel, connect_lazy};
use babysitter_common::env::EnvMap;
use babysitter_common::server::{ServerBuilder, ServerConfig};
use babysitter_proto::transport_proxy::v1 as pb;
use babysitter_transport_proxy::config::{ConfigFile, ProxyConfig, Route};
use babysitter_transport_proxy::forward::Proxy;
use babysitter_transport_proxy::grpc::TransportProxyGrpcServer;
use babysitter_transport_proxy::protocol::Protocol;
use clients::{first_turn, path};
use fixture::{Fixture, upstream_for};
use pb::transport_proxy_service_client::TransportProxyServiceClient;
use serde_json::json;
use tokio_util::sync::CancellationToken;

type Client = TransportProxyServiceClient<AuthedChannel>;

/// The control API over `proxy` on an ephemeral port, with one admin token `admin-tok`.
async fn serve_control(
    proxy: std::sync::Arc<Proxy>,
    env: EnvMap,
) -> (
    String,
    CancellationToken,
    tokio::task::JoinHandle<Result<(), babysitter_common::server::ServerError>>,
) {
    let mut cfg = ServerConfig::with_listen_addr(([127, 0, 0, 1], 0).into());
    cfg.auth.tokens = vec![TokenEntry {
        token: Some(AuthSecret::new("admin-tok")),
        token_file: None,
        role: Role::Admin,
        name: None,
        namespaces: Vec::new(),
    }];
    let server = ServerBuilder::new("transport-proxy", &cfg).add_service(
        TransportProxyGrpcServer::new(proxy, env).into_service(),
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
    (url, stop, task)
}

/// Anthropic `claude-*` requests to a Gemini upstream at `base_url` (model `gem-up`, key from
/// `GEMINI_KEY`), priority 5.
fn gemini_route(name: &str, base_url: String, policy: Option<pb::RoutePolicy>) -> pb::Route {
    pb::Route {
        name: name.into(),
        r#match: Some(pb::RouteMatch {
            inbound_protocol: pb::Protocol::AnthropicMessages as i32,
            models: vec!["claude-*".into()],
        }),
        upstream: Some(pb::Upstream {
            provider: pb::ProviderKind::Gemini as i32,
            base_url,
            model: "gem-up".into(),
            api_key_env: "GEMINI_KEY".into(),
            ..pb::Upstream::default()
        }),
        policy,
        priority: 5,
    }
}

fn client(url: &str, tok: Option<&str>) -> Client {
    TransportProxyServiceClient::new(
        connect_lazy(url, tok.map(AuthSecret::new).as_ref()).unwrap_or_else(|e| panic!("{e}")),
    )
}

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
    let env = EnvMap::new().with("GEMINI_KEY", "gk-123");
    let (url, stop, task) = serve_control(fx.state.clone(), env).await;
    let client = |tok: Option<&str>| client(&url, tok);
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

    let new_route = gemini_route(
        "claude-to-gemini",
        format!("{}/v1beta", fx.scripted.url()),
        None,
    );
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

/// A proxy as the binary builds it from `toml` (keys from `env`).
fn proxy_from(toml: &str, env: &EnvMap) -> std::sync::Arc<Proxy> {
    let config = ConfigFile::from_toml(toml)
        .and_then(|f| f.resolve(&|k| env.get(k).map(str::to_owned)))
        .unwrap_or_else(|e| panic!("{e}"));
    Proxy::new(config).unwrap_or_else(|e| panic!("{e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_changes_survive_a_restart_with_a_routes_state_file() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let state = dir.path().join("routes.json");
    let toml = format!(
        "routes-state-file = {:?}\n[[routes]]\nname = \"from-config\"\n[routes.upstream]\nprovider = \"openai\"\nbase-url = \"http://127.0.0.1:9/v1\"\n",
        state.to_string_lossy()
    );
    let env = EnvMap::new().with("GEMINI_KEY", "gk-123");
    let proxy = proxy_from(&toml, &env);
    let (url, stop, task) = serve_control(proxy.clone(), env.clone()).await;
    let mut admin = client(&url, Some("admin-tok"));
    let connect_timeout = prost_types::Duration {
        seconds: 1,
        nanos: 500_000_000,
    };
    let mut route = gemini_route(
        "added",
        "http://127.0.0.1:9/v1beta".into(),
        Some(pb::RoutePolicy {
            connect_timeout: Some(connect_timeout),
            ..pb::RoutePolicy::default()
        }),
    );
    route.priority = 3;
    let up = admin
        .upsert_route(pb::UpsertRouteRequest {
            route: Some(route.clone()),
            expected_revision: 1,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"))
        .into_inner();
    assert_eq!(up.revision, 2);
    let saved = std::fs::read_to_string(&state).unwrap_or_default();
    assert!(
        saved.contains("\"added\"") && !saved.contains("gk-123"),
        "{saved}"
    );
    let before = proxy.list_routes();

    // A restart: same config, the state file wins over [[routes]], revision continues.
    let restarted = proxy_from(&toml, &env);
    let after = restarted.list_routes();
    assert_eq!(after.1, 2);
    assert_eq!(format!("{:?}", after.0), format!("{:?}", before.0));
    assert_eq!(after.0[1].upstream.api_key, before.0[1].upstream.api_key);

    // A change that cannot be made durable is refused and not applied.
    std::fs::remove_dir_all(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    route.priority = 9;
    let refused = admin
        .upsert_route(pb::UpsertRouteRequest {
            route: Some(route),
            expected_revision: 0,
        })
        .await;
    assert_eq!(
        refused.err().map(|s| s.code()),
        Some(tonic::Code::Unavailable)
    );
    assert_eq!(proxy.list_routes().1, 2, "not installed");
    assert_eq!(proxy.list_routes().0[1].priority, 3);
    stop.cancel();
    let _ = task.await;
}
