//! A harness that runs a process from source through the engine to the end, answering every
//! effect it asks for with a responder, and collects what was journaled.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use babysitter_engine::commit::Commit;
use babysitter_engine::{Engine, EngineOptions, Iteration, IterationStatus, JsPlacement};
use babysitter_journal::fs::FsStore;
use babysitter_journal::store::RunFiles;
use babysitter_journal::{EventType, Journal, JournalOptions, NewEvent};
use serde_json::{Value, json};

pub const RUN: &str = "run-1";
pub const T0: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

/// How the test answers one effect.
#[derive(Debug, Clone)]
pub enum Answer {
    Ok(Value),
    Err(Value),
    Cancel(&'static str),
    /// Leave it pending (e.g. a sleep, resolved when the clock passes its target).
    Leave,
}

pub struct Harness {
    pub dir: tempfile::TempDir,
    pub engine: Engine,
    pub clock: Arc<AtomicI64>,
}

pub fn ulid_n(n: u64) -> String {
    ulid::Ulid::from_parts(T0 as u64, u128::from(n)).to_string()
}

impl Harness {
    pub async fn new(files: &[(&str, &str)], inputs: Option<Value>, warm: bool) -> Harness {
        Self::with_options(files, inputs, warm, |_| {}).await
    }

    pub async fn with_options(
        files: &[(&str, &str)],
        inputs: Option<Value>,
        warm: bool,
        tune: impl FnOnce(&mut EngineOptions),
    ) -> Harness {
        let dir = tempfile::tempdir().unwrap();
        for (name, src) in files {
            let p = dir.path().join("processes").join(name);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, src).unwrap();
        }
        let journal = Journal::new(
            Arc::new(FsStore::new(dir.path().join("runs"))),
            JournalOptions::default(),
        );
        let mut opts = EngineOptions::new(dir.path().join("runs"));
        opts.warm = warm;
        // Continuations inline with a slice no loaded test machine outruns: tests that check a
        // session really continued must not see one cut off (tests/inline.rs covers the slice).
        opts.js_placement = JsPlacement::InlineWarm {
            slice: std::time::Duration::from_secs(10),
        };
        let clock = Arc::new(AtomicI64::new(T0));
        let c = clock.clone();
        opts.clock = Arc::new(move || c.load(Ordering::SeqCst));
        let counter = Arc::new(AtomicU64::new(1));
        opts.ids = Some(Arc::new(move || {
            ulid_n(counter.fetch_add(1, Ordering::SeqCst))
        }));
        tune(&mut opts);
        let engine = Engine::new(journal, opts).unwrap();
        let entry = files[0].0;
        let run_json = json!({
            "runId": RUN, "request": "test/p", "processId": "test/p",
            "entrypoint": {"importPath": format!("../../processes/{entry}"), "exportName": "process"},
            "processPath": format!("../../processes/{entry}"),
            "layoutVersion": "2026.01-storage-preview", "createdAt": "2026-01-01T00:00:00.000Z",
            "completionProof": "0123456789abcdef0123456789abcdef", "sdkVersion": "6.0.0",
        });
        let j = engine.journal();
        j.create_run(
            RUN,
            RunFiles {
                run_json,
                inputs_json: inputs,
            },
        )
        .await
        .unwrap();
        let mut created = NewEvent::new(
            EventType::RunCreated,
            json!({"runId": RUN, "processId": "test/p"}),
        );
        created.recorded_at = Some("2026-01-01T00:00:00.000Z".into());
        j.append(RUN, 1, vec![created]).await.unwrap();
        Harness { dir, engine, clock }
    }

