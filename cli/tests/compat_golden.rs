//! The golden run written by the reference (babysitter SDK 6.0.0) inspected with our CLI:
//! `run:status`, `run:events`, `task:list`, `task:show` give the reference's shapes (spec §5.3.4,
//! §5.3.5, §5.4) with the fixture's values, change nothing on disk, and `run:iterate` replays
//! the finished run as completed with its completion proof.

mod compat_support;

use compat_support::*;
use serde_json::{Value, json};

fn golden() -> (Sandbox, String) {
    let s = Sandbox::new();
    copy_dir(
        &fixture().join("runs").join(GOLDEN_RUN),
        &s.run_dir(GOLDEN_RUN),
    );
    // `run.json` names `../../processes/demo.mjs`, relative to the run directory.
    copy_dir(
        &fixture().join("processes"),
        &s.project.join(".a5c").join("processes"),
    );
    (s, GOLDEN_RUN.to_owned())
}

/// The fixture's journal files: (file name, parsed content).
fn journal_files() -> Vec<(String, Value)> {
    let dir = fixture().join("runs").join(GOLDEN_RUN).join("journal");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let v = read_json(&dir.join(&n));
            (n, v)
        })
        .collect()
}

fn expected_event(name: &str, file: &Value) -> Value {
    let (seq, rest) = name.split_once('.').unwrap();
    let ulid = rest.strip_suffix(".json").unwrap();
    json!({
        "seq": seq.parse::<u64>().unwrap(),
        "ulid": ulid,
        "type": file["type"],
        "recordedAt": file["recordedAt"],
        "filename": name,
        "path": format!("journal/{name}"),
        "data": file["data"],
    })
}

#[test]
fn compat_golden_status_matches_the_reference_shape() {
    let (s, id) = golden();
    let before = snapshot(&s.run_dir(&id));
    let out = s.cmd(&["run:status", &id, "--json"]).ok();
    // Single-line JSON (F13), the reference's key order.
    assert_eq!(out.stdout.lines().count(), 1);
    let v = out.json();
    assert_eq!(
        keys(&v),
        [
            "state",
            "reason",
            "payload",
            "lastEvent",
            "pendingByKind",
            "pendingEffectsSummary",
            "needsMoreIterations",
            "metadata",
            "completionProof"
        ]
    );
    assert_eq!(v["state"], "completed");
    assert_eq!(v["reason"], Value::Null);
    assert_eq!(v["payload"], Value::Null);
    let files = journal_files();
    let (last_name, last) = files.last().unwrap();
    assert_eq!(v["lastEvent"], expected_event(last_name, last));
    assert_eq!(
        keys(&v["lastEvent"]),
        [
            "seq",
            "ulid",
            "type",
            "recordedAt",
            "filename",
            "path",
            "data"
        ]
    );
    assert_eq!(v["pendingByKind"], json!({}));
    assert_eq!(
        v["pendingEffectsSummary"],
        json!({"totalPending": 0, "countsByKind": {}, "autoRunnableCount": 0})
    );
    assert_eq!(v["needsMoreIterations"], false);
    // The fixture has no state cache: the reference warns and reports live pending counts only.
    assert_eq!(v["metadata"], json!({"pendingEffectsByKind": {}}));
    assert!(out.stderr.contains("state cache snapshot missing"));
    assert_eq!(v["completionProof"], "0123456789abcdef0123456789abcdef");

    let text = s.cmd(&["run:status", &id]).ok();
    assert_eq!(
        text.stdout.trim_end(),
        "[run:status] state=completed last=RUN_COMPLETED#000010 2025-01-01T00:00:24.000Z pending[total]=0 completionProof=0123456789abcdef0123456789abcdef"
    );
    assert_eq!(snapshot(&s.run_dir(&id)), before, "run:status is read-only");

    // With a rebuilt cache the metadata carries the cache's fields, as in the spec's sample.
    let rebuilt = s.cmd(&["run:rebuild-state", &id, "--json"]).ok().json();
    let head = json!({"seq": 10, "ulid": "01JGFJKBP8000000000000001Q"});
    assert_eq!(
        rebuilt,
        json!({"runDir": s.run_dir(&id).display().to_string(), "metadata": {
            "pendingEffectsByKind": {}, "stateVersion": 10, "journalHead": head,
            "stateRebuilt": true, "stateRebuildReason": "cli_manual"}})
    );
    let v = s.cmd(&["run:status", &id, "--json"]).ok().json();
    assert_eq!(
        v["metadata"],
        json!({"pendingEffectsByKind": {}, "stateVersion": 10, "journalHead": head,
               "stateRebuilt": true, "stateRebuildReason": "cli_manual"})
    );
    let cache = read_json(&s.run_dir(&id).join("state/state.json"));
    assert_eq!(cache["schemaVersion"], "2026.01.state-cache");
    assert_eq!(cache["effectsByInvocation"].as_object().unwrap().len(), 4);
}

