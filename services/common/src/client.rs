//! One way for a babysitter service (or the CLI) to call another: a lazily connected tonic
//! channel whose every request carries the caller's bearer token and W3C trace context, under
//! the transport settings of [`ClientOptions`] (defined in `babysitter-proto`, the one place they
//! live).
//!
//! `https://` URLs are dialled over TLS ([`crate::tls`]): with the CA and client certificate of a
//! [`ClientTlsConfig`] ([`client_tls`], [`connect_lazy_tls`]), else the system's roots.
//!
//! Lazy on purpose: a service starts even when its peer is not up yet (Kubernetes starts pods in
//! any order), and the first call reports `Unavailable`, which callers already treat as retryable.
//!
//! ```ignore
//! let runs: RunServiceClient<AuthedChannel> = client(url, token.as_ref(), &ClientOptions::default())?;
//! ```

use babysitter_proto::client::{GrpcClient, InvalidEndpoint};
use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Request, Status};

pub use babysitter_proto::client::ClientOptions;

use crate::auth::{AuthError, BearerAuthInterceptor, Secret};
use crate::telemetry::inject_trace_context;
use crate::tls::{ClientTls, ClientTlsConfig, TlsError};

/// Adds `authorization` (when a token is configured) and `traceparent` to every request.
#[derive(Debug, Clone)]
pub struct CallInterceptor {
    auth: BearerAuthInterceptor,
}

impl CallInterceptor {
    pub fn new(token: Option<&Secret>) -> Result<Self, AuthError> {
        Ok(Self {
            auth: BearerAuthInterceptor::new(token)?,
        })
    }
}

impl Interceptor for CallInterceptor {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        let mut request = self.auth.call(request)?;
        inject_trace_context(request.metadata_mut());
        Ok(request)
    }
}

/// A channel wrapped with [`CallInterceptor`]: what generated clients are built on.
pub type AuthedChannel = InterceptedService<Channel, CallInterceptor>;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    #[error("`{url}` is not a usable gRPC endpoint: {reason}")]
    BadEndpoint { url: String, reason: String },
    #[error(transparent)]
    Auth(#[from] AuthError),
    #[error("`{url}`: {source}")]
    Tls { url: String, source: TlsError },
}

impl From<InvalidEndpoint> for ClientError {
    fn from(e: InvalidEndpoint) -> Self {
        ClientError::BadEndpoint {
            url: e.uri,
            reason: e.reason,
        }
    }
}

/// A lazily connecting channel to `url` (`http://127.0.0.1:50051`) with the default
/// [`ClientOptions`] connection settings (connect timeout, keepalive). Prefer [`client`], which
/// also applies the message-size and compression settings to the generated client.
pub fn connect_lazy(url: &str, token: Option<&Secret>) -> Result<AuthedChannel, ClientError> {
    connect_lazy_with(url, token, &ClientOptions::default())
}

/// [`connect_lazy`] with the connection settings of `options`.
pub fn connect_lazy_with(
    url: &str,
    token: Option<&Secret>,
    options: &ClientOptions,
) -> Result<AuthedChannel, ClientError> {
    connect_lazy_tls(url, token, options, &ClientTlsConfig::default())
}

/// [`connect_lazy_with`] with the TLS settings `tls` (used for `https://` URLs; given for an
/// `http://` URL they are refused, so a plaintext link is never mistaken for a secured one).
pub fn connect_lazy_tls(
    url: &str,
    token: Option<&Secret>,
    options: &ClientOptions,
    tls: &ClientTlsConfig,
) -> Result<AuthedChannel, ClientError> {
    let channel = if url.starts_with("https://") {
        let tls = ClientTls::load(tls).map_err(|source| ClientError::Tls {
            url: url.to_owned(),
            source,
        })?;
        options
            .endpoint(url)?
            .connect_with_connector_lazy(tls.connector())
    } else {
        if tls.is_set() {
            return Err(ClientError::BadEndpoint {
                url: url.to_owned(),
                reason: "TLS settings are given but the URL is not https://".into(),
            });
        }
        options.channel_lazy(url)?
    };
    Ok(InterceptedService::new(
        channel,
        CallInterceptor::new(token)?,
    ))
}

/// A generated client (`JournalServiceClient`, `RunServiceClient`, …, picked by the type asked
/// for) to `url` with `token` and trace context on every call, and every setting of `options`.
pub fn client<C: GrpcClient<AuthedChannel>>(
    url: &str,
    token: Option<&Secret>,
    options: &ClientOptions,
) -> Result<C, ClientError> {
    Ok(options.client(connect_lazy_with(url, token, options)?))
}

/// [`client`] with the TLS settings `tls` (see [`connect_lazy_tls`]).
pub fn client_tls<C: GrpcClient<AuthedChannel>>(
    url: &str,
    token: Option<&Secret>,
    options: &ClientOptions,
    tls: &ClientTlsConfig,
) -> Result<C, ClientError> {
    Ok(options.client(connect_lazy_tls(url, token, options, tls)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_urls_without_a_scheme() {
        let e = connect_lazy("127.0.0.1:1", None).unwrap_err();
        assert!(e.to_string().contains("http://"), "{e}");
    }

    #[test]
    fn adds_the_bearer_token() {
        let mut i = CallInterceptor::new(Some(&Secret::new("tok"))).unwrap();
        let r = i.call(Request::new(())).unwrap();
        assert_eq!(
            r.metadata().get("authorization").unwrap().to_str().unwrap(),
            "Bearer tok"
        );
    }
}
