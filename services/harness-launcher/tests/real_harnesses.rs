//! The real harness CLIs (pinned npm installs in `<repo>/.ci-work/harness-*`, put there by
//! `scripts/ensure-{claude-code,codex,gemini-cli,pi,opencode}.sh`, which `.ci/run` calls) run an
//! agent task through the real worker, taking it from the real orchestrator (in process), against
//! the scripted model server: the model asks for one shell call (`echo hello > out.txt`), then
//! answers `DONE`. Each run must leave `out.txt` in the task's project, complete the task with
//! `"DONE"`, usage and metadata (as the orchestrator journals them), and report a universal event
//! stream with the tool call and result and zero `agent.unparsed` (as the orchestrator relays it
//! to the run's watchers). Two runs go through the in-process transport proxy: Claude Code to an
//! OpenAI-Chat upstream and Codex to an Anthropic upstream. A harness that is not installed skips the test, saying why (a failure
//! under `BABYSITTER_REQUIRE_ALL=1`, as in CI; see `tests/src/skip.rs`).
//!
//! With `BABYSITTER_RECORD_FIXTURES=1` each run's native stdout is written to
//! `tests/fixtures/native/<harness>.jsonl`, the parser fixtures replayed by the unit tests.

#[path = "support/orchestrator.rs"]
mod orchestrator;
#[path = "../../../tests/src/skip.rs"]
mod skip;
#[path = "support/worker.rs"]
mod worker;

use std::time::Duration;

use babysitter_common::EnvMap;
use babysitter_harness_launcher::testing::{
    self, CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE, PI, RealCli, TOOL_TURN_PROMPT,
};
use babysitter_proto::common::v1 as cpb;
use babysitter_transport_proxy::protocol::Protocol;
use babysitter_transport_proxy::scripted::ScriptedServer;
use serde_json::{Value, json};

use orchestrator::{Orchestrator, Stored};

/// One agent task for `cli` with a scripted provider speaking `upstream`.
async fn run(cli: RealCli, upstream: Protocol, record: bool) {
    let Some(r) = run_task(cli, upstream, None, None).await else {
        return; // skipped: run_task recorded why
    };
    check_tool_turn(cli, upstream, record, r);
}

/// What one run left behind.
struct Outcome {
    r: Stored,
    evs: Vec<cpb::AgentEvent>,
    project: tempfile::TempDir,
    requests: Vec<String>,
}

/// Runs one agent task through the worker; `None`, the test skipped, when the harness is not
/// installed.
async fn run_task(
    cli: RealCli,
    upstream: Protocol,
    script: Option<Value>,
    output_schema: Option<Value>,
) -> Option<Outcome> {
    let Some(path) = skip::installed(&cli.path()) else {
        skip::skip::<()>(format!(
            "needs the {} CLI at {}: run scripts/ensure-{}.sh",
            cli.harness,
            skip::tidy(&cli.path()).display(),
            cli.harness
        ));
        return None;
    };
    let harness = cli.harness;
    let script =
        script.map(|s| serde_json::from_value(s).unwrap_or_else(|e| panic!("script: {e}")));
    let scripted = ScriptedServer::start(([127, 0, 0, 1], 0).into(), script, None)
        .await
        .unwrap_or_else(|e| panic!("scripted: {e}"));
    let config = cli.scripted_config(path, upstream, scripted.url());
    let path_env = std::env::var("PATH").unwrap_or_default();
    let agents = config.settings(&EnvMap::new().with("PATH", path_env)).await;
    assert_eq!(
        agents.harnesses.len(),
        1,
        "{harness} detected: {:?}",
        agents.harnesses
    );

    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let project = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let orch = Orchestrator::start().await;
    let w = worker::start(&orch, agents, &tmp.path().join("work"));
    orch.push(
        "t1",
        "agent",
        json!({"kind": "agent", "execution": {"harness": harness, "cwd": project.path()},
               "agent": {"prompt": TOOL_TURN_PROMPT, "outputSchema": output_schema}}),
    )
    .await;
    // A guard against a hung CLI, not a timing assertion.
    let r = orch.result("t1", Duration::from_secs(240)).await;
    let evs = orch.events("t1").await;
    w.stop().await;
    orch.stop().await;
    let requests: Vec<String> = scripted
        .requests()
        .iter()
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect();
    scripted.stop().await;
    Some(Outcome {
        r,
        evs,
        project,
        requests,
    })
}

