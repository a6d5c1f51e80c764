//! A span crosses a real tonic hop: the client's span and the server's `Health.Check` span are
//! exported over OTLP/gRPC to an in-test receiver with the same trace id, the server span a child
//! of the client span. One test per binary: it installs the global subscriber.

use std::collections::HashMap;
use std::time::Duration;

use babysitter_common::EnvMap;
use babysitter_common::server::{ServerBuilder, ServerConfig};
use babysitter_common::telemetry::{TelemetryConfig, TraceContextInterceptor, init_telemetry};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tracing::Instrument as _;

struct Receiver(mpsc::UnboundedSender<ExportTraceServiceRequest>);

#[tonic::async_trait]
impl TraceService for Receiver {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let _ = self.0.send(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_and_server_spans_share_the_trace() {
    // The OTLP receiver, bound before the exporter exists.
    let otlp = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let otlp_addr = otlp.local_addr().unwrap();
    let (tx, mut rx) = mpsc::unbounded_channel();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Receiver(tx)))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(otlp)),
    );

    let env = EnvMap::new().with("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{otlp_addr}"));
    let guard = init_telemetry("babysitter-otel-test", &TelemetryConfig::default(), &env).unwrap();
    assert!(guard.otel_enabled());
    assert!(guard.set_log_filter("info,[[[").is_err());
    guard.set_log_filter("info,h2=warn").unwrap();

    // The service under test: a ServerBuilder server (health only) on 127.0.0.1:0.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let token = CancellationToken::new();
    let server = tokio::spawn(
        ServerBuilder::new("otel-test", &ServerConfig::default())
            .serve_with_listener(listener, token.clone()),
    );

    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::with_interceptor(channel, TraceContextInterceptor);
    let status = health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .instrument(tracing::info_span!("client-call"))
        .await
        .unwrap();
    assert_eq!(status.into_inner().status, 1, "SERVING");

    token.cancel();
    drop(health);
    server.await.unwrap().unwrap();
    guard.force_flush().await.unwrap();

    // Collect exported spans until both are in.
    let mut spans: HashMap<String, Span> = HashMap::new();
    let mut service_names = Vec::new();
    while !(spans.contains_key("client-call") && spans.contains_key("Health.Check")) {
        let request = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("spans exported within 10s")
            .expect("receiver open");
        for resource_spans in request.resource_spans {
            if let Some(resource) = &resource_spans.resource {
                for attr in &resource.attributes {
                    if attr.key == "service.name"
                        && let Some(Value::StringValue(name)) =
                            attr.value.as_ref().and_then(|v| v.value.as_ref())
                    {
                        service_names.push(name.clone());
                    }
                }
            }
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    spans.insert(span.name.clone(), span);
                }
            }
        }
    }
    let client = &spans["client-call"];
    let server = &spans["Health.Check"];
    assert_eq!(client.trace_id.len(), 16);
    assert_eq!(server.trace_id, client.trace_id, "one trace across the hop");
    assert_eq!(
        server.parent_span_id, client.span_id,
        "server span is the client span's child"
    );
    assert_ne!(server.span_id, client.span_id);
    assert_eq!(server.kind, 2, "SPAN_KIND_SERVER");
    assert!(
        service_names.iter().all(|n| n == "babysitter-otel-test"),
        "{service_names:?}"
    );
    assert!(!service_names.is_empty());

    guard.shutdown().await.unwrap();
}
