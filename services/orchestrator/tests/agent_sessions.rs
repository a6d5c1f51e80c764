//! Agent sessions kept by the orchestrator (`SaveSession`, `TaskAssignment.session`), with a
//! bare worker client: a save is accepted only under the caller's current lease and for the
//! effect that lease holds, a bad one is refused naming what is wrong, and the next attempt
//! (after the lease lapsed) gets the latest save, stored as a run file with known secrets
//! redacted. A named session (`agent.session`) is kept for the run and handed to a follow-up
//! task. The real harnesses resuming what is saved are `babysitter-tests`' `agent_resume`.

#[path = "support/service.rs"]
mod service_support;

use std::time::Duration;

use babysitter_common::auth::AuthConfig;
use babysitter_common::client::{AuthedChannel, ClientOptions};
use babysitter_journal::redact::Redactor;
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::worker_service_client::WorkerServiceClient;
use serde_json::json;
use tonic::Code;

use service_support::*;

const SECRET: &str = "sk-session-0123456789";

const ONE_AGENT: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const agent = defineTask('t.agent', (a) => ({ kind: 'agent', title: a.title,
  execution: { harness: 'claude-code' }, agent: { prompt: a.prompt, session: a.session } }));
export async function process(inputs, ctx) {
  const first = await ctx.task(agent, { title: 'first', prompt: 'one', session: inputs.session });
  if (!inputs.followUp) return { first };
  const second = await ctx.task(agent, { title: 'second', prompt: 'two', session: inputs.session });
  return { first, second };
}
"#;

/// A worker client registered for agent tasks on Claude Code.
async fn agent_worker(s: &Service, id: &str) -> WorkerServiceClient<AuthedChannel> {
    let mut w: WorkerServiceClient<AuthedChannel> =
        babysitter_common::client::client(&s.url, None, &ClientOptions::default()).unwrap();
    w.register_worker(pb::RegisterWorkerRequest {
        worker_id: id.into(),
        capabilities: Some(cpb::WorkerCapabilities {
            task_kinds: vec!["agent".into()],
            harnesses: vec![cpb::HarnessInfo {
                name: "claude-code".into(),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    w
}

fn session(effect_id: &str, attempt: u32, transcript: &str) -> pb::AgentSession {
    pb::AgentSession {
        harness: "claude-code".into(),
        native_session_id: "4acf55e5".into(),
        effect_id: effect_id.into(),
        attempt,
        saved_at: Some(std::time::SystemTime::now().into()),
        files: vec![pb::SessionFile {
            path: ".claude/projects/{project}/4acf55e5.jsonl".into(),
            content: transcript.as_bytes().to_vec().into(),
        }],
    }
}

async fn save(
    w: &mut WorkerServiceClient<AuthedChannel>,
    worker: &str,
    lease: &str,
    s: pb::AgentSession,
) -> Result<(), tonic::Status> {
    w.save_session(pb::SaveSessionRequest {
        worker_id: worker.into(),
        lease_id: lease.into(),
        session: Some(s),
    })
    .await
    .map(drop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_next_attempt_gets_the_latest_session_saved_under_a_live_lease() {
    let secrets = Redactor::new([("KEY".to_owned(), SECRET.to_owned())]).unwrap();
    let s = start_with(fast_queue(), AuthConfig::default(), secrets).await;
    let mut c = client(&s, None);
    let run = create(&mut c, "", ONE_AGENT, json!({})).await;
    let mut a = agent_worker(&s, "a").await;
    let task = poll_one(&mut a, "a").await;
    assert_eq!((task.kind.as_str(), task.attempt), ("agent", 1));
    assert!(
        task.session.is_none(),
        "nothing saved yet: {:?}",
        task.session
    );
    let effect = task.effect_id.clone();

    // Refused: a lease that is not this worker's, another effect, a path out of the home.
    let e = save(&mut a, "a", "bogus", session(&effect, 1, "x"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let e = save(&mut a, "b", &task.lease_id, session(&effect, 1, "x"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let e = save(&mut a, "a", &task.lease_id, session("01OTHER", 1, "x"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("effect_id"), "{e:?}");
    let mut bad = session(&effect, 1, "x");
    bad.files[0].path = "../../etc/passwd".into();
    let e = save(&mut a, "a", &task.lease_id, bad).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("files[0].path"), "{e:?}");

    // Two saves; the latest wins.
    save(&mut a, "a", &task.lease_id, session(&effect, 1, "turn 1\n"))
        .await
        .unwrap();
    let latest = format!("turn 1\nturn 2 used {SECRET}\n");
    save(&mut a, "a", &task.lease_id, session(&effect, 1, &latest))
        .await
        .unwrap();

    // Worker `a` stops heartbeating: after the lease lapses `b` gets attempt 2 with it.
    let mut b = agent_worker(&s, "b").await;
    let again = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let got = b
                .poll_tasks(pb::PollTasksRequest {
                    worker_id: "b".into(),
                    max_tasks: 1,
                    wait: Some(prost_types::Duration {
                        seconds: 2,
                        nanos: 0,
                    }),
                })
                .await
                .unwrap()
                .into_inner()
                .tasks;
            if let Some(t) = got.into_iter().next() {
                return t;
            }
        }
    })
    .await
    .expect("the task came back after its lease lapsed");
    assert_eq!(
        (again.effect_id.as_str(), again.attempt),
        (effect.as_str(), 2)
    );
    let got = again
        .session
        .expect("the saved session comes with the task");
    assert_eq!((got.effect_id.as_str(), got.attempt), (effect.as_str(), 1));
    assert_eq!(got.native_session_id, "4acf55e5");
    let text = String::from_utf8(got.files[0].content.to_vec()).unwrap();
    assert_eq!(
        text, "turn 1\nturn 2 used [REDACTED:KEY]\n",
        "stored redacted"
    );
    assert_eq!(
        got.files[0].path,
        ".claude/projects/{project}/4acf55e5.jsonl"
    );

    // The old lease can no longer save.
    let e = save(&mut a, "a", &task.lease_id, session(&effect, 1, "late"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let _ = run;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_named_session_goes_to_the_follow_up_task() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let run = create(
        &mut c,
        "",
        ONE_AGENT,
        json!({"session": "pair", "followUp": true}),
    )
    .await;
    let mut w = agent_worker(&s, "w").await;
    let first = poll_one(&mut w, "w").await;
    assert!(first.session.is_none());
    save(
        &mut w,
        "w",
        &first.lease_id,
        session(&first.effect_id, 1, "first task\n"),
    )
    .await
    .unwrap();
    w.complete_task(completion("w", &first, b"\"one\""))
        .await
        .unwrap();
    let second = poll_one(&mut w, "w").await;
    assert_ne!(second.effect_id, first.effect_id);
    let got = second
        .session
        .expect("the follow-up gets the named session");
    assert_eq!(got.effect_id, first.effect_id, "saved by the first task");
    assert_eq!(got.files[0].content.as_ref(), b"first task\n");

    // An invalid name is not kept (the worker fails such a task naming the field).
    let bad = create(&mut c, "", ONE_AGENT, json!({"session": "../x"})).await;
    let t = poll_one(&mut w, "w").await;
    assert_eq!(t.run_id, bad.run_id);
    let e = save(&mut w, "w", &t.lease_id, session(&t.effect_id, 1, "x"))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    let _ = run;
}
