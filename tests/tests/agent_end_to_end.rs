//! Agent tasks through the real services, each an OS process on 127.0.0.1: the `journal` on a
//! filesystem store, the `orchestrator` on that journal, and a `harness-launcher` configured
//! (TOML file) with one real harness CLI and a provider pointing at the scripted model server.
//! A babysitter process asks for one agent task (`kind: 'agent'`, `execution.harness`, the
//! project dir in `execution.cwd`); the model asks for one shell call (`echo hello > out.txt`),
//! then answers `DONE` (the scripted server's built-in harness rule).
//!
//! For each of Claude Code, Codex, Gemini CLI, Pi and OpenCode, and once across protocols
//! (Claude Code to an OpenAI-Chat upstream, through the launcher's in-process transport proxy):
//! the run completes with the agent's answer; the journal (read from the journal service, and
//! equal to what `WatchRun` streamed) holds the task as one EFFECT_REQUESTED and exactly one
//! EFFECT_RESOLVED whose `result.json` carries `DONE`, plus its usage: talking natively, one
//! COST_TRACKED from the harness's report (`source: "harness"`); through the proxy, one
//! COST_TRACKED per model request the scripted server answered (`source: "proxy"`, distinct
//! idempotency keys, tokens adding up to the scripted usage, and `GetRunCost` and
//! `RUN_COMPLETED`'s `costStats` equal to that sum — the harness's own total is not counted as
//! well); the universal agent events reached the `WatchRun` watcher live, with a tool call and
//! its result and zero `agent.unparsed`; and `out.txt` is in the project dir.
//!
//! The watch is opened before the worker starts: agent events are live only, so this is what
//! makes "the watcher saw them all" a fair assertion. The CLIs are the pinned installs of
//! `scripts/ensure-*.sh` (`<repo>/.ci-work/harness-*`); a missing one skips the test, saying
//! why (`babysitter_tests::skip`: a failure under `BABYSITTER_REQUIRE_ALL=1`, as in CI). The
//! config, CLI table and event checks are the launcher's `testing` module, shared with its
//! `tests/real_harnesses.rs` (the same turn with the real orchestrator in one process).

#[path = "support/agent_stack.rs"]
mod agent_stack;
#[path = "support/cluster.rs"]
mod cluster;

use agent_stack::{Stack, Watched, only, watch_to_end};
use babysitter_harness_launcher::testing::{
    self, CLAUDE_CODE, CODEX, GEMINI_CLI, OPENCODE, PI, RealCli, TOOL_TURN_PROMPT,
};
use babysitter_proto::journal::v1 as jpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_tests::ServiceProcess;
use babysitter_tests::skip::{self, skip};
use babysitter_transport_proxy::protocol::Protocol;
use babysitter_transport_proxy::scripted::{Script, ScriptedServer, Turn};
use cluster::data;
use serde_json::{Value, json};

/// One agent task; the process returns the agent's answer.
const AGENT: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const agent = defineTask('t.agent', (a) => ({ kind: 'agent', title: `out.txt by ${a.harness}`,
  execution: { harness: a.harness, cwd: a.project },
  agent: { prompt: a.prompt } }));
export async function process(inputs, ctx) {
  const answer = await ctx.task(agent, inputs);
  return { answer };
}
"#;

