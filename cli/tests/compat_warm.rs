//! The warm server (`babysitter warm serve`) beside other writers: runs it drives meet local
//! commands and the reference's kind of outside changes and still come out exactly as a run
//! driven only by local calls; without a server, commands run locally; by default this build's
//! server starts on first use (or at `run:create`) and serves that use; a busy server never makes a client wait; a served command sees
//! the client's environment, per-user files and log level. (The compatibility scenarios run
//! through it too, in `compat_scenario.rs`.)

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

/// Stops a server by its pid, also when an assertion fails.
struct Stop(i32);
impl Drop for Stop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .arg(self.0.to_string())
            .status();
    }
}

/// The auto-started servers under `xdg`: (socket, pid), once each listens.
fn servers_in(xdg: &std::path::Path, count: usize) -> Vec<(std::path::PathBuf, i32)> {
    let dir = xdg.join("babysitter");
    let sockets = || -> Vec<std::path::PathBuf> {
        let mut v: Vec<_> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "sock"))
            .collect();
        v.sort();
        v
    };
    wait_until("the auto-started servers", || {
        let s = sockets();
        s.len() == count
            && s.iter()
                .all(|p| std::os::unix::net::UnixStream::connect(p).is_ok())
    });
    sockets()
        .into_iter()
        .map(|sock| {
            let pid = std::fs::read_to_string(sock.with_extension("pid"))
                .unwrap()
                .trim()
                .parse()
                .unwrap();
            (sock, pid)
        })
        .collect()
}

/// `warm status` of the server `env` leads to reports `n` commands served.
fn assert_served(s: &Sandbox, env: &[(&str, &str)], n: usize, why: &str) {
    let report = s.cmd_env(&["warm", "status"], env).ok();
    assert!(
        report.stdout.contains(&format!("served: {n} commands")),
        "{why}: {}",
        report.stdout
    );
}

#[test]
fn by_default_this_builds_server_starts_on_first_use() {
    let s = Sandbox::new();
    seq_run(&s, "auto");
    let xdg = s.tmp.path().join("xdg");
    std::fs::create_dir_all(&xdg).unwrap();
    let xdg_s = xdg.display().to_string();
    // The sandbox turns the server off; an empty BABYSITTER_WARM is the default.
    let env: &[(&str, &str)] = &[("BABYSITTER_WARM", ""), ("XDG_RUNTIME_DIR", &xdg_s)];
    // First call: starts the server and, once it listens, has it run the command.
    let first = s
        .cmd_env(&["run:iterate", "auto", "--json"], env)
        .ok()
        .json();
    assert_eq!(first["status"], "waiting");
    let (socket, pid) = servers_in(&xdg, 1).remove(0);
    let server = Stop(pid);
    let name = socket.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("warm-") && name.len() == "warm-.sock".len() + 16,
        "{name}"
    );
    let status = s
        .cmd_env(&["run:status", "auto", "--json"], env)
        .ok()
        .json();
    assert_eq!(status["state"], "waiting", "{status}");
    assert_served(
        &s,
        env,
        2,
        "the first call and the next went to the server it started",
    );
    // What it reports goes to a private log beside its socket: here, a request it cannot read.
    let log = socket.with_extension("log");
    {
        use std::io::Write as _;
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&log).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", log.display());
        let mut c = std::os::unix::net::UnixStream::connect(&socket).unwrap();
        c.write_all(&[0, 0, 0, 9]).unwrap();
        c.write_all(b"not json!").unwrap();
    }
    wait_until("the server's complaint in its log", || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("bad request"))
    });
    // Another build of babysitter (here: the same program in another file) never talks to
    // this server: it starts one of its own.
    let copy = s.tmp.path().join("babysitter-copy");
    std::fs::copy(env!("CARGO_BIN_EXE_babysitter"), &copy).unwrap();
    let other = s
        .exec(&copy, &["run:status", "auto", "--json"], env)
        .ok()
        .json();
    assert_eq!(other["state"], "waiting", "{other}");
    // The copy's own server (the first is stopped by `server`).
    let others: Vec<Stop> = servers_in(&xdg, 2)
        .into_iter()
        .filter(|(sock, _)| *sock != socket)
        .map(|(_, pid)| Stop(pid))
        .collect();
    assert_eq!(others.len(), 1);
    assert_served(
        &s,
        env,
        2,
        "the copy's call did not go to this build's server",
    );
    drop(others);
    drop(server);
    wait_until("the servers to stop", || {
        std::fs::read_dir(xdg.join("babysitter"))
            .unwrap()
            .filter_map(Result::ok)
            .all(|e| e.path().extension().is_none_or(|x| x != "sock"))
    });
}

