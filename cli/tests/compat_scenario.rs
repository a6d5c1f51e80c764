//! Scenario scripts through the real binary (spec §7.3): create → iterate → task:list →
//! task:post → … → completed for the golden `demo.mjs` (every output compared field by field
//! with the reference's shapes and the golden fixture), a task error, a process throw, halts,
//! a cancellation and a normalised shell failure.

mod compat_support;

use compat_support::*;
use serde_json::{Value, json};

fn golden_run_dir() -> std::path::PathBuf {
    fixture().join("runs").join(GOLDEN_RUN)
}

fn iterations() -> Vec<Value> {
    serde_json::from_slice(&std::fs::read(fixture().join("runs/iterations.json")).unwrap()).unwrap()
}

/// An action without the fields that depend on effect ids and the clock.
fn stable(action: &Value) -> Value {
    let id = action["effectId"].as_str().unwrap();
    let text = serde_json::to_string(action).unwrap().replace(id, "<id>");
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let m = v.as_object_mut().unwrap();
    m.remove("requestedAt");
    if let Some(Value::Object(t)) = m.get_mut("taskDef") {
        // Breakpoint metadata carries the request time.
        if let Some(Value::Object(meta)) = t.get_mut("metadata") {
            meta.remove("requestedAt");
        }
    }
    v
}

