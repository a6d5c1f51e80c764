//! The warm server (`babysitter warm serve`) beside other writers: runs it drives meet local
//! commands and the reference's kind of outside changes and still come out exactly as a run
//! driven only by local calls; without a server, commands run locally; `BABYSITTER_WARM=1`
//! starts one on first use. (The compatibility scenarios run through it too, in
//! `compat_scenario.rs`.)

mod compat_support;

use compat_support::*;
use serde_json::Value;

const SEQ: &str = "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
export const step = defineTask('warm.step', (args) => ({ kind: 'node', title: 'step ' + args.i, node: { entry: 'noop.js' } }));\n\
export async function process(inputs, ctx) { let sum = 0; for (let i = 0; i < 6; i++) { const r = await ctx.task(step, { i }); sum += r.value * (i + 1); } return { sum }; }\n";

/// Run `id` of the sequential process.
fn seq_run(s: &Sandbox, id: &str) {
    s.write("processes/seq.mjs", SEQ);
    s.write("inputs.json", "{}");
    s.create(id, "processes/seq.mjs#process");
}

/// Forces a command to run locally even in a warm sandbox.
const LOCAL: &[(&str, &str)] = &[("BABYSITTER_WARM_SOCKET", "")];

/// Drives the sequential process to completion; step `i` is posted with value `i + 1`. For
/// `local_steps`, that step's post and the following iterate run locally (another writer).
fn drive(s: &Sandbox, id: &str, local_steps: &[usize]) -> (Value, Vec<String>) {
    seq_run(s, id);
    let mut last = s.iterate(id);
    for step in 0..6 {
        assert_eq!(last["status"], "waiting", "step {step}: {last}");
        let pending = s.pending(id);
        assert_eq!(pending.len(), 1, "step {step}");
        let effect = pending[0]["effectId"].as_str().unwrap().to_owned();
        let extra: &[(&str, &str)] = if local_steps.contains(&step) {
            LOCAL
        } else {
            &[]
        };
        let value = format!("{{\"value\": {}}}", step + 1);
        s.cmd_env(
            &[
                "task:post",
                id,
                &effect,
                "--status",
                "ok",
                "--value-inline",
                &value,
                "--json",
            ],
            extra,
        )
        .ok();
        last = s.cmd_env(&["run:iterate", id, "--json"], extra).ok().json();
    }
    (last, s.event_types(id))
}

#[test]
fn a_warm_run_meets_local_writers_and_ends_like_a_local_run() {
    let local = Sandbox::new();
    let (done_local, events_local) = drive(&local, "seq-local", &[]);
    assert_eq!(done_local["status"], "completed", "{done_local}");

    let warm = Sandbox::new().warm();
    // Steps 2 and 4: another process posts and iterates (a new effect the warm session did not
    // request: it must replay cold, not continue blind).
    let (done_warm, events_warm) = drive(&warm, "seq-warm", &[2, 4]);
    assert_eq!(done_warm["status"], "completed", "{done_warm}");
    assert_eq!(events_warm, events_local, "same journal, event for event");
    let status = warm.cmd(&["run:status", "seq-warm", "--json"]).ok().json();
    assert_eq!(status["state"], "completed", "{status}");
    assert!(status["completionProof"].is_string(), "{status}");
    // 1·1 + 2·2 + … + 6·6 = 91, as the process computed it from the posted values.
    let out = read_json(&warm.run_dir("seq-warm").join("state/output.json"));
    assert_eq!(out["sum"], 91, "{out}");
    assert!(
        warm.warm_served() >= 12,
        "the warm steps went through the server"
    );
}

#[test]
fn without_a_server_commands_run_locally() {
    let s = Sandbox::new();
    seq_run(&s, "no-server");
    let gone = s.tmp.path().join("nowhere").join("warm.sock");
    let out = s
        .cmd_env(
            &["run:iterate", "no-server", "--json"],
            &[("BABYSITTER_WARM_SOCKET", &gone.display().to_string())],
        )
        .ok()
        .json();
    assert_eq!(out["status"], "waiting", "{out}");
    assert!(
        !gone.try_exists().unwrap(),
        "a configured socket alone starts nothing"
    );
}

#[test]
fn babysitter_warm_1_starts_a_server_on_first_use() {
    let s = Sandbox::new();
    seq_run(&s, "auto");
    let xdg = s.tmp.path().join("xdg");
    std::fs::create_dir_all(&xdg).unwrap();
    let xdg_s = xdg.display().to_string();
    let env: &[(&str, &str)] = &[("BABYSITTER_WARM", "1"), ("XDG_RUNTIME_DIR", &xdg_s)];
    // First call: runs locally and starts the server in the background.
    let first = s
        .cmd_env(&["run:iterate", "auto", "--json"], env)
        .ok()
        .json();
    assert_eq!(first["status"], "waiting");
    let pid_file = xdg.join("babysitter").join("warm.pid");
    let socket = xdg.join("babysitter").join("warm.sock");
    wait_until("the auto-started server", || {
        std::os::unix::net::UnixStream::connect(&socket).is_ok()
    });
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Stopped by its pid, also when an assertion below fails.
    struct Stop(i32);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = std::process::Command::new("kill")
                .arg(self.0.to_string())
                .status();
        }
    }
    let server = Stop(pid);
    let status = s
        .cmd_env(&["run:status", "auto", "--json"], env)
        .ok()
        .json();
    assert_eq!(status["state"], "waiting", "{status}");
    let report = s.cmd_env(&["warm", "status"], env).ok();
    assert!(
        report.stdout.contains("served: 1 commands"),
        "{}",
        report.stdout
    );
    drop(server);
    wait_until("the server to stop", || {
        !socket.try_exists().unwrap_or(true)
    });
}

#[test]
fn concurrent_clients_are_served_one_command_at_a_time() {
    let s = Sandbox::new().warm();
    seq_run(&s, "conc");
    s.iterate("conc");
    let outs: Vec<Out> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| scope.spawn(|| s.cmd(&["run:iterate", "conc", "--json"])))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for o in outs {
        let v = o.ok().json();
        assert_eq!(v["status"], "waiting", "{v}");
    }
    // Nine iterations, each journaled once, one pending effect.
    let events = s.event_types("conc");
    assert_eq!(
        events.iter().filter(|t| *t == "RUN_ITERATION").count(),
        9,
        "{events:?}"
    );
    assert_eq!(s.pending("conc").len(), 1);
    assert!(s.warm_served() >= 9);
}

/// The server writes a command's state cache after answering, and before its next request: by
/// the time it answers again, `state/state.json` describes the journal's head.
#[test]
fn the_state_cache_is_current_before_the_next_request() {
    let s = Sandbox::new().warm();
    seq_run(&s, "cache");
    s.iterate("cache");
    let effect = s.pending("cache")[0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();
    s.post_inline("cache", &effect, "{\"value\": 1}").ok();
    s.warm_served();
    let state = read_json(&s.run_dir("cache").join("state/state.json"));
    assert_eq!(
        state["journalHead"]["seq"].as_u64(),
        Some(s.journal_len("cache") as u64),
        "{state}"
    );
    assert_eq!(
        state["stateVersion"].as_u64(),
        Some(s.journal_len("cache") as u64)
    );
}