/// `run:create` begins a run loop: it starts this build's server (when none runs), so the
/// loop's first command is served; with the server off or named by hand it starts none.
#[test]
fn run_create_starts_the_server_for_the_loop() {
    let s = Sandbox::new();
    s.write("processes/seq.mjs", SEQ);
    s.write("inputs.json", "{}");
    let xdg = s.tmp.path().join("xdg");
    std::fs::create_dir_all(&xdg).unwrap();
    let xdg_s = xdg.display().to_string();
    let create = |id: &str, env: &[(&str, &str)]| {
        s.create_env(id, "processes/seq.mjs#process", env);
    };
    // Off, or a socket named by hand: nothing is started.
    create("off", &[("XDG_RUNTIME_DIR", &xdg_s)]);
    let named = s.tmp.path().join("named").join("warm.sock");
    create(
        "named",
        &[
            ("BABYSITTER_WARM", ""),
            ("XDG_RUNTIME_DIR", &xdg_s),
            ("BABYSITTER_WARM_SOCKET", &named.display().to_string()),
        ],
    );
    assert!(!xdg.join("babysitter").try_exists().unwrap());
    assert!(!named.try_exists().unwrap());
    // By default: the server comes up and serves the loop from its first command.
    let env: &[(&str, &str)] = &[("BABYSITTER_WARM", ""), ("XDG_RUNTIME_DIR", &xdg_s)];
    create("auto", env);
    let (_, pid) = servers_in(&xdg, 1).remove(0);
    let _server = Stop(pid);
    let it = s
        .cmd_env(&["run:iterate", "auto", "--json"], env)
        .ok()
        .json();
    assert_eq!(it["status"], "waiting", "{it}");
    assert_served(&s, env, 1, "the loop's first command was served");
}

#[test]
fn concurrent_clients_all_get_their_answer_once() {
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
    // Nine iterations (served, or run locally while the server was busy), each journaled once,
    // one pending effect.
    let events = s.event_types("conc");
    assert_eq!(
        events.iter().filter(|t| *t == "RUN_ITERATION").count(),
        9,
        "{events:?}"
    );
    assert_eq!(s.pending("conc").len(), 1);
    assert!(s.warm_served() >= 2);
}

const WARNS: &str = "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
export const step = defineTask('warm.step', (args) => ({ kind: 'node', title: 'step ' + args.i, node: { entry: 'noop.js' } }));\n\
export async function process(inputs, ctx) { for (let i = 0; i < 3; i++) { const r = await ctx.task(step, { i }); console.warn('got ' + r.value); } return {}; }\n";

