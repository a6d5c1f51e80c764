//! The gRPC adapter of the control API (`babysitter.transport_proxy.v1.TransportProxyService`):
//! authorize (admin role), convert prost ⇄ domain, call [`crate::control`], map the error.
//! Prost types stop here.
//!
//! Keys never travel: an upserted route names an env var or a file, read here through the
//! environment the binary captured at start ([`EnvMap`]), never `std::env` deep in the code.

use std::sync::Arc;
use std::time::Duration;

use babysitter_common::auth::{Role, require_role};
use babysitter_common::env::EnvMap;
use babysitter_common::error::{ErrorKind, status};
use babysitter_proto::transport_proxy::v1 as pb;
use pb::transport_proxy_service_server::{TransportProxyService, TransportProxyServiceServer};
use tonic::{Request, Response, Status};

use crate::config::{Policy, Provider, Route, Upstream, read_secret};
use crate::control::ControlError;
use crate::forward::Proxy;
use crate::metrics::get;
use crate::protocol::Protocol;

/// `TransportProxyService` over a [`Proxy`].
#[derive(Debug, Clone)]
pub struct TransportProxyGrpcServer {
    proxy: Arc<Proxy>,
    env: EnvMap,
    since: prost_types::Timestamp,
}

impl TransportProxyGrpcServer {
    pub fn new(proxy: Arc<Proxy>, env: EnvMap) -> Self {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let since = prost_types::Timestamp {
            seconds: i64::try_from(now.as_secs()).unwrap_or(0),
            nanos: 0,
        };
        Self { proxy, env, since }
    }

    pub fn into_service(self) -> TransportProxyServiceServer<Self> {
        TransportProxyServiceServer::new(self)
    }
}

impl From<ControlError> for Status {
    fn from(e: ControlError) -> Self {
        let msg = e.to_string();
        match e {
            ControlError::Invalid(_) => status(ErrorKind::InvalidArgument, msg, false, &[]),
            ControlError::NotFound(_) => status(ErrorKind::NotFound, msg, false, &[]),
            ControlError::Conflict { .. } => status(ErrorKind::Conflict, msg, false, &[]),
            ControlError::Client(_) => status(ErrorKind::Internal, msg, false, &[]),
            ControlError::Persist(_) => status(ErrorKind::Unavailable, msg, true, &[]),
        }
    }
}

fn invalid(msg: impl Into<String>) -> Status {
    status(ErrorKind::InvalidArgument, msg, false, &[])
}

fn protocol_to_pb(p: Protocol) -> pb::Protocol {
    match p {
        Protocol::Anthropic => pb::Protocol::AnthropicMessages,
        Protocol::OpenAiChat => pb::Protocol::OpenaiChatCompletions,
        Protocol::OpenAiResponses => pb::Protocol::OpenaiResponses,
        Protocol::Gemini => pb::Protocol::GeminiGenerateContent,
    }
}

fn protocol_from_pb(v: i32) -> Result<Option<Protocol>, Status> {
    match pb::Protocol::try_from(v) {
        Ok(pb::Protocol::Unspecified) => Ok(None),
        Ok(pb::Protocol::AnthropicMessages) => Ok(Some(Protocol::Anthropic)),
        Ok(pb::Protocol::OpenaiChatCompletions) => Ok(Some(Protocol::OpenAiChat)),
        Ok(pb::Protocol::OpenaiResponses) => Ok(Some(Protocol::OpenAiResponses)),
        Ok(pb::Protocol::GeminiGenerateContent) => Ok(Some(Protocol::Gemini)),
        Err(_) => Err(invalid(format!("unknown protocol {v}"))),
    }
}

fn provider_to_pb(p: Provider) -> pb::ProviderKind {
    match p {
        Provider::Anthropic => pb::ProviderKind::Anthropic,
        Provider::Openai => pb::ProviderKind::Openai,
        Provider::AzureOpenai => pb::ProviderKind::AzureOpenai,
        Provider::Gemini => pb::ProviderKind::Gemini,
        Provider::Vertex => pb::ProviderKind::Vertex,
    }
}

