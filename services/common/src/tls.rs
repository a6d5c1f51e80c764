//! TLS for every babysitter port: the gRPC servers, their clients, and the HTTP listeners (the
//! transport proxy's front, `/metrics`). rustls over aws-lc-rs, the provider the HTTP clients
//! (reqwest, object_store) already bring, so no second crypto library is built.
//!
//! Why our own acceptor and connector instead of tonic's `tls-*` features: certificates must be
//! reloaded from disk without a restart (cert-manager and Kubernetes rotate a mounted Secret in
//! place), and one acceptor must serve both tonic and axum. [`ServerTls`] keeps the current
//! `rustls::ServerConfig` behind a lock and re-reads the files when their modification time or
//! size change (checked every `reload-interval`); material that does not load is logged and the
//! previous one keeps serving. Each accepted connection does its handshake in its own task with
//! a timeout, so a slow or silent client cannot hold up other accepts. [`ClientTls`] does the
//! same for a client's CA and certificate, read again when a connection is (re)made.
//!
//! **Client certificates (mTLS).** With `client-ca-file` set, a presented client certificate must
//! chain to that CA (else the handshake fails), and every call to a non-public service
//! (everything but health and reflection) on a connection without one is refused
//! `Unauthenticated`, naming the missing certificate ([`ClientCertificateLayer`]). Health stays
//! reachable without a certificate, so probes need no client identity.
//!
//! **Tokens and certificates.** Bearer tokens stay the authorisation (their role says what a
//! caller may do: `client`, `worker`, `admin`); a client certificate authenticates
//! the machine the call comes from. A deployment turns both on: TLS so tokens never cross the
//! network in the clear, mTLS so a stolen token is useless without a certificate of the CA.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};

use crate::config::duration;

mod client;
pub mod generate;
mod server;
#[cfg(test)]
mod tests;

pub use client::{BoxError, ClientTls, TlsConnector};
pub use server::{
    ClientCertificateLayer, PeerInfo, Protocol, ServerTls, TlsConn, TlsIncoming, TlsListener,
    serve_http,
};

/// How often certificate files are checked for changes by default.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// Longest a client may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// `[server.tls]` (and every other listener's `tls`): off unless `cert-file` is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct ServerTlsConfig {
    /// The server's certificate chain (PEM), leaf first. Setting it turns TLS on.
    pub cert_file: Option<PathBuf>,
    /// The private key of the certificate (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// CA certificates (PEM) that client certificates must chain to. Setting it turns mTLS on:
    /// calls to every non-public service need a client certificate.
    pub client_ca_file: Option<PathBuf>,
    /// How often the files are checked for changes (a changed file is loaded without a
    /// restart; `"off"`: never).
    #[serde(with = "duration::option")]
    pub reload_interval: Option<Duration>,
}

impl Default for ServerTlsConfig {
    fn default() -> Self {
        Self {
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            reload_interval: Some(DEFAULT_RELOAD_INTERVAL),
        }
    }
}

impl ServerTlsConfig {
    /// Whether TLS is on (`cert-file` set).
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }

    /// TLS on with this certificate and key (tests, generated configs).
    pub fn with_files(cert_file: impl Into<PathBuf>, key_file: impl Into<PathBuf>) -> Self {
        Self {
            cert_file: Some(cert_file.into()),
            key_file: Some(key_file.into()),
            ..Self::default()
        }
    }
}

/// A client's `tls` table (`[journal.tls]`, `[orchestrator.tls]`, …). TLS is used for
/// `https://` URLs; these settings say whom to trust and who we are.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct ClientTlsConfig {
    /// CA certificates (PEM) the server's certificate must chain to (unset: the system's
    /// roots).
    pub ca_file: Option<PathBuf>,
    /// This client's certificate chain (PEM), for servers that require client certificates.
    pub cert_file: Option<PathBuf>,
    /// The private key of `cert-file`.
    pub key_file: Option<PathBuf>,
    /// The name the server's certificate must carry (unset: the URL's host).
    pub server_name: Option<String>,
}

