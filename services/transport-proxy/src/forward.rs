//! The proxy core: one request from any front to the route's upstream, translated or passed
//! through, streamed or not.
//!
//! Why one path for all sixteen protocol pairs: with every protocol decoded into and encoded
//! from the canonical model ([`crate::protocol`]), a pair is just (front, upstream protocol).
//! When they are equal the request is *passed through* — the client's body with only the model
//! overridden, the upstream's bytes unchanged — so same-provider reasoning signatures,
//! encrypted content and unknown fields survive byte for byte (T1); the canonical decode still
//! runs for validation, routing and metrics. Handlers in [`crate::server`] only extract HTTP
//! parts and call [`Proxy::generate`] / [`Proxy::count_tokens`].

use std::sync::Arc;

use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures::StreamExt;
use http::{HeaderMap, HeaderValue, StatusCode, header};
use serde_json::{Value, json};
use tokio_stream::wrappers::ReceiverStream;

use crate::canonical::Usage;
use crate::checks::{estimate_tokens, validate_pairing};
use crate::config::{ProxyConfig, Route};
use crate::cost::{CostContext, CostSink, InFlight, RequestLog, RequestRecord};
use crate::error::{ErrorKind, ProxyError};
use crate::metrics::RouteStats;
use crate::pipeline::{Output, StreamOutcome, spawn_stream};
use crate::protocol::{self, EncodeOptions, Protocol, UrlFacts};
use crate::sigstore::SignatureStore;
use crate::upstream::{self, Call};

/// One configured route with its HTTP client and counters.
#[derive(Debug)]
pub struct RouteRuntime {
    pub route: Route,
    pub client: reqwest::Client,
    pub stats: Arc<RouteStats>,
    /// Non-streaming and streaming generate URLs, parsed once when model-independent.
    generate_urls: [Option<reqwest::Url>; 2],
}

/// The routes in force, replaced as a whole on every change (requests in flight keep the
/// snapshot they started with).
#[derive(Debug, Default)]
pub struct RouteTable {
    /// Increases on every change (compare-and-set for the control API).
    pub revision: u64,
    pub routes: Vec<Arc<RouteRuntime>>,
}

/// The proxy: configuration, the route table, per-route stats, the signature store.
#[derive(Debug)]
pub struct Proxy {
    /// The configuration the proxy started with (its `routes` are the initial table).
    pub config: ProxyConfig,
    table: std::sync::RwLock<Arc<RouteTable>>,
    /// Serializes route changes and their write to the routes state file, so none is lost;
    /// requests only ever take `table`'s read lock, never wait for this.
    writer: std::sync::Mutex<()>,
    /// Stats by route name, kept across route updates.
    stats: std::sync::Mutex<std::collections::HashMap<String, Arc<RouteStats>>>,
    pub store: SignatureStore,
    cost: CostSink,
    started: tokio::time::Instant,
}

/// Per-request accounting: route stats, and a cost record for babysitter-keyed requests (and
/// for every request when the sink collects).
#[derive(Debug, Clone)]
struct Accounting {
    stats: Arc<RouteStats>,
    sink: CostSink,
    ctx: Option<CostContext>,
    request_id: String,
    route: String,
    model: String,
    started: tokio::time::Instant,
    /// Counts the request in flight in a collecting sink until the last clone is dropped
    /// (after [`Accounting::done`]).
    _in_flight: Option<Arc<InFlight>>,
}

impl Accounting {
    fn done(&self, usage: &Usage, failure: Option<&'static str>) {
        let elapsed = self.started.elapsed();
        match failure {
            Some(class) => self.stats.fail(class, usage, elapsed),
            None => self.stats.finish(usage, false, elapsed),
        }
        if self.ctx.is_some() || self.sink.collects() {
            let record = RequestRecord {
                request_id: self.request_id.clone(),
                route: self.route.clone(),
                model: self.model.clone(),
                usage: *usage,
                failed: failure.is_some(),
                duration: elapsed,
            };
            self.sink.finish(self.ctx.as_ref(), record);
        }
    }
}

