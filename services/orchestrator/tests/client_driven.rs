//! Client-driven runs (`babysitter … --server`): the run manager never iterates or dispatches
//! them on its own, across a restart too; only `iterate_for_client` moves them, and a run the
//! manager drives refuses it. Forced halts seal runs that have already ended.

use std::sync::Arc;
use std::time::Duration;

use babysitter_journal::fs::FsStore;
use babysitter_journal::{Journal, JournalOptions};
use babysitter_orchestrator::engine::{Engine, IterationStatus};
use babysitter_orchestrator::service::ServiceError;
use babysitter_orchestrator::service::bundle::Bundle;
use babysitter_orchestrator::service::config::OrchestratorConfig;
use babysitter_orchestrator::service::queue::{QueueConfig, TaskQueue};
use babysitter_orchestrator::service::runs::{
    ManagerConfig, NewRun, RunManager, RunStatus, TaskOutcome,
};
use serde_json::{Value, json};

const PROCESS: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const step = defineTask('t.step', (a) => ({ kind: 'shell', title: 'step', shell: { command: 'echo ran >> ledger' } }));
export async function process(inputs, ctx) {
  const v = await ctx.task(step, {});
  return { v, n: inputs.n };
}
"#;

fn manager(runs: &std::path::Path) -> RunManager {
    let journal = Journal::new(Arc::new(FsStore::new(runs)), JournalOptions::default());
    let engine = Engine::new(
        journal,
        OrchestratorConfig::default().engine_options(runs.to_path_buf()),
    )
    .unwrap();
    RunManager::new(
        engine,
        TaskQueue::new(QueueConfig::default(), ulid::Ulid::generate().to_string()),
        ManagerConfig {
            retry_delay: Duration::from_millis(10),
            ..ManagerConfig::default()
        },
    )
}

fn new_run(client_driven: bool) -> NewRun {
    NewRun {
        namespace: "default".into(),
        bundle: Bundle {
            entry_path: "main.mjs".into(),
            export_name: None,
            files: vec![("main.mjs".into(), PROCESS.as_bytes().to_vec().into())],
        },
        inputs: Some(json!({"n": 7})),
        labels: Default::default(),
        run_id: None,
        process_id: Some("p".into()),
        request: None,
        prompt: None,
        idempotency_key: None,
        client_driven,
        budget: None,
        nested: None,
    }
}

async fn event_types(m: &RunManager, run_id: &str) -> Vec<String> {
    let events = m.journal().read(run_id, 1, 0).await.unwrap();
    events
        .iter()
        .map(|e| e.body.kind.as_str().to_owned())
        .collect()
}

