//! The golden babysitter v6 run (`shared/fixtures/babysitter-v6`): replaying `demo.mjs` over its
//! journal requests nothing new and ends with the same output (check 2 of its README), and
//! driving a fresh run of `demo.mjs` with the same ids and posted results reproduces the
//! reference's effects — ids, task.json and result.json bytes, journal event data — and the
//! shape of every `run:iterate` answer in `iterations.json` (check 4, see the notes below).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use babysitter_journal::fs::FsStore;
use babysitter_journal::store::RunFiles;
use babysitter_journal::{Journal, JournalOptions};
use babysitter_orchestrator::engine::commit::Commit;
use babysitter_orchestrator::engine::session::ProcessState;
use babysitter_orchestrator::engine::{Engine, EngineOptions, IterationStatus};
use serde_json::{Value, json};

const RUN: &str = "01JGOLDENRUN0000000000000";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/fixtures/babysitter-v6")
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
    let journal = Journal::new(
        Arc::new(FsStore::new(root.join("runs"))),
        JournalOptions::default(),
    );
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
    opts.clock = Arc::new(move || clock_ms);
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

/// The golden effects in request order, and what the reference driver posted for each.
const EFFECTS: [&str; 4] = [
    "01JGFJJZZ8000000000000001B",
    "01JGFJK2X0000000000000001E",
    "01JGFJK4VG000000000000001G",
    "01JGFJK8RG000000000000001M",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driving_a_fresh_run_reproduces_the_reference_effects() {
    let golden = fixture().join("runs").join(RUN);
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&fixture().join("processes"), &dir.path().join("processes"));
    let e = engine(dir.path(), EFFECTS.to_vec(), 1_735_689_600_000);
    let j = e.journal();
    let run_json: Value =
        serde_json::from_slice(&std::fs::read(golden.join("run.json")).unwrap()).unwrap();
    let inputs: Value =
        serde_json::from_slice(&std::fs::read(golden.join("inputs.json")).unwrap()).unwrap();
    j.create_run(
        RUN,
        RunFiles {
            run_json: run_json.clone(),
            inputs_json: Some(inputs),
        },
    )
    .await
    .unwrap();
    let golden_events = j_events(&golden);
    // RUN_CREATED as the reference wrote it.
    let mut created = babysitter_journal::NewEvent::new(
        babysitter_journal::EventType::RunCreated,
        golden_events[0]["data"].clone(),
    );
    created.recorded_at = Some(golden_events[0]["recordedAt"].as_str().unwrap().to_owned());
    j.append(RUN, 1, vec![created]).await.unwrap();

    let expected = iterations();
    let mut answers = Vec::new();
    let mut posted = 0;
    loop {
        let it = e.iterate(RUN).await.expect("iterate");
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
            posted += 1;
        }
        assert!(answers.len() <= 10, "the run converges");
    }
    // iterations.json, field for field on what identifies the work (the clock-derived
    // `requestedAt` and metadata snapshots are the reference's own clock ticks).
    assert_eq!(answers.len(), expected.len());
    for (ours, theirs) in answers.iter().zip(&expected) {
        assert_eq!(ours.status.as_str(), theirs["status"]);
        let strip = |a: &Value| {
            let mut a = a.clone();
            a.as_object_mut().unwrap().remove("requestedAt");
            if a["kind"] == "breakpoint" {
                a["taskDef"]["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("requestedAt");
            }
            a
        };
        let ours_actions: Vec<Value> = ours.next_actions.iter().map(strip).collect();
        let theirs_actions: Vec<Value> = theirs["nextActions"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(strip)
            .collect();
        assert_eq!(ours_actions, theirs_actions);
        if theirs["status"] == "completed" {
            assert_eq!(ours.output.as_ref(), Some(&theirs["output"]));
        }
    }
    // task.json and result.json byte for byte (the breakpoint's task.json carries the
    // reference's clock in `requestedAt`).
    let ours_dir = dir.path().join("runs").join(RUN).join("tasks");
    for id in EFFECTS {
        for name in ["task.json", "result.json"] {
            let theirs = std::fs::read_to_string(golden.join("tasks").join(id).join(name)).unwrap();
            let ours = std::fs::read_to_string(ours_dir.join(id).join(name)).unwrap();
            if id == EFFECTS[3] && name == "task.json" {
                let norm = |s: &str| {
                    s.lines()
                        .filter(|l| !l.contains("requestedAt"))
                        .collect::<Vec<_>>()
                        .join("\n")
                };
                assert_eq!(norm(&ours), norm(&theirs), "{id}/{name}");
            } else {
                assert_eq!(ours, theirs, "{id}/{name}");
            }
        }
    }
    // Journal events: same types and data, in the same order.
    let ours_events = j_events(&dir.path().join("runs").join(RUN));
    let kinds = |ev: &[Value]| {
        ev.iter()
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(kinds(&ours_events), kinds(&golden_events));
    for (o, t) in ours_events.iter().zip(&golden_events) {
        assert_eq!(o["data"], t["data"], "{}", t["type"]);
    }
}

fn j_events(run_dir: &Path) -> Vec<Value> {
    let mut names: Vec<_> = std::fs::read_dir(run_dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap())
        .collect()
}
