//! A standby orchestrator's dashboard port: every request forwarded to the active one's.
//!
//! Why: of several orchestrators on one journal only the active one has the runs in memory and
//! may act on them, so only it serves the dashboard ([`crate::serve`]). Yet a load balancer in
//! front of the replicas (a Kubernetes Service, an ingress) sends a browser to any of them, and
//! readiness is per pod, not per port: a standby cannot be "unready for the dashboard only". So
//! a standby's dashboard port forwards each request, unchanged (method, path, `Host`, cookie,
//! CSRF header, body), to the active orchestrator's dashboard, and streams the answer back (the
//! board's and a run's SSE streams included), exactly as its gRPC port forwards `RunService`
//! calls. The page cannot tell the difference: login, CSRF and actions are all the active
//! orchestrator's own.
//!
//! One HTTP/1.1 connection per request: the page makes a handful of requests (the board, its
//! stream, a run's detail); a pool would be a cache of connections to an address that changes
//! with every takeover. A request that arrives while no active orchestrator is known, or whose
//! upstream does not answer, gets `503` saying so (the page retries its streams).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use babysitter_common::tls::{ClientTls, ServerTlsConfig};
use futures::StreamExt;
use hyper_util::rt::TokioIo;
use tokio_util::sync::CancellationToken;

use crate::{DashboardError, Port};

/// Where the active orchestrator's dashboard is now: `http://host:port` or `https://…`, or
/// `None` while no active orchestrator is known. Asked on every request.
pub type Target = Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// The dashboard at `port` on the host of `active`, the active orchestrator's advertised gRPC
/// address (`http://10.0.3.7:50052`): replicas serve their dashboards on one port, so the
/// advertised host is all a standby needs. `None` when `active` names no host.
pub fn on_host_of(active: &str, https: bool, port: u16) -> Option<String> {
    let uri: Uri = active.parse().ok()?;
    let host = uri.host()?;
    let scheme = if https { "https" } else { "http" };
    Some(format!("{scheme}://{host}:{port}"))
}

/// How long connecting to the active dashboard and its answer's head may take before the
/// request is answered `503` (a stream's body is not bounded: it lasts as long as the page).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
struct Forwarder {
    target: Target,
    /// For `https://` targets: the CA the active orchestrator's certificate chains to (and this
    /// process's client certificate when that port asks for one), or else the system's roots,
    /// loaded once, at the first `https://` request.
    tls: Arc<std::sync::OnceLock<Result<ClientTls, String>>>,
    /// Ends forwarded streams when this port stops (a takeover binds the real dashboard here).
    stop: CancellationToken,
}

/// Binds `addr` (TLS as `tls` says, the same settings as the real dashboard's port) and
/// forwards every request to `target()` until `stop`; [`Port::stop`] frees the port.
pub async fn serve_forwarding(
    addr: SocketAddr,
    tls: &ServerTlsConfig,
    target: Target,
    client_tls: Option<ClientTls>,
    stop: CancellationToken,
) -> Result<Port, DashboardError> {
    let material = Arc::new(std::sync::OnceLock::new());
    if let Some(t) = client_tls {
        let _ = material.set(Ok(t));
    }
    let forwarder = Forwarder {
        target,
        tls: material,
        stop: stop.clone(),
    };
    let app = |_| axum::Router::new().fallback(forward).with_state(forwarder);
    let port = Port::open(addr, tls, stop, app).await?;
    eprintln!(
        "dashboard forwarding to the active orchestrator on {}",
        port.addr
    );
    Ok(port)
}

/// Headers that describe one connection, not the request: never forwarded either way.
const HOP_BY_HOP: [header::HeaderName; 7] = [
    header::CONNECTION,
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Headers a `Connection` header names are this connection's too.
    let named: Vec<header::HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|n| header::HeaderName::from_bytes(n.trim().as_bytes()).ok())
        .collect();
    for name in HOP_BY_HOP.iter().chain(named.iter()) {
        headers.remove(name);
    }
    headers.remove("keep-alive");
}

fn unavailable(why: String) -> Response {
    tracing::debug!(%why, "dashboard request not forwarded");
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::RETRY_AFTER, HeaderValue::from_static("1"))],
        format!("this orchestrator is standing by: {why}; retry\n"),
    )
        .into_response()
}