fn provider_from_pb(v: i32) -> Result<Provider, Status> {
    match pb::ProviderKind::try_from(v) {
        Ok(pb::ProviderKind::Anthropic) => Ok(Provider::Anthropic),
        Ok(pb::ProviderKind::Openai) => Ok(Provider::Openai),
        Ok(pb::ProviderKind::AzureOpenai) => Ok(Provider::AzureOpenai),
        Ok(pb::ProviderKind::Gemini) => Ok(Provider::Gemini),
        Ok(pb::ProviderKind::Vertex) => Ok(Provider::Vertex),
        Ok(pb::ProviderKind::Unspecified) | Err(_) => {
            Err(invalid("route.upstream.provider is required"))
        }
    }
}

fn duration_to_pb(d: Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// A proto duration; zero or absent = `default`.
fn duration_from_pb(
    d: Option<prost_types::Duration>,
    default: Duration,
    field: &str,
) -> Result<Duration, Status> {
    match d {
        None => Ok(default),
        Some(d) if d.seconds == 0 && d.nanos == 0 => Ok(default),
        Some(d) => {
            let secs =
                u64::try_from(d.seconds).map_err(|_| invalid(format!("{field} is negative")))?;
            let nanos =
                u32::try_from(d.nanos).map_err(|_| invalid(format!("{field} is negative")))?;
            Ok(Duration::new(secs, nanos))
        }
    }
}

fn route_to_pb(r: &Route) -> pb::Route {
    let u = &r.upstream;
    pb::Route {
        name: r.name.clone(),
        r#match: Some(pb::RouteMatch {
            inbound_protocol: r.front.map_or(pb::Protocol::Unspecified, protocol_to_pb) as i32,
            models: r.models.clone(),
        }),
        upstream: Some(pb::Upstream {
            provider: provider_to_pb(u.provider) as i32,
            protocol: protocol_to_pb(u.protocol) as i32,
            base_url: u.base_url.clone(),
            model: u.model.clone().unwrap_or_default(),
            api_key_env: u.api_key_env.clone().unwrap_or_default(),
            api_key_file: u
                .api_key_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            pass_through_client_key: u.pass_through_client_key,
            azure_deployment: u.azure_deployment.clone().unwrap_or_default(),
            azure_api_version: u.azure_api_version.clone().unwrap_or_default(),
            extra_headers: u.extra_headers.iter().cloned().collect(),
        }),
        policy: Some(pb::RoutePolicy {
            connect_timeout: Some(duration_to_pb(r.policy.connect_timeout)),
            first_byte_timeout: Some(duration_to_pb(r.policy.first_byte_timeout)),
            idle_timeout: Some(duration_to_pb(r.policy.idle_timeout)),
            max_retries: r.policy.max_retries,
        }),
        priority: r.priority,
    }
}

fn non_empty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

impl TransportProxyGrpcServer {
    /// Validates a proto route into a domain route, reading its key (env var or file).
    fn route_from_pb(&self, r: pb::Route) -> Result<Route, Status> {
        let m = r.r#match.unwrap_or_default();
        let u = r
            .upstream
            .ok_or_else(|| invalid("route.upstream is required"))?;
        let provider = provider_from_pb(u.provider)?;
        let mut up = Upstream::new(provider, u.base_url.clone());
        if u.base_url.is_empty() {
            up.base_url = provider
                .default_base_url()
                .ok_or_else(|| invalid("route.upstream.base_url is required for this provider"))?
                .to_owned();
        }
        if let Some(p) = protocol_from_pb(u.protocol)? {
            up.protocol = p;
        }
        up.model = non_empty(u.model);
        up.api_key_env = non_empty(u.api_key_env);
        up.api_key_file = non_empty(u.api_key_file).map(Into::into);
        up.api_key = read_secret(up.api_key_env.as_ref(), up.api_key_file.as_ref(), &|k| {
            self.env.get(k).map(str::to_owned)
        })
        .map_err(|e| invalid(e.to_string()))?;
        up.pass_through_client_key = u.pass_through_client_key;
        up.azure_deployment = non_empty(u.azure_deployment);
        up.azure_api_version = non_empty(u.azure_api_version);
        let mut headers: Vec<(String, String)> = u.extra_headers.into_iter().collect();
        headers.sort();
        up.extra_headers = headers;
        let defaults = Policy::default();
        let p = r.policy.unwrap_or_default();
        let policy = Policy {
            connect_timeout: duration_from_pb(
                p.connect_timeout,
                defaults.connect_timeout,
                "connect_timeout",
            )?,
            first_byte_timeout: duration_from_pb(
                p.first_byte_timeout,
                defaults.first_byte_timeout,
                "first_byte_timeout",
            )?,
            idle_timeout: duration_from_pb(p.idle_timeout, defaults.idle_timeout, "idle_timeout")?,
            max_retries: if p.max_retries == 0 {
                defaults.max_retries
            } else {
                p.max_retries
            },
            retry_backoff: defaults.retry_backoff,
        };
        Ok(Route {
            name: r.name,
            front: protocol_from_pb(m.inbound_protocol)?,
            models: m.models,
            priority: r.priority,
            upstream: up,
            policy,
        })
    }
}

