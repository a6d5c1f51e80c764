//! The real Gemini CLI (npm `@google/gemini-cli` 0.61.0, pinned) runs headless through the
//! proxy's Gemini front to a scripted upstream of every protocol and completes a tool-call turn
//! each time:
//! `out.txt` holds `hello`, the final answer is `DONE`, exit 0 (`harnesses.md` §3). The client
//! token travels as `x-goog-api-key`. Needs the CLI that `scripts/ensure-gemini-cli.sh`
//! installs (`.ci/run` does); skips, saying why, without it.

#[path = "support/fixture.rs"]
mod fixture;

use std::time::Duration;

use babysitter_transport_proxy::config::{ProxyConfig, Route, Secret};
use babysitter_transport_proxy::protocol::Protocol;
use fixture::{Fixture, upstream_for};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_completes_a_tool_turn_through_the_proxy_to_every_upstream() {
    for upstream in [
        Protocol::Anthropic,
        Protocol::OpenAiChat,
        Protocol::OpenAiResponses,
        Protocol::Gemini,
    ] {
        if !run(upstream).await {
            return;
        }
    }
}

/// One Gemini CLI run against a scripted `upstream`; false when the CLI is missing.
async fn run(upstream: Protocol) -> bool {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let gemini = root.join("../../.ci-work/harness-gemini/node_modules/.bin/gemini");
    if !std::fs::metadata(&gemini).is_ok_and(|m| m.is_file()) {
        eprintln!(
            "SKIPPED: {} missing; run scripts/ensure-gemini-cli.sh",
            gemini.display()
        );
        return false;
    }
    let fx = Fixture::start(None, |b| {
        let mut c = ProxyConfig::with_routes(vec![Route::new("gemini", upstream_for(upstream, b))]);
        c.proxy_token = Some(Secret::new("gk-proxy-token"));
        c
    })
    .await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (home, proj) = (dir.path().join("home"), dir.path().join("proj"));
    for d in [home.join(".gemini"), proj.clone()] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::write(
        home.join(".gemini/settings.json"),
        r#"{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false}}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let dead_proxy = "http://127.0.0.1:9";
    let mut cmd = tokio::process::Command::new(&gemini);
    cmd.args([
        "-p",
        "Create out.txt containing hello using the shell, then reply DONE",
        "-m",
        "fake-model",
        "--output-format",
        "stream-json",
        "--yolo",
        "--skip-trust",
    ])
    .current_dir(&proj)
    .env_clear()
    .env("PATH", std::env::var_os("PATH").unwrap_or_default())
    .env("HOME", &home)
    .env("GOOGLE_GEMINI_BASE_URL", &fx.proxy)
    .env("GEMINI_API_KEY", "gk-proxy-token")
    .env("HTTPS_PROXY", dead_proxy)
    .env("HTTP_PROXY", dead_proxy)
    .env("NO_PROXY", "127.0.0.1,localhost")
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    // A guard against a hung CLI, not a timing assertion.
    let out = tokio::time::timeout(Duration::from_secs(240), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("gemini did not finish within 240 s"))
        .unwrap_or_else(|e| panic!("running gemini: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let requests = fx.scripted.requests();
    let summary: Vec<String> = requests
        .iter()
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect();
    assert!(
        out.status.success(),
        "{upstream}: exit {:?}\nupstream: {summary:?}\n{stdout}\n{stderr}",
        out.status.code()
    );
    let written = std::fs::read_to_string(proj.join("out.txt")).unwrap_or_default();
    assert_eq!(written.trim(), "hello", "{stdout}\n{stderr}");
    let answer: String = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "message" && v["role"] == "assistant")
        .filter_map(|v| v["content"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(answer.trim(), "DONE", "{stdout}");
    let turns: Vec<_> = requests
        .iter()
        .filter(|r| r.protocol == Some(upstream))
        .collect();
    assert_eq!(turns.len(), 2, "{upstream}: {summary:?}");
    let second = turns[1].body.to_string();
    assert!(
        [
            "\"tool_result\"",
            "\"role\":\"tool\"",
            "function_call_output",
            "functionResponse"
        ]
        .iter()
        .any(|m| second.contains(m)),
        "{upstream}: the tool result reached the upstream: {second}"
    );
    fx.stop().await;
    true
}
