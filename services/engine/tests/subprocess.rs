//! `ctx.subprocess` (spec §3.7): with subprocesses enabled it is an effect of kind `subprocess`
//! whose TaskDef carries the invocation as babysitter writes it, resolved with the child run's
//! `{runId, runDir, output}`; disabled (babysitter's own loop outside plugin mode), it fails
//! the run with babysitter's `RunFailedError`.

mod support;

use babysitter_engine::IterationStatus;
use serde_json::json;
use support::{Answer, Harness};

const PARENT: &str = "export async function process(inputs, ctx) {\n\
  const child = await ctx.subprocess({ processPath: 'processes/child.mjs', exportName: 'process',\n\
    processId: 'child', inputs: { n: 2 }, maxIterations: 5 });\n\
  return { child: child.output, runId: child.runId };\n\
}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subprocess_is_an_effect_carrying_the_invocation_and_resolved_with_the_child() {
    let files = [("main.mjs", PARENT)];
    let h = Harness::with_options(&files, None, true, |o| o.subprocesses = true).await;
    let its = h
        .drive(5, |a| {
            assert_eq!(a["kind"], "subprocess", "{a}");
            Answer::Ok(json!({"runId": "01CHILD", "runDir": "/runs/01CHILD", "output": {"sum": 3}}))
        })
        .await;
    let last = its.last().unwrap();
    assert_eq!(last.status, IterationStatus::Completed, "{last:?}");
    assert_eq!(
        last.output,
        Some(json!({"child": {"sum": 3}, "runId": "01CHILD"}))
    );
    let requested = h
        .journal()
        .into_iter()
        .find(|(t, _)| t == "EFFECT_REQUESTED")
        .unwrap()
        .1;
    assert_eq!(requested["taskId"], "__sdk.subprocess");
    assert_eq!(requested["label"], "child");
    let def = h.task_json(requested["effectId"].as_str().unwrap());
    assert_eq!(def["kind"], "subprocess");
    assert_eq!(def["title"], "child");
    assert_eq!(
        def["subprocess"],
        json!({"processPath": "processes/child.mjs", "exportName": "process", "processId": "child",
               "inputs": {"n": 2}, "maxIterations": 5, "shareSession": true})
    );
    assert_eq!(
        def["metadata"],
        json!({"subprocess": true, "processPath": "processes/child.mjs", "processId": "child",
               "maxIterations": 5, "shareSession": true})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_subprocesses_fail_the_run_as_babysitter_does() {
    let files = [("main.mjs", PARENT)];
    let h = Harness::new(&files, None, true).await;
    let its = h.drive(3, |_| Answer::Leave).await;
    let last = its.last().unwrap();
    assert_eq!(last.status, IterationStatus::Failed, "{last:?}");
    let error = last.error.clone().unwrap_or_default();
    assert_eq!(error["name"], "RunFailedError", "{error}");
    assert_eq!(
        error["message"],
        "Subprocess effects are disabled for this orchestration context."
    );
}
