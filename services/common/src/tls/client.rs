//! The client side: a `rustls::ClientConfig` read again when its files change (checked when a
//! connection is made, so a reconnect after a rotation uses the new material), and the tonic
//! connector that dials TCP and does the handshake.

use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http::Uri;
use hyper_util::rt::TokioIo;
use rustls_pki_types::ServerName;
use tokio::net::TcpStream;

use super::{ClientTlsConfig, Fingerprint, TlsError, provider, read_certs, read_key, read_roots};

/// A client's TLS material (see the module doc of [`crate::tls`]).
#[derive(Clone)]
pub struct ClientTls {
    config: ClientTlsConfig,
    current: Arc<Mutex<(Fingerprint, Arc<rustls::ClientConfig>)>>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ClientTls {
    /// Loads `config`; fails naming the file and what is wrong with it.
    pub fn load(config: &ClientTlsConfig) -> Result<Self, TlsError> {
        if config.cert_file.is_some() != config.key_file.is_some() {
            return Err(TlsError::Config(
                "a client certificate needs both `cert-file` and `key-file`".into(),
            ));
        }
        if let Some(name) = &config.server_name {
            ServerName::try_from(name.clone()).map_err(|_| TlsError::ServerName(name.clone()))?;
        }
        let built = build(config)?;
        Ok(Self {
            current: Arc::new(Mutex::new((
                Fingerprint::of(files(config)),
                Arc::new(built),
            ))),
            config: config.clone(),
        })
    }

    /// The material for a new connection: the files are loaded again when they changed (and
    /// the previous material kept, logged, when they do not load).
    pub fn current(&self) -> Arc<rustls::ClientConfig> {
        let now = Fingerprint::of(files(&self.config));
        let mut guard = match self.current.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        if guard.0 != now {
            match build(&self.config) {
                Ok(config) => {
                    tracing::info!("tls: client certificates reloaded");
                    guard.1 = Arc::new(config);
                }
                Err(e) => {
                    tracing::error!(error = %e, "tls: changed client certificates do not load; using the previous ones")
                }
            }
            guard.0 = now;
        }
        guard.1.clone()
    }

    /// A client that does not verify the server's certificate: only for `--health-check`,
    /// which dials its own process on loopback, sends no token and reads only the health
    /// status (a probe must work whatever names the certificate carries).
    pub fn unverified_for_probe() -> Result<Self, TlsError> {
        let mut client = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|source| TlsError::Rustls {
                what: "protocol versions".into(),
                source,
            })?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AnyServer(provider())))
            .with_no_client_auth();
        client.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Self {
            config: ClientTlsConfig {
                server_name: Some("localhost".into()),
                ..ClientTlsConfig::default()
            },
            current: Arc::new(Mutex::new((Fingerprint::default(), Arc::new(client)))),
        })
    }

    /// A tonic connector dialling with this material.
    pub fn connector(&self) -> TlsConnector {
        TlsConnector { tls: self.clone() }
    }
}

fn files(config: &ClientTlsConfig) -> Vec<&Path> {
    [&config.ca_file, &config.cert_file, &config.key_file]
        .into_iter()
        .flatten()
        .map(|p| p.as_path())
        .collect()
}

fn build(config: &ClientTlsConfig) -> Result<rustls::ClientConfig, TlsError> {
    let roots = match &config.ca_file {
        Some(ca) => read_roots("CA", ca)?,
        None => {
            let found = rustls_native_certs::load_native_certs();
            if found.certs.is_empty() {
                let why = found
                    .errors
                    .first()
                    .map(|e| e.to_string())
                    .unwrap_or_else(|| "none found".into());
                return Err(TlsError::NativeRoots(why));
            }
            let mut roots = rustls::RootCertStore::empty();
            roots.add_parsable_certificates(found.certs);
            roots
        }
    };
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|source| TlsError::Rustls {
            what: "protocol versions".into(),
            source,
        })?
        .with_root_certificates(roots);
    let mut client = match (&config.cert_file, &config.key_file) {
        (Some(cert), Some(key)) => builder
            .with_client_auth_cert(read_certs("client certificate", cert)?, read_key(key)?)
            .map_err(|source| TlsError::Rustls {
                what: format!(
                    "client certificate `{}` with key `{}`",
                    cert.display(),
                    key.display()
                ),
                source,
            })?,
        _ => builder.with_no_client_auth(),
    };
    client.alpn_protocols = vec![b"h2".to_vec()];
    Ok(client)
}

/// Dials TCP and does the TLS handshake: what a tonic `Endpoint` connects through
/// (`connect_with_connector_lazy`).
#[derive(Debug, Clone)]
pub struct TlsConnector {
    tls: ClientTls,
}

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Uri> for TlsConnector {
    type Response = TokioIo<tokio_rustls::client::TlsStream<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = self.tls.clone();
        Box::pin(async move { tls.dial(&uri, None).await })
    }
}

impl ClientTls {
    /// Dials `uri`'s host and port (443 when it names none) over TCP and does the handshake,
    /// offering `alpn` (`None`: the material's own, `h2` for gRPC; `Some(&[b"http/1.1"])` for a
    /// plain HTTP/1 client). One place for every outgoing TLS connection.
    pub async fn dial(
        &self,
        uri: &Uri,
        alpn: Option<&[&[u8]]>,
    ) -> Result<TokioIo<tokio_rustls::client::TlsStream<TcpStream>>, BoxError> {
        let host = uri
            .host()
            .ok_or_else(|| format!("`{uri}` has no host"))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(443);
        let name = self
            .config
            .server_name
            .clone()
            .unwrap_or_else(|| host.clone());
        let name = ServerName::try_from(name.clone())
            .map_err(|_| format!("`{name}` is not a valid TLS server name"))?;
        let tcp = TcpStream::connect((host.as_str(), port)).await?;
        tcp.set_nodelay(true)?;
        let material = match alpn {
            None => self.current(),
            Some(protocols) => {
                let mut config = (*self.current()).clone();
                config.alpn_protocols = protocols.iter().map(|p| p.to_vec()).collect();
                Arc::new(config)
            }
        };
        let stream = tokio_rustls::TlsConnector::from(material)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls handshake with {host}:{port} failed: {e}"))?;
        Ok(TokioIo::new(stream))
    }
}

/// Accepts any server certificate (signatures are still checked): [`ClientTls::unverified_for_probe`].
#[derive(Debug)]
struct AnyServer(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyServer {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls_pki_types::CertificateDer<'_>,
        _intermediates: &[rustls_pki_types::CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls_pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls_pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
