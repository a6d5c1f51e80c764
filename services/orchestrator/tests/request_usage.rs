//! A task's model usage as a worker reports it with its completion, journaled by the one rule of
//! `engine::commit::TaskUsage::events`, against a real server: per-request records from the
//! task's transport proxy become one `COST_TRACKED` each (`source: "proxy"`, keys
//! `<effectId>/<attempt>/<requestId>`) and the harness's total is left out; a task with no
//! per-request records gets the harness's total (`source: "harness"`). A repeated completion
//! journals nothing more, and `GetRunCost` and `RUN_COMPLETED`'s `costStats` add up to exactly
//! what was reported. Malformed records are refused.

#[path = "support/service.rs"]
mod service_support;

use babysitter_common::auth::AuthConfig;
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use serde_json::{Value, json};

use service_support::*;

/// Two shell tasks, one after the other.
const TWO_STEPS: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: `step ${a.i}`, shell: { command: 'true' } }));
export async function process(inputs, ctx) {
  await ctx.task(sh, { i: 1 });
  await ctx.task(sh, { i: 2 });
  return 'done';
}
"#;

fn request(id: &str, input: u64, output: u64, cost: f64) -> cpb::RequestUsage {
    cpb::RequestUsage {
        request_id: id.into(),
        provider: "scripted".into(),
        model: "up-model".into(),
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: 5,
        cache_write_tokens: 1,
        cost_usd: cost,
        failed: false,
        duration_ms: 12,
    }
}

/// What the harness printed: a total that must not be counted when requests are given.
fn harness_total(input: u64) -> cpb::TaskUsage {
    cpb::TaskUsage {
        provider: "scripted".into(),
        model: "harness-model".into(),
        input_tokens: input,
        output_tokens: 1,
        cost_usd: 100.0,
        ..Default::default()
    }
}

fn data(e: &babysitter_proto::journal::v1::Event) -> Value {
    serde_json::from_slice(&e.data_json).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn per_request_usage_is_journaled_once_per_request_and_replaces_the_harness_total() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let run = create(&mut c, "", TWO_STEPS, json!({})).await;
    let mut w = raw_worker(&s, "w1").await;

    // Task 1: three requests through the proxy, plus the harness's own (bigger) total.
    let t1 = poll_one(&mut w, "w1").await;
    let mut done = completion("w1", &t1, b"{}");
    if let Some(r) = done.result.as_mut() {
        r.usage = Some(harness_total(999_999));
        r.requests = vec![
            request("req_a", 100, 10, 0.25),
            request("req_b", 200, 20, 0.5),
            request("req_c", 300, 30, 0.75),
        ];
    }
    // Malformed records are refused (the completion can be sent again, fixed).
    let mut twice = done.clone();
    if let Some(r) = twice.result.as_mut() {
        r.requests[1].request_id = "req_a".into();
    }
    let err = w.complete_task(twice).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");
    assert!(err.message().contains("req_a"), "{err:?}");
    let mut unpriced = done.clone();
    if let Some(r) = unpriced.result.as_mut() {
        r.requests[0].cost_usd = f64::NAN;
    }
    let err = w.complete_task(unpriced).await.unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument, "{err:?}");

    let first = w.complete_task(done.clone()).await.unwrap().into_inner();
    assert!(!first.already_completed);
    // The same completion again (a retry whose answer was lost): journaled once.
    let again = w.complete_task(done).await.unwrap().into_inner();
    assert!(again.already_completed);

    // Task 2: no proxy in between, only the harness's total.
    let t2 = poll_one(&mut w, "w1").await;
    let mut done = completion("w1", &t2, b"{}");
    if let Some(r) = done.result.as_mut() {
        r.usage = Some(cpb::TaskUsage {
            cost_usd: 2.0,
            ..harness_total(40)
        });
    }
    w.complete_task(done).await.unwrap();

    let (events, last) = watch_all(&mut c, "", &run.run_id).await;
    assert_eq!(last.status, pb::RunStatus::Completed as i32, "{last:?}");
    let costs: Vec<Value> = events
        .iter()
        .filter(|e| e.r#type == "COST_TRACKED")
        .map(data)
        .collect();
    assert_eq!(
        costs.len(),
        4,
        "three per-request + one per-task: {costs:#?}"
    );
    let (proxy, harness): (Vec<&Value>, Vec<&Value>) =
        costs.iter().partition(|d| d["source"] == "proxy");
    assert_eq!(proxy.len(), 3, "{costs:#?}");
    assert_eq!(harness.len(), 1, "{costs:#?}");
    let keys: Vec<String> = proxy
        .iter()
        .map(|d| d["idempotencyKey"].as_str().unwrap().to_owned())
        .collect();
    let e1 = &t1.effect_id;
    assert_eq!(
        keys,
        [
            format!("{e1}/1/req_a"),
            format!("{e1}/1/req_b"),
            format!("{e1}/1/req_c")
        ]
    );
    assert!(proxy.iter().all(|d| d["effectId"] == e1.as_str()
        && d["model"] == "up-model"
        && d["durationMs"] == 12));
    assert_eq!(harness[0]["effectId"], t2.effect_id.as_str());
    assert_eq!(harness[0]["source"], "harness");
    assert_eq!(harness[0]["inputTokens"], 40);
    // The per-request events follow their resolution in the same append.
    let resolved_seq = events
        .iter()
        .find(|e| e.r#type == "EFFECT_RESOLVED" && data(e)["effectId"] == e1.as_str())
        .map(|e| e.seq)
        .unwrap();
    let proxy_seqs: Vec<u64> = events
        .iter()
        .filter(|e| e.r#type == "COST_TRACKED" && data(e)["source"] == "proxy")
        .map(|e| e.seq)
        .collect();
    assert_eq!(
        proxy_seqs,
        [resolved_seq + 1, resolved_seq + 2, resolved_seq + 3]
    );

    // Sums: task 1 = 600 in, 60 out, 15 cache read, 3 cache write, $1.5; task 2 = 40 + 1, $2.
    let cost = c
        .get_run_cost(pb::GetRunCostRequest {
            run_id: run.run_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cost.tokens, 600 + 60 + 15 + 3 + 40 + 1, "{cost:?}");
    assert!((cost.cost_usd - 3.5).abs() < 1e-9, "{cost:?}");
    let t1_cost = cost.task_costs.iter().find(|t| t.effect_id == *e1).unwrap();
    assert_eq!(
        (
            t1_cost.input_tokens,
            t1_cost.output_tokens,
            t1_cost.cache_read_tokens,
            t1_cost.cache_write_tokens
        ),
        (600, 60, 15, 3)
    );
    assert!((t1_cost.cost_usd - 1.5).abs() < 1e-9, "{t1_cost:?}");
    let completed = events
        .iter()
        .find(|e| e.r#type == "RUN_COMPLETED")
        .map(data)
        .unwrap();
    let stats = &completed["costStats"];
    assert_eq!(stats["eventCount"], 4, "{stats}");
    assert_eq!(stats["totalInputTokens"], 640, "{stats}");
    assert_eq!(stats["totalOutputTokens"], 61, "{stats}");
    assert_eq!(stats["totalCostUsd"], 3.5, "{stats}");
}
