//! `PostTaskResult` is a client's call (issue 25 item 4): a worker token may not settle an effect
//! it holds no lease for — not a breakpoint in any namespace, not a task — and a breakpoint
//! answered through it records the authenticated caller as its principal in `result.json`'s
//! metadata, whatever the posted value claims (the value itself stays as posted: the process
//! sees what babysitter's CLI would have recorded).

#[path = "support/service.rs"]
mod service_support;

use babysitter_common::auth::{AuthConfig, Role};
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use serde_json::{Value, json};
use tonic::Code;

use service_support::*;

const ASK: &str = r#"
export async function process(inputs, ctx) {
  return await ctx.breakpoint({ question: 'ship?' }, { label: 'Ship gate' });
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_clients_post_results_and_a_posted_breakpoint_answer_names_its_principal() {
    let auth = AuthConfig {
        tokens: vec![
            token("client-a", Role::Client, &["a"]),
            token("worker", Role::Worker, &[]),
        ],
        ..AuthConfig::default()
    };
    let s = start(fast_queue(), auth).await;
    let mut a = client(&s, Some("client-a"));
    let run = create(&mut a, "a", ASK, json!({})).await;
    let bp = first_breakpoint(&mut a, "a").await;
    let post = |value: Value| pb::PostTaskResultRequest {
        namespace: "a".into(),
        run_id: run.run_id.clone(),
        effect_id: bp.effect_id.clone(),
        result: Some(cpb::TaskResult {
            outcome: Some(cpb::task_result::Outcome::ValueJson(
                serde_json::to_vec(&value).expect("json").into(),
            )),
            ..Default::default()
        }),
    };
    // A worker token (every namespace) is refused, and nothing is settled.
    let refused = client(&s, Some("worker"))
        .post_task_result(post(json!({"approved": true, "principal": "ceo"})))
        .await
        .expect_err("a worker may not post a result");
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    let still = breakpoints(&mut a, "a").await;
    assert_eq!(still.len(), 1, "the breakpoint still waits");

    // The client's answer is journaled as posted, with the client as its principal.
    a.post_task_result(post(json!({"approved": true, "principal": "ceo"})))
        .await
        .expect("a client posts");
    let (_, last) = watch_all(&mut a, "a", &run.run_id).await;
    assert_eq!(last.status, pb::RunStatus::Completed as i32);
    let output: Value = serde_json::from_slice(&last.output_json).expect("output is JSON");
    assert_eq!(output, json!({"approved": true, "principal": "ceo"}));
    let result_json = s
        .dir
        .path()
        .join("runs")
        .join(&run.run_id)
        .join("tasks")
        .join(&bp.effect_id)
        .join("result.json");
    let result: Value = serde_json::from_slice(&std::fs::read(&result_json).expect("result.json"))
        .expect("result.json is JSON");
    assert_eq!(result["metadata"]["principal"], "client-a-user", "{result}");
}
