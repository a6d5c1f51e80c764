//! The server side: a reloading `rustls::ServerConfig`, an accept loop that does handshakes off
//! the accept path (for tonic, [`TlsIncoming`], and axum, [`TlsListener`]), and the layer that
//! refuses calls without a client certificate under mTLS.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{
    Fingerprint, HANDSHAKE_TIMEOUT, ServerTlsConfig, TlsError, provider, read_certs, read_key,
    read_roots,
};
use crate::error::{ErrorKind, status};

/// What a listener speaks: its ALPN, and where client certificates are required under mTLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// gRPC (HTTP/2): client certificates are checked per call ([`ClientCertificateLayer`]),
    /// so health stays reachable without one.
    Grpc,
    /// HTTP/2 and HTTP/1.1 (the proxy's front, `/metrics`): no certificate, no handshake.
    Http,
}

impl Protocol {
    fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            Protocol::Grpc => vec![b"h2".to_vec()],
            Protocol::Http => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        }
    }
}

/// A listener's TLS material, reloaded from disk (see the module doc of [`crate::tls`]).
#[derive(Clone)]
pub struct ServerTls {
    config: ServerTlsConfig,
    protocol: Protocol,
    current: Arc<RwLock<Arc<rustls::ServerConfig>>>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Loads `config` for a listener speaking `protocol`; `None` when TLS is off. Fails naming
    /// the file and what is wrong with it.
    pub fn load(config: &ServerTlsConfig, protocol: Protocol) -> Result<Option<Self>, TlsError> {
        if !config.enabled() {
            if config.key_file.is_some() || config.client_ca_file.is_some() {
                return Err(TlsError::Config(
                    "`key-file` and `client-ca-file` need `cert-file`".into(),
                ));
            }
            return Ok(None);
        }
        let built = build(config, protocol)?;
        Ok(Some(Self {
            config: config.clone(),
            protocol,
            current: Arc::new(RwLock::new(Arc::new(built))),
        }))
    }

    /// Whether calls to non-public services of a gRPC port need a client certificate (mTLS),
    /// checked per call by [`ClientCertificateLayer`].
    pub fn requires_client_certificates(&self) -> bool {
        self.config.client_ca_file.is_some() && self.protocol == Protocol::Grpc
    }

    /// The material new connections are accepted with.
    pub fn current(&self) -> Arc<rustls::ServerConfig> {
        match self.current.read() {
            Ok(c) => c.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn files(&self) -> Vec<&std::path::Path> {
        [
            &self.config.cert_file,
            &self.config.key_file,
            &self.config.client_ca_file,
        ]
        .into_iter()
        .flatten()
        .map(|p| p.as_path())
        .collect()
    }

    /// Checks the files now and loads them when they changed since `last`; returns what they
    /// looked like. A change that does not load is logged and the old material stays.
    pub(crate) fn reload_if_changed(&self, last: &Fingerprint) -> Fingerprint {
        let now = Fingerprint::of(self.files());
        if &now == last {
            return now;
        }
        match build(&self.config, self.protocol) {
            Ok(config) => {
                let config = Arc::new(config);
                match self.current.write() {
                    Ok(mut c) => *c = config,
                    Err(poisoned) => *poisoned.into_inner() = config,
                }
                tracing::info!(cert = ?self.config.cert_file, "tls: certificates reloaded");
            }
            Err(e) => {
                tracing::error!(error = %e, "tls: changed certificates do not load; still serving the previous ones")
            }
        }
        now
    }

    /// Reloads changed files every `reload-interval` until `stop` (nothing when it is off).
    pub fn watch(&self, stop: CancellationToken) {
        let Some(every) = self.config.reload_interval.filter(|d| !d.is_zero()) else {
            return;
        };
        let this = self.clone();
        tokio::spawn(async move {
            let mut last = Fingerprint::of(this.files());
            loop {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = stop.cancelled() => return,
                }
                let tls = this.clone();
                let seen = last.clone();
                // File reads are blocking; they are small but may sit on a slow volume.
                last = match tokio::task::spawn_blocking(move || tls.reload_if_changed(&seen)).await
                {
                    Ok(fp) => fp,
                    Err(_) => last,
                };
            }
        });
    }

    /// Accepts TLS connections on `listener` until the returned stream is dropped: each
    /// handshake runs on its own task, bounded by [`HANDSHAKE_TIMEOUT`].
    pub fn incoming(&self, listener: TcpListener, tcp_keepalive: Option<Duration>) -> TlsIncoming {
        let local_addr = listener.local_addr().ok();
        let (tx, rx) = mpsc::channel(256);
        let tls = self.clone();
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    accepted = listener.accept() => accepted,
                    () = tx.closed() => return,
                };
                let (tcp, remote) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // EMFILE and friends: back off instead of spinning.
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                tune(&tcp, tcp_keepalive);
                let (tx, acceptor) = (tx.clone(), tokio_rustls::TlsAcceptor::from(tls.current()));
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let client_certificate = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .is_some_and(|c| !c.is_empty());
                            let conn = TlsConn {
                                inner: stream,
                                info: PeerInfo {
                                    remote_addr: Some(remote),
                                    client_certificate,
                                },
                            };
                            let _ = tx.send(conn).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(%remote, error = %e, "tls handshake failed")
                        }
                        Err(_) => tracing::debug!(%remote, "tls handshake timed out"),
                    }
                });
            }
        });
        TlsIncoming { rx, local_addr }
    }
}

