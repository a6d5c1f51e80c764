//! Bad input and contention through the real binary: a clear message on stderr, exit 1, and the
//! run (or the runs directory) unchanged.

mod compat_support;

use compat_support::*;
use serde_json::{Value, json};

fn no_runs(s: &Sandbox) -> bool {
    std::fs::read_dir(s.runs())
        .map(|mut d| d.next().is_none())
        .unwrap_or(true)
}

#[test]
fn compat_errors_run_create_validates_inputs_and_entry() {
    let s = Sandbox::with_demo();
    let create = |extra: &[&str]| {
        let mut args = vec!["run:create", "--process-id", "p", "--run-id", "r1"];
        args.extend_from_slice(extra);
        s.cmd(&args)
    };
    let missing_inputs = s.project.join("nope.json");
    let out = create(&["--entry", "processes/demo.mjs", "--inputs", "nope.json"]).fails();
    assert_eq!(
        out.stderr.trim_end(),
        format!(
            "Failed to read inputs file {0}: ENOENT: no such file or directory, open '{0}'",
            missing_inputs.display()
        )
    );
    s.write("bad.json", "{\"feature\": ");
    let out = create(&["--entry", "processes/demo.mjs", "--inputs", "bad.json"]).fails();
    assert!(
        out.stderr.starts_with(&format!(
            "Failed to parse inputs file {} as JSON:",
            s.project.join("bad.json").display()
        )),
        "{}",
        out.stderr
    );
    let out = create(&["--entry", "processes/missing.mjs#process"]).fails();
    assert_eq!(
        out.stderr.trim_end(),
        format!(
            "Process entry file not found: {}. Ensure the path is correct and points to a valid JS/TS module.",
            s.project.join("processes/missing.mjs").display()
        )
    );
    s.write("processes/noexport.mjs", "export const helper = 1;\n");
    let out = create(&["--entry", "processes/noexport.mjs#process"]).fails();
    assert!(
        out.stderr
            .contains("does not export a valid process function. Expected 'process' (function) or default export."),
        "{}",
        out.stderr
    );
    s.write("processes/broken.mjs", "export async function process( {\n");
    let out = create(&["--entry", "processes/broken.mjs"]).fails();
    assert!(
        out.stderr.starts_with("Failed to load process module at"),
        "{}",
        out.stderr
    );
    let out = create(&["--entry", "#process"]).fails();
    assert_eq!(
        out.stderr.trim_end(),
        "Entrypoint must include a module path before '#'"
    );
    let out = s
        .cmd(&["run:create", "--entry", "processes/demo.mjs"])
        .fails();
    assert!(out.stderr.starts_with(
        "--process-id is required for run:create (unless creating a bare run without --entry)"
    ));
    let out = create(&["--entry", "processes/demo.mjs", "--run-id", "a/b", "--json"]).fails();
    let err: Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!(err["name"], "InvalidRunIdError");
    assert_eq!(err["category"], "VALIDATION");
    assert!(no_runs(&s), "no run was created");

    // An existing run is never overwritten.
    s.create("r1", "processes/demo.mjs");
    let before = snapshot(&s.run_dir("r1"));
    let out = create(&["--entry", "processes/demo.mjs", "--json"]).fails();
    let err: Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!(err["name"], "RunAlreadyExistsError");
    assert_eq!(snapshot(&s.run_dir("r1")), before);
}

