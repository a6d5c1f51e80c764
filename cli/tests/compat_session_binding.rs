//! Session binding through the real binary (spec `babysitter-core.md` §5.3.1, §6.2,
//! `adapters-and-hooks.md` §2.1): `hook:run --hook-type session-start` preparing a session,
//! `run:create` binding it (Claude Code's first iteration, `SESSION_ID_CONFLICT`, a session held by
//! a live run, auto-release of a finished one), the unified harness's bare run adopted by
//! `run:create`, and session ids that are not file names refused everywhere.

mod compat_support;

use std::path::PathBuf;

use compat_support::*;
use serde_json::Value;

const PROMPT: &str = "build the thing";

/// A sandbox with the demo process, its commands run with [`Sandbox::session_env`].
struct Session {
    s: Sandbox,
}

impl Session {
    fn state_dir(&self) -> PathBuf {
        self.s.state_dir()
    }

    fn env_file(&self) -> PathBuf {
        self.s.tmp.path().join("claude-env")
    }

    /// Our CLI with the session variables and `extra` ones.
    fn cmd(&self, args: &[&str], extra: &[(&str, &str)]) -> Out {
        self.with_input(args, "", extra)
    }

    fn session_start(&self, harness: &str, stdin: &str, extra: &[(&str, &str)]) -> Out {
        let args = [
            "hook:run",
            "--hook-type",
            "session-start",
            "--harness",
            harness,
            "--json",
        ];
        self.with_input(&args, stdin, extra)
    }

    /// [`Session::cmd`] with `stdin`.
    fn with_input(&self, args: &[&str], stdin: &str, extra: &[(&str, &str)]) -> Out {
        let vars = self.s.session_env();
        let mut env: Vec<(&str, &str)> =
            vars.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        env.extend_from_slice(extra);
        self.s.cmd_input_env(args, stdin, &env)
    }

    fn create(&self, extra_args: &[&str], env: &[(&str, &str)]) -> Out {
        let mut args = vec![
            "run:create",
            "--process-id",
            "golden/demo",
            "--entry",
            "processes/demo.mjs#process",
            "--inputs",
            "inputs.json",
            "--prompt",
            PROMPT,
            "--json",
        ];
        args.extend_from_slice(extra_args);
        self.cmd(&args, env)
    }

    fn session_file(&self, sid: &str) -> Option<String> {
        std::fs::read_to_string(self.state_dir().join(format!("{sid}.md"))).ok()
    }