#[test]
fn compat_golden_events_list_every_journal_file() {
    let (s, id) = golden();
    let before = snapshot(&s.run_dir(&id));
    let out = s.cmd(&["run:events", &id, "--json"]).ok();
    assert_eq!(out.stdout.lines().count(), 1);
    let v = out.json();
    assert_eq!(keys(&v), ["events", "metadata"]);
    assert_eq!(v["metadata"], Value::Null);
    let files = journal_files();
    let events = v["events"].as_array().unwrap();
    assert_eq!(events.len(), files.len());
    for (e, (name, file)) in events.iter().zip(&files) {
        assert_eq!(*e, expected_event(name, file));
    }

    // Filter (case-insensitive), reverse before limit, and both forms of a value flag (B22).
    let v = s
        .cmd(&[
            "run:events",
            &id,
            "--json",
            "--filter-type",
            "effect_resolved",
            "--reverse",
            "--limit=2",
        ])
        .ok()
        .json();
    let seqs: Vec<u64> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [9, 7]);

    let text = s
        .cmd(&["run:events", &id, "--limit", "3", "--reverse"])
        .ok();
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            "[run:events] total=10 matching=10 showing=3 limit=3 order=desc",
            "- #000010 RUN_COMPLETED 2025-01-01T00:00:24.000Z",
            "- #000009 EFFECT_RESOLVED 2025-01-01T00:00:21.000Z",
            "- #000008 EFFECT_REQUESTED 2025-01-01T00:00:19.000Z",
        ]
    );
    assert_eq!(snapshot(&s.run_dir(&id)), before, "run:events is read-only");
}

