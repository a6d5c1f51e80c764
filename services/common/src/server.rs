//! The one gRPC server builder every babysitter service uses.
//!
//! [`ServerBuilder`] registers services with their file descriptor sets (for reflection v1 and
//! v1alpha) and their health status, adds standard health, and serves them behind the layer
//! stack, outermost first: trace context → concurrency limit → request deadline → bearer auth →
//! error kind on tonic's own answers ([`add_error_kind`]: a request over
//! `max-decoding-message-size` gets the error-kind metadata of every other error).
//! Shutdown is driven by a `CancellationToken`: health drops to `NOT_SERVING` first (readiness
//! before draining), then connections drain with `serve_with_incoming_shutdown`, then the
//! builder's [`TaskTracker`] is awaited so work that handlers spawned (journal appends) finishes.
//!
//! TLS (`[server.tls]`, [`crate::tls`]): with a certificate set, the port accepts only TLS, its
//! certificates are reloaded from disk while serving, and with a client CA every call to a
//! non-public service needs a client certificate (one more layer, before bearer auth).
//!
//! Readiness also follows what the process depends on: a [`Probe`] (the journal's store, the
//! orchestrator's journal) is checked while serving, and while it fails every service reports
//! `NOT_SERVING`, with one log line when the outage starts and one when it ends. Reflection
//! lists only the services this port serves (the descriptor sets hold every babysitter service).
//!
//! Per-service transport settings (message sizes, zstd + gzip) are applied with
//! [`tune_grpc_service!`](crate::tune_grpc_service), the `into_server` helper.

use std::net::SocketAddr;
use std::time::Duration;

use babysitter_proto::client::DEFAULT_MAX_MESSAGE_SIZE;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::server::NamedService;
use tonic::service::RoutesBuilder;
use tonic::transport::server::TcpIncoming;
use tonic_health::ServingStatus;
use tonic_health::server::{HealthReporter, HealthService};

use crate::auth::{AuthConfig, AuthError, AuthLayer, Authenticator};
use crate::config::duration;
use crate::telemetry::TraceContextLayer;
use crate::tls::{ClientCertificateLayer, ServerTls, ServerTlsConfig, TlsError};

mod deadline;
pub mod standby;
mod tonic_errors;

pub use deadline::{Deadline, DeadlineLayer};
pub use tonic_errors::add_error_kind;

#[cfg(test)]
const MIB: usize = 1024 * 1024;

/// `[server]`: listener, transport limits, timeouts and auth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct ServerConfig {
    /// Address to listen on. Each service's config picks its own default port.
    pub listen_addr: SocketAddr,
    /// Largest request message accepted, in bytes (per service, after decompression). A bigger
    /// one is answered `OutOfRange` by tonic (with [`ERROR_KIND_KEY`](crate::error::ERROR_KIND_KEY)
    /// `invalid` added by [`add_error_kind`]). Applied to each service with
    /// [`tune_grpc_service!`](crate::tune_grpc_service).
    pub max_decoding_message_size: usize,
    /// Largest response message sent, in bytes. A bigger one ends the call with `OutOfRange`
    /// (in the trailers, without the error-kind metadata).
    pub max_encoding_message_size: usize,
    /// Most concurrent HTTP/2 streams per connection.
    pub max_concurrent_streams: u32,
    /// Most requests handled at once across all connections (`0`: unlimited); further requests
    /// wait. Streaming RPCs hold a slot only until their stream is returned.
    pub concurrency_limit: usize,
    /// Server-side limit on a request's handler (`"off"`: none); answered `DeadlineExceeded`.
    #[serde(with = "duration::option")]
    pub request_timeout: Option<Duration>,
    /// HTTP/2 ping interval on idle connections (`"off"`: none).
    #[serde(with = "duration::option")]
    pub http2_keepalive_interval: Option<Duration>,
    /// How long to wait for a ping answer before closing the connection.
    #[serde(with = "duration")]
    pub http2_keepalive_timeout: Duration,
    /// TCP keepalive on accepted sockets (`"off"`: none).
    #[serde(with = "duration::option")]
    pub tcp_keepalive: Option<Duration>,
    /// Pause between dropping readiness and draining, so load balancers stop routing first.
    #[serde(with = "duration")]
    pub drain_delay: Duration,
    /// Longest wait for open connections to drain, and then again for spawned tasks.
    #[serde(with = "duration")]
    pub shutdown_timeout: Duration,
    /// Bearer tokens and public services.
    pub auth: AuthConfig,
    /// TLS: certificate, key, client CA (mTLS), reloading. Off unless `cert-file` is set.
    pub tls: ServerTlsConfig,
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            // Above the largest single thing a service accepts (see the constant). The same
            // constant is every client's default, so a default client can take any answer a
            // default server sends.
            max_decoding_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            max_encoding_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            max_concurrent_streams: 1024,
            concurrency_limit: 1024,
            request_timeout: Some(Duration::from_secs(60)),
            // Detects dead peers behind NATs / load balancers that drop idle flows.
            http2_keepalive_interval: Some(Duration::from_secs(30)),
            http2_keepalive_timeout: Duration::from_secs(20),
            tcp_keepalive: Some(Duration::from_secs(60)),
            drain_delay: Duration::ZERO,
            shutdown_timeout: Duration::from_secs(30),
            auth: AuthConfig::default(),
            tls: ServerTlsConfig::default(),
        }
    }
}

