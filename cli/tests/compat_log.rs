//! Black-box tests of babysitter's structured logs: `log`, `hook:log` (spec §5.5) and the
//! `ctx.log` lines `run:iterate` appends to `~/.a5c/logs/<runId>/process.log` (§3.9) — the same
//! files, lines, JSON and exit codes as the reference where it can be run, and bad input refused
//! with nothing written.

mod compat_support;

use std::path::{Path, PathBuf};

use compat_support::{Out, Sandbox, keys, reference_cli};
use serde_json::Value;

fn logs(s: &Sandbox) -> PathBuf {
    s.tmp.path().join("home").join(".a5c").join("logs")
}

fn lines(p: &Path) -> Vec<String> {
    std::fs::read_to_string(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A JSON log line without its timestamp (checked to be ISO-8601 with milliseconds).
fn without_ts(line: &str) -> Value {
    let mut v: Value = serde_json::from_str(line).unwrap();
    let ts = v["ts"].as_str().unwrap().to_owned();
    assert!(
        chrono::DateTime::parse_from_rfc3339(&ts).is_ok() && ts.ends_with('Z') && ts.len() == 24,
        "{ts}"
    );
    v.as_object_mut().unwrap().shift_remove("ts");
    v
}

/// `[<ts>] rest` → `rest`, the timestamp checked.
fn text_without_ts(line: &str) -> String {
    let (ts, rest) = line
        .strip_prefix('[')
        .and_then(|l| l.split_once("] "))
        .unwrap();
    assert!(chrono::DateTime::parse_from_rfc3339(ts).is_ok(), "{ts}");
    rest.to_owned()
}

/// Whether `p` exists (an error finding out fails the test).
fn exists(p: impl AsRef<Path>) -> bool {
    p.as_ref().try_exists().unwrap()
}

fn stderr_json(o: &Out) -> Value {
    serde_json::from_str(o.stderr.trim()).unwrap_or_else(|e| panic!("{e}: {}", o.stderr))
}

/// A `log` call with every flag.
const FULL: [&str; 16] = [
    "log",
    "--type",
    "cli",
    "--message",
    "hello \"x\"\nmore",
    "--run-id",
    "r1",
    "--process-id",
    "p/1",
    "--label",
    "L",
    "--level",
    "warn",
    "--source",
    "test",
    "--json",
];

#[test]
fn compat_log_appends_json_lines_where_the_reference_does() {
    let s = Sandbox::new();
    let out = s.cmd(&FULL).ok();
    let file = logs(&s).join("r1").join("cli.log");
    assert_eq!(out.json()["ok"], true);
    assert_eq!(out.json()["logPath"], file.display().to_string());
    let got = lines(&file);
    assert_eq!(got.len(), 1);
    let line = without_ts(&got[0]);
    assert_eq!(
        keys(&line),
        [
            "level",
            "type",
            "label",
            "msg",
            "runId",
            "processId",
            "source"
        ]
    );
    assert_eq!(line["msg"], "hello \"x\"\nmore");
    assert_eq!(line["level"], "warn");
    // No run id: `<logDir>/<type>.log`; without --json nothing is printed.
    let out = s.cmd(&["log", "--type", "hook", "--message", "m"]).ok();
    assert_eq!(out.stdout, "");
    let line = without_ts(&lines(&logs(&s).join("hooks.log"))[0]);
    assert_eq!(
        line,
        serde_json::json!({"level": "info", "type": "hook", "msg": "m"})
    );
    // BABYSITTER_LOG_DIR moves the directory.
    let dir = s.tmp.path().join("elsewhere");
    let dir_s = dir.display().to_string();
    let out = s
        .cmd_env(
            &["log", "--type", "process", "--message", "m", "--json"],
            &[("BABYSITTER_LOG_DIR", &dir_s)],
        )
        .ok();
    assert_eq!(
        out.json()["logPath"],
        dir.join("process.log").display().to_string()
    );
    assert_eq!(lines(&dir.join("process.log")).len(), 1);

    let Some(reference) = reference_cli() else {
        return; // skipped: reference_cli() recorded why
    };
    let theirs = s.cmd_ref(&reference, &FULL).ok();
    assert_eq!(theirs.json(), s.cmd(&FULL).ok().json());
    let got = lines(&file);
    assert_eq!(got.len(), 3);
    assert_eq!(without_ts(&got[1]), without_ts(&got[2]));
    // Key order too: the lines are equal once their timestamps are.
    let strip = |l: &str| l.split_once(",\"level\"").unwrap().1.to_owned();
    assert_eq!(strip(&got[1]), strip(&got[2]));
}

#[test]
fn compat_log_bad_input_is_refused_as_the_reference_does() {
    let s = Sandbox::new();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["log", "--message", "m", "--json"], "MISSING_LOG_TYPE"),
        (
            vec!["log", "--type", "trace", "--message", "m", "--json"],
            "INVALID_LOG_TYPE",
        ),
        (vec!["log", "--type", "cli", "--json"], "MISSING_MESSAGE"),
        (
            vec![
                "log",
                "--type",
                "cli",
                "--message",
                "m",
                "--level",
                "loud",
                "--json",
            ],
            "INVALID_LOG_LEVEL",
        ),
    ];
    let reference = reference_cli();
    for (argv, code) in &cases {
        let ours = s.cmd(argv).fails();
        assert_eq!(ours.code, 1);
        let err = stderr_json(&ours);
        assert_eq!(err["error"], *code, "{argv:?}");
        if let Some(r) = &reference {
            let theirs = s.cmd_ref(r, argv);
            assert_eq!(theirs.code, 1, "{argv:?}");
            assert_eq!(stderr_json(&theirs), err, "{argv:?}");
        }
        // Without --json: the reference's `Error: …` line.
        let plain: Vec<&str> = argv.iter().copied().filter(|a| *a != "--json").collect();
        let ours = s.cmd(&plain).fails();
        assert!(ours.stderr.starts_with("Error: "), "{}", ours.stderr);
        if let Some(r) = &reference {
            assert_eq!(ours.stderr, s.cmd_ref(r, &plain).stderr, "{plain:?}");
        }
    }
    assert!(!exists(logs(&s)), "nothing is written for a refused call");
    // Fixed (the reference writes `<logDir>/../escaped/cli.log`): a run id is a path segment.
    let out = s
        .cmd(&[
            "log",
            "--type",
            "cli",
            "--message",
            "m",
            "--run-id",
            "../escaped",
            "--json",
        ])
        .fails();
    assert_eq!(stderr_json(&out)["error"], "INVALID_RUN_ID");
    assert!(out.stderr.contains("../escaped"), "{}", out.stderr);
    assert!(!exists(s.tmp.path().join("home/.a5c/escaped")));
    assert!(!exists(logs(&s)));
}

