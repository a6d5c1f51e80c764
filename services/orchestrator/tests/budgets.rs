//! Per-run budgets (issue 27 §1) against a real server: a raw worker reports each task's model
//! usage in its completion, as a launcher running an agent does; the orchestrator warns past the
//! warning fraction, stops the run at the limit (no further dispatch, running tasks cancelled,
//! `BudgetExceededError` with the figures), counts task limits before dispatching, ends a run past
//! its wall time from the sweep, and rebuilds what was spent from the journal after a restart.

#[path = "support/service.rs"]
mod service_support;

use std::time::Duration;

use babysitter_common::auth::AuthConfig;
use babysitter_common::client::AuthedChannel;
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use babysitter_proto::orchestrator::v1::worker_service_client::WorkerServiceClient;
use serde_json::{Value, json};

use service_support::*;

/// Shell tasks one after another, `inputs.n` of them.
const STEPS: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: `step ${a.i}`, shell: { command: 'true' } }));
export async function process(inputs, ctx) {
  const out = [];
  for (let i = 0; i < inputs.n; i++) out.push(await ctx.task(sh, { i }));
  return out;
}
"#;

/// `inputs.n` shell tasks at once.
const FAN: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: `part ${a.i}`, shell: { command: 'true' } }));
export async function process(inputs, ctx) {
  return await ctx.parallel.map([...Array(inputs.n).keys()], (i) => ctx.task(sh, { i }));
}
"#;

