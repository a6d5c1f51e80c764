//! The real Claude Code CLI (npm `@anthropic-ai/claude-code` 2.1.197, pinned) runs headless
//! through the proxy to a scripted upstream of every protocol (OpenAI Chat, Gemini, OpenAI
//! Responses, and Anthropic as passthrough) and completes a tool-call turn each time:
//! `out.txt` holds `hello`, the final answer is `DONE`, exit 0 (`harnesses.md` §1, §7).
//! Needs the CLI that `scripts/ensure-claude-code.sh` installs (`.ci/run` does); skips, saying
//! why, without it. Outside traffic is pointed at a dead loopback proxy, so the run is offline.

#[path = "support/fixture.rs"]
mod fixture;

use std::time::Duration;

use babysitter_transport_proxy::config::{ProxyConfig, Route, Secret};
use babysitter_transport_proxy::protocol::Protocol;
use fixture::{Fixture, upstream_for};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_completes_a_tool_turn_through_the_proxy_to_every_upstream() {
    for upstream in [
        Protocol::OpenAiChat,
        Protocol::Gemini,
        Protocol::OpenAiResponses,
        Protocol::Anthropic,
    ] {
        if !run(upstream).await {
            return;
        }
    }
}

/// One Claude Code run against a scripted `upstream`; false when the CLI is missing.
async fn run(upstream: Protocol) -> bool {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let claude = root.join("../../.ci-work/harness-claude/node_modules/.bin/claude");
    if !std::fs::metadata(&claude).is_ok_and(|m| m.is_file()) {
        eprintln!(
            "SKIPPED: {} missing; run scripts/ensure-claude-code.sh",
            claude.display()
        );
        return false;
    }
    let fx = Fixture::start(None, |b| {
        let mut c = ProxyConfig::with_routes(vec![Route::new("cc", upstream_for(upstream, b))]);
        c.proxy_token = Some(Secret::new("sk-proxy-token"));
        c
    })
    .await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (home, proj) = (dir.path().join("home"), dir.path().join("proj"));
    for d in [&home, &proj] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{e}"));
    }
    let dead_proxy = "http://127.0.0.1:9";
    let mut cmd = tokio::process::Command::new(&claude);
    cmd.args([
        "-p",
        "Create out.txt containing hello using the shell, then reply DONE",
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
        "--max-turns",
        "5",
    ])
    .current_dir(&proj)
    .env_clear()
    .env("PATH", std::env::var_os("PATH").unwrap_or_default())
    .env("HOME", &home)
    .env("IS_SANDBOX", "1")
    .env("ANTHROPIC_BASE_URL", &fx.proxy)
    .env("ANTHROPIC_API_KEY", "sk-proxy-token")
    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    .env("HTTPS_PROXY", dead_proxy)
    .env("HTTP_PROXY", dead_proxy)
    .env("NO_PROXY", "127.0.0.1,localhost")
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    // A guard against a hung CLI, not a timing assertion.
    let out = tokio::time::timeout(Duration::from_secs(180), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("claude did not finish within 180 s"))
        .unwrap_or_else(|e| panic!("running claude: {e}"));
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
    assert_eq!(written.trim(), "hello", "{stdout}");
    let result: Value = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == "result")
        .unwrap_or_default();
    assert_eq!(result["result"], "DONE", "{stdout}");
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
