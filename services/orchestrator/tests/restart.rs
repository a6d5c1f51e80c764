//! A finished result is never lost to an orchestrator restart (issue 25, "completions are never
//! lost"): the restarted orchestrator has every recovered task queued before it serves, so a
//! completion or heartbeat under a lease of its previous incarnation is adopted, not refused;
//! and the real worker keeps its result across the outage (retrying `Unavailable`, registering
//! again on `NotFound`) and across its own restart (the spool in its home). Each task appends to
//! a ledger, so a second execution would show even where the journal looked right.

#[path = "support/service.rs"]
mod service_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use babysitter_common::auth::AuthConfig;
use babysitter_common::client::connect_lazy;
use babysitter_harness_launcher::worker::{Worker, WorkerSettings};
use babysitter_orchestrator::service::queue::QueueConfig;
use babysitter_proto::orchestrator::v1 as pb;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use service_support::*;

/// One shell task that records its execution, then waits for `gate` before finishing.
const GATED_TASK: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: 'gated', shell: { command: a.cmd } }));
export async function process(inputs, ctx) {
  const r = await ctx.task(sh, { cmd: inputs.cmd });
  return r.stdout.trim();
}
"#;

/// Leases long enough that nothing expires during a test (a restart must not rely on expiry).
fn slow_leases() -> QueueConfig {
    QueueConfig {
        lease_duration: Duration::from_secs(60),
        heartbeat_interval: Duration::from_millis(200),
        max_poll_wait: Duration::from_millis(500),
        ..QueueConfig::default()
    }
}

/// A run of [`GATED_TASK`] with its ledger and gate under `dir`.
async fn gated_run(s: &Service, dir: &Path) -> (pb::Run, PathBuf, PathBuf) {
    let (ledger, gate) = (dir.join("ledger"), dir.join("gate"));
    let cmd = gated_cmd(&ledger, &gate);
    let run = create(&mut client(s, None), "", GATED_TASK, json!({ "cmd": cmd })).await;
    (run, ledger, gate)
}

fn gated_cmd(ledger: &Path, gate: &Path) -> String {
    format!(
        "echo \"$BABYSITTER_EFFECT_ID $BABYSITTER_ATTEMPT\" >> {ledger}; \
         while [ ! -f {gate} ]; do sleep 0.02; done; echo finished",
        ledger = ledger.display(),
        gate = gate.display()
    )
}

