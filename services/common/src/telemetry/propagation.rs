//! W3C trace context (`traceparent`, `tracestate`) across gRPC hops.
//!
//! Clients add [`TraceContextInterceptor`] (or call [`inject_trace_context`]) so the current span
//! travels with the request; servers run [`TraceContextLayer`], which extracts it and opens the
//! request span `<Service>.<Method>` (from the path `/pkg.Service/Method`) as its child. Both use
//! the globally installed propagator (see [`super::init_telemetry`]).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use opentelemetry::Context;
use opentelemetry::propagation::{Extractor, Injector};
use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
use tonic::service::Interceptor;
use tonic::{Request, Status};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

/// Writes the current span's context into gRPC metadata.
pub fn inject_trace_context(metadata: &mut MetadataMap) {
    let cx = tracing::Span::current().context();
    opentelemetry::global::get_text_map_propagator(|p| {
        p.inject_context(&cx, &mut MetadataInjector(metadata))
    });
}

/// Anything trace context can be read from: HTTP headers or gRPC metadata.
pub trait HeaderCarrier {
    /// The headers.
    fn header_map(&self) -> &http::HeaderMap;
}

impl HeaderCarrier for http::HeaderMap {
    fn header_map(&self) -> &http::HeaderMap {
        self
    }
}

impl HeaderCarrier for MetadataMap {
    fn header_map(&self) -> &http::HeaderMap {
        self.as_ref()
    }
}

/// The remote parent context carried by `carrier` (empty when it carries none).
pub fn extract_trace_context(carrier: &impl HeaderCarrier) -> Context {
    opentelemetry::global::get_text_map_propagator(|p| {
        p.extract(&HeaderExtractor(carrier.header_map()))
    })
}

struct MetadataInjector<'a>(&'a mut MetadataMap);

impl Injector for MetadataInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let (Ok(key), Ok(value)) = (
            MetadataKey::from_bytes(key.as_bytes()),
            MetadataValue::try_from(value),
        ) {
            self.0.insert(key, value);
        }
    }
}

struct HeaderExtractor<'a>(&'a http::HeaderMap);

impl Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|v| v.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(http::HeaderName::as_str).collect()
    }
}

/// A span's W3C trace context as text (`traceparent`, `tracestate`): the form it takes where no
/// gRPC metadata or HTTP header can carry it — a run's `run.json` (so the run keeps one trace
/// across orchestrator restarts), a task assignment's fields, a process's `TRACEPARENT` /
/// `TRACESTATE` environment, a harness's custom-header settings.
///
/// Always the W3C format, whatever propagator is installed globally: these places are read by
/// other programs (harness CLIs, shell tasks, OTel SDKs) that expect exactly that.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct W3cContext {
    /// `00-<trace id>-<span id>-<flags>`.
    pub traceparent: String,
    /// Vendor entries; empty when there are none.
    pub tracestate: String,
}

/// The environment variables a process reads its parent's trace context from (the OTel
/// convention for environment carriers, and what Claude Code's own tracing reads).
pub const TRACEPARENT_ENV: &str = "TRACEPARENT";
/// See [`TRACEPARENT_ENV`].
pub const TRACESTATE_ENV: &str = "TRACESTATE";

impl W3cContext {
    /// `span`'s context; `None` when it has none to give (no OpenTelemetry layer installed, the
    /// span disabled by the filter).
    pub fn of_span(span: &tracing::Span) -> Option<Self> {
        Self::of_context(&span.context())
    }

    /// The context's span as text; `None` when it holds no valid span context.
    pub fn of_context(cx: &Context) -> Option<Self> {
        use opentelemetry::propagation::TextMapPropagator as _;
        use opentelemetry::trace::TraceContextExt as _;
        if !cx.span().span_context().is_valid() {
            return None;
        }
        let mut fields = std::collections::HashMap::new();
        opentelemetry_sdk::propagation::TraceContextPropagator::new()
            .inject_context(cx, &mut fields);
        Some(Self {
            traceparent: fields.remove("traceparent")?,
            tracestate: fields.remove("tracestate").unwrap_or_default(),
        })
    }