impl ServerConfig {
    /// The defaults with another listen address (for a service's own `Default`).
    pub fn with_listen_addr(listen_addr: SocketAddr) -> Self {
        Self {
            listen_addr,
            ..Self::default()
        }
    }
}

/// Applies a [`ServerConfig`]'s per-service transport settings to a generated tonic server
/// (`FooServiceServer::new(handler)`): accept zstd and gzip, compress responses with whichever
/// of them the client accepts (the first of its `grpc-accept-encoding` list; our clients ask for
/// none unless `ClientOptions::accept_compressed` says so), and the decoding / encoding size
/// limits.
///
/// A macro because the generated servers share these methods by name, not by trait.
///
/// ```ignore
/// let svc = babysitter_common::tune_grpc_service!(JournalServiceServer::new(handler), &cfg.server);
/// builder.add_service(svc, babysitter_proto::FILE_DESCRIPTOR_SET)
/// ```
#[macro_export]
macro_rules! tune_grpc_service {
    ($service:expr, $config:expr) => {{
        let config: &$crate::server::ServerConfig = $config;
        $service
            .accept_compressed($crate::__tonic::codec::CompressionEncoding::Zstd)
            .accept_compressed($crate::__tonic::codec::CompressionEncoding::Gzip)
            .send_compressed($crate::__tonic::codec::CompressionEncoding::Zstd)
            .send_compressed($crate::__tonic::codec::CompressionEncoding::Gzip)
            .max_decoding_message_size(config.max_decoding_message_size)
            .max_encoding_message_size(config.max_encoding_message_size)
    }};
}

/// Why the server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServerError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The IO error.
        source: std::io::Error,
    },
    /// The auth configuration is unusable.
    #[error("auth configuration: {0}")]
    Auth(#[from] AuthError),
    /// A registered file descriptor set is invalid.
    #[error("cannot build the reflection service: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The TLS material is unusable.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The transport failed.
    #[error("grpc server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// Spawned tasks were still running when the shutdown timeout ran out.
    #[error("{count} spawned tasks still running after {}", humantime::format_duration(*timeout))]
    TasksStillRunning {
        /// How many.
        count: usize,
        /// The timeout.
        timeout: Duration,
    },
}

/// A check of something the server needs to do its work (its store, its journal): `Err` names
/// what failed. Called every [`Probe::every`] while serving.
#[derive(Clone)]
pub struct Probe {
    /// What is probed, for the logs: `store`, `journal`.
    pub what: &'static str,
    pub every: Duration,
    pub check: std::sync::Arc<
        dyn Fn() -> futures::future::BoxFuture<'static, Result<(), String>> + Send + Sync,
    >,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("what", &self.what)
            .field("every", &self.every)
            .finish_non_exhaustive()
    }
}