/// A command the server is running holds up nobody: while one client's `run:iterate` waits in
/// a hook, another client's command is answered (run locally). The hook sees the environment of
/// the client whose command it belongs to, not the server's.
#[test]
fn a_slow_command_holds_up_no_other_client_and_hooks_get_the_clients_environment() {
    let s = Sandbox::new().warm();
    seq_run(&s, "slow");
    seq_run(&s, "other");
    s.write(
        ".a5c/hooks/on-iteration-start/wait.sh",
        "echo \"$CLIENT_MARK\" > hook-env.txt\ntouch started\n\
         i=0; while [ ! -e release ] && [ $i -lt 2400 ]; do sleep 0.05; i=$((i+1)); done\n",
    );
    let before = s.warm_served();
    std::thread::scope(|scope| {
        let slow = scope.spawn(|| {
            s.cmd_env(
                &["run:iterate", "slow", "--json"],
                &[
                    ("CLIENT_MARK", "from-the-client"),
                    ("BABYSITTER_HOOK_TIMEOUT", "300000"),
                ],
            )
        });
        wait_until("the hook to start", || {
            s.project.join("started").try_exists().unwrap()
        });
        let listed = s.cmd(&["task:list", "other", "--json"]).ok().json();
        assert!(listed["tasks"].is_array(), "{listed}");
        assert!(!slow.is_finished(), "the slow command is still in its hook");
        s.write("release", "");
        let it = slow.join().unwrap().ok().json();
        assert_eq!(it["status"], "waiting", "{it}");
    });
    assert_eq!(
        std::fs::read_to_string(s.project.join("hook-env.txt"))
            .unwrap()
            .trim(),
        "from-the-client"
    );
    assert_eq!(
        s.warm_served(),
        before + 1,
        "the slow command was served; the other ran locally"
    );
}