    pub fn entry_path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join("processes").join(name)
    }

    /// Iterates until the run ends (or `max` iterations), answering every new action.
    pub async fn drive(&self, max: usize, answer: impl Fn(&Value) -> Answer) -> Vec<Iteration> {
        let mut out = Vec::new();
        for _ in 0..max {
            let it = self.engine.iterate(RUN).await.expect("iterate");
            // What the iteration hands a dispatcher is exactly what it stored.
            assert_eq!(it.requested_tasks.len(), it.requested.len());
            for (id, doc) in it.requested.iter().zip(&it.requested_tasks) {
                let stored = std::fs::read(self.run_dir().join("tasks").join(id).join("task.json"))
                    .expect("task.json stored");
                assert_eq!(stored, doc.as_ref(), "task.json of {id}");
            }
            out.push(it.clone());
            if it.status != IterationStatus::Waiting {
                break;
            }
            let mut answered = false;
            for a in &it.next_actions {
                let id = a["effectId"].as_str().unwrap().to_owned();
                match answer(a) {
                    Answer::Ok(v) => self.post(&id, Ok(v)).await,
                    Answer::Err(e) => self.post(&id, Err(e)).await,
                    Answer::Cancel(r) => {
                        self.engine.cancel_effect(RUN, &id, Some(r)).await.unwrap();
                    }
                    Answer::Leave => continue,
                }
                answered = true;
            }
            if !answered {
                // Only sleeps left: let their time pass.
                self.clock.fetch_add(3_600_000, Ordering::SeqCst);
            }
        }
        out
    }

    pub async fn post(&self, effect_id: &str, outcome: Result<Value, Value>) {
        self.clock.fetch_add(1000, Ordering::SeqCst);
        self.engine
            .commit_result(
                RUN,
                Commit {
                    effect_id: effect_id.to_owned(),
                    outcome,
                    stdout: None,
                    stderr: None,
                    started_at: None,
                    finished_at: None,
                    metadata: None,
                    stdout_ref: None,
                    stderr_ref: None,
                },
            )
            .await
            .unwrap();
    }

    /// The journal as (type, data) pairs.
    pub fn journal(&self) -> Vec<(String, Value)> {
        journal_of(&self.run_dir())
    }

    fn run_dir(&self) -> std::path::PathBuf {
        self.dir.path().join("runs").join(RUN)
    }

    pub fn task_json(&self, effect_id: &str) -> Value {
        serde_json::from_slice(
            &std::fs::read(
                self.run_dir()
                    .join("tasks")
                    .join(effect_id)
                    .join("task.json"),
            )
            .unwrap(),
        )
        .unwrap()
    }
}

pub fn journal_of(run_dir: &Path) -> Vec<(String, Value)> {
    let mut names: Vec<_> = std::fs::read_dir(run_dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| {
            let mut v: Value = serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
            // Journal ULIDs are the journal's own (random per harness): not compared.
            if let Some(h) = v["data"]
                .get_mut("journalHead")
                .and_then(Value::as_object_mut)
            {
                h.remove("ulid");
            }
            (v["type"].as_str().unwrap().to_owned(), v["data"].clone())
        })
        .collect()
}

/// Default answers: tasks echo their args' `n` (or the task id), breakpoints approve.
pub fn echo(a: &Value) -> Answer {
    match a["kind"].as_str() {
        Some("breakpoint") => Answer::Ok(json!({"approved": true})),
        Some("sleep") => Answer::Leave,
        _ => Answer::Ok(json!({"task": a["taskId"], "step": a["stepId"]})),
    }
}

/// Runs a process warm and cold with the same answers; asserts both journal the same and end
/// the same; returns the warm run's harness and iterations.
pub async fn both_modes(
    files: &[(&str, &str)],
    inputs: Option<Value>,
    answer: impl Fn(&Value) -> Answer + Clone,
) -> (Harness, Vec<Iteration>) {
    let warm = Harness::new(files, inputs.clone(), true).await;
    let w = warm.drive(50, answer.clone()).await;
    let cold = Harness::new(files, inputs, false).await;
    let c = cold.drive(50, answer).await;
    assert_eq!(
        warm.journal(),
        cold.journal(),
        "warm and cold runs journal the same"
    );
    let last = |v: &[Iteration]| {
        v.last()
            .map(|i| (i.status, i.output.clone(), i.error.clone()))
    };
    assert_eq!(last(&w), last(&c), "warm and cold runs end the same");
    assert!(
        w.iter().skip(1).any(|i| i.warm) || w.len() <= 1,
        "the warm harness really continued a session"
    );
    assert!(
        c.iter().all(|i| !i.warm),
        "the cold harness never continued a session"
    );
    (warm, w)
}