/// One agent task on `cli` with the scripted provider speaking `upstream`, through every
/// service as a process.
async fn agent_task(cli: RealCli, upstream: Protocol) {
    let Some(bin) = skip::installed(&cli.path()) else {
        return skip(format!(
            "needs the {} CLI at {}: run scripts/ensure-{}.sh",
            cli.harness,
            skip::tidy(&cli.path()).display(),
            cli.harness
        ));
    };
    let harness = cli.harness;
    let mut stack = Stack::start();
    let scripted = ScriptedServer::start(([127, 0, 0, 1], 0).into(), None, None)
        .await
        .expect("scripted model server");
    let project = stack.dir.path().join("project");
    std::fs::create_dir_all(&project).expect("project dir");

    let mut c = cluster::run_client(&stack.url(), None);
    let run_id = cluster::create(
        &mut c,
        AGENT,
        json!({"harness": harness, "project": project, "prompt": TOOL_TURN_PROMPT}),
    )
    .await;
    let mut stream = c
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.clone(),
            from_seq: 1,
            include_agent_events: true,
            ..Default::default()
        })
        .await
        .expect("watch run")
        .into_inner();
    // Subscribed: only now does a worker exist to run the task, so no agent event is missed.
    let detected = stack.start_worker("agents", cli.scripted_config(bin, upstream, scripted.url()));
    assert!(detected.contains(harness), "{detected}\n{}", stack.logs());
    let watched = watch_to_end(&mut stream, &stack).await;
    let requests: Vec<String> = scripted
        .requests()
        .iter()
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect();
    let ctx = format!(
        "{harness} via {upstream}\nrequests: {requests:?}\n{}",
        stack.logs()
    );

    let last = watched.last.clone().expect("the watch sent the run");
    assert_eq!(
        last.status,
        pb::RunStatus::Completed as i32,
        "{last:?}\n{ctx}"
    );
    let (effect, stored) = check_journal(&stack, &run_id, &watched, cli, upstream, &ctx).await;
    if !cli.speaks(upstream) {
        // Every model request the upstream answered went through the task's proxy.
        let answered = scripted
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/chat/completions"))
            .count();
        let cost = c
            .get_run_cost(pb::GetRunCostRequest {
                run_id: run_id.clone(),
                ..Default::default()
            })
            .await
            .expect("GetRunCost")
            .into_inner();
        check_proxied_cost(&stored, &effect, answered, &cost, &ctx);
    }
    let run = cluster::get_run(&mut c, &run_id).await;
    let output: Value = serde_json::from_slice(&run.output_json).unwrap_or_default();
    testing::check_done(&output["answer"], &ctx);
    testing::check_out_txt(&project, &ctx);

    // SIGTERM: the worker and the orchestrator drain and exit cleanly.
    let worker = stack.workers.last_mut().and_then(ServiceProcess::terminate);
    assert!(worker.is_some_and(|s| s.success()), "{worker:?}\n{ctx}");
    let orch = stack.orchestrator.terminate();
    assert!(orch.is_some_and(|s| s.success()), "{orch:?}\n{ctx}");
    scripted.stop().await;
}

