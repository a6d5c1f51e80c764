//! The HTTP surface: the embedded page, the JSON API, the SSE streams and the actions, each
//! behind [`crate::auth::Gate`]. Handlers only parse, check access and call the board, the
//! detail readers or the source.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Form, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use babysitter_common::auth::Principal;
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_stream::wrappers::WatchStream;

use crate::auth::{Gate, Refused};
use crate::board::{Board, Query as BoardQuery};
use crate::detail;
use crate::model::{Bucket, Digest};
use crate::source::{Action, Source, SourceError};

const INDEX_HTML: &str = include_str!("assets/index.html");
const LOGIN_HTML: &str = include_str!("assets/login.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

#[derive(Clone)]
pub struct AppState {
    pub source: Arc<dyn Source>,
    pub board: Arc<Board>,
    pub gate: Arc<Gate>,
    /// `orchestrator`, `up` or `observe` (shown in the header).
    pub mode: &'static str,
    /// The server's stop: open streams end with it, so stopping never waits on a page that
    /// keeps a stream open (a step-down, a SIGTERM drain).
    pub stop: tokio_util::sync::CancellationToken,
}

pub fn router(state: AppState) -> axum::Router {
    axum::Router::new()
        .route("/", get(page))
        .route("/runs/{id}", get(page))
        .route("/assets/app.js", get(|| asset("text/javascript", APP_JS)))
        .route("/assets/app.css", get(|| asset("text/css", APP_CSS)))
        .route("/login", post(login))
        .route("/logout", post(logout))
        .route("/api/session", get(session))
        .route("/api/runs", get(runs))
        .route("/api/board", get(board))
        .route("/api/runs/{id}", get(run_detail))
        .route("/api/runs/{id}/journal", get(journal))
        .route("/api/runs/{id}/tasks/{effect}/log/{stream}", get(log))
        .route("/api/runs/{id}/stream", get(run_stream))
        .route("/api/stream", get(board_stream))
        .route("/api/runs/{id}/breakpoints/{effect}", post(resolve))
        .route("/api/runs/{id}/cancel", post(cancel))
        .route("/api/runs/{id}/halt", post(halt))
        .with_state(state)
}

async fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// An error answer: JSON with the message, at the kind's status.
fn fail(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({"error": message.into()}))).into_response()
}