async fn forward(State(f): State<Forwarder>, request: Request) -> Response {
    let Some(base) = (f.target)() else {
        return unavailable("no active orchestrator is known yet".into());
    };
    // A stopping port (this process is taking over) answers at once: a takeover never waits
    // for a slow upstream.
    let stop = f.stop.clone();
    tokio::select! {
        sent = f.send(&base, request) => match sent {
            Ok(response) => response,
            Err(e) => unavailable(format!(
                "the active orchestrator's dashboard at {base} did not answer: {e}"
            )),
        },
        _ = stop.cancelled() => unavailable("this orchestrator is taking over".into()),
    }
}

type BoxError = babysitter_common::tls::BoxError;

impl Forwarder {
    async fn send(&self, base: &str, request: Request) -> Result<Response, BoxError> {
        let base: Uri = base
            .parse()
            .map_err(|e| format!("`{base}` is not a URL: {e}"))?;
        let (mut parts, body) = request.into_parts();
        // An HTTP/2 caller names the host in the URI, not in a `Host` header; the active
        // dashboard's same-origin check needs it.
        if !parts.headers.contains_key(header::HOST)
            && let Some(authority) = parts.uri.authority()
            && let Ok(host) = HeaderValue::from_str(authority.as_str())
        {
            parts.headers.insert(header::HOST, host);
        }
        let path = parts
            .uri
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_owned();
        parts.uri = path.parse()?;
        parts.version = http::Version::HTTP_11;
        strip_hop_by_hop(&mut parts.headers);
        let request = Request::from_parts(parts, body);

        let https = base.scheme_str() == Some("https");
        let host = base.host().ok_or("the target names no host")?;
        let port = base.port_u16().unwrap_or(if https { 443 } else { 80 });
        let connect = async {
            if https {
                let tls = self
                    .tls
                    .get_or_init(|| ClientTls::load(&Default::default()).map_err(|e| e.to_string()))
                    .as_ref()
                    .map_err(|e| format!("no TLS material to dial it: {e}"))?;
                let io = tls.dial(&base, Some(&[b"http/1.1"])).await?;
                self.exchange(io, request).await
            } else {
                let tcp = tokio::net::TcpStream::connect((host, port)).await?;
                tcp.set_nodelay(true)?;
                self.exchange(TokioIo::new(tcp), request).await
            }
        };
        tokio::time::timeout(ANSWER_TIMEOUT, connect)
            .await
            .map_err(|_| format!("no answer within {ANSWER_TIMEOUT:?}"))?
    }

    /// One request over a fresh HTTP/1.1 connection; the answer's body streams until it ends
    /// or this port stops.
    async fn exchange<I>(&self, io: I, request: Request) -> Result<Response, BoxError>
    where
        I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    {
        let (mut sender, connection) = hyper::client::conn::http1::handshake(io).await?;
        let stop = self.stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                done = connection => if let Err(e) = done {
                    tracing::debug!(error = %e, "a forwarded dashboard connection ended");
                },
            }
        });
        let upstream = sender.send_request(request).await?;
        let (mut parts, body) = upstream.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        let body = Body::new(body)
            .into_data_stream()
            .take_until(self.stop.clone().cancelled_owned());
        Ok(Response::from_parts(parts, Body::from_stream(body)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_active_dashboard_is_on_the_advertised_host_at_the_shared_port() {
        assert_eq!(
            on_host_of("https://10.0.3.7:50052", true, 8080).as_deref(),
            Some("https://10.0.3.7:8080")
        );
        assert_eq!(
            on_host_of("http://[fd00::7]:50052", false, 8080).as_deref(),
            Some("http://[fd00::7]:8080")
        );
        assert_eq!(on_host_of("not a url", false, 8080), None);
    }

    #[test]
    fn hop_by_hop_headers_and_the_ones_connection_names_are_not_forwarded() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, x-private"),
        );
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert(
            header::COOKIE,
            HeaderValue::from_static("babysitter_dashboard=t"),
        );
        h.insert("x-babysitter-csrf", HeaderValue::from_static("c"));
        strip_hop_by_hop(&mut h);
        let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        left.sort_unstable();
        assert_eq!(left, ["cookie", "x-babysitter-csrf"]);
    }
}
