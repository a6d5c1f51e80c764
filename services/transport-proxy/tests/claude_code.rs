//! The real Claude Code CLI (npm `@anthropic-ai/claude-code` 2.1.197, pinned) runs headless
//! through the proxy to a scripted upstream of every protocol (OpenAI Chat, Gemini, OpenAI
//! Responses, and Anthropic as passthrough) and completes a tool-call turn each time: `out.txt`
//! holds `hello`, the final answer is `DONE`, exit 0 (`harnesses.md` §1, §7). Needs the CLI
//! that `scripts/ensure-claude-code.sh` installs (`.ci/run` does); skips, saying why, without it.

#[path = "support/fixture.rs"]
mod fixture;
#[path = "support/harness.rs"]
mod harness;

use babysitter_transport_proxy::protocol::Protocol;
use harness::{PROMPT, Run, TOKEN, cli};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_completes_a_tool_turn_through_the_proxy_to_every_upstream() {
    let Some(claude) = cli(
        "harness-claude/node_modules/.bin/claude",
        "scripts/ensure-claude-code.sh",
    ) else {
        return;
    };
    for upstream in [
        Protocol::OpenAiChat,
        Protocol::Gemini,
        Protocol::OpenAiResponses,
        Protocol::Anthropic,
    ] {
        let run = Run::start(upstream).await;
        let mut cmd = run.command(&claude);
        cmd.args([
            "-p",
            PROMPT,
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
            "--max-turns",
            "5",
        ])
        .env("IS_SANDBOX", "1")
        .env("ANTHROPIC_BASE_URL", &run.fx.proxy)
        .env("ANTHROPIC_API_KEY", TOKEN)
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
        let stdout = run.finish(cmd).await;
        let result: Value = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|v| v["type"] == "result")
            .unwrap_or_default();
        assert_eq!(result["result"], "DONE", "{upstream}: {stdout}");
    }
}
