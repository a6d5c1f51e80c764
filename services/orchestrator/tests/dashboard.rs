//! The dashboard over the orchestrator's run manager, without a browser: its JSON API behind the
//! orchestrator's own tokens (namespaces hidden as `RunService` hides them, a worker token
//! refused), the board following the run table's change feed, and the page's actions going
//! through the same core as `ResolveBreakpoint` / `CancelRun` (the approver's principal
//! journaled); the board's listing of every run leaves the bounded finished-run cache (and the
//! idempotency keys it holds) to the most recently finished runs.

#[path = "support/service.rs"]
mod service_support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use babysitter_common::auth::{AuthConfig, Authenticator, Role};
use babysitter_dashboard::Board;
use babysitter_dashboard::Source as _;
use babysitter_dashboard::auth::Gate;
use babysitter_dashboard::http::{AppState, router};
use babysitter_journal::fs::FsStore;
use babysitter_journal::store::RunFile;
use babysitter_journal::{Journal, JournalOptions};
use babysitter_orchestrator::engine::Engine;
use babysitter_orchestrator::service::bundle::Bundle;
use babysitter_orchestrator::service::config::OrchestratorConfig;
use babysitter_orchestrator::service::dashboard::RunsSource;
use babysitter_orchestrator::service::queue::{QueueConfig, TaskQueue};
use babysitter_orchestrator::service::runs::{
    ManagerConfig, NewRun, RunManager, RunStatus, RunSummary,
};
use http::{Request, StatusCode, header};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt as _;

use service_support::*;

const GATED: &str = r#"
export async function process(inputs, ctx) {
  const ok = await ctx.breakpoint({ question: 'ship?' }, { label: 'gate' });
  return { approved: ok.approved };
}
"#;

