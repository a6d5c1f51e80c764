//! `babysitter observe` over a project's local `.a5c/runs`, without a browser: a run created and
//! iterated with the CLI waits on a breakpoint; the dashboard shows it as needing you, approves
//! it (through `task:post`, as a person at a terminal would; no tokens locally, the CSRF token
//! still required), and after the session's next `run:iterate` the card moves to completed on
//! the file watcher's word.

mod compat_support;
mod dashboard_support;

use std::time::Duration;

use compat_support::Sandbox;
use dashboard_support::{http, start};
use serde_json::{Value, json};

const GATE: &str = r#"
export async function process(inputs, ctx) {
  const ok = await ctx.breakpoint({ question: 'deploy?' }, { label: 'gate' });
  return { approved: ok.approved };
}
"#;

async fn board(addr: &str) -> Value {
    let (status, body) = http(addr, "GET", "/api/board", &[], "").await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

async fn wait_for_bucket(addr: &str, bucket: &str, run_id: &str) {
    for _ in 0..300 {
        let b = board(addr).await;
        if b["columns"][bucket]
            .as_array()
            .is_some_and(|c| c.iter().any(|d| d["runId"] == run_id))
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "run {run_id} never showed in {bucket}: {}",
        board(addr).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn observe_shows_and_approves_a_local_breakpoint() {
    let s = Sandbox::with_demo();
    s.write("processes/gate.mjs", GATE);
    let id = s.create("run-gate", "processes/gate.mjs#process");
    s.iterate(&id);
    let effect = s.pending(&id)[0]["effectId"].as_str().unwrap().to_owned();
    let (_observe, addr) = start(
        &[
            "observe".into(),
            s.tmp.path().display().to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
        &["dashboard listening on "],
    );
    let addr = &addr[0];
    wait_for_bucket(addr, "needs-you", &id).await;
    // No login locally, but an action still needs the session's CSRF token.
    let path = format!("/api/runs/{id}/breakpoints/{effect}");
    let decision = json!({"approved": true, "comment": "from the dashboard"}).to_string();
    let json_type = ("content-type", "application/json");
    let (status, _) = http(addr, "POST", &path, &[json_type], &decision).await;
    assert_eq!(status, 403);
    let (_, session) = http(addr, "GET", "/api/session", &[], "").await;
    let csrf = serde_json::from_str::<Value>(&session).unwrap()["csrf"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, reply) = http(
        addr,
        "POST",
        &path,
        &[json_type, ("x-babysitter-csrf", &csrf)],
        &decision,
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    let result: Value = serde_json::from_slice(
        &std::fs::read(
            s.run_dir(&id)
                .join("tasks")
                .join(&effect)
                .join("result.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        result.pointer("/value/approved"),
        Some(&json!(true)),
        "{result}"
    );
    assert_eq!(
        result.pointer("/value/feedback"),
        Some(&json!("from the dashboard"))
    );
    assert_eq!(
        result.pointer("/value/respondedBy"),
        Some(&json!("anonymous"))
    );
    // The session iterates: the run completes, and the watcher moves its card.
    s.iterate(&id);
    wait_for_bucket(addr, "completed", &id).await;
}