/// Waits (with a guard bound, never a timing assertion) until `ledger` has a line.
async fn started(ledger: &Path) {
    for _ in 0..1500 {
        if std::fs::read_to_string(ledger).is_ok_and(|s| !s.is_empty()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the task never started");
}

fn lines(ledger: &Path) -> Vec<String> {
    std::fs::read_to_string(ledger)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn worker(s: &Service, id: &str, work_dir: &Path) -> Worker {
    Worker::new(
        connect_lazy(&s.url, None).unwrap(),
        WorkerSettings {
            worker_id: id.into(),
            namespaces: vec![],
            labels: Default::default(),
            task_kinds: vec!["shell".into()],
            max_concurrency: 4,
            work_dir: work_dir.to_owned(),
            drain_timeout: Duration::from_millis(300),
        },
    )
    .unwrap()
}

/// The run's one task ran once and its result was journaled once; the run completed with it.
async fn ran_once(s: &Service, run_id: &str, ledger: &Path) {
    let mut c = client(s, None);
    let (events, last) = watch_all(&mut c, "", run_id).await;
    assert_eq!(last.status, pb::RunStatus::Completed as i32, "{last:?}");
    let requested = effects_of(&events, "EFFECT_REQUESTED");
    let resolved = effects_of(&events, "EFFECT_RESOLVED");
    assert_eq!(requested.len(), 1);
    assert_eq!(resolved, requested, "one resolution for the one effect");
    let ran = lines(ledger);
    assert_eq!(
        ran,
        vec![format!("{} 1", requested[0])],
        "the task ran once"
    );
}

/// One thread: nothing the restart spawned runs before the test's next await, so "queued before
/// it serves" is checked without a race.
#[tokio::test]
async fn a_completion_and_a_heartbeat_right_after_a_restart_are_adopted() {
    let s = start(slow_leases(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let run = create(&mut c, "", GATED_TASK, json!({"cmd": "echo hi"})).await;
    let mut w = raw_worker(&s, "w1").await;
    let task = poll_one(&mut w, "w1").await;
    assert_eq!(task.run_id, run.run_id);

    let s = s.halt().await.start().await;
    assert!(
        s.manager.queue().is_known(&task.run_id, &task.effect_id),
        "the recovered task is queued before the orchestrator serves"
    );
    // At once: the worker registers again (as on NotFound) and its heartbeat keeps the lease
    // of the previous incarnation alive.
    let mut w = raw_worker(&s, "w1").await;
    let hb = w
        .heartbeat(pb::HeartbeatRequest {
            worker_id: "w1".into(),
            lease_ids: vec![task.lease_id.clone()],
        })
        .await
        .unwrap_or_else(|e| panic!("heartbeat: {e:?}"))
        .into_inner();
    assert_eq!(
        hb.leases[0].state,
        pb::LeaseState::Active as i32,
        "the recovered lease is adopted, not lost: {hb:?}"
    );
    let done = w
        .complete_task(completion("w1", &task, br#"{"stdout":"hi\n"}"#))
        .await
        .unwrap_or_else(|e| panic!("the completion under the old lease was refused: {e:?}"))
        .into_inner();
    assert!(!done.already_completed);
    let (events, last) = watch_all(&mut client(&s, None), "", &run.run_id).await;
    assert_eq!(last.status, pb::RunStatus::Completed as i32);
    assert_eq!(effects_of(&events, "EFFECT_RESOLVED"), vec![task.effect_id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_result_finished_while_the_orchestrator_was_down_is_delivered_once_it_is_back() {
    let s = start(slow_leases(), AuthConfig::default()).await;
    let tmp = tempfile::tempdir().unwrap();
    let (run, ledger, gate) = gated_run(&s, tmp.path()).await;
    let stop = CancellationToken::new();
    let w = tokio::spawn(worker(&s, "w1", &tmp.path().join("work")).run(stop.clone()));
    started(&ledger).await;

    // The orchestrator goes away; the task finishes while it is gone, and its completion
    // meets a closed port (Unavailable) until it is back.
    let stopped = s.halt().await;
    std::fs::write(&gate, "").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let s = stopped.start().await;

    ran_once(&s, &run.run_id, &ledger).await;
    stop.cancel();
    w.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_result_spooled_by_a_worker_that_stopped_is_delivered_by_the_next_one() {
    let s = start(slow_leases(), AuthConfig::default()).await;
    let tmp = tempfile::tempdir().unwrap();
    let (run, ledger, gate) = gated_run(&s, tmp.path()).await;
    let work = tmp.path().join("work");
    let stop = CancellationToken::new();
    let first = worker(&s, "w-first", &work);
    let home = first.home_dir().to_owned();
    let w = tokio::spawn(first.run(stop.clone()));
    started(&ledger).await;

    // The orchestrator goes away; the task finishes; the worker is stopped before it can
    // deliver (its drain timeout passes), leaving the result in its spool.
    let stopped = s.halt().await;
    std::fs::write(&gate, "").unwrap();
    let spool = home.join("spool");
    for _ in 0..500 {
        if std::fs::read_dir(&spool).unwrap().next().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    w.await.unwrap().unwrap();
    assert_eq!(
        std::fs::read_dir(&spool).unwrap().count(),
        1,
        "the undelivered result stays spooled"
    );

    // Another worker (another id) on the same work dir takes the home and delivers it under
    // the first worker's lease; the restarted orchestrator adopts it.
    let s = stopped.start().await;
    let stop = CancellationToken::new();
    let second = worker(&s, "w-second", &work);
    assert_eq!(second.home_dir(), home, "the free home is taken again");
    let w = tokio::spawn(second.run(stop.clone()));
    ran_once(&s, &run.run_id, &ledger).await;
    assert_eq!(
        std::fs::read_dir(&spool).unwrap().count(),
        0,
        "delivered and unspooled"
    );
    stop.cancel();
    w.await.unwrap().unwrap();
}

/// A draining orchestrator hands out nothing: its waiting polls end empty. While it drains it
/// takes no new connection, so the worker that ran a task it recovered cannot come back to adopt
/// it; a poll still waiting on an old connection must not take that task once its adoption grace
/// runs out (the CI failure this guards against: a task run twice across a SIGTERM).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_orchestrator_hands_no_recovered_task_to_a_waiting_poll() {
    let short = QueueConfig {
        lease_duration: Duration::from_millis(300),
        heartbeat_interval: Duration::from_millis(100),
        max_poll_wait: Duration::from_secs(5),
        ..QueueConfig::default()
    };
    let s = start(short, AuthConfig::default()).await;
    let run = create(
        &mut client(&s, None),
        "",
        GATED_TASK,
        json!({"cmd": "echo hi"}),
    )
    .await;
    let mut w1 = raw_worker(&s, "w1").await;
    let task = poll_one(&mut w1, "w1").await;
    assert_eq!(task.run_id, run.run_id);

    // Restarted: the task is recovered and held for w1, which does not come back.
    let s = s.halt().await.start().await;
    assert!(s.manager.queue().is_known(&task.run_id, &task.effect_id));
    let mut w2 = raw_worker(&s, "w2").await;
    let waiting = tokio::spawn(async move {
        w2.poll_tasks(pb::PollTasksRequest {
            worker_id: "w2".into(),
            max_tasks: 1,
            wait: Some(prost_types::Duration {
                seconds: 5,
                nanos: 0,
            }),
        })
        .await
    });
    // The poll is waiting (the grace lasts 300 ms): now the server drains.
    tokio::time::sleep(Duration::from_millis(50)).await;
    s.stop.cancel();
    let got = waiting
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("the waiting poll failed: {e:?}"))
        .into_inner();
    assert!(
        got.tasks.is_empty(),
        "a draining orchestrator handed out {:?}",
        got.tasks
            .iter()
            .map(|t| (&t.effect_id, t.attempt))
            .collect::<Vec<_>>()
    );
    assert!(
        s.manager.queue().is_known(&task.run_id, &task.effect_id),
        "still queued for the next orchestrator to recover"
    );
}
