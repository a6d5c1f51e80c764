//! babysitter-dashboard: the web dashboard — does any run need me right now?
//!
//! A board of runs by triage bucket (needs you / orphaned / working / stale / failed /
//! completed), live over SSE; a run's detail (its tasks as a pipeline, logs, timeline, the raw
//! journal with each event verified, cost against budget); breakpoint approval and cancel /
//! halt. One HTTP layer over a [`source::Source`]: the orchestrator's run manager implements it
//! (served by the `orchestrator` binary and `babysitter up`), and [`local::LocalSource`] over
//! `.a5c/runs` directories (`babysitter observe`). Why this shape, the page's design and the
//! measurements: `OVERVIEW.md`.
//!
//! Dependencies point down only: this crate knows the journal (to read and verify runs) and the
//! common auth and TLS; the orchestrator depends on it, never the reverse.

#![forbid(unsafe_code)]

pub mod auth;
pub mod board;
pub mod detail;
pub mod forward;
pub mod http;
pub mod local;
pub mod model;
pub mod source;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use babysitter_common::auth::Authenticator;
use babysitter_common::tls::{Protocol, ServerTls, ServerTlsConfig};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use board::Board;
pub use source::Source;

/// `[dashboard]`: the web dashboard's port.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct DashboardConfig {
    /// Where the dashboard listens (HTTP); unset = no dashboard. Since v0.1.
    #[serde(default)]
    pub listen_addr: Option<SocketAddr>,
    /// TLS for the dashboard's port (the same keys as `[server.tls]`). Since v0.1.
    pub tls: ServerTlsConfig,
    /// An unfinished run with no journal progress for this long is stale (waiting on
    /// something) or orphaned (waiting on nothing). Since v0.1.
    #[serde(with = "babysitter_common::config::duration")]
    pub stale_after: Duration,
    /// A standby orchestrator's dashboard port forwards every request to the active
    /// orchestrator's dashboard: on the host the active one advertises (`leadership`), at this
    /// port. Unset: this port's own (replicas share one). Since v0.6.
    #[serde(default)]
    pub active_port: Option<u16>,
}

impl Default for DashboardConfig {
    fn default() -> Self {
        Self {
            listen_addr: None,
            tls: ServerTlsConfig::default(),
            stale_after: Duration::from_secs(30 * 60),
            active_port: None,
        }
    }
}

/// Errors starting the dashboard.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DashboardError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("dashboard tls: {0}")]
    Tls(String),
}

/// An HTTP port serving until its token is cancelled: the dashboard's, or a standby
/// orchestrator's forwarding one ([`forward`]). [`Port::stop`] returns once the port is closed.
#[derive(Debug)]
pub struct Port {
    pub addr: SocketAddr,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Port {
    /// Binds `addr` (TLS as `tls` says) and serves `app(tls_on)` until `stop`.
    async fn open(
        addr: SocketAddr,
        tls: &ServerTlsConfig,
        stop: CancellationToken,
        app: impl FnOnce(bool) -> axum::Router,
    ) -> Result<Self, DashboardError> {
        let tls =
            ServerTls::load(tls, Protocol::Http).map_err(|e| DashboardError::Tls(e.to_string()))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| DashboardError::Listen { addr, source })?;
        let bound = listener
            .local_addr()
            .map_err(|source| DashboardError::Listen { addr, source })?;
        let app = app(tls.is_some());
        let until = stop.clone();
        let task = tokio::spawn(async move {
            let served = babysitter_common::tls::serve_http(listener, app, tls, until).await;
            if let Err(e) = served {
                tracing::warn!(error = %e, %bound, "a dashboard port stopped");
            }
        });
        Ok(Self {
            addr: bound,
            stop,
            task,
        })
    }

    /// Stops accepting, ends the open streams, and waits until the port is closed.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

/// A running dashboard: stops when [`Running::stop`] is called or its token is cancelled.
#[derive(Debug)]
pub struct Running {
    pub addr: SocketAddr,
    pub board: Arc<Board>,
    port: Port,
}

impl Running {
    pub async fn stop(self) {
        self.port.stop().await;
    }
}

/// Binds `addr` and serves the dashboard over `source` (TLS when `config.tls` has a
/// certificate), until `stop`. Prints `dashboard listening on <addr>` on stderr (tests and
/// scripts read the port when `:0` was asked for).
pub async fn serve(
    addr: SocketAddr,
    config: &DashboardConfig,
    source: Arc<dyn Source>,
    auth: Authenticator,
    mode: &'static str,
    stop: CancellationToken,
) -> Result<Running, DashboardError> {
    let board = Board::new(i64::try_from(config.stale_after.as_millis()).unwrap_or(i64::MAX));
    let app = |tls_on: bool| {
        http::router(http::AppState {
            source: source.clone(),
            board: board.clone(),
            gate: Arc::new(auth::Gate::new(auth, tls_on)),
            mode,
            stop: stop.clone(),
        })
    };
    let port = Port::open(addr, &config.tls, stop.clone(), app).await?;
    board.follow(source, stop);
    let scheme = if config.tls.enabled() {
        "https"
    } else {
        "http"
    };
    eprintln!("dashboard listening on {} ({scheme})", port.addr);
    Ok(Running {
        addr: port.addr,
        board,
        port,
    })
}
