//! `hook:run --hook-type stop` and the `session:*` commands through the real binary (spec
//! `babysitter-core.md` §6.1–6.3, `adapters-and-hooks.md` §2.1): the block decision for a
//! waiting run, the approvals (max iterations, completion proof, breakpoint), the session file
//! format (F10), the `STOP_HOOK_INVOKED` event (§2.3.3 field order), malformed payloads and the
//! B20 fix (ambiguous missing-session recovery blocks with an explanation).

mod compat_support;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use compat_support::*;
use serde_json::{Value, json};

const PROMPT: &str = "build the thing\nwith care";

struct Hook {
    s: Sandbox,
}

impl Hook {
    fn new() -> Self {
        Hook {
            s: Sandbox::with_demo(),
        }
    }

    fn state_dir(&self) -> PathBuf {
        self.s.state_dir()
    }

    fn extra(&self) -> Vec<(String, String)> {
        self.s.session_env()
    }

    fn cmd(&self, args: &[&str]) -> Out {
        let extra = self.extra();
        let refs: Vec<(&str, &str)> = extra
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.s.cmd_env(args, &refs)
    }

    /// `hook:run --hook-type stop --harness claude-code --json` with `stdin`.
    fn stop(&self, stdin: &str) -> Out {
        self.stop_with(stdin, &["--harness", "claude-code"])
    }

