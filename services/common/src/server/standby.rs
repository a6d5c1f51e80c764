//! Serving as the active instance or standing by: [`Switched`] services.
//!
//! Why: of several orchestrators on one journal only the one holding its lease may act, yet
//! clients and workers should not have to know which one that is. So a port serves each of its
//! services through a [`Switched`] wrapper: while this process is active the call goes to the
//! local service; while it stands by the call is forwarded, unchanged (headers, bearer token,
//! streaming bodies), to the active instance's address ([`Forward`]); with no active instance
//! known it is answered `UNAVAILABLE` (retryable). Health and reflection are not switched: they
//! describe this process.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};

use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::server::NamedService;
use tonic::transport::{Channel, Endpoint};
use tower::ServiceExt as _;

use crate::error::{ErrorKind, status};

type Request = http::Request<Body>;
type Response = http::Response<Body>;

/// Where a standby forwards calls: the active instance's address, or nowhere yet.
#[derive(Debug, Clone, Default)]
pub struct Forward {
    target: Arc<RwLock<Option<(String, Channel)>>>,
    /// How `https://` addresses are dialled (unset: the system's roots).
    tls: Arc<RwLock<Option<crate::tls::ClientTls>>>,
}

impl Forward {
    pub fn new() -> Self {
        Self::default()
    }

    /// Dial `https://` addresses with `tls` (the active instance's CA, this one's client
    /// certificate under mTLS).
    pub fn use_tls(&self, tls: crate::tls::ClientTls) {
        *self
            .tls
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(tls);
    }

    /// Forward to `address` (`http://host:port` or `https://…`; connects lazily), or to nowhere
    /// (`None`). An address that does not parse is logged and treated as nowhere.
    pub fn set(&self, address: Option<&str>) {
        let mut target = self
            .target
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match address {
            None => *target = None,
            Some(a) if target.as_ref().is_some_and(|(current, _)| current == a) => {}
            Some(a) => match Endpoint::from_shared(a.to_owned()) {
                Ok(endpoint) => {
                    // An address that does not answer fails the call quickly (retryable), it
                    // does not hold it for the OS's connect timeout.
                    let endpoint = endpoint
                        .connect_timeout(std::time::Duration::from_secs(2))
                        .tcp_nodelay(true);
                    let channel = if a.starts_with("https://") {
                        let tls = self
                            .tls
                            .read()
                            .unwrap_or_else(std::sync::PoisonError::into_inner)
                            .clone();
                        let tls = match tls {
                            Some(t) => t,
                            None => match crate::tls::ClientTls::load(&Default::default()) {
                                Ok(t) => t,
                                Err(e) => {
                                    tracing::warn!(address = %a, error = %e, "cannot dial the active instance over TLS");
                                    *target = None;
                                    return;
                                }
                            },
                        };
                        endpoint.connect_with_connector_lazy(tls.connector())
                    } else {
                        endpoint.connect_lazy()
                    };
                    *target = Some((a.to_owned(), channel));
                }
                Err(e) => {
                    tracing::warn!(address = %a, error = %e, "the active instance's address is not a URL");
                    *target = None;
                }
            },
        }
    }

    /// How `https://` addresses are dialled (`None`: the system's roots).
    pub fn tls(&self) -> Option<crate::tls::ClientTls> {
        self.tls
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The current target's address.
    pub fn address(&self) -> Option<String> {
        self.target
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map(|(a, _)| a.clone())
    }

    fn channel(&self) -> Option<(String, Channel)> {
        self.target
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// The local service slot of a [`Switched`] service: filled while this process is active,
/// with the token that ends that activity.
#[derive(Debug)]
pub struct Switch<S> {
    local: Arc<RwLock<Option<(S, CancellationToken)>>>,
}

impl<S> Clone for Switch<S> {
    fn clone(&self) -> Self {
        Self {
            local: self.local.clone(),
        }
    }
}

impl<S: Clone> Switch<S> {
    /// Serve calls locally with `service` until `ended` is cancelled (a call still running then
    /// is answered `UNAVAILABLE`, retryable, since the activity it relied on is gone); `None`:
    /// stand by — forward them.
    pub fn set(&self, service: Option<(S, CancellationToken)>) {
        *self
            .local
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = service;
    }

    fn get(&self) -> Option<(S, CancellationToken)> {
        self.local
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

/// A service served locally while its [`Switch`] holds it, else forwarded (module doc).
pub struct Switched<S> {
    switch: Switch<S>,
    forward: Forward,
    fresh: Fresh,
}

/// Whether the local service may answer now (the lease is fresh on this process's clock).
pub type Fresh = Arc<dyn Fn() -> bool + Send + Sync>;

impl<S> std::fmt::Debug for Switched<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Switched")
            .field("forward", &self.forward.address())
            .finish_non_exhaustive()
    }
}

impl<S> Clone for Switched<S> {
    fn clone(&self) -> Self {
        Self {
            switch: self.switch.clone(),
            forward: self.forward.clone(),
            fresh: self.fresh.clone(),
        }
    }
}

impl<S: Clone> Switched<S> {
    /// A switched service standing by (nothing local yet), forwarding through `forward`; the
    /// returned [`Switch`] fills it. While filled, a call is served locally only when `fresh`
    /// says so, else answered `UNAVAILABLE`: an active process that was paused past its lease
    /// must not act (hand out a task) before it learns whether it was deposed.
    pub fn new(forward: Forward, fresh: Fresh) -> (Self, Switch<S>) {
        let switch = Switch {
            local: Arc::new(RwLock::new(None)),
        };
        (
            Self {
                switch: switch.clone(),
                forward,
                fresh,
            },
            switch,
        )
    }
}

impl<S: NamedService> NamedService for Switched<S> {
    const NAME: &'static str = S::NAME;
}

impl<S> tower::Service<Request> for Switched<S>
where
    S: tower::Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request) -> Self::Future {
        if let Some((local, ended)) = self.switch.get() {
            if (self.fresh)() && !ended.is_cancelled() {
                return Box::pin(async move {
                    tokio::select! {
                        answer = local.oneshot(req) => answer,
                        _ = ended.cancelled() => Ok(status(
                            ErrorKind::Unavailable,
                            "this instance stepped down while handling the call, which may have taken \
                             effect; retry (a CreateRun with the same idempotency key or run id \
                             makes no second run)",
                            true,
                            &[],
                        )
                        .into_http()),
                    }
                });
            }
            return Box::pin(async {
                Ok(status(
                    ErrorKind::Unavailable,
                    "this instance's lease is overdue for renewal: it may have been deposed; retry",
                    true,
                    &[],
                )
                .into_http())
            });
        }
        let Some((address, channel)) = self.forward.channel() else {
            return Box::pin(async {
                Ok(status(
                    ErrorKind::Unavailable,
                    "this instance stands by and no active instance is known yet; retry",
                    true,
                    &[],
                )
                .into_http())
            });
        };
        Box::pin(async move {
            match channel.oneshot(req).await {
                Ok(response) => Ok(response),
                Err(e) => Ok(status(
                    ErrorKind::Unavailable,
                    format!("the active instance at {address} is unreachable: {e}"),
                    true,
                    &[],
                )
                .into_http()),
            }
        })
    }
}
