//! `run:create --budget` (babysitter-rs): a run its client drives (`run:iterate`, `task:post`)
//! keeps a budget too. After each iteration, before the client gets what it requested, the run
//! is checked against it: past a limit the run fails with `BudgetExceededError` naming the
//! limit and the figures, and the iteration reports that instead of handing out the task that
//! crossed the line. Once on a local runs directory, once on an orchestrator (`--server`),
//! with the same assertions. A budget that asks to be raised is refused (nobody would see the
//! wait).

mod compat_support;

use compat_support::*;
use serde_json::Value;

const THREE: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const step = defineTask('step', (a) => ({ kind: 'shell', title: a.t, shell: { command: `echo ${a.t}` } }));
export async function process(inputs, ctx) {
  const a = await ctx.task(step, { t: 'one' });
  const b = await ctx.task(step, { t: 'two' });
  const c = await ctx.task(step, { t: 'three' });
  return { a, b, c };
}
"#;

fn create(s: &Sandbox, id: &str, budget: &str) -> Out {
    s.write("processes/three.mjs", THREE);
    s.cmd(&[
        "run:create",
        "--process-id",
        "three",
        "--entry",
        "processes/three.mjs#process",
        "--run-id",
        id,
        "--budget",
        budget,
        "--json",
    ])
}

fn a_client_driven_run_fails_at_its_limit_in(s: &Sandbox) {
    let out = create(s, "b-1", "tasks=1").ok();
    assert_eq!(out.json()["runId"], "b-1");
    // The first task is within the budget.
    let it = s.iterate("b-1");
    assert_eq!(it["status"], "waiting", "{it}");
    let first = it["nextActions"][0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();
    s.post_inline("b-1", &first, "\"one\"").ok();
    // The second would be one task too many: the run fails instead of handing it out.
    let it = s.iterate("b-1");
    assert_eq!(it["status"], "failed", "{it}");
    assert!(
        it["nextActions"].as_array().is_none_or(Vec::is_empty),
        "nothing handed out past the line: {it}"
    );
    let events = s.cmd(&["run:events", "b-1", "--json"]).ok().json();
    let failed: Vec<&Value> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "RUN_FAILED")
        .collect();
    assert_eq!(failed.len(), 1, "{events}");
    let data = &failed[0]["data"];
    assert_eq!(data["error"]["name"], "BudgetExceededError", "{data}");
    let reason = data["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("tasks"),
        "the reason names the limit: {reason}"
    );
    // Later iterations report the failure and append nothing.
    let len = s.journal_len("b-1");
    assert_eq!(s.iterate("b-1")["status"], "failed");
    assert_eq!(s.journal_len("b-1"), len);

    // A budget that asks to be raised has no one to ask here.
    let out = create(s, "b-2", "tasks=1,on-exceed=ask").fails();
    assert!(
        out.stderr.contains("on-exceed=ask"),
        "refused naming it: {}",
        out.stderr
    );
    let out = create(s, "b-3", "tokens=lots").fails();
    assert!(out.stderr.contains("--budget"), "{}", out.stderr);
}

#[test]
fn a_client_driven_run_fails_at_its_limit() {
    a_client_driven_run_fails_at_its_limit_in(&Sandbox::new());
}

#[test]
fn a_client_driven_run_fails_at_its_limit_remote() {
    a_client_driven_run_fails_at_its_limit_in(&Sandbox::new().remote());
}

/// `tokens:stats <runId> --usage`: the run's model usage per run and per task, summed from its
/// `COST_TRACKED` events by the rule `GetRunCost` uses, with its budget.
#[test]
fn tokens_stats_usage_answers_per_run_and_per_task() {
    let s = Sandbox::new();
    create(&s, "u-1", "cost=5").ok();
    let it = s.iterate("u-1");
    let effect = it["nextActions"][0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();
    for (model, input, output, cost) in [("m-a", 100, 10, 0.25), ("m-a", 50, 5, 0.5)] {
        append_event(
            &s.run_dir("u-1"),
            "COST_TRACKED",
            "2026-12-06T10:00:00.000Z",
            serde_json::json!({"model": model, "inputTokens": input, "outputTokens": output,
                               "effectId": effect, "costUsd": cost, "source": "proxy"}),
        );
    }
    let v = s
        .cmd(&["tokens:stats", "u-1", "--usage", "--json"])
        .ok()
        .json();
    assert_eq!(v["runId"], "u-1");
    assert_eq!(
        (v["inputTokens"].as_u64(), v["outputTokens"].as_u64()),
        (Some(150), Some(15))
    );
    assert_eq!(v["costUsd"].as_f64(), Some(0.75));
    assert_eq!(v["budget"]["max-cost-usd"].as_f64(), Some(5.0), "{v}");
    let tasks = v["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{v}");
    assert_eq!(tasks[0]["effectId"], effect.as_str());
    assert_eq!(tasks[0]["kind"], "shell");
    assert_eq!(tasks[0]["inputTokens"].as_u64(), Some(150));
    let table = s.cmd(&["tokens:stats", "u-1", "--usage"]).ok();
    assert!(table.stdout.contains("150 in, 15 out"), "{}", table.stdout);
    // Without --usage the reference's compression statistics, unchanged.
    let v = s.cmd(&["tokens:stats", "u-1", "--json"]).ok().json();
    assert_eq!(v["eventCount"], 0);
}