    /// A context read back (from run.json, an assignment); `None` unless `traceparent` is a
    /// valid one (empty, malformed or all-zero ids: outside input, ignored rather than trusted).
    pub fn parse(traceparent: &str, tracestate: &str) -> Option<Self> {
        let this = Self {
            traceparent: traceparent.trim().to_owned(),
            tracestate: tracestate.trim().to_owned(),
        };
        use opentelemetry::trace::TraceContextExt as _;
        this.context()
            .span()
            .span_context()
            .is_valid()
            .then_some(this)
    }

    /// The context an HTTP request or gRPC call carries in its `traceparent` / `tracestate`
    /// headers, when it carries a valid one.
    pub fn from_headers(carrier: &impl HeaderCarrier) -> Option<Self> {
        let headers = carrier.header_map();
        let h = |k| {
            headers
                .get(k)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
        };
        Self::parse(h("traceparent"), h("tracestate"))
    }

    /// Whether the sender records this trace (the `sampled` flag).
    pub fn sampled(&self) -> bool {
        use opentelemetry::trace::TraceContextExt as _;
        self.context().span().span_context().is_sampled()
    }

    /// The remote parent context it names.
    pub fn context(&self) -> Context {
        use opentelemetry::propagation::TextMapPropagator as _;
        let mut fields = std::collections::HashMap::new();
        fields.insert("traceparent".to_owned(), self.traceparent.clone());
        if !self.tracestate.is_empty() {
            fields.insert("tracestate".to_owned(), self.tracestate.clone());
        }
        opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(&fields)
    }

    /// `TRACEPARENT` and, when there is one, `TRACESTATE`, for a child process's environment.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![(TRACEPARENT_ENV, self.traceparent.clone())];
        if !self.tracestate.is_empty() {
            env.push((TRACESTATE_ENV, self.tracestate.clone()));
        }
        env
    }

    /// `(header name, value)` pairs for an HTTP request: `traceparent` and any `tracestate`.
    pub fn headers(&self) -> Vec<(&'static str, &str)> {
        let mut headers = vec![("traceparent", self.traceparent.as_str())];
        if !self.tracestate.is_empty() {
            headers.push(("tracestate", self.tracestate.as_str()));
        }
        headers
    }
}

/// Makes `span` (not yet entered) a child of the remote context `parent`. A no-op when the span
/// is disabled or no OpenTelemetry layer is installed: there is then nothing to link.
pub fn set_remote_parent(span: &tracing::Span, parent: &W3cContext) {
    let _ = span.set_parent(parent.context());
}

/// Links `span` (not yet entered) to `other`'s span: related (a run and the request that created
/// it) without being its child.
pub fn link_to(span: &tracing::Span, other: &tracing::Span) {
    use opentelemetry::trace::TraceContextExt as _;
    span.add_link(other.context().span().span_context().clone());
}

/// Client interceptor that injects the current span's `traceparent` into every request.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceContextInterceptor;

impl Interceptor for TraceContextInterceptor {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        inject_trace_context(request.metadata_mut());
        Ok(request)
    }
}

/// `/babysitter.journal.v1.JournalService/Append` → `("JournalService.Append", service, method)`;
/// anything else is named `grpc.unknown`.
pub fn span_name_for_path(path: &str) -> (String, &str, &str) {
    let mut parts = path.trim_start_matches('/').splitn(2, '/');
    match (parts.next(), parts.next()) {
        (Some(service), Some(method)) if !service.is_empty() && !method.is_empty() => {
            let short = service.rsplit('.').next().unwrap_or(service);
            (format!("{short}.{method}"), service, method)
        }
        _ => ("grpc.unknown".to_owned(), "", ""),
    }
}

/// Server layer: extracts the caller's trace context and runs the request inside a span named
/// `<Service>.<Method>` whose parent is the caller's span.
#[derive(Debug, Clone, Copy, Default)]
pub struct TraceContextLayer;

impl TraceContextLayer {
    /// The layer.
    pub fn new() -> Self {
        Self
    }
}

impl<S> tower::Layer<S> for TraceContextLayer {
    type Service = TraceContextService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        TraceContextService { inner }
    }
}