    fn stop_with(&self, stdin: &str, args: &[&str]) -> Out {
        let mut c = Command::new(env!("CARGO_BIN_EXE_babysitter"));
        c.args(["hook:run", "--hook-type", "stop"])
            .args(args)
            .arg("--json")
            .current_dir(&self.s.project)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in self.s.env.iter().chain(self.extra().iter()) {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(stdin.as_bytes())
            // A command that fails before reading stdin closes the pipe early.
            .ok();
        let o = child.wait_with_output().unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    fn session_init(&self, sid: &str, run_id: &str, extra: &[&str]) -> Value {
        let mut args = vec![
            "session:init",
            "--session-id",
            sid,
            "--prompt",
            PROMPT,
            "--json",
        ];
        if !run_id.is_empty() {
            args.extend_from_slice(&["--run-id", run_id]);
        }
        args.extend_from_slice(extra);
        self.cmd(&args).ok().json()
    }

    fn session_file(&self, sid: &str) -> String {
        std::fs::read_to_string(self.state_dir().join(format!("{sid}.md"))).unwrap()
    }

    fn session_state(&self, sid: &str) -> Value {
        self.cmd(&["session:state", "--session-id", sid, "--json"])
            .ok()
            .json()
    }

    /// The journal's `STOP_HOOK_INVOKED` events' data, in order.
    fn stop_events(&self, id: &str) -> Vec<Value> {
        let v = self
            .s
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
            .unwrap()
            .iter()
            .map(|e| e["data"].clone())
            .collect()
    }

    /// Iterates and posts every pending effect until the run completes; returns the proof.
    fn complete(&self, id: &str) -> String {
        for _ in 0..8 {
            let it = self.s.iterate(id);
            if it["status"] == "completed" {
                return it["completionProof"].as_str().unwrap().to_owned();
            }
            for a in it["nextActions"].as_array().unwrap() {
                let value = if a["kind"] == "breakpoint" {
                    r#"{"approved":true,"response":"ok"}"#
                } else {
                    r#"{"ok":true}"#
                };
                self.s
                    .post_inline(id, a["effectId"].as_str().unwrap(), value)
                    .ok();
            }
        }
        panic!("run {id} did not complete");
    }
}

fn payload(sid: &str, last: &str) -> String {
    json!({
        "session_id": sid,
        "transcript_path": "/nonexistent/transcript.jsonl",
        "hook_event_name": "Stop",
        "stop_hook_active": false,
        "last_assistant_message": last,
    })
    .to_string()
}

fn frontmatter(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[test]
fn compat_hook_waiting_run_blocks_with_reason_and_journals_the_decision() {
    let h = Hook::new();
    let id = h.s.create("hook-wait", "processes/demo.mjs#process");
    let it = h.s.iterate(&id);
    let effect = it["nextActions"][0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();

    let init = h.session_init("sess-wait", &id, &[]);
    let state_file = h.state_dir().join("sess-wait.md");
    assert_eq!(
        init,
        json!({"stateFile": state_file.display().to_string(), "iteration": 1,
               "maxIterations": 65000, "runId": id})
    );
    // §6.2 / F10: the exact layout, trailing spaces after empty keys, no milliseconds.
    let text = h.session_file("sess-wait");
    let lines = frontmatter(&text);
    assert_eq!(
        lines[..6],
        [
            "---",
            "active: true",
            "iteration: 1",
            "max_iterations: 65000",
            "run_id: \"hook-wait\"",
            "run_ids: "
        ]
    );
    assert!(
        lines[6].starts_with("started_at: \"")
            && lines[6].len() == "started_at: \"2026-11-30T07:03:58Z\"".len(),
        "{text}"
    );
    assert!(lines[7].starts_with("last_iteration_at: \"") && lines[7].ends_with("Z\""));
    assert_eq!(
        lines[8..],
        [
            "iteration_times: ",
            "---",
            "",
            "build the thing",
            "with care"
        ]
    );
    assert!(text.ends_with("with care\n"));

    let out = h.stop(&payload("sess-wait", "I posted nothing yet")).ok();
    let v = out.json();
    assert_eq!(keys(&v), ["decision", "reason", "systemMessage"]);
    assert_eq!(v["decision"], "block");
    assert_eq!(
        v["reason"],
        format!(
            "Babysitter iteration 2 | Waiting on: agent. Check if pending effects are resolved, then call run:iterate.\n\n{PROMPT}"
        )
    );
    assert_eq!(
        v["systemMessage"],
        "\u{1F504} Babysitter iteration 2/65000 | Waiting on: agent"
    );

    let events = h.stop_events(&id);
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(
        keys(e),
        [
            "sessionId",
            "iteration",
            "decision",
            "reason",
            "runState",
            "pendingKinds",
            "hasPromise",
            "effectId",
            "hookBackoffFireCount",
            "hookBackoffDelaySeconds",
            "hookBackoffInterrupted",
            "harness",
            "timestamp"
        ]
    );
    assert_eq!(e["sessionId"], "sess-wait");
    assert_eq!(e["iteration"], 1);
    assert_eq!(e["decision"], "block");
    assert_eq!(e["reason"], "continue_loop");
    assert_eq!(e["runState"], "waiting");
    assert_eq!(e["pendingKinds"], "agent");
    assert_eq!(e["hasPromise"], false);
    assert_eq!(e["effectId"], effect.as_str());
    assert_eq!(e["hookBackoffFireCount"], 0);
    assert_eq!(e["hookBackoffDelaySeconds"], 0.01);
    assert_eq!(e["hookBackoffInterrupted"], false);
    assert_eq!(e["harness"], "claude-code");
    assert!(e["timestamp"].as_str().unwrap().ends_with('Z'));

    // The session advanced; state via session:state in camelCase.
    let st = h.session_state("sess-wait");
    assert_eq!(keys(&st), ["found", "state", "prompt", "stateFile"]);
    assert_eq!(st["found"], true);
    assert_eq!(st["prompt"], PROMPT);
    assert_eq!(
        keys(&st["state"]),
        [
            "active",
            "iteration",
            "maxIterations",
            "runId",
            "runIds",
            "startedAt",
            "lastIterationAt",
            "iterationTimes"
        ]
    );
    assert_eq!(st["state"]["iteration"], 2);
    assert_eq!(st["state"]["active"], true);

    // A second stop on the same effect: one prior fire ⇒ k = 1 (30 ms planned).
    let v = h.stop(&payload("sess-wait", "still working")).ok().json();
    assert_eq!(v["decision"], "block");
    assert!(
        v["reason"]
            .as_str()
            .unwrap()
            .starts_with("Babysitter iteration 3 |")
    );
    let events = h.stop_events(&id);
    assert_eq!(events.len(), 2);
    assert_eq!(events[1]["iteration"], 2);
    assert_eq!(events[1]["hookBackoffFireCount"], 1);
    assert_eq!(events[1]["hookBackoffDelaySeconds"], 0.03);
}

#[test]
fn compat_hook_max_iterations_reached_approves_and_deactivates() {
    let h = Hook::new();
    let id = h.s.create("hook-max", "processes/demo.mjs#process");
    h.s.iterate(&id);
    h.session_init("sess-max", &id, &["--max-iterations", "2"]);
    // Iteration 1 < 2: blocked; iteration 2 >= 2: approved.
    assert_eq!(
        h.stop(&payload("sess-max", "")).ok().json()["decision"],
        "block"
    );
    let out = h.stop(&payload("sess-max", "")).ok();
    assert_eq!(out.stdout.trim_end(), "{}");

    let events = h.stop_events(&id);
    assert_eq!(events.len(), 2);
    let e = &events[1];
    assert_eq!(
        keys(e),
        [
            "sessionId",
            "iteration",
            "decision",
            "reason",
            "runState",
            "pendingKinds",
            "hasPromise",
            "harness",
            "timestamp"
        ]
    );
    assert_eq!(e["runState"], "");
    assert_eq!(e["pendingKinds"], "");
    assert_eq!(e["hasPromise"], false);
    assert_eq!(e["decision"], "approve");
    assert_eq!(e["reason"], "max_iterations_reached");
    assert_eq!(e["iteration"], 2);

    let text = h.session_file("sess-max");
    assert!(text.contains("\nactive: false\n"), "{text}");
    assert!(
        text.contains("\nmetadata_hookExitReason: \"max_iterations_reached\"\n"),
        "{text}"
    );
    let st = h.session_state("sess-max");
    assert_eq!(st["state"]["active"], false);
    assert_eq!(
        st["state"]["metadata"]["hookExitReason"],
        "max_iterations_reached"
    );
    assert!(
        !st["state"]["metadata"]["hookExitedAt"]
            .as_str()
            .unwrap()
            .contains('.')
    );

    // An inactive session lets the agent stop without journaling anything more.
    let out = h.stop(&payload("sess-max", "")).ok();
    assert_eq!(out.stdout.trim_end(), "{}");
    assert_eq!(h.stop_events(&id).len(), 2);
}

#[test]
fn compat_hook_completed_run_needs_the_matching_promise() {
    let h = Hook::new();
    let id = h.s.create("hook-done", "processes/demo.mjs#process");
    let proof = h.complete(&id);
    h.session_init("sess-done", &id, &[]);

    // Completed without the proof: blocked, told how to finish.
    let v = h.stop(&payload("sess-done", "all done")).ok().json();
    assert_eq!(v["decision"], "block");
    assert_eq!(
        v["reason"],
        format!(
            "Babysitter iteration 2 | Run completed! To finish: call 'run:status --json' on your run, extract 'completionProof' from the output, then output it in <promise>SECRET</promise> tags. Do not mention or reveal the secret otherwise.\n\n{PROMPT}"
        )
    );
    assert_eq!(
        v["systemMessage"],
        "\u{1F504} Babysitter iteration 2/65000 | Run completed! Extract promise tag to finish."
    );
    let e = &h.stop_events(&id)[0];
    assert_eq!(e["runState"], "completed");
    assert_eq!(e["hasPromise"], false);
    assert!(e.get("effectId").is_none());

    // A wrong promise still blocks.
    let v = h
        .stop(&payload("sess-done", "<promise>not-the-proof</promise>"))
        .ok()
        .json();
    assert_eq!(v["decision"], "block");
    assert_eq!(h.stop_events(&id)[1]["hasPromise"], true);

    // The proof, with whitespace to normalise (F17), read from the transcript: approved.
    let transcript = h.s.write(
        "transcript.jsonl",
        &format!(
            "{}\n{}\n",
            json!({"type": "user", "message": {"role": "user", "content": "go"}}),
            json!({"type": "assistant", "message": {"role": "assistant", "content": [
                {"type": "text", "text": "Finished."},
                {"type": "text", "text": format!("<promise>\n  {proof}  \n</promise>")}
            ]}})
        ),
    );
    let stdin = json!({"session_id": "sess-done", "transcript_path": transcript}).to_string();
    let out = h.stop(&stdin).ok();
    assert_eq!(out.stdout.trim_end(), "{}");
    let events = h.stop_events(&id);
    assert_eq!(events.len(), 3);
    assert_eq!(events[2]["decision"], "approve");
    assert_eq!(events[2]["reason"], "completion_proof_matched");
    let st = h.session_state("sess-done");
    assert_eq!(st["state"]["active"], false);
    assert_eq!(
        st["state"]["metadata"]["hookExitReason"],
        "completion_proof_matched"
    );
}

#[test]
fn compat_hook_promise_in_last_assistant_message_approves() {
    let h = Hook::new();
    let id = h.s.create("hook-msg", "processes/demo.mjs#process");
    let proof = h.complete(&id);
    h.session_init("sess-msg", &id, &[]);
    let out = h
        .stop(&payload(
            "sess-msg",
            &format!("Done. <promise> {proof} </promise>"),
        ))
        .ok();
    assert_eq!(out.stdout.trim_end(), "{}");
    let e = &h.stop_events(&id)[0];
    assert_eq!(e["reason"], "completion_proof_matched");
    assert_eq!(e["iteration"], 1);
    assert_eq!(e["runState"], "completed");
    assert_eq!(e["hasPromise"], true);
}

#[test]
fn compat_hook_breakpoint_only_waiting_approves() {
    let h = Hook::new();
    let id = h.s.create("hook-bp", "processes/demo.mjs#process");
    // Drive to the breakpoint: plan (agent), two shells, then the breakpoint.
    for _ in 0..2 {
        let it = h.s.iterate(&id);
        for a in it["nextActions"].as_array().unwrap() {
            h.s.post_inline(&id, a["effectId"].as_str().unwrap(), r#"{"ok":true}"#)
                .ok();
        }
    }
    let it = h.s.iterate(&id);
    assert_eq!(it["reason"], "breakpoint-waiting");
    h.session_init("sess-bp", &id, &[]);
    let out = h.stop(&payload("sess-bp", "waiting for the human")).ok();
    assert_eq!(out.stdout.trim_end(), "{}");
    let e = &h.stop_events(&id)[0];
    assert_eq!(e["decision"], "approve");
    assert_eq!(e["reason"], "breakpoint_waiting");
    assert_eq!(e["runState"], "waiting");
    assert_eq!(e["pendingKinds"], "breakpoint");
    assert!(e.get("effectId").is_none());
    // The session stays active for when the human has answered.
    assert_eq!(h.session_state("sess-bp")["state"]["active"], true);
}

#[test]
fn compat_hook_malformed_stdin_is_reported_and_allows_the_stop() {
    let h = Hook::new();
    let id = h.s.create("hook-bad", "processes/demo.mjs#process");
    h.s.iterate(&id);
    h.session_init("sess-bad", &id, &[]);
    for bad in ["{not json", "[1,2]", ""] {
        let out = h.stop(bad).ok();
        assert_eq!(out.stdout.trim_end(), "{}", "{bad}");
        assert!(
            out.stderr.contains("stop-hook payload"),
            "{bad}: {}",
            out.stderr
        );
    }
    assert!(h.stop_events(&id).is_empty());
    assert_eq!(h.session_state("sess-bad")["state"]["iteration"], 1);

    // Command-line errors: exit 1 with the reference's stderr JSON.
    let mut c = Command::new(env!("CARGO_BIN_EXE_babysitter"));
    let o = c
        .args(["hook:run", "--json"])
        .current_dir(&h.s.project)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err: Value = serde_json::from_slice(&o.stderr).unwrap();
    assert_eq!(
        err,
        json!({"error": "MISSING_HOOK_TYPE", "message": "--hook-type is required for hook:run"})
    );
    let out = h.stop_with("{}", &["--hook-type", "bogus"]).fails();
    let err: Value = serde_json::from_str(&out.stderr).unwrap();
    assert_eq!(err["error"], "UNKNOWN_HOOK_TYPE");
    let out = h.stop_with("{}", &["--harness", "nope"]).fails();
    let err: Value = serde_json::from_str(&out.stderr).unwrap();
    assert_eq!(err["error"], "UNSUPPORTED_HARNESS");
    assert!(err["message"].as_str().unwrap().contains("hermes, cursor"));
    // Every harness of the reference's registry is known; one without hooks never holds the stop.
    let out = h
        .stop_with(&payload("s1", "x"), &["--harness", "hermes"])
        .ok();
    assert_eq!(out.stdout.trim(), "{}");
    // A session bound to a waiting run: Claude Code is held, Oh My Pi (no hooks) is not.
    let id = h.s.create("held", "processes/demo.mjs#process");
    assert_eq!(h.s.iterate(&id)["status"], "waiting");
    h.session_init("omp", &id, &[]);
    let out = h
        .stop_with(&payload("omp", "x"), &["--harness", "oh-my-pi"])
        .ok();
    assert_eq!(out.stdout.trim(), "{}");
    let out = h.stop(&payload("omp", "x")).ok();
    assert!(
        out.stdout.contains("\"decision\":\"block\""),
        "{}",
        out.stdout
    );
}

#[test]
fn compat_hook_no_session_allows_the_stop() {
    let h = Hook::new();
    let out = h.stop(r#"{"transcript_path":"/x"}"#).ok();
    assert_eq!(out.stdout.trim_end(), "{}");
    let out = h.stop(&payload("never-initialised", "")).ok();
    assert_eq!(out.stdout.trim_end(), "{}");
    assert!(
        !h.state_dir()
            .join("never-initialised.md")
            .try_exists()
            .unwrap()
    );
}

#[test]
fn compat_hook_missing_session_recovery_single_and_ambiguous() {
    let h = Hook::new();
    let create = |id: &str, sid: &str| {
        h.s.cmd_env(
            &[
                "run:create",
                "--process-id",
                "golden/demo",
                "--entry",
                "processes/demo.mjs#process",
                "--inputs",
                "inputs.json",
                "--run-id",
                id,
                "--prompt",
                "recovered prompt",
                "--json",
            ],
            &[("AGENT_SESSION_ID", sid)],
        )
        .ok();
        h.s.iterate(id);
    };

    // One live run claims the session: the file is recreated and the loop continues.
    create("rec-one", "sess-rec");
    let v = h.stop(&payload("sess-rec", "")).ok().json();
    assert_eq!(v["decision"], "block");
    assert_eq!(
        v["reason"],
        "Babysitter iteration 2 | Waiting on: agent. Check if pending effects are resolved, then call run:iterate.\n\nrecovered prompt"
    );
    let st = h.session_state("sess-rec");
    assert_eq!(st["state"]["runId"], "rec-one");
    let md = &st["state"]["metadata"];
    assert_eq!(md["recoveredFromMissingSessionFile"], "true");
    assert_eq!(md["missingSessionRecoverySource"], "stop-hook");
    assert_eq!(md["missingSessionRecoveryRunState"], "waiting");

    // Two live runs claim it (B20): journaled in both, blocked with an explanation.
    create("amb-a", "sess-amb");
    create("amb-b", "sess-amb");
    let out = h.stop(&payload("sess-amb", "")).ok();
    let v = out.json();
    assert_eq!(v["decision"], "block");
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.contains("amb-a, amb-b"), "{reason}");
    assert!(
        reason.contains("session:associate --session-id sess-amb"),
        "{reason}"
    );
    assert!(out.stderr.contains("2 active runs"), "{}", out.stderr);
    for id in ["amb-a", "amb-b"] {
        let e = &h.stop_events(id)[0];
        assert_eq!(e["decision"], "block");
        assert_eq!(e["reason"], "ambiguous_session_recovery");
        assert_eq!(e["candidateRunIds"], json!(["amb-a", "amb-b"]));
    }
    assert!(!h.state_dir().join("sess-amb.md").try_exists().unwrap());
}

#[test]
fn compat_hook_session_commands_errors() {
    let h = Hook::new();
    h.session_init("sess-c", "", &[]);
    // session:init twice.
    let out = h
        .cmd(&["session:init", "--session-id", "sess-c", "--json"])
        .fails();
    let err: Value = serde_json::from_str(&out.stderr).unwrap();
    assert_eq!(err["error"], "SESSION_EXISTS");
    // Missing --session-id.
    let out = h.cmd(&["session:state", "--json"]).fails();
    let err: Value = serde_json::from_str(&out.stderr).unwrap();
    assert_eq!(err["error"], "MISSING_SESSION_ID");
    // Not found.
    let v = h
        .cmd(&["session:state", "--session-id", "nope", "--json"])
        .ok()
        .json();
    assert_eq!(v["found"], false);
    let out = h
        .cmd(&[
            "session:associate",
            "--session-id",
            "nope",
            "--run-id",
            "r",
            "--json",
        ])
        .fails();
    let err: Value = serde_json::from_str(&out.stderr).unwrap();
    assert_eq!(err["error"], "SESSION_NOT_FOUND");

    // Associate an unbound session, then refuse a rebind onto a live run.
    let id = h.s.create("assoc-1", "processes/demo.mjs#process");
    h.s.iterate(&id);
    let v = h
        .cmd(&[
            "session:associate",
            "--session-id",
            "sess-c",
            "--run-id",
            &id,
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(keys(&v), ["stateFile", "runId"]);
    assert_eq!(v["runId"], id.as_str());
    let out = h
        .cmd(&[
            "session:associate",
            "--session-id",
            "sess-c",
            "--run-id",
            "other",
            "--json",
        ])
        .fails();
    let err: Value = serde_json::from_str(&out.stderr).unwrap();
    assert_eq!(err["error"], "RUN_ALREADY_ASSOCIATED");
    assert_eq!(err["existingRunId"], id.as_str());
    let out = h
        .cmd(&[
            "session:associate",
            "--session-id",
            "sess-c",
            "--run-id",
            "other",
            "--force",
            "--json",
        ])
        .fails();
    let err: Value = serde_json::from_str(&out.stderr).unwrap();
    assert_eq!(err["error"], "RUN_STILL_ACTIVE");
}

#[test]
fn compat_hook_session_update_check_iteration_last_message() {
    let h = Hook::new();
    h.session_init("sess-u", "run-u", &["--max-iterations", "7"]);
    let v = h
        .cmd(&[
            "session:update",
            "--session-id",
            "sess-u",
            "--iteration",
            "6",
            "--last-iteration-at",
            "2026-11-30T07:04:00Z",
            "--iteration-times",
            "3, x,0,12",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(keys(&v), ["success", "state", "stateFile"]);
    assert_eq!(v["success"], true);
    assert_eq!(v["state"]["iteration"], 6);
    assert_eq!(v["state"]["iterationTimes"], json!([3, 12]));
    let text = h.session_file("sess-u");
    assert!(text.contains("\niteration: 6\n"), "{text}");
    assert!(
        text.contains("\nlast_iteration_at: \"2026-11-30T07:04:00Z\"\niteration_times: 3,12\n"),
        "{text}"
    );

    let v = h
        .cmd(&[
            "session:check-iteration",
            "--session-id",
            "sess-u",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(
        keys(&v),
        [
            "found",
            "shouldContinue",
            "nextIteration",
            "updatedIterationTimes",
            "iteration",
            "maxIterations",
            "runId",
            "prompt"
        ]
    );
    assert_eq!(v["shouldContinue"], true);
    assert_eq!(v["nextIteration"], 7);
    // iteration >= 5: the seconds since last_iteration_at are appended.
    assert_eq!(v["updatedIterationTimes"].as_array().unwrap().len(), 3);
    assert_eq!(v["runId"], "run-u");
    assert_eq!(v["prompt"], PROMPT);

    h.cmd(&[
        "session:update",
        "--session-id",
        "sess-u",
        "--iteration",
        "7",
    ])
    .ok();
    let v = h
        .cmd(&[
            "session:check-iteration",
            "--session-id",
            "sess-u",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(v["shouldContinue"], false);
    assert_eq!(v["reason"], "max_iterations_reached");
    assert_eq!(v["stopMessage"], "Max iterations (7) reached");
    let v = h
        .cmd(&["session:check-iteration", "--session-id", "gone", "--json"])
        .ok()
        .json();
    assert_eq!(v["found"], false);
    assert_eq!(v["reason"], "session_not_found");

    let transcript = h.s.write(
        "t.jsonl",
        &format!(
            "{}\nnot json\n{}\n",
            json!({"type": "assistant", "message": {"role": "assistant", "content": [{"type": "text", "text": "old"}]}}),
            json!({"role": "assistant", "content": [{"type": "tool_use"}, {"type": "text", "text": "a"}, {"type": "text", "text": "b <promise> X  Y </promise>"}]})
        ),
    );
    let v = h
        .cmd(&[
            "session:last-message",
            "--transcript-path",
            transcript.to_str().unwrap(),
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(
        v,
        json!({"found": true, "text": "a\nb <promise> X  Y </promise>", "hasPromise": true, "promiseValue": "X Y"})
    );
    let v = h
        .cmd(&[
            "session:last-message",
            "--transcript-path",
            "missing.jsonl",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(
        v,
        json!({"found": false, "text": null, "hasPromise": false, "promiseValue": null, "error": "TRANSCRIPT_NOT_FOUND"})
    );
    let out = h.cmd(&["session:last-message", "--json"]).fails();
    assert_eq!(
        out.stderr,
        "{\"error\":\"MISSING_TRANSCRIPT_PATH\",\"message\":\"--transcript-path is required for session:last-message\"}\n"
    );
}
