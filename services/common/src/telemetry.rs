//! Logging, tracing and OpenTelemetry export, set up once per process by [`init_telemetry`].
//!
//! * An `EnvFilter` from `log-filter` (reloadable through [`TelemetryGuard::set_log_filter`]).
//! * A fmt layer on stderr, JSON when `log-format = "json"` (Kubernetes).
//! * An OpenTelemetry layer exporting spans over OTLP/gRPC, only when
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` is set in the environment map and `OTEL_SDK_DISABLED` is not
//!   `true`. `OTEL_SERVICE_NAME` overrides the service name in the exported resource.
//! * The Prometheus endpoint ([`crate::metrics`]) on `metrics-listen-addr`, when set.
//! * The W3C TraceContext propagator, installed globally, used by the helpers in [`propagation`]
//!   to carry `traceparent` over every gRPC hop.
//!
//! The returned [`TelemetryGuard`] flushes and shuts the exporter down: call
//! [`TelemetryGuard::shutdown`] at the end of `main`; dropping it does the same on a helper
//! thread, waiting at most [`SHUTDOWN_TIMEOUT`].

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use serde::{Deserialize, Serialize};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _, Registry, reload};

use crate::env::EnvMap;

pub mod propagation;

pub use propagation::{
    HeaderCarrier, TRACEPARENT_ENV, TRACESTATE_ENV, TraceContextInterceptor, TraceContextLayer,
    TraceContextService, W3cContext, extract_trace_context, inject_trace_context, link_to,
    set_remote_parent, span_name_for_path,
};

/// Environment variable whose presence switches the OTLP exporter on.
pub const OTEL_ENDPOINT_VAR: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// Environment variable that, when `true`, keeps the exporter off.
pub const OTEL_DISABLED_VAR: &str = "OTEL_SDK_DISABLED";
/// Environment variable overriding the exported `service.name`.
pub const OTEL_SERVICE_NAME_VAR: &str = "OTEL_SERVICE_NAME";
/// The longest a dropped guard waits for the exporter to flush.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// `[telemetry]`: log filter and format. OTLP export is configured by the standard `OTEL_*`
/// environment variables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct TelemetryConfig {
    /// `EnvFilter` directives, e.g. `info` or `info,babysitter_journal=debug`.
    pub log_filter: String,
    /// `text` or `json`.
    pub log_format: LogFormat,
    /// Where Prometheus scrapes `GET /metrics` (no auth: bind it where only the scraper
    /// reaches; `127.0.0.1:0` picks a port and prints it). Unset: not served.
    pub metrics_listen_addr: Option<std::net::SocketAddr>,
    /// TLS for `/metrics` (same keys as `[server.tls]`; with `client-ca-file` the scraper
    /// must present a certificate of that CA). Off unless `cert-file` is set.
    pub metrics_tls: crate::tls::ServerTlsConfig,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            log_filter: "info".to_owned(),
            log_format: LogFormat::Text,
            metrics_listen_addr: None,
            metrics_tls: crate::tls::ServerTlsConfig::default(),
        }
    }
}

/// Why telemetry could not be set up or changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// `log-filter` does not parse.
    #[error("invalid log filter {filter:?}: {message}")]
    InvalidFilter {
        /// The directives.
        filter: String,
        /// The parse error.
        message: String,
    },
    /// The OTLP exporter could not be built.
    #[error("cannot build the otlp exporter for {endpoint}: {message}")]
    Exporter {
        /// The endpoint from `OTEL_EXPORTER_OTLP_ENDPOINT`.
        endpoint: String,
        /// The build error.
        message: String,
    },
    /// OTLP export was requested outside a tokio runtime (the gRPC exporter needs one).
    #[error("otlp export needs a tokio runtime: call init_telemetry from inside one")]
    NoRuntime,
    /// A global subscriber was already installed.
    #[error("a global tracing subscriber is already installed: {0}")]
    AlreadyInitialized(String),
    /// The filter could not be swapped.
    #[error("cannot reload the log filter: {0}")]
    Reload(String),
    /// The metrics endpoint could not bind its address.
    #[error(transparent)]
    Metrics(#[from] crate::metrics::EndpointError),
    /// Flushing or shutting the exporter down failed.
    #[error("telemetry shutdown failed: {0}")]
    Shutdown(String),
}

/// Keeps the exporter alive; flushes and shuts it down at the end.
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
    filter: reload::Handle<EnvFilter, Registry>,
    /// The Prometheus endpoint, when `metrics-listen-addr` is set (stops with the guard).
    metrics: Option<crate::metrics::Endpoint>,
}

impl std::fmt::Debug for TelemetryGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelemetryGuard")
            .field("otel_enabled", &self.otel_enabled())
            .finish()
    }
}

/// Installs the global subscriber and propagator for `service_name`. Call once, early in `main`,
/// inside the tokio runtime.
pub fn init_telemetry(
    service_name: &str,
    config: &TelemetryConfig,
    env: &EnvMap,
) -> Result<TelemetryGuard, TelemetryError> {
    let filter = parse_filter(&config.log_filter)?;
    let (filter, filter_handle) = reload::Layer::new(filter);

    let fmt = match config.log_format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .boxed(),
    };

    let provider = otlp_provider(service_name, env)?;
    let otel = provider
        .as_ref()
        .map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer(service_name.to_owned())));

    opentelemetry::global::set_text_map_propagator(TraceContextPropagator::new());
    if let Some(provider) = &provider {
        opentelemetry::global::set_tracer_provider(provider.clone());
    }

    tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .with(otel)
        .try_init()
        .map_err(|e| TelemetryError::AlreadyInitialized(e.to_string()))?;

    if let Some(endpoint) = provider.as_ref().and(env.get_non_empty(OTEL_ENDPOINT_VAR)) {
        tracing::info!(%endpoint, "exporting traces over otlp/grpc");
    }
    let metrics = config
        .metrics_listen_addr
        .map(|addr| crate::metrics::Endpoint::start_with_tls(addr, &config.metrics_tls))
        .transpose()?;
    Ok(TelemetryGuard {
        provider,
        filter: filter_handle,
        metrics,
    })
}

/// The level a babysitter CLI process logs at: babysitter's `BABYSITTER_LOG_LEVEL` (`debug`,
/// `info`, `warn`, `error`, `silent`, any case); unset, empty or unknown → `warn` (`health`
/// reports an unknown value).
pub fn command_log_level(level: Option<&str>) -> tracing_subscriber::filter::LevelFilter {
    use tracing_subscriber::filter::LevelFilter;
    match level.map(|l| l.trim().to_ascii_lowercase()).as_deref() {
        Some("debug") => LevelFilter::DEBUG,
        Some("info") => LevelFilter::INFO,
        Some("error") => LevelFilter::ERROR,
        Some("silent") => LevelFilter::OFF,
        _ => LevelFilter::WARN,
    }
}

/// Logging for the `babysitter` CLI's commands, which are not services: what the libraries log
/// at `level` and above — a snapshot that could not be used, a stale `run.lock` taken over, a
/// process's `console.warn` / `console.error` — as plain lines on stderr (stdout carries the
/// commands' JSON). No exporter, no filter parsing: it runs on every CLI call. Nothing is
/// installed at `OFF`; a second call is a no-op.
pub fn init_command_logging(level: tracing_subscriber::filter::LevelFilter) {
    use std::io::IsTerminal as _;
    init_command_lines(level, std::io::stderr, std::io::stderr().is_terminal());
}

/// [`init_command_logging`]'s lines, written through `writer` (the warm server's sends each
/// command's to its client), without colours.
pub fn init_command_logging_to<W>(level: tracing_subscriber::filter::LevelFilter, writer: W)
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    init_command_lines(level, writer, false);
}

fn init_command_lines<W>(level: tracing_subscriber::filter::LevelFilter, writer: W, ansi: bool)
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    if level == tracing_subscriber::filter::LevelFilter::OFF {
        return;
    }
    let layer = tracing_subscriber::fmt::layer()
        .with_writer(writer)
        .with_ansi(ansi)
        .without_time();
    let _ = tracing_subscriber::registry()
        .with(layer.with_filter(level))
        .try_init();
}

fn parse_filter(directives: &str) -> Result<EnvFilter, TelemetryError> {
    EnvFilter::try_new(directives).map_err(|e| TelemetryError::InvalidFilter {
        filter: directives.to_owned(),
        message: e.to_string(),
    })
}

/// Whether the environment asks for OTLP export, and where to.
pub fn otlp_endpoint(env: &EnvMap) -> Option<&str> {
    let disabled = env
        .get(OTEL_DISABLED_VAR)
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if disabled {
        None
    } else {
        env.get_non_empty(OTEL_ENDPOINT_VAR).map(str::trim)
    }
}

fn otlp_provider(
    service_name: &str,
    env: &EnvMap,
) -> Result<Option<SdkTracerProvider>, TelemetryError> {
    let Some(endpoint) = otlp_endpoint(env) else {
        return Ok(None);
    };
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(TelemetryError::NoRuntime);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(endpoint)
        .build()
        .map_err(|e| TelemetryError::Exporter {
            endpoint: endpoint.to_owned(),
            message: e.to_string(),
        })?;
    let name = env
        .get_non_empty(OTEL_SERVICE_NAME_VAR)
        .unwrap_or(service_name)
        .to_owned();
    let resource = opentelemetry_sdk::Resource::builder_empty()
        .with_service_name(name)
        .build();
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build(),
    ))
}

impl TelemetryGuard {
    /// Where the Prometheus endpoint listens, when it is served.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().map(|m| m.addr)
    }

    /// Whether spans are exported over OTLP.
    pub fn otel_enabled(&self) -> bool {
        self.provider.is_some()
    }

    /// Replaces the log filter (for an admin RPC or a signal).
    pub fn set_log_filter(&self, directives: &str) -> Result<(), TelemetryError> {
        let filter = parse_filter(directives)?;
        self.filter
            .reload(filter)
            .map_err(|e| TelemetryError::Reload(e.to_string()))
    }

    /// Exports every finished span now, off the async worker threads.
    pub async fn force_flush(&self) -> Result<(), TelemetryError> {
        let Some(provider) = self.provider.clone() else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || provider.force_flush())
            .await
            .map_err(|e| TelemetryError::Shutdown(e.to_string()))?
            .map_err(|e| TelemetryError::Shutdown(e.to_string()))
    }

    /// Flushes and shuts the exporter down, off the async worker threads.
    pub async fn shutdown(mut self) -> Result<(), TelemetryError> {
        let Some(provider) = self.provider.take() else {
            return Ok(());
        };
        tokio::task::spawn_blocking(move || provider.shutdown())
            .await
            .map_err(|e| TelemetryError::Shutdown(e.to_string()))?
            .map_err(|e| TelemetryError::Shutdown(e.to_string()))
    }
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        let Some(provider) = self.provider.take() else {
            return;
        };
        // The batch exporter's shutdown blocks; run it on its own thread so a runtime worker is
        // not the one blocked, and give up after SHUTDOWN_TIMEOUT.
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("otel-shutdown".into())
            .spawn(move || {
                let _ = tx.send(provider.shutdown());
            });
        if spawned.is_err() {
            return;
        }
        match rx.recv_timeout(SHUTDOWN_TIMEOUT) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("telemetry shutdown failed: {e}"),
            Err(_) => eprintln!("telemetry shutdown timed out after {SHUTDOWN_TIMEOUT:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn otlp_only_with_an_endpoint_and_not_disabled() {
        assert_eq!(otlp_endpoint(&EnvMap::new()), None);
        let env = EnvMap::new().with(OTEL_ENDPOINT_VAR, "http://127.0.0.1:4317");
        assert_eq!(otlp_endpoint(&env), Some("http://127.0.0.1:4317"));
        assert_eq!(
            otlp_endpoint(&env.clone().with(OTEL_DISABLED_VAR, "TRUE")),
            None
        );
        assert_eq!(
            otlp_endpoint(&env.with(OTEL_DISABLED_VAR, "false")),
            Some("http://127.0.0.1:4317")
        );
        assert_eq!(
            otlp_endpoint(&EnvMap::new().with(OTEL_ENDPOINT_VAR, " ")),
            None
        );
    }

    #[test]
    fn bad_filters_are_reported() {
        let err = parse_filter("info,[[[").unwrap_err();
        assert!(err.to_string().contains("invalid log filter"), "{err}");
        assert!(parse_filter("info,babysitter_journal=debug").is_ok());
    }

    #[test]
    fn otlp_needs_a_runtime() {
        let env = EnvMap::new().with(OTEL_ENDPOINT_VAR, "http://127.0.0.1:4317");
        assert!(matches!(
            otlp_provider("x", &env),
            Err(TelemetryError::NoRuntime)
        ));
    }

    #[test]
    fn config_keys_are_kebab_case() {
        let cfg: TelemetryConfig =
            toml::from_str("log-filter = \"debug\"\nlog-format = \"json\"\nmetrics-listen-addr = \"127.0.0.1:9464\"").unwrap();
        assert_eq!(
            cfg,
            TelemetryConfig {
                log_filter: "debug".into(),
                log_format: LogFormat::Json,
                metrics_listen_addr: Some(([127, 0, 0, 1], 9464).into()),
                metrics_tls: crate::tls::ServerTlsConfig::default(),
            }
        );
        assert!(toml::from_str::<TelemetryConfig>("log-level = \"debug\"").is_err());
    }
}