/// The journal: as watched, one agent effect resolved once with `DONE`, its cost tracked, and
/// its universal events relayed to the watcher. Returns the effect's id and the journal.
async fn check_journal(
    stack: &Stack,
    run_id: &str,
    watched: &Watched,
    cli: RealCli,
    upstream: Protocol,
    ctx: &str,
) -> (String, Vec<jpb::Event>) {
    let stored = cluster::journal_events(&stack.journal.ready, None, run_id).await;
    let key = |e: &jpb::Event| (e.seq, e.r#type.clone(), e.checksum.clone());
    assert_eq!(
        watched.events.iter().map(key).collect::<Vec<_>>(),
        stored.iter().map(key).collect::<Vec<_>>(),
        "the watch saw every stored event, in order\n{ctx}"
    );
    let requested = data(only(&stored, "EFFECT_REQUESTED"));
    let effect = requested["effectId"].as_str().expect("effectId").to_owned();
    assert_eq!(requested["kind"], "agent", "{requested}\n{ctx}");
    let (resolved, result) = agent_stack::resolution(stack, run_id).await;
    assert_eq!(resolved["effectId"], effect.as_str(), "{resolved}");
    assert_eq!(resolved["status"], "ok", "{resolved}\n{ctx}");
    let ctx = format!("{ctx}\nresult.json: {result}");
    testing::check_done(&result["value"], &ctx);
    assert_eq!(
        result["metadata"]["viaProxy"].is_string(),
        !cli.speaks(upstream),
        "{}",
        result["metadata"]
    );
    let costs: Vec<Value> = stored
        .iter()
        .filter(|e| e.r#type == "COST_TRACKED")
        .map(data)
        .collect();
    assert!(!costs.is_empty(), "usage journaled\n{ctx}");
    for cost in &costs {
        assert_eq!(cost["effectId"], effect.as_str(), "{cost}");
        assert_eq!(cost["provider"], testing::SCRIPTED_PROVIDER, "{cost}");
        assert_eq!(cost["model"], testing::SCRIPTED_MODEL, "{cost}");
    }
    if cli.speaks(upstream) {
        // No proxy: the harness's own report, once.
        assert_eq!(costs.len(), 1, "{costs:?}\n{ctx}");
        let cost = &costs[0];
        assert_eq!(cost["source"], "harness", "{cost}");
        assert!(
            cost["inputTokens"].as_u64() > Some(0) && cost["outputTokens"].as_u64() > Some(0),
            "{cost}"
        );
    }
    assert_eq!(
        watched.agent.keys().collect::<Vec<_>>(),
        vec![&effect],
        "agent events only for the agent effect\n{ctx}"
    );
    testing::check_tool_turn_events(&watched.agent[&effect], &ctx);
    (effect, stored)
}

/// The scripted server's usage of every reply it renders by default (`scripted/render.rs`).
const SCRIPTED_INPUT: u64 = 100;
const SCRIPTED_OUTPUT: u64 = 10;

/// Through the task's proxy: one `COST_TRACKED` per model request the upstream `answered`, all
/// from the proxy with distinct keys, adding up to the scripted usage — and the run's cost as
/// `GetRunCost` and `RUN_COMPLETED`'s `costStats` report it is exactly that sum (the harness's
/// own total is not counted on top).
fn check_proxied_cost(
    stored: &[jpb::Event],
    effect: &str,
    answered: usize,
    cost: &pb::GetRunCostResponse,
    ctx: &str,
) {
    let costs: Vec<Value> = stored
        .iter()
        .filter(|e| e.r#type == "COST_TRACKED")
        .map(data)
        .collect();
    assert!(answered > 0, "the harness reached the upstream\n{ctx}");
    assert_eq!(
        costs.len(),
        answered,
        "one COST_TRACKED per model request: {costs:#?}\n{ctx}"
    );
    assert!(costs.iter().all(|c| c["source"] == "proxy"), "{costs:#?}");
    let keys: std::collections::BTreeSet<&str> = costs
        .iter()
        .filter_map(|c| c["idempotencyKey"].as_str())
        .collect();
    assert_eq!(keys.len(), answered, "distinct keys: {costs:#?}");
    assert!(
        keys.iter().all(|k| k.starts_with(&format!("{effect}/1/"))),
        "{keys:?}"
    );
    let sum = |field: &str| costs.iter().filter_map(|c| c[field].as_u64()).sum::<u64>();
    let n = answered as u64;
    let (input, output) = (sum("inputTokens"), sum("outputTokens"));
    assert_eq!(
        (input, output),
        (n * SCRIPTED_INPUT, n * SCRIPTED_OUTPUT),
        "{costs:#?}"
    );
    assert_eq!(
        (sum("cacheReadTokens"), sum("cacheCreationTokens")),
        (0, 0),
        "{costs:#?}"
    );
    assert_eq!(cost.tokens, input + output, "GetRunCost: {cost:?}");
    let task: Vec<_> = cost
        .task_costs
        .iter()
        .map(|t| (t.effect_id.as_str(), t.input_tokens, t.output_tokens))
        .collect();
    assert_eq!(
        task,
        [(effect, input, output)],
        "GetRunCost per task: {cost:?}"
    );
    let completed = data(only(stored, "RUN_COMPLETED"));
    let stats = &completed["costStats"];
    assert_eq!(stats["eventCount"].as_u64(), Some(n), "{stats}");
    assert_eq!(
        (
            stats["totalInputTokens"].as_u64(),
            stats["totalOutputTokens"].as_u64()
        ),
        (Some(input), Some(output)),
        "{stats}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_agent_task_through_the_services() {
    agent_task(CLAUDE_CODE, CLAUDE_CODE.native).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_agent_task_through_the_services() {
    agent_task(CODEX, CODEX.native).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gemini_cli_agent_task_through_the_services() {
    agent_task(GEMINI_CLI, GEMINI_CLI.native).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_agent_task_through_the_services() {
    agent_task(PI, PI.native).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_agent_task_through_the_services() {
    agent_task(OPENCODE, OPENCODE.native).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_reaches_an_openai_chat_upstream_through_the_services_and_the_proxy() {
    agent_task(CLAUDE_CODE, Protocol::OpenAiChat).await;
}

/// A skill task and an orchestrator task; the process returns both answers.
const SKILL_AND_ORCHESTRATOR: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const notes = defineTask('notes', (a) => ({ kind: 'skill', title: 'Release notes',
  execution: { harness: 'claude-code', cwd: a.project },
  skill: { name: 'release-notes', context: { version: a.version },
           outputSchema: { type: 'object', required: ['via', 'version'] } } }));
const tag = defineTask('tag', (a) => ({ kind: 'orchestrator_task', title: 'Tag the release',
  execution: { cwd: a.project },
  orchestratorTask: { payload: { operation: 'tag-release', version: a.version } } }));
export async function process(inputs, ctx) {
  const skill = await ctx.task(notes, inputs);
  const orchestrator = await ctx.task(tag, inputs);
  return { skill, orchestrator };
}
"#;

/// `skill` and `orchestrator_task` go to a worker that has a harness (it advertises them) and
/// are executed there, each one harness session with its kind's prompt, not left queued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skill_and_orchestrator_tasks_are_executed_by_a_worker_through_the_services() {
    let cli = CLAUDE_CODE;
    let Some(bin) = skip::installed(&cli.path()) else {
        return skip(format!(
            "needs the claude CLI at {}: run scripts/ensure-claude-code.sh",
            skip::tidy(&cli.path()).display()
        ));
    };
    let script = Script {
        turns: vec![
            Turn::text_when_asked(
                "Use the `release-notes` skill",
                r#"{"via": "skill", "version": "1.2.3"}"#,
            ),
            Turn::text_when_asked("\"operation\": \"tag-release\"", "TAGGED"),
        ],
    };
    let scripted = ScriptedServer::start(([127, 0, 0, 1], 0).into(), Some(script), None)
        .await
        .expect("scripted model server");
    let mut stack = Stack::start();
    let project = stack.dir.path().join("project");
    std::fs::create_dir_all(&project).expect("project dir");
    let detected = stack.start_worker(
        "agents",
        cli.scripted_config(bin, cli.native, scripted.url()),
    );
    assert!(
        detected.contains(cli.harness),
        "{detected}\n{}",
        stack.logs()
    );
    let mut c = cluster::run_client(&stack.url(), None);
    let run_id = cluster::create(
        &mut c,
        SKILL_AND_ORCHESTRATOR,
        json!({"project": project, "version": "1.2.3"}),
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
    let watched = watch_to_end(&mut stream, &stack).await;
    let last = watched.last.clone().expect("the watch sent the run");
    let ctx = stack.logs();
    assert_eq!(
        last.status,
        pb::RunStatus::Completed as i32,
        "{last:?}\n{ctx}"
    );
    let output: Value = serde_json::from_slice(&last.output_json).unwrap_or_default();
    assert_eq!(
        output,
        json!({"skill": {"via": "skill", "version": "1.2.3"}, "orchestrator": "TAGGED"}),
        "{ctx}"
    );
    let stored = cluster::journal_events(&stack.journal.ready, None, &run_id).await;
    let kinds: Vec<String> = stored
        .iter()
        .filter(|e| e.r#type == "EFFECT_REQUESTED")
        .map(|e| data(e)["kind"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(kinds, ["skill", "orchestrator_task"], "{ctx}");
    let count = |t: &str| stored.iter().filter(|e| e.r#type == t).count();
    assert_eq!(count("EFFECT_RESOLVED"), 2, "{ctx}");
    assert_eq!(count("COST_TRACKED"), 2, "{ctx}");
    let bodies: Vec<String> = scripted
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert!(
        bodies
            .iter()
            .any(|b| b.contains("Use the `release-notes` skill for this task.")),
        "the skill was named to the model"
    );
    let worker = stack.workers.last_mut().and_then(ServiceProcess::terminate);
    assert!(worker.is_some_and(|s| s.success()), "{worker:?}\n{ctx}");
    scripted.stop().await;
}
