//! The dashboard in a real browser: `babysitter up` (with client tokens) and `babysitter observe`
//! as processes on loopback, runs created over gRPC, then `dashboard_browser.py` drives the
//! system Chromium through Playwright and asserts in the page — login answer for an
//! unauthorised browser, cards in their buckets and moving as tasks finish, the "need you"
//! banner, a fan-out's pipeline, a breakpoint approved from the page (the run continues; the
//! approver's principal is journaled, checked here), a corrupted journal shown as corrupt — and
//! saves screenshots to docs/screenshots/. It prints the append-to-card latency (p50/p99 over 100
//! decisions) and the board's load time: run with `--nocapture` to see them.
//!
//! Needs /usr/bin/chromium and Playwright for Python in .ci-work/venv-playwright
//! (scripts/ensure-playwright.sh); skipped without them (a failure under
//! BABYSITTER_REQUIRE_ALL=1).

mod dashboard_support;
#[path = "../../tests/src/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};

use babysitter_proto::orchestrator::v1 as pb;
use serde_json::json;

use dashboard_support::{
    GATED, breakpoint_of, browser, connect, create, repo, start, start_up, wait_status,
};

const TOKEN: &str = "alice-token";

fn fanout(release: &Path) -> String {
    format!(
        r#"
import {{ defineTask }} from '@a5c-ai/babysitter-sdk';
const wait = defineTask('wait', (a) => ({{ kind: 'shell', title: 'part ' + a.i,
  shell: {{ command: 'while [ ! -f {rel} ]; do sleep 0.05; done; echo part ' + a.i }} }}));
const sum = defineTask('sum', () => ({{ kind: 'shell', title: 'sum', shell: {{ command: 'echo sum' }} }}));
export async function process(inputs, ctx) {{
  const parts = await ctx.parallel.all([0, 1, 2].map((i) => () => ctx.task(wait, {{ i }})));
  await ctx.task(sum, {{}});
  return {{ parts: parts.length }};
}}
"#,
        rel = release.display()
    )
}

const QUICK: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('sh', () => ({ kind: 'shell', title: 'hello', shell: { command: 'echo hello' } }));
export async function process(inputs, ctx) { return await ctx.task(sh, {}); }
"#;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stdout)]
async fn the_dashboard_in_a_real_browser() {
    let python = match browser() {
        Ok(p) => p,
        Err(why) => return skip::skip(why),
    };
    let repo = repo();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (_up, dashboard, grpc) = start_up(dir.path(), &data, TOKEN, "alice", "");
    let s = |v: &str| v.to_owned();
    let mut c = connect(&grpc, Some(TOKEN)).await;

    let release = dir.path().join("release");
    let gated = create(&mut c, GATED, None).await;
    let gate_effect = breakpoint_of(&mut c, &gated).await;
    let fan = create(&mut c, &fanout(&release), None).await;
    let quick = create(&mut c, QUICK, None).await;
    wait_status(&mut c, &quick, pb::RunStatus::Completed).await;
    let mut latency_effects = serde_json::Map::new();
    for _ in 0..100 {
        let id = create(&mut c, GATED, None).await;
        let effect = breakpoint_of(&mut c, &id).await;
        latency_effects.insert(id, json!(effect));
    }

    // observe over a copy of the finished run, its second journal event altered on disk.
    let obs = dir.path().join("observe");
    let copied = obs.join("proj/.a5c/runs").join(&quick);
    copy_dir(&data.join("runs").join(&quick), &copied);
    let mut events: Vec<PathBuf> = std::fs::read_dir(copied.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    events.sort();
    let mut event: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&events[1]).unwrap()).unwrap();
    event["data"]["tampered"] = json!(true);
    std::fs::write(&events[1], serde_json::to_vec_pretty(&event).unwrap()).unwrap();
    let (_observe, obs_addr) = start(
        &[
            s("observe"),
            obs.display().to_string(),
            s("--listen"),
            s("127.0.0.1:0"),
            s("--read-only"),
        ],
        &["dashboard listening on "],
    );

    let shots = repo.join("docs/screenshots");
    let args = json!({
        "url": format!("http://{dashboard}"),
        "observe_url": format!("http://{}", obs_addr[0]),
        "token": TOKEN,
        "gated": gated,
        "fanout": fan,
        "corrupt": quick,
        "release": release,
        "screenshots": shots,
        "profile": dir.path().join("chromium-profile"),
        "latency_runs": latency_effects.keys().collect::<Vec<_>>(),
        "latency_effects": latency_effects,
    });
    let out = tokio::process::Command::new(&python)
        .arg(repo.join("cli/tests/dashboard_browser.py"))
        .arg(args.to_string())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the browser checks failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The decision made in the page is journaled with the token's principal.
    let result = std::fs::read_to_string(
        data.join("runs")
            .join(&gated)
            .join("tasks")
            .join(&gate_effect)
            .join("result.json"),
    )
    .unwrap();
    let result: serde_json::Value = serde_json::from_str(&result).unwrap();
    assert_eq!(
        result.pointer("/value/principal"),
        Some(&json!("alice")),
        "{result}"
    );
    assert_eq!(
        result.pointer("/value/feedback"),
        Some(&json!("looks good from the browser"))
    );
    wait_status(&mut c, &gated, pb::RunStatus::Completed).await;
}
