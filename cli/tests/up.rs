//! `babysitter up` as its own OS process: journal, orchestrator and worker in one binary on
//! loopback ports; a run created over gRPC completes, its journal lands in babysitter's layout
//! under the data dir, and SIGTERM stops everything cleanly.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;

const PROCESS: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: 'hello', shell: { command: 'echo hello from up' } }));
export async function process(inputs, ctx) {
  const r = await ctx.task(sh, {});
  return { said: r.stdout.trim() };
}
"#;

const GATED: &str = r#"
import { greeting } from './lib.mjs';
export async function process(inputs, ctx) {
  const ok = await ctx.breakpoint({ question: 'go?' }, { label: 'gate' });
  return { approved: ok.approved, greeting };
}
"#;

/// `babysitter up` on `data` with `extra` flags, on free loopback ports: the child and its stderr.
fn spawn_up(
    data: &std::path::Path,
    extra: &[&str],
) -> (
    std::process::Child,
    std::io::Lines<BufReader<std::process::ChildStderr>>,
) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_babysitter"))
        .args(["up", "--data-dir", &data.display().to_string()])
        .args(extra)
        .args([
            "--set",
            "journal.server.listen-addr=127.0.0.1:0",
            "--set",
            "orchestrator.server.listen-addr=127.0.0.1:0",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    (child, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn up_runs_a_process_end_to_end_and_stops_on_sigterm() {
    let data = tempfile::tempdir().unwrap();
    let (mut child, mut lines) = spawn_up(data.path(), &[]);
    let mut seen = String::new();
    let addr = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.kill();
            panic!("babysitter up exited:\n{seen}");
        };
        seen.push_str(&line);
        seen.push('\n');
        if let Some(rest) = line.strip_prefix("babysitter up: orchestrator listening on ") {
            break rest.split_whitespace().next().unwrap().to_owned();
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    let mut c = RunServiceClient::connect(format!("http://{addr}"))
        .await
        .unwrap();
    let run = c
        .create_run(pb::CreateRunRequest {
            process: Some(pb::ProcessBundle::single_file(
                "main.mjs",
                PROCESS.as_bytes().to_vec(),
            )),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    let done = loop {
        let r = c
            .get_run(pb::GetRunRequest {
                run_id: run.run_id.clone(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .run
            .unwrap();
        if r.status == pb::RunStatus::Completed as i32 {
            break r;
        }
        assert!(r.status != pb::RunStatus::Failed as i32, "{r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let output: serde_json::Value = serde_json::from_slice(&done.output_json).unwrap();
    assert_eq!(output["said"], "hello from up");
    // babysitter's layout under the data dir: the reference CLI can read this run.
    let journal = data.path().join("runs").join(&run.run_id).join("journal");
    let files = std::fs::read_dir(&journal).unwrap().count();
    assert!(files >= 4, "{files} journal files in {}", journal.display());
    // The same server through the CLI's remote commands (`--server`).
    let proc_dir = tempfile::tempdir().unwrap();
    std::fs::write(proc_dir.path().join("main.mjs"), GATED).unwrap();
    std::fs::write(
        proc_dir.path().join("lib.mjs"),
        "export const greeting = 'hi from a module';\n",
    )
    .unwrap();
    let url = format!("http://{addr}");
    let cli = |args: &[&str]| -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_babysitter"))
            .args(args)
            .args(["--server", &url])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let entry = proc_dir.path().join("main.mjs").display().to_string();
    // babysitter's loop against the server: the CLI drives the run (`run:iterate`), executes
    // what it is told and posts the results; the orchestrator keeps the journal.
    // A new run of the gated process, iterated once: (run id, the iteration).
    let started = || {
        let created = cli(&[
            "run:create",
            "--process-id",
            "gated",
            "--entry",
            &entry,
            "--json",
        ]);
        let run_id = created["runId"].as_str().unwrap().to_owned();
        let it = cli(&["run:iterate", &run_id, "--json"]);
        assert_eq!(it["status"], "waiting", "{it}");
        (run_id, it)
    };
    let (run_id, it) = started();
    assert_eq!(it["reason"], "breakpoint-waiting", "{it}");
    let bp = it["nextActions"][0].clone();
    assert_eq!(bp["kind"], "breakpoint");
    let listed = cli(&["task:list", &run_id, "--pending", "--json"]);
    assert_eq!(listed["tasks"][0]["effectId"], bp["effectId"]);
    let posted = cli(&[
        "task:post",
        &run_id,
        bp["effectId"].as_str().unwrap(),
        "--status",
        "ok",
        "--value-inline",
        r#"{"approved":true}"#,
        "--json",
    ]);
    assert_eq!(posted["status"], "ok");
    let done = cli(&["run:iterate", &run_id, "--json"]);
    assert_eq!(done["status"], "completed", "{done}");
    let status = cli(&["run:status", &run_id, "--json"]);
    assert_eq!(status["state"], "completed");
    let output: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            data.path()
                .join("runs")
                .join(&run_id)
                .join("state/output.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        output,
        serde_json::json!({"approved": true, "greeting": "hi from a module"})
    );
    let events = cli(&["run:events", &run_id, "--json"]);
    assert_eq!(events["events"][0]["type"], "RUN_CREATED");
    // A command without a remote form says so; a bad run id is an error with exit code 1.
    let local_only = Command::new(env!("CARGO_BIN_EXE_babysitter"))
        .args(["run:rebuild-state", &run_id, "--server", &url])
        .output()
        .unwrap();
    assert_eq!(local_only.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&local_only.stderr).contains("has no remote form"));
    let bad = Command::new(env!("CARGO_BIN_EXE_babysitter"))
        .args(["run:status", "no-such-run", "--server", &url])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("no-such-run"));
    // `run:cancel` (ours: babysitter has none) ends a waiting run; a stray flag is refused.
    let (waiting, _) = started();
    let stray = Command::new(env!("CARGO_BIN_EXE_babysitter"))
        .args(["run:cancel", &waiting, "--force", "--server", &url])
        .output()
        .unwrap();
    assert_eq!(stray.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&stray.stderr).contains("unknown flag --force"));
    let cancelled = cli(&["run:cancel", &waiting, "--reason=not today"]);
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    assert_eq!(cancelled["runId"], waiting.as_str());

    // `babysitter run --server`: create, follow, approve with --yes, exit 0 with the output.
    let out = Command::new(env!("CARGO_BIN_EXE_babysitter"))
        .args(["run", &entry, "--yes", "--json", "--server", &url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["type"], "run");
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "effect.requested" && l["kind"] == "breakpoint")
    );
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "run.finished");
    assert_eq!(last["run"]["status"], "completed");
    assert_eq!(last["run"]["output"]["approved"], true);

    // A library process importing a shared helper from outside its folder (babysitter's
    // `../common-utilities/…`): the bundle carries the import closure, relative to the project.
    let project = tempfile::tempdir().unwrap();
    let methodology = project.path().join("library/methodologies/waterfall");
    std::fs::create_dir_all(&methodology).unwrap();
    std::fs::create_dir_all(project.path().join("library/common-utilities")).unwrap();
    std::fs::write(project.path().join("library/package.json"), "{}").unwrap();
    std::fs::write(
        project
            .path()
            .join("library/common-utilities/routed-gate-combinators.js"),
        "export const gate = () => 'shared gate';\n",
    )
    .unwrap();
    std::fs::write(
        methodology.join("waterfall.js"),
        "import { gate } from '../../common-utilities/routed-gate-combinators.js';\n\
         export async function process() { return { gate: gate() }; }\n",
    )
    .unwrap();
    let library_entry = methodology.join("waterfall.js").display().to_string();
    let out = Command::new(env!("CARGO_BIN_EXE_babysitter"))
        .args(["run", &library_entry, "--yes", "--json", "--server", &url])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap();
    assert_eq!(last["run"]["status"], "completed", "{last}");
    assert_eq!(last["run"]["output"]["gate"], "shared gate", "{last}");

    // `--budget` travels with the run: two shell tasks against a budget of one.
    let two = project.path().join("two.mjs");
    std::fs::write(
        &two,
        "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
         const sh = defineTask('sh', (a) => ({ kind: 'shell', title: `s${a.i}`, shell: { command: 'true' } }));\n\
         export async function process(inputs, ctx) { await ctx.task(sh, { i: 0 }); await ctx.task(sh, { i: 1 }); return 2; }\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_babysitter"))
        .args(["run", &two.display().to_string(), "--budget", "tasks=1"])
        .args(["--yes", "--json", "--server", &url])
        .output()
        .unwrap();
    assert!(!out.status.success(), "over budget, not a success");
    let last: serde_json::Value = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(|l| serde_json::from_str(l).unwrap())
        .unwrap();
    assert_eq!(last["run"]["status"], "failed", "{last}");
    assert!(last.to_string().contains("BudgetExceededError"), "{last}");

    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = child.wait().unwrap();
    assert!(status.success(), "{status}");
}

/// A second `babysitter up` on the same data dir is no second writer: it waits for the journal's
/// leadership lease, naming who holds it, and starts only once the first one stopped (a
/// SIGTERM releases the lease).
#[test]
fn a_second_up_on_the_same_data_dir_waits_for_the_first_to_stop() {
    let data = tempfile::tempdir().unwrap();
    let start = || spawn_up(data.path(), &["--no-worker"]);
    // Reads lines until one starts with `prefix`; the rest of it.
    fn until(
        lines: &mut impl Iterator<Item = std::io::Result<String>>,
        prefix: &str,
        seen: &mut String,
    ) -> String {
        loop {
            let Some(Ok(line)) = lines.next() else {
                panic!("no `{prefix}` line:\n{seen}");
            };
            seen.push_str(&line);
            seen.push('\n');
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_owned();
            }
        }
    }
    let (mut first, mut first_lines) = start();
    let mut seen = String::new();
    let first_addr = until(
        &mut first_lines,
        "babysitter up: orchestrator listening on ",
        &mut seen,
    );
    let first_addr = first_addr.split_whitespace().next().unwrap().to_owned();
    std::thread::spawn(move || for _ in first_lines {});

    let (mut second, mut second_lines) = start();
    let mut seen2 = String::new();
    let waiting = until(
        &mut second_lines,
        "babysitter up: waiting for the journal's lease, held by ",
        &mut seen2,
    );
    assert!(
        waiting.contains(&format!("at http://{first_addr}")),
        "{waiting}"
    );
    assert!(!seen2.contains("listening on"), "{seen2}");

    let pid = rustix::process::Pid::from_raw(first.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    assert!(first.wait().unwrap().success());
    // Released: the second takes over and serves.
    until(
        &mut second_lines,
        "babysitter up: orchestrator listening on ",
        &mut seen2,
    );
    std::thread::spawn(move || for _ in second_lines {});
    let pid = rustix::process::Pid::from_raw(second.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    assert!(second.wait().unwrap().success());
}

/// `--dump-config` names every setting, the unset ones too: a deployment's token files, the
/// engine's runs directory and the S3 endpoint appear with their environment variables, and
/// leave that list once set.
#[test]
fn dump_config_lists_the_unset_settings_a_deployment_needs() {
    let run = |extra: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_babysitter"))
            .arg("up")
            .args(extra)
            .arg("--dump-config")
            .output()
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = run(&[]);
    for (key, var) in [
        (
            "orchestrator.journal.token-file",
            "BABYSITTER_UP__ORCHESTRATOR__JOURNAL__TOKEN_FILE",
        ),
        (
            "orchestrator.engine.runs-dir",
            "BABYSITTER_UP__ORCHESTRATOR__ENGINE__RUNS_DIR",
        ),
        (
            "orchestrator.journal.store.endpoint",
            "BABYSITTER_UP__ORCHESTRATOR__JOURNAL__STORE__ENDPOINT",
        ),
        (
            "launcher.orchestrator.token-file",
            "BABYSITTER_UP__LAUNCHER__ORCHESTRATOR__TOKEN_FILE",
        ),
    ] {
        let line = text
            .lines()
            .find(|l| l.starts_with("#   ") && l.contains(key));
        assert!(
            line.is_some_and(|l| l.ends_with(var)),
            "{key}: {line:?}\n{text}"
        );
    }
    let set = run(&["--set", "orchestrator.engine.runs-dir=/srv/runs"]);
    assert!(set.contains("runs-dir = \"/srv/runs\""), "{set}");
    assert!(
        !set.lines()
            .any(|l| l.starts_with("#   orchestrator.engine.runs-dir")),
        "{set}"
    );
}
