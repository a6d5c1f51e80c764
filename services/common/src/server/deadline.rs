//! Server-side request timeout answering `DeadlineExceeded` (tonic's own timeout answers
//! `Cancelled`, which clients cannot tell apart from their own cancellation).
//!
//! The deadline covers the handler up to its response (for streaming RPCs: until the stream is
//! returned), never the life of a response stream.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::error::{ErrorKind, status};

/// Tower layer bounding each request by a fixed timeout (none when `None`).
#[derive(Debug, Clone, Copy)]
pub struct DeadlineLayer {
    timeout: Option<Duration>,
}

impl DeadlineLayer {
    /// A layer with `timeout` (`None`: no limit).
    pub fn new(timeout: Option<Duration>) -> Self {
        Self { timeout }
    }
}

impl<S> tower::Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Deadline {
            inner,
            timeout: self.timeout,
        }
    }
}

/// The service made by [`DeadlineLayer`].
#[derive(Debug, Clone)]
pub struct Deadline<S> {
    inner: S,
    timeout: Option<Duration>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, ResBody> tower::Service<http::Request<B>> for Deadline<S>
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
        let future = self.inner.call(req);
        let Some(timeout) = self.timeout else {
            return Box::pin(future);
        };
        Box::pin(async move {
            match tokio::time::timeout(timeout, future).await {
                Ok(result) => result,
                Err(_) => {
                    let message = format!(
                        "request timed out after {}",
                        humantime::format_duration(timeout)
                    );
                    Ok(status(ErrorKind::DeadlineExceeded, message, false, &[]).into_http())
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use tower::{Layer, Service, ServiceExt};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn slow_handlers_get_deadline_exceeded() {
        let inner = tower::service_fn(|req: http::Request<u64>| async move {
            tokio::time::sleep(Duration::from_secs(*req.body())).await;
            Ok::<_, std::convert::Infallible>(http::Response::new("done".to_owned()))
        });
        let mut svc = DeadlineLayer::new(Some(Duration::from_secs(10))).layer(inner);

        let resp = svc
            .ready()
            .await
            .unwrap()
            .call(http::Request::new(9))
            .await
            .unwrap();
        assert_eq!(resp.body(), "done");

        let resp = svc
            .ready()
            .await
            .unwrap()
            .call(http::Request::new(11))
            .await
            .unwrap();
        assert_eq!(
            resp.headers().get("grpc-status").unwrap(),
            "4",
            "DEADLINE_EXCEEDED"
        );
        assert_eq!(
            resp.headers().get("babysitter-error-kind").unwrap(),
            "timeout"
        );
        assert_eq!(resp.body(), "");

        let mut unbounded = DeadlineLayer::new(None).layer(svc.clone());
        let resp = unbounded
            .ready()
            .await
            .unwrap()
            .call(http::Request::new(5))
            .await
            .unwrap();
        assert_eq!(resp.body(), "done");
    }
}
