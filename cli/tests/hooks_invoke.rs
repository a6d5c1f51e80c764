//! `babysitter hooks:invoke` through the real binary, over native payloads of each harness
//! (`tests/fixtures/hooks/native_payloads.json`): the session start binds the session, a stop
//! while the bound run is unfinished is blocked in the harness's own format (and journaled), a
//! stop after the run completed with the completion proof in the agent's last message is let
//! through, and every kind of bad input — an unknown harness, another harness's payload, a
//! payload that is not JSON, a hook past its time limit, no binary on PATH — is one line on
//! stderr and the harness's "allow", exit 0.

mod compat_support;

use std::path::Path;

use compat_support::*;
use serde_json::{Value, json};

fn payloads() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/hooks/native_payloads.json");
    read_json(&p)
}

/// The recorded payload of `harness`'s `event`, its placeholders filled.
fn payload(harness: &str, event: &str, sid: &str, cwd: &Path, last: &str) -> String {
    let v = payloads()[harness][event].clone();
    assert!(v.is_object(), "no fixture for {harness} {event}");
    v.to_string()
        .replace("{{SID}}", sid)
        .replace("{{CWD}}", &cwd.display().to_string())
        .replace("{{LAST}}", last)
}

struct Case {
    harness: &'static str,
    start: &'static str,
    stop: &'static str,
    phase: &'static str,
}

const CASES: &[Case] = &[
    Case {
        harness: "claude-code",
        start: "SessionStart",
        stop: "Stop",
        phase: "turn.stop",
    },
    Case {
        harness: "codex",
        start: "SessionStart",
        stop: "Stop",
        phase: "turn.stop",
    },
    Case {
        harness: "gemini-cli",
        start: "SessionStart",
        stop: "AfterAgent",
        phase: "turn.after_agent",
    },
    Case {
        harness: "cursor",
        start: "sessionStart",
        stop: "stop",
        phase: "turn.stop",
    },
    Case {
        harness: "opencode",
        start: "session.created",
        stop: "session.idle",
        phase: "session.idle",
    },
    Case {
        harness: "pi",
        start: "session_start",
        stop: "agent_end",
        phase: "turn.after_agent",
    },
];

fn invoke(s: &Sandbox, harness: &str, phase: &str, input: &str) -> Out {
    let extra = s.session_env();
    let refs: Vec<(&str, &str)> = extra
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    s.cmd_input_env(
        &["hooks:invoke", "--harness", harness, "--phase", phase],
        input,
        &refs,
    )
}

/// Binds session `sid` to run `id` with `verb` (`session:init` for a new session file,
/// `session:associate` for the one a session start made), in the stop-hook environment.
fn bind(s: &Sandbox, verb: &str, sid: &str, id: &str) {
    let extra = s.session_env();
    let refs: Vec<(&str, &str)> = extra
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    s.cmd_env(
        &[
            verb,
            "--session-id",
            sid,
            "--run-id",
            id,
            "--prompt",
            "do it",
            "--json",
        ],
        &refs,
    )
    .ok();
}

