//! `ctx.subprocess` on the orchestrator (issue 27 §2): the child run is made from the parent's
//! bundle and executed by the same workers (a real shell worker appending to a ledger), its
//! output is the effect's result, its failure the process's error, it is cancelled with its
//! parent, and a restart in the middle neither loses nor duplicates it.

#[path = "support/service.rs"]
mod service_support;

use babysitter_common::auth::AuthConfig;
use babysitter_common::client::AuthedChannel;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use serde_json::{Value, json};

use service_support::*;

/// The parent: one subprocess, whose result (or error) it returns.
const PARENT: &str = r#"
export async function process(inputs, ctx) {
  try {
    const r = await ctx.subprocess({ processPath: inputs.path, processId: 'child', inputs: { n: 2, ledger: inputs.ledger } });
    return { output: r.output, runId: r.runId };
  } catch (e) {
    return { error: e.name, message: e.message };
  }
}
"#;

/// The child (beside the parent in the bundle): `n` shell tasks, each appending to the ledger.
const CHILD: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const step = defineTask('step', (a) => ({ kind: 'shell', title: `step ${a.i}`,
  shell: { command: `echo "$BABYSITTER_RUN_ID step ${a.i}" >> ${a.ledger}; echo ${a.i}` } }));
export async function process(inputs, ctx) {
  if (inputs.fail) throw new Error('the child gave up');
  let sum = 0;
  for (let i = 1; i <= inputs.n; i++) sum += Number((await ctx.task(step, { i, ledger: inputs.ledger })).stdout.trim());
  if (inputs.gate) await ctx.breakpoint({ question: 'go on?' }, { label: 'gate' });
  return { sum };
}
"#;

/// A child that waits on a breakpoint before its shell steps.
const GATED_CHILD: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const step = defineTask('step', (a) => ({ kind: 'shell', title: 'after the gate',
  shell: { command: `echo "$BABYSITTER_RUN_ID after" >> ${a.ledger}; echo 7` } }));
export async function process(inputs, ctx) {
  await ctx.breakpoint({ question: 'go on?' }, { label: 'gate' });
  const r = await ctx.task(step, { ledger: inputs.ledger });
  return { sum: Number(r.stdout.trim()) };
}
"#;

fn bundle(child: &str) -> pb::ProcessBundle {
    pb::ProcessBundle {
        entry_path: "procs/main.mjs".into(),
        export_name: String::new(),
        files: vec![
            pb::ProcessFile {
                path: "procs/main.mjs".into(),
                content: PARENT.as_bytes().to_vec().into(),
            },
            pb::ProcessFile {
                path: "procs/child.mjs".into(),
                content: child.as_bytes().to_vec().into(),
            },
        ],
    }
}

