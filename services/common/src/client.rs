//! One way for a babysitter service (or the CLI) to call another: a lazily connected tonic
//! channel whose every request carries the caller's bearer token and W3C trace context.
//!
//! Lazy on purpose: a service starts even when its peer is not up yet (Kubernetes starts pods in
//! any order), and the first call reports `Unavailable`, which callers already treat as retryable.

use std::time::Duration;

use tonic::service::Interceptor;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Status};

use crate::auth::{AuthError, BearerAuthInterceptor, Secret};
use crate::telemetry::inject_trace_context;

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
}

/// A lazily connecting channel to `url` (`http://127.0.0.1:50051`) with connect and keep-alive
/// settings suited to long-lived service-to-service links.
pub fn connect_lazy(url: &str, token: Option<&Secret>) -> Result<AuthedChannel, ClientError> {
    let bad = |reason: String| ClientError::BadEndpoint {
        url: url.to_owned(),
        reason,
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(bad("it must start with http:// or https://".into()));
    }
    let endpoint = Endpoint::from_shared(url.to_owned())
        .map_err(|e| bad(e.to_string()))?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(30))
        .keep_alive_while_idle(true);
    Ok(InterceptedService::new(
        endpoint.connect_lazy(),
        CallInterceptor::new(token)?,
    ))
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