/// What a served command logs reaches its client's stderr, at the client's level; `ctx.log`
/// lines go to the client's log directory, not the server's.
#[test]
fn a_served_command_logs_to_its_client_and_writes_the_clients_files() {
    let s = Sandbox::new().warm();
    s.write("processes/warns.mjs", WARNS);
    s.write("inputs.json", "{}");
    s.create("warns", "processes/warns.mjs#process");
    s.iterate("warns");
    let post = |i: usize| {
        let effect = s.pending("warns")[0]["effectId"]
            .as_str()
            .unwrap()
            .to_owned();
        s.post_inline("warns", &effect, &format!("{{\"value\": {i}}}"))
            .ok();
    };
    post(1);
    let out = s.cmd(&["run:iterate", "warns", "--json"]).ok();
    assert!(out.stderr.contains("got 1"), "{}", out.stderr);
    post(2);
    let quiet = s
        .cmd_env(
            &["run:iterate", "warns", "--json"],
            &[("BABYSITTER_LOG_LEVEL", "error")],
        )
        .ok();
    assert!(!quiet.stderr.contains("got 2"), "{}", quiet.stderr);
    assert!(s.warm_served() >= 4, "the iterations were served");

    let demo = Sandbox::with_demo().warm();
    let id = demo.create("logged", "processes/demo.mjs#process");
    let mine = demo.tmp.path().join("client-logs");
    demo.cmd_env(
        &["run:iterate", &id, "--json"],
        &[("BABYSITTER_LOG_DIR", &mine.display().to_string())],
    )
    .ok();
    assert!(
        mine.join(&id).join("process.log").is_file(),
        "the client's log directory"
    );
    assert!(
        !demo
            .tmp
            .path()
            .join("home/.a5c/logs")
            .join(&id)
            .try_exists()
            .unwrap(),
        "not the server's"
    );
    assert!(demo.warm_served() >= 1);
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

const FAN: &str = "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
export const step = defineTask('warm.fan', (args) => ({ kind: 'node', title: 'fan ' + args.i, node: { entry: 'noop.js' } }));\n\
export async function process(inputs, ctx) { const rs = await ctx.parallel.all(Array.from({ length: 40 }, (_, i) => () => ctx.task(step, { i }))); return { sum: rs.reduce((a, r) => a + r.value, 0) }; }\n";

/// A fan-out's 40 requests commit through the server's commit log (`state/commit.log`); a
/// local process reads all of them and their task files, and the run ends with the journal a
/// purely local run writes (the log is the server's alone: a local call writes none).
#[test]
fn a_fan_out_commits_through_the_servers_commit_log() {
    let drive = |s: &Sandbox, id: &str| -> Value {
        s.write("processes/fan.mjs", FAN);
        s.write("inputs.json", "{}");
        s.create(id, "processes/fan.mjs#process");
        let first = s.iterate(id);
        assert_eq!(first["status"], "waiting", "{first}");
        let listed = s
            .cmd_env(&["task:list", id, "--pending", "--json"], LOCAL)
            .ok()
            .json();
        let pending = listed["tasks"].as_array().unwrap().clone();
        assert_eq!(pending.len(), 40, "{listed}");
        for t in &pending {
            let effect = t["effectId"].as_str().unwrap();
            let task = s.run_dir(id).join("tasks").join(effect).join("task.json");
            assert_eq!(read_json(&task)["kind"], "node", "{}", task.display());
            s.post_inline(id, effect, "{\"value\": 1}").ok();
        }
        s.iterate(id)
    };
    let local = Sandbox::new();
    let done_local = drive(&local, "fan-local");
    assert_eq!(done_local["status"], "completed", "{done_local}");
    let warm = Sandbox::new().warm();
    let done_warm = drive(&warm, "fan-warm");
    assert_eq!(done_warm["status"], "completed", "{done_warm}");
    assert_eq!(warm.event_types("fan-warm"), local.event_types("fan-local"));
    let log = |s: &Sandbox, id: &str| std::fs::metadata(s.run_dir(id).join("state/commit.log"));
    assert!(
        log(&warm, "fan-warm").is_ok(),
        "the server committed through its log"
    );
    assert!(
        log(&local, "fan-local").is_err(),
        "a local call writes no log"
    );
    let out = read_json(&warm.run_dir("fan-warm").join("state/output.json"));
    assert_eq!(out["sum"], 40, "{out}");
}

/// An event file changed after the server read it (`sed -i` replaces the file; an in-place
/// rewrite keeps the inode): the server notices, re-reads and re-verifies, and the client gets
/// the checksum failure exactly as a one-shot command does — never the remembered journal.
#[test]
fn an_event_changed_under_the_server_fails_as_it_does_locally() {
    for replace in [true, false] {
        let s = Sandbox::new().warm();
        seq_run(&s, "edited");
        s.iterate("edited");
        let effect = s.pending("edited")[0]["effectId"]
            .as_str()
            .unwrap()
            .to_owned();
        s.post_inline("edited", &effect, "{\"value\": 1}").ok();
        s.iterate("edited");
        let before = s.warm_served();
        // Read through the server: it now holds the run's view.
        s.cmd(&["run:status", "edited", "--json"]).ok();
        s.cmd(&["run:events", "edited", "--json"]).ok();
        assert!(s.warm_served() > before, "the reads were served");

        let journal = s.run_dir("edited").join("journal");
        let mut names: Vec<_> = std::fs::read_dir(&journal)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        names.sort();
        let target = names
            .iter()
            .find(|p| {
                std::fs::read_to_string(p)
                    .unwrap()
                    .contains("EFFECT_REQUESTED")
            })
            .unwrap()
            .clone();
        let text = std::fs::read_to_string(&target).unwrap();
        let edited = text.replace("\"warm.step\"", "\"warm.stXp\"");
        assert_ne!(edited, text);
        if replace {
            // What `sed -i` does: a new file renamed over the old one.
            let tmp = journal.join("edit.tmp");
            std::fs::write(&tmp, &edited).unwrap();
            std::fs::rename(&tmp, &target).unwrap();
        } else {
            std::fs::write(&target, &edited).unwrap();
        }

        for command in ["run:status", "run:events"] {
            let served = s.warm_served();
            let warm = s.cmd(&[command, "edited", "--json"]);
            assert_eq!(s.warm_served(), served + 1, "{command} was served");
            let local = s.cmd_env(&[command, "edited", "--json"], LOCAL);
            assert!(
                local.stderr.contains("checksum mismatch"),
                "local {command}: {}",
                local.stderr
            );
            assert_eq!(
                (warm.code, &warm.stdout, &warm.stderr),
                (local.code, &local.stdout, &local.stderr),
                "replace={replace}: {command} through the server answers as locally"
            );
        }
    }
}