fn stop_decisions(s: &Sandbox, id: &str) -> Vec<String> {
    let v = s
        .cmd(&[
            "run:events",
            id,
            "--json",
            "--filter-type",
            "STOP_HOOK_INVOKED",
        ])
        .ok()
        .json();
    v["events"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|e| {
                    format!(
                        "{}:{}",
                        e["data"]["harness"].as_str().unwrap_or("?"),
                        e["data"]["decision"].as_str().unwrap_or("?")
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn complete(s: &Sandbox, id: &str) -> String {
    for _ in 0..8 {
        let it = s.iterate(id);
        if it["status"] == "completed" {
            return it["completionProof"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
        }
        for a in it["nextActions"].as_array().cloned().unwrap_or_default() {
            let value = if a["kind"] == "breakpoint" {
                r#"{"approved":true,"response":"ok"}"#
            } else {
                r#"{"ok":true}"#
            };
            s.post_inline(id, a["effectId"].as_str().unwrap_or_default(), value)
                .ok();
        }
    }
    panic!("run {id} did not complete");
}

#[test]
fn each_harness_is_held_while_its_run_is_unfinished_and_let_go_with_the_proof() {
    for case in CASES {
        let s = Sandbox::with_demo();
        let sid = format!("sess-{}", case.harness.replace('-', ""));
        let id = s.create(
            &format!("run-{}", case.harness),
            "processes/demo.mjs#process",
        );
        s.iterate(&id);

        // Session start: the session file is created for this session id.
        let start = payload(case.harness, case.start, &sid, &s.project, "");
        let out = invoke(&s, case.harness, "session.start", &start);
        assert_eq!(out.code, 0, "{}: {}", case.harness, out.stderr);
        assert_eq!(out.stdout.trim(), "{}", "{}: {}", case.harness, out.stderr);
        assert!(
            s.state_dir().join(format!("{sid}.md")).is_file(),
            "{}: session start wrote no session file ({})",
            case.harness,
            out.stderr
        );
        // Bind the session to the run, as run:create does inside the harness.
        bind(&s, "session:associate", &sid, &id);

        // A stop while the run waits: blocked, in the harness's format.
        let stop = payload(case.harness, case.stop, &sid, &s.project, "I am done");
        let out = invoke(&s, case.harness, case.phase, &stop);
        assert_eq!(out.code, 0, "{}: {}", case.harness, out.stderr);
        let v: Value = serde_json::from_str(out.stdout.trim())
            .unwrap_or_else(|e| panic!("{}: stdout {:?}: {e}", case.harness, out.stdout));
        if case.harness == "cursor" {
            let follow = v["followup_message"].as_str().unwrap_or_default();
            assert!(follow.contains("Babysitter iteration"), "cursor: {v}");
            assert_eq!(v.as_object().map(|m| m.len()), Some(1), "cursor: {v}");
        } else {
            assert_eq!(v["decision"], "block", "{}: {v}", case.harness);
            assert!(
                v["reason"].as_str().is_some_and(|r| !r.is_empty()),
                "{}: {v}",
                case.harness
            );
            assert!(v["systemMessage"].is_string(), "{}: {v}", case.harness);
        }
        assert_eq!(
            stop_decisions(&s, &id),
            vec![format!("{}:block", case.harness)],
            "{}",
            case.harness
        );

        // The run completes; the agent ends with the proof: let through (Cursor sends no last
        // message, so it has no proof to show).
        if case.harness == "cursor" {
            continue;
        }
        let proof = complete(&s, &id);
        let last = format!("All done. <promise>{proof}</promise>");
        let stop = payload(case.harness, case.stop, &sid, &s.project, &last);
        let out = invoke(&s, case.harness, case.phase, &stop);
        assert_eq!(out.stdout.trim(), "{}", "{}: {}", case.harness, out.stderr);
        assert_eq!(
            stop_decisions(&s, &id).last().map(String::as_str),
            Some(format!("{}:approve", case.harness).as_str()),
            "{}",
            case.harness
        );
    }
}

#[test]
fn the_payload_names_the_event_and_the_phase_flag_only_fills_in() {
    let s = Sandbox::with_demo();
    // A Claude Code SessionEnd carries `reason` (the reference took it for a Stop, quirk H1):
    // with the payload's hook_event_name it is a session end, observed and allowed, nothing
    // journaled.
    let id = s.create("run-end", "processes/demo.mjs#process");
    s.iterate(&id);
    bind(&s, "session:init", "sess-end", &id);
    let end = payload("claude-code", "SessionEnd", "sess-end", &s.project, "");
    let out = invoke(&s, "claude-code", "turn.stop", &end);
    assert_eq!(out.stdout.trim(), "{}");
    assert!(
        out.stderr.contains("following the payload"),
        "{}",
        out.stderr
    );
    assert!(stop_decisions(&s, &id).is_empty());

    // PreToolUse of a simple git command: Claude Code's hookSpecificOutput rewrite.
    let pre = payload("claude-code", "PreToolUse", "sess-end", &s.project, "");
    let out = invoke(&s, "claude-code", "tool.before", &pre);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    assert_eq!(
        v["hookSpecificOutput"]["hookEventName"], "PreToolUse",
        "{}",
        out.stdout
    );
    assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "allow");
    assert_eq!(
        v["hookSpecificOutput"]["updatedInput"]["command"],
        "babysitter compress-output git status"
    );
    // The same rewrite has no native form in Gemini CLI: allow, unchanged.
    let gem = json!({"session_id": "x", "hook_event_name": "BeforeTool", "tool_name": "run_shell_command", "tool_input": {"command": "git status"}});
    let out = invoke(&s, "gemini-cli", "tool.before", &gem.to_string());
    assert_eq!(out.stdout.trim(), "{}");

    // No event name anywhere: refused, allowed.
    let out = s.cmd_input(&["hooks:invoke", "--harness", "claude-code"], "{}");
    assert_eq!(out.stdout.trim(), "{}");
    assert!(
        out.stderr
            .contains("neither the payload's hook_event_name nor --phase"),
        "{}",
        out.stderr
    );
}

#[test]
fn bad_input_is_a_message_on_stderr_and_an_allow() {
    let s = Sandbox::with_demo();
    let stop = payload("claude-code", "Stop", "sess-bad", &s.project, "x");
    for (args, input, says) in [
        (
            vec![
                "hooks:invoke",
                "--harness",
                "copilot",
                "--phase",
                "turn.stop",
            ],
            stop.clone(),
            "unknown harness \"copilot\"",
        ),
        (
            vec![
                "hooks:invoke",
                "--harness",
                "gemini-cli",
                "--phase",
                "turn.after_agent",
            ],
            stop,
            "\"Stop\" is not a Gemini CLI event (it looks like a claude-code or codex payload)",
        ),
        (
            vec![
                "hooks:invoke",
                "--harness",
                "claude-code",
                "--phase",
                "turn.stop",
            ],
            "{not json".to_owned(),
            "the payload on stdin is not JSON",
        ),
        (
            vec![
                "hooks:invoke",
                "--harness",
                "claude-code",
                "--phase",
                "turn.stop",
            ],
            "[1,2]".to_owned(),
            "JSON but not an object",
        ),
        (
            vec![
                "hooks:invoke",
                "--harness",
                "claude-code",
                "--phase",
                "lunch",
            ],
            "{}".to_owned(),
            "--phase \"lunch\" is neither a phase nor a Claude Code event",
        ),
    ] {
        let out = s.cmd_input(&args, &input);
        assert_eq!(out.code, 0, "{args:?}: {}", out.stderr);
        assert_eq!(out.stdout.trim(), "{}", "{args:?}");
        assert!(
            out.stderr.contains(says),
            "{args:?}: stderr {:?}",
            out.stderr
        );
        assert!(
            out.stderr.contains("allowing"),
            "{args:?}: {:?}",
            out.stderr
        );
    }
}

#[test]
fn a_hook_past_its_time_limit_allows_and_says_so() {
    let s = Sandbox::with_demo();
    let id = s.create("run-slow", "processes/demo.mjs#process");
    s.iterate(&id);
    let mut extra = s.session_env();
    // The stop hook backs off 60 s on the waiting effect; the limit is 300 ms.
    extra.retain(|(k, _)| k != "BABYSITTER_HOOK_BACKOFF_BASE");
    extra.push(("BABYSITTER_HOOK_BACKOFF_BASE".into(), "60".into()));
    let refs: Vec<(&str, &str)> = extra
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    s.cmd_env(
        &[
            "session:init",
            "--session-id",
            "sess-slow",
            "--run-id",
            &id,
            "--prompt",
            "p",
            "--json",
        ],
        &refs,
    )
    .ok();
    let stop = payload("claude-code", "Stop", "sess-slow", &s.project, "x");
    let out = s.cmd_input_env(
        &[
            "hooks:invoke",
            "--harness",
            "claude-code",
            "--phase",
            "turn.stop",
            "--timeout-ms",
            "300",
        ],
        &stop,
        &refs,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.trim(), "{}");
    assert!(
        out.stderr
            .contains("did not answer within 300 ms; allowing"),
        "{}",
        out.stderr
    );
}

#[test]
fn the_shim_without_a_babysitter_binary_allows_and_says_why() {
    let s = Sandbox::new();
    let shim = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../plugins/babysitter/hooks/babysitter-hook.sh");
    let out = std::process::Command::new("/bin/sh")
        .arg(&shim)
        .args(["claude-code", "turn.stop"])
        .env_clear()
        .env("PATH", "/nonexistent")
        .env("HOME", s.tmp.path())
        .current_dir(&s.project)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("sh: {e}"));
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "{}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no babysitter binary"), "{err}");

    // With the binary named, the shim is one call of hooks:invoke.
    let out = std::process::Command::new("/bin/sh")
        .arg(&shim)
        .args(["nope", "turn.stop"])
        .env_clear()
        .env("PATH", "/nonexistent")
        .env("BABYSITTER_BIN", env!("CARGO_BIN_EXE_babysitter"))
        .env("HOME", s.tmp.path())
        .current_dir(&s.project)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("sh: {e}"));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "{}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("hooks:invoke: unknown harness \"nope\"")
    );
}

