//! The real harness CLIs (pinned npm installs in `<repo>/.ci-work/harness-*`, put there by
//! `scripts/ensure-{claude-code,codex,gemini-cli,pi,opencode}.sh`, which `.ci/run` calls) run an
//! agent task through the real worker against the scripted model server: the model asks for one
//! shell call (`echo hello > out.txt`), then answers `DONE`. Each run must leave `out.txt` in
//! the task's project, complete the task with `"DONE"`, usage and metadata, and report a
//! universal event stream with the tool call and result and zero `agent.unparsed`. Two runs go
//! through the in-process transport proxy: Claude Code to an OpenAI-Chat upstream and Codex to
//! an Anthropic upstream. A harness that is not installed is skipped, saying why.
//!
//! With `BABYSITTER_RECORD_FIXTURES=1` each run's native stdout is written to
//! `tests/fixtures/native/<harness>.jsonl`, the parser fixtures replayed by the unit tests.

#[path = "support/fake_orchestrator.rs"]
mod fake_orchestrator;
#[path = "support/worker.rs"]
mod worker;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use babysitter_common::EnvMap;
use babysitter_harness_launcher::config::AgentConfig;
use babysitter_harness_launcher::provider::ProviderConfig;
use babysitter_proto::common::v1 as cpb;
use babysitter_transport_proxy::protocol::Protocol;
use babysitter_transport_proxy::scripted::ScriptedServer;
use serde_json::{Value, json};

fn installed(dir: &str, bin: &str) -> Option<PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let p = root
        .join("../../.ci-work")
        .join(dir)
        .join("node_modules/.bin")
        .join(bin);
    if std::fs::metadata(&p).is_ok_and(|m| m.is_file()) {
        Some(p)
    } else {
        eprintln!("SKIPPED: {} missing; run scripts/ensure-*.sh", p.display());
        None
    }
}

/// One agent task for `harness` with a scripted provider speaking `upstream`.
async fn run(harness: &str, dir: &str, bin: &str, upstream: Protocol, record: bool) {
    let Some(r) = run_task(harness, dir, bin, upstream, None, None).await else {
        return;
    };
    check_tool_turn(harness, upstream, record, r);
}

/// What one run left behind.
struct Outcome {
    r: cpb::TaskResult,
    evs: Vec<cpb::AgentEvent>,
    project: tempfile::TempDir,
    requests: Vec<String>,
}

