//! The golden babysitter v6 run (`tests/fixtures/babysitter-v6`, vendored from the reference): replaying `demo.mjs` over its
//! journal requests nothing new and ends with the same output (check 2 of its README), and
//! driving a fresh run of `demo.mjs` with the reference's clock, ids and posted results
//! reproduces its journal, `task.json` and `result.json` files byte for byte and
//! `iterations.json` field for field, but for two differences by design named in the test
//! (check 4).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use babysitter_engine::ProcessState;
use babysitter_engine::commit::Commit;
use babysitter_engine::{Engine, EngineOptions, IterationStatus};
use babysitter_journal::fs::FsStore;
use babysitter_journal::store::RunFiles;
use babysitter_journal::{Journal, JournalOptions, UlidSource};
use serde_json::{Value, json};

const RUN: &str = "01JGOLDENRUN0000000000000";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/babysitter-v6")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::write(&target, std::fs::read(entry.path()).unwrap()).unwrap();
        }
    }
}

fn engine(root: &Path, ids: Vec<&str>, clock_ms: i64) -> Engine {
    engine_with(root, ids, Arc::new(AtomicI64::new(clock_ms)), None)
}

/// An engine over `<root>/runs` whose effect ids (then fresh ones), clock and, when given,
/// journal event ULIDs are the test's.
fn engine_with(
    root: &Path,
    ids: Vec<&str>,
    clock: Arc<AtomicI64>,
    ulids: Option<Vec<String>>,
) -> Engine {
    let mut journal_opts = JournalOptions::default();
    if let Some(ulids) = ulids {
        let ulids = Mutex::new(ulids.into_iter());
        journal_opts.ulids = Some(UlidSource(Arc::new(move || {
            ulids.lock().unwrap().next().unwrap_or_default()
        })));
    }
    let journal = Journal::new(Arc::new(FsStore::new(root.join("runs"))), journal_opts);
    let mut opts = EngineOptions::new(root.join("runs"));
    let ids = Arc::new(Mutex::new(
        ids.into_iter().map(str::to_owned).collect::<Vec<_>>(),
    ));
    opts.ids = Some(Arc::new(move || {
        let mut v = ids.lock().unwrap();
        if v.is_empty() {
            ulid::Ulid::generate().to_string()
        } else {
            v.remove(0)
        }
    }));
    opts.clock = Arc::new(move || clock.load(Ordering::SeqCst));
    Engine::new(journal, opts).unwrap()
}