/// Builds and runs one gRPC server: services, health, reflection, layers, shutdown.
pub struct ServerBuilder {
    service_name: String,
    config: ServerConfig,
    authenticator: Option<Authenticator>,
    routes: RoutesBuilder,
    descriptor_sets: Vec<&'static [u8]>,
    service_names: Vec<&'static str>,
    health: HealthReporter,
    tracker: TaskTracker,
    probe: Option<Probe>,
}

impl std::fmt::Debug for ServerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerBuilder")
            .field("service_name", &self.service_name)
            .field("services", &self.service_names)
            .field("listen_addr", &self.config.listen_addr)
            .finish_non_exhaustive()
    }
}

impl ServerBuilder {
    /// A builder for the process `service_name` (`journal`, `orchestrator`, …) with `config`.
    pub fn new(service_name: impl Into<String>, config: &ServerConfig) -> Self {
        Self {
            service_name: service_name.into(),
            config: config.clone(),
            authenticator: None,
            routes: RoutesBuilder::default(),
            descriptor_sets: Vec::new(),
            service_names: Vec::new(),
            health: HealthReporter::new(),
            tracker: TaskTracker::new(),
            probe: None,
        }
    }

    /// Readiness follows `probe` while serving (see the module doc).
    pub fn with_probe(mut self, probe: Probe) -> Self {
        self.probe = Some(probe);
        self
    }

    /// Uses `authenticator` instead of the one built from `config.auth` at serve time.
    pub fn with_authenticator(mut self, authenticator: Authenticator) -> Self {
        self.authenticator = Some(authenticator);
        self
    }

    /// Registers a gRPC service, its encoded `FileDescriptorSet` for reflection (empty: not
    /// reflected), and its health entry (`Serving` once the server runs).
    pub fn add_service<S>(mut self, service: S, descriptor_set: &'static [u8]) -> Self
    where
        S: tower::Service<
                http::Request<tonic::body::Body>,
                Response = http::Response<tonic::body::Body>,
                Error = std::convert::Infallible,
            > + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        self.routes.add_service(service);
        self.service_names.push(S::NAME);
        if !descriptor_set.is_empty()
            && !self
                .descriptor_sets
                .iter()
                .any(|d| std::ptr::eq(*d, descriptor_set))
        {
            self.descriptor_sets.push(descriptor_set);
        }
        self
    }

    /// Tracker for work handlers spawn (`tracker.spawn(...)`) that must finish before the
    /// process exits; `serve` waits for it after draining.
    pub fn task_tracker(&self) -> TaskTracker {
        self.tracker.clone()
    }

    /// The health reporter, for services that report their own status.
    pub fn health_reporter(&self) -> HealthReporter {
        self.health.clone()
    }