impl ClientTlsConfig {
    /// The settings of the `BABYSITTER_TLS_CA_FILE`, `BABYSITTER_TLS_CERT_FILE`,
    /// `BABYSITTER_TLS_KEY_FILE` and `BABYSITTER_TLS_SERVER_NAME` variables (the CLI's).
    pub fn from_env(env: &crate::env::EnvMap) -> Self {
        let path = |k: &str| env.get_non_empty(k).map(PathBuf::from);
        Self {
            ca_file: path("BABYSITTER_TLS_CA_FILE"),
            cert_file: path("BABYSITTER_TLS_CERT_FILE"),
            key_file: path("BABYSITTER_TLS_KEY_FILE"),
            server_name: env
                .get_non_empty("BABYSITTER_TLS_SERVER_NAME")
                .map(str::to_owned),
        }
    }

    /// Whether anything is set.
    pub fn is_set(&self) -> bool {
        self != &Self::default()
    }
}

/// Why TLS material could not be used. Names the file and what was wrong with it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// A setting that needs another one is alone.
    #[error("tls: {0}")]
    Config(String),
    /// A file could not be read.
    #[error("tls: cannot read {what} `{}`: {source}", path.display())]
    Read {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file holds no usable PEM item of the expected kind.
    #[error("tls: {what} `{}` {reason}", path.display())]
    Pem {
        what: &'static str,
        path: PathBuf,
        reason: String,
    },
    /// rustls refused the material (a key that does not match its certificate, …).
    #[error("tls: {what}: {source}")]
    Rustls { what: String, source: rustls::Error },
    /// The client-certificate verifier could not be built from the CA file.
    #[error("tls: client CA `{}`: {reason}", path.display())]
    ClientCa { path: PathBuf, reason: String },
    /// The system's root certificates could not be read.
    #[error("tls: no CA configured and the system's root certificates cannot be read: {0}")]
    NativeRoots(String),
    /// A server name is not a valid DNS name or IP address.
    #[error("tls: `{0}` is not a valid server name")]
    ServerName(String),
}

/// The crypto provider every babysitter TLS config is built with.
pub(crate) fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

fn read(what: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        what,
        path: path.to_owned(),
        source,
    })
}

/// Every certificate of a PEM file (at least one).
pub(crate) fn read_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(what, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::Pem {
            what,
            path: path.to_owned(),
            reason: format!("is not valid PEM: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::Pem {
            what,
            path: path.to_owned(),
            reason: "holds no CERTIFICATE block".into(),
        });
    }
    Ok(certs)
}

/// The private key of a PEM file.
pub(crate) fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let what = "private key";
    let pem = read(what, path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::Pem {
        what,
        path: path.to_owned(),
        reason: format!("holds no usable private key (PKCS#8, PKCS#1 or SEC1 PEM): {e}"),
    })
}

/// A root store of the CA certificates in `path`.
pub(crate) fn read_roots(
    what: &'static str,
    path: &Path,
) -> Result<rustls::RootCertStore, TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in read_certs(what, path)? {
        roots.add(cert).map_err(|source| TlsError::Rustls {
            what: format!("{what} `{}`", path.display()),
            source,
        })?;
    }
    Ok(roots)
}

/// What the files of a TLS config looked like when last loaded: their modification times and
/// sizes (a Kubernetes Secret update swaps a symlink; `metadata` follows it).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Fingerprint(Vec<Option<(std::time::SystemTime, u64)>>);

impl Fingerprint {
    pub(crate) fn of<'a>(paths: impl IntoIterator<Item = &'a Path>) -> Self {
        Self(
            paths
                .into_iter()
                .map(|p| {
                    let m = std::fs::metadata(p).ok()?;
                    Some((m.modified().ok()?, m.len()))
                })
                .collect(),
        )
    }
}