async fn create_parent(
    c: &mut RunServiceClient<AuthedChannel>,
    child: &str,
    inputs: Value,
) -> pb::Run {
    c.create_run(pb::CreateRunRequest {
        process: Some(bundle(child)),
        inputs_json: Some(serde_json::to_vec(&inputs).unwrap().into()),
        labels: [("team".to_owned(), "infra".to_owned())].into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .run
    .unwrap()
}

fn output(run: &pb::Run) -> Value {
    serde_json::from_slice(&run.output_json).unwrap_or_default()
}

/// The runs whose `parent-run` label names `parent`.
async fn children(c: &mut RunServiceClient<AuthedChannel>, parent: &str) -> Vec<pb::Run> {
    c.list_runs(pb::ListRunsRequest {
        label_selector: [("parent-run".to_owned(), parent.to_owned())].into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .runs
}

fn ledger_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subprocess_is_a_child_run_whose_output_is_the_effects_result() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let _worker = spawn_worker(&s, "w1", None, s.dir.path());
    let ledger = s.dir.path().join("ledger");
    let parent = create_parent(
        &mut c,
        CHILD,
        json!({"path": "child.mjs", "ledger": ledger}),
    )
    .await;
    let done = ended(&mut c, &parent.run_id).await;
    assert_eq!(done.status, pb::RunStatus::Completed as i32, "{done:?}");
    let out = output(&done);
    assert_eq!(out["output"], json!({"sum": 3}), "{out}");
    let child_id = out["runId"].as_str().unwrap().to_owned();

    // The child: a run of its own, labelled, linked to its parent as babysitter links them.
    let kids = children(&mut c, &parent.run_id).await;
    assert_eq!(kids.len(), 1, "{kids:?}");
    assert_eq!(kids[0].run_id, child_id);
    assert_eq!(kids[0].status, pb::RunStatus::Completed as i32);
    assert_eq!(kids[0].labels["team"], "infra", "the parent's labels");
    assert_eq!(kids[0].process_id, "child");
    let (run_json, _) = s.manager.run_files("default", &child_id).await.unwrap();
    assert_eq!(run_json["nested"]["parentRunId"], parent.run_id.as_str());
    let (parent_events, _) = watch_all(&mut c, "", &parent.run_id).await;
    let requested = effects_of(&parent_events, "EFFECT_REQUESTED");
    assert_eq!(
        requested,
        vec![child_id.clone()],
        "the child's id is the effect's"
    );
    assert_eq!(effects_of(&parent_events, "EFFECT_RESOLVED"), requested);

    // Each of the child's side effects ran once, in the child run.
    assert_eq!(
        ledger_lines(&ledger),
        vec![format!("{child_id} step 1"), format!("{child_id} step 2")]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_or_impossible_subprocess_is_the_processs_error() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let _worker = spawn_worker(&s, "w1", None, s.dir.path());

    // The child throws.
    let failing = CHILD.replace("if (inputs.fail)", "if (true)");
    let parent = create_parent(
        &mut c,
        &failing,
        json!({"path": "child.mjs", "ledger": "/dev/null"}),
    )
    .await;
    let done = ended(&mut c, &parent.run_id).await;
    let out = output(&done);
    assert_eq!(out["error"], "SubprocessFailedError", "{out}");
    let message = out["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("failed") && message.contains("the child gave up"),
        "{message}"
    );

    // The process names a file its bundle does not have.
    let parent = create_parent(
        &mut c,
        CHILD,
        json!({"path": "nowhere.mjs", "ledger": "/dev/null"}),
    )
    .await;
    let done = ended(&mut c, &parent.run_id).await;
    let out = output(&done);
    assert_eq!(out["error"], "SubprocessError", "{out}");
    assert!(
        out["message"]
            .as_str()
            .is_some_and(|m| m.contains("`nowhere.mjs`, `procs/nowhere.mjs`")),
        "{out}"
    );
    assert!(children(&mut c, &parent.run_id).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_parent_takes_its_live_child_with_it() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let _worker = spawn_worker(&s, "w1", None, s.dir.path());
    let ledger = s.dir.path().join("ledger");
    let parent = create_parent(
        &mut c,
        GATED_CHILD,
        json!({"path": "child.mjs", "ledger": ledger}),
    )
    .await;
    // The child waits on its gate.
    let gate = first_breakpoint(&mut c, "default").await;
    assert_ne!(gate.run_id, parent.run_id, "the gate is the child's");
    c.cancel_run(pb::CancelRunRequest {
        run_id: parent.run_id.clone(),
        reason: "not today".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let child = ended(&mut c, &gate.run_id).await;
    assert_eq!(child.status, pb::RunStatus::Cancelled as i32, "{child:?}");
    assert!(
        ledger_lines(&ledger).is_empty(),
        "nothing after the gate ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restart_while_the_child_runs_neither_loses_nor_repeats_it() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let ledger = s.dir.path().join("ledger");
    let parent = create_parent(
        &mut c,
        GATED_CHILD,
        json!({"path": "child.mjs", "ledger": ledger}),
    )
    .await;
    let gate = first_breakpoint(&mut c, "default").await;

    let s = s.halt().await.start().await;
    let mut c = client(&s, None);
    let _worker = spawn_worker(&s, "w1", None, s.dir.path());
    c.resolve_breakpoint(pb::ResolveBreakpointRequest {
        run_id: gate.run_id.clone(),
        effect_id: gate.effect_id.clone(),
        decision: pb::BreakpointDecision::Approve as i32,
        ..Default::default()
    })
    .await
    .unwrap();
    let done = ended(&mut c, &parent.run_id).await;
    assert_eq!(done.status, pb::RunStatus::Completed as i32, "{done:?}");
    assert_eq!(output(&done)["output"], json!({"sum": 7}));
    let kids = children(&mut c, &parent.run_id).await;
    assert_eq!(kids.len(), 1, "one child, made once: {kids:?}");
    assert_eq!(
        ledger_lines(&ledger),
        vec![format!("{} after", gate.run_id)]
    );
}