#[test]
fn compat_errors_unwritable_runs_dir() {
    let s = Sandbox::with_demo();
    // A runs dir below a regular file cannot be created, whoever runs the test.
    s.write("blocker", "not a directory");
    let runs = s.project.join("blocker/runs");
    let out = s
        .cmd(&[
            "run:create",
            "--process-id",
            "p",
            "--entry",
            "processes/demo.mjs",
            "--runs-dir",
            &runs.display().to_string(),
            "--json",
        ])
        .fails();
    let err: Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .starts_with("cannot create run "),
        "{err}"
    );
    assert_eq!(out.stdout, "");
    if !rustix::process::geteuid().is_root() {
        use std::os::unix::fs::PermissionsExt as _;
        let ro = s.project.join("ro");
        std::fs::create_dir_all(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        s.cmd_env(
            &[
                "run:create",
                "--process-id",
                "p",
                "--entry",
                "processes/demo.mjs",
            ],
            &[(
                "BABYSITTER_RUNS_DIR",
                &ro.join("runs").display().to_string(),
            )],
        )
        .fails();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

#[test]
fn compat_errors_task_post_bad_input_leaves_the_run_unchanged() {
    let s = Sandbox::with_demo();
    let id = s.create("r1", "processes/demo.mjs");
    let it = s.iterate(&id);
    let plan = it["nextActions"][0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();
    std::fs::write(s.run_dir(&id).join("value.txt"), "definitely not json").unwrap();
    let before = snapshot(&s.run_dir(&id));

    let out = s
        .post_inline(&id, "01NOTANEFFECT0000000000000", "{}")
        .fails();
    assert_eq!(
        out.stderr.trim_end(),
        format!(
            "[task:post] effect 01NOTANEFFECT0000000000000 not found at {}",
            s.run_dir(&id).display()
        )
    );
    // A result file that is not JSON.
    let out = s
        .cmd(&[
            "task:post",
            &id,
            &plan,
            "--status",
            "ok",
            "--value",
            "value.txt",
            "--json",
        ])
        .fails();
    let err: Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!(err["name"], "SyntaxError");
    // Bad inline JSON.
    let out = s.post_inline(&id, &plan, "{oops").fails();
    assert!(out.stderr.contains("SyntaxError"), "{}", out.stderr);
    // Flag validation, in the reference's order and words.
    let cases: &[(&[&str], &str)] = &[
        (&[], "[task:post] missing required --status <ok|error>"),
        (
            &["--status", "ok"],
            "[task:post] ok results require --value or --value-inline",
        ),
        (
            &["--status", "error", "--value-inline", "{}"],
            "[task:post] --value-inline is only supported with --status ok",
        ),
        (
            &["--status", "ok", "--value", "a", "--value-inline", "{}"],
            "[task:post] cannot combine --value with --value-inline",
        ),
        (
            &[
                "--status",
                "ok",
                "--value-inline",
                "1",
                "--stdout-ref",
                "x",
                "--stdout-file",
                "y",
            ],
            "[task:post] cannot combine --stdout-ref with --stdout-file",
        ),
    ];
    for (extra, msg) in cases {
        let mut args = vec!["task:post", id.as_str(), plan.as_str()];
        args.extend_from_slice(extra);
        let out = s.cmd(&args).fails();
        assert_eq!(out.stderr.trim_end(), *msg);
    }
    let out = s
        .cmd(&["task:post", &id, &plan, "--status", "maybe"])
        .fails();
    assert!(
        out.stderr
            .starts_with("Error: --status must be \"ok\" or \"error\" (received: maybe)")
    );
    // Invocation key mismatch.
    let out = s
        .cmd(&[
            "task:post",
            &id,
            &plan,
            "--status",
            "ok",
            "--value-inline",
            "1",
            "--invocation-key",
            "other",
            "--json",
        ])
        .fails();
    let err: Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!(err["name"], "RunFailedError");
    assert_eq!(
        err["message"],
        format!("Invocation key mismatch for effect {plan}")
    );
    assert_eq!(err["details"]["providedInvocationKey"], "other");
    assert_eq!(snapshot(&s.run_dir(&id)), before, "nothing was committed");

    // A run whose process file disappeared: iterate fails and appends nothing.
    std::fs::copy(
        s.project.join("processes/demo.mjs"),
        s.project.join("processes/gone.mjs"),
    )
    .unwrap();
    let id2 = s.create("r2", "processes/gone.mjs");
    let len = s.journal_len(&id2);
    std::fs::remove_file(s.project.join("processes/gone.mjs")).unwrap();
    let out = s.cmd(&["run:iterate", &id2]).fails();
    assert!(
        out.stderr.starts_with("[run:iterate] Error: process file ")
            && out.stderr.contains("ENOENT: no such file or directory"),
        "{}",
        out.stderr
    );
    assert_eq!(s.journal_len(&id2), len);

    // task:show / task:list on a missing run.
    let out = s.cmd(&["task:list", "no-such-run", "--json"]).fails();
    assert!(
        out.stderr.starts_with("[task:list] unable to read run at"),
        "{}",
        out.stderr
    );
    let out = s.cmd(&["run:status", "no-such-run"]).fails();
    assert!(
        out.stderr.contains("unable to read run metadata at")
            && out.stderr.contains("ENOENT: no such file or directory"),
        "{}",
        out.stderr
    );
}

#[test]
fn compat_errors_lock_contention_and_concurrent_posts() {
    let s = Sandbox::with_demo();
    let id = s.create("r1", "processes/demo.mjs");
    // The reference CLI holds run.lock (pid 1 is alive): wait, then give up with its message.
    let lock = s.run_dir(&id).join("run.lock");
    std::fs::write(
        &lock,
        "{\n  \"pid\": 1,\n  \"owner\": \"test\",\n  \"acquiredAt\": \"2026-01-01T00:00:00.000Z\"\n}\n",
    )
    .unwrap();
    let len = s.journal_len(&id);
    let out = s
        .cmd_env(
            &["run:iterate", &id, "--json"],
            &[("BABYSITTER_RUN_LOCK_TIMEOUT_MS", "200")],
        )
        .fails();
    assert!(
        out.stderr.contains("[babysitter] run lock contention on"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .ends_with("[run:iterate] Error: run.lock already held by pid 1 (test)\n"),
        "{}",
        out.stderr
    );
    assert_eq!(s.journal_len(&id), len);
    // A stale lock (dead pid) does not block.
    std::fs::write(&lock, "{\"pid\": 2147483000, \"owner\": \"gone\"}").unwrap();
    let it = s.iterate(&id);
    assert_eq!(it["status"], "waiting");
    let plan = it["nextActions"][0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();

    // Two posts for the same effect at once: exactly one commits.
    let spawn = |v: &str| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_babysitter"));
        c.args([
            "task:post",
            &id,
            &plan,
            "--status",
            "ok",
            "--value-inline",
            v,
        ])
        .current_dir(&s.project)
        .env_clear()
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        for (k, v) in &s.env {
            c.env(k, v);
        }
        c.spawn().unwrap()
    };
    let children: Vec<_> = (0..4).map(|i| spawn(&format!("{{\"i\":{i}}}"))).collect();
    let codes: Vec<i32> = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap().status.code().unwrap())
        .collect();
    assert_eq!(codes.iter().filter(|c| **c == 0).count(), 1, "{codes:?}");
    assert_eq!(codes.iter().filter(|c| **c == 1).count(), 3, "{codes:?}");
    let resolved = s
        .cmd(&[
            "run:events",
            &id,
            "--json",
            "--filter-type",
            "EFFECT_RESOLVED",
        ])
        .ok()
        .json();
    assert_eq!(resolved["events"].as_array().unwrap().len(), 1);
}

#[test]
fn compat_errors_cli_surface() {
    let s = Sandbox::with_demo();
    // Version, help, unknown and not-yet-implemented commands.
    assert_eq!(s.cmd(&["--version"]).ok().stdout, "6.0.0\n");
    assert_eq!(s.cmd(&["run:status", "-v"]).ok().stdout, "6.0.0\n");
    assert!(
        s.cmd(&["--help"])
            .ok()
            .stdout
            .contains("babysitter task:post <runDir> <effectId>")
    );
    let out = s.cmd(&["run:list", "--json"]).fails();
    let err: Value = serde_json::from_str(&out.stderr).unwrap();
    assert_eq!(err["name"], "UnknownCommandError");
    assert_eq!(err["message"], "Unknown command: run:list");
    let out = s.cmd(&["yolo"]).fails();
    assert!(
        out.stderr.contains("[CommandMovedToHarnessCli]"),
        "{}",
        out.stderr
    );
    let out = s.cmd(&["session:bogus", "--json"]).fails();
    assert!(out.stderr.contains("NotImplementedError"));
    // Parse errors: plain Error, exit 1.
    let out = s.cmd(&["run:events", "x", "--limit"]).fails();
    assert!(out.stderr.starts_with(
        "Error: --limit requires a value\n[Error] Category: Internal error (please report as a bug)"
    ));
    let out = s.cmd(&["run:events", "x", "--limit", "-2"]).fails();
    assert!(
        out.stderr
            .starts_with("Error: --limit must be a positive integer")
    );
    // Missing positionals print the usage.
    let out = s.cmd(&["run:iterate"]).fails();
    assert!(out.stderr.starts_with("Usage:"));

    // run:create --dry-run: the plan, nothing written.
    let v = s
        .cmd(&[
            "run:create",
            "--process-id",
            "p",
            "--entry",
            "processes/demo.mjs#process",
            "--inputs",
            "inputs.json",
            "--dry-run",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(
        v,
        json!({"dryRun": true, "runsDir": s.runs().display().to_string(), "processId": "p",
               "entry": format!("{}#process", s.project.join("processes/demo.mjs").display()),
               "runId": null, "request": null, "processRevision": null,
               "inputsPath": s.project.join("inputs.json").display().to_string()})
    );
    assert!(no_runs(&s));

    // A bare run: no process; iterate refuses with the reference's message.
    let v = s
        .cmd(&[
            "run:create",
            "--run-id",
            "bare",
            "--harness",
            "claude-code",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(v["entry"], "bare-run");
    assert_eq!(v["session"]["harness"], "claude-code");
    assert!(v["session"]["error"].is_string());
    let meta = read_json(&s.run_dir("bare").join("run.json"));
    assert_eq!(meta["processId"], "bare-run");
    assert_eq!(meta["request"], "bare");
    assert_eq!(meta["harness"], "claude-code");
    assert_eq!(meta["entrypoint"], json!({"importPath": "bare-run"}));
    assert!(meta.get("processCodeHash").is_none());
    let out = s.cmd(&["run:iterate", "bare"]).fails();
    assert_eq!(
        out.stderr,
        "[run:iterate] Error: Run has no process assigned. Use run:assign-process to attach a process before iterating.\n"
    );
    // F5: the run's harness and the ambient session id are appended to event data.
    let v = s
        .cmd_env(
            &["run:halt", "bare", "--json"],
            &[("AGENT_SESSION_ID", "sess-1")],
        )
        .ok()
        .json();
    assert_eq!(v["halted"], true);
    let ev = s
        .cmd(&["run:events", "bare", "--json", "--reverse", "--limit=1"])
        .ok()
        .json();
    let data = &ev["events"][0]["data"];
    assert_eq!(
        keys(data),
        [
            "manual_seal_reason",
            "completionProof",
            "harness",
            "sessionId"
        ]
    );
    assert_eq!(data["sessionId"], "sess-1");

    // BABYSITTER_RUNS_DIR and lookup by absolute path.
    let alt = s.tmp.path().join("alt-runs");
    let v = s
        .cmd_env(
            &[
                "run:create",
                "--process-id",
                "p",
                "--entry",
                "processes/demo.mjs",
                "--run-id",
                "alt",
                "--json",
            ],
            &[("BABYSITTER_RUNS_DIR", &alt.display().to_string())],
        )
        .ok()
        .json();
    assert_eq!(v["runDir"], alt.join("alt").display().to_string());
    assert_eq!(v["entry"], "../../project/processes/demo.mjs");
    let st = s
        .cmd(&[
            "run:status",
            &alt.join("alt").display().to_string(),
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(st["state"], "created");

    // health
    let h = s.cmd(&["health", "--json"]).ok().json();
    assert_eq!(
        keys(&h),
        ["status", "timestamp", "checks", "summary", "nextSteps"]
    );
    assert_eq!(h["checks"][0]["name"], "sdk-version");
}