fn iterations() -> Vec<Value> {
    serde_json::from_slice(&std::fs::read(fixture().join("runs/iterations.json")).unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replaying_demo_over_the_golden_journal_requests_nothing_and_completes() {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(
        &fixture().join("runs").join(RUN),
        &dir.path().join("runs").join(RUN),
    );
    copy_dir(&fixture().join("processes"), &dir.path().join("processes"));
    let e = engine(dir.path(), vec![], 1_735_689_600_000);
    let report = e.replay_dry(RUN).await.expect("replay");
    assert!(
        report.requests.is_empty(),
        "every ctx call found its effect: {:?}",
        report.requests
    );
    let expected = iterations().last().unwrap()["output"].clone();
    assert_eq!(report.state, ProcessState::Returned(expected));
}

/// The golden effects in request order.
const EFFECTS: [&str; 4] = [
    "01JGFJJZZ8000000000000001B",
    "01JGFJK2X0000000000000001E",
    "01JGFJK4VG000000000000001G",
    "01JGFJK8RG000000000000001M",
];

/// Check 4: a fresh run of `demo.mjs`, driven with the reference's clock, ids and posted
/// results, reproduces its files.
///
/// - Clock: before each write the test sets the engine's clock to the `recordedAt` of the
///   golden event that write produces (the reference's clock ticked once per call; ours is
///   read per operation). Ids: the engine's effect ids and the journal's event ULIDs come from
///   the golden run, in order.
/// - Byte for byte: every journal file (name and content), every `task.json` and
///   `result.json`; `iterations.json` field for field (status, every field of every next
///   action, output). Two differences are by design and are checked to be the only ones:
///   1. the second effect of the parallel batch: the engine journals an iteration's new effects
///      as one append at one time (the reference appended them one by one while its clock
///      ticked), so journal event 5's `recordedAt` (and so its checksum) and that action's
///      `requestedAt` are 00:00:10 where the reference has 00:00:11;
///   2. the breakpoint's `requestedAt` (in its `task.json`'s `metadata` and `inputs`, and in its
///      action's `taskDef`):
///      it is `ctx.now()`, which in this engine is the run's replay-stable logical clock (fix
///      B13: the latest resolution consumed, 00:00:16), where the reference read its wall clock
///      (00:00:19).
/// - `iterations.json`'s `metadata` is the CLI's `run:iterate` report, not the engine's.
/// - `state/state.json`: the fixture does not ship it (its `.gitignore` drops `state/`), so the
///   state cache rebuilt from our journal is checked against the format of the spec (§2.8),
///   whose example is this run's final state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driving_a_fresh_run_reproduces_the_reference_files() {
    let golden = fixture().join("runs").join(RUN);
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture().join("processes"), &dir.path().join("processes"));
    let golden_files = journal_files(&golden);
    let golden_events: Vec<Value> = golden_files.iter().map(|(_, e)| e.clone()).collect();
    let recorded_ms = |seq: u64| -> i64 {
        let at = golden_events[seq as usize - 1]["recordedAt"]
            .as_str()
            .unwrap();
        chrono::DateTime::parse_from_rfc3339(at)
            .unwrap()
            .timestamp_millis()
    };
    let clock = Arc::new(AtomicI64::new(recorded_ms(1)));
    let ulids: Vec<String> = golden_files
        .iter()
        .map(|(name, _)| name[7..33].to_owned())
        .collect();
    let e = engine_with(dir.path(), EFFECTS.to_vec(), clock.clone(), Some(ulids));
    let j = e.journal();
    let run_json: Value =
        serde_json::from_slice(&std::fs::read(golden.join("run.json")).unwrap()).unwrap();
    let inputs: Value =
        serde_json::from_slice(&std::fs::read(golden.join("inputs.json")).unwrap()).unwrap();
    j.create_run(
        RUN,
        RunFiles {
            run_json,
            inputs_json: Some(inputs),
        },
    )
    .await
    .unwrap();
    // RUN_CREATED as the reference's run:create wrote it.
    let mut created = babysitter_journal::NewEvent::new(
        babysitter_journal::EventType::RunCreated,
        golden_events[0]["data"].clone(),
    );
    created.recorded_at = Some(golden_events[0]["recordedAt"].as_str().unwrap().to_owned());
    j.append(RUN, 1, vec![created]).await.unwrap();

    // The reference clock at the next write.
    let tick = |clock: &AtomicI64, head: u64| clock.store(recorded_ms(head + 1), Ordering::SeqCst);
    let mut head = 1;
    let mut answers = Vec::new();
    let mut posted = 0;
    loop {
        tick(&clock, head);
        let it = e.iterate(RUN).await.expect("iterate");
        head = it.head.seq;
        answers.push(it.clone());
        if it.status != IterationStatus::Waiting {
            break;
        }
        for action in &it.next_actions {
            let id = action["effectId"].as_str().unwrap().to_owned();
            let value = if action["kind"] == "breakpoint" {
                json!({"approved": true, "response": "ok"})
            } else {
                json!({"effect": action["taskId"], "n": posted.min(1), "ok": true})
            };
            tick(&clock, head);
            e.commit_result(
                RUN,
                Commit {
                    effect_id: id.clone(),
                    outcome: Ok(value),
                    stdout: Some(
                        std::fs::read_to_string(golden.join("tasks").join(&id).join("stdout.log"))
                            .unwrap(),
                    ),
                    stderr: None,
                    started_at: Some("2025-01-01T00:00:00.000Z".into()),
                    finished_at: Some("2025-01-01T00:00:01.000Z".into()),
                    metadata: None,
                    stdout_ref: None,
                    stderr_ref: None,
                },
            )
            .await
            .unwrap();
            head += 1;
            posted += 1;
        }
        assert!(answers.len() <= 10, "the run converges");
    }

    // Difference 2 (B13), where it shows.
    let logical_bp_time = "2025-01-01T00:00:16.000Z";
    let reference_bp_time = "2025-01-01T00:00:19.000Z";
    // Difference 1 (one append per iteration), where it shows.
    let batch_time = "2025-01-01T00:00:10.000Z";
    let reference_second_time = "2025-01-01T00:00:11.000Z";

    // iterations.json, field for field.
    let expected = iterations();
    assert_eq!(answers.len(), expected.len());
    for (ours, theirs) in answers.iter().zip(&expected) {
        assert_eq!(ours.status.as_str(), theirs["status"]);
        let mut theirs_actions = theirs["nextActions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for a in &mut theirs_actions {
            if a["effectId"] == EFFECTS[2] {
                assert_eq!(a["requestedAt"], reference_second_time);
                a["requestedAt"] = json!(batch_time);
            }
            if a["kind"] == "breakpoint" {
                let at = &mut a["taskDef"]["metadata"]["requestedAt"];
                assert_eq!(*at, reference_bp_time);
                *at = json!(logical_bp_time);
            }
        }
        assert_eq!(ours.next_actions, theirs_actions);
        if theirs["status"] == "completed" {
            assert_eq!(ours.output.as_ref(), Some(&theirs["output"]));
        }
    }

    // task.json and result.json, byte for byte.
    let ours_dir = dir.path().join("runs").join(RUN);
    for id in EFFECTS {
        for name in ["task.json", "result.json"] {
            let mut theirs =
                std::fs::read_to_string(golden.join("tasks").join(id).join(name)).unwrap();
            let ours = std::fs::read_to_string(ours_dir.join("tasks").join(id).join(name)).unwrap();
            if id == EFFECTS[3] && name == "task.json" {
                // In `metadata` and in `inputs` (the breakpoint's args carry it too).
                let line = format!("\"requestedAt\": \"{reference_bp_time}\"");
                assert_eq!(theirs.matches(&line).count(), 2);
                theirs = theirs.replace(&line, &format!("\"requestedAt\": \"{logical_bp_time}\""));
            }
            assert_eq!(ours, theirs, "{id}/{name}");
        }
    }

    // The journal, file for file and byte for byte.
    let ours_files = journal_files(&ours_dir);
    assert_eq!(
        ours_files.iter().map(|(n, _)| n).collect::<Vec<_>>(),
        golden_files.iter().map(|(n, _)| n).collect::<Vec<_>>()
    );
    for ((name, _), (_, theirs)) in ours_files.iter().zip(&golden_files) {
        let ours_bytes = std::fs::read_to_string(ours_dir.join("journal").join(name)).unwrap();
        let theirs_bytes = std::fs::read_to_string(golden.join("journal").join(name)).unwrap();
        if name.starts_with("000005.") {
            assert_eq!(theirs["recordedAt"], reference_second_time);
            let ours_ev: Value = serde_json::from_str(&ours_bytes).unwrap();
            assert_eq!(ours_ev["recordedAt"], batch_time);
            let same = |ev: &Value| {
                let mut ev = ev.clone();
                let m = ev.as_object_mut().unwrap();
                m.remove("recordedAt");
                m.remove("checksum");
                ev
            };
            assert_eq!(same(&ours_ev), same(theirs), "{name}");
        } else {
            assert_eq!(ours_bytes, theirs_bytes, "{name}");
        }
    }

    // state/state.json against the spec's format (§2.8), field order included.
    let (head, index) = j.index(RUN).await.unwrap();
    let saved_at = "2025-01-01T00:00:25.000Z";
    let ours_state =
        babysitter_journal::state_cache::build(&index, &head, saved_at, Some("post_completion"));
    let mut effects = serde_json::Map::new();
    for ev in golden_events
        .iter()
        .filter(|e| e["type"] == "EFFECT_REQUESTED")
    {
        let d = &ev["data"];
        let resolved = golden_events
            .iter()
            .find(|r| r["type"] == "EFFECT_RESOLVED" && r["data"]["effectId"] == d["effectId"])
            .unwrap();
        // Difference 1 again: the state cache records when the journal says it was requested.
        let requested_at = if d["effectId"] == EFFECTS[2] {
            json!(batch_time)
        } else {
            ev["recordedAt"].clone()
        };
        effects.insert(
            d["invocationKey"].as_str().unwrap().to_owned(),
            json!({"effectId": d["effectId"], "invocationKey": d["invocationKey"], "status": "resolved_ok",
                   "kind": d["kind"], "label": d["label"], "taskId": d["taskId"], "stepId": d["stepId"],
                   "requestedAt": requested_at, "resolvedAt": resolved["recordedAt"]}),
        );
    }
    let last = &golden_files.last().unwrap().0;
    let expected_state = json!({
        "schemaVersion": "2026.01.state-cache", "savedAt": saved_at, "sdkVersion": "6.0.0",
        "journalHead": {"seq": 10, "ulid": &last[7..33]}, "stateVersion": 10,
        "effectsByInvocation": effects, "pendingEffectsByKind": {}, "rebuildReason": "post_completion",
    });
    assert_eq!(
        babysitter_journal::node_json::to_file_string(&ours_state),
        babysitter_journal::node_json::to_file_string(&expected_state)
    );
}

/// A run's journal files in order: (file name, parsed event).
fn journal_files(run_dir: &Path) -> Vec<(String, Value)> {
    let mut names: Vec<String> = std::fs::read_dir(run_dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let ev =
                serde_json::from_slice(&std::fs::read(run_dir.join("journal").join(&n)).unwrap())
                    .unwrap();
            (n, ev)
        })
        .collect()
}