fn check_tool_turn(cli: RealCli, upstream: Protocol, record: bool, o: Outcome) {
    let Outcome {
        r,
        evs,
        project,
        requests,
    } = o;
    let harness = cli.harness;
    let stdout = r.stdout.clone();
    let stderr = r.stderr.clone();
    if record {
        let f = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/native")
            .join(format!("{harness}.jsonl"));
        std::fs::write(&f, &stdout).unwrap_or_else(|e| panic!("{e}"));
    }
    let ctx = format!(
        "{harness} via {upstream}\nrequests: {requests:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    match r.outcome() {
        Ok(v) => testing::check_done(v, &ctx),
        Err(e) => panic!("{e}\n{ctx}"),
    }
    testing::check_out_txt(project.path(), &ctx);
    testing::check_tool_turn_events(&evs, &ctx);
    // The usage the worker reported, journaled as the task's COST_TRACKED.
    let usage = r.cost.clone().unwrap_or_default();
    assert_eq!(usage["provider"], testing::SCRIPTED_PROVIDER, "{usage}");
    assert_eq!(usage["model"], testing::SCRIPTED_MODEL, "{usage}");
    let tokens = |k: &str| usage[k].as_u64().unwrap_or_default();
    assert!(
        tokens("inputTokens") > 0 && tokens("outputTokens") > 0,
        "{usage}\n{ctx}"
    );
    let meta = r.metadata();
    assert_eq!(
        meta["viaProxy"].is_string(),
        !cli.speaks(upstream),
        "{meta}"
    );
}

fn recording() -> bool {
    std::env::var("BABYSITTER_RECORD_FIXTURES").is_ok_and(|v| v == "1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_completes_an_agent_task() {
    run(CLAUDE_CODE, CLAUDE_CODE.native, recording()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_completes_an_agent_task() {
    run(CODEX, CODEX.native, recording()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_completes_an_agent_task() {
    run(GEMINI_CLI, GEMINI_CLI.native, recording()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_completes_an_agent_task() {
    run(PI, PI.native, recording()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_completes_an_agent_task() {
    run(OPENCODE, OPENCODE.native, recording()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_reaches_an_openai_chat_upstream_through_the_proxy() {
    run(CLAUDE_CODE, Protocol::OpenAiChat, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_reaches_an_anthropic_upstream_through_the_proxy() {
    run(CODEX, Protocol::Anthropic, false).await;
}

/// A task with an output schema: the model answers JSON (scripted), the value is that object.
async fn structured(cli: RealCli) {
    let script =
        json!({"turns": [{"reply": {"text": "{\"ok\": true, \"files\": [\"out.txt\"]}"}}]});
    let schema = json!({"type": "object", "required": ["ok", "files"],
                        "properties": {"ok": {"type": "boolean"}, "files": {"type": "array", "items": {"type": "string"}}}});
    let Some(o) = run_task(cli, cli.native, Some(script), Some(schema)).await else {
        return; // skipped: run_task recorded why
    };
    match o.r.outcome() {
        Ok(v) => assert_eq!(
            v,
            &json!({"ok": true, "files": ["out.txt"]}),
            "{:?}",
            o.requests
        ),
        Err(e) => panic!("{e}\n{}", o.r.stdout),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_returns_schema_validated_json() {
    structured(CLAUDE_CODE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_returns_schema_validated_json() {
    structured(CODEX).await;
}