/// Runs one agent task through the worker; `None` when the harness is not installed.
async fn run_task(
    harness: &str,
    dir: &str,
    bin: &str,
    upstream: Protocol,
    script: Option<Value>,
    output_schema: Option<Value>,
) -> Option<Outcome> {
    let path = installed(dir, bin)?;
    let script =
        script.map(|s| serde_json::from_value(s).unwrap_or_else(|e| panic!("script: {e}")));
    let scripted = ScriptedServer::start(([127, 0, 0, 1], 0).into(), script, None)
        .await
        .unwrap_or_else(|e| panic!("scripted: {e}"));
    let config = AgentConfig {
        binaries: BTreeMap::from([(harness.to_owned(), path)]),
        providers: BTreeMap::from([(
            "scripted".into(),
            ProviderConfig {
                protocol: upstream,
                base_url: scripted.url(),
                api_key_env: None,
                model: Some("fake-model".into()),
                kind: Default::default(),
            },
        )]),
        default_provider: "scripted".into(),
        // Outside traffic goes to a dead loopback proxy: the run is offline or fails.
        env: BTreeMap::from([
            ("HTTPS_PROXY".into(), "http://127.0.0.1:9".into()),
            ("HTTP_PROXY".into(), "http://127.0.0.1:9".into()),
        ]),
        ..AgentConfig::default()
    };
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
    let orch = fake_orchestrator::Running::start().await;
    let w = worker::start(&orch, agents, &tmp.path().join("work"));
    orch.push(
        "t1",
        "agent",
        json!({"kind": "agent", "execution": {"harness": harness, "cwd": project.path()},
               "agent": {"prompt": "Create out.txt containing hello using the shell, then reply DONE",
                         "outputSchema": output_schema}}),
    );
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

fn check_tool_turn(harness: &str, upstream: Protocol, record: bool, o: Outcome) {
    let Outcome {
        r,
        evs,
        project,
        requests,
    } = o;
    let project = project.path();
    let stdout = String::from_utf8_lossy(&r.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&r.stderr).into_owned();
    if record {
        let f = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/native")
            .join(format!("{harness}.jsonl"));
        std::fs::write(&f, &stdout).unwrap_or_else(|e| panic!("{e}"));
    }
    let ctx = format!(
        "{harness} via {upstream}\nrequests: {requests:?}\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    match &r.outcome {
        Some(cpb::task_result::Outcome::ValueJson(v)) => {
            let v: Value = serde_json::from_slice(v).unwrap_or_default();
            assert_eq!(v.as_str().map(str::trim), Some("DONE"), "{ctx}");
        }
        other => panic!("{other:?}\n{ctx}"),
    }
    let written = std::fs::read_to_string(project.join("out.txt")).unwrap_or_default();
    assert_eq!(written.trim(), "hello", "{ctx}");
    let types: Vec<&str> = evs.iter().map(|e| e.r#type.as_str()).collect();
    let unparsed: Vec<String> = evs
        .iter()
        .filter(|e| e.r#type == "agent.unparsed")
        .map(|e| String::from_utf8_lossy(&e.data_json).into_owned())
        .collect();
    assert!(unparsed.is_empty(), "{unparsed:?}\n{ctx}");
    let kinds: Vec<String> = evs
        .iter()
        .filter(|e| e.r#type == "item.completed")
        .filter_map(|e| serde_json::from_slice::<Value>(&e.data_json).ok())
        .filter_map(|d| d["item"]["kind"].as_str().map(str::to_owned))
        .collect();
    assert!(kinds.iter().any(|k| k == "tool_call"), "{kinds:?}\n{ctx}");
    assert!(kinds.iter().any(|k| k == "tool_result"), "{kinds:?}\n{ctx}");
    assert_eq!(types.first(), Some(&"session.started"), "{types:?}");
    assert_eq!(types.last(), Some(&"session.ended"), "{types:?}");
    let usage = r.usage.clone().unwrap_or_default();
    assert_eq!(usage.provider, "scripted");
    assert_eq!(usage.model, "fake-model");
    assert!(
        usage.input_tokens > 0 && usage.output_tokens > 0,
        "{usage:?}\n{ctx}"
    );
    let meta: Value = serde_json::from_slice(&r.metadata_json).unwrap_or_default();
    let proxied = !harness_speaks(harness, upstream);
    assert_eq!(meta["viaProxy"].is_string(), proxied, "{meta}");
}

fn harness_speaks(harness: &str, p: Protocol) -> bool {
    babysitter_harness_launcher::harness::HarnessKind::from_name(harness)
        .is_some_and(|k| k.native_protocols().contains(&p))
}

fn recording() -> bool {
    std::env::var("BABYSITTER_RECORD_FIXTURES").is_ok_and(|v| v == "1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_completes_an_agent_task() {
    run(
        "claude-code",
        "harness-claude",
        "claude",
        Protocol::Anthropic,
        recording(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_completes_an_agent_task() {
    run(
        "codex",
        "harness-codex",
        "codex",
        Protocol::OpenAiResponses,
        recording(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_completes_an_agent_task() {
    run(
        "gemini-cli",
        "harness-gemini",
        "gemini",
        Protocol::Gemini,
        recording(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_completes_an_agent_task() {
    run("pi", "harness-pi", "pi", Protocol::OpenAiChat, recording()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_completes_an_agent_task() {
    run(
        "opencode",
        "harness-opencode",
        "opencode",
        Protocol::OpenAiChat,
        recording(),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_reaches_an_openai_chat_upstream_through_the_proxy() {
    run(
        "claude-code",
        "harness-claude",
        "claude",
        Protocol::OpenAiChat,
        false,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_reaches_an_anthropic_upstream_through_the_proxy() {
    run(
        "codex",
        "harness-codex",
        "codex",
        Protocol::Anthropic,
        false,
    )
    .await;
}

/// A task with an output schema: the model answers JSON (scripted), the value is that object.
async fn structured(harness: &str, dir: &str, bin: &str, upstream: Protocol) {
    let script =
        json!({"turns": [{"reply": {"text": "{\"ok\": true, \"files\": [\"out.txt\"]}"}}]});
    let schema = json!({"type": "object", "required": ["ok", "files"],
                        "properties": {"ok": {"type": "boolean"}, "files": {"type": "array", "items": {"type": "string"}}}});
    let Some(o) = run_task(harness, dir, bin, upstream, Some(script), Some(schema)).await else {
        return;
    };
    match &o.r.outcome {
        Some(cpb::task_result::Outcome::ValueJson(v)) => {
            let v: Value = serde_json::from_slice(v).unwrap_or_default();
            assert_eq!(
                v,
                json!({"ok": true, "files": ["out.txt"]}),
                "{:?}",
                o.requests
            );
        }
        other => panic!("{other:?}\n{}", String::from_utf8_lossy(&o.r.stdout)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_returns_schema_validated_json() {
    structured(
        "claude-code",
        "harness-claude",
        "claude",
        Protocol::Anthropic,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_returns_schema_validated_json() {
    structured("codex", "harness-codex", "codex", Protocol::OpenAiResponses).await;
}