/// Runs a route change off the runtime's workers (it may write the routes state file) and to
/// completion even when the caller goes away.
async fn blocking<T: Send + 'static>(
    change: impl FnOnce() -> Result<T, ControlError> + Send + 'static,
) -> Result<T, Status> {
    match tokio::task::spawn_blocking(change).await {
        Ok(r) => r.map_err(Status::from),
        Err(e) => Err(status(
            ErrorKind::Internal,
            format!("route change task failed: {e}"),
            false,
            &[],
        )),
    }
}

fn histogram((buckets, count, sum): (Vec<(f64, u64)>, u64, f64)) -> pb::LatencyHistogram {
    pb::LatencyHistogram {
        buckets: buckets
            .into_iter()
            .map(|(le, n)| pb::HistogramBucket {
                le_seconds: le,
                cumulative_count: n,
            })
            .collect(),
        count,
        sum_seconds: sum,
    }
}

#[tonic::async_trait]
impl TransportProxyService for TransportProxyGrpcServer {
    async fn list_routes(
        &self,
        request: Request<pb::ListRoutesRequest>,
    ) -> Result<Response<pb::ListRoutesResponse>, Status> {
        require_role(&request, &[Role::Admin])?;
        let (routes, revision) = self.proxy.list_routes();
        Ok(Response::new(pb::ListRoutesResponse {
            routes: routes.iter().map(route_to_pb).collect(),
            revision,
        }))
    }

    async fn upsert_route(
        &self,
        request: Request<pb::UpsertRouteRequest>,
    ) -> Result<Response<pb::UpsertRouteResponse>, Status> {
        require_role(&request, &[Role::Admin])?;
        let req = request.into_inner();
        let route = self.route_from_pb(req.route.ok_or_else(|| invalid("route is required"))?)?;
        let shown = route_to_pb(&route);
        let proxy = self.proxy.clone();
        let (revision, created) =
            blocking(move || proxy.upsert_route(route, req.expected_revision)).await?;
        Ok(Response::new(pb::UpsertRouteResponse {
            route: Some(shown),
            revision,
            created,
        }))
    }

    async fn delete_route(
        &self,
        request: Request<pb::DeleteRouteRequest>,
    ) -> Result<Response<pb::DeleteRouteResponse>, Status> {
        require_role(&request, &[Role::Admin])?;
        let req = request.into_inner();
        let proxy = self.proxy.clone();
        let revision =
            blocking(move || proxy.delete_route(&req.name, req.expected_revision)).await?;
        Ok(Response::new(pb::DeleteRouteResponse { revision }))
    }

    async fn get_route_stats(
        &self,
        request: Request<pb::GetRouteStatsRequest>,
    ) -> Result<Response<pb::GetRouteStatsResponse>, Status> {
        require_role(&request, &[Role::Admin])?;
        let names = request.into_inner().route_names;
        let routes = self
            .proxy
            .route_stats(&names)?
            .into_iter()
            .map(|(name, st)| pb::RouteStats {
                route_name: name,
                requests: get(&st.requests),
                streaming_requests: get(&st.streaming_requests),
                errors: get(&st.errors),
                errors_by_class: st
                    .errors_by_class()
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), v))
                    .collect(),
                retries: get(&st.retries),
                input_tokens: get(&st.input_tokens),
                output_tokens: get(&st.output_tokens),
                cache_read_tokens: get(&st.cache_read_tokens),
                cache_write_tokens: get(&st.cache_write_tokens),
                latency: Some(histogram(st.histogram())),
                first_byte_latency: Some(histogram(st.first_byte_histogram())),
            })
            .collect();
        Ok(Response::new(pb::GetRouteStatsResponse {
            routes,
            since: Some(self.since),
        }))
    }
}