#[tokio::test]
async fn a_client_driven_run_moves_only_when_its_client_iterates_it_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let m = manager(&runs);
    m.recover().await.unwrap();
    let run = m.create(new_run(true)).await.unwrap();
    assert!(run.client_driven);
    let id = run.run_id.clone();
    // The manager's own driving does nothing for it: no iteration, nothing queued.
    m.iterate_now(&id).await;
    m.sweep().await;
    assert_eq!(event_types(&m, &id).await, ["RUN_CREATED"]);
    assert_eq!(m.queue().counts_for_run(&id), (0, 0));

    // Its client iterates: the shell effect is requested and handed to the client, not queued.
    let (it, summary) = m.iterate_for_client("default", &id, None).await.unwrap();
    assert_eq!(it.status, IterationStatus::Waiting);
    assert_eq!(it.requested.len(), 1);
    assert_eq!(it.next_actions.len(), 1, "nextActions for the client");
    let effect = it.requested[0].clone();
    assert_eq!(summary.status, RunStatus::Waiting);
    assert_eq!(m.queue().counts_for_run(&id), (0, 0));
    // The state cache its tools read is kept, as babysitter's CLI keeps it: brought up to date
    // while the run waits (made now, as it had none), rebuilt naming why when the run ends.
    let state = |runs: &std::path::Path| -> Value {
        serde_json::from_slice(&std::fs::read(runs.join(&id).join("state/state.json")).unwrap())
            .unwrap()
    };
    assert_eq!(state(&runs)["rebuildReason"], "missing_cache");
    m.shutdown().await;
    drop(m);

    // A restart reads it back client-driven: recovery neither re-queues its effect nor drives it.
    let m = manager(&runs);
    m.recover().await.unwrap();
    let got = m.get("default", &id).await.unwrap();
    assert!(got.client_driven, "run.json keeps who drives it");
    m.iterate_now(&id).await;
    m.sweep().await;
    assert_eq!(m.queue().counts_for_run(&id), (0, 0));
    assert!(
        !std::fs::exists(runs.join(&id).join("ledger")).unwrap(),
        "no worker ran the task"
    );
    let before = event_types(&m, &id).await;

    // The client posts the result and iterates to the end.
    let (_, repeated) = m
        .post_result(
            "default",
            &id,
            &effect,
            TaskOutcome {
                outcome: Some(Ok(json!("by the client"))),
                ..Default::default()
            },
            "a client",
        )
        .await
        .unwrap();
    assert!(!repeated);
    m.iterate_now(&id).await;
    assert_eq!(
        event_types(&m, &id).await.len(),
        before.len() + 1,
        "the result alone: the manager did not iterate after it"
    );
    let marker = json!({"iteration": 2}).as_object().cloned();
    let (it, summary) = m.iterate_for_client("default", &id, marker).await.unwrap();
    assert_eq!(it.status, IterationStatus::Completed);
    assert_eq!(it.output, Some(json!({"v": "by the client", "n": 7})));
    assert_eq!(summary.status, RunStatus::Completed);
    assert_eq!(state(&runs)["rebuildReason"], "post_completion");
    let types = event_types(&m, &id).await;
    assert_eq!(
        &types[types.len() - 2..],
        ["RUN_ITERATION", "RUN_COMPLETED"],
        "the marker is journaled with the iteration"
    );
    // Iterating an ended run has nothing to do and writes nothing.
    let (it, summary) = m.iterate_for_client("default", &id, None).await.unwrap();
    assert_eq!(it.status, IterationStatus::None);
    assert_eq!(summary.status, RunStatus::Completed);
    assert_eq!(event_types(&m, &id).await, types);
}

#[tokio::test]
async fn a_run_the_manager_drives_refuses_client_iteration() {
    let dir = tempfile::tempdir().unwrap();
    let m = manager(&dir.path().join("runs"));
    m.recover().await.unwrap();
    let run = m.create(new_run(false)).await.unwrap();
    assert!(!run.client_driven);
    let err = m
        .iterate_for_client("default", &run.run_id, None)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ServiceError::Conflict(msg) if msg.contains("driven by the orchestrator")),
        "{err:?}"
    );
    // Another namespace does not see it at all.
    let err = m
        .iterate_for_client("other", &run.run_id, None)
        .await
        .unwrap_err();
    assert!(matches!(err, ServiceError::NotFound(_)), "{err:?}");
}

#[tokio::test]
async fn a_forced_halt_seals_a_run_that_has_already_ended() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let m = manager(&runs);
    m.recover().await.unwrap();
    let id = m.create(new_run(true)).await.unwrap().run_id;
    let (it, _) = m.iterate_for_client("default", &id, None).await.unwrap();
    m.post_result(
        "default",
        &id,
        &it.requested[0],
        TaskOutcome {
            outcome: Some(Ok(json!(1))),
            ..Default::default()
        },
        "a client",
    )
    .await
    .unwrap();
    let (it, _) = m.iterate_for_client("default", &id, None).await.unwrap();
    assert_eq!(it.status, IterationStatus::Completed);

    // Unforced: an ended run is left as it is.
    let (s, already) = m.halt("default", &id, "", true, false).await.unwrap();
    assert!(already);
    assert_eq!(s.status, RunStatus::Completed);
    let ended = event_types(&m, &id).await;
    // Forced: babysitter's manual seal is appended at the head and the summary follows it.
    let (s, already) = m
        .halt("default", &id, "operator", true, true)
        .await
        .unwrap();
    assert!(already);
    assert_eq!(s.status, RunStatus::Failed);
    let types = event_types(&m, &id).await;
    assert_eq!(types.len(), ended.len() + 1);
    assert_eq!(types.last().unwrap(), "RUN_FAILED");
    assert_eq!(
        m.get("default", &id).await.unwrap().status,
        RunStatus::Failed
    );
    // Read back after a restart, it is the sealed run.
    m.shutdown().await;
    drop(m);
    let m = manager(&runs);
    m.recover().await.unwrap();
    assert_eq!(
        m.get("default", &id).await.unwrap().status,
        RunStatus::Failed
    );
}
