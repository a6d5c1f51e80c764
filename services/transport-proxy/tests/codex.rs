//! The real Codex CLI (npm `@openai/codex` 0.171.0, pinned; it speaks only OpenAI Responses)
//! runs headless through the proxy to a scripted upstream of every protocol — first the spec's
//! priority-3 pair, "Codex on chat-only providers" — and completes a tool-call turn each time: `out.txt` holds
//! `hello`, the final answer is `DONE`, exit 0 (`harnesses.md` §2). Needs the CLI that
//! `scripts/ensure-codex.sh` installs (`.ci/run` does); skips, saying why, without it.
//! Outside traffic is pointed at a dead loopback proxy.

#[path = "support/fixture.rs"]
mod fixture;

use std::time::Duration;

use babysitter_transport_proxy::config::{ProxyConfig, Route, Secret};
use babysitter_transport_proxy::protocol::Protocol;
use fixture::{Fixture, upstream_for};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_completes_a_tool_turn_through_the_proxy_to_every_upstream() {
    for upstream in [
        Protocol::OpenAiChat,
        Protocol::Anthropic,
        Protocol::Gemini,
        Protocol::OpenAiResponses,
    ] {
        if !run(upstream).await {
            return;
        }
    }
}

/// One Codex run against a scripted `upstream`; false when the CLI is missing.
async fn run(upstream: Protocol) -> bool {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let codex = root.join("../../.ci-work/harness-codex/node_modules/.bin/codex");
    if !std::fs::metadata(&codex).is_ok_and(|m| m.is_file()) {
        eprintln!(
            "SKIPPED: {} missing; run scripts/ensure-codex.sh",
            codex.display()
        );
        return false;
    }
    let fx = Fixture::start(None, |b| {
        let mut c = ProxyConfig::with_routes(vec![Route::new("codex", upstream_for(upstream, b))]);
        c.proxy_token = Some(Secret::new("sk-proxy-token"));
        c
    })
    .await;
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (home, proj, codex_home) = (
        dir.path().join("home"),
        dir.path().join("proj"),
        dir.path().join("codex-home"),
    );
    for d in [&home, &proj, &codex_home] {
        std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{e}"));
    }
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"fake-model\"\nmodel_provider = \"proxy\"\n\n[model_providers.proxy]\nname = \"babysitter proxy\"\nbase_url = \"{}/v1\"\nenv_key = \"PROXY_KEY\"\nwire_api = \"responses\"\n\n[analytics]\nenabled = false\n[features]\nplugins = false\n",
            fx.proxy
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let dead_proxy = "http://127.0.0.1:9";
    let mut cmd = tokio::process::Command::new(&codex);
    cmd.args([
        "exec",
        "--json",
        "--skip-git-repo-check",
        "-s",
        "danger-full-access",
        "Create out.txt containing hello using the shell, then reply DONE",
    ])
    .current_dir(&proj)
    .env_clear()
    .env("PATH", std::env::var_os("PATH").unwrap_or_default())
    .env("HOME", &home)
    .env("CODEX_HOME", &codex_home)
    .env("PROXY_KEY", "sk-proxy-token")
    .env("HTTPS_PROXY", dead_proxy)
    .env("HTTP_PROXY", dead_proxy)
    .env("NO_PROXY", "127.0.0.1,localhost")
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    // A guard against a hung CLI, not a timing assertion.
    let out = tokio::time::timeout(Duration::from_secs(180), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("codex did not finish within 180 s"))
        .unwrap_or_else(|e| panic!("running codex: {e}"));
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
    let last_message = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "item.completed" && v["item"]["type"] == "agent_message")
        .filter_map(|v| v["item"]["text"].as_str().map(str::to_owned))
        .next_back();
    assert_eq!(last_message.as_deref(), Some("DONE"), "{stdout}");
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