async fn create_with(
    c: &mut RunServiceClient<AuthedChannel>,
    src: &str,
    inputs: Value,
    budget: pb::RunBudget,
) -> pb::Run {
    c.create_run(pb::CreateRunRequest {
        process: Some(pb::ProcessBundle::single_file(
            "main.mjs",
            src.as_bytes().to_vec(),
        )),
        inputs_json: Some(serde_json::to_vec(&inputs).unwrap().into()),
        budget: Some(budget),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .run
    .unwrap()
}

async fn five_steps_within_1000_tokens(c: &mut RunServiceClient<AuthedChannel>) -> pb::Run {
    let budget = pb::RunBudget {
        max_tokens: Some(1000),
        ..Default::default()
    };
    create_with(c, STEPS, json!({"n": 5}), budget).await
}

/// Completes `task` as a model-driven task that used `tokens` (3/4 input, 1/4 output).
async fn complete_spending(
    w: &mut WorkerServiceClient<AuthedChannel>,
    task: &pb::TaskAssignment,
    tokens: u64,
) {
    let mut done = completion("w1", task, b"{}");
    if let Some(r) = done.result.as_mut() {
        r.usage = Some(cpb::TaskUsage {
            provider: "scripted".into(),
            model: "m".into(),
            input_tokens: tokens * 3 / 4,
            output_tokens: tokens / 4,
            cost_usd: tokens as f64 / 1000.0,
            ..Default::default()
        });
    }
    w.complete_task(done).await.unwrap();
}

async fn cost(c: &mut RunServiceClient<AuthedChannel>, run_id: &str) -> pb::GetRunCostResponse {
    c.get_run_cost(pb::GetRunCostRequest {
        run_id: run_id.into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

/// The error of a run stopped by its budget, with its figures.
fn budget_error(run: &pb::Run) -> Value {
    assert_eq!(run.status, pb::RunStatus::Failed as i32, "{run:?}");
    let e = run.error.as_ref().expect("the run's error");
    assert_eq!(e.name, "BudgetExceededError", "{e:?}");
    assert!(
        run.status_reason.starts_with("budget_exceeded: "),
        "{run:?}"
    );
    serde_json::from_slice(&e.data_json).unwrap()
}

async fn nothing_to_poll(w: &mut WorkerServiceClient<AuthedChannel>) {
    let got = w
        .poll_tasks(pb::PollTasksRequest {
            worker_id: "w1".into(),
            max_tasks: 10,
            wait: Some(prost_types::Duration {
                seconds: 0,
                nanos: 200_000_000,
            }),
        })
        .await
        .unwrap()
        .into_inner()
        .tasks;
    assert!(got.is_empty(), "dispatched after the line: {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_warns_then_stops_at_its_token_limit_and_dispatches_nothing_more() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let run = five_steps_within_1000_tokens(&mut c).await;
    let mut w = raw_worker(&s, "w1").await;

    let t = poll_one(&mut w, "w1").await;
    complete_spending(&mut w, &t, 400).await;
    let t = poll_one(&mut w, "w1").await;
    complete_spending(&mut w, &t, 400).await;
    // 800 of 1000: past the 0.8 warning, still running.
    let t = poll_one(&mut w, "w1").await;
    let now = get_run(&mut c, &run.run_id).await;
    assert_eq!(now.status, pb::RunStatus::Running as i32, "{now:?}");
    assert_eq!(now.status_reason, "budget warning: tokens 800 of 1000");
    assert_eq!(
        cost(&mut c, &run.run_id).await.warnings,
        ["tokens 800 of 1000"]
    );

    complete_spending(&mut w, &t, 400).await;
    let stopped = ended(&mut c, &run.run_id).await;
    let data = budget_error(&stopped);
    assert_eq!(data["limit"], "tokens");
    assert_eq!(
        (data["max"].as_f64(), data["spent"].as_f64()),
        (Some(1000.0), Some(1200.0))
    );
    assert_eq!(
        data["totals"]["tasks"], 4,
        "the fourth was requested, never dispatched"
    );
    nothing_to_poll(&mut w).await;

    let spent = cost(&mut c, &run.run_id).await;
    assert_eq!((spent.tokens, spent.tasks), (1200, 4));
    assert!((spent.cost_usd - 1.2).abs() < 1e-9, "{spent:?}");
    assert_eq!(spent.task_costs.len(), 3);
    assert_eq!(spent.task_costs[0].input_tokens, 300);
    assert_eq!(spent.exceeded, "budget_exceeded: tokens 1200 of 1000");
    assert_eq!(spent.budget.and_then(|b| b.max_tokens), Some(1000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fan_out_past_the_task_limit_fails_before_any_extra_dispatch() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let budget = pb::RunBudget {
        max_tasks: Some(4),
        ..Default::default()
    };
    let mut w = raw_worker(&s, "w1").await;
    let run = create_with(&mut c, FAN, json!({"n": 6}), budget).await;
    let stopped = ended(&mut c, &run.run_id).await;
    let data = budget_error(&stopped);
    assert_eq!(
        (data["limit"].as_str(), data["spent"].as_f64()),
        (Some("tasks"), Some(6.0))
    );
    nothing_to_poll(&mut w).await;

    // Within the limit, the same fan-out runs.
    let ok = create_with(&mut c, FAN, json!({"n": 4}), budget).await;
    for _ in 0..4 {
        let t = poll_one(&mut w, "w1").await;
        w.complete_task(completion("w1", &t, b"1")).await.unwrap();
    }
    let done = ended(&mut c, &ok.run_id).await;
    assert_eq!(done.status, pb::RunStatus::Completed as i32, "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn what_was_spent_survives_a_restart_and_the_limit_still_holds() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let run = five_steps_within_1000_tokens(&mut c).await;
    let mut w = raw_worker(&s, "w1").await;
    for _ in 0..2 {
        let t = poll_one(&mut w, "w1").await;
        complete_spending(&mut w, &t, 400).await;
    }

    // Restarted: the budget comes back from run.json, the 900 spent from the journal.
    let s = s.halt().await.start().await;
    let mut c = client(&s, None);
    assert_eq!(cost(&mut c, &run.run_id).await.tokens, 800);
    let mut w = raw_worker(&s, "w1").await;
    let t = poll_one(&mut w, "w1").await;
    complete_spending(&mut w, &t, 400).await;
    let data = budget_error(&ended(&mut c, &run.run_id).await);
    assert_eq!(data["spent"].as_f64(), Some(1200.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_past_its_wall_time_is_stopped_and_its_running_task_cancelled() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    // Long enough that the worker has the task before the sweep ends the run, on a loaded
    // machine too (a shorter limit raced the first poll in a full test run).
    let budget = pb::RunBudget {
        max_wall_time: Some(prost_types::Duration {
            seconds: 1,
            nanos: 500_000_000,
        }),
        ..Default::default()
    };
    let run = create_with(&mut c, STEPS, json!({"n": 2}), budget).await;
    let mut w = raw_worker(&s, "w1").await;
    let task = poll_one(&mut w, "w1").await;
    // The task never finishes: the sweep ends the run.
    let data = budget_error(&ended(&mut c, &run.run_id).await);
    assert_eq!(data["limit"], "wall_time_seconds");
    let hb = w
        .heartbeat(pb::HeartbeatRequest {
            worker_id: "w1".into(),
            lease_ids: vec![task.lease_id.clone()],
        })
        .await
        .unwrap()
        .into_inner();
    assert_ne!(
        hb.leases[0].state,
        pb::LeaseState::Active as i32,
        "the running task is stopped with its run: {hb:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_that_cannot_mean_anything_is_refused_by_name() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let e = c
        .create_run(pb::CreateRunRequest {
            process: Some(pb::ProcessBundle::single_file(
                "main.mjs",
                STEPS.as_bytes().to_vec(),
            )),
            budget: Some(pb::RunBudget {
                max_cost_usd: Some(-1.0),
                ..Default::default()
            }),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("max-cost-usd"), "{e:?}");
}

/// The run's journal event types (read from the journal: the run may still be waiting).
async fn event_types(s: &Service, run_id: &str) -> Vec<(String, Value)> {
    let journal = s.manager.journal();
    let head = journal.head(run_id).await.unwrap();
    journal
        .read(run_id, 1, head.seq)
        .await
        .unwrap()
        .into_iter()
        .map(|e| (e.body.kind.as_str().to_owned(), e.body.data))
        .collect()
}

fn count(events: &[(String, Value)], ty: &str) -> usize {
    events.iter().filter(|(t, _)| t == ty).count()
}

async fn decide(
    c: &mut RunServiceClient<AuthedChannel>,
    run_id: &str,
    approve: bool,
    response: &str,
) -> Result<pb::ResolveBreakpointResponse, tonic::Status> {
    c.resolve_breakpoint(pb::ResolveBreakpointRequest {
        run_id: run_id.into(),
        effect_id: "budget".into(),
        decision: if approve {
            pb::BreakpointDecision::Approve
        } else {
            pb::BreakpointDecision::Reject
        } as i32,
        response: response.into(),
        ..Default::default()
    })
    .await
    .map(tonic::Response::into_inner)
}

/// Until the run shows as waiting for its budget (a guard bound, not a timing assertion).
async fn waiting_for_raise(c: &mut RunServiceClient<AuthedChannel>, run_id: &str) -> pb::Run {
    for _ in 0..500 {
        let run = get_run(c, run_id).await;
        if run.status_reason.starts_with("budget_exceeded: ") {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("run {run_id} never waited for a raise");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_that_asks_waits_on_a_breakpoint_across_a_restart_and_goes_on_once_raised() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let budget = pb::RunBudget {
        max_tokens: Some(1000),
        ask_to_raise: Some(true),
        ..Default::default()
    };
    let run = create_with(&mut c, STEPS, json!({"n": 5}), budget).await;
    let mut w = raw_worker(&s, "w1").await;
    for _ in 0..3 {
        let t = poll_one(&mut w, "w1").await;
        complete_spending(&mut w, &t, 400).await;
    }
    // 1200 of 1000: the run waits, nothing more is dispatched.
    let waiting = waiting_for_raise(&mut c, &run.run_id).await;
    assert_eq!(waiting.status, pb::RunStatus::Waiting as i32, "{waiting:?}");
    assert!(
        waiting
            .status_reason
            .starts_with("budget_exceeded: tokens 1200 of 1000 (waiting on breakpoint `budget`"),
        "{waiting:?}"
    );
    nothing_to_poll(&mut w).await;
    let events = event_types(&s, &run.run_id).await;
    assert_eq!(
        count(&events, "BUDGET_WARNING"),
        1,
        "warned once: {events:?}"
    );
    assert_eq!(count(&events, "BUDGET_EXCEEDED"), 1, "{events:?}");

    // A restart neither forgets the wait nor says anything twice.
    let s = s.halt().await.start().await;
    let mut c = client(&s, None);
    waiting_for_raise(&mut c, &run.run_id).await;
    let events = event_types(&s, &run.run_id).await;
    assert_eq!(count(&events, "BUDGET_WARNING"), 1, "{events:?}");
    assert_eq!(count(&events, "BUDGET_EXCEEDED"), 1, "{events:?}");

    // The question is a breakpoint an approver sees with the others.
    let bp = first_breakpoint(&mut c, "default").await;
    assert_eq!(
        (bp.run_id.as_str(), bp.effect_id.as_str()),
        (run.run_id.as_str(), "budget")
    );
    assert!(bp.label.contains("tokens 1200 of 1000"), "{bp:?}");

    // A raise that is still exceeded, or none at all, is refused by name.
    let e = decide(&mut c, &run.run_id, true, "tokens=1100")
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(
        e.message().contains("still exceeded: tokens 1200 of 1100"),
        "{e:?}"
    );
    let e = decide(&mut c, &run.run_id, true, "").await.unwrap_err();
    assert!(e.message().contains("tokens=50000"), "{e:?}");

    decide(&mut c, &run.run_id, true, "tokens=5000")
        .await
        .unwrap();
    let mut w = raw_worker(&s, "w1").await;
    for _ in 0..2 {
        let t = poll_one(&mut w, "w1").await;
        complete_spending(&mut w, &t, 100).await;
    }
    let done = ended(&mut c, &run.run_id).await;
    assert_eq!(done.status, pb::RunStatus::Completed as i32, "{done:?}");
    let events = event_types(&s, &run.run_id).await;
    let raised = events.iter().find(|(t, _)| t == "BUDGET_RAISED").unwrap();
    assert_eq!(raised.1["budget"]["max-tokens"], 5000, "{raised:?}");
    let spent = cost(&mut c, &run.run_id).await;
    assert_eq!(spent.budget.and_then(|b| b.max_tokens), Some(5000));
    assert_eq!(spent.tokens, 1400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rejected_raise_fails_the_run_with_its_figures() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let budget = pb::RunBudget {
        max_tokens: Some(500),
        ask_to_raise: Some(true),
        ..Default::default()
    };
    let run = create_with(&mut c, STEPS, json!({"n": 3}), budget).await;
    let mut w = raw_worker(&s, "w1").await;
    let t = poll_one(&mut w, "w1").await;
    complete_spending(&mut w, &t, 600).await;
    waiting_for_raise(&mut c, &run.run_id).await;
    decide(&mut c, &run.run_id, false, "").await.unwrap();
    let data = budget_error(&ended(&mut c, &run.run_id).await);
    assert_eq!(
        (data["limit"].as_str(), data["spent"].as_f64()),
        (Some("tokens"), Some(600.0))
    );
    // Decided: asking again is a conflict, not a second decision.
    let e = decide(&mut c, &run.run_id, true, "tokens=5000")
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::FailedPrecondition, "{e:?}");
}
