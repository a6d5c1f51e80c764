//! `babysitter run` executes agent, skill and orchestrator tasks on this machine, through the
//! harness launcher's code and a real harness CLI (the pinned Claude Code of
//! `scripts/ensure-claude-code.sh`; skipped, saying why, without it — a failure under
//! `BABYSITTER_REQUIRE_ALL=1`, as in CI) against the scripted model server. No server runs.
//!
//! Asserted: each kind reached the model with the prompt its kind makes (the skill named, the
//! orchestrator task's payload), the run completed with the three answers (the skill's checked
//! against its output schema), each effect was requested and resolved once, each one's usage
//! was journaled as `COST_TRACKED` (with its task kind), and `RUN_COMPLETED` carries
//! babysitter's `costStats` summed from them.

#[path = "../../tests/src/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};

use babysitter_transport_proxy::scripted::{Script, ScriptedServer, Turn};
use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

const PROCESS: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const review = defineTask('review', () => ({ kind: 'agent', title: 'review',
  agent: { prompt: 'AGENT-TASK: review the change' } }));
const notes = defineTask('notes', (a) => ({ kind: 'skill', title: 'Release notes',
  skill: { name: 'release-notes', prompt: { task: 'write them' }, context: { version: a.version },
           outputSchema: { type: 'object', required: ['via', 'version'] } } }));
