//! The worker runs agent tasks end to end over gRPC with stand-in harness binaries (shell
//! scripts): it advertises only the harnesses that answer `--version`, reports events while a
//! task runs, completes with value, usage and metadata, and turns a crash, a hang and garbage
//! into task errors — then still completes the next task (it stays healthy).

#[path = "support/fake_orchestrator.rs"]
mod fake_orchestrator;
#[path = "support/worker.rs"]
mod worker;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use babysitter_common::EnvMap;
use babysitter_harness_launcher::config::AgentConfig;
use babysitter_harness_launcher::provider::ProviderConfig;
use babysitter_proto::common::v1 as cpb;
use babysitter_transport_proxy::protocol::Protocol;
use serde_json::{Value, json};

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\nif [ \"$1\" = --version ]; then echo '2.1.197 (Claude Code)'; exit 0; fi\n{body}\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{e}"));
    p
}

const GOOD: &str = r#"case "$2" in
  *crash*) echo 'fatal: out of credits' >&2; exit 2;;
  *hang*) sleep 600;;
  *garbage*) echo 'this is not stream-json'; exit 0;;
esac
echo '{"type":"system","subtype":"init","session_id":"s1","model":"fake-model"}'
echo '{"type":"assistant","message":{"id":"m1","model":"fake-model","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"echo hello > out.txt"}}]}}'
echo hello > out.txt
echo '{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"(Bash completed with no output)","is_error":false}]}}'
echo '{"type":"assistant","message":{"id":"m2","model":"fake-model","content":[{"type":"text","text":"DONE"}]}}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"DONE","usage":{"input_tokens":300,"output_tokens":20}}'"#;

fn err(r: &cpb::TaskResult) -> cpb::TaskError {
    match &r.outcome {
        Some(cpb::task_result::Outcome::Error(e)) => e.clone(),
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_tasks_run_through_the_worker_and_bad_runs_fail_without_hurting_it() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let bin_dir = dir.path().join("bin");
    std::fs::create_dir_all(&bin_dir).unwrap_or_else(|e| panic!("{e}"));
    let claude = script(&bin_dir, "claude", GOOD);
    let config = AgentConfig {
        binaries: BTreeMap::from([("claude-code".into(), claude)]),
        providers: BTreeMap::from([(
            "local".into(),
            ProviderConfig {
                protocol: Protocol::Anthropic,
                base_url: "http://127.0.0.1:9".into(),
                api_key_env: None,
                model: Some("fake-model".into()),
                kind: Default::default(),
            },
        )]),
        default_provider: "local".into(),
        ..AgentConfig::default()
    };
    // PATH without any real harness: only the configured stand-in is detected.
    let env = EnvMap::new().with("PATH", "/usr/bin:/bin");
    let agents = config.settings(&env).await;
    let orch = fake_orchestrator::Running::start().await;
    let w = worker::start(&orch, agents, &dir.path().join("work"));

    let caps = orch.capabilities().await;
    let names: Vec<(&str, &str)> = caps
        .harnesses
        .iter()
        .map(|h| (h.name.as_str(), h.version.as_str()))
        .collect();
    assert_eq!(
        names,
        vec![("claude-code", "2.1.197")],
        "only the installed harness is advertised"
    );
    assert!(
        caps.task_kinds.contains(&"agent".to_owned()),
        "{:?}",
        caps.task_kinds
    );

    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap_or_else(|e| panic!("{e}"));
    let agent = |prompt: &str, extra: Value| {
        let mut t = json!({"kind": "agent", "execution": {"harness": "claude-code", "cwd": project},
                           "agent": {"prompt": prompt}});
        if let (Some(a), Some(e)) = (t["agent"].as_object_mut(), extra.as_object()) {
            a.extend(e.clone());
        }
        t
    };
    orch.push("crash", "agent", agent("crash please", json!({})));
    orch.push(
        "hang",
        "agent",
        agent("hang please", json!({"timeoutMs": 1000})),
    );
    orch.push("garbage", "agent", agent("garbage please", json!({})));
    let guard = Duration::from_secs(60);

    let e = err(&orch.result("crash", guard).await);
    assert_eq!(
        (e.name.as_str(), e.message.as_str()),
        (
            "AgentExitError",
            "claude-code exited with code 2: fatal: out of credits"
        )
    );
    let e = err(&orch.result("hang", guard).await);
    assert_eq!(e.name, "AgentTimeoutError");
    let r = orch.result("garbage", guard).await;
    let e = err(&r);
    assert_eq!(e.name, "AgentOutputError");
    assert_eq!(
        String::from_utf8_lossy(&r.stdout),
        "this is not stream-json\n"
    );
    let data: Value = serde_json::from_slice(&e.data_json).unwrap_or_default();
    assert_eq!(data["stdout"], "this is not stream-json\n");

    // Healthy afterwards: a good task completes with value, usage and events.
    orch.push("good", "agent", agent("write the file", json!({})));
    let r = orch.result("good", guard).await;
    match &r.outcome {
        Some(cpb::task_result::Outcome::ValueJson(v)) => assert_eq!(&v[..], b"\"DONE\""),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(project.join("out.txt")).unwrap_or_default(),
        "hello\n"
    );
    let usage = r.usage.clone().unwrap_or_default();
    assert_eq!(
        (
            usage.provider.as_str(),
            usage.model.as_str(),
            usage.input_tokens,
            usage.output_tokens
        ),
        ("local", "fake-model", 300, 20)
    );
    let meta: Value = serde_json::from_slice(&r.metadata_json).unwrap_or_default();
    assert_eq!(meta["harness"], "claude-code");
    assert_eq!(meta["nativeSessionId"], "s1");
    let evs = orch.events("good").await;
    babysitter_harness_launcher::testing::check_tool_turn_events(&evs, "the stand-in's good run");
    // Garbage was reported as it happened.
    let garbage = orch.events("garbage").await;
    assert_eq!(
        garbage
            .iter()
            .filter(|e| e.r#type == "agent.unparsed")
            .count(),
        1
    );

    // A task for a harness this worker does not have is an error, not a hang.
    orch.push(
        "nocodex",
        "agent",
        json!({"kind": "agent", "execution": {"harness": "codex"}, "agent": {"prompt": "x"}}),
    );
    let e = err(&orch.result("nocodex", guard).await);
    assert_eq!(e.message, "harness `codex` is not installed on this worker");

    w.stop().await;
    orch.stop().await;
}