#[test]
fn compat_golden_task_list_and_show() {
    let (s, id) = golden();
    let before = snapshot(&s.run_dir(&id));
    let out = s.cmd(&["task:list", &id, "--json"]).ok();
    // Pretty JSON (F13).
    assert!(out.stdout.starts_with("{\n  \"tasks\": [\n"));
    let v = out.json();
    let tasks = v["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 4);

    // Each entry from the fixture's journal: request and resolution events.
    let files = journal_files();
    for t in tasks {
        assert_eq!(
            keys(t),
            [
                "effectId",
                "taskId",
                "stepId",
                "status",
                "kind",
                "label",
                "labels",
                "taskDefRef",
                "inputsRef",
                "resultRef",
                "stdoutRef",
                "stderrRef",
                "requestedAt",
                "resolvedAt"
            ]
        );
        let id = t["effectId"].as_str().unwrap();
        let req = files
            .iter()
            .find(|(_, f)| f["type"] == "EFFECT_REQUESTED" && f["data"]["effectId"] == id)
            .unwrap()
            .1
            .clone();
        let res = files
            .iter()
            .find(|(_, f)| f["type"] == "EFFECT_RESOLVED" && f["data"]["effectId"] == id)
            .unwrap()
            .1
            .clone();
        let d = &req["data"];
        assert_eq!(
            *t,
            json!({
                "effectId": id, "taskId": d["taskId"], "stepId": d["stepId"], "status": "resolved_ok",
                "kind": d["kind"], "label": d["label"], "labels": d["labels"], "taskDefRef": d["taskDefRef"],
                "inputsRef": null, "resultRef": res["data"]["resultRef"], "stdoutRef": res["data"]["stdoutRef"],
                "stderrRef": null, "requestedAt": req["recordedAt"], "resolvedAt": res["recordedAt"],
            })
        );
    }
    // Sorted by effect id.
    let ids: Vec<&str> = tasks
        .iter()
        .map(|t| t["effectId"].as_str().unwrap())
        .collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);

    let pending = s
        .cmd(&["task:list", &id, "--pending", "--json"])
        .ok()
        .json();
    assert_eq!(pending, json!({"tasks": []}));
    let shells = s
        .cmd(&["task:list", &id, "--kind", "SHELL", "--json"])
        .ok()
        .json();
    assert_eq!(shells["tasks"].as_array().unwrap().len(), 2);
    let text = s.cmd(&["task:list", &id]).ok();
    assert_eq!(
        text.stdout.lines().nth(4).unwrap(),
        "- 01JGFJK8RG000000000000001M [breakpoint resolved_ok] Ship gate (taskId=__sdk.breakpoint)"
    );
    assert_eq!(text.stdout.lines().next().unwrap(), "[task:list] total=4");

    // task:show: single line, payloads redacted unless secrets are allowed AND --json --verbose.
    let bp = "01JGFJK8RG000000000000001M";
    let out = s.cmd(&["task:show", &id, bp, "--json"]).ok();
    assert_eq!(out.stdout.lines().count(), 1);
    let v = out.json();
    assert_eq!(keys(&v), ["effect", "task", "result", "largeResult"]);
    assert_eq!(v["effect"], tasks[3]);
    assert_eq!(v["task"], Value::Null);
    assert_eq!(v["result"], Value::Null);
    assert_eq!(v["largeResult"], Value::Null);
    let v = s
        .cmd_env(
            &["task:show", &id, bp, "--json"],
            &[("BABYSITTER_ALLOW_SECRET_LOGS", "1")],
        )
        .ok()
        .json();
    assert_eq!(v["task"], Value::Null, "--verbose is required too");
    let v = s
        .cmd_env(
            &["task:show", &id, bp, "--json", "--verbose"],
            &[("BABYSITTER_ALLOW_SECRET_LOGS", "true")],
        )
        .ok()
        .json();
    let task_dir = fixture()
        .join("runs")
        .join(GOLDEN_RUN)
        .join("tasks")
        .join(bp);
    assert_eq!(v["task"], read_json(&task_dir.join("task.json")));
    assert_eq!(v["result"], read_json(&task_dir.join("result.json")));
    // Text form.
    let text = s.cmd(&["task:show", &id, bp]).ok();
    assert!(text.stdout.starts_with(
        "[task:show] 01JGFJK8RG000000000000001M [breakpoint resolved_ok] Ship gate (taskId=__sdk.breakpoint)\n  stepId=__sdk.breakpoint.ship-gate requestedAt=2025-01-01T00:00:19.000Z resolvedAt=2025-01-01T00:00:21.000Z\n"
    ));
    assert!(text.stdout.contains("  payloads: redacted"));
    let missing = s.cmd(&["task:show", &id, "NOPE", "--json"]).fails();
    assert!(
        missing
            .stderr
            .contains("[task:show] effect NOPE not found in")
    );
    assert_eq!(
        snapshot(&s.run_dir(&id)),
        before,
        "task commands are read-only"
    );
}

#[test]
fn compat_golden_iterate_replays_completion() {
    let (s, id) = golden();
    let v = s.iterate(&id);
    assert_eq!(v["status"], "completed");
    assert_eq!(v["reason"], "completed");
    assert_eq!(v["action"], "none");
    assert_eq!(v["completionProof"], "0123456789abcdef0123456789abcdef");
    assert_eq!(
        v["metadata"],
        json!({"runId": id, "processId": "golden/demo", "hookStatus": "no-hooks-configured"})
    );
    // A finished run is replayed, not re-run: nothing is appended.
    assert_eq!(s.journal_len(&id), 10);
    // Lookup by path (relative to the cwd) resolves the same run.
    let by_path = s
        .cmd(&["run:status", &format!(".a5c/runs/{id}"), "--json"])
        .ok()
        .json();
    assert_eq!(by_path["state"], "completed");
}