#[test]
fn compat_hook_log_formats_payloads_as_the_reference_does() {
    let s = Sandbox::new();
    let payloads = [
        (
            "on-task-complete",
            r#"{"runId": 7, "effectId": "e1", "taskId": null, "status": true, "duration": 1.5}"#,
        ),
        (
            "on-breakpoint",
            r#"{"context": {"runId": "r-ctx"}, "question": "Ship?"}"#,
        ),
        (
            "pre-commit",
            r#"{"runId": "r", "files": ["a", "b"], "message": 3e21}"#,
        ),
        ("on-my-hook", r#"{"runId": "r"}"#),
        ("on-run-start", ""),
    ];
    let reference = reference_cli();
    for (hook, payload) in payloads {
        let argv = [
            "hook:log",
            "--hook-type",
            hook,
            "--log-file",
            "logs/ours.log",
            "--json",
        ];
        let ours = s.cmd_input(&argv, payload).ok().json();
        assert_eq!(ours["hookType"], hook);
        assert_eq!(
            ours["logFile"],
            s.project.join("logs/ours.log").display().to_string()
        );
        let line = ours["logLine"].as_str().unwrap().to_owned();
        assert_eq!(lines(&s.project.join("logs/ours.log")).last(), Some(&line));
        // Without --json the line itself is printed.
        let plain = s
            .cmd_input(
                &[
                    "hook:log",
                    "--hook-type",
                    hook,
                    "--log-file",
                    "logs/plain.log",
                ],
                payload,
            )
            .ok();
        assert_eq!(
            text_without_ts(plain.stdout.trim_end()),
            text_without_ts(&line)
        );
        if let Some(r) = &reference {
            let argv = [
                "hook:log",
                "--hook-type",
                hook,
                "--log-file",
                "logs/theirs.log",
                "--json",
            ];
            let theirs = s.cmd_ref_input(r, &argv, payload).ok().json();
            assert_eq!(keys(&theirs), keys(&ours));
            assert_eq!(theirs["eventLabel"], ours["eventLabel"]);
            assert_eq!(
                text_without_ts(theirs["logLine"].as_str().unwrap()),
                text_without_ts(&line),
                "{hook} {payload}"
            );
        }
    }
    let written: Vec<String> = lines(&s.project.join("logs/ours.log"))
        .iter()
        .map(|l| text_without_ts(l))
        .collect();
    assert_eq!(
        written,
        [
            "[TASK_COMPLETE] hook=on-task-complete runId=7 effectId=e1 taskId=unknown status=true duration=1.5",
            "[BREAKPOINT] hook=on-breakpoint runId=r-ctx question=Ship? reason=N/A",
            "[PRE_COMMIT] hook=pre-commit runId=r files=2 message=3e+21",
            "[ON_MY_HOOK] hook=on-my-hook runId=r",
            "[RUN_START] hook=on-run-start runId=unknown processId=unknown entry=unknown",
        ]
    );
}

/// A well-formed `hook:log` call.
const SCORE: &[&str] = &[
    "hook:log",
    "--hook-type",
    "on-score",
    "--log-file",
    "logs/x.log",
    "--json",
];

#[test]
fn compat_hook_log_bad_input_writes_nothing() {
    let s = Sandbox::new();
    let reference = reference_cli();
    let cases: [(&[&str], &str, &str); 4] = [
        (
            &["hook:log", "--log-file", "logs/x.log", "--json"],
            "{}",
            "MISSING_HOOK_TYPE",
        ),
        (
            &["hook:log", "--hook-type", "on-score", "--json"],
            "{}",
            "MISSING_LOG_FILE",
        ),
        (SCORE, "[1]", "INVALID_PAYLOAD"),
        (SCORE, "{nope", "INVALID_PAYLOAD"),
    ];
    for (argv, input, code) in cases {
        let ours = s.cmd_input(argv, input);
        assert_eq!(ours.code, 1, "{argv:?}");
        assert_eq!(stderr_json(&ours)["error"], code, "{argv:?}");
        if let Some(r) = &reference {
            let theirs = s.cmd_ref_input(r, argv, input);
            assert_eq!(theirs.code, 1, "{argv:?}");
            assert_eq!(stderr_json(&theirs)["error"], code, "{argv:?}");
        }
    }
    assert!(!exists(s.project.join("logs")));
    // A payload value cannot forge a second log line (fixed: the reference writes it raw).
    let out = s.cmd_input(
        &[
            "hook:log",
            "--hook-type",
            "on-run-fail",
            "--log-file",
            "logs/x.log",
        ],
        r#"{"runId": "r", "error": "boom\n[2026-01-01T00:00:00.000Z] [RUN_COMPLETE] forged"}"#,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let written = lines(&s.project.join("logs/x.log"));
    assert_eq!(written.len(), 1);
    assert!(written[0].contains("error=boom\\n[2026"), "{}", written[0]);
}

#[test]
fn compat_ctx_log_lines_reach_process_log_once() {
    ctx_log_once(&Sandbox::with_demo());
    // Through the warm server (whose home is the sandbox's) the same.
    let s = Sandbox::with_demo().warm();
    ctx_log_once(&s);
    assert!(
        s.warm_served() >= 2,
        "the iterations ran in the warm server"
    );
}

fn ctx_log_once(s: &Sandbox) {
    let id = s.create("logged", "processes/demo.mjs#process");
    // The demo logs `phase: starting` before its first task; iterating twice replays it.
    s.iterate(&id);
    s.iterate(&id);
    let file = logs(s).join(&id).join("process.log");
    let got: Vec<Value> = lines(&file).iter().map(|l| without_ts(l)).collect();
    assert_eq!(
        got,
        [serde_json::json!({
            "level": "info", "type": "process", "label": "phase", "msg": "starting",
            "runId": id, "processId": "golden/demo", "source": "ctx.log"
        })]
    );
    assert_eq!(
        std::fs::read_to_string(s.run_dir(&id).join("state/logSeqs.txt")).unwrap(),
        "1\n"
    );
}
