//! Black-box tests of `session:resume`, `session:iteration-message`, `session:whoami`,
//! `session:cleanup` (spec §6.3) and `instructions:babysit-skill` (§5.5): JSON shapes, the
//! session files they write, the reference's output where it can be run, and bad input.

mod compat_support;

use compat_support::{Sandbox, keys, read_json, reference_cli, snapshot};
use serde_json::{Value, json};

const DONE: &str = "export async function process(inputs, ctx) { return { ok: true }; }\n";

/// A waiting run (`w`) and a completed one (`c`).
fn runs(s: &Sandbox) -> (String, String) {
    let w = s.create("w", "processes/demo.mjs");
    s.iterate(&w);
    s.write("processes/done.mjs", DONE);
    let c = s.create("c", "processes/done.mjs");
    assert_eq!(s.iterate(&c)["status"], "completed");
    (w, c)
}

fn state_dir(s: &Sandbox) -> String {
    s.tmp.path().join("state").display().to_string()
}

#[test]
fn compat_session_resume_writes_the_session_file() {
    let s = Sandbox::with_demo();
    let (w, c) = runs(&s);
    let st = state_dir(&s);
    let v = s
        .cmd(&[
            "session:resume",
            "--session-id",
            "s1",
            "--run-id",
            &w,
            "--state-dir",
            &st,
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(keys(&v), ["stateFile", "runId", "runState", "processId"]);
    assert_eq!(
        v,
        json!({"stateFile": format!("{st}/s1.md"), "runId": "w", "runState": "waiting", "processId": "golden/demo"})
    );
    let text = std::fs::read_to_string(format!("{st}/s1.md")).unwrap();
    assert!(text.starts_with(
        "---\nactive: true\niteration: 1\nmax_iterations: 65000\nrun_id: \"w\"\nrun_ids: \n"
    ));
    assert!(text.ends_with("---\n\nResume Babysitter run: w\n\nProcess: golden/demo\nCurrent state: waiting\n\nContinue orchestration using run:iterate, task:post, etc. or fix the run if it's broken/failed/unknown.\n"), "{text}");

    // Errors: JSON on stderr, exit 1, no file written.
    let before = snapshot(s.tmp.path());
    for (args, code) in [
        (vec!["--run-id", "w"], "MISSING_SESSION_ID"),
        (vec!["--session-id", "s2"], "MISSING_RUN_ID"),
        (
            vec!["--session-id", "s2", "--run-id", "nope"],
            "RUN_NOT_FOUND",
        ),
        (vec!["--session-id", "s2", "--run-id", &c], "RUN_COMPLETED"),
    ] {
        let mut argv = vec!["session:resume", "--state-dir", &st, "--json"];
        argv.extend(args);
        let out = s.cmd(&argv).fails();
        let err: Value = serde_json::from_str(&out.stderr).unwrap();
        assert_eq!(err["error"], code, "{argv:?}");
        assert!(out.stdout.is_empty());
    }
    assert_eq!(snapshot(s.tmp.path()), before);
}

#[test]
fn compat_session_iteration_message() {
    let s = Sandbox::with_demo();
    let (w, c) = runs(&s);
    let v = s
        .cmd(&[
            "session:iteration-message",
            "--iteration",
            "3",
            "--run-id",
            &w,
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(
        keys(&v),
        [
            "systemMessage",
            "runState",
            "completionProof",
            "pendingKinds",
            "skillContext",
            "iteration"
        ]
    );
    assert_eq!(v["runState"], "waiting");
    assert_eq!(v["pendingKinds"], "agent");
    assert_eq!(v["completionProof"], Value::Null);
    assert_eq!(v["iteration"], 3);
    assert_eq!(
        v["systemMessage"],
        "\u{1F504} Babysitter iteration 3 | Waiting on: agent. Check if pending effects are resolved, then call run:iterate."
    );
    let v = s
        .cmd(&[
            "session:iteration-message",
            "--iteration",
            "4",
            "--run-id",
            &c,
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(v["runState"], "completed");
    assert_eq!(
        v["completionProof"],
        read_json(&s.run_dir(&c).join("run.json"))["completionProof"]
    );
    // No run: the generic message; an unknown run is not an error.
    for args in [vec![], vec!["--run-id", "nope"]] {
        let mut argv = vec!["session:iteration-message", "--iteration", "1", "--json"];
        argv.extend(args);
        let v = s.cmd(&argv).ok().json();
        assert_eq!(v["runState"], Value::Null);
        assert_eq!(
            v["systemMessage"],
            "\u{1F504} Babysitter iteration 1 | Agent should continue orchestration (run:iterate)"
        );
    }
    let out = s.cmd(&["session:iteration-message", "--json"]).fails();
    let err: Value = serde_json::from_str(&out.stderr).unwrap();
    assert_eq!(err["error"], "MISSING_ITERATION");

    if let Some(reference) = reference_cli() {
        for id in [&w, &c] {
            let argv = [
                "session:iteration-message",
                "--iteration",
                "3",
                "--run-id",
                id.as_str(),
                "--json",
            ];
            let ours = s.cmd(&argv).ok().json();
            let theirs = s.cmd_ref(&reference, &argv).ok().json();
            assert_eq!(ours, theirs, "run {id}");
        }
    }
}

#[test]
fn compat_session_resume_matches_the_reference() {
    let Some(reference) = reference_cli() else {
        return; // skipped: reference_cli() recorded why
    };
    let s = Sandbox::with_demo();
    let (w, _) = runs(&s);
    let st = state_dir(&s);
    let argv = |sid: &'static str| {
        vec![
            "session:resume",
            "--session-id",
            sid,
            "--run-id",
            "w",
            "--state-dir",
            st.as_str(),
            "--json",
        ]
    };
    let ours = s.cmd(&argv("ours")).ok().json();
    let theirs = s.cmd_ref(&reference, &argv("theirs")).ok().json();
    assert_eq!(keys(&ours), keys(&theirs));
    for k in ["runId", "runState", "processId"] {
        assert_eq!(ours[k], theirs[k], "{k}");
    }
    // The prompts agree (timestamps aside).
    let body = |sid: &str| {
        let t = std::fs::read_to_string(format!("{st}/{sid}.md")).unwrap();
        t.split("\n---\n").nth(1).unwrap().to_owned()
    };
    assert_eq!(body("ours"), body("theirs"));
    let _ = w;
}

#[test]
fn compat_session_whoami_reports_the_source() {
    let s = Sandbox::new();
    let v = s.cmd(&["session:whoami", "--json"]).ok().json();
    assert_eq!(
        keys(&v),
        [
            "harness",
            "sessionId",
            "resolvedFrom",
            "ancestorPid",
            "ancestorAlive",
            "markerPath",
            "envFilePath",
            "envVarPresent",
            "envVarMatches"
        ]
    );
    assert_eq!(
        v,
        json!({"harness": "claude-code", "sessionId": null, "resolvedFrom": "none", "ancestorPid": null,
               "ancestorAlive": null, "markerPath": null, "envFilePath": null, "envVarPresent": false,
               "envVarMatches": null})
    );
    let v = s
        .cmd_env(
            &["session:whoami", "--harness", "codex", "--json"],
            &[("AGENT_SESSION_ID", "a1"), ("CODEX_THREAD_ID", "t1")],
        )
        .ok()
        .json();
    assert_eq!(v["sessionId"], "t1");
    assert_eq!(v["resolvedFrom"], "env-var");
    assert_eq!(v["envVarPresent"], true);
    assert_eq!(v["envVarMatches"], false);
    let v = s
        .cmd_env(
            &["session:whoami", "--harness", "codex", "--json"],
            &[
                ("AGENT_SESSION_ID", "a1"),
                ("CODEX_THREAD_ID", "t1"),
                ("AGENT_TRUST_ENV_SESSION", "1"),
            ],
        )
        .ok()
        .json();
    assert_eq!(v["sessionId"], "a1");
    assert_eq!(v["envVarMatches"], true);
    let text = s
        .cmd_env(
            &["session:whoami"],
            &[("AGENT_SESSION_ID", "a1"), ("CLAUDE_ENV_FILE", "/x/env")],
        )
        .ok();
    assert_eq!(
        text.stdout,
        "harness: claude-code\nsessionId: a1\nresolvedFrom: env-var\nancestorPid: (none)\nancestorAlive: (unknown)\nmarkerPath: (none)\nenvFilePath: /x/env\nenvVarPresent: true\nenvVarMatches: true\n"
    );
}

/// A session file with the given run, activity and last iteration time.
fn session(st: &str, sid: &str, run: &str, active: bool, last: &str) {
    std::fs::create_dir_all(st).unwrap();
    std::fs::write(
        format!("{st}/{sid}.md"),
        format!(
            "---\nactive: {active}\niteration: 2\nmax_iterations: 65000\nrun_id: \"{run}\"\nrun_ids: \nstarted_at: \"{last}\"\nlast_iteration_at: \"{last}\"\niteration_times: \n---\n\ngo\n"
        ),
    )
    .unwrap();
}

#[test]
fn compat_session_cleanup_markers_and_finished_sessions() {
    let s = Sandbox::with_demo();
    let (w, c) = runs(&s);
    let st = state_dir(&s);
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    session(&st, "s-done", &c, true, &now);
    session(&st, "s-stale", "", true, "2020-01-01T00:00:00Z");
    session(&st, "s-live", &w, true, &now);
    session(&st, "s-off", &c, false, &now);
    session(&st, "s-held", &c, true, &now);
    // A marker of a process that is gone, and one of a live process (pid 1) naming s-held.
    std::fs::write(
        format!("{st}/current-session-claude-code-pid-2147483000"),
        "s-x\n",
    )
    .unwrap();
    std::fs::write(format!("{st}/current-session-codex-pid-1"), "s-held\n").unwrap();

    let before = snapshot(s.tmp.path());
    let dry = s
        .cmd(&["session:cleanup", "--state-dir", &st, "--dry-run", "--json"])
        .ok()
        .json();
    assert_eq!(
        keys(&dry),
        ["markersRemoved", "statesDeactivated", "dryRun"]
    );
    assert_eq!(
        dry,
        json!({"markersRemoved": ["current-session-claude-code-pid-2147483000"],
               "statesDeactivated": ["s-done", "s-stale"], "dryRun": true})
    );
    assert_eq!(snapshot(s.tmp.path()), before, "a dry run changes nothing");

    let v = s
        .cmd(&["session:cleanup", "--state-dir", &st, "--json"])
        .ok()
        .json();
    assert_eq!(v["markersRemoved"], dry["markersRemoved"]);
    assert_eq!(v["statesDeactivated"], dry["statesDeactivated"]);
    assert_eq!(v["dryRun"], false);
    assert!(
        !std::path::Path::new(&format!("{st}/current-session-claude-code-pid-2147483000"))
            .try_exists()
            .unwrap()
    );
    let done = std::fs::read_to_string(format!("{st}/s-done.md")).unwrap();
    assert!(done.starts_with("---\nactive: false\n"), "{done}");
    assert!(done.contains("metadata_sessionCleanupReason: \"terminal_run\"\n"));
    assert!(done.contains("metadata_sessionCleanupSource: \"session:cleanup\"\n"));
    assert!(done.contains("metadata_sessionCleanupRunId: \"c\"\n"));
    let stale = std::fs::read_to_string(format!("{st}/s-stale.md")).unwrap();
    assert!(stale.contains("metadata_sessionCleanupReason: \"stale_session\"\n"));
    assert!(!stale.contains("sessionCleanupRunId"));
    for untouched in ["s-live", "s-held"] {
        let t = std::fs::read_to_string(format!("{st}/{untouched}.md")).unwrap();
        assert!(t.starts_with("---\nactive: true\n"), "{untouched}");
    }
    let text = s.cmd(&["session:cleanup", "--state-dir", &st]).ok();
    assert_eq!(
        text.stdout,
        "[session:cleanup] dryRun=false markersRemoved=0 statesDeactivated=0\n"
    );
}

#[test]
fn compat_instructions_babysit_skill() {
    let s = Sandbox::new();
    let v = s
        .cmd(&[
            "instructions:babysit-skill",
            "--harness",
            "claude-code",
            "--json",
        ])
        .ok()
        .json();
    // §5.5's keys, in order (`interactive` only when given, as JSON.stringify drops undefined).
    assert_eq!(
        keys(&v),
        [
            "harness",
            "harnessSource",
            "discoveryEvidence",
            "promptType",
            "hookDriven",
            "hooksDetected",
            "warnings",
            "executionContext",
            "capabilityFlags",
            "suggestedProcesses",
            "existingRun",
            "content",
            "partsIncluded"
        ]
    );
    assert_eq!(v["harnessSource"], "explicit");
    assert_eq!(v["promptType"], "babysit-skill");
    assert_eq!(v["hookDriven"], false, "no session file: no hooks ran");
    assert_eq!(v["executionContext"]["ci"], "local");
    assert!(
        v["partsIncluded"]
            .as_array()
            .unwrap()
            .iter()
            .all(Value::is_string)
    );
    let content = v["content"].as_str().unwrap();
    for needle in [
        "run:create",
        "run:iterate",
        "task:post",
        "<promise>",
        "run:recover-process-error",
        "Claude Code",
    ] {
        assert!(content.contains(needle), "{needle}");
    }

    // With the session-start hook's file present the loop is hook-driven.
    let st = s.tmp.path().join("home/.a5c/state");
    std::fs::create_dir_all(&st).unwrap();
    std::fs::write(st.join("sess-9.md"), "---\nactive: true\n---\n\n").unwrap();
    let v = s
        .cmd_env(
            &[
                "instructions:babysit-skill",
                "--harness",
                "claude-code",
                "--json",
            ],
            &[("AGENT_SESSION_ID", "sess-9")],
        )
        .ok()
        .json();
    assert_eq!(v["hooksDetected"], true);
    assert_eq!(v["hookDriven"], true);
    assert!(v["content"].as_str().unwrap().contains("stop hook"));
    let v = s
        .cmd_env(
            &[
                "instructions:babysit-skill",
                "--harness",
                "claude-code",
                "--no-interactive",
                "--json",
            ],
            &[("AGENT_SESSION_ID", "sess-9")],
        )
        .ok()
        .json();
    assert_eq!(v["interactive"], false);
    assert_eq!(
        v["hookDriven"], false,
        "non-interactive sessions loop in-turn"
    );

    for h in ["codex", "gemini-cli", "pi", "opencode"] {
        let v = s
            .cmd(&["instructions:babysit-skill", "--harness", h, "--json"])
            .ok()
            .json();
        assert_eq!(v["harness"], h);
        assert!(!v["content"].as_str().unwrap().contains("{{"));
    }
    // Detected from the environment; unknown harnesses are refused.
    let v = s
        .cmd_env(
            &["instructions:babysit-skill", "--json"],
            &[("CODEX_THREAD_ID", "t")],
        )
        .ok()
        .json();
    assert_eq!(v["harness"], "codex");
    assert_eq!(v["harnessSource"], "caller");
    assert_eq!(v["discoveryEvidence"], json!(["CODEX_THREAD_ID"]));
    let v = s.cmd(&["instructions:babysit-skill", "--json"]).ok().json();
    assert_eq!(v["harness"], "custom");
    assert_eq!(v["warnings"].as_array().unwrap().len(), 1);
    let out = s
        .cmd(&["instructions:babysit-skill", "--harness", "nope", "--json"])
        .fails();
    let err: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(err["error"], "unknown_harness");
    let text = s
        .cmd(&["instructions:babysit-skill", "--harness", "opencode"])
        .ok();
    assert!(
        text.stdout
            .starts_with("# Babysitter orchestration (OpenCode)")
    );

    if let Some(reference) = reference_cli() {
        // The published reference prints a subset of the keys: each has the same JSON type here.
        let argv = [
            "instructions:babysit-skill",
            "--harness",
            "claude-code",
            "--json",
        ];
        let theirs = s.cmd_ref(&reference, &argv).ok().json();
        let ours = s.cmd(&argv).ok().json();
        let kind = |v: &Value| match v {
            Value::Null => "null",
            Value::Bool(_) => "bool",
            Value::Number(_) => "number",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::Object(_) => "object",
        };
        for (k, tv) in theirs.as_object().unwrap() {
            assert_eq!(kind(&ours[k]), kind(tv), "{k}");
        }
    }
}

#[test]
fn compat_instructions_other_kinds() {
    let s = Sandbox::new();
    let reference = reference_cli();
    for (kind, needles) in [
        (
            "orchestrate",
            &["run:iterate", "task:post", "<promise>"][..],
        ),
        (
            "process-create",
            &[
                "export async function process(inputs, ctx)",
                "defineTask",
                "ctx.parallel.all",
            ][..],
        ),
        (
            "breakpoint-handling",
            &[
                "autoApproval.recommended",
                "breakpoint:approve-rule",
                "\"approved\": false",
            ][..],
        ),
    ] {
        let argv = [
            &format!("instructions:{kind}")[..],
            "--harness",
            "claude-code",
            "--json",
        ];
        let v = s.cmd(&argv).ok().json();
        assert_eq!(v["promptType"], kind);
        assert_eq!(v["harness"], "claude-code");
        assert!(!v["partsIncluded"].as_array().unwrap().is_empty());
        let content = v["content"].as_str().unwrap();
        for n in needles {
            assert!(content.contains(n), "{kind}: {n}");
        }
        // The text form is the content itself.
        let text = s.cmd(&argv[..3]).ok().stdout;
        assert_eq!(text.trim_end(), content.trim_end());
        if let Some(r) = &reference {
            let theirs = s.cmd_ref(r, &argv).ok().json();
            assert_eq!(theirs["promptType"], kind);
            // 0.0.187's keys are 6.0.0's (ours) with some left out, in the same order.
            let ours = keys(&v);
            let mut at = 0;
            for k in keys(&theirs) {
                at += ours[at..]
                    .iter()
                    .position(|o| *o == k)
                    .unwrap_or_else(|| panic!("{kind}: key {k} missing or out of order"));
            }
        }
    }
}
