//! Agent sessions that survive their worker, with each real harness CLI (Claude Code, Codex,
//! Gemini CLI, Pi, OpenCode) against the scripted model server, every service an OS process:
//!
//! - **a worker killed in the middle of an agent task**: the model asks for one shell call
//!   (which appends to a ledger and prints a marker), then hangs on the next request. Once the
//!   session saved off the worker holds that call's result, the worker is killed with
//!   `SIGKILL` (its harness with it). A second worker takes the task when the lease lapses,
//!   restores the session into its own home and a new project directory, and resumes it: the
//!   model's next request carries the earlier turns (the task's prompt, the call and the
//!   marker) and the resume prompt; the task completes with the answer to it; the ledger shows
//!   the command ran once; the result says which attempt's session it resumed.
//! - **a follow-up task in the same session** (`agent.session`): the second task's request
//!   carries the first task's turns, then its own prompt.
//!
//! The time from the kill to the resumed request is printed (`resume after worker death`); it
//! is mostly the lease running out (2 s here). A missing CLI skips its test, saying why (a
//! failure in CI, `BABYSITTER_REQUIRE_ALL=1`).

#[path = "support/agent_stack.rs"]
mod agent_stack;
#[path = "support/cluster.rs"]
mod cluster;

use std::time::Duration;

use agent_stack::{RUN_GUARD, Stack, watch_to_end};
use babysitter_harness_launcher::testing::{CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE, PI, RealCli};
use babysitter_proto::journal::v1 as jpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_tests::skip::{self, skip};
use babysitter_transport_proxy::scripted::{
    Reply, Script, ScriptedError, ScriptedServer, Turn, When,
};
use cluster::data;
use serde_json::{Value, json};

/// One agent task; the process returns its answer.
const ONE_TASK: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const agent = defineTask('t.agent', (a) => ({ kind: 'agent', title: 'ledger',
  execution: { harness: a.harness }, agent: { prompt: a.prompt } }));
export async function process(inputs, ctx) {
  return { answer: await ctx.task(agent, inputs) };
}
"#;

/// Two agent tasks in one named session: the second is a follow-up of the first.
const FOLLOW_UP: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const agent = defineTask('t.agent', (a) => ({ kind: 'agent', title: a.title,
  execution: { harness: a.harness }, agent: { prompt: a.prompt, session: 'pair' } }));
export async function process(inputs, ctx) {
  const first = await ctx.task(agent, { ...inputs, title: 'first', prompt: inputs.prompt });
  const second = await ctx.task(agent, { ...inputs, title: 'second', prompt: inputs.followUp });
  return { first, second };
}
"#;

const PROMPT: &str = "Run the ledger command with the shell, then wait for instructions";
const FOLLOW_UP_PROMPT: &str = "FOLLOW-UP: now say what the command printed";
/// What the shell call prints (the model sees it as the call's result). The command spells it
/// in two halves, so the marker is found only where the call's *result* is: a session saved
/// between the call and its result holds the command, which a resumed harness drops (Claude
/// Code resumes without a tool call that has no result).
const MARKER: &str = "TOOL-MARKER-7d41";
const MARKER_HALVES: (&str, &str) = ("TOOL-MARKER", "7d41");
/// Part of the launcher's resume prompt (`agent::CONTINUE_PROMPT`).
const RESUME_NEEDLE: &str = "was interrupted before it finished";

fn turn(when: When, reply: Reply) -> Turn {
    Turn {
        when: Some(when),
        reply,
        ..Turn::default()
    }
}

/// The shell call: appends to `ledger` and prints the marker.
fn shell_turn(ledger: &std::path::Path) -> Turn {
    assert_eq!(format!("{}-{}", MARKER_HALVES.0, MARKER_HALVES.1), MARKER);
    turn(
        When {
            has_tool_result: Some(false),
            has_tools: Some(true),
            ..When::default()
        },
        Reply {
            shell: Some(format!(
                "echo ran >> {} && printf '%s-%s\\n' {} {}",
                ledger.display(),
                MARKER_HALVES.0,
                MARKER_HALVES.1
            )),
            ..Reply::default()
        },
    )
}

