//! The real Codex CLI (npm `@openai/codex` 0.171.0, pinned; it speaks only OpenAI Responses)
//! runs headless through the proxy to a scripted upstream of every protocol — first the spec's
//! priority-3 pair, "Codex on chat-only providers" — and completes a tool-call turn each time:
//! `out.txt` holds `hello`, the final answer is `DONE`, exit 0 (`harnesses.md` §2). Needs the
//! CLI that `scripts/ensure-codex.sh` installs (`.ci/run` does); skips, saying why, without it.

#[path = "support/fixture.rs"]
mod fixture;
#[path = "support/harness.rs"]
mod harness;

use babysitter_transport_proxy::protocol::Protocol;
use harness::{PROMPT, Run, TOKEN, cli};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_completes_a_tool_turn_through_the_proxy_to_every_upstream() {
    let Some(codex) = cli(
        "harness-codex/node_modules/.bin/codex",
        "scripts/ensure-codex.sh",
    ) else {
        return;
    };
    for upstream in [
        Protocol::OpenAiChat,
        Protocol::Anthropic,
        Protocol::Gemini,
        Protocol::OpenAiResponses,
    ] {
        let run = Run::start(upstream).await;
        let codex_home = run.home.join("codex-home");
        std::fs::create_dir_all(&codex_home).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            codex_home.join("config.toml"),
            format!(
                "model = \"fake-model\"\nmodel_provider = \"proxy\"\n\n[model_providers.proxy]\nname = \"babysitter proxy\"\nbase_url = \"{}/v1\"\nenv_key = \"PROXY_KEY\"\nwire_api = \"responses\"\n\n[analytics]\nenabled = false\n[features]\nplugins = false\n",
                run.fx.proxy
            ),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut cmd = run.command(&codex);
        cmd.args([
            "exec",
            "--json",
            "--skip-git-repo-check",
            "-s",
            "danger-full-access",
            PROMPT,
        ])
        .env("CODEX_HOME", &codex_home)
        .env("PROXY_KEY", TOKEN);
        let stdout = run.finish(cmd).await;
        let last_message = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["type"] == "item.completed" && v["item"]["type"] == "agent_message")
            .filter_map(|v| v["item"]["text"].as_str().map(str::to_owned))
            .next_back();
        assert_eq!(
            last_message.as_deref(),
            Some("DONE"),
            "{upstream}: {stdout}"
        );
    }
}