    fn field(&self, sid: &str, key: &str) -> String {
        let text = self.session_file(sid).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("{key}:")))
            .unwrap_or_else(|| panic!("no {key} in {text}"));
        line[key.len() + 1..].trim().trim_matches('"').to_owned()
    }

    fn runs(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.s.runs())
            .map(|d| {
                d.filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

#[test]
fn compat_claude_code_session_start_then_run_create_binds_and_seeds_iteration_one() {
    let h = Session {
        s: Sandbox::with_demo(),
    };
    let env_file = h.env_file().display().to_string();
    let out = h
        .session_start(
            "claude-code",
            r#"{"session_id":"cc-1","hook_event_name":"SessionStart","source":"startup"}"#,
            &[("CLAUDE_ENV_FILE", &env_file)],
        )
        .ok();
    assert_eq!(out.stdout.trim(), "{}");
    assert_eq!(h.field("cc-1", "run_id"), "");
    assert_eq!(h.field("cc-1", "max_iterations"), "65000");
    assert_eq!(h.field("cc-1", "active"), "true");
    assert_eq!(
        std::fs::read_to_string(&env_file).unwrap(),
        "export AGENT_SESSION_ID=\"cc-1\"\n"
    );
    // A second start (resume, compact) keeps the file and adds no second line.
    let before = h.session_file("cc-1");
    h.session_start(
        "claude-code",
        r#"{"session_id":"cc-1","source":"compact"}"#,
        &[("CLAUDE_ENV_FILE", &env_file)],
    )
    .ok();
    assert_eq!(h.session_file("cc-1"), before);
    assert_eq!(
        std::fs::read_to_string(&env_file).unwrap().lines().count(),
        1
    );

    // The agent's run:create in that session (the env file gave it AGENT_SESSION_ID).
    let v = h
        .create(
            &["--harness", "claude-code"],
            &[("AGENT_SESSION_ID", "cc-1")],
        )
        .ok()
        .json();
    let run_id = v["runId"].as_str().unwrap().to_owned();
    assert_eq!(
        keys(&v),
        ["runId", "runDir", "entry", "session", "initialIteration"]
    );
    let session = &v["session"];
    assert_eq!(
        keys(session),
        [
            "harness",
            "sessionId",
            "stateFile",
            "resolvedFrom",
            "ancestorPid",
            "ancestorAlive"
        ]
    );
    assert_eq!(session["harness"], "claude-code");
    assert_eq!(session["sessionId"], "cc-1");
    assert_eq!(session["resolvedFrom"], "env-var");
    assert_eq!(
        session["stateFile"],
        h.state_dir().join("cc-1.md").display().to_string()
    );
    // Iteration 1 was performed: the same answer a run:iterate gives, and it is journaled.
    let first = &v["initialIteration"];
    assert_eq!(first["iteration"], 1);
    assert_eq!(first["status"], "waiting");
    let pending = h.s.pending(&run_id);
    let first_ids: Vec<&Value> = first["nextActions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["effectId"])
        .collect();
    let pending_ids: Vec<&Value> = pending.iter().map(|t| &t["effectId"]).collect();
    assert!(!pending_ids.is_empty());
    assert_eq!(first_ids, pending_ids);
    assert_eq!(
        h.s.event_types(&run_id)[..2],
        ["RUN_CREATED", "RUN_ITERATION"]
    );
    // The session now names the run, its directory and the prompt the stop hook re-injects.
    assert_eq!(h.field("cc-1", "run_id"), run_id);
    assert_eq!(
        h.field("cc-1", "run_dir"),
        h.s.run_dir(&run_id).display().to_string()
    );
    assert!(
        h.session_file("cc-1")
            .unwrap()
            .ends_with(&format!("\n{PROMPT}\n"))
    );
    let stop = h
        .cmd(&["session:state", "--session-id", "cc-1", "--json"], &[])
        .ok()
        .json();
    assert_eq!(stop["state"]["runId"], run_id.as_str());

    // A second run:create while the first run is live: the session is not taken (fatal).
    let out = h.create(
        &["--harness", "claude-code"],
        &[("AGENT_SESSION_ID", "cc-1")],
    );
    assert_eq!(out.code, 1, "{}{}", out.stdout, out.stderr);
    let v = out.json();
    assert_eq!(v["session"]["fatal"], true);
    assert!(
        v["session"]["error"]
            .as_str()
            .unwrap()
            .starts_with(&format!("Session bound to active run: {run_id}."))
    );
    assert!(v.get("initialIteration").is_none());
    assert_eq!(h.field("cc-1", "run_id"), run_id);
}

#[test]
fn compat_a_finished_run_releases_its_session_and_explicit_ids_conflict() {
    let h = Session {
        s: Sandbox::with_demo(),
    };
    // Codex detected from its own variable: its thread id is the session.
    let v = h
        .create(&[], &[("CODEX_THREAD_ID", "thread-7")])
        .ok()
        .json();
    let first = v["runId"].as_str().unwrap().to_owned();
    assert_eq!(v["session"]["harness"], "codex");
    assert_eq!(v["session"]["sessionId"], "thread-7");
    assert!(
        v.get("initialIteration").is_none(),
        "only Claude Code seeds"
    );
    assert_eq!(h.field("thread-7", "run_id"), first);
    // Finish it: the next run:create takes the session over with a fresh file.
    for _ in 0..8 {
        let it = h.s.iterate(&first);
        if it["status"] == "completed" {
            break;
        }
        for a in it["nextActions"].as_array().unwrap() {
            let value = if a["kind"] == "breakpoint" {
                r#"{"approved":true}"#
            } else {
                r#"{"ok":true}"#
            };
            h.s.post_inline(&first, a["effectId"].as_str().unwrap(), value)
                .ok();
        }
    }
    let v = h
        .create(&[], &[("CODEX_THREAD_ID", "thread-7")])
        .ok()
        .json();
    let second = v["runId"].as_str().unwrap().to_owned();
    assert!(v["session"].get("error").is_none(), "{v}");
    assert_eq!(h.field("thread-7", "run_id"), second);
    assert_eq!(h.field("thread-7", "iteration"), "1");

    // An explicit id to a harness that supplies its own: refused before anything is written.
    let runs = h.runs();
    let out = h.create(&["--harness", "claude-code", "--session-id", "mine"], &[]);
    assert_eq!(out.code, 1);
    let err: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(err["error"], "SESSION_ID_CONFLICT");
    assert_eq!(h.runs(), runs);
    assert!(h.session_file("mine").is_none());
    // Cursor takes an explicit id; no id at all is a non-fatal hint.
    let v = h
        .create(&["--harness", "cursor", "--session-id", "cur-1"], &[])
        .ok()
        .json();
    assert_eq!(h.field("cur-1", "run_id"), v["runId"].as_str().unwrap());
    let v = h.create(&["--harness", "claude-code"], &[]).ok().json();
    assert_eq!(v["session"]["sessionId"], "");
    assert!(
        v["session"]["error"]
            .as_str()
            .unwrap()
            .contains("--session-id")
    );
}

#[test]
fn compat_unified_session_start_makes_a_bare_run_that_run_create_adopts() {
    let h = Session {
        s: Sandbox::with_demo(),
    };
    let env = [("AGENT_SESSION_ID", "u-1")];
    h.session_start("unified", "", &env).ok();
    let bare = h.field("u-1", "run_id");
    assert_eq!(h.runs(), std::slice::from_ref(&bare));
    assert_eq!(
        h.field("u-1", "run_dir"),
        h.s.run_dir(&bare).display().to_string()
    );
    let meta = read_json(&h.s.run_dir(&bare).join("run.json"));
    assert_eq!(meta["processId"], "bare-run");
    assert_eq!(meta["harness"], "unified");

    // run:create in the same session and directory adopts it.
    let v = h.create(&["--harness", "unified"], &env).ok().json();
    assert_eq!(v["runId"], bare.as_str());
    assert_eq!(h.runs(), std::slice::from_ref(&bare));
    let abs = h.s.project.join("processes/demo.mjs");
    assert_eq!(v["entry"], format!("{}#process", abs.display()));
    let meta = read_json(&h.s.run_dir(&bare).join("run.json"));
    assert_eq!(meta["processId"], "golden/demo");
    assert_eq!(meta["prompt"], PROMPT);
    assert_eq!(meta["request"], "golden/demo");
    assert!(h.s.run_dir(&bare).join("inputs.json").is_file());
    assert_eq!(h.s.event_types(&bare), ["RUN_CREATED", "PROCESS_ASSIGNED"]);
    let events = h.cmd(&["run:events", &bare, "--json"], &[]).ok().json();
    let assigned = &events["events"][1]["data"];
    assert_eq!(assigned["prompt"], PROMPT);
    assert_eq!(assigned["inputsRef"], "inputs.json");
    assert_eq!(h.field("u-1", "run_id"), bare);
    assert!(
        h.session_file("u-1")
            .unwrap()
            .ends_with(&format!("\n{PROMPT}\n"))
    );
    assert_eq!(h.s.iterate(&bare)["status"], "waiting");

    // A later session start (compact, resume) keeps the live run bound.
    h.session_start("unified", "", &env).ok();
    assert_eq!(h.field("u-1", "run_id"), bare);
    assert_eq!(h.runs(), [bare]);
}

#[test]
fn compat_session_ids_that_are_not_file_names_write_nothing() {
    let h = Session {
        s: Sandbox::with_demo(),
    };
    let outside = h.s.tmp.path().join("evil.md");
    let out = h
        .session_start("claude-code", r#"{"session_id":"../evil"}"#, &[])
        .ok();
    assert_eq!(out.stdout.trim(), "{}");
    assert!(out.stderr.contains("invalid session id"), "{}", out.stderr);
    let v = h
        .create(&["--harness", "cursor", "--session-id", "../evil"], &[])
        .ok()
        .json();
    assert!(
        v["session"]["error"]
            .as_str()
            .unwrap()
            .starts_with("invalid session id")
    );
    let out = h
        .with_input(
            &[
                "hook:run",
                "--hook-type",
                "stop",
                "--harness",
                "claude-code",
                "--json",
            ],
            r#"{"session_id":"../evil","last_assistant_message":"x"}"#,
            &[],
        )
        .ok();
    assert_eq!(out.stdout.trim(), "{}");
    assert!(!outside.try_exists().unwrap());
    let written = std::fs::read_dir(h.state_dir()).map_or(0, |d| d.count());
    assert_eq!(written, 0, "nothing in the state dir");
}
