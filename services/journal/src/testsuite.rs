//! The backend conformance suite: public async test functions every [`JournalStore`] must pass.
//!
//! Each function takes a factory that returns a fresh handle on the *same* backend (same
//! directory, bucket and prefix), so the suite can act as several independent writers — the way
//! separate processes or servers would. Run it against in-memory stores in unit tests, the
//! filesystem in both layouts, and SeaweedFS in `tests/`.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use serde_json::{Value, json};

use crate::error::JournalError;
use crate::event::EventType;
use crate::journal::{Journal, NewEvent};
use crate::store::{BlobRef, JournalStore, RunFile, RunFiles};

/// Makes a fresh store handle over the shared backend under test.
pub type Factory = Arc<dyn Fn() -> Arc<dyn JournalStore> + Send + Sync>;

fn journal(f: &Factory) -> Journal {
    Journal::new(
        f(),
        crate::JournalOptions {
            snapshot_every: 0,
            ..Default::default()
        },
    )
}

fn run_files_of(run_id: &str) -> RunFiles {
    RunFiles {
        run_json: json!({"runId": run_id, "request": "suite", "processId": "suite/p", "layoutVersion": "2026.01-storage-preview"}),
        inputs_json: Some(json!({"n": 1})),
    }
}

fn ev(kind: &str, data: Value) -> NewEvent {
    NewEvent::new(EventType::parse(kind), data)
}

/// An `EFFECT_REQUESTED` event for `effect` (a shell task), as the engine writes one.
pub fn requested(effect: &str) -> NewEvent {
    ev(
        "EFFECT_REQUESTED",
        json!({"effectId": effect, "invocationKey": format!("p:{effect}:t"), "invocationHash": "h", "stepId": effect,
               "taskId": "t", "kind": "shell", "label": "l", "taskDefRef": format!("tasks/{effect}/task.json")}),
    )
}

/// Unique run id per call, so suites can share one bucket.
pub fn run_id(name: &str) -> String {
    format!("{name}-{}", ulid::Ulid::generate())
}

pub async fn create_get_and_duplicate_create(f: Factory) {
    let j = journal(&f);
    let id = run_id("create");
    j.create_run(&id, run_files_of(&id)).await.expect("create");
    let (files, head) = j.get_run(&id).await.expect("get");
    assert_eq!(files, run_files_of(&id));
    assert_eq!(head.seq, 0);
    let again = j.create_run(&id, run_files_of(&id)).await;
    assert!(
        matches!(again, Err(JournalError::RunAlreadyExists { .. })),
        "{again:?}"
    );
    let missing = j.get_run("no-such-run").await;
    assert!(
        matches!(missing, Err(JournalError::RunNotFound { .. })),
        "{missing:?}"
    );
}

pub async fn append_read_roundtrip(f: Factory) {
    let j = journal(&f);
    let id = run_id("roundtrip");
    j.create_run(&id, run_files_of(&id)).await.unwrap();
    let first = j
        .append(&id, 1, vec![ev("RUN_CREATED", json!({"runId": id}))])
        .await
        .unwrap();
    assert_eq!(first[0].seq, 1);
    let batch: Vec<_> = (0..100).map(|i| requested(&format!("e{i:03}"))).collect();
    let committed = j.append(&id, 2, batch).await.unwrap();
    assert_eq!(
        committed.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (2..=101).collect::<Vec<_>>()
    );
    // A fresh handle (another process) reads the same, verified.
    let other = journal(&f);
    let all = other.read(&id, 0, 0).await.unwrap();
    assert_eq!(all.len(), 101);
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1);
        assert_eq!(e.checksum, e.body.checksum());
        if i > 0 {
            assert!(e.ulid > all[i - 1].ulid, "ULIDs strictly increase");
        }
    }
    assert_eq!(all[1..], committed[..]);
    let range = other.read(&id, 50, 60).await.unwrap();
    assert_eq!(
        range.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (50..=60).collect::<Vec<_>>()
    );
    assert_eq!(other.head(&id).await.unwrap().seq, 101);
}