async fn call(
    app: &axum::Router,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "dash.test")
        .header(header::CONTENT_TYPE, "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let res = app.clone().oneshot(req.body(body).unwrap()).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 24)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

async fn wait_for(board: &Board, mut ok: impl FnMut(&Board) -> bool) {
    for _ in 0..500 {
        if ok(board) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the board never showed what was expected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_serves_the_run_manager_behind_the_orchestrators_tokens() {
    let auth = AuthConfig {
        tokens: vec![
            token("alice", Role::Client, &["team-a"]),
            token("bob", Role::Client, &["team-b"]),
            token("w", Role::Worker, &[]),
        ],
        public_services: Vec::new(),
    };
    let s = start(fast_queue(), auth.clone()).await;
    let board = Board::new(3_600_000);
    board.follow(RunsSource::new(s.manager.clone()), CancellationToken::new());
    let app = router(AppState {
        source: RunsSource::new(s.manager.clone()),
        board: board.clone(),
        gate: Arc::new(Gate::new(Authenticator::from_config(&auth).unwrap(), false)),
        mode: "orchestrator",
        stop: CancellationToken::new(),
    });
    let mut c = client(&s, Some("alice"));
    let gated = create(&mut c, "team-a", GATED, json!({})).await.run_id;
    let doomed = create(&mut c, "team-a", GATED, json!({})).await.run_id;
    // The change feed brings the runs and their breakpoints to the board.
    wait_for(&board, |b| {
        [&gated, &doomed]
            .iter()
            .all(|id| b.get(id).is_some_and(|d| d.pending_breakpoints() == 1))
    })
    .await;

    let alice = ("authorization", "Bearer alice");
    let (status, page) = call(&app, "GET", "/api/board", &[alice], None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page["counts"]["needs-you"], 2, "{page}");
    // Another namespace's client sees nothing of team-a; a worker may not look at all.
    let bob = ("authorization", "Bearer bob");
    let (_, page) = call(&app, "GET", "/api/runs", &[bob], None).await;
    assert_eq!(page["total"], 0);
    let (status, _) = call(&app, "GET", &format!("/api/runs/{gated}"), &[bob], None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = call(
        &app,
        "GET",
        "/api/runs",
        &[("authorization", "Bearer w")],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The detail: the breakpoint waiting, the journal verified.
    let (status, d) = call(&app, "GET", &format!("/api/runs/{gated}"), &[alice], None).await;
    assert_eq!(status, StatusCode::OK, "{d}");
    let task = &d["tasks"][0];
    assert_eq!(task["kind"], "breakpoint");
    assert_eq!(task["state"], "requested");
    assert!(d["journal"]["corrupt"].is_null());
    let effect = task["effectId"].as_str().unwrap().to_owned();

    // Approve from the dashboard: the run completes, the approver journaled.
    let (_, session) = call(&app, "GET", "/api/session", &[alice], None).await;
    let csrf = session["csrf"].as_str().unwrap().to_owned();
    let act = [
        alice,
        ("x-babysitter-csrf", csrf.as_str()),
        ("origin", "http://dash.test"),
    ];
    let decision = json!({"approved": true, "comment": "ship it"});
    let path = format!("/api/runs/{gated}/breakpoints/{effect}");
    let (status, _) = call(&app, "POST", &path, &[alice], Some(decision.clone())).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "no csrf token: refused");
    let (status, reply) = call(&app, "POST", &path, &act, Some(decision)).await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    wait_for(&board, |b| {
        b.get(&gated).is_some_and(|d| d.status == "completed")
    })
    .await;
    let result = s
        .manager
        .journal()
        .get_run_file(&gated, &RunFile::task(&effect, "result.json").unwrap())
        .await
        .unwrap();
    let result: Value = serde_json::from_slice(&result).unwrap();
    assert_eq!(
        result.pointer("/value/principal"),
        Some(&json!("alice-user"))
    );
    assert_eq!(result.pointer("/value/feedback"), Some(&json!("ship it")));
    wait_for(&board, |b| {
        b.get(&gated).is_some_and(|d| d.status == "completed")
    })
    .await;

    // Cancel from the dashboard.
    let path = format!("/api/runs/{doomed}/cancel");
    let (status, reply) = call(
        &app,
        "POST",
        &path,
        &act,
        Some(json!({"reason": "not needed"})),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    wait_for(&board, |b| {
        b.get(&doomed).is_some_and(|d| {
            d.status == "cancelled" && d.bucket.is_some_and(|k| k.as_str() == "failed")
        })
    })
    .await;
}

/// A run of a process that returns at once, under idempotency key `key`.
fn instant(key: &str) -> NewRun {
    NewRun {
        namespace: "default".into(),
        bundle: Bundle::single_file("main.mjs", b"export async function process() { return 1; }"),
        idempotency_key: Some(key.into()),
        ..NewRun::default()
    }
}

async fn until_completed(m: &RunManager, run: &RunSummary) {
    for _ in 0..500 {
        if m.get("default", &run.run_id).await.unwrap().status == RunStatus::Completed {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("run {} never completed", run.run_id);
}

/// The board lists every run of the journal (at start, after a lag). Those that fell out of the
/// run table's finished-run cache are read back for it without being cached again: otherwise
/// the listing would refill the cache with what it reads and evict the runs it found there (the
/// most recently finished) — and their idempotency keys, so a client's `CreateRun` retry of a
/// run that had just finished would make a second run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_every_run_for_the_board_keeps_the_most_recently_finished_runs_cached() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let journal = Journal::new(Arc::new(FsStore::new(&runs)), JournalOptions::default());
    let engine = Engine::new(journal, OrchestratorConfig::default().engine_options(runs)).unwrap();
    let m = RunManager::new(
        engine,
        TaskQueue::new(QueueConfig::default(), ulid::Ulid::generate().to_string()),
        ManagerConfig {
            finished_runs_cached: 2,
            ..ManagerConfig::default()
        },
    );
    m.recover().await.unwrap();
    let mut created = Vec::new();
    for n in 0..5 {
        let run = m.create(instant(&format!("key-{n}"))).await.unwrap();
        until_completed(&m, &run).await;
        created.push(run.run_id);
    }
    assert_eq!(m.cached_finished_runs(), 2);

    let listed = RunsSource::new(m.clone()).runs().await.unwrap();
    assert_eq!(listed.len(), 5, "the board has every run");
    assert!(listed.iter().all(|d| d.status == "completed"), "{listed:?}");
    assert_eq!(m.cached_finished_runs(), 2, "the cache stays bounded");
    // The newest run's retry still finds it (its key is still cached) ...
    let retry = m.create(instant("key-4")).await.unwrap();
    assert_eq!(
        retry.run_id, created[4],
        "a retry after the board's listing made a new run"
    );
    // ... and no second run was made.
    assert_eq!(m.journal_run_ids().await.unwrap().len(), 5);
}
