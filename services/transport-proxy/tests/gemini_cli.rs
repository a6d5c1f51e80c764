//! The real Gemini CLI (npm `@google/gemini-cli` 0.61.0, pinned) runs headless through the
//! proxy's Gemini front to a scripted upstream of every protocol and completes a tool-call turn
//! each time: `out.txt` holds `hello`, the final answer is `DONE`, exit 0 (`harnesses.md` §3).
//! The client token travels as `x-goog-api-key`. Needs the CLI that
//! `scripts/ensure-gemini-cli.sh` installs (`.ci/run` does); skips, saying why, without it.

#[path = "support/fixture.rs"]
mod fixture;
#[path = "support/harness.rs"]
mod harness;

use babysitter_transport_proxy::protocol::Protocol;
use harness::{PROMPT, Run, TOKEN, cli};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_completes_a_tool_turn_through_the_proxy_to_every_upstream() {
    let Some(gemini) = cli(
        "harness-gemini/node_modules/.bin/gemini",
        "scripts/ensure-gemini-cli.sh",
    ) else {
        return;
    };
    for upstream in [
        Protocol::Anthropic,
        Protocol::OpenAiChat,
        Protocol::OpenAiResponses,
        Protocol::Gemini,
    ] {
        let run = Run::start(upstream).await;
        std::fs::create_dir_all(run.home.join(".gemini")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            run.home.join(".gemini/settings.json"),
            r#"{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false}}"#,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let mut cmd = run.command(&gemini);
        cmd.args([
            "-p",
            PROMPT,
            "-m",
            "fake-model",
            "--output-format",
            "stream-json",
            "--yolo",
            "--skip-trust",
        ])
        .env("GOOGLE_GEMINI_BASE_URL", &run.fx.proxy)
        .env("GEMINI_API_KEY", TOKEN);
        let stdout = run.finish(cmd).await;
        let answer: String = stdout
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["type"] == "message" && v["role"] == "assistant")
            .filter_map(|v| v["content"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(answer.trim(), "DONE", "{upstream}: {stdout}");
    }
}