pub async fn conflict_reports_head_and_keeps_journal(f: Factory) {
    let a = journal(&f);
    let b = journal(&f);
    let id = run_id("conflict");
    a.create_run(&id, run_files_of(&id)).await.unwrap();
    a.append(&id, 1, vec![ev("RUN_CREATED", json!({}))])
        .await
        .unwrap();
    b.append(
        &id,
        2,
        vec![ev("A", json!({"w": "b"})), ev("B", json!({"w": "b"}))],
    )
    .await
    .unwrap();
    let lost = a.append(&id, 2, vec![ev("A", json!({"w": "a"}))]).await;
    match lost {
        Err(JournalError::Conflict { expected, head, .. }) => {
            assert_eq!(expected, 2);
            assert_eq!(head.seq, 3);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    // The conflict dropped a's stale view: even a read that skips refreshing sees b's events.
    assert_eq!(a.inspect_now(&id, |h, _| h.seq).await.unwrap(), 3);
    // Retry from the reported head succeeds.
    a.append(&id, 4, vec![ev("A", json!({"w": "a"}))])
        .await
        .unwrap();
    let all = b.read(&id, 1, 0).await.unwrap();
    let writers: Vec<_> = all
        .iter()
        .skip(1)
        .map(|e| e.body.data["w"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(writers, ["b", "b", "a"]);
}

pub async fn unknown_types_and_fields_pass_through(f: Factory) {
    let j = journal(&f);
    let id = run_id("unknown");
    j.create_run(&id, run_files_of(&id)).await.unwrap();
    // (-0 is not used: like Node, the babysitter layout stores it as 0.)
    let data = json!({"z": 1, "a": {"10": 1, "2": [1.5, 0.25, 1e21]}, "é": "😀\u{2028}"});
    let mut e = ev("SOMETHING_NEW", data.clone());
    e.sdk_version = None;
    j.append(&id, 1, vec![e]).await.unwrap();
    let back = journal(&f).read(&id, 1, 1).await.unwrap();
    assert_eq!(back[0].body.kind, EventType::Other("SOMETHING_NEW".into()));
    assert_eq!(back[0].body.data, data);
    assert_eq!(back[0].body.sdk_version, None);
}

pub async fn refuses_bad_events_without_writing(f: Factory) {
    let j = journal(&f);
    let id = run_id("refuse");
    j.create_run(&id, run_files_of(&id)).await.unwrap();
    j.append(&id, 1, vec![requested("e1")]).await.unwrap();
    let cases: Vec<(NewEvent, &str)> = vec![
        (
            ev(
                "EFFECT_RESOLVED",
                json!({"effectId": "nope", "status": "ok"}),
            ),
            "unknown effectId",
        ),
        (requested("e1"), "duplicate effectId"),
        (
            ev(
                "EFFECT_RESOLVED",
                json!({"effectId": "e1", "status": "maybe"}),
            ),
            "unknown EFFECT_RESOLVED status",
        ),
        (ev("X", json!([1, 2])), "must be a JSON object"),
    ];
    for (bad, why) in cases {
        // A valid event first: the whole batch must be refused.
        let r = j.append(&id, 2, vec![ev("OK", json!({})), bad]).await;
        match r {
            Err(JournalError::InvalidEvent { index, reason, .. }) => {
                assert_eq!(index, 1);
                assert!(reason.contains(why), "{reason} should mention {why}");
            }
            other => panic!("expected InvalidEvent for {why}, got {other:?}"),
        }
    }
    let big = ev(
        "BIG",
        json!({"blob": "x".repeat(j.options().max_event_bytes)}),
    );
    assert!(matches!(
        j.append(&id, 2, vec![big]).await,
        Err(JournalError::EventTooLarge { index: 0, .. })
    ));
    for bad_id in ["..", "a/b", "../x", "", "a\\b"] {
        let r = j.append(bad_id, 1, vec![ev("X", json!({}))]).await;
        assert!(
            matches!(r, Err(JournalError::InvalidArgument { .. })),
            "{bad_id:?}: {r:?}"
        );
        assert!(matches!(
            j.create_run(bad_id, run_files_of(bad_id)).await,
            Err(JournalError::InvalidArgument { .. })
        ));
    }
    let fresh = journal(&f);
    assert_eq!(fresh.head(&id).await.unwrap().seq, 1, "nothing was written");
    fresh
        .append(
            &id,
            2,
            vec![ev(
                "EFFECT_RESOLVED",
                json!({"effectId": "e1", "status": "ok"}),
            )],
        )
        .await
        .unwrap();
    let (_, index) = fresh.index(&id).await.unwrap();
    assert_eq!(
        index.effects["e1"].status,
        crate::index::EffectStatus::ResolvedOk
    );
}

/// `writers` independent handles race `total` single-event appends on one run; each retries
/// from the head its conflict reports. Afterwards the journal holds 1..=total exactly once each.
pub async fn concurrent_writers(f: Factory, writers: usize, total: usize) {
    let id = run_id("race");
    journal(&f)
        .create_run(&id, run_files_of(&id))
        .await
        .unwrap();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for w in 0..writers {
        let j = journal(&f);
        let id = id.clone();
        let done = done.clone();
        tasks.push(tokio::spawn(async move {
            let mut next = 1u64;
            let mut mine = Vec::new();
            let mut conflicts = 0usize;
            loop {
                let n = done.load(std::sync::atomic::Ordering::SeqCst);
                if n >= total {
                    break;
                }
                let k = mine.len();
                match j
                    .append(&id, next, vec![ev("RACE", json!({"writer": w, "k": k}))])
                    .await
                {
                    Ok(c) => {
                        mine.push(c[0].seq);
                        next = c[0].seq + 1;
                        done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    }
                    Err(JournalError::Conflict { head, expected, .. }) => {
                        assert!(
                            head.seq >= expected,
                            "a conflict reports a head at or past the expected seq"
                        );
                        next = head.seq + 1;
                        conflicts += 1;
                    }
                    Err(e) => panic!("writer {w}: unexpected error {e}"),
                }
            }
            (mine, conflicts)
        }));
    }
    let mut claimed = Vec::new();
    for t in tasks {
        let (mine, _conflicts) = t.await.unwrap();
        claimed.extend(mine);
    }
    let all = journal(&f).read(&id, 0, 0).await.unwrap();
    let n = all.len();
    assert!(n >= total, "{n} < {total}");
    assert_eq!(
        all.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=n as u64).collect::<Vec<_>>(),
        "1..N, no gap"
    );
    claimed.sort_unstable();
    assert_eq!(
        claimed,
        (1..=n as u64).collect::<Vec<_>>(),
        "every committed seq was won by exactly one writer"
    );
    let distinct: HashSet<_> = all
        .iter()
        .map(|e| (e.body.data["writer"].clone(), e.body.data["k"].clone()))
        .collect();
    assert_eq!(distinct.len(), n, "no event stored twice");
}

pub async fn snapshot_then_tail(f: Factory) {
    let j = journal(&f);
    let id = run_id("snap");
    j.create_run(&id, run_files_of(&id)).await.unwrap();
    j.append(
        &id,
        1,
        (0..50).map(|i| requested(&format!("s{i}"))).collect(),
    )
    .await
    .unwrap();
    assert_eq!(j.snapshot(&id).await.unwrap(), 50);
    j.append(
        &id,
        51,
        vec![ev(
            "EFFECT_RESOLVED",
            json!({"effectId": "s3", "status": "ok", "resultRef": "tasks/s3/result.json"}),
        )],
    )
    .await
    .unwrap();
    let reopened = journal(&f);
    let state = reopened.state(&id).await.unwrap();
    assert_eq!(state.snapshot_seq, 50, "opened from the snapshot");
    assert_eq!(state.head.seq, 51);
    let (_, from_snapshot) = reopened.index(&id).await.unwrap();
    // The same index computed from the whole journal, without the snapshot.
    let mut full = crate::index::EffectIndex::default();
    for e in reopened.read(&id, 1, 0).await.unwrap() {
        full.apply(&e, &crate::Location::object(&id, "test"))
            .unwrap();
    }
    assert_eq!(from_snapshot, full);
    assert_eq!(from_snapshot.pending().count(), 49);
    // A read of a range before the snapshot still works.
    assert_eq!(reopened.read(&id, 10, 12).await.unwrap().len(), 3);
}

/// Automatic snapshots, written in place (a short-lived process) or in the background (a
/// service: the append does not wait; `flush` does), are found by the next opener.
pub async fn automatic_snapshots(f: Factory) {
    for background in [false, true] {
        let j = Journal::new(
            f(),
            crate::JournalOptions {
                snapshot_every: 10,
                background_snapshots: background,
                ..Default::default()
            },
        );
        let id = run_id(if background {
            "autosnap-bg"
        } else {
            "autosnap"
        });
        j.create_run(&id, run_files_of(&id)).await.unwrap();
        let mut next = 1;
        for n in [10u64, 10, 5] {
            j.append(
                &id,
                next,
                (next..next + n)
                    .map(|i| requested(&format!("a{i}")))
                    .collect(),
            )
            .await
            .unwrap();
            next += n;
        }
        j.flush().await;
        let reopened = journal(&f);
        let state = reopened.state(&id).await.unwrap();
        // 20 here; a remote store snapshots at the service's head when the request arrives,
        // which a late background write may find at 25.
        assert!(
            (20..=25).contains(&state.snapshot_seq),
            "opened from an automatic snapshot (background: {background}): {}",
            state.snapshot_seq
        );
        assert_eq!(state.head.seq, 25);
        let (_, index) = reopened.index(&id).await.unwrap();
        assert_eq!(index.pending().count(), 25);
    }
}

pub async fn state_cache_rebuilds(f: Factory) {
    let j = journal(&f);
    let id = run_id("state");
    j.create_run(&id, run_files_of(&id)).await.unwrap();
    j.append(&id, 1, vec![requested("a"), requested("b")])
        .await
        .unwrap();
    let s1 = j.state(&id).await.unwrap();
    assert_eq!(s1.rebuild_reason, Some("missing_cache"));
    let doc: Value = serde_json::from_slice(&s1.state_json).unwrap();
    assert_eq!(doc["stateVersion"], 2);
    assert_eq!(doc["pendingEffectsByKind"], json!({"shell": 2}));
    assert_eq!(
        j.state(&id).await.unwrap().rebuild_reason,
        None,
        "fresh cache is reused"
    );
    j.append(
        &id,
        3,
        vec![ev(
            "EFFECT_RESOLVED",
            json!({"effectId": "a", "status": "ok"}),
        )],
    )
    .await
    .unwrap();
    let s3 = j.state(&id).await.unwrap();
    assert_eq!(s3.rebuild_reason, Some("journal_mismatch"));
    let doc: Value = serde_json::from_slice(&s3.state_json).unwrap();
    assert_eq!(doc["pendingEffectsByKind"], json!({"shell": 1}));
    f().write_state_cache(&id, Bytes::from_static(b"{not json"))
        .await
        .unwrap();
    assert_eq!(
        j.state(&id).await.unwrap().rebuild_reason,
        Some("corrupt_cache")
    );
}

pub async fn blobs_roundtrip(f: Factory) {
    let j = journal(&f);
    let id = run_id("blob");
    j.create_run(&id, run_files_of(&id)).await.unwrap();
    let content = Bytes::from(vec![7u8; 3000]);
    let r = j.put_blob(&id, content.clone()).await.unwrap();
    assert_eq!(r, BlobRef::of(&content));
    assert_eq!(
        j.put_blob(&id, content.clone()).await.unwrap(),
        r,
        "idempotent"
    );
    assert_eq!(j.get_blob(&id, &r).await.unwrap(), content);
    let missing = BlobRef::of(b"never stored");
    assert!(matches!(
        j.get_blob(&id, &missing).await,
        Err(JournalError::BlobNotFound { .. })
    ));
    assert!(BlobRef::parse("sha256:../../etc/passwd").is_err());
}

pub async fn large_event_data_round_trips(f: Factory) {
    let j = journal(&f);
    let id = run_id("large");
    j.create_run(&id, run_files_of(&id)).await.unwrap();
    let data = json!({"payload": "y".repeat(2 * 1024 * 1024)});
    j.append(&id, 1, vec![ev("BIG_RESULT", data.clone())])
        .await
        .unwrap();
    let back = journal(&f).read(&id, 1, 1).await.unwrap();
    assert_eq!(back[0].body.data, data);
}

pub async fn list_runs_paged(f: Factory) {
    let j = journal(&f);
    let prefix = format!("list{}-", ulid::Ulid::generate());
    let mut ids: Vec<String> = (0..5).map(|i| format!("{prefix}{i}")).collect();
    for id in &ids {
        j.create_run(id, run_files_of(id)).await.unwrap();
    }
    ids.sort();
    let (p1, t1) = j.list_runs(&prefix, None, 2).await.unwrap();
    let (p2, t2) = j.list_runs(&prefix, t1.as_deref(), 2).await.unwrap();
    let (p3, t3) = j.list_runs(&prefix, t2.as_deref(), 2).await.unwrap();
    assert_eq!([p1, p2, p3].concat(), ids);
    assert_eq!(t3, None);
}

pub async fn watch_sees_every_event_in_order(f: Factory) {
    let j = journal(&f);
    let id = run_id("watch");
    j.create_run(&id, run_files_of(&id)).await.unwrap();
    j.append(&id, 1, vec![ev("A", json!({"i": 0}))])
        .await
        .unwrap();
    let mut stream = j.watch(&id, 1);
    // Another handle (another process) appends too: found by polling.
    let other = journal(&f);
    for i in 1..20u64 {
        let w = if i % 2 == 0 { &j } else { &other };
        w.append(&id, i + 1, vec![ev("A", json!({"i": i}))])
            .await
            .unwrap();
    }
    let mut seen = Vec::new();
    while seen.len() < 20 {
        let batch = tokio::time::timeout(std::time::Duration::from_secs(30), stream.next())
            .await
            .expect("watch delivered within 30 s")
            .expect("stream open")
            .expect("no error");
        seen.extend(batch.into_iter().map(|e| e.seq));
    }
    assert_eq!(seen, (1..=20).collect::<Vec<_>>());
}

pub async fn run_files(f: Factory) {
    let j = journal(&f);
    let id = run_id("files");
    j.create_run(&id, run_files_of(&id)).await.unwrap();
    let effect = "01JGFJJZZ8000000000000001B";
    let task = RunFile::task(effect, "task.json").unwrap();
    j.put_run_file(
        &id,
        &task,
        Bytes::from_static(br#"{"kind":"shell","2":1,"args":[]}"#),
    )
    .await
    .unwrap();
    let stored = journal(&f).get_run_file(&id, &task).await.unwrap();
    assert_eq!(
        &stored[..],
        b"{\n  \"2\": 1,\n  \"kind\": \"shell\",\n  \"args\": []\n}\n",
        "babysitter's JSON form"
    );
    let log = RunFile::parse(&format!("tasks/{effect}/stdout.log")).unwrap();
    j.put_run_file(&id, &log, Bytes::from_static(b"raw \x00 bytes"))
        .await
        .unwrap();
    assert_eq!(
        &j.get_run_file(&id, &log).await.unwrap()[..],
        b"raw \x00 bytes"
    );
    let output = RunFile::parse("state/output.json").unwrap();
    j.put_run_file(&id, &output, Bytes::from_static(b"{\"ok\":true}"))
        .await
        .unwrap();
    assert_eq!(
        &j.get_run_file(&id, &output).await.unwrap()[..],
        b"{\n  \"ok\": true\n}\n"
    );
    let bad_json = j
        .put_run_file(
            &id,
            &RunFile::task(effect, "result.json").unwrap(),
            Bytes::from_static(b"{oops"),
        )
        .await;
    assert!(
        matches!(&bad_json, Err(JournalError::InvalidArgument { reason, .. }) if reason.contains("result.json")),
        "{bad_json:?}"
    );
    for bad in [
        "tasks/../task.json",
        "tasks/a/b/c",
        "../run.json",
        "state/..",
        "tasks/x/..",
        "state/state.json",
        "journal/000001.json",
        "/etc/passwd",
        "tasks/a\\b/x",
    ] {
        let r = RunFile::parse(bad);
        assert!(
            matches!(r, Err(JournalError::InvalidArgument { .. })),
            "{bad}: {r:?}"
        );
    }
    let batch: Vec<(RunFile, Bytes)> = (0..3)
        .map(|i| {
            (
                RunFile::task(&format!("E{i}"), "task.json").unwrap(),
                Bytes::from(format!("{{\"i\":{i}}}")),
            )
        })
        .collect();
    j.put_run_files(&id, batch).await.unwrap();
    for i in 0..3 {
        let got = journal(&f)
            .get_run_file(&id, &RunFile::task(&format!("E{i}"), "task.json").unwrap())
            .await
            .unwrap();
        assert_eq!(
            &got[..],
            format!("{{\n  \"i\": {i}\n}}\n").as_bytes(),
            "batched files are written in babysitter's form"
        );
    }
    let missing = j
        .get_run_file(&id, &RunFile::task(effect, "result.json").unwrap())
        .await;
    assert!(
        matches!(missing, Err(JournalError::RunFileNotFound { .. })),
        "{missing:?}"
    );
    // Several at once: in order, each as a single read gives it, a missing one on its own.
    let mut wanted: Vec<RunFile> = (0..3)
        .rev()
        .map(|i| RunFile::task(&format!("E{i}"), "task.json").unwrap())
        .collect();
    wanted.insert(1, RunFile::task(effect, "result.json").unwrap());
    wanted.push(log.clone());
    let got = journal(&f).get_run_files(&id, &wanted).await.unwrap();
    assert_eq!(got.len(), wanted.len());
    for (file, read) in wanted.iter().zip(&got) {
        match (read, j.get_run_file(&id, file).await) {
            (Ok(a), Ok(b)) => assert_eq!(a, &b, "{file}"),
            (Err(JournalError::RunFileNotFound { path, .. }), Err(_)) => {
                assert_eq!(path, &file.path())
            }
            (a, b) => panic!("{file}: batch {a:?}, single {b:?}"),
        }
    }
    assert!(matches!(&got[1], Err(JournalError::RunFileNotFound { .. })));
    assert_eq!(&got[4].as_ref().unwrap()[..], b"raw \x00 bytes");
    let nobody = j
        .get_run_files(&run_id("nobody"), &wanted[..1])
        .await
        .map(|v| v.into_iter().map(|r| r.is_ok()).collect::<Vec<_>>());
    assert!(
        matches!(nobody, Err(JournalError::RunNotFound { .. }) | Ok(_)),
        "{nobody:?}"
    );
    if let Ok(each) = nobody {
        assert_eq!(each, vec![false], "an unknown run has no files");
    }
}

/// Control documents (the leadership lease): create-only, then compare-and-swap on the version;
/// of racing writers from separate handles exactly one wins; never listed as a run; and two
/// arbiters over the store grant the lease to one candidate only.
pub async fn control_documents(f: Factory) {
    use crate::leadership::{Acquired, Arbiter, Candidate, LeaseKeeper};
    let conflict =
        |r: crate::Result<String>| matches!(r, Err(JournalError::ControlConflict { .. }));
    let name = format!("suite-{}", ulid::Ulid::generate()).to_lowercase();
    let store = f();
    assert_eq!(store.read_control(&name).await.expect("read absent"), None);
    let v1 = store
        .write_control(&name, Bytes::from_static(b"{\"n\":1}"), None)
        .await
        .expect("create");
    assert!(conflict(
        f().write_control(&name, Bytes::from_static(b"{}"), None)
            .await
    ));
    let read = f()
        .read_control(&name)
        .await
        .expect("read")
        .expect("present");
    assert_eq!(
        (read.content.as_ref(), read.version.as_str()),
        (&b"{\"n\":1}"[..], v1.as_str())
    );
    assert!(conflict(
        store
            .write_control(&name, Bytes::from_static(b"{}"), Some("not-a-version"))
            .await
    ));
    let v2 = store
        .write_control(&name, Bytes::from_static(b"{\"n\":2}"), Some(&v1))
        .await
        .expect("swap");
    assert_ne!(v1, v2);
    assert!(conflict(
        store
            .write_control(&name, Bytes::from_static(b"{}"), Some(&v1))
            .await
    ));
    let racers = (0..8).map(|i| {
        let (s, name, v2) = (f(), name.clone(), v2.clone());
        async move {
            s.write_control(&name, Bytes::from(format!("{{\"racer\":{i}}}")), Some(&v2))
                .await
        }
    });
    let results = futures::future::join_all(racers).await;
    assert_eq!(
        results.iter().filter(|r| r.is_ok()).count(),
        1,
        "{results:?}"
    );
    assert!(results.into_iter().filter(|r| r.is_err()).all(conflict));
    assert!(
        !store
            .list_runs("", None, 10_000)
            .await
            .expect("list")
            .iter()
            .any(|r| r.contains("control") || r.contains(&name))
    );

    let group = format!("g{}", ulid::Ulid::generate()).to_lowercase();
    let candidate = |holder: &str| Candidate {
        group: group.clone(),
        holder: holder.into(),
        address: String::new(),
        ttl: std::time::Duration::from_secs(60),
    };
    let (x, y) = (Arbiter::new(f()), Arbiter::new(f()));
    let (ca, cb) = (candidate("a"), candidate("b"));
    let (a, b) = futures::join!(x.acquire(&ca), y.acquire(&cb));
    let granted = [&a, &b]
        .iter()
        .filter(|r| matches!(r, Ok(Acquired::Granted(_))))
        .count();
    assert_eq!(granted, 1, "{a:?} {b:?}");
}

/// Runs every backend-independent check.
pub async fn run_all(f: Factory) {
    control_documents(f.clone()).await;
    state_cache_rebuilds(f.clone()).await;
    run_all_but_state_cache(f).await;
}

/// Every check except [`state_cache_rebuilds`], for a store that keeps no state cache of its own:
/// a remote journal client, whose derived state lives in the service (and is rebuilt on this side
/// from the verified events).
pub async fn run_all_but_state_cache(f: Factory) {
    create_get_and_duplicate_create(f.clone()).await;
    append_read_roundtrip(f.clone()).await;
    conflict_reports_head_and_keeps_journal(f.clone()).await;
    unknown_types_and_fields_pass_through(f.clone()).await;
    refuses_bad_events_without_writing(f.clone()).await;
    snapshot_then_tail(f.clone()).await;
    automatic_snapshots(f.clone()).await;
    blobs_roundtrip(f.clone()).await;
    large_event_data_round_trips(f.clone()).await;
    list_runs_paged(f.clone()).await;
    watch_sees_every_event_in_order(f.clone()).await;
    run_files(f.clone()).await;
}