#[test]
fn extra_handlers_see_the_unified_event_and_their_answers_merge() {
    let s = Sandbox::with_demo();
    let seen = s.tmp.path().join("seen.json");
    let record = format!("cat > '{}'; echo '{{}}'", seen.display());
    let deny = r#"echo '{"decision":"deny","reason":"no git here"}'"#;
    let ctx_a = r#"echo '{"additionalContext":"first"}'"#;
    let ctx_b = r#"echo '{"additionalContext":"second","systemMessage":"hello"}'"#;
    let broken = "echo nope >&2; exit 3";

    // PreToolUse: babysitter rewrites `git status`, a handler denies it: the denial wins.
    let pre = payload("claude-code", "PreToolUse", "sess-h", &s.project, "");
    let out = s.cmd_input(
        &[
            "hooks:invoke",
            "--harness",
            "claude-code",
            "--phase",
            "tool.before",
            "--handler",
            &record,
            "--handler",
            deny,
            "--handler",
            broken,
        ],
        &pre,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    assert_eq!(v["hookSpecificOutput"]["permissionDecision"], "deny", "{v}");
    assert_eq!(
        v["hookSpecificOutput"]["permissionDecisionReason"],
        "babysitter output compression\n---\nno git here"
    );
    assert!(
        out.stderr.contains("failed (exit status: 3); ignored"),
        "{}",
        out.stderr
    );
    // What the first handler was given: the a5c.hooks.v1 event.
    let e = read_json(&seen);
    assert_eq!(e["version"], "a5c.hooks.v1");
    assert_eq!(e["adapter"], "claude-code");
    assert_eq!(e["phase"], "tool.before");
    assert_eq!(e["rawEventName"], "PreToolUse");
    assert_eq!(e["execution"]["sessionId"], "sess-h");
    assert_eq!(e["payload"]["toolInput"]["command"], "git status");
    assert!(
        e["raw"]
            .as_str()
            .is_some_and(|r| r.contains("toolu_90d38211660f43b19708"))
    );

    // SessionStart: two handlers' context, joined, as Claude Code's additionalContext.
    let start = payload("claude-code", "SessionStart", "sess-h", &s.project, "");
    let out = s.cmd_input_env(
        &[
            "hooks:invoke",
            "--harness",
            "claude-code",
            "--phase",
            "session.start",
            "--handler",
            ctx_a,
            "--handler",
            ctx_b,
        ],
        &start,
        &[("BABYSITTER_STATE_DIR", &s.state_dir().display().to_string())],
    );
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    assert_eq!(
        v["hookSpecificOutput"]["additionalContext"], "first\n---\nsecond",
        "{v}"
    );
    assert_eq!(v["systemMessage"], "hello");

    // A stop babysitter blocks stays blocked whatever another handler allows.
    let id = s.create("run-h", "processes/demo.mjs#process");
    s.iterate(&id);
    bind(&s, "session:init", "sess-h2", &id);
    let extra = s.session_env();
    let refs: Vec<(&str, &str)> = extra
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let stop = payload("claude-code", "Stop", "sess-h2", &s.project, "done?");
    let allow = r#"echo '{"decision":"allow"}'"#;
    let out = s.cmd_input_env(
        &[
            "hooks:invoke",
            "--harness",
            "claude-code",
            "--phase",
            "turn.stop",
            "--handler",
            allow,
        ],
        &stop,
        &refs,
    );
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap_or(Value::Null);
    assert_eq!(v["decision"], "block", "{v}");
}
