//! Black-box tests of the run maintenance commands (spec §2.10, §5.3.2, §5.3.6):
//! `run:repair-journal`, `run:recover-process-error` and `run:assign-process` — their JSON
//! shapes, what they do to the run on disk, the reference's output where it can be run, and bad
//! input (nothing changes, exit 1, a message naming the problem), including a run held by
//! another writer.

mod compat_support;

use std::path::Path;

use compat_support::{Sandbox, keys, read_json, reference_cli, snapshot};
use serde_json::{Value, json};

/// Journal file names in order.
fn journal_files(run_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(run_dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Damages a waiting run the way two concurrent writers do: its last `EFFECT_REQUESTED` is
/// written again under the next sequence number, and a torn file follows.
fn damage(run_dir: &Path) -> usize {
    let names = journal_files(run_dir);
    let requested = names
        .iter()
        .rev()
        .find(|n| read_json(&run_dir.join("journal").join(n))["type"] == "EFFECT_REQUESTED")
        .unwrap()
        .clone();
    let n = names.len();
    let j = run_dir.join("journal");
    std::fs::copy(
        j.join(&requested),
        j.join(format!("{:06}.7ZZZZZZZZZZZZZZZZZZZZZZZZY.json", n + 1)),
    )
    .unwrap();
    std::fs::write(
        j.join(format!("{:06}.7ZZZZZZZZZZZZZZZZZZZZZZZZZ.json", n + 2)),
        "{\"type\": \"EFFECT_RES",
    )
    .unwrap();
    n
}

/// (type, data) of every event, in order.
fn events(run_dir: &Path) -> Vec<(Value, Value)> {
    journal_files(run_dir)
        .iter()
        .map(|n| {
            let v = read_json(&run_dir.join("journal").join(n));
            (v["type"].clone(), v["data"].clone())
        })
        .collect()
}

#[test]
fn compat_repair_journal_drops_duplicates_and_keeps_a_backup() {
    let s = Sandbox::with_demo();
    let id = s.create("rep-1", "processes/demo.mjs");
    s.iterate(&id);
    let dir = s.run_dir(&id);
    let clean = events(&dir);
    let n = damage(&dir);
    // The damaged journal does not load.
    s.cmd(&["run:status", &id, "--json"]).fails();

    let before = snapshot(&dir);
    let dry = s
        .cmd(&["run:repair-journal", &id, "--dry-run", "--json"])
        .ok()
        .json();
    assert_eq!(keys(&dry), ["dryRun", "runDir", "journal"]);
    assert_eq!(
        keys(&dry["journal"]),
        [
            "originalFiles",
            "keptEvents",
            "droppedCorrupt",
            "droppedRequested",
            "droppedResolved"
        ]
    );
    assert_eq!(
        dry["journal"],
        json!({"originalFiles": n + 2, "keptEvents": n, "droppedCorrupt": 1, "droppedRequested": 1, "droppedResolved": 0})
    );
    assert_eq!(dry["runDir"], dir.display().to_string());
    let text = s.cmd(&["run:repair-journal", &id, "--dry-run"]).ok();
    assert_eq!(
        text.stdout,
        format!(
            "[run:repair-journal] dry-run originalFiles={} keptEvents={n} droppedCorrupt=1 droppedRequested=1 droppedResolved=0\n",
            n + 2
        )
    );
    assert_eq!(snapshot(&dir), before, "a dry run changes nothing");

    let original = snapshot(&dir.join("journal"));
    // Journal snapshots name the old sequence numbers: the repair drops them.
    std::fs::create_dir_all(dir.join("state/snapshots")).unwrap();
    std::fs::write(dir.join("state/snapshots/000000000064.json"), "{}").unwrap();
    let out = s.cmd(&["run:repair-journal", &id, "--json"]).ok();
    assert!(!dir.join("state/snapshots").try_exists().unwrap());
    assert!(
        out.stderr.contains("dropping unreadable journal file"),
        "{}",
        out.stderr
    );
    let v = out.json();
    assert_eq!(keys(&v), ["runDir", "journal", "backupDir", "repaired"]);
    assert_eq!(v["journal"], dry["journal"]);
    assert_eq!(v["repaired"], true);
    let backup = Path::new(v["backupDir"].as_str().unwrap());
    assert_eq!(backup.parent().unwrap(), dir);
    assert!(
        backup
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("journal.bak.")
    );
    assert_eq!(snapshot(backup), original, "the original journal is kept");
    // The rewritten journal: the clean events, renumbered, fresh checksums, no sdkVersion.
    assert_eq!(events(&dir), clean);
    for (i, name) in journal_files(&dir).iter().enumerate() {
        assert!(name.starts_with(&format!("{:06}.", i + 1)));
        let bytes = std::fs::read(dir.join("journal").join(name)).unwrap();
        babysitter_journal::StoredEvent::from_file(&id, name, &bytes)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(keys(&v), ["type", "recordedAt", "data", "checksum"]);
    }
    assert!(
        !dir.read_dir().unwrap().any(|e| e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .contains("repaired")),
        "no staging directory is left behind"
    );
    // The run loads and continues.
    let status = s.cmd(&["run:status", &id, "--json"]).ok().json();
    assert_eq!(status["state"], "waiting");
    assert_eq!(s.iterate(&id)["status"], "waiting");
}

#[test]
fn compat_repair_journal_matches_the_reference() {
    let Some(reference) = reference_cli() else {
        return; // skipped: reference_cli() recorded why
    };
    let s = Sandbox::with_demo();
    let id = s.create("rep-ref", "processes/demo.mjs");
    s.iterate(&id);
    damage(&s.run_dir(&id));
    compat_support::copy_dir(&s.run_dir(&id), &s.run_dir("rep-ref-2"));
    let ours = s.cmd(&["run:repair-journal", &id, "--json"]).ok().json();
    let theirs = s
        .cmd_ref(
            &reference,
            &["run:repair-journal", ".a5c/runs/rep-ref-2", "--json"],
        )
        .ok()
        .json();
    assert_eq!(keys(&ours), keys(&theirs));
    assert_eq!(ours["journal"], theirs["journal"]);
    assert_eq!(events(&s.run_dir(&id)), events(&s.run_dir("rep-ref-2")));
}

#[test]
fn compat_repair_journal_bad_input_and_lock() {
    let s = Sandbox::with_demo();
    let out = s.cmd(&["run:repair-journal", "nope", "--json"]).fails();
    assert!(
        out.stderr
            .contains("[run:repair-journal] unable to read run metadata at"),
        "{}",
        out.stderr
    );
    let out = s.cmd(&["run:repair-journal"]).fails();
    assert!(out.stderr.starts_with("Usage:"));

    // A run without a journal directory: refused, and none is created.
    let id = s.create("rep-nojournal", "processes/demo.mjs");
    let dir = s.run_dir(&id);
    std::fs::rename(dir.join("journal"), s.tmp.path().join("moved")).unwrap();
    let before = snapshot(&dir);
    for cmd in ["run:repair-journal", "run:recover-process-error"] {
        let out = s.cmd(&[cmd, &id, "--json"]).fails();
        assert!(
            out.stderr.contains("journal") && out.stderr.starts_with(&format!("[{cmd}] ")),
            "{}",
            out.stderr
        );
        assert_eq!(snapshot(&dir), before, "{cmd}");
        assert!(!dir.join("journal").try_exists().unwrap(), "{cmd}");
    }

    let id = s.create("rep-lock", "processes/demo.mjs");
    s.iterate(&id);
    let dir = s.run_dir(&id);
    damage(&dir);
    // Another writer (the reference, pid 1 is alive) holds run.lock: wait, then fail clearly.
    let lock = dir.join("run.lock");
    std::fs::write(&lock, "{\"pid\": 1, \"owner\": \"test\"}\n").unwrap();
    let before = snapshot(&dir);
    let out = s
        .cmd_env(
            &["run:repair-journal", &id, "--json"],
            &[("BABYSITTER_RUN_LOCK_TIMEOUT_MS", "200")],
        )
        .fails();
    assert!(
        out.stderr
            .contains("[run:repair-journal] run.lock already held by pid 1 (test)"),
        "{}",
        out.stderr
    );
    let out = s
        .cmd_env(
            &["run:recover-process-error", &id, "--json"],
            &[("BABYSITTER_RUN_LOCK_TIMEOUT_MS", "200")],
        )
        .fails();
    assert!(
        out.stderr
            .contains("[run:recover-process-error] run.lock already held by pid 1 (test)"),
        "{}",
        out.stderr
    );
    assert_eq!(snapshot(&dir), before, "nothing changes while locked");
    // The holder lets go while the repair waits: it goes ahead.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(std::time::Duration::from_millis(300));
        std::fs::remove_file(&lock).unwrap();
    });
    let out = s
        .cmd_env(
            &["run:repair-journal", &id, "--json"],
            &[("BABYSITTER_RUN_LOCK_TIMEOUT_MS", "10000")],
        )
        .ok();
    releaser.join().unwrap();
    assert!(out.stderr.contains("run lock contention"), "{}", out.stderr);
    assert_eq!(out.json()["repaired"], true);
    assert!(
        !dir.join("run.lock").try_exists().unwrap(),
        "its own lock is gone"
    );
}

