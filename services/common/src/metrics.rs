//! Prometheus metrics: one registry per process, served at `GET /metrics` on
//! `[telemetry] metrics-listen-addr` ([`crate::telemetry::init_telemetry`] starts the endpoint).
//!
//! Why one process-wide registry: `babysitter up` runs the journal, the orchestrator and a worker
//! in one process, and a scrape should see all of them; a service crate registers its metrics
//! once (a `LazyLock` static per component, [`register`]) and updates them from its domain code.
//! Values that are a view of live state (queue depth, runs by state) are computed at scrape time
//! by a [`Collector`] instead of being kept in step by every state change.
//!
//! Names follow the Prometheus conventions: the `babysitter_` prefix, base units (`_seconds`),
//! `_total` on counters (added by the encoder), labels for dimensions of bounded cardinality
//! (kind, namespace, harness, outcome, backend, never a run id). The text is OpenMetrics 1.0,
//! which Prometheus scrapes natively.
//!
//! The endpoint has no authentication: it carries no secret, no run content and no identifier
//! beyond namespaces and kinds; bind it to an address only the scraper reaches (the Helm chart's
//! NetworkPolicy does).

use std::net::SocketAddr;
use std::sync::{LazyLock, Mutex, MutexGuard};

pub use prometheus_client::collector::Collector;
pub use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
pub use prometheus_client::metrics::counter::{ConstCounter, Counter};
pub use prometheus_client::metrics::family::Family;
pub use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
pub use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::{Metric, Registry};
use tokio_util::sync::CancellationToken;

/// The content type of [`render`]'s text.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

static REGISTRY: LazyLock<Mutex<Registry>> =
    LazyLock::new(|| Mutex::new(Registry::with_prefix("babysitter")));

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Registers `metric` as `babysitter_<name>`. Call once per name (from a `LazyLock` static).
pub fn register(name: &str, help: &str, metric: impl Metric) {
    registry().register(name, help, metric);
}

/// Registers a collector, asked for its values on every scrape. Call once per collector.
pub fn register_collector(collector: impl Collector) {
    registry().register_collector(Box::new(collector));
}

/// Every registered metric as OpenMetrics text.
pub fn render() -> String {
    let mut out = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &registry()) {
        tracing::warn!(error = %e, "cannot render the metrics");
    }
    out
}

/// Buckets of a latency histogram, seconds: 0.5 ms to 60 s, for RPCs, appends and dispatch.
pub fn latency_histogram() -> Histogram {
    Histogram::new([
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        60.0,
    ])
}

/// Buckets of a task-duration histogram, seconds: 10 ms to 2 h.
pub fn duration_histogram() -> Histogram {
    Histogram::new([
        0.01, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0,
    ])
}

/// Why the metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics on {addr}: {source}")]
pub struct EndpointError {
    addr: SocketAddr,
    source: std::io::Error,
}

/// The running endpoint: stops when dropped or [`Endpoint::stop`]ped.
#[derive(Debug)]
pub struct Endpoint {
    /// The bound address (the port when `:0` was asked for).
    pub addr: SocketAddr,
    stop: CancellationToken,
}

impl Endpoint {
    /// Binds `addr` now (a taken port fails the start) and serves `GET /metrics` on a task of
    /// the current tokio runtime.
    pub fn start(addr: SocketAddr) -> Result<Self, EndpointError> {
        Self::start_with_tls(addr, &crate::tls::ServerTlsConfig::default())
    }

    /// [`Endpoint::start`] over TLS when `tls` has a certificate.
    pub fn start_with_tls(
        addr: SocketAddr,
        tls: &crate::tls::ServerTlsConfig,
    ) -> Result<Self, EndpointError> {
        let err = |source| EndpointError { addr, source };
        let tls = crate::tls::ServerTls::load(tls, crate::tls::Protocol::Http)
            .map_err(|e| err(std::io::Error::other(e)))?;
        let listener = std::net::TcpListener::bind(addr).map_err(err)?;
        listener.set_nonblocking(true).map_err(err)?;
        let bound = listener.local_addr().map_err(err)?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(err)?;
        let stop = CancellationToken::new();
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(|| async {
                ([(http::header::CONTENT_TYPE, CONTENT_TYPE)], render())
            }),
        );
        let until = stop.clone();
        let scheme = if tls.is_some() { "https" } else { "http" };
        tokio::spawn(async move {
            let served = match tls {
                Some(tls) => {
                    tls.watch(until.clone());
                    axum::serve(tls.incoming(listener, None).into_listener(), app)
                        .with_graceful_shutdown(until.cancelled_owned())
                        .await
                }
                None => {
                    axum::serve(listener, app)
                        .with_graceful_shutdown(until.cancelled_owned())
                        .await
                }
            };
            if let Err(e) = served {
                tracing::warn!(error = %e, "the metrics endpoint stopped");
            }
        });
        // One machine-readable line, as for the gRPC ports (tests and scripts read it).
        eprintln!("metrics listening on {bound}");
        tracing::info!(addr = %bound, scheme, "serving prometheus metrics at /metrics");
        Ok(Self { addr: bound, stop })
    }

    /// Stops serving.
    pub fn stop(&self) {
        self.stop.cancel();
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_registered_counter_is_served_with_the_prefix_and_total() {
        static HITS: LazyLock<Family<[(&'static str, &'static str); 1], Counter>> =
            LazyLock::new(|| {
                let f = Family::default();
                register(
                    "metrics_test_hits",
                    "hits in the metrics unit test",
                    f.clone(),
                );
                f
            });
        HITS.get_or_create(&[("kind", "shell")]).inc_by(3);
        let endpoint = Endpoint::start(SocketAddr::from(([127, 0, 0, 1], 0))).unwrap();
        let body = scrape(endpoint.addr).await;
        assert!(
            body.contains("babysitter_metrics_test_hits_total{kind=\"shell\"} 3"),
            "{body}"
        );
        assert!(body.ends_with("# EOF\n"), "{body}");
        endpoint.stop();
    }

    /// A plain HTTP/1.1 GET, as Prometheus sends it.
    async fn scrape(addr: SocketAddr) -> String {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        assert!(out.contains(CONTENT_TYPE), "{out}");
        out.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default()
    }
}
