//! What an operator asks the RunService about a run's tasks and the workers (issue 27 §4):
//! `ListTasks` (state, attempt, worker, paging), `GetTask` (definition, result, log heads) and
//! `ListWorkers` (capabilities, leases, last contact), against a real server with a raw worker
//! whose polls and completions the test makes itself.

#[path = "support/service.rs"]
mod service_support;

use babysitter_common::auth::AuthConfig;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use serde_json::{Value, json};
use tonic::Code;

use service_support::*;

/// Two shell tasks side by side, then a third.
const FAN_THEN_ONE: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: a.t, shell: { command: 'true' } }));
export async function process(inputs, ctx) {
  const fan = await ctx.parallel.all([
    () => ctx.task(sh, { t: 'left' }, { label: 'left' }),
    () => ctx.task(sh, { t: 'right' }, { label: 'right' }),
  ]);
  const last = await ctx.task(sh, { t: 'last' }, { label: 'last' });
  return { fan, last };
}
"#;

async fn tasks(
    c: &mut RunServiceClient<babysitter_common::client::AuthedChannel>,
    run_id: &str,
    page_size: u32,
    page_token: &str,
) -> Result<pb::ListTasksResponse, tonic::Status> {
    c.list_tasks(pb::ListTasksRequest {
        run_id: run_id.into(),
        page_size,
        page_token: page_token.into(),
        ..Default::default()
    })
    .await
    .map(tonic::Response::into_inner)
}

fn state(t: &pb::Task) -> pb::TaskState {
    pb::TaskState::try_from(t.state).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tasks_of_a_run_and_the_workers_as_an_operator_sees_them() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let run = create(&mut c, "", FAN_THEN_ONE, json!({})).await;
    let mut w = raw_worker(&s, "w1").await;
    let leased = poll_one(&mut w, "w1").await;

    // One of the two is leased to w1, the other waits for a worker.
    let listed = tasks(&mut c, &run.run_id, 0, "").await.unwrap();
    assert_eq!(listed.tasks.len(), 2, "{listed:?}");
    assert!(listed.next_page_token.is_empty());
    let (mine, other) = if listed.tasks[0].effect_id == leased.effect_id {
        (&listed.tasks[0], &listed.tasks[1])
    } else {
        (&listed.tasks[1], &listed.tasks[0])
    };
    assert_eq!(state(mine), pb::TaskState::Leased, "{mine:?}");
    assert_eq!((mine.worker_id.as_str(), mine.attempt), ("w1", 1));
    assert!(mine.lease_expires_at.is_some());
    assert_eq!(state(other), pb::TaskState::Queued, "{other:?}");
    assert!(other.worker_id.is_empty());
    assert_eq!(
        (mine.kind.as_str(), mine.task_id.as_str()),
        ("shell", "t.sh")
    );
    let labels: Vec<&str> = listed.tasks.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(labels, ["left", "right"], "request order");

    let workers = c
        .list_workers(pb::ListWorkersRequest {})
        .await
        .unwrap()
        .into_inner()
        .workers;
    assert_eq!(workers.len(), 1, "{workers:?}");
    assert_eq!(workers[0].worker_id, "w1");
    assert_eq!(workers[0].leases, 1);
    assert!(workers[0].live && workers[0].last_seen.is_some());
    assert_eq!(
        workers[0]
            .capabilities
            .as_ref()
            .map(|c| c.task_kinds.clone()),
        Some(vec!["shell".to_owned()])
    );

    // Completed with a long stdout: the task shows as succeeded, with its log's head.
    let stdout = "0123456789".repeat(1000);
    let mut done = completion("w1", &leased, br#"{"ok":true}"#);
    if let Some(r) = done.result.as_mut() {
        r.stdout = stdout.clone().into_bytes().into();
        r.stderr = "warned\n".as_bytes().to_vec().into();
    }
    w.complete_task(done).await.unwrap();
    let detail = c
        .get_task(pb::GetTaskRequest {
            run_id: run.run_id.clone(),
            effect_id: leased.effect_id.clone(),
            log_head_bytes: 100,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let task = detail.task.as_ref().unwrap();
    assert_eq!(state(task), pb::TaskState::Succeeded);
    assert!(task.resolved_at.is_some() && task.requested_at.is_some());
    assert_eq!(detail.stdout_head, stdout[..100]);
    assert_eq!(detail.stdout_bytes, 10_000);
    assert!(detail.stdout_truncated);
    assert_eq!(
        (detail.stderr_head.as_str(), detail.stderr_truncated),
        ("warned\n", false)
    );
    let result: Value = serde_json::from_slice(&detail.result_json).unwrap();
    assert_eq!(result["value"], json!({"ok": true}), "{result}");
    let def: Value = serde_json::from_slice(&detail.task_json).unwrap();
    assert_eq!(def["kind"], "shell", "{def}");

    // The other fan-out task, then the last one: three tasks, walked a page at a time.
    let second = poll_one(&mut w, "w1").await;
    w.complete_task(completion("w1", &second, b"2"))
        .await
        .unwrap();
    let last = poll_one(&mut w, "w1").await;
    let mut seen = Vec::new();
    let mut token = String::new();
    loop {
        let page = tasks(&mut c, &run.run_id, 1, &token).await.unwrap();
        assert_eq!(page.tasks.len(), 1);
        seen.push((page.tasks[0].label.clone(), state(&page.tasks[0])));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    assert_eq!(
        seen,
        [
            ("left".to_owned(), pb::TaskState::Succeeded),
            ("right".to_owned(), pb::TaskState::Succeeded),
            ("last".to_owned(), pb::TaskState::Leased),
        ]
    );
    w.complete_task(completion("w1", &last, b"3"))
        .await
        .unwrap();

    // What a caller gets wrong is named.
    let e = tasks(&mut c, &run.run_id, 1, "01NOTANEFFECT")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("01NOTANEFFECT"), "{e:?}");
    let e = c
        .get_task(pb::GetTaskRequest {
            run_id: run.run_id.clone(),
            effect_id: "01NOSUCHEFFECT".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
    let e = tasks(&mut c, "01NOSUCHRUN", 0, "").await.unwrap_err();
    assert_eq!(e.code(), Code::NotFound, "{e:?}");
}
