//! Recovery at start: a run whose `CreateRun` crashed between writing `run.json` and
//! journaling `RUN_CREATED` is finished with the same `RUN_CREATED` the creation would have
//! written (`lifecycle::NewRun`, one rule), not a hand-picked subset of it.

use std::sync::Arc;
use std::time::Duration;

use babysitter_journal::fs::FsStore;
use babysitter_journal::store::RunFiles;
use babysitter_journal::{Journal, JournalOptions};
use babysitter_orchestrator::engine::Engine;
use babysitter_orchestrator::engine::lifecycle::{Entrypoint, NewRun};
use babysitter_orchestrator::service::config::OrchestratorConfig;
use babysitter_orchestrator::service::queue::{QueueConfig, TaskQueue};
use babysitter_orchestrator::service::runs::{ManagerConfig, RunManager};
use serde_json::{Value, json};

fn manager(journal: Journal, runs: &std::path::Path) -> RunManager {
    let engine = Engine::new(
        journal,
        OrchestratorConfig::default().engine_options(runs.to_path_buf()),
    )
    .unwrap();
    let queue = QueueConfig {
        lease_duration: Duration::from_secs(24 * 3600),
        ..QueueConfig::default()
    };
    RunManager::new(
        engine,
        TaskQueue::new(queue, ulid::Ulid::generate().to_string()),
        ManagerConfig::default(),
    )
}

#[tokio::test]
async fn a_creation_cut_short_is_finished_with_the_run_created_it_would_have_written() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let journal = Journal::new(Arc::new(FsStore::new(&runs)), JournalOptions::default());

    // What CreateRun stores before RUN_CREATED: a run with a prompt, a harness and inputs.
    let run_id = ulid::Ulid::generate().to_string();
    let mut new = NewRun::new(
        &run_id,
        "p",
        Entrypoint {
            import_path: "process/p.js".into(),
            export_name: Some("process".into()),
        },
        "2026-01-01T00:00:00.000Z".into(),
    );
    new.prompt = Some("ship it".into());
    new.harness = Some("claude-code".into());
    new.code_hash = Some("0".repeat(64));
    new.has_inputs = true;
    new.extra.insert("namespace".into(), json!("default"));
    journal
        .create_run(
            &run_id,
            RunFiles {
                run_json: new.run_json(),
                inputs_json: Some(json!({"n": 1})),
            },
        )
        .await
        .unwrap();

    let manager = manager(journal.clone(), &runs);
    manager.recover().await.unwrap();

    let first = journal.read(&run_id, 1, 1).await.unwrap();
    assert_eq!(first.len(), 1, "RUN_CREATED was journaled");
    assert_eq!(
        first[0].body.kind,
        babysitter_journal::EventType::RunCreated
    );
    assert_eq!(
        first[0].body.data,
        Value::Object(new.created_data()),
        "the same data as at creation (inputsRef, prompt and harness included)"
    );
    manager.shutdown().await;
}

#[tokio::test]
async fn a_run_json_without_a_process_is_reported_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let journal = Journal::new(Arc::new(FsStore::new(&runs)), JournalOptions::default());
    let run_id = ulid::Ulid::generate().to_string();
    let broken = json!({"runId": run_id, "layoutVersion": "x"});
    journal
        .create_run(
            &run_id,
            RunFiles {
                run_json: broken.clone(),
                inputs_json: None,
            },
        )
        .await
        .unwrap();

    let manager = manager(journal.clone(), &runs);
    // One bad run does not stop the others from being recovered.
    manager.recover().await.unwrap();
    assert_eq!(
        journal.head(&run_id).await.unwrap().seq,
        0,
        "nothing journaled"
    );
    assert_eq!(journal.run_files(&run_id).await.unwrap().run_json, broken);
    manager.shutdown().await;
}

#[tokio::test]
async fn a_creation_cut_before_its_bundle_was_stored_is_failed_and_its_key_freed() {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let journal = Journal::new(Arc::new(FsStore::new(&runs)), JournalOptions::default());

    // CreateRun wrote run.json (naming the bundle's blob) and was cut before storing the blob.
    let run_id = ulid::Ulid::generate().to_string();
    let mut new = NewRun::new(
        &run_id,
        "p",
        Entrypoint {
            import_path: "process/main.mjs".into(),
            export_name: None,
        },
        "2026-01-01T00:00:00.000Z".into(),
    );
    let missing = babysitter_journal::store::BlobRef::of(b"export async function process() {}");
    new.extra.insert("namespace".into(), json!("default"));
    new.extra.insert("idempotencyKey".into(), json!("deploy-7"));
    new.extra.insert(
        "processBundle".into(),
        json!({"entry": "main.mjs", "files": {"main.mjs": missing.to_string()}}),
    );
    journal
        .create_run(
            &run_id,
            RunFiles {
                run_json: new.run_json(),
                inputs_json: None,
            },
        )
        .await
        .unwrap();

    let manager = manager(journal.clone(), &runs);
    assert_eq!(manager.recover().await.unwrap(), 0, "nothing to resume");
    let events = journal.read(&run_id, 1, 0).await.unwrap();
    let kinds: Vec<String> = events.iter().map(|e| e.body.kind.to_string()).collect();
    assert_eq!(kinds, ["RUN_CREATED", "RUN_FAILED"]);
    assert_eq!(
        events[1].body.data["error"]["name"],
        "RunCreationIncompleteError"
    );
    let run = manager.get("default", &run_id).await.unwrap();
    assert!(run.status.is_terminal(), "{run:?}");

    // The client's retry under the same key creates the run afresh.
    let retry = manager
        .create(babysitter_orchestrator::service::runs::NewRun {
            namespace: "default".into(),
            bundle: babysitter_orchestrator::service::bundle::Bundle::single_file(
                "main.mjs",
                b"export async function process() { return 1; }",
            ),
            inputs: None,
            labels: Default::default(),
            run_id: None,
            process_id: None,
            request: None,
            prompt: None,
            idempotency_key: Some("deploy-7".into()),
            client_driven: false,
            budget: None,
            nested: None,
        })
        .await
        .unwrap();
    assert_ne!(retry.run_id, run_id);
    manager.shutdown().await;
}