fn source_error(e: SourceError) -> Response {
    let status = match &e {
        SourceError::NotFound(_) => StatusCode::NOT_FOUND,
        SourceError::Invalid(_) => StatusCode::BAD_REQUEST,
        SourceError::Conflict(_) => StatusCode::CONFLICT,
        SourceError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        SourceError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    fail(status, e.to_string())
}

/// A source's answer as JSON, or its error at the kind's status.
fn reply(r: crate::source::Result<Value>) -> Response {
    match r {
        Ok(v) => Json(v).into_response(),
        Err(e) => source_error(e),
    }
}

/// Why a request is not answered with data (small, so handlers' `Result`s stay small).
enum Denied {
    Refused(Refused),
    Status(StatusCode, String),
}

impl IntoResponse for Denied {
    fn into_response(self) -> Response {
        match self {
            Self::Refused(r) => refused(r),
            Self::Status(code, message) => fail(code, message),
        }
    }
}

fn refused(r: Refused) -> Response {
    match r {
        Refused::Unauthenticated => fail(StatusCode::UNAUTHORIZED, "log in with a client token"),
        Refused::Forbidden => fail(
            StatusCode::FORBIDDEN,
            "this token's role may not use the dashboard",
        ),
    }
}

fn login_page(status: StatusCode, message: &str) -> Response {
    let body = LOGIN_HTML.replace("{{message}}", &html_escape(message));
    (status, [(header::CACHE_CONTROL, "no-store")], Html(body)).into_response()
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

async fn page(State(s): State<AppState>, headers: HeaderMap) -> Response {
    match s.gate.principal(&headers) {
        Ok(_) => (
            [
                (header::CACHE_CONTROL, "no-store"),
                (header::CONTENT_SECURITY_POLICY, "default-src 'self'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self' data:; frame-ancestors 'none'"),
            ],
            Html(INDEX_HTML),
        )
            .into_response(),
        Err(Refused::Unauthenticated) => login_page(StatusCode::UNAUTHORIZED, ""),
        Err(Refused::Forbidden) => login_page(
            StatusCode::FORBIDDEN,
            "this token's role may not use the dashboard (a client or admin token may)",
        ),
    }
}

#[derive(Deserialize)]
struct LoginForm {
    token: String,
}

async fn login(State(s): State<AppState>, Form(f): Form<LoginForm>) -> Response {
    match s.gate.check(f.token.trim()) {
        Ok(_) => {
            let cookie = s.gate.set_cookie(Some(f.token.trim()));
            ([(header::SET_COOKIE, cookie)], Redirect::to("/")).into_response()
        }
        Err(Refused::Unauthenticated) => {
            login_page(StatusCode::UNAUTHORIZED, "that token is not accepted here")
        }
        Err(Refused::Forbidden) => login_page(
            StatusCode::FORBIDDEN,
            "that token's role may not use the dashboard",
        ),
    }
}

/// Clears the cookie (a forged logout only logs someone out: no check needed).
async fn logout(State(s): State<AppState>) -> Response {
    (
        [(header::SET_COOKIE, s.gate.set_cookie(None))],
        Redirect::to("/"),
    )
        .into_response()
}

/// The caller and the run they may see (not found when its namespace is not theirs).
fn visible_run(
    s: &AppState,
    headers: &HeaderMap,
    run_id: &str,
) -> Result<(Principal, Digest), Denied> {
    let who = s.gate.principal(headers).map_err(Denied::Refused)?;
    match s.board.get(run_id) {
        Some(d) if who.allows(&d.namespace) => Ok((who, d)),
        _ => Err(Denied::Status(
            StatusCode::NOT_FOUND,
            format!("run {run_id} not found"),
        )),
    }
}

async fn session(State(s): State<AppState>, headers: HeaderMap) -> Response {
    let who = match s.gate.principal(&headers) {
        Ok(w) => w,
        Err(r) => return refused(r),
    };
    Json(json!({
        "principal": who.name,
        "role": who.role.as_str(),
        "namespaces": who.namespaces,
        "csrf": s.gate.csrf(&headers),
        "authEnabled": s.gate.enabled(),
        "capabilities": s.source.capabilities(),
        "mode": s.mode,
        "buckets": Bucket::ALL.map(Bucket::as_str),
    }))
    .into_response()
}

#[derive(Deserialize, Default)]
struct RunsParams {
    #[serde(default)]
    q: String,
    bucket: Option<String>,
    status: Option<String>,
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
}

/// The caller and their query, or the answer refusing them.
fn board_query(
    s: &AppState,
    headers: &HeaderMap,
    p: RunsParams,
) -> Result<(Principal, BoardQuery), Denied> {
    let who = s.gate.principal(headers).map_err(Denied::Refused)?;
    let bucket = match p.bucket.as_deref().filter(|b| !b.is_empty()) {
        None => None,
        Some(b) => Some(Bucket::parse(b).ok_or_else(|| {
            Denied::Status(StatusCode::BAD_REQUEST, format!("unknown bucket `{b}`"))
        })?),
    };
    let q = BoardQuery {
        q: p.q.trim().to_lowercase(),
        bucket,
        status: p.status.filter(|s| !s.is_empty()),
        offset: p.offset,
        limit: p.limit.unwrap_or(100),
    };
    Ok((who, q))
}

/// A page of runs (search, bucket and status filters, offset and limit).
async fn runs(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(p): Query<RunsParams>,
) -> Response {
    match board_query(&s, &headers, p) {
        Ok((who, q)) => Json(s.board.page(&q, |d| who.allows(&d.namespace))).into_response(),
        Err(r) => r.into_response(),
    }
}

/// The whole board at once: counts and the first `limit` cards of each bucket.
async fn board(
    State(s): State<AppState>,
    headers: HeaderMap,
    Query(p): Query<RunsParams>,
) -> Response {
    match board_query(&s, &headers, p) {
        Ok((who, q)) => {
            Json(s.board.columns(&q, q.limit, |d| who.allows(&d.namespace))).into_response()
        }
        Err(r) => r.into_response(),
    }
}

async fn run_detail(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let (_, d) = match visible_run(&s, &headers, &id) {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    reply(detail::detail(s.source.as_ref(), &d).await)
}

#[derive(Deserialize)]
struct From_ {
    #[serde(default)]
    from: u64,
}

async fn journal(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(f): Query<From_>,
) -> Response {
    if let Err(r) = visible_run(&s, &headers, &id) {
        return r.into_response();
    }
    reply(detail::raw_journal(s.source.as_ref(), &id, f.from).await)
}

#[derive(Deserialize)]
struct Range {
    #[serde(default)]
    offset: usize,
    limit: Option<usize>,
}

async fn log(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path((id, effect, stream)): Path<(String, String, String)>,
    Query(r): Query<Range>,
) -> Response {
    if let Err(r) = visible_run(&s, &headers, &id) {
        return r.into_response();
    }
    let limit = r.limit.unwrap_or(16 << 10);
    reply(detail::log(s.source.as_ref(), &id, &effect, &stream, r.offset, limit).await)
}

type EventStream = std::pin::Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>>;

fn sse(s: &AppState, stream: EventStream) -> Response {
    let stream = stream.take_until(s.stop.clone().cancelled_owned());
    Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

/// The board's version whenever a digest changes; the page then reads its current page.
async fn board_stream(State(s): State<AppState>, headers: HeaderMap) -> Response {
    if let Err(r) = s.gate.principal(&headers) {
        return refused(r);
    }
    let versions = WatchStream::new(s.board.subscribe())
        .map(|v| Ok(Event::default().event("board").data(v.to_string())));
    sse(&s, Box::pin(versions))
}

/// The run's digest whenever it changes, and its live agent events where the source relays them.
async fn run_stream(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let (_, d) = match visible_run(&s, &headers, &id) {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    let board = s.board.clone();
    let run_id = id.clone();
    let mut last: Option<Digest> = None;
    let changes = WatchStream::new(s.board.subscribe()).filter_map(move |_| {
        let now = board.get(&run_id);
        let changed = now != last;
        last.clone_from(&now);
        let event = (changed && now.is_some()).then(|| {
            Ok(Event::default()
                .event("run")
                .data(serde_json::to_string(&now).unwrap_or_default()))
        });
        std::future::ready(event)
    });
    let agents = match s.source.agent_events(&d).await {
        Some(a) => a
            .map(|v: Value| Ok(Event::default().event("agent").data(v.to_string())))
            .boxed(),
        None => futures::stream::empty().boxed(),
    };
    sse(&s, Box::pin(futures::stream::select(changes, agents)))
}

#[derive(Deserialize)]
struct Decision {
    approved: bool,
    #[serde(default)]
    comment: String,
}

#[derive(Deserialize, Default)]
struct Reason {
    #[serde(default)]
    reason: String,
}

async fn act(s: &AppState, headers: &HeaderMap, id: &str, action: Action) -> Response {
    let (who, d) = match visible_run(s, headers, id) {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    if !s.gate.same_origin(headers) {
        // `code` is what the page matches (`post` in app.js), not the message.
        let refused = json!({
            "error": "cross-site request refused (missing or wrong csrf token)",
            "code": "csrf",
        });
        return (StatusCode::FORBIDDEN, Json(refused)).into_response();
    }
    reply(s.source.act(&who, &d, action).await)
}

async fn resolve(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path((id, effect)): Path<(String, String)>,
    Json(d): Json<Decision>,
) -> Response {
    let action = Action::Resolve {
        effect_id: effect,
        approved: d.approved,
        comment: d.comment,
    };
    act(&s, &headers, &id, action).await
}

async fn cancel(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(r): Json<Reason>,
) -> Response {
    act(&s, &headers, &id, Action::Cancel { reason: r.reason }).await
}

async fn halt(
    State(s): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Json(r): Json<Reason>,
) -> Response {
    act(&s, &headers, &id, Action::Halt { reason: r.reason }).await
}