const FRAGILE: &str = "import { defineTask } from '@a5c-ai/babysitter-sdk';
export const ask = defineTask('fragile.ask', (args) => ({ kind: 'agent', title: 'ask', agent: { name: 'x', prompt: 'p' } }));
export async function process(inputs, ctx) {
  const r = await ctx.task(ask, {});
  if (!r.answer || !r.answer.fixed) throw new Error('answer not fixed');
  return { ok: true };
}
";

#[test]
fn compat_recover_process_error_patches_and_rewrites() {
    let s = Sandbox::with_demo();
    s.write("processes/fragile.mjs", FRAGILE);
    let id = s.create("rec-1", "processes/fragile.mjs");
    let it = s.iterate(&id);
    let effect = it["nextActions"][0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();
    s.post_inline(&id, &effect, r#"{"answer":{"fixed":false}}"#)
        .ok();
    assert_eq!(s.iterate(&id)["status"], "failed");
    let dir = s.run_dir(&id);
    assert_eq!(
        events(&dir).last().unwrap().0,
        json!("PROCESS_RUNTIME_ERROR")
    );
    let before = snapshot(&dir);
    let recover = |patch: &str, extra: &[&str]| {
        let mut argv = vec![
            "run:recover-process-error",
            id.as_str(),
            "--patch-effect",
            patch,
        ];
        argv.extend(extra);
        s.cmd(&argv)
    };

    // Bad input: exit 1, a message naming the problem, the run untouched.
    let bad: &[(&str, &str)] = &[
        (
            "nocolon",
            "--patch-effect must use <effectId>:<jsonPath>=<json>",
        ),
        ("E:answer.fixed", "--patch-effect must use"),
        ("E:a/b=1", "path must contain dot-separated object keys"),
        ("E:a b=1", "path must contain dot-separated object keys"),
        ("E:answer=nope", "value must be valid JSON"),
        ("..:answer=1", "effect id"),
        ("NOEFFECT:answer=1", "ENOENT: no such file or directory"),
        (
            "E:status.x=1",
            "cannot patch through non-object path segment 'status'",
        ),
    ];
    for (patch, message) in bad {
        let patch = patch.replace("E:", &format!("{effect}:"));
        let out = recover(&patch, &["--json"]).fails();
        assert!(
            out.stderr.starts_with("[run:recover-process-error] ") && out.stderr.contains(message),
            "{patch}: {}",
            out.stderr
        );
        assert_eq!(snapshot(&dir), before, "{patch} changed the run");
    }
    let patch = format!("{effect}:answer.fixed=true");
    let dry = recover(&patch, &["--dry-run", "--json"]).ok().json();
    assert_eq!(
        keys(&dry),
        [
            "runDir",
            "dryRun",
            "recovered",
            "processError",
            "patchedEffect"
        ]
    );
    assert_eq!(dry["dryRun"], true);
    assert_eq!(dry["recovered"], false);
    assert_eq!(keys(&dry["processError"]), ["type", "seq", "data"]);
    assert_eq!(dry["processError"]["type"], "PROCESS_RUNTIME_ERROR");
    assert_eq!(
        dry["patchedEffect"],
        json!({"effectId": effect, "path": "answer.fixed"})
    );
    assert_eq!(snapshot(&dir), before, "a dry run changes nothing");

    let v = recover(&patch, &["--json"]).ok().json();
    assert_eq!(
        keys(&v),
        [
            "runDir",
            "dryRun",
            "recovered",
            "processError",
            "patchedEffect",
            "backupDir",
            "metadata"
        ]
    );
    assert_eq!(v["recovered"], true);
    assert_eq!(
        v["metadata"]["stateRebuildReason"],
        "process_error_recovery"
    );
    let backup = v["backupDir"].as_str().unwrap();
    assert!(backup.contains("journal.process-error.bak."));
    assert_eq!(
        snapshot(Path::new(backup)).len(),
        before
            .iter()
            .filter(|(p, _)| p.starts_with("journal/"))
            .count()
    );
    let result = read_json(&dir.join("tasks").join(&effect).join("result.json"));
    assert_eq!(result["value"]["answer"]["fixed"], true);
    assert_eq!(
        result["result"], result["value"],
        "both stored copies patched"
    );
    assert!(
        !events(&dir)
            .iter()
            .any(|(t, _)| t == "PROCESS_RUNTIME_ERROR")
    );
    assert_eq!(s.iterate(&id)["status"], "completed");

    // Nothing left to recover.
    let out = s.cmd(&["run:recover-process-error", &id]).fails();
    assert!(
        out.stderr.contains("no PROCESS_RUNTIME_ERROR event found"),
        "{}",
        out.stderr
    );
}

#[test]
fn compat_assign_process_to_a_bare_run() {
    let s = Sandbox::with_demo();
    s.write("processes/fragile.mjs", FRAGILE);
    let out = s
        .cmd(&["run:create", "--run-id", "bare-1", "--json"])
        .ok()
        .json();
    assert_eq!(out["entry"], "bare-run");
    let dir = s.run_dir("bare-1");
    let entry = s.project.join("processes/fragile.mjs");
    let before = snapshot(&dir);
    let assign = |run: &str, extra: &[&str]| {
        let mut argv = vec![
            "run:assign-process",
            run,
            "--entry",
            "processes/fragile.mjs#process",
        ];
        argv.extend(extra);
        s.cmd(&argv)
    };

    // Bad input first: nothing changes.
    let out = s.cmd(&["run:assign-process", "bare-1"]).fails();
    assert!(
        out.stderr
            .starts_with("--entry is required for run:assign-process")
    );
    let out = s
        .cmd(&[
            "run:assign-process",
            "bare-1",
            "--entry",
            "processes/missing.mjs#process",
        ])
        .fails();
    assert!(
        out.stderr.contains("Process entry file not found"),
        "{}",
        out.stderr
    );
    let out = assign("nope", &["--json"]).fails();
    let err: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(keys(&err), ["error", "message"]);
    assert_eq!(err["error"], "RUN_NOT_FOUND");
    assert_eq!(snapshot(&dir), before);

    let dry = assign(
        "bare-1",
        &["--process-id", "fragile", "--dry-run", "--json"],
    )
    .ok()
    .json();
    assert_eq!(
        keys(&dry),
        [
            "dryRun",
            "runDir",
            "runId",
            "entry",
            "processId",
            "previousEntrypoint",
            "force"
        ]
    );
    assert_eq!(dry["previousEntrypoint"], json!({"importPath": "bare-run"}));
    assert_eq!(snapshot(&dir), before, "a dry run changes nothing");

    let v = assign(
        "bare-1",
        &[
            "--process-id",
            "fragile",
            "--process-revision",
            "r7",
            "--json",
        ],
    )
    .ok()
    .json();
    assert_eq!(
        keys(&v),
        [
            "runId",
            "runDir",
            "entry",
            "processId",
            "previousEntrypoint",
            "assigned"
        ]
    );
    assert_eq!(v["entry"], format!("{}#process", entry.display()));
    assert_eq!(v["assigned"], true);
    let run_json = read_json(&dir.join("run.json"));
    assert_eq!(
        run_json["entrypoint"],
        json!({"importPath": entry.display().to_string(), "exportName": "process"})
    );
    assert_eq!(run_json["processPath"], entry.display().to_string());
    assert_eq!(run_json["processId"], "fragile");
    assert_eq!(run_json["processRevision"], "r7");
    assert_eq!(run_json["processCodeHash"].as_str().unwrap().len(), 64);
    let (ty, data) = events(&dir).pop().unwrap();
    assert_eq!(ty, "PROCESS_ASSIGNED");
    assert_eq!(
        data["previousEntrypoint"],
        json!({"importPath": "bare-run"})
    );
    assert_eq!(data["force"], false);
    assert_eq!(s.iterate("bare-1")["status"], "waiting");

    // A second assignment needs --force.
    let before = snapshot(&dir);
    let out = assign("bare-1", &["--json"]).fails();
    let err: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(keys(&err), ["error", "message", "currentEntrypoint"]);
    assert_eq!(err["error"], "PROCESS_ALREADY_ASSIGNED");
    assert_eq!(err["currentEntrypoint"], run_json["entrypoint"]);
    assert_eq!(snapshot(&dir), before);
    let v = s
        .cmd(&[
            "run:assign-process",
            "bare-1",
            "--entry",
            "processes/fragile.mjs",
            "--force",
        ])
        .ok();
    assert!(v.stdout.starts_with("[run:assign-process] runId=bare-1 "));
    assert_eq!(events(&dir).pop().unwrap().1["force"], true);
}