fn text_when(needle: &str, text: &str) -> Turn {
    turn(
        When {
            last_user_text_contains: Some(needle.to_owned()),
            ..When::default()
        },
        Reply {
            text: Some(text.to_owned()),
            ..Reply::default()
        },
    )
}

fn installed(cli: RealCli) -> Option<std::path::PathBuf> {
    let bin = skip::installed(&cli.path());
    if bin.is_none() {
        skip::<()>(format!(
            "needs the {} CLI at {}: run scripts/ensure-{}.sh",
            cli.harness,
            skip::tidy(&cli.path()).display(),
            cli.harness
        ));
    }
    bin
}

/// The text of every request the model got whose last user message holds `needle`.
fn requests_with(scripted: &ScriptedServer, turn: usize) -> Vec<String> {
    scripted
        .requests()
        .iter()
        .filter(|r| r.turn == Some(turn))
        .map(|r| r.body.to_string())
        .collect()
}

/// Polls `cond` every 100 ms until it holds; panics with `what` and the logs after the guard.
async fn until(stack: &Stack, what: &str, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + RUN_GUARD;
    while !cond().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "waited in vain for {what}\n{}",
            stack.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The run file `path`, if it is there yet.
async fn run_file(stack: &Stack, run_id: &str, path: &str) -> Option<Vec<u8>> {
    cluster::journal_client(&stack.journal.ready, None)
        .get_run_file(jpb::GetRunFileRequest {
            run_id: run_id.into(),
            path: path.into(),
        })
        .await
        .ok()
        .map(|r| r.into_inner().content.to_vec())
}

#[allow(clippy::print_stdout)] // the figure the closing note quotes (`--no-capture`)
async fn resumes_after_worker_death(cli: RealCli) {
    let Some(bin) = installed(cli) else { return };
    let mut stack = Stack::start();
    let ledger = stack.dir.path().join("ledger");
    let script = Script {
        turns: vec![
            // 0: the resumed session: the answer.
            text_when(RESUME_NEEDLE, "RESUMED"),
            // 1: the request after the call's result: never answered (the worker dies).
            turn(
                When {
                    has_tool_result: Some(true),
                    ..When::default()
                },
                Reply {
                    raw_sse: Some(Vec::new()),
                    stall: true,
                    ..Reply::default()
                },
            ),
            // 2: the first request: the shell call.
            shell_turn(&ledger),
        ],
    };
    let scripted = ScriptedServer::start(([127, 0, 0, 1], 0).into(), Some(script), None)
        .await
        .expect("scripted model server");
    let config = || cli.scripted_config(bin.clone(), cli.native, scripted.url());
    let mut c = cluster::run_client(&stack.url(), None);
    let run_id = cluster::create(
        &mut c,
        ONE_TASK,
        json!({"harness": cli.harness, "prompt": PROMPT}),
    )
    .await;
    let detected = stack.start_worker("first", config());
    assert!(
        detected.contains(cli.harness),
        "{detected}\n{}",
        stack.logs()
    );

    // The call ran and the harness waits on the model; then the saved session holds the call's
    // result.
    until(&stack, "the request after the shell call", async || {
        !requests_with(&scripted, 1).is_empty()
    })
    .await;
    let events = cluster::journal_events(&stack.journal.ready, None, &run_id).await;
    let requested = events
        .iter()
        .find(|e| e.r#type == "EFFECT_REQUESTED")
        .map(data)
        .expect("the agent task was requested");
    let effect = requested["effectId"].as_str().expect("effectId").to_owned();
    let session_file = format!("tasks/{effect}/agent-session.json");
    until(
        &stack,
        "a saved session holding the call's result",
        async || {
            run_file(&stack, &run_id, &session_file)
                .await
                .is_some_and(|b| String::from_utf8_lossy(&b).contains(MARKER))
        },
    )
    .await;
    let saved: Value = serde_json::from_slice(
        &run_file(&stack, &run_id, &session_file)
            .await
            .expect("the saved session"),
    )
    .expect("the saved session is JSON");
    assert_eq!(saved["harness"], cli.harness, "{saved}");
    assert_eq!(saved["attempt"], 1, "{saved}");

    let killed = tokio::time::Instant::now();
    stack.workers[0].kill9();
    let mut stream = c
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.clone(),
            from_seq: 1,
            ..Default::default()
        })
        .await
        .expect("watch run")
        .into_inner();
    stack.start_worker("second", config());
    until(&stack, "the resumed session's request", async || {
        !requests_with(&scripted, 0).is_empty()
    })
    .await;
    println!(
        "resume after worker death ({}): {} ms from the kill to the resumed session's first model request (lease 2 s)",
        cli.harness,
        killed.elapsed().as_millis()
    );
    let watched = watch_to_end(&mut stream, &stack).await;
    let ctx = stack.logs();
    let last = watched.last.expect("the watch sent the run");
    assert_eq!(
        last.status,
        pb::RunStatus::Completed as i32,
        "{last:?}\n{ctx}"
    );

    // The model saw the earlier turns and the resume prompt.
    let resumed = requests_with(&scripted, 0);
    let first = &resumed[0];
    for want in [PROMPT, MARKER, RESUME_NEEDLE] {
        assert!(
            first.contains(want),
            "the resumed request holds {want:?}: {first}"
        );
    }
    // The command ran once.
    let ledger = std::fs::read_to_string(&ledger).unwrap_or_default();
    assert_eq!(ledger.lines().count(), 1, "ledger: {ledger:?}\n{ctx}");
    // One resolution, by the second attempt, which says what it resumed.
    let (resolved, result) = agent_stack::resolution(&stack, &run_id).await;
    assert_eq!(resolved["status"], "ok", "{resolved}\n{ctx}");
    assert_eq!(result["value"], "RESUMED", "{result}");
    let from = &result["metadata"]["session"]["resumed"];
    assert_eq!(from["attempt"], 1, "{result}");
    assert_eq!(from["effectId"], effect.as_str(), "{result}");
    assert_eq!(
        from["nativeSessionId"], saved["nativeSessionId"],
        "{result}"
    );
    for w in &mut stack.workers {
        w.terminate();
    }
    scripted.stop().await;
}