fn compat_scenario_demo_runs_to_completion_like_the_reference_in(s: &Sandbox) {
    let id = s.create("demo-1", "processes/demo.mjs#process");
    let run_dir = s.run_dir(&id);

    // run.json: the 6.0.0 form of §1.3, field for field against the golden run. On an
    // orchestrator the process was uploaded with the run (it lives under the run's `process/`)
    // and the server's bookkeeping follows babysitter's keys; no client working directory.
    let run_json = read_json(&run_dir.join("run.json"));
    let golden_json = read_json(&golden_run_dir().join("run.json"));
    let babysitter_keys = [
        "runId",
        "request",
        "processId",
        "entrypoint",
        "processPath",
        "layoutVersion",
        "createdAt",
        "cwd",
        "prompt",
        "processCodeHash",
        "completionProof",
        "sdkVersion",
    ];
    let import = if s.is_remote() {
        let mut expected: Vec<&str> = babysitter_keys
            .iter()
            .copied()
            .filter(|k| *k != "cwd")
            .collect();
        expected.extend(["namespace", "labels", "processBundle", "driver"]);
        assert_eq!(keys(&run_json), expected);
        assert_eq!(run_json["driver"], "client");
        "process/processes/demo.mjs"
    } else {
        assert_eq!(keys(&run_json), babysitter_keys);
        assert_eq!(run_json["cwd"], s.project.display().to_string());
        "../../../processes/demo.mjs"
    };
    assert_eq!(run_json["runId"], id);
    for k in [
        "request",
        "processId",
        "layoutVersion",
        "prompt",
        "processCodeHash",
        "sdkVersion",
    ] {
        assert_eq!(run_json[k], golden_json[k], "run.json {k}");
    }
    assert_eq!(
        run_json["entrypoint"],
        json!({"importPath": import, "exportName": "process"})
    );
    assert_eq!(run_json["processPath"], import);
    let proof = run_json["completionProof"].as_str().unwrap().to_owned();
    assert!(
        proof.len() == 32
            && proof
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );
    let created = run_json["createdAt"].as_str().unwrap();
    assert!(created.len() == 24 && created.ends_with('Z'), "{created}");

    // Layout: inputs.json re-serialised, the fixed .gitignore, the parent package.json, and no
    // node_modules written next to the process (B17).
    assert_eq!(
        std::fs::read(run_dir.join("inputs.json")).unwrap(),
        std::fs::read(golden_run_dir().join("inputs.json")).unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(run_dir.join(".gitignore")).unwrap(),
        "state/\ntasks/*/artifacts/\nblobs/\norphaned/\n"
    );
    assert_eq!(
        std::fs::read_to_string(s.project.join(".a5c/package.json")).unwrap(),
        "{\n  \"type\": \"module\"\n}\n"
    );
    for d in ["journal", "tasks", "state", "blobs", "orphaned", "process"] {
        assert!(run_dir.join(d).is_dir(), "{d}/");
    }
    assert!(
        !s.project
            .join("processes/node_modules")
            .try_exists()
            .unwrap()
    );

    // RUN_CREATED: the golden event's data with this run's id and import path.
    let events = s.cmd(&["run:events", &id, "--json"]).ok().json();
    let created_ev = &events["events"][0];
    assert_eq!(created_ev["type"], "RUN_CREATED");
    let golden_created = read_json(
        &golden_run_dir()
            .join("journal")
            .join("000001.01JGFJJZ00000000000000001A.json"),
    );
    let mut expected = golden_created["data"].clone();
    expected["runId"] = json!(id);
    expected["entrypoint"]["importPath"] = json!(import);
    assert_eq!(created_ev["data"], expected);
    assert_eq!(keys(&created_ev["data"]), keys(&expected));
    let raw = std::fs::read_to_string(
        std::fs::read_dir(run_dir.join("journal"))
            .unwrap()
            .next()
            .unwrap()
            .unwrap()
            .path(),
    )
    .unwrap();
    assert!(raw.contains("\"sdkVersion\": \"6.0.0\",\n  \"checksum\": "));

    // Iteration 1: the agent task, as in iterations.json[0].
    let golden_its = iterations();
    let it = s.iterate(&id);
    assert_eq!(
        keys(&it),
        [
            "iteration",
            "iterationCount",
            "status",
            "action",
            "reason",
            "nextActions",
            "metadata"
        ]
    );
    assert_eq!(it["iteration"], 1);
    assert_eq!(it["iterationCount"], 0);
    assert_eq!(it["status"], "waiting");
    assert_eq!(it["action"], "none");
    assert_eq!(it["reason"], "agent-pending");
    assert_eq!(
        it["metadata"],
        json!({"runId": id, "processId": "golden/demo", "hookStatus": "no-hooks-configured"})
    );
    let actions = it["nextActions"].as_array().unwrap();
    assert_eq!(actions.len(), 1);
    assert_eq!(
        stable(&actions[0]),
        stable(&golden_its[0]["nextActions"][0])
    );
    let plan_id = actions[0]["effectId"].as_str().unwrap().to_owned();

    // task:list --pending agrees with nextActions; the agent result is posted from a file given
    // relative to the run directory (F14), with a stdout log.
    let pending = s.pending(&id);
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0]["effectId"], plan_id.as_str());
    assert_eq!(pending[0]["status"], "requested");
    assert_eq!(pending[0]["resultRef"], Value::Null);
    std::fs::write(
        run_dir.join(format!("tasks/{plan_id}/output.json")),
        r#"{"ok": true, "n": 0, "effect": "golden.plan"}"#,
    )
    .unwrap();
    s.write("plan-stdout.txt", "planned\n");
    let out = s
        .cmd(&[
            "task:post",
            &id,
            &plan_id,
            "--status",
            "ok",
            "--value",
            &format!("tasks/{plan_id}/output.json"),
            "--stdout-file",
            &s.project.join("plan-stdout.txt").display().to_string(),
            "--started-at",
            "2025-01-01T00:00:00.000Z",
            "--finished-at",
            "2025-01-01T00:00:01.000Z",
            "--json",
        ])
        .ok();
    assert_eq!(out.stdout.lines().count(), 1, "single-line JSON");
    let posted = out.json();
    let result_ref = format!("tasks/{plan_id}/result.json");
    let stdout_ref = format!("tasks/{plan_id}/stdout.log");
    assert_eq!(
        posted,
        json!({"status": "ok", "normalizedShellFailure": false,
               "committed": {"resultRef": result_ref, "stdoutRef": stdout_ref,
                             "startedAt": "2025-01-01T00:00:00.000Z", "finishedAt": "2025-01-01T00:00:01.000Z"},
               "stdoutRef": stdout_ref, "stderrRef": null, "resultRef": result_ref})
    );
    assert_eq!(
        keys(&posted),
        [
            "status",
            "normalizedShellFailure",
            "committed",
            "stdoutRef",
            "stderrRef",
            "resultRef"
        ]
    );
    // result.json equals the golden one for the same post, up to the effect id.
    let golden_plan = "01JGFJJZZ8000000000000001B";
    let ours = std::fs::read_to_string(run_dir.join(&result_ref)).unwrap();
    let golden =
        std::fs::read_to_string(golden_run_dir().join(format!("tasks/{golden_plan}/result.json")))
            .unwrap()
            .replace(golden_plan, &plan_id);
    assert_eq!(ours, golden);
    assert_eq!(
        std::fs::read_to_string(run_dir.join(&stdout_ref)).unwrap(),
        "planned\n"
    );

    // Posting twice is refused and changes nothing.
    let len = s.journal_len(&id);
    let again = s.post_inline(&id, &plan_id, "{}").fails();
    assert!(
        again.stderr.contains(&format!(
            "[task:post] effect {plan_id} is not requested (status=resolved_ok)"
        )),
        "{}",
        again.stderr
    );
    assert_eq!(s.journal_len(&id), len);

    // Iteration 2: two shell tasks in one parallel group (iterations.json[1]).
    let it = s.iterate(&id);
    assert_eq!(it["iteration"], 2);
    assert_eq!(it["iterationCount"], 1);
    assert_eq!(it["reason"], "shell-pending");
    let actions = it["nextActions"].as_array().unwrap();
    assert_eq!(actions.len(), 2);
    for (a, g) in actions
        .iter()
        .zip(golden_its[1]["nextActions"].as_array().unwrap())
    {
        assert_eq!(stable(a), stable(g));
    }
    assert_eq!(
        actions[0]["schedulerHints"]["parallelGroupId"],
        "b532fac65507198b"
    );
    let status = s.cmd(&["run:status", &id, "--json"]).ok().json();
    assert_eq!(status["state"], "waiting");
    assert_eq!(status["pendingByKind"], json!({"shell": 2}));
    assert_eq!(status["needsMoreIterations"], false);
    assert_eq!(status["completionProof"], Value::Null);
    for a in actions {
        s.post_inline(
            &id,
            a["effectId"].as_str().unwrap(),
            r#"{"effect":"golden.shell","n":1,"ok":true}"#,
        )
        .ok();
    }

    // Iteration 3: the breakpoint (iterations.json[2]); approve it.
    let it = s.iterate(&id);
    assert_eq!(it["reason"], "breakpoint-waiting");
    let bp = &it["nextActions"][0];
    assert_eq!(stable(bp), stable(&golden_its[2]["nextActions"][0]));
    let text = s
        .cmd(&[
            "task:post",
            &id,
            bp["effectId"].as_str().unwrap(),
            "--status",
            "ok",
            "--value-inline",
            r#"{"approved":true,"response":"ok"}"#,
        ])
        .ok();
    assert_eq!(
        text.stdout.trim_end(),
        format!(
            "[task:post] status=ok resultRef=tasks/{}/result.json",
            bp["effectId"].as_str().unwrap()
        )
    );
    let resolved = s
        .cmd(&[
            "run:events",
            &id,
            "--json",
            "--filter-type",
            "EFFECT_RESOLVED",
            "--reverse",
            "--limit",
            "1",
        ])
        .ok()
        .json();
    assert_eq!(resolved["events"][0]["data"]["breakpointId"], "ship-gate");

    // Iteration 4: the past-due sleep needs no effect; the run completes with the golden output.
    let it = s.iterate(&id);
    assert_eq!(
        it,
        json!({"iteration": 4, "iterationCount": 3, "status": "completed", "action": "none",
               "reason": "completed", "completionProof": proof,
               "metadata": {"runId": id, "processId": "golden/demo", "hookStatus": "no-hooks-configured"}})
    );
    assert_eq!(
        read_json(&run_dir.join("state/output.json")),
        golden_its.last().unwrap()["output"]
    );
    let text = s.cmd(&["run:iterate", &id]).ok();
    assert_eq!(
        text.stdout,
        format!(
            "[run:iterate] iteration=5 (4 completed) status=completed action=none reason=completed\n[run:iterate] completionProof={proof}\n"
        )
    );

    // B2: one RUN_ITERATION per iteration that ran the process; none after completion.
    let types = s.event_types(&id);
    assert_eq!(types.iter().filter(|t| *t == "RUN_ITERATION").count(), 4);
    assert_eq!(types.last().unwrap(), "RUN_COMPLETED");

    // run:status: completed, the proof revealed, metadata from the post-completion cache.
    let status = s.cmd(&["run:status", &id, "--json"]).ok().json();
    assert_eq!(status["state"], "completed");
    assert_eq!(status["completionProof"], proof.as_str());
    assert_eq!(status["lastEvent"]["type"], "RUN_COMPLETED");
    let n = types.len() as u64;
    assert_eq!(status["metadata"]["stateVersion"], n);
    assert_eq!(status["metadata"]["journalHead"]["seq"], n);
    assert_eq!(status["metadata"]["stateRebuildReason"], "post_completion");
    let all = s.cmd(&["task:list", &id, "--json"]).ok().json();
    assert!(
        all["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["status"] == "resolved_ok")
    );
}

