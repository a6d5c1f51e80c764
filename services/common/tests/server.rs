//! The server builder through a real tonic server on 127.0.0.1:0: health, reflection, auth,
//! error metadata over the wire, compression, and shutdown ordering.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use babysitter_common::auth::{AuthConfig, Role, Secret, TokenEntry, caller_role};
use babysitter_common::error::{self, ErrorKind};
use babysitter_common::server::{Probe, ServerBuilder, ServerConfig, ServerError};
use prost::Message as _;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::codec::CompressionEncoding;
use tonic::server::NamedService;
use tonic::transport::Channel;
use tonic::{Code, Request, Response, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

const ECHO: &str = "babysitter.test.v1.EchoService";
const WHOAMI: &str = "/babysitter.test.v1.EchoService/Whoami";
const FAIL: &str = "/babysitter.test.v1.EchoService/Fail";

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A tiny hand-written gRPC service: `Whoami` answers the caller's role, `Fail` a conflict.
#[derive(Clone)]
struct Echo;

impl NamedService for Echo {
    const NAME: &'static str = ECHO;
}

struct Whoami;

impl tonic::server::UnaryService<String> for Whoami {
    type Response = String;
    type Future = BoxFuture<Result<Response<String>, Status>>;

    fn call(&mut self, request: Request<String>) -> Self::Future {
        let role = caller_role(&request)
            .map(|r| r.to_string())
            .unwrap_or_else(|| "none".into());
        Box::pin(async move { Ok(Response::new(role)) })
    }
}

struct Fail;

impl tonic::server::UnaryService<String> for Fail {
    type Response = String;
    type Future = BoxFuture<Result<Response<String>, Status>>;

    fn call(&mut self, _request: Request<String>) -> Self::Future {
        Box::pin(async move {
            Err(error::status(
                ErrorKind::Conflict,
                "expected sequence 7, head is 9",
                true,
                &[("babysitter-current-head", "9".to_owned())],
            ))
        })
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for Echo {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(async move {
            let mut grpc =
                tonic::server::Grpc::new(tonic_prost::ProstCodec::<String, String>::default());
            Ok(match req.uri().path() {
                WHOAMI => grpc.unary(Whoami, req).await,
                FAIL => grpc.unary(Fail, req).await,
                _ => Status::unimplemented("no such method").into_http(),
            })
        })
    }
}

/// Encoded descriptor set of the echo service, for reflection.
fn echo_descriptor_set() -> &'static [u8] {
    use prost_types::field_descriptor_proto::{Label, Type};
    use prost_types::{
        DescriptorProto, FieldDescriptorProto, FileDescriptorProto, FileDescriptorSet,
        MethodDescriptorProto, ServiceDescriptorProto,
    };
    let text = ".babysitter.test.v1.Text".to_owned();
    let method = |name: &str| MethodDescriptorProto {
        name: Some(name.into()),
        input_type: Some(text.clone()),
        output_type: Some(text.clone()),
        ..Default::default()
    };
    let set = FileDescriptorSet {
        file: vec![FileDescriptorProto {
            name: Some("babysitter/test/v1/echo.proto".into()),
            package: Some("babysitter.test.v1".into()),
            syntax: Some("proto3".into()),
            message_type: vec![DescriptorProto {
                name: Some("Text".into()),
                field: vec![FieldDescriptorProto {
                    name: Some("value".into()),
                    number: Some(1),
                    label: Some(Label::Optional as i32),
                    r#type: Some(Type::String as i32),
                    json_name: Some("value".into()),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            service: vec![ServiceDescriptorProto {
                name: Some("EchoService".into()),
                method: vec![method("Whoami"), method("Fail")],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    Box::leak(set.encode_to_vec().into_boxed_slice())
}

struct Running {
    addr: std::net::SocketAddr,
    token: CancellationToken,
    handle: JoinHandle<Result<(), ServerError>>,
}

async fn start(config: ServerConfig) -> Running {
    start_builder(ServerBuilder::new("test", &config).add_service(Echo, echo_descriptor_set()))
        .await
}

async fn start_builder(builder: ServerBuilder) -> Running {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let token = CancellationToken::new();
    let handle = tokio::spawn(builder.serve_with_listener(listener, token.clone()));
    Running {
        addr,
        token,
        handle,
    }
}

async fn channel(addr: std::net::SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

async fn unary(
    channel: Channel,
    path: &'static str,
    token: Option<&str>,
) -> Result<String, Status> {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(e.to_string()))?;
    let mut request = Request::new("hi".to_owned());
    if let Some(token) = token {
        request
            .metadata_mut()
            .insert("authorization", format!("Bearer {token}").parse().unwrap());
    }
    let codec = tonic_prost::ProstCodec::<String, String>::default();
    let path = http::uri::PathAndQuery::from_static(path);
    grpc.unary(request, path, codec)
        .await
        .map(Response::into_inner)
}

fn health_request(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_is_serving_then_not_serving_before_drain() {
    let server = start(ServerConfig::default()).await;
    let mut health = HealthClient::new(channel(server.addr).await);

    let overall = health.check(health_request("")).await.unwrap().into_inner();
    assert_eq!(overall.status(), ServingStatus::Serving);
    let echo = health
        .check(health_request(ECHO))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(echo.status(), ServingStatus::Serving);
    let unknown = health
        .check(health_request("nope.Service"))
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), Code::NotFound);

    let mut watch = health
        .watch(health_request(ECHO))
        .await
        .unwrap()
        .into_inner();
    let first = watch.message().await.unwrap().unwrap();
    assert_eq!(first.status(), ServingStatus::Serving);

    server.token.cancel();
    // The open watch stream keeps the connection (and so the drain) alive: the status change
    // must reach it before the server finishes draining.
    let second = tokio::time::timeout(Duration::from_secs(10), watch.message())
        .await
        .expect("readiness dropped while the connection is still open")
        .unwrap()
        .unwrap();
    assert_eq!(second.status(), ServingStatus::NotServing);
    assert!(
        !server.handle.is_finished(),
        "still draining while the stream is open"
    );

    drop(watch);
    drop(health);
    server.handle.await.unwrap().unwrap();
    let refused = Channel::from_shared(format!("http://{}", server.addr))
        .unwrap()
        .connect()
        .await;
    assert!(refused.is_err(), "listener closed after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_registered_services() {
    let server = start(ServerConfig::default()).await;
    let mut reflection = ServerReflectionClient::new(channel(server.addr).await);
    let requests = [
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        },
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol(ECHO.to_owned())),
        },
    ];
    let mut v1_responses = reflection
        .server_reflection_info(tokio_stream::iter(requests))
        .await
        .unwrap()
        .into_inner();

    let Some(MessageResponse::ListServicesResponse(list)) = v1_responses
        .message()
        .await
        .unwrap()
        .unwrap()
        .message_response
    else {
        panic!("expected a list of services");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for expected in [
        ECHO,
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} missing from {names:?}"
        );
    }

    let Some(MessageResponse::FileDescriptorResponse(files)) = v1_responses
        .message()
        .await
        .unwrap()
        .unwrap()
        .message_response
    else {
        panic!("expected a file descriptor");
    };
    let file = prost_types::FileDescriptorProto::decode(files.file_descriptor_proto[0].as_slice())
        .unwrap();
    assert_eq!(file.name(), "babysitter/test/v1/echo.proto");

    // v1alpha answers too (older grpcurl / tooling).
    let mut alpha =
        tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient::new(
            channel(server.addr).await,
        );
    let request = tonic_reflection::pb::v1alpha::ServerReflectionRequest {
        host: String::new(),
        message_request: Some(
            tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest::ListServices(
                String::new(),
            ),
        ),
    };
    let mut responses = alpha
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let response = responses.message().await.unwrap().unwrap();
    assert!(format!("{response:?}").contains(ECHO), "{response:?}");

    server.token.cancel();
    drop((reflection, v1_responses, alpha, responses));
    server.handle.await.unwrap().unwrap();
}

/// The service names reflection lists.
async fn listed(addr: std::net::SocketAddr) -> Vec<String> {
    let mut reflection = ServerReflectionClient::new(channel(addr).await);
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut responses = reflection
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    match responses.message().await.unwrap().unwrap().message_response {
        Some(MessageResponse::ListServicesResponse(list)) => {
            list.service.into_iter().map(|s| s.name).collect()
        }
        other => panic!("expected a list of services, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reflection_lists_only_the_services_this_port_serves() {
    // The descriptor set every babysitter service registers describes all four services.
    let server = start_builder(
        ServerBuilder::new("test", &ServerConfig::default())
            .add_service(Echo, babysitter_proto::FILE_DESCRIPTOR_SET),
    )
    .await;
    let mut names = listed(server.addr).await;
    names.sort();
    assert_eq!(
        names,
        [
            ECHO,
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
        ],
        "a service this port does not serve is listed"
    );
    server.token.cancel();
    server.handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_the_probe_of_what_the_server_depends_on() {
    let up = Arc::new(AtomicBool::new(true));
    let probed = up.clone();
    let probe = Probe {
        what: "store",
        every: Duration::from_millis(20),
        check: Arc::new(move || {
            let up = probed.load(Ordering::SeqCst);
            Box::pin(async move {
                if up {
                    Ok(())
                } else {
                    Err("connection refused".to_owned())
                }
            })
        }),
    };
    let server = start_builder(
        ServerBuilder::new("test", &ServerConfig::default())
            .add_service(Echo, echo_descriptor_set())
            .with_probe(probe),
    )
    .await;
    let mut health = HealthClient::new(channel(server.addr).await);
    let mut watch = health.watch(health_request("")).await.unwrap().into_inner();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(10), watch.message())
            .await
            .expect("a health change")
            .unwrap()
            .unwrap()
            .status()
    };
    assert_eq!(next().await, ServingStatus::Serving);
    up.store(false, Ordering::SeqCst);
    assert_eq!(next().await, ServingStatus::NotServing, "the store is down");
    let echo = health
        .check(health_request(ECHO))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(echo.status(), ServingStatus::NotServing);
    up.store(true, Ordering::SeqCst);
    assert_eq!(next().await, ServingStatus::Serving, "the store is back");
    server.token.cancel();
    assert_eq!(next().await, ServingStatus::NotServing, "shutting down");
    drop((health, watch));
    server.handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_rejects_missing_and_wrong_tokens_and_records_the_role() {
    let entry = |token: &str, role| TokenEntry {
        token: Some(Secret::new(token)),
        token_file: None,
        role,
        name: None,
        namespaces: Vec::new(),
    };
    let config = ServerConfig {
        auth: AuthConfig {
            tokens: vec![
                entry("worker-token-123", Role::Worker),
                entry("client-token-456", Role::Client),
            ],
            ..AuthConfig::default()
        },
        ..ServerConfig::default()
    };
    let server = start(config).await;
    let ch = channel(server.addr).await;

    let missing = unary(ch.clone(), WHOAMI, None).await.unwrap_err();
    assert_eq!(missing.code(), Code::Unauthenticated);
    assert_eq!(missing.message(), "missing bearer token");

    let wrong = unary(ch.clone(), WHOAMI, Some("guessed-token-789"))
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), Code::Unauthenticated);
    assert!(
        !wrong.message().contains("guessed-token-789"),
        "{}",
        wrong.message()
    );
    assert_eq!(error::error_kind(&wrong), Some(ErrorKind::Unauthenticated));

    assert_eq!(
        unary(ch.clone(), WHOAMI, Some("worker-token-123"))
            .await
            .unwrap(),
        "worker"
    );
    assert_eq!(
        unary(ch.clone(), WHOAMI, Some("client-token-456"))
            .await
            .unwrap(),
        "client"
    );

    // Health stays reachable without a token.
    let mut health = HealthClient::new(ch.clone());
    assert_eq!(
        health
            .check(health_request(""))
            .await
            .unwrap()
            .into_inner()
            .status(),
        ServingStatus::Serving
    );

    server.token.cancel();
    drop((ch, health));
    server.handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tokens_every_caller_is_admin() {
    let server = start(ServerConfig::default()).await;
    let ch = channel(server.addr).await;
    assert_eq!(unary(ch.clone(), WHOAMI, None).await.unwrap(), "admin");
    server.token.cancel();
    drop(ch);
    server.handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_kind_and_retry_hint_cross_the_wire() {
    let server = start(ServerConfig::default()).await;
    let ch = channel(server.addr).await;
    let status = unary(ch.clone(), FAIL, None).await.unwrap_err();
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(status.message(), "expected sequence 7, head is 9");
    assert_eq!(error::error_kind(&status), Some(ErrorKind::Conflict));
    assert!(error::retryable(&status));
    assert_eq!(
        status.metadata().get("babysitter-current-head").unwrap(),
        "9"
    );
    server.token.cancel();
    drop(ch);
    server.handle.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zstd_and_gzip_are_accepted() {
    let server = start(ServerConfig::default()).await;
    for encoding in [CompressionEncoding::Zstd, CompressionEncoding::Gzip] {
        let mut health = HealthClient::new(channel(server.addr).await)
            .send_compressed(encoding)
            .accept_compressed(encoding);
        let response = health.check(health_request("")).await.unwrap().into_inner();
        assert_eq!(response.status(), ServingStatus::Serving, "{encoding:?}");
    }
    server.token.cancel();
    server.handle.await.unwrap().unwrap();
}

/// Paused time: once every task is idle, the clock jumps to the next timer, so "serve is still
/// waiting" is observed deterministically, with no real sleep.
#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_tracked_tasks() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let token = CancellationToken::new();
    let builder = ServerBuilder::new("test", &ServerConfig::default());
    let tracker = builder.task_tracker();
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    tracker.spawn(async move {
        let _ = released.await;
        flag.store(true, Ordering::SeqCst);
    });
    let mut handle = tokio::spawn(builder.serve_with_listener(listener, token.clone()));

    token.cancel();
    let waited = tokio::time::timeout(Duration::from_secs(10), &mut handle).await;
    assert!(
        waited.is_err(),
        "serve returned while a tracked task was still running"
    );
    assert!(!finished.load(Ordering::SeqCst));

    release.send(()).unwrap();
    handle.await.unwrap().unwrap();
    assert!(
        finished.load(Ordering::SeqCst),
        "the tracked task finished before serve returned"
    );
}

#[tokio::test(start_paused = true)]
async fn stuck_tasks_end_shutdown_with_an_error() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let token = CancellationToken::new();
    let config = ServerConfig {
        shutdown_timeout: Duration::from_secs(3),
        ..ServerConfig::default()
    };
    let builder = ServerBuilder::new("test", &config);
    builder.task_tracker().spawn(std::future::pending::<()>());
    let handle = tokio::spawn(builder.serve_with_listener(listener, token.clone()));
    token.cancel();
    let err = handle.await.unwrap().unwrap_err();
    assert!(
        matches!(err, ServerError::TasksStillRunning { count: 1, .. }),
        "{err:?}"
    );
}
