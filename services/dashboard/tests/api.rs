//! The dashboard's JSON API and its gate, without a browser: runs written in babysitter's local
//! layout, served by the real router over a [`LocalSource`] — the board's buckets and paging,
//! live change through file notifications, a run's pipeline and verified journal, a corrupted
//! journal shown as corrupt, the login page for an unauthorised caller, a worker token refused,
//! and actions refused without the CSRF token.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use babysitter_common::auth::{AuthConfig, Authenticator, Role, Secret, TokenEntry};
use babysitter_dashboard::auth::Gate;
use babysitter_dashboard::http::{AppState, router};
use babysitter_dashboard::local::LocalSource;
use babysitter_dashboard::{Board, Source};
use babysitter_journal::fs::FsStore;
use babysitter_journal::store::RunFiles;
use babysitter_journal::{EventType, Journal, JournalOptions, NewEvent};
use http::{Request, StatusCode, header};
use serde_json::{Value, json};
use tower::ServiceExt as _;

fn auth() -> Authenticator {
    let token = |t: &str, role, name: &str| TokenEntry {
        token: Some(Secret::new(t)),
        token_file: None,
        role,
        name: Some(name.into()),
        namespaces: Vec::new(),
    };
    Authenticator::from_config(&AuthConfig {
        tokens: vec![
            token("alice-token", Role::Client, "alice"),
            token("worker-token", Role::Worker, "w"),
        ],
        public_services: Vec::new(),
    })
    .unwrap()
}

async fn write_run(journal: &Journal, run_id: &str, events: Vec<NewEvent>) {
    journal
        .create_run(
            run_id,
            RunFiles {
                run_json: json!({"runId": run_id, "processId": format!("proc-{run_id}"), "createdAt": babysitter_journal::journal::now_iso()}),
                inputs_json: None,
            },
        )
        .await
        .unwrap();
    journal.append(run_id, 1, events).await.unwrap();
}

fn requested(effect: &str, kind: &str) -> NewEvent {
    NewEvent::new(
        EventType::EffectRequested,
        json!({"effectId": effect, "invocationKey": format!("k-{effect}"), "stepId": format!("s-{effect}"),
               "taskId": format!("t-{effect}"), "kind": kind, "label": effect,
               "taskDefRef": format!("tasks/{effect}/task.json")}),
    )
}

struct App {
    router: axum::Router,
    board: Arc<Board>,
    _dir: tempfile::TempDir,
    runs: std::path::PathBuf,
    journal: Journal,
}

async fn app() -> App {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("proj").join(".a5c").join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    let journal = Journal::new(
        Arc::new(FsStore::new(runs.clone())),
        JournalOptions::default(),
    );
    let created = || NewEvent::new(EventType::RunCreated, json!({"runId": "x"}));
    write_run(
        &journal,
        "01GATED",
        vec![created(), requested("bp1", "breakpoint")],
    )
    .await;
    write_run(
        &journal,
        "01FANOUT",
        vec![
            created(),
            requested("a", "shell"),
            requested("b", "shell"),
            requested("c", "shell"),
        ],
    )
    .await;
    write_run(
        &journal,
        "01DONE",
        vec![created(), NewEvent::new(EventType::RunCompleted, json!({}))],
    )
    .await;
    let found = babysitter_dashboard::local::discover(&[dir.path().to_path_buf()]);
    assert_eq!(found, vec![runs.clone()]);
    let source: Arc<dyn Source> = Arc::new(LocalSource::new(found, None).unwrap());
    let board = Board::new(3_600_000);
    board.follow(source.clone(), tokio_util::sync::CancellationToken::new());
    wait_for(|| board.len() == 3).await;
    let router = router(AppState {
        source,
        board: board.clone(),
        gate: Arc::new(Gate::new(auth(), false)),
        mode: "observe",
        stop: tokio_util::sync::CancellationToken::new(),
    });
    App {
        router,
        board,
        _dir: dir,
        runs,
        journal,
    }
}

async fn wait_for(mut ok: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if ok() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("condition not met within 10 s");
}

async fn call(
    app: &App,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Value>,
) -> (StatusCode, String) {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "dash.test");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let body = match body {
        Some(b) => {
            req = req.header(header::CONTENT_TYPE, "application/json");
            Body::from(b.to_string())
        }
        None => Body::empty(),
    };
    let res = app
        .router
        .clone()
        .oneshot(req.body(body).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 24)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&bytes).into_owned())
}

