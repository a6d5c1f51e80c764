//! The golden babysitter v6 run (`tests/fixtures/babysitter-v6`, vendored from the reference) and every kind of damage a
//! journal directory can suffer, each reported as a typed error naming the run, the sequence
//! number and the file — with nothing overwritten.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use babysitter_journal::fs::FsStore;
use babysitter_journal::{EventType, Journal, JournalError, JournalOptions, NewEvent};
use serde_json::{Value, json};

const GOLDEN_RUN: &str = "01JGOLDENRUN0000000000000";

fn fixture_runs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/babysitter-v6/runs")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
            let mut perms = std::fs::metadata(&target).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perms.set_readonly(false);
            std::fs::set_permissions(&target, perms).unwrap();
        }
    }
}

/// A writable copy of the golden run; returns (tempdir, runs root).
fn golden_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("runs");
    copy_dir(&fixture_runs().join(GOLDEN_RUN), &root.join(GOLDEN_RUN));
    (dir, root)
}

fn journal(root: &Path) -> Journal {
    Journal::new(Arc::new(FsStore::new(root)), JournalOptions::default())
}

fn journal_files(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(root.join(GOLDEN_RUN).join("journal"))
        .unwrap()
        .map(|e| e.unwrap())
        .map(|e| {
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn golden_checksums_recompute_and_files_reserialise_byte_for_byte() {
    let (_dir, root) = golden_copy();
    let events = journal(&root)
        .read(GOLDEN_RUN, 1, 0)
        .await
        .expect("golden journal verifies");
    let files = journal_files(&root);
    assert_eq!(events.len(), 10);
    for (event, (name, bytes)) in events.iter().zip(&files) {
        assert_eq!(&event.file_name(), name);
        assert_eq!(event.body.checksum(), event.checksum, "{name}");
        assert_eq!(
            &event.file_bytes(),
            bytes,
            "{name} re-serialises to the reference's exact bytes"
        );
    }
}

#[tokio::test]
async fn golden_task_files_round_trip_byte_for_byte() {
    let (_dir, root) = golden_copy();
    let j = journal(&root);
    let tasks = root.join(GOLDEN_RUN).join("tasks");
    let mut checked = 0;
    for effect in std::fs::read_dir(&tasks).unwrap() {
        let effect = effect.unwrap().file_name().into_string().unwrap();
        for name in ["task.json", "result.json", "stdout.log"] {
            let original = std::fs::read(tasks.join(&effect).join(name)).unwrap();
            let file = babysitter_journal::store::RunFile::task(&effect, name).unwrap();
            let got = j.get_run_file(GOLDEN_RUN, &file).await.unwrap();
            assert_eq!(&got[..], &original[..]);
            // Rewriting what the reference wrote reproduces its bytes exactly.
            j.put_run_file(GOLDEN_RUN, &file, got).await.unwrap();
            assert_eq!(
                std::fs::read(tasks.join(&effect).join(name)).unwrap(),
                original,
                "{effect}/{name}"
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 12);
}

#[tokio::test]
async fn golden_state_cache_rebuilds_to_the_reference_fields() {
    let (_dir, root) = golden_copy();
    let j = journal(&root);
    let state = j.state(GOLDEN_RUN).await.unwrap();
    // The fixture ships no state/state.json (its .gitignore drops state/), so it is rebuilt.
    assert_eq!(state.rebuild_reason, Some("missing_cache"));
    let doc: Value = serde_json::from_slice(&state.state_json).unwrap();
    let keys: Vec<_> = doc.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        keys,
        [
            "schemaVersion",
            "savedAt",
            "sdkVersion",
            "journalHead",
            "stateVersion",
            "effectsByInvocation",
            "pendingEffectsByKind",
            "rebuildReason"
        ]
    );
    assert_eq!(doc["schemaVersion"], "2026.01.state-cache");
    assert_eq!(doc["sdkVersion"], "6.0.0");
    assert_eq!(
        doc["journalHead"],
        json!({"seq": 10, "ulid": "01JGFJKBP8000000000000001Q"})
    );
    assert_eq!(doc["stateVersion"], 10);
    assert_eq!(doc["pendingEffectsByKind"], json!({}));
    let effects = doc["effectsByInvocation"].as_object().unwrap();
    assert_eq!(effects.len(), 4);
    // The entry of spec/babysitter-core.md §2.8, field by field and in order.
    let plan = &effects["golden/demo:golden-plan.default.efd47d40d144.0:golden.plan"];
    assert_eq!(
        plan,
        &json!({"effectId": "01JGFJJZZ8000000000000001B", "invocationKey": "golden/demo:golden-plan.default.efd47d40d144.0:golden.plan",
                "status": "resolved_ok", "kind": "agent", "label": "golden", "taskId": "golden.plan",
                "stepId": "golden-plan.default.efd47d40d144.0", "requestedAt": "2025-01-01T00:00:05.000Z",
                "resolvedAt": "2025-01-01T00:00:07.000Z"})
    );
    let plan_keys: Vec<_> = plan.as_object().unwrap().keys().cloned().collect();
    assert_eq!(
        plan_keys,
        [
            "effectId",
            "invocationKey",
            "status",
            "kind",
            "label",
            "taskId",
            "stepId",
            "requestedAt",
            "resolvedAt"
        ]
    );
    assert!(effects.values().all(|e| e["status"] == "resolved_ok"));
    // Written where babysitter keeps it, and reused while fresh.
    assert!(root.join(GOLDEN_RUN).join("state/state.json").is_file());
    assert_eq!(
        journal(&root)
            .state(GOLDEN_RUN)
            .await
            .unwrap()
            .rebuild_reason,
        None
    );
}

#[tokio::test]
async fn appending_to_the_golden_run_continues_its_format() {
    let (_dir, root) = golden_copy();
    let j = journal(&root);
    let mut e = NewEvent::new(EventType::RunHalted, json!({"reason": "test"}));
    e.recorded_at = Some("2025-01-01T00:00:30.000Z".into());
    let c = j.append(GOLDEN_RUN, 11, vec![e]).await.unwrap();
    assert!(c[0].ulid.as_str() > "01JGFJKBP8000000000000001Q");
    let name = c[0].file_name();
    assert!(name.starts_with("000011."));
    let text = std::fs::read_to_string(root.join(GOLDEN_RUN).join("journal").join(&name)).unwrap();
    assert!(text.starts_with("{\n  \"type\": \"RUN_HALTED\",\n  \"recordedAt\": \"2025-01-01T00:00:30.000Z\",\n  \"data\": {\n    \"reason\": \"test\"\n  },\n  \"sdkVersion\": \"6.0.0\",\n  \"checksum\": \""));
    assert!(
        !root.join(GOLDEN_RUN).join("run.lock").try_exists().unwrap(),
        "run.lock released"
    );
}

/// Damages the golden copy with `damage`, then checks that reading fails with an error that
/// `check` accepts and that names the file, and that an append is refused without writing.
async fn damaged(damage: impl FnOnce(&Path), check: impl Fn(&JournalError) -> bool, names: &str) {
    let (_dir, root) = golden_copy();
    let jdir = root.join(GOLDEN_RUN).join("journal");
    damage(&jdir);
    let before = journal_files(&root);
    let j = journal(&root);
    let err = j
        .read(GOLDEN_RUN, 1, 0)
        .await
        .expect_err("damage is detected");
    assert!(check(&err), "unexpected error kind: {err:?}");
    let msg = err.to_string();
    assert!(msg.contains(names), "`{msg}` should name {names}");
    assert!(msg.contains(GOLDEN_RUN), "`{msg}` should name the run");
    let append = j
        .append(
            GOLDEN_RUN,
            11,
            vec![NewEvent::new(EventType::RunHalted, json!({}))],
        )
        .await;
    assert!(append.is_err(), "no append on a damaged journal");
    assert_eq!(journal_files(&root), before, "nothing overwritten or added");
}

fn file_with_prefix(jdir: &Path, prefix: &str) -> PathBuf {
    std::fs::read_dir(jdir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with(prefix))
        .unwrap()
}

#[tokio::test]
async fn flipped_byte_is_a_checksum_mismatch() {
    damaged(
        |j| {
            let p = file_with_prefix(j, "000004.");
            let mut b = std::fs::read(&p).unwrap();
            let i = b.windows(4).position(|w| w == b"ok\",").unwrap_or(60);
            b[i] ^= 0x01;
            std::fs::write(&p, b).unwrap();
        },
        |e| matches!(e, JournalError::ChecksumMismatch { at, .. } if at.seq == Some(4)),
        "000004.01JGFJK3W8000000000000001F.json",
    )
    .await;
}

#[tokio::test]
async fn missing_sequence_is_a_gap() {
    damaged(
        |j| std::fs::remove_file(file_with_prefix(j, "000006.")).unwrap(),
        |e| {
            matches!(
                e,
                JournalError::SequenceGap {
                    expected: 6,
                    got: 7,
                    ..
                }
            )
        },
        "000007.01JGFJK7S8000000000000001K.json",
    )
    .await;
}

#[tokio::test]
async fn duplicated_sequence_is_refused() {
    damaged(
        |j| {
            std::fs::copy(
                file_with_prefix(j, "000007."),
                j.join("000007.01JGFJK7S8000000000000009Z.json"),
            )
            .unwrap();
        },
        |e| matches!(e, JournalError::DuplicateSequence { seq: 7, files, .. } if files.len() == 2),
        "000007.01JGFJK7S8000000000000009Z.json",
    )
    .await;
}

#[tokio::test]
async fn truncated_json_is_corrupt() {
    damaged(
        |j| {
            let p = file_with_prefix(j, "000003.");
            let b = std::fs::read(&p).unwrap();
            std::fs::write(&p, &b[..b.len() / 2]).unwrap();
        },
        |e| matches!(e, JournalError::Corrupt { at, reason } if at.seq == Some(3) && reason.contains("invalid JSON")),
        "000003.01JGFJK1XR000000000000001D.json",
    )
    .await;
}

#[tokio::test]
async fn ulids_out_of_order_are_refused() {
    damaged(
        |j| {
            let p = file_with_prefix(j, "000005.");
            std::fs::rename(&p, j.join("000005.01JGFJK00000000000000000AA.json")).unwrap();
        },
        |e| matches!(e, JournalError::UlidOrder { at, .. } if at.seq == Some(5)),
        "000005.01JGFJK00000000000000000AA.json",
    )
    .await;
}

#[tokio::test]
async fn bad_file_names_are_refused() {
    damaged(
        |j| std::fs::write(j.join("0000x2.NOTAULID.json"), b"{}").unwrap(),
        |e| matches!(e, JournalError::BadFileName { .. }),
        "0000x2.NOTAULID.json",
    )
    .await;
}

#[tokio::test]
async fn a_reference_cli_holding_run_lock_blocks_appends_until_released() {
    let (_dir, root) = golden_copy();
    let lock = root.join(GOLDEN_RUN).join("run.lock");
    // A live holder: our own parent process id stands in for a running reference CLI.
    let holder = json!({"pid": std::os::unix::process::parent_id(), "owner": "test", "acquiredAt": "2025-01-01T00:00:00.000Z"});
    std::fs::write(&lock, serde_json::to_vec(&holder).unwrap()).unwrap();
    let j = journal(&root);
    let task = tokio::spawn({
        let j = j.clone();
        async move {
            j.append(
                GOLDEN_RUN,
                11,
                vec![NewEvent::new(EventType::RunHalted, json!({}))],
            )
            .await
        }
    });
    tokio::task::yield_now().await;
    assert_eq!(
        journal_files(&root).len(),
        10,
        "waits while the lock is held"
    );
    std::fs::remove_file(&lock).unwrap();
    let c = task.await.unwrap().expect("appends once released");
    assert_eq!(c[0].seq, 11);
    // A stale lock (dead pid) is taken over.
    std::fs::write(
        &lock,
        serde_json::to_vec(&json!({"pid": 999_999_999, "owner": "dead"})).unwrap(),
    )
    .unwrap();
    j.append(
        GOLDEN_RUN,
        12,
        vec![NewEvent::new(EventType::RunHalted, json!({}))],
    )
    .await
    .expect("stale lock taken over");
}