/// A request as the front received it.
#[derive(Debug)]
pub struct Inbound {
    pub front: Protocol,
    pub body: Bytes,
    pub headers: HeaderMap,
    pub query: Option<String>,
    pub url: UrlFacts,
    /// The `x-request-id` the answer carries (the client's, or one the front minted).
    pub request_id: String,
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    #[error("upstream http client: {0}")]
    Client(#[from] reqwest::Error),
    #[error("signature store: {0}")]
    Store(#[from] std::io::Error),
}

impl Proxy {
    /// Builds the clients (one per route, for its connect timeout) and opens the store.
    pub fn new(config: ProxyConfig) -> Result<Arc<Self>, BuildError> {
        Self::build(config).map(Arc::new)
    }

    /// [`Proxy::new`] whose cost sink also collects a record of every finished generate
    /// request, for the owner to take from the returned log (the launcher's per-task proxy).
    pub fn collecting(config: ProxyConfig) -> Result<(Arc<Self>, RequestLog), BuildError> {
        let mut proxy = Self::build(config)?;
        let (sink, log) = std::mem::take(&mut proxy.cost).collecting();
        proxy.cost = sink;
        Ok((Arc::new(proxy), log))
    }

    fn build(config: ProxyConfig) -> Result<Self, BuildError> {
        let store = match &config.data_dir {
            Some(dir) => SignatureStore::open(
                dir,
                config.signature_store_max_entries,
                config.signature_store_ttl,
            )?,
            None => {
                tracing::info!("no data-dir: gemini thought signatures kept in memory only");
                SignatureStore::memory(config.signature_store_max_entries)
            }
        };
        let cost = match &config.data_dir {
            Some(dir) => CostSink::open(dir)?,
            None => CostSink::default(),
        };
        let proxy = Self {
            cost,
            table: std::sync::RwLock::default(),
            writer: std::sync::Mutex::default(),
            stats: std::sync::Mutex::default(),
            config,
            store,
            started: tokio::time::Instant::now(),
        };
        let mut routes = Vec::with_capacity(proxy.config.routes.len());
        for route in &proxy.config.routes {
            routes.push(Arc::new(proxy.runtime(route.clone())?));
        }
        let revision = proxy.config.routes_revision.max(1);
        *proxy.table.write().unwrap_or_else(|p| p.into_inner()) =
            Arc::new(RouteTable { revision, routes });
        Ok(proxy)
    }

    /// A route with its own client (for its connect timeout) and its stats by name.
    pub(crate) fn runtime(&self, route: Route) -> Result<RouteRuntime, reqwest::Error> {
        let client = reqwest::Client::builder()
            .connect_timeout(route.policy.connect_timeout)
            .build()?;
        let stats = self
            .stats
            .lock()
            .map(|mut s| s.entry(route.name.clone()).or_default().clone())
            .unwrap_or_default();
        let generate_urls = [false, true].map(|s| upstream::fixed_generate_url(&route.upstream, s));
        Ok(RouteRuntime {
            route,
            client,
            stats,
            generate_urls,
        })
    }

    /// The routes in force now.
    pub fn table(&self) -> Arc<RouteTable> {
        self.table
            .read()
            .map(|t| t.clone())
            .unwrap_or_else(|p| p.into_inner().clone())
    }

    /// Applies `change` to a copy of the table, writes the result to the routes state file
    /// when one is configured (blocking IO), and installs it with the next revision. A change
    /// that could not be made durable is not installed.
    pub(crate) fn replace_table<E: From<std::io::Error>>(
        &self,
        change: impl FnOnce(&mut RouteTable) -> Result<(), E>,
    ) -> Result<u64, E> {
        let _writer = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let current = self.table();
        let mut next = RouteTable {
            revision: current.revision + 1,
            routes: current.routes.clone(),
        };
        change(&mut next)?;
        if let Some(path) = &self.config.routes_state_file {
            crate::routes_state::save(path, next.revision, next.routes.iter().map(|r| &r.route))?;
        }
        let revision = next.revision;
        *self.table.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(next);
        Ok(revision)
    }

    /// Stats of every route ever configured, by name.
    pub fn stats_by_name(&self) -> Vec<(String, Arc<RouteStats>)> {
        let mut v: Vec<(String, Arc<RouteStats>)> = self
            .stats
            .lock()
            .map(|s| s.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    pub fn uptime_secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    fn route(&self, front: Protocol, model: &str) -> Result<Arc<RouteRuntime>, ProxyError> {
        let table = self.table();
        crate::config::select_route(table.routes.iter().map(|r| &r.route), front, model)
            .and_then(|i| table.routes.get(i).cloned())
            .ok_or(ProxyError::NoRoute)
    }

    /// `POST /v1/messages`, `/v1/chat/completions`, `/v1/responses`, Gemini `:generateContent`
    /// and `:streamGenerateContent`.
    ///
    /// Runs in the request's span (`server::request_span`).
    pub async fn generate(&self, inb: Inbound) -> Result<Response, ProxyError> {
        let canon = protocol::decode_request(inb.front, &inb.body, &inb.url)?;
        let rt = self.route(inb.front, &canon.model)?;
        let rt = &*rt;
        let up = &rt.route.upstream;
        rt.stats
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if canon.stream {
            rt.stats
                .streaming_requests
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        let started = tokio::time::Instant::now();
        let model = up.model.clone().unwrap_or_else(|| canon.model.clone());
        let acct = Accounting {
            stats: rt.stats.clone(),
            sink: self.cost.clone(),
            ctx: CostContext::from_headers(&inb.headers),
            request_id: inb.request_id.clone(),
            route: rt.route.name.clone(),
            model: model.clone(),
            started,
            _in_flight: self.cost.begin(),
        };
        let fail = |e: ProxyError| {
            acct.done(&Usage::default(), Some(e.class()));
            e
        };
        validate_pairing(&canon, up.protocol != Protocol::Gemini).map_err(fail)?;
        if up.protocol != inb.front {
            crate::checks::translatable(inb.front, &inb.body).map_err(fail)?;
        }
        let passthrough = up.protocol == inb.front;
        let body = if passthrough {
            let mut v: Value = serde_json::from_slice(&inb.body)
                .map_err(|e| fail(ProxyError::invalid("body", e.to_string())))?;
            if inb.front != Protocol::Gemini
                && let Some(obj) = v.as_object_mut()
            {
                obj.insert("model".to_owned(), json!(model));
            }
            v
        } else {
            let opts = EncodeOptions {
                default_max_tokens: up.default_max_tokens,
                forward_reasoning_effort: up.forward_reasoning_effort,
            };
            protocol::encode_request(up.protocol, &canon, &model, opts, &self.store)
                .map_err(fail)?
        };
        let fixed = rt.generate_urls[usize::from(canon.stream)].as_ref();
        let url = match fixed {
            Some(_) => String::new(),
            None => upstream::url(
                up,
                &model,
                Call::Generate {
                    stream: canon.stream,
                },
            ),
        };
        let key = upstream::client_key(&inb.headers, inb.query.as_deref());
        let make = || match fixed {
            Some(u) => upstream::build(
                &rt.client,
                up,
                u.clone(),
                &body,
                &inb.headers,
                key.as_deref(),
            ),
            None => upstream::build(
                &rt.client,
                up,
                url.as_str(),
                &body,
                &inb.headers,
                key.as_deref(),
            ),
        };
        let resp = upstream::send(make, &rt.route.policy, &rt.stats)
            .await
            .map_err(fail)?;
        tracing::debug!(route = %rt.route.name, passthrough, stream = canon.stream, "upstream answered");
        if canon.stream {
            rt.stats.first_byte(started.elapsed());
            let output = if passthrough {
                Output::Raw(inb.front)
            } else {
                Output::Encode(protocol::stream_encoder(
                    inb.front,
                    &ulid::Ulid::generate().to_string(),
                    model,
                    canon.include_usage,
                ))
            };
            let acct = acct.clone();
            let done = Box::new(move |o: StreamOutcome| {
                acct.done(&o.usage, o.failed.map(ErrorKind::class));
            });
            let rx = spawn_stream(
                resp.bytes_stream(),
                protocol::stream_decoder(up.protocol, &self.store),
                output,
                rt.route.policy.idle_timeout,
                done,
            );
            return Ok(sse_response(rx));
        }
        let bytes = upstream::read_body(resp, rt.route.policy.idle_timeout)
            .await
            .map_err(fail)?;
        if passthrough {
            let usage = protocol::decode_response(up.protocol, &bytes, &self.store)
                .map(|r| r.usage)
                .unwrap_or_default();
            acct.done(&usage, None);
            return Ok(json_bytes(bytes));
        }
        let result = protocol::decode_response(up.protocol, &bytes, &self.store)
            .and_then(|r| Ok((protocol::encode_response(inb.front, &r)?, r.usage)));
        match result {
            Ok((v, usage)) => {
                acct.done(&usage, None);
                Ok(axum::Json(v).into_response())
            }
            Err(e) => Err(fail(e)),
        }
    }

    /// Token counting (spec §14): the upstream's own endpoint for same-protocol Anthropic and
    /// Gemini routes, else a local estimate (logged as such). Returns the count.
    pub async fn count_tokens(&self, mut inb: Inbound) -> Result<u64, ProxyError> {
        if inb.front == Protocol::Anthropic {
            // count_tokens bodies carry no max_tokens; the decoder requires it.
            let mut v: Value = serde_json::from_slice(&inb.body)
                .map_err(|e| ProxyError::invalid("body", e.to_string()))?;
            if let Some(obj) = v.as_object_mut() {
                obj.entry("max_tokens").or_insert(json!(1));
                obj.remove("stream");
            }
            inb.body = Bytes::from(v.to_string());
        }
        let canon = protocol::decode_request(inb.front, &inb.body, &inb.url)?;
        let rt = self.route(inb.front, &canon.model)?;
        let rt = &*rt;
        let up = &rt.route.upstream;
        let model = up.model.clone().unwrap_or_else(|| canon.model.clone());
        if up.protocol == inb.front && matches!(up.protocol, Protocol::Anthropic | Protocol::Gemini)
        {
            let mut body: Value = serde_json::from_slice(&inb.body)
                .map_err(|e| ProxyError::invalid("body", e.to_string()))?;
            if let Some(obj) = body.as_object_mut() {
                obj.remove("max_tokens");
                if up.protocol == Protocol::Anthropic {
                    obj.insert("model".to_owned(), json!(model));
                }
            }
            let url = upstream::url(up, &model, Call::CountTokens);
            let key = upstream::client_key(&inb.headers, inb.query.as_deref());
            let make =
                || upstream::build(&rt.client, up, &url, &body, &inb.headers, key.as_deref());
            let resp = upstream::send(make, &rt.route.policy, &rt.stats).await?;
            let bytes = upstream::read_body(resp, rt.route.policy.idle_timeout).await?;
            let v: Value = serde_json::from_slice(&bytes)
                .map_err(|e| ProxyError::UpstreamProtocol(e.to_string()))?;
            return v
                .get("input_tokens")
                .or_else(|| v.get("totalTokens"))
                .and_then(Value::as_u64)
                .ok_or_else(|| ProxyError::UpstreamProtocol("no token count in answer".into()));
        }
        let n = estimate_tokens(&canon);
        tracing::debug!(tokens = n, route = %rt.route.name, "token count is a local estimate");
        Ok(n)
    }

    /// `ANY /passthrough/*` (spec §2.1): the request goes unchanged (method, path after the
    /// prefix, query without `key=`, body) to the upstream of the highest-priority catch-all
    /// route (one without a front), with that upstream's authentication; the answer comes back
    /// unchanged, status and body streamed. No translation, no retries.
    pub async fn passthrough(
        &self,
        method: http::Method,
        rest: &str,
        inb: Inbound,
    ) -> Result<Response, ProxyError> {
        let table = self.table();
        // Highest priority, earliest on ties.
        let mut best: Option<&Arc<RouteRuntime>> = None;
        for r in table.routes.iter().filter(|r| r.route.front.is_none()) {
            if best.is_none_or(|b| r.route.priority > b.route.priority) {
                best = Some(r);
            }
        }
        let rt = best.cloned().ok_or(ProxyError::NoRoute)?;
        let up = &rt.route.upstream;
        let url = upstream::passthrough_url(up, rest, inb.query.as_deref());
        let key = upstream::client_key(&inb.headers, inb.query.as_deref());
        let mut headers = upstream::headers(up, &inb.headers, key.as_deref());
        if let Some(ct) = inb.headers.get(header::CONTENT_TYPE) {
            headers.insert(header::CONTENT_TYPE, ct.clone());
        }
        rt.stats
            .requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let started = tokio::time::Instant::now();
        let send = rt
            .client
            .request(method, &url)
            .headers(headers)
            .body(inb.body)
            .send();
        let resp = match tokio::time::timeout(rt.route.policy.first_byte_timeout, send).await {
            Err(_) => Err(ProxyError::Timeout),
            Ok(Err(e)) if e.is_timeout() => Err(ProxyError::Timeout),
            Ok(Err(_)) => Err(ProxyError::Connect(
                "connection to upstream failed".to_owned(),
            )),
            Ok(Ok(r)) => Ok(r),
        };
        let resp = match resp {
            Ok(r) => r,
            Err(e) => {
                rt.stats
                    .fail(e.class(), &Usage::default(), started.elapsed());
                return Err(e);
            }
        };
        rt.stats.finish(&Usage::default(), false, started.elapsed());
        let status = resp.status();
        let kept: Vec<(http::HeaderName, HeaderValue)> = [
            header::CONTENT_TYPE,
            header::RETRY_AFTER,
            header::CACHE_CONTROL,
        ]
        .into_iter()
        .filter_map(|n| resp.headers().get(&n).cloned().map(|v| (n, v)))
        .collect();
        let mut out = Response::new(Body::from_stream(resp.bytes_stream()));
        *out.status_mut() = status;
        out.headers_mut().extend(kept);
        Ok(out)
    }

    /// Distinct model names the routes send upstream, else the route names.
    pub fn model_ids(&self) -> Vec<(String, &'static str)> {
        let mut out: Vec<(String, &'static str)> = Vec::new();
        for r in self.table().routes.iter().map(|r| &r.route) {
            let id = r.upstream.model.clone().unwrap_or_else(|| r.name.clone());
            let owner = r.upstream.protocol.name();
            if !out.iter().any(|(i, _)| *i == id) {
                out.push((id, owner));
            }
        }
        out
    }
}

fn json_bytes(bytes: Bytes) -> Response {
    let mut resp = Response::new(Body::from(bytes));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

fn sse_response(rx: tokio::sync::mpsc::Receiver<Bytes>) -> Response {
    let stream = ReceiverStream::new(rx).map(Ok::<Bytes, std::convert::Infallible>);
    let mut resp = Response::new(Body::from_stream(stream));
    *resp.status_mut() = StatusCode::OK;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}
