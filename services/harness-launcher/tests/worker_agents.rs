//! The worker runs agent tasks end to end over gRPC, against the real orchestrator, with
//! stand-in harness binaries (shell scripts): it advertises only the harnesses that answer
//! `--version`, reports events while a task runs (relayed to the run's watchers), completes with
//! value, usage and metadata (journaled), and turns a crash, a hang and garbage into task errors —
//! then still completes the next task (it stays healthy). A task for a harness it does not
//! advertise is never routed to it: the run says why instead of hanging silently.

#[path = "support/orchestrator.rs"]
mod orchestrator;
#[path = "support/worker.rs"]
mod worker;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use babysitter_common::EnvMap;
use babysitter_harness_launcher::config::AgentConfig;
use babysitter_harness_launcher::provider::ProviderConfig;
use babysitter_transport_proxy::protocol::Protocol;
use serde_json::{Value, json};

use orchestrator::Orchestrator;

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
    let orch = Orchestrator::start_grpc().await;
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
    orch.push("crash", "agent", agent("crash please", json!({})))
        .await;
    orch.push(
        "hang",
        "agent",
        agent("hang please", json!({"timeoutMs": 1000})),
    )
    .await;
    orch.push("garbage", "agent", agent("garbage please", json!({})))
        .await;
    let guard = Duration::from_secs(60);

    // Each result as the orchestrator journaled it (`result.json`, the logs).
    let r = orch.result("crash", guard).await;
    let e = r.error();
    assert_eq!(
        (&e["name"], &e["message"]),
        (
            &json!("AgentExitError"),
            &json!("claude-code exited with code 2: fatal: out of credits")
        )
    );
    let r = orch.result("hang", guard).await;
    assert_eq!(r.error()["name"], "AgentTimeoutError");
    let r = orch.result("garbage", guard).await;
    let e = r.error();
    assert_eq!(e["name"], "AgentOutputError");
    assert_eq!(r.stdout, "this is not stream-json\n");
    assert_eq!(e["data"]["stdout"], "this is not stream-json\n");

    // Healthy afterwards: a good task completes with value, usage and events.
    orch.push("good", "agent", agent("write the file", json!({})))
        .await;
    let r = orch.result("good", guard).await;
    assert_eq!(r.outcome(), Ok(&json!("DONE")), "{}", r.doc);
    assert_eq!(
        std::fs::read_to_string(project.join("out.txt")).unwrap_or_default(),
        "hello\n"
    );
    // The usage the worker reported, journaled as the task's COST_TRACKED.
    let usage = r.cost.clone().unwrap_or_default();
    assert_eq!(
        (
            &usage["provider"],
            &usage["model"],
            &usage["inputTokens"],
            &usage["outputTokens"]
        ),
        (
            &json!("local"),
            &json!("fake-model"),
            &json!(300),
            &json!(20)
        )
    );
    let meta = r.metadata();
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

    // A task for a harness this worker does not have is not a silent hang: the orchestrator
    // routes by the harnesses the worker advertised, so it never hands the task over and says
    // why in the run's status. (The worker's own refusal, should such a task reach it anyway,
    // is `agent::tests::a_harness_that_is_not_installed_or_a_bad_task_fails_clearly`.)
    orch.push(
        "nocodex",
        "agent",
        json!({"kind": "agent", "execution": {"harness": "codex"}, "agent": {"prompt": "x"}}),
    )
    .await;
    assert_eq!(
        orch.status_reason("nocodex", "no live worker").await,
        "no live worker can run a `agent` task with harness `codex` in namespace `default`"
    );
    assert!(orch.queued_unleased("nocodex"));

    w.stop().await;
    orch.stop().await;
}