    /// Binds `listen-addr` and serves until `shutdown` is cancelled.
    pub async fn serve(self, shutdown: CancellationToken) -> Result<(), ServerError> {
        let addr = self.config.listen_addr;
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|source| ServerError::Bind { addr, source })?;
        self.serve_with_listener(listener, shutdown).await
    }

    /// Serves on an already bound listener (tests bind `127.0.0.1:0` and read the port first)
    /// until `shutdown` is cancelled; returns once connections drained and tracked tasks ended.
    pub async fn serve_with_listener(
        self,
        listener: TcpListener,
        shutdown: CancellationToken,
    ) -> Result<(), ServerError> {
        let Self {
            service_name,
            config,
            authenticator,
            mut routes,
            descriptor_sets,
            service_names,
            health,
            tracker,
            probe,
        } = self;
        let local_addr = listener.local_addr().ok();
        let tls = ServerTls::load(&config.tls, crate::tls::Protocol::Grpc)?;

        set_all(&health, &service_names, ServingStatus::NotServing).await;

        let authenticator = match authenticator {
            Some(a) => a,
            None => Authenticator::from_config(&config.auth)?,
        };
        if !authenticator.is_enabled() {
            tracing::warn!(service = %service_name, "no auth tokens configured: authentication is disabled");
        }

        let mut reflection_v1 = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET);
        let mut reflection_v1alpha = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET);
        for set in &descriptor_sets {
            reflection_v1 = reflection_v1.register_encoded_file_descriptor_set(set);
            reflection_v1alpha = reflection_v1alpha.register_encoded_file_descriptor_set(set);
        }
        // Only what this port serves: the sets describe every babysitter service.
        for name in
            service_names
                .iter()
                .copied()
                .chain([HEALTH_SERVICE, REFLECTION_V1, REFLECTION_V1ALPHA])
        {
            reflection_v1 = reflection_v1.with_service_name(name);
            reflection_v1alpha = reflection_v1alpha.with_service_name(name);
        }
        routes
            .add_service(tune_grpc_service!(
                tonic_health::pb::health_server::HealthServer::new(
                    HealthService::from_health_reporter(health.clone())
                ),
                &config
            ))
            .add_service(tune_grpc_service!(reflection_v1.build_v1()?, &config))
            .add_service(tune_grpc_service!(
                reflection_v1alpha.build_v1alpha()?,
                &config
            ));

        let layers =
            tower::ServiceBuilder::new()
                .layer(TraceContextLayer::new())
                .option_layer((config.concurrency_limit > 0).then(|| {
                    tower::limit::GlobalConcurrencyLimitLayer::new(config.concurrency_limit)
                }))
                .layer(DeadlineLayer::new(config.request_timeout))
                .option_layer(
                    tls.as_ref()
                        .filter(|t| t.requires_client_certificates())
                        .map(|_| ClientCertificateLayer::new(&config.auth.public_services)),
                )
                .layer(AuthLayer::new(authenticator))
                // Innermost: sees tonic's own answers (an over-limit request) before anything
                // else looks at the status.
                .map_response(add_error_kind::<tonic::body::Body>)
                .into_inner();

        let drain = {
            let (health, names, token, delay) = (
                health.clone(),
                service_names.clone(),
                shutdown.clone(),
                config.drain_delay,
            );
            async move {
                token.cancelled().await;
                // Readiness drops before anything else, so balancers stop sending new work.
                set_all(&health, &names, ServingStatus::NotServing).await;
                tracing::info!("shutting down: health is not_serving, draining connections");
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
            }
        };

        let router = tonic::transport::Server::builder()
            .http2_keepalive_interval(config.http2_keepalive_interval)
            .http2_keepalive_timeout(Some(config.http2_keepalive_timeout))
            .max_concurrent_streams(config.max_concurrent_streams)
            .layer(layers)
            .add_routes(routes.routes());

        set_all(&health, &service_names, ServingStatus::Serving).await;
        tracing::info!(
            service = %service_name,
            addr = ?local_addr,
            services = ?service_names,
            tls = tls.is_some(),
            mtls = tls.as_ref().is_some_and(ServerTls::requires_client_certificates),
            "grpc server listening"
        );
        if let Some(probe) = probe {
            tokio::spawn(follow_probe(
                probe,
                health.clone(),
                service_names.clone(),
                shutdown.clone(),
            ));
        }

        let serve: futures::future::BoxFuture<'static, Result<(), tonic::transport::Error>> =
            match &tls {
                Some(tls) => {
                    tls.watch(shutdown.clone());
                    Box::pin(router.serve_with_incoming_shutdown(
                        tls.incoming(listener, config.tcp_keepalive),
                        drain,
                    ))
                }
                None => Box::pin(
                    router.serve_with_incoming_shutdown(
                        TcpIncoming::from(listener)
                            .with_nodelay(Some(true))
                            .with_keepalive(config.tcp_keepalive),
                        drain,
                    ),
                ),
            };
        let drain_deadline = async {
            shutdown.cancelled().await;
            tokio::time::sleep(config.drain_delay + config.shutdown_timeout).await;
        };
        let result = tokio::select! {
            result = serve => result,
            () = drain_deadline => {
                tracing::warn!(
                    timeout = %humantime::format_duration(config.shutdown_timeout),
                    "connections still open after the shutdown timeout, closing them"
                );
                Ok(())
            }
        };
        // Whatever ended serving, readiness is gone.
        set_all(&health, &service_names, ServingStatus::NotServing).await;
        result?;

        tracker.close();
        if tokio::time::timeout(config.shutdown_timeout, tracker.wait())
            .await
            .is_err()
        {
            return Err(ServerError::TasksStillRunning {
                count: tracker.len(),
                timeout: config.shutdown_timeout,
            });
        }
        tracing::info!(service = %service_name, "grpc server stopped");
        Ok(())
    }
}