async fn follow_up_continues_the_session(cli: RealCli) {
    let Some(bin) = installed(cli) else { return };
    let mut stack = Stack::start();
    let ledger = stack.dir.path().join("ledger");
    let script = Script {
        turns: vec![
            text_when("FOLLOW-UP", "SECOND"),
            turn(
                When {
                    has_tool_result: Some(true),
                    ..When::default()
                },
                Reply {
                    text: Some("FIRST".into()),
                    ..Reply::default()
                },
            ),
            shell_turn(&ledger),
        ],
    };
    let scripted = ScriptedServer::start(([127, 0, 0, 1], 0).into(), Some(script), None)
        .await
        .expect("scripted model server");
    let mut c = cluster::run_client(&stack.url(), None);
    let run_id = cluster::create(
        &mut c,
        FOLLOW_UP,
        json!({"harness": cli.harness, "prompt": PROMPT, "followUp": FOLLOW_UP_PROMPT}),
    )
    .await;
    let mut stream = c
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.clone(),
            from_seq: 1,
            ..Default::default()
        })
        .await
        .expect("watch run")
        .into_inner();
    stack.start_worker(
        "w",
        cli.scripted_config(bin.clone(), cli.native, scripted.url()),
    );
    let watched = watch_to_end(&mut stream, &stack).await;
    let ctx = stack.logs();
    let last = watched.last.expect("the watch sent the run");
    assert_eq!(
        last.status,
        pb::RunStatus::Completed as i32,
        "{last:?}\n{ctx}"
    );
    let run = cluster::get_run(&mut c, &run_id).await;
    let output: Value = serde_json::from_slice(&run.output_json).expect("output");
    assert_eq!(
        output,
        json!({"first": "FIRST", "second": "SECOND"}),
        "{ctx}"
    );
    let follow_up = requests_with(&scripted, 0);
    let first = follow_up.first().expect("the follow-up's request");
    for want in [PROMPT, MARKER, FOLLOW_UP_PROMPT] {
        assert!(
            first.contains(want),
            "the follow-up request holds {want:?}: {first}"
        );
    }
    let ledger = std::fs::read_to_string(&ledger).unwrap_or_default();
    assert_eq!(ledger.lines().count(), 1, "ledger: {ledger:?}\n{ctx}");
    let saved: Value = serde_json::from_slice(
        &run_file(&stack, &run_id, "state/agent-session.pair.json")
            .await
            .expect("the named session is kept in the run"),
    )
    .expect("JSON");
    assert_eq!(saved["harness"], cli.harness, "{saved}");
    for w in &mut stack.workers {
        w.terminate();
    }
    scripted.stop().await;
}