fn compat_scenario_task_error_fails_the_run_in(s: &Sandbox) {
    let id = s.create("err-1", "processes/demo.mjs");
    let it = s.iterate(&id);
    let plan = it["nextActions"][0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();

    // F14: a relative --error path is read from the run directory, not the cwd.
    s.write("err.json", r#"{"name":"Error","message":"agent crashed"}"#);
    let len = s.journal_len(&id);
    let out = s
        .cmd(&[
            "task:post",
            &id,
            &plan,
            "--status",
            "error",
            "--error",
            "err.json",
            "--json",
        ])
        .fails();
    let err: Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!(err["name"], "Error");
    assert_eq!(err["category"], "INTERNAL");
    let expected_path = s.run_dir(&id).join("err.json");
    assert_eq!(
        err["message"],
        format!(
            "ENOENT: no such file or directory, open '{}'",
            expected_path.display()
        )
    );
    assert_eq!(s.journal_len(&id), len, "nothing committed");

    // Plain-text error file in the run dir: wrapped as {name, message} without "Error: ".
    std::fs::write(s.run_dir(&id).join("err.txt"), "Error: agent crashed\n").unwrap();
    let out = s
        .cmd(&[
            "task:post",
            &id,
            &plan,
            "--status",
            "error",
            "--error",
            "err.txt",
            "--json",
        ])
        .ok(); // B7: the commit succeeded, so exit 0
    let v = out.json();
    assert_eq!(v["status"], "error");
    assert_eq!(v["normalizedShellFailure"], false);
    let result = read_json(&s.run_dir(&id).join(format!("tasks/{plan}/result.json")));
    assert_eq!(result["status"], "error");
    assert_eq!(
        result["error"],
        json!({"message": "agent crashed", "name": "Error"})
    );
    assert!(result.get("value").is_none());

    // The process does not catch it: the run fails (B5: RUN_FAILED), exit 0 (the reference's
    // code for failed).
    let it = s.iterate(&id);
    assert_eq!(it["status"], "failed");
    assert_eq!(it["reason"], "process-error: agent crashed");
    assert!(s.event_types(&id).contains(&"RUN_FAILED".to_owned()));
    let status = s.cmd(&["run:status", &id, "--json"]).ok().json();
    assert_eq!(status["state"], "failed");
    assert_eq!(status["reason"], "failed");
    assert_eq!(status["completionProof"], Value::Null);
    // Later iterations replay the failure without appending.
    let len = s.journal_len(&id);
    let it = s.iterate(&id);
    assert_eq!(it["status"], "failed");
    assert_eq!(s.journal_len(&id), len);
}

fn compat_scenario_process_throw_and_halts_in(s: &Sandbox) {
    s.write(
        "processes/throws.mjs",
        "export async function process(inputs, ctx) { throw new Error('kaboom'); }\n",
    );
    let id = s.create("throw-1", "processes/throws.mjs#process");
    let it = s.iterate(&id);
    assert_eq!(it["status"], "failed");
    assert_eq!(it["reason"], "process-error: kaboom");
    let status = s.cmd(&["run:status", &id, "--json"]).ok().json();
    assert_eq!(status["state"], "failed");
    assert_eq!(status["reason"], "process_runtime_error");
    assert_eq!(status["lastEvent"]["type"], "PROCESS_RUNTIME_ERROR");

    // ctx.halt: status halted, exit 1, reason and payload.
    s.write(
        "processes/halts.mjs",
        "export async function process(inputs, ctx) { ctx.halt('need-human', { why: 'budget' }); }\n",
    );
    let id = s.create("halt-1", "processes/halts.mjs");
    let out = s.cmd(&["run:iterate", &id, "--json"]).fails();
    let v = out.json();
    assert_eq!(v["status"], "halted");
    assert_eq!(v["reason"], "need-human");
    assert_eq!(v["payload"], json!({"why": "budget"}));
    let status = s.cmd(&["run:status", &id, "--json"]).ok().json();
    assert_eq!(status["state"], "halted");
    assert_eq!(status["reason"], "need-human");
    assert_eq!(status["payload"], json!({"why": "budget"}));
    let text = s.cmd(&["run:status", &id]).ok();
    assert!(
        text.stdout
            .starts_with("[run:status] state=halted reason=need-human last=RUN_HALTED#")
    );

    // run:halt on a terminal run is a no-op (B18) unless --force.
    let len = s.journal_len(&id);
    let v = s.cmd(&["run:halt", &id, "--json"]).ok().json();
    assert_eq!(v["halted"], false);
    assert_eq!(v["alreadyTerminal"], "RUN_HALTED");
    assert_eq!(v["event"], Value::Null);
    assert_eq!(s.journal_len(&id), len);
    let v = s
        .cmd(&[
            "run:halt",
            &id,
            "--force",
            "--final-status",
            "failed",
            "--reason",
            "operator",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(v["halted"], true);
    assert_eq!(v["event"]["type"], "RUN_FAILED");
    assert_eq!(v["event"]["seq"], (len + 1) as u64);
    let ev = s
        .cmd(&["run:events", &id, "--json", "--reverse", "--limit", "1"])
        .ok()
        .json();
    let proof = read_json(&s.run_dir(&id).join("run.json"))["completionProof"].clone();
    assert_eq!(
        ev["events"][0]["data"],
        json!({"manual_seal_reason": "operator", "completionProof": proof,
               "error": {"name": "ManualHalt", "message": "operator"}})
    );

    // run:halt on a waiting run seals it as completed; the shape of §5.3.6.
    let id = s.create("halt-2", "processes/demo.mjs");
    s.iterate(&id);
    let dry = s.cmd(&["run:halt", &id, "--dry-run", "--json"]).ok().json();
    assert_eq!(
        keys(&dry),
        [
            "dryRun",
            "runDir",
            "plan",
            "eventType",
            "finalStatus",
            "reason",
            "completionProof",
            "alreadyTerminal"
        ]
    );
    assert_eq!(dry["plan"], "halt_run");
    let v = s.cmd(&["run:halt", &id, "--json"]).ok().json();
    assert_eq!(
        keys(&v),
        [
            "runDir",
            "halted",
            "finalStatus",
            "reason",
            "completionProof",
            "alreadyTerminal",
            "event",
            "metadata"
        ]
    );
    assert_eq!(v["halted"], true);
    assert_eq!(v["finalStatus"], "completed");
    assert_eq!(v["reason"], "manual_halt");
    assert_eq!(v["alreadyTerminal"], Value::Null);
    assert_eq!(v["event"]["type"], "RUN_COMPLETED");
    assert_eq!(v["metadata"]["stateRebuildReason"], "manual_halt");
    assert_eq!(v["metadata"]["pendingEffectsByKind"], json!({"agent": 1}));
    let status = s.cmd(&["run:status", &id, "--json"]).ok().json();
    assert_eq!(status["state"], "completed");
    assert_eq!(status["completionProof"], v["completionProof"]);
}

fn compat_scenario_cancel_and_shell_failure_in(s: &Sandbox) {
    let id = s.create("cancel-1", "processes/demo.mjs");
    let it = s.iterate(&id);
    let plan = it["nextActions"][0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = s
        .cmd(&[
            "task:cancel",
            &id,
            &plan,
            "--reason",
            "not needed",
            "--json",
        ])
        .ok();
    assert_eq!(
        out.json(),
        json!({"effectId": plan, "status": "cancelled", "resultRef": format!("tasks/{plan}/result.json")})
    );
    let result = read_json(&s.run_dir(&id).join(format!("tasks/{plan}/result.json")));
    assert_eq!(result["status"], "cancelled");
    assert_eq!(
        result["error"],
        json!({"message": "not needed", "name": "EffectCancelledError"})
    );
    let again = s.cmd(&["task:cancel", &id, &plan]).fails();
    assert!(
        again.stderr.contains("is already cancelled"),
        "{}",
        again.stderr
    );
    let listed = s.cmd(&["task:list", &id, "--json"]).ok().json();
    assert_eq!(listed["tasks"][0]["status"], "cancelled");
    // The process sees an EffectCancelledError it does not catch.
    let it = s.iterate(&id);
    assert_eq!(it["status"], "failed");
    assert!(
        it["reason"].as_str().unwrap().contains("cancelled"),
        "{}",
        it["reason"]
    );

    // F15: a shell effect posted with --status error is committed ok with the failure object.
    let id = s.create("shell-1", "processes/demo.mjs");
    let it = s.iterate(&id);
    let plan = it["nextActions"][0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();
    s.post_inline(&id, &plan, r#"{"ok":true}"#).ok();
    let it = s.iterate(&id);
    let shell = it["nextActions"][0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(
        s.run_dir(&id).join("shell-err.json"),
        r#"{"name":"Error","message":"boom","data":{"exitCode":3,"stdout":"partial"}}"#,
    )
    .unwrap();
    let out = s
        .cmd(&[
            "task:post",
            &id,
            &shell,
            "--status",
            "error",
            "--error",
            "shell-err.json",
            "--json",
        ])
        .ok();
    let v = out.json();
    assert_eq!(v["status"], "ok");
    assert_eq!(v["normalizedShellFailure"], true);
    let result = read_json(&s.run_dir(&id).join(format!("tasks/{shell}/result.json")));
    assert_eq!(result["status"], "ok");
    assert_eq!(
        result["value"],
        json!({"error": "Shell command exited with code 3", "exitCode": 3, "stderr": "", "stdout": "partial", "success": false})
    );
    // Dry-run plan shape.
    let other = it["nextActions"][1]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();
    let dry = s
        .cmd(&[
            "task:post",
            &id,
            &other,
            "--status",
            "error",
            "--dry-run",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(
        dry,
        json!({"status": "skipped", "dryRun": true, "plan": {
            "runDir": "", "effectId": other, "status": "ok", "normalizedShellFailure": true,
            "valueProvided": false, "errorProvided": false, "stdoutRef": null, "stderrRef": null,
            "stdoutFile": null, "stderrFile": null}})
    );
}

/// Each scenario three times, one per client: local calls; every run and task command served by
/// the warm server (`babysitter warm serve`); and every command with a remote form sent to an
/// orchestrator (`babysitter up`, `--server`) that keeps the runs. The same assertions hold for
/// all three: where a run lives must not change what a command prints, its exit code or the
/// journal it leaves.
macro_rules! every_client {
    ($($local:ident, $warm:ident, $remote:ident => $body:ident;)*) => {$(
        #[test]
        fn $local() {
            $body(&Sandbox::with_demo());
        }

        #[test]
        fn $warm() {
            let s = Sandbox::with_demo().warm();
            $body(&s);
            assert!(s.warm_served() > 0, "the commands went through the warm server");
        }

        #[test]
        fn $remote() {
            $body(&Sandbox::with_demo().remote());
        }
    )*};
}

every_client! {
    compat_scenario_demo_runs_to_completion_like_the_reference, compat_scenario_demo_runs_to_completion_like_the_reference_warm, compat_scenario_demo_runs_to_completion_like_the_reference_remote => compat_scenario_demo_runs_to_completion_like_the_reference_in;
    compat_scenario_task_error_fails_the_run, compat_scenario_task_error_fails_the_run_warm, compat_scenario_task_error_fails_the_run_remote => compat_scenario_task_error_fails_the_run_in;
    compat_scenario_process_throw_and_halts, compat_scenario_process_throw_and_halts_warm, compat_scenario_process_throw_and_halts_remote => compat_scenario_process_throw_and_halts_in;
    compat_scenario_cancel_and_shell_failure, compat_scenario_cancel_and_shell_failure_warm, compat_scenario_cancel_and_shell_failure_remote => compat_scenario_cancel_and_shell_failure_in;
}