export async function process(inputs, ctx) {
  const agent = await ctx.task(review, {});
  const skill = await ctx.task(notes, { version: '1.2.3' });
  const orchestrator = await ctx.orchestratorTask({ operation: 'tag-release', version: '1.2.3' },
    { label: 'tag' });
  return { agent, skill, orchestrator };
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_skill_and_orchestrator_tasks_run_here_through_a_real_harness() {
    let claude = repo().join(".ci-work/harness-claude/node_modules/.bin/claude");
    let Some(claude) = skip::installed(&claude) else {
        return skip::skip(format!(
            "needs the claude CLI at {}: run scripts/ensure-claude-code.sh",
            skip::tidy(&claude).display()
        ));
    };
    let script = Script {
        turns: vec![
            Turn::text_when_asked(
                "Use the `release-notes` skill",
                r#"{"via": "skill", "version": "1.2.3"}"#,
            ),
            Turn::text_when_asked("\"operation\": \"tag-release\"", "TAGGED"),
            Turn::text_when_asked("AGENT-TASK", "REVIEWED"),
        ],
    };
    let server = ScriptedServer::start(([127, 0, 0, 1], 0).into(), Some(script), None)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("p.mjs"), PROCESS).unwrap();
    // `babysitter up`'s config: only the pinned CLI, the scripted server as the provider, and
    // a dead proxy for anything else (a run is offline or fails).
    let config = format!(
        r#"[launcher.agent]
default-provider = "scripted"
binaries = {{ claude-code = "{claude}" }}
env = {{ HTTPS_PROXY = "http://127.0.0.1:9", HTTP_PROXY = "http://127.0.0.1:9" }}
[launcher.agent.providers.scripted]
protocol = "anthropic"
base-url = "{url}"
model = "scripted-model"
"#,
        claude = claude.display(),
        url = server.url()
    );
    std::fs::write(dir.path().join("babysitter.toml"), config).unwrap();
    let runs = dir.path().join("runs");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_babysitter"))
        .current_dir(&project)
        .args(["run", "p.mjs", "--json", "--config"])
        .arg(dir.path().join("babysitter.toml"))
        .arg("--runs-dir")
        .arg(&runs)
        .env_remove("BABYSITTER_RUNS_DIR")
        .env("HOME", dir.path())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "babysitter run failed: {stderr}");
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let finished = events
        .iter()
        .find(|e| e["event"] == "run.finished")
        .unwrap_or_else(|| panic!("no run.finished in {events:?}\n{stderr}"));
    assert_eq!(finished["status"], "completed", "{finished}");
    assert_eq!(
        finished["output"],
        json!({"agent": "REVIEWED", "skill": {"via": "skill", "version": "1.2.3"}, "orchestrator": "TAGGED"})
    );

    // What the model was asked: each kind's prompt, through the real CLI.
    let bodies: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    let asked = |needle: &str| bodies.iter().any(|b| b.contains(needle));
    assert!(asked("AGENT-TASK: review the change"), "the agent prompt");
    assert!(
        asked("Use the `release-notes` skill for this task."),
        "the skill named"
    );
    assert!(
        asked("\\\"version\\\": \\\"1.2.3\\\""),
        "the skill's context"
    );
    assert!(asked("Payload:"), "the orchestrator task's payload");

    // The journal: one request and one resolution per effect, and each one's usage.
    let run_id = finished["runId"].as_str().unwrap();
    let journal = runs.join(run_id).join("journal");
    let mut types: Vec<(String, Value)> = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&journal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files {
        let e: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
        types.push((e["type"].as_str().unwrap().to_owned(), e["data"].clone()));
    }
    let count = |t: &str| types.iter().filter(|(ty, _)| ty == t).count();
    assert_eq!(count("EFFECT_REQUESTED"), 3, "{types:?}");
    assert_eq!(count("EFFECT_RESOLVED"), 3, "{types:?}");
    assert_eq!(count("COST_TRACKED"), 3, "{types:?}");
    let kinds: Vec<&str> = types
        .iter()
        .filter(|(t, _)| t == "EFFECT_REQUESTED")
        .map(|(_, d)| d["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["agent", "skill", "orchestrator_task"]);
    let mut input_tokens = 0;
    for (_, d) in types.iter().filter(|(t, _)| t == "COST_TRACKED") {
        assert_eq!(d["model"], "scripted-model", "{d}");
        assert!(d["inputTokens"].as_u64().unwrap_or(0) > 0, "{d}");
        input_tokens += d["inputTokens"].as_u64().unwrap_or(0);
    }
    // RUN_COMPLETED carries babysitter's costStats, summed from those events.
    let (_, completed) = types
        .iter()
        .find(|(t, _)| t == "RUN_COMPLETED")
        .expect("RUN_COMPLETED");
    let stats = &completed["costStats"];
    assert_eq!(stats["runId"], run_id, "{stats}");
    assert_eq!(stats["eventCount"], 3, "{stats}");
    assert_eq!(stats["totalInputTokens"], input_tokens, "{stats}");
    assert_eq!(
        stats["byModel"]["scripted-model"]["eventCount"], 3,
        "{stats}"
    );
    for kind in ["agent", "skill", "orchestrator_task"] {
        assert_eq!(stats["byKind"][kind]["eventCount"], 1, "{kind}: {stats}");
    }
    // Each result says which harness ran it, and keeps the agent's events on record (a blob
    // of JSON lines, as a worker's completion does): from the session's start to its end.
    for (_, d) in types.iter().filter(|(t, _)| t == "EFFECT_RESOLVED") {
        let effect = runs
            .join(run_id)
            .join("tasks")
            .join(d["effectId"].as_str().unwrap());
        let result: Value =
            serde_json::from_slice(&std::fs::read(effect.join("result.json")).unwrap()).unwrap();
        assert_eq!(result["metadata"]["harness"], "claude-code", "{result}");
        let blob = result["metadata"]["agentEventsBlob"].as_str().unwrap();
        let hex = blob.strip_prefix("sha256:").unwrap();
        let lines =
            std::fs::read_to_string(runs.join(run_id).join(format!("blobs/sha256-{hex}"))).unwrap();
        let stored: Vec<Value> = lines
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(result["metadata"]["agentEvents"], stored.len(), "{result}");
        assert_eq!(
            stored.first().map(|e| &e["type"]),
            Some(&json!("session.started"))
        );
        assert_eq!(
            stored.last().map(|e| &e["type"]),
            Some(&json!("session.ended"))
        );
        assert!(!lines.contains("\"item.delta\""), "{lines}");
    }
    server.stop().await;
}

/// Two agent tasks sharing a session (`agent.session`); the second is stopped by a 429 once
/// the first time it asks the model, then resumes after the quota window.
const SESSIONS: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const agent = defineTask('agent', (a) => ({ kind: 'agent', title: a.title,
  agent: { prompt: a.prompt, session: 'pair' } }));
export async function process(inputs, ctx) {
  const first = await ctx.task(agent, { title: 'first', prompt: 'FIRST-TASK: run the ledger command' });
  const second = await ctx.task(agent, { title: 'second', prompt: 'FOLLOW-UP: say what it printed' });
  return { first, second };
}
"#;

/// Locally, as on a worker: a follow-up task continues the named session kept in the run, and
/// a harness stopped by a quota window is waited out and resumed (the command ran once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follow_up_continues_the_session_and_a_quota_stop_is_waited_out_here() {
    use babysitter_transport_proxy::scripted::{Reply, ScriptedError, When};
    let claude = repo().join(".ci-work/harness-claude/node_modules/.bin/claude");
    let Some(claude) = skip::installed(&claude) else {
        return skip::skip(format!(
            "needs the claude CLI at {}: run scripts/ensure-claude-code.sh",
            skip::tidy(&claude).display()
        ));
    };
    let dir = tempfile::tempdir().unwrap();
    let ledger = dir.path().join("ledger");
    let when = |w: When, reply: Reply| Turn {
        when: Some(w),
        reply,
        ..Turn::default()
    };
    let text = |t: &str| Reply {
        text: Some(t.into()),
        ..Reply::default()
    };
    let script = Script {
        turns: vec![
            // The resumed follow-up: its answer.
            when(
                When {
                    last_user_text_contains: Some("was interrupted before it finished".into()),
                    ..When::default()
                },
                text("SECOND"),
            ),
            // The follow-up's first ask: a 429 (the CLI does not retry: see the env below).
            when(
                When {
                    last_user_text_contains: Some("FOLLOW-UP".into()),
                    ..When::default()
                },
                Reply {
                    error: Some(ScriptedError {
                        status: 429,
                        message: Some("rate limit reached".into()),
                        retry_after: None,
                    }),
                    ..Reply::default()
                },
            ),
            when(
                When {
                    has_tool_result: Some(true),
                    ..When::default()
                },
                text("FIRST"),
            ),
            when(
                When {
                    has_tool_result: Some(false),
                    ..When::default()
                },
                Reply {
                    shell: Some(format!(
                        "echo ran >> {} && echo TOOL-MARKER-9c2",
                        ledger.display()
                    )),
                    ..Reply::default()
                },
            ),
        ],
    };
    let server = ScriptedServer::start(([127, 0, 0, 1], 0).into(), Some(script), None)
        .await
        .unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("p.mjs"), SESSIONS).unwrap();
    let config = format!(
        r#"[launcher.agent]
default-provider = "scripted"
quota-retry-secs = 1
binaries = {{ claude-code = "{claude}" }}
env = {{ HTTPS_PROXY = "http://127.0.0.1:9", HTTP_PROXY = "http://127.0.0.1:9", CLAUDE_CODE_MAX_RETRIES = "0" }}
[launcher.agent.providers.scripted]
protocol = "anthropic"
base-url = "{url}"
model = "scripted-model"
"#,
        claude = claude.display(),
        url = server.url()
    );
    std::fs::write(dir.path().join("babysitter.toml"), config).unwrap();
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_babysitter"))
        .current_dir(&project)
        .args(["run", "p.mjs", "--json", "--config"])
        .arg(dir.path().join("babysitter.toml"))
        .arg("--runs-dir")
        .arg(dir.path().join("runs"))
        .env_remove("BABYSITTER_RUNS_DIR")
        .env("HOME", dir.path())
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "babysitter run failed: {stderr}");
    let finished = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["event"] == "run.finished")
        .unwrap_or_else(|| panic!("no run.finished\n{stderr}"));
    assert_eq!(finished["status"], "completed", "{finished}\n{stderr}");
    assert_eq!(
        finished["output"],
        json!({"first": "FIRST", "second": "SECOND"})
    );
    let bodies: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    let follow_up = bodies
        .iter()
        .find(|b| b.contains("FOLLOW-UP"))
        .expect("the follow-up asked the model");
    for want in ["FIRST-TASK", "TOOL-MARKER-9c2"] {
        assert!(
            follow_up.contains(want),
            "the follow-up carries the first task's turns: {want}"
        );
    }
    assert!(
        server.requests().iter().any(|r| r.status == 429),
        "the follow-up was stopped by a 429 first"
    );
    let resumed = bodies
        .iter()
        .find(|b| b.contains("was interrupted before it finished"))
        .expect("the follow-up resumed after the window");
    assert!(resumed.contains("FOLLOW-UP"), "and kept its own turn");
    let ran = std::fs::read_to_string(&ledger).unwrap_or_default();
    assert_eq!(ran.lines().count(), 1, "the command ran once: {ran:?}");
}