/// Claude Code stopped by a 429 after its first call: the worker gives the task back, and the
/// next attempt (after `quota-retry-secs`) resumes the session instead of failing the effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_harness_stopped_by_a_quota_window_resumes_after_it() {
    let cli = CLAUDE_CODE;
    let Some(bin) = installed(cli) else { return };
    let mut stack = Stack::start();
    let ledger = stack.dir.path().join("ledger");
    let script = Script {
        turns: vec![
            text_when(RESUME_NEEDLE, "RESUMED"),
            turn(
                When {
                    has_tool_result: Some(true),
                    ..When::default()
                },
                Reply {
                    error: Some(ScriptedError {
                        status: 429,
                        message: Some("rate limit reached for this organization".into()),
                        retry_after: Some("1".into()),
                    }),
                    ..Reply::default()
                },
            ),
            shell_turn(&ledger),
        ],
    };
    let scripted = ScriptedServer::start(([127, 0, 0, 1], 0).into(), Some(script), None)
        .await
        .expect("scripted model server");
    let mut config = cli.scripted_config(bin, cli.native, scripted.url());
    // The CLI's own retries would outwait the window; the worker's give-back is under test.
    config
        .env
        .insert("CLAUDE_CODE_MAX_RETRIES".into(), "0".into());
    config.quota_retry_secs = 1;
    let mut c = cluster::run_client(&stack.url(), None);
    let run_id = cluster::create(
        &mut c,
        ONE_TASK,
        json!({"harness": cli.harness, "prompt": PROMPT}),
    )
    .await;
    let mut stream = c
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.clone(),
            from_seq: 1,
            ..Default::default()
        })
        .await
        .expect("watch run")
        .into_inner();
    stack.start_worker("w", config);
    let watched = watch_to_end(&mut stream, &stack).await;
    let ctx = stack.logs();
    let last = watched.last.expect("the watch sent the run");
    assert_eq!(
        last.status,
        pb::RunStatus::Completed as i32,
        "{last:?}\n{ctx}"
    );
    assert!(
        !requests_with(&scripted, 1).is_empty(),
        "the provider answered 429 first\n{ctx}"
    );
    let resumed = requests_with(&scripted, 0);
    let first = resumed.first().expect("the resumed session's request");
    for want in [PROMPT, MARKER, RESUME_NEEDLE] {
        assert!(
            first.contains(want),
            "the resumed request holds {want:?}: {first}"
        );
    }
    let ledger = std::fs::read_to_string(&ledger).unwrap_or_default();
    assert_eq!(ledger.lines().count(), 1, "ledger: {ledger:?}\n{ctx}");
    let (resolved, result) = agent_stack::resolution(&stack, &run_id).await;
    assert_eq!(resolved["status"], "ok", "{resolved}\n{ctx}");
    assert_eq!(result["value"], "RESUMED", "{result}");
    assert_eq!(
        result["metadata"]["session"]["resumed"]["attempt"], 1,
        "{result}"
    );
    for w in &mut stack.workers {
        w.terminate();
    }
    scripted.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_resumes_its_session_after_the_worker_dies() {
    resumes_after_worker_death(CLAUDE_CODE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_follow_up_task_continues_the_session() {
    follow_up_continues_the_session(CLAUDE_CODE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_resumes_its_session_after_the_worker_dies() {
    resumes_after_worker_death(CODEX).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_follow_up_task_continues_the_session() {
    follow_up_continues_the_session(CODEX).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_resumes_its_session_after_the_worker_dies() {
    resumes_after_worker_death(GEMINI_CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_follow_up_task_continues_the_session() {
    follow_up_continues_the_session(GEMINI_CLI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_resumes_its_session_after_the_worker_dies() {
    resumes_after_worker_death(PI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_follow_up_task_continues_the_session() {
    follow_up_continues_the_session(PI).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_resumes_its_session_after_the_worker_dies() {
    resumes_after_worker_death(OPENCODE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_follow_up_task_continues_the_session() {
    follow_up_continues_the_session(OPENCODE).await;
}