/// The service made by [`TraceContextLayer`].
#[derive(Debug, Clone)]
pub struct TraceContextService<S> {
    inner: S,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, ResBody> tower::Service<http::Request<B>> for TraceContextService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResBody: Send + 'static,
{
    type Response = http::Response<ResBody>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let (name, service, method) = span_name_for_path(req.uri().path());
        let span = tracing::info_span!(
            "grpc.server",
            otel.name = %name,
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = %service,
            rpc.method = %method,
            rpc.grpc.status_code = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        );
        let parent = extract_trace_context(req.headers());
        // Fails only when the span is disabled or has no OpenTelemetry layer: nothing to link.
        let _ = span.set_parent(parent);
        let future = {
            let _entered = span.enter();
            self.inner.call(req)
        };
        let record_on = span.clone();
        Box::pin(
            async move {
                let result = future.await;
                if let Ok(response) = &result {
                    // Trailers-only responses (errors, auth refusals) carry the status in headers.
                    if let Some(code) = response
                        .headers()
                        .get("grpc-status")
                        .and_then(|v| v.to_str().ok())
                    {
                        record_on.record("rpc.grpc.status_code", code);
                        if code != "0" {
                            record_on.record("otel.status_code", "ERROR");
                        }
                    }
                }
                result
            }
            .instrument(span),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_names_come_from_the_grpc_path() {
        let (name, service, method) =
            span_name_for_path("/babysitter.journal.v1.JournalService/Append");
        assert_eq!(name, "JournalService.Append");
        assert_eq!(service, "babysitter.journal.v1.JournalService");
        assert_eq!(method, "Append");
        assert_eq!(
            span_name_for_path("/grpc.health.v1.Health/Check").0,
            "Health.Check"
        );
        assert_eq!(span_name_for_path("/Plain/Do").0, "Plain.Do");
        assert_eq!(span_name_for_path("/").0, "grpc.unknown");
        assert_eq!(span_name_for_path("/only").0, "grpc.unknown");
    }

    #[test]
    fn w3c_context_round_trips_as_text() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let w = W3cContext::parse(tp, "congo=t61rcWkgMzE").unwrap();
        assert_eq!(W3cContext::of_context(&w.context()), Some(w.clone()));
        assert_eq!(
            w.env(),
            vec![
                (TRACEPARENT_ENV, tp.to_owned()),
                (TRACESTATE_ENV, "congo=t61rcWkgMzE".to_owned())
            ]
        );
        let bare = W3cContext::parse(tp, "").unwrap();
        assert_eq!(bare.headers(), vec![("traceparent", tp)]);
        assert!(bare.sampled());
        let mut headers = http::HeaderMap::new();
        headers.insert("traceparent", tp.parse().unwrap());
        assert_eq!(W3cContext::from_headers(&headers), Some(bare));
        let unsampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
        assert!(!W3cContext::parse(unsampled, "").unwrap().sampled());
        assert_eq!(W3cContext::from_headers(&http::HeaderMap::new()), None);
        assert_eq!(W3cContext::parse("", ""), None);
        assert_eq!(W3cContext::parse("garbage", ""), None);
        let zero = "00-00000000000000000000000000000000-00f067aa0ba902b7-01";
        assert_eq!(W3cContext::parse(zero, ""), None);
        assert_eq!(W3cContext::of_context(&Context::new()), None);
        // No OpenTelemetry layer in this test: a span has no context to give.
        assert_eq!(W3cContext::of_span(&tracing::info_span!("s")), None);
    }

    #[test]
    fn traceparent_round_trips_through_metadata() {
        opentelemetry::global::set_text_map_propagator(
            opentelemetry_sdk::propagation::TraceContextPropagator::new(),
        );
        let mut headers = http::HeaderMap::new();
        let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        headers.insert("traceparent", traceparent.parse().unwrap());
        let cx = extract_trace_context(&headers);
        use opentelemetry::trace::TraceContextExt as _;
        let sc = cx.span().span_context().clone();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        assert!(sc.is_remote());

        let mut metadata = MetadataMap::new();
        opentelemetry::global::get_text_map_propagator(|p| {
            p.inject_context(&cx, &mut MetadataInjector(&mut metadata));
        });
        assert_eq!(metadata.get("traceparent").unwrap(), traceparent);
        let back = extract_trace_context(&metadata);
        assert_eq!(back.span().span_context().trace_id(), sc.trace_id());

        assert!(
            !extract_trace_context(&http::HeaderMap::new())
                .span()
                .span_context()
                .is_valid()
        );
    }
}