const HEALTH_SERVICE: &str = tonic_health::pb::health_server::SERVICE_NAME;
const REFLECTION_V1: &str = tonic_reflection::pb::v1::server_reflection_server::SERVICE_NAME;
const REFLECTION_V1ALPHA: &str =
    tonic_reflection::pb::v1alpha::server_reflection_server::SERVICE_NAME;

/// Sets health from `probe` until `shutdown` (which owns health from then on).
async fn follow_probe(
    probe: Probe,
    health: HealthReporter,
    names: Vec<&'static str>,
    shutdown: CancellationToken,
) {
    let mut down_since: Option<tokio::time::Instant> = None;
    loop {
        tokio::select! {
            () = tokio::time::sleep(probe.every) => {}
            () = shutdown.cancelled() => return,
        }
        // A store that hangs is as down as one that refuses.
        let limit = probe.every * 2;
        let checked = tokio::select! {
            r = tokio::time::timeout(limit, (probe.check)()) => {
                r.unwrap_or_else(|_| Err(format!("no answer within {limit:?}")))
            }
            () = shutdown.cancelled() => return,
        };
        match (checked, down_since) {
            (Err(error), None) => {
                tracing::error!(what = probe.what, %error, "unreachable: health is not_serving until it is back");
                down_since = Some(tokio::time::Instant::now());
                set_all(&health, &names, ServingStatus::NotServing).await;
            }
            (Ok(()), Some(since)) if !shutdown.is_cancelled() => {
                tracing::info!(what = probe.what, down_for = ?since.elapsed(), "reachable again: health is serving");
                down_since = None;
                set_all(&health, &names, ServingStatus::Serving).await;
            }
            _ => {}
        }
    }
}

/// Sets every registered service and the overall (`""`) entry to `status`.
async fn set_all(health: &HealthReporter, names: &[&'static str], status: ServingStatus) {
    health.set_service_status("", status).await;
    for name in names {
        health.set_service_status(name, status).await;
    }
}

/// Waits for SIGINT or SIGTERM (or for `token` to be cancelled elsewhere), then cancels `token`.
/// Spawn it from `main`.
pub async fn shutdown_signal(token: CancellationToken) {
    let interrupt = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for sigint");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        #[cfg(unix)]
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for sigterm");
                std::future::pending::<()>().await;
            }
        }
        #[cfg(not(unix))]
        std::future::pending::<()>().await;
    };
    tokio::select! {
        () = interrupt => tracing::info!("received sigint"),
        () = terminate => tracing::info!("received sigterm"),
        () = token.cancelled() => return,
    }
    token.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_keys() {
        let cfg: ServerConfig = toml::from_str(
            r#"
            listen-addr = "127.0.0.1:7001"
            request-timeout = "off"
            drain-delay = "2s"
            [auth]
            tokens = [{ token-file = "/run/secrets/worker", role = "worker" }]
            "#,
        )
        .unwrap();
        assert_eq!(cfg.listen_addr.port(), 7001);
        assert_eq!(cfg.request_timeout, None);
        assert_eq!(cfg.drain_delay, Duration::from_secs(2));
        assert_eq!(cfg.max_decoding_message_size, 64 * MIB);
        assert_eq!(cfg.auth.tokens.len(), 1);
        assert_eq!(cfg.auth.public_services.len(), 3);
        assert!(toml::from_str::<ServerConfig>("listen_addr = \"127.0.0.1:1\"").is_err());
        let dumped = toml::to_string(&ServerConfig::default()).unwrap();
        assert_eq!(
            toml::from_str::<ServerConfig>(&dumped).unwrap(),
            ServerConfig::default()
        );
    }

    #[tokio::test]
    async fn shutdown_signal_returns_when_the_token_is_cancelled_elsewhere() {
        let token = CancellationToken::new();
        let waiter = tokio::spawn(shutdown_signal(token.clone()));
        token.cancel();
        waiter.await.unwrap();
        assert!(token.is_cancelled());
    }
}