fn tune(tcp: &TcpStream, keepalive: Option<Duration>) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "TCP_NODELAY not set");
    }
    if let Some(time) = keepalive {
        let ka = socket2::TcpKeepalive::new().with_time(time);
        if let Err(e) = socket2::SockRef::from(tcp).set_tcp_keepalive(&ka) {
            tracing::debug!(error = %e, "TCP keepalive not set");
        }
    }
}

fn build(config: &ServerTlsConfig, protocol: Protocol) -> Result<rustls::ServerConfig, TlsError> {
    let (Some(cert_file), Some(key_file)) = (&config.cert_file, &config.key_file) else {
        return Err(TlsError::Config("`cert-file` needs `key-file`".into()));
    };
    let certs = read_certs("certificate", cert_file)?;
    let key = read_key(key_file)?;
    let provider = provider();
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            what: "protocol versions".into(),
            source,
        })?;
    let builder = match &config.client_ca_file {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let roots = read_roots("client CA", ca)?;
            // gRPC: connections without a certificate pass the handshake and are refused per
            // call (ClientCertificateLayer), so health stays reachable; a presented
            // certificate must chain to the CA. HTTP: the handshake needs one.
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let verifier = match protocol {
                Protocol::Grpc => verifier.allow_unauthenticated(),
                Protocol::Http => verifier,
            };
            let verifier = verifier.build().map_err(|e| TlsError::ClientCa {
                path: ca.clone(),
                reason: e.to_string(),
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut server = builder
        .with_single_cert(certs, key)
        .map_err(|source| TlsError::Rustls {
            what: format!(
                "certificate `{}` with key `{}`",
                cert_file.display(),
                key_file.display()
            ),
            source,
        })?;
    server.alpn_protocols = protocol.alpn();
    Ok(server)
}

/// Who is on the other end of a TLS connection: in each request's extensions (tonic puts a
/// listener's connect info there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerInfo {
    /// The client's address.
    pub remote_addr: Option<SocketAddr>,
    /// Whether the client presented a certificate that chains to the client CA.
    pub client_certificate: bool,
}

/// An accepted, handshaken TLS connection.
#[derive(Debug)]
pub struct TlsConn {
    inner: tokio_rustls::server::TlsStream<TcpStream>,
    info: PeerInfo,
}

impl TlsConn {
    /// Who connected.
    pub fn peer(&self) -> PeerInfo {
        self.info
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl tonic::transport::server::Connected for TlsConn {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.info
    }
}

/// Handshaken connections for tonic's `serve_with_incoming*`.
#[derive(Debug)]
pub struct TlsIncoming {
    rx: mpsc::Receiver<TlsConn>,
    local_addr: Option<SocketAddr>,
}

impl TlsIncoming {
    /// The same connections as an axum listener.
    pub fn into_listener(self) -> TlsListener {
        TlsListener(self)
    }
}

impl futures::Stream for TlsIncoming {
    type Item = Result<TlsConn, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|c| c.map(Ok))
    }
}

/// Handshaken connections for `axum::serve`.
#[derive(Debug)]
pub struct TlsListener(TlsIncoming);

impl axum::serve::Listener for TlsListener {
    type Io = TlsConn;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.0.rx.recv().await {
            Some(conn) => {
                let addr = conn
                    .info
                    .remote_addr
                    .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
                (conn, addr)
            }
            // The accept loop only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0
            .local_addr
            .ok_or_else(|| std::io::Error::other("listener has no local address"))
    }
}

/// Refuses calls to non-public services on connections without a client certificate (the
/// listener's mTLS; see the module doc of [`crate::tls`]).
#[derive(Debug, Clone)]
pub struct ClientCertificateLayer {
    public_services: Arc<Vec<String>>,
}

impl ClientCertificateLayer {
    /// Calls to `public_services` (health, reflection) pass without a certificate.
    pub fn new(public_services: &[String]) -> Self {
        Self {
            public_services: Arc::new(public_services.to_vec()),
        }
    }
}

impl<S> tower::Layer<S> for ClientCertificateLayer {
    type Service = ClientCertificateService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ClientCertificateService {
            inner,
            public_services: self.public_services.clone(),
        }
    }
}

/// The service made by [`ClientCertificateLayer`].
#[derive(Debug, Clone)]
pub struct ClientCertificateService<S> {
    inner: S,
    public_services: Arc<Vec<String>>,
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, B, ResBody> tower::Service<http::Request<B>> for ClientCertificateService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let service = crate::auth::service_of(req.uri().path());
        let certified = req
            .extensions()
            .get::<PeerInfo>()
            .is_some_and(|p| p.client_certificate);
        if certified || self.public_services.iter().any(|s| s == service) {
            return Box::pin(self.inner.call(req));
        }
        tracing::debug!(path = %req.uri().path(), "request refused: no client certificate");
        let status = status(
            ErrorKind::Unauthenticated,
            "a client certificate is required: this server verifies client certificates (mTLS) \
             and the connection presented none",
            false,
            &[],
        );
        Box::pin(std::future::ready(Ok(status.into_http())))
    }
}