const ALICE: (&str, &str) = ("authorization", "Bearer alice-token");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unauthorised_caller_gets_the_login_page_and_no_data() {
    let app = app().await;
    let (status, body) = call(&app, "GET", "/", &[], None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(body.contains("name=\"token\""), "the login form: {body}");
    assert!(!body.contains("01GATED"));
    let (status, body) = call(&app, "GET", "/api/runs", &[], None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(!body.contains("01GATED"));
    let (status, _) = call(
        &app,
        "GET",
        "/api/runs",
        &[("authorization", "Bearer wrong")],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    // A worker's token is valid but may not read runs (RunService needs a client).
    let (status, body) = call(
        &app,
        "GET",
        "/api/runs",
        &[("authorization", "Bearer worker-token")],
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(!body.contains("01GATED"));
    // The login form sets an HttpOnly, SameSite=Strict cookie, which then reads the board.
    let req = Request::builder()
        .method("POST")
        .uri("/login")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from("token=alice-token"))
        .unwrap();
    let res = app.router.clone().oneshot(req).await.unwrap();
    let cookie = res.headers()[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let pair = cookie.split(';').next().unwrap().to_owned();
    let (status, body) = call(&app, "GET", "/api/runs", &[("cookie", &pair)], None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(body.contains("01GATED"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_board_buckets_pages_and_follows_the_journal() {
    let app = app().await;
    let (status, body) = call(&app, "GET", "/api/runs?limit=2", &[ALICE], None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let page: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["total"], 3);
    assert_eq!(page["runs"].as_array().unwrap().len(), 2);
    assert_eq!(page["runs"][0]["runId"], "01GATED");
    assert_eq!(page["runs"][0]["bucket"], "needs-you");
    assert_eq!(page["counts"]["needs-you"], 1);
    assert_eq!(page["counts"]["completed"], 1);
    let (_, body) = call(
        &app,
        "GET",
        "/api/runs?bucket=completed&q=proc-01d",
        &[ALICE],
        None,
    )
    .await;
    let page: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(page["total"], 1);
    // The run completes on disk: the watcher moves its card without any request.
    let before = *app.board.subscribe().borrow();
    app.journal
        .append(
            "01FANOUT",
            5,
            vec![NewEvent::new(EventType::RunCompleted, json!({}))],
        )
        .await
        .unwrap();
    let board = app.board.clone();
    wait_for(move || {
        board
            .get("01FANOUT")
            .is_some_and(|d| d.status == "completed")
    })
    .await;
    assert!(*app.board.subscribe().borrow() > before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_shows_its_fan_out_and_a_corrupted_journal_shows_as_corrupt() {
    let app = app().await;
    let (status, body) = call(&app, "GET", "/api/runs/01FANOUT", &[ALICE], None).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let d: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(d["stages"], json!([["a", "b", "c"]]));
    assert_eq!(d["journal"]["verified"], 4);
    assert!(d["journal"]["corrupt"].is_null());
    // Flip a byte of the second event's data: its checksum no longer matches.
    let dir = app.runs.join("01GATED").join("journal");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let text = std::fs::read_to_string(&files[1]).unwrap();
    std::fs::write(&files[1], text.replace("bp1", "bp2")).unwrap();
    let board = app.board.clone();
    wait_for(move || board.get("01GATED").is_some_and(|d| d.corrupt)).await;
    let (_, body) = call(&app, "GET", "/api/runs/01GATED/journal", &[ALICE], None).await;
    let j: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(j["corrupt"], true);
    assert_eq!(j["events"][0]["verified"], true);
    assert_eq!(j["events"][1]["verified"], false, "{j}");
    let (_, body) = call(&app, "GET", "/api/runs?bucket=failed", &[ALICE], None).await;
    assert!(
        body.contains("01GATED"),
        "a corrupt run is triaged as failed: {body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn actions_need_the_csrf_token_and_a_same_origin() {
    let app = app().await;
    let body = json!({"approved": true, "comment": "ok"});
    let (status, refused) = call(
        &app,
        "POST",
        "/api/runs/01GATED/breakpoints/bp1",
        &[ALICE],
        Some(body.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // The page tells this refusal by its code (it reads the session again and retries once).
    assert_eq!(
        serde_json::from_str::<Value>(&refused).unwrap()["code"],
        "csrf",
        "{refused}"
    );
    let (_, session) = call(&app, "GET", "/api/session", &[ALICE], None).await;
    let csrf = serde_json::from_str::<Value>(&session).unwrap()["csrf"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = call(
        &app,
        "POST",
        "/api/runs/01GATED/breakpoints/bp1",
        &[
            ALICE,
            ("x-babysitter-csrf", &csrf),
            ("origin", "http://evil.test"),
        ],
        Some(body.clone()),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    // Same origin and the token: it reaches the source, which is read-only here.
    let (status, reply) = call(
        &app,
        "POST",
        "/api/runs/01GATED/breakpoints/bp1",
        &[
            ALICE,
            ("x-babysitter-csrf", &csrf),
            ("origin", "http://dash.test"),
        ],
        Some(body),
    )
    .await;
    assert_eq!(status, StatusCode::CONFLICT, "{reply}");
    assert!(reply.contains("read-only"));
}
