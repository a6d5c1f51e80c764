//! An agent task's universal events in the dashboard, in a real browser: `babysitter up` (a
//! client token, its worker with the pinned Claude Code of `scripts/ensure-claude-code.sh`
//! against the scripted model server), a run that waits on a breakpoint and then gives Claude
//! Code a task with a shell call. `dashboard_agent.py` drives the system Chromium: it approves
//! the breakpoint from the page, sees the agent's events arrive live while the shell call
//! waits, lets the call finish, and reads the task's stored events back as its timeline (the
//! tool call, its output, the answer; no deltas). Saves docs/screenshots/agent-events.png.
//!
//! Skipped (saying why) without Chromium and Playwright (scripts/ensure-playwright.sh) or the
//! claude CLI; a failure under BABYSITTER_REQUIRE_ALL=1.

mod dashboard_support;
#[path = "../../tests/src/skip.rs"]
mod skip;

use babysitter_proto::orchestrator::v1 as pb;
use babysitter_transport_proxy::scripted::{Reply, Script, ScriptedServer, Turn, When};
use serde_json::json;

use dashboard_support::{browser, connect, create, repo, start_up, wait_status};

const TOKEN: &str = "alice-token";
const ANSWER: &str = "AGENT-ANSWER-5e2";
/// What the shell call prints; the command spells it in halves so only its output matches.
const TOOL_OUTPUT: &str = "TOOL-OUTPUT-91c";

fn process(release: &std::path::Path) -> String {
    format!(
        r#"
import {{ defineTask }} from '@a5c-ai/babysitter-sdk';
const work = defineTask('work', () => ({{ kind: 'agent', title: 'work',
  execution: {{ harness: 'claude-code' }},
  agent: {{ prompt: 'DASHBOARD-AGENT: run the command (release {rel})' }} }}));
export async function process(inputs, ctx) {{
  await ctx.breakpoint({{ question: 'start the agent?' }}, {{ label: 'gate' }});
  return await ctx.task(work, {{}});
}}
"#,
        rel = release.display()
    )
}

fn turn(when: When, reply: Reply) -> Turn {
    Turn {
        when: Some(when),
        reply,
        ..Turn::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stdout)]
async fn an_agent_tasks_events_live_and_on_record_in_a_real_browser() {
    let python = match browser() {
        Ok(p) => p,
        Err(why) => return skip::skip(why),
    };
    let repo = repo();
    let claude = repo.join(".ci-work/harness-claude/node_modules/.bin/claude");
    let Some(claude) = skip::installed(&claude) else {
        return skip::skip(format!(
            "needs the claude CLI at {}: run scripts/ensure-claude-code.sh",
            skip::tidy(&claude).display()
        ));
    };
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("release");
    let (a, b) = TOOL_OUTPUT.split_at(7);
    let script = Script {
        turns: vec![
            turn(
                When {
                    has_tool_result: Some(true),
                    ..When::default()
                },
                Reply {
                    text: Some(ANSWER.into()),
                    ..Reply::default()
                },
            ),
            turn(
                When {
                    has_tool_result: Some(false),
                    has_tools: Some(true),
                    ..When::default()
                },
                Reply {
                    shell: Some(format!(
                        "while [ ! -f {} ]; do sleep 0.1; done; printf '%s%s\\n' {a} {b}",
                        release.display()
                    )),
                    ..Reply::default()
                },
            ),
        ],
    };
    let scripted = ScriptedServer::start(([127, 0, 0, 1], 0).into(), Some(script), None)
        .await
        .unwrap();
    let agent = format!(
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
        url = scripted.url()
    );
    let (_up, dash, orch) = start_up(dir.path(), &dir.path().join("data"), TOKEN, "alice", &agent);
    let data = dir.path().join("data");
    let mut c = connect(&orch, Some(TOKEN)).await;
    let run = create(&mut c, &process(&release), None).await;
    wait_status(&mut c, &run, pb::RunStatus::Waiting).await;

    let args = json!({
        "url": format!("http://{dash}"),
        "token": TOKEN,
        "run": run,
        "release": release,
        "tool_output": TOOL_OUTPUT,
        "answer": ANSWER,
        "screenshots": repo.join("docs/screenshots"),
        "profile": dir.path().join("chromium-profile"),
    });
    let out = tokio::process::Command::new(&python)
        .arg(repo.join("cli/tests/dashboard_agent.py"))
        .arg(args.to_string())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "the browser checks failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // What the page read is what the journal holds: the run's value is the agent's answer,
    // and the agent task's result names its record.
    wait_status(&mut c, &run, pb::RunStatus::Completed).await;
    let tasks = std::fs::read_dir(data.join("runs").join(&run).join("tasks")).unwrap();
    let records: Vec<serde_json::Value> = tasks
        .map(|t| t.unwrap().path().join("result.json"))
        .filter_map(|p| std::fs::read(p).ok())
        .map(|b| serde_json::from_slice(&b).unwrap())
        .filter(|r: &serde_json::Value| r.pointer("/metadata/agentEventsBlob").is_some())
        .collect();
    assert_eq!(
        records.len(),
        1,
        "one agent task with a record: {records:?}"
    );
    assert_eq!(records[0]["value"], ANSWER, "{}", records[0]);
    assert!(
        records[0]["metadata"]["agentEvents"].as_u64().unwrap() >= 5,
        "{}",
        records[0]
    );
    scripted.stop().await;
}
