//! `babysitter run` end to end through the real binary: the quickstart (shell, node, parallel
//! fan-out, breakpoint, sleep), Ctrl-C and `--resume`, and the message for agent tasks.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap()
}

fn babysitter() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_babysitter"));
    c.current_dir(repo()).env_remove("BABYSITTER_RUNS_DIR");
    c
}

fn events(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// The NDJSON events of a `babysitter run --json` that must have succeeded.
fn succeeded(out: &std::process::Output) -> Vec<Value> {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    events(&out.stdout)
}

#[test]
fn quickstart_runs_end_to_end_without_keys() {
    let runs = tempfile::tempdir().unwrap();
    let out = babysitter()
        .args([
            "run",
            "examples/quickstart/process.mjs",
            "--inputs",
            "examples/quickstart/inputs.json",
            "--yes",
            "--json",
            "--runs-dir",
        ])
        .arg(runs.path().join("runs"))
        .output()
        .unwrap();
    let ev = succeeded(&out);
    let done: Vec<&Value> = ev
        .iter()
        .filter(|e| e["event"] == "effect.completed")
        .collect();
    assert_eq!(
        done.len(),
        6,
        "shell, 3 node counts, 2 shells after... {ev:?}"
    );
    assert!(done.iter().all(|e| e["ok"] == true));
    let finished = ev.iter().find(|e| e["event"] == "run.finished").unwrap();
    assert_eq!(finished["status"], "completed");
    assert_eq!(finished["output"]["greeting"], "hello, babysitter");
    assert_eq!(finished["output"]["published"], true);
    let readme_words = std::fs::read_to_string(repo().join("README.md"))
        .unwrap()
        .split_whitespace()
        .count();
    assert_eq!(finished["output"]["words"]["README.md"], readme_words);
    assert!(
        ev.iter().any(|e| e["event"] == "effect.sleeping"),
        "the sleep was a real effect"
    );
    // The run is an ordinary babysitter run directory.
    let run_id = ev[0]["runId"].as_str().unwrap();
    let journal = runs.path().join("runs").join(run_id).join("journal");
    let n = std::fs::read_dir(journal).unwrap().count();
    assert!(n >= 16, "{n} journal events");
}

#[test]
fn ctrl_c_stops_cleanly_and_resume_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let mark = dir.path().join("go");
    let process = dir.path().join("p.mjs");
    let src = "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
         const wait = defineTask('wait', (args) => ({ kind: 'shell', title: 'wait', shell: { command: `while [ ! -f ${args.mark} ]; do sleep 0.05; done; echo ready` } }));\n\
         export async function process(inputs, ctx) { return (await ctx.task(wait, { mark: inputs.mark })).stdout.trim(); }\n";
    std::fs::write(&process, src).unwrap();
    let inputs = dir.path().join("inputs.json");
    std::fs::write(
        &inputs,
        serde_json::json!({"mark": mark.display().to_string()}).to_string(),
    )
    .unwrap();
    let runs = dir.path().join("runs");
    let mut child = babysitter()
        .args([
            "run",
            process.to_str().unwrap(),
            "--inputs",
            inputs.to_str().unwrap(),
            "--json",
            "--runs-dir",
            runs.to_str().unwrap(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut run_id = String::new();
    for line in lines.by_ref() {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v["event"] == "run.started" {
            run_id = v["runId"].as_str().unwrap().to_owned();
        }
        if v["event"] == "effect.started" {
            break;
        }
    }
    // Ctrl-C (SIGINT) to the driver: it kills the command and exits 130, the run stays resumable.
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    std::fs::write(&mark, "").unwrap();
    let out = babysitter()
        .args([
            "run",
            "--resume",
            &run_id,
            "--json",
            "--runs-dir",
            runs.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let finished = succeeded(&out)
        .into_iter()
        .find(|e| e["event"] == "run.finished")
        .unwrap();
    assert_eq!(finished["output"], "ready");
}

#[test]
fn agent_tasks_with_no_harness_installed_say_how_to_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let process = dir.path().join("p.mjs");
    std::fs::write(
        &process,
        "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
         const plan = defineTask('plan', () => ({ kind: 'agent', title: 'plan', agent: { prompt: 'x' } }));\n\
         export async function process(inputs, ctx) { return ctx.task(plan, {}); }\n",
    )
    .unwrap();
    // No harness on PATH (an empty folder) and none configured.
    let empty = dir.path().join("bin");
    std::fs::create_dir_all(&empty).unwrap();
    let out = babysitter()
        .args(["run", process.to_str().unwrap(), "--runs-dir"])
        .arg(dir.path().join("runs"))
        .env("PATH", &empty)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no coding-agent harness is installed")
            && err.contains("`claude` not found")
            && err.contains("kind `agent`")
            && err.contains("harness:install")
            && err.contains("--resume"),
        "{err}"
    );
    // A harness asked for by name that is not there is named too.
    let out = babysitter()
        .args([
            "run",
            process.to_str().unwrap(),
            "--harness",
            "codex",
            "--runs-dir",
        ])
        .arg(dir.path().join("runs"))
        .env("PATH", &empty)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--harness codex: `codex` not found"), "{err}");
}

#[test]
fn bad_invocations_are_explained() {
    let out = babysitter()
        .args(["run", "no/such/process.mjs"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no/such/process.mjs"));
    let out = babysitter()
        .args([
            "run",
            "examples/quickstart/process.mjs",
            "--inputs",
            "Cargo.toml",
            "--runs-dir",
            "/tmp/never-used-runs",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not valid JSON"));
    let out = babysitter().args(["run", "--bogus"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_failing_shell_task_arrives_as_a_value_and_a_throwing_process_fails_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let process = dir.path().join("p.mjs");
    std::fs::write(
        &process,
        "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
         const sh = defineTask('sh', () => ({ kind: 'shell', title: 'fails', shell: { command: 'echo oops >&2; exit 4' } }));\n\
         export async function process(inputs, ctx) { const r = await ctx.task(sh, {}); throw new Error(`exit ${r.exitCode}: ${r.stderr.trim()}`); }\n",
    )
    .unwrap();
    let out = babysitter()
        .args(["run", process.to_str().unwrap(), "--json", "--runs-dir"])
        .arg(dir.path().join("runs"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let finished = events(&out.stdout)
        .into_iter()
        .find(|e| e["event"] == "run.finished")
        .unwrap();
    assert_eq!(finished["status"], "failed");
    assert_eq!(finished["error"]["message"], "exit 4: oops");
}

#[test]
fn breakpoints_follow_auto_approval_rules() {
    let dir = tempfile::tempdir().unwrap();
    let process = dir.path().join("gate.mjs");
    std::fs::write(
        &process,
        "export async function process(inputs, ctx) {\n\
         const a = await ctx.breakpoint({ question: 'Deploy?' }, { label: 'deploy.web' });\n\
         return { approved: a.approved, response: a.response };\n}\n",
    )
    .unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let run = |extra: &[&str], runs: &str| {
        babysitter()
            .env("HOME", &home)
            .stdin(Stdio::null())
            .args(["run", process.to_str().unwrap(), "--json", "--runs-dir"])
            .arg(dir.path().join(runs))
            .args(extra)
            .output()
            .unwrap()
    };
    // No rule, no terminal, no --yes: the run stops at the breakpoint.
    let out = run(&[], "none");
    assert!(!out.status.success());
    assert!(
        events(&out.stdout).iter().any(|e| e["event"] == "warning"
            && e["message"]
                .as_str()
                .unwrap()
                .contains("breakpoint needs an answer")),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // A rule in ~/.a5c (written by the CLI's own command) approves it without asking.
    let add = babysitter()
        .env("HOME", &home)
        .args(["breakpoint:approve-rule", "deploy.*", "--json"])
        .output()
        .unwrap();
    assert!(
        add.status.success(),
        "{}",
        String::from_utf8_lossy(&add.stderr)
    );
    let rule: Value = serde_json::from_slice(&add.stdout).unwrap();
    let rule_id = rule["rule"]["id"].as_str().unwrap().to_owned();
    let out = run(&[], "ruled");
    let ev = succeeded(&out);
    let note = ev.iter().find(|e| e["event"] == "note").expect("a note");
    assert!(
        note["message"].as_str().unwrap().contains(&rule_id),
        "{note}"
    );
    let done = ev
        .iter()
        .find(|e| e["event"] == "run.finished")
        .expect("finished");
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["output"]["approved"], true, "{done}");
    assert!(
        done["output"]["response"]
            .as_str()
            .unwrap()
            .contains(&rule_id),
        "{done}"
    );
    // --rules FILE instead: a never rule there wins; a missing file is refused up front.
    let rules = dir.path().join("rules.json");
    std::fs::write(
        &rules,
        r#"{"schemaVersion": "2026.01.breakpoint-rules-v1", "rules": [{"id": "r-no", "pattern": "deploy.*", "action": "never-auto-approve"}]}"#,
    )
    .unwrap();
    let out = run(&["--rules", rules.to_str().unwrap()], "never");
    assert!(!out.status.success());
    let out = run(&["--rules", "/nonexistent/rules.json"], "missing");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/rules.json"));
}

#[test]
fn ctx_hook_effects_run_the_projects_hooks() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join(".a5c/hooks/notify")).unwrap();
    std::fs::write(
        project.join(".a5c/hooks/notify/tell.sh"),
        "cat > \"$PWD/notified.json\"\n",
    )
    .unwrap();
    std::fs::write(
        project.join("p.mjs"),
        "export async function process(inputs, ctx) {\n\
         const r = await ctx.hook('notify', { msg: 'hi' });\n\
         return { success: r.success, ran: r.executedHooks.map((h) => h.hookName) };\n}\n",
    )
    .unwrap();
    let out = babysitter()
        .current_dir(&project)
        .env("HOME", dir.path())
        .args(["run", "p.mjs", "--json"])
        .output()
        .unwrap();
    let ev = succeeded(&out);
    let done = ev
        .iter()
        .find(|e| e["event"] == "run.finished")
        .expect("finished");
    assert_eq!(done["output"]["success"], true, "{done}");
    assert_eq!(done["output"]["ran"][0], "tell.sh", "{done}");
    let seen: Value =
        serde_json::from_slice(&std::fs::read(project.join("notified.json")).unwrap()).unwrap();
    assert_eq!(seen["msg"], "hi");
    assert_eq!(seen["hookType"], "notify");
    assert!(seen["runId"].is_string());
}

/// Imports reach across the project but not out of the process root: a process whose nearest
/// project folder is its own (`sub/package.json`) may not import `../shared/…` until
/// `--process-root` names the folder above; the run then completes with the helper's value.
#[test]
fn process_root_confines_imports_and_can_be_given() {
    let project = tempfile::tempdir().unwrap();
    let sub = project.path().join("sub");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::create_dir_all(project.path().join("shared")).unwrap();
    std::fs::write(sub.join("package.json"), "{}").unwrap();
    std::fs::write(
        project.path().join("shared/helper.js"),
        "export const helper = () => 'from shared';\n",
    )
    .unwrap();
    std::fs::write(
        sub.join("p.mjs"),
        "import { helper } from '../shared/helper.js';\nexport async function process() { return { said: helper() }; }\n",
    )
    .unwrap();
    let runs = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        babysitter()
            .arg("run")
            .arg(sub.join("p.mjs"))
            .args(["--json", "--runs-dir"])
            .arg(runs.path().join("runs"))
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = run(&[]);
    assert!(!refused.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert!(text.contains("escapes the process root"), "{text}");

    let root = project.path().display().to_string();
    let ev = succeeded(&run(&["--process-root", &root]));
    let finished = ev.iter().find(|e| e["event"] == "run.finished").unwrap();
    assert_eq!(finished["status"], "completed", "{finished}");
    assert_eq!(finished["output"]["said"], "from shared");
}

/// `--help` is an answer (stdout, exit 0); no process at all is a usage error (stderr, exit 2).
#[test]
fn help_is_an_answer_and_a_missing_process_a_usage_error() {
    let out = babysitter()
        .args(["run", "--help"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("usage: babysitter run <process.mjs"));
    let out = babysitter()
        .args(["run"])
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage: babysitter run"));
}

#[test]
fn a_run_over_its_task_budget_fails_before_the_extra_task_runs() {
    let dir = tempfile::tempdir().unwrap();
    let process = dir.path().join("p.mjs");
    let ledger = dir.path().join("ledger");
    write_three_steps(&process, &ledger);
    let runs = dir.path().join("runs");
    let out = babysitter()
        .args([
            "run",
            process.to_str().unwrap(),
            "--budget",
            "tasks=2",
            "--json",
            "--runs-dir",
        ])
        .arg(&runs)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("budget_exceeded: tasks 3 of 2"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(&ledger).unwrap(),
        "0\n1\n",
        "the third task never ran"
    );
    // The run's journal ends with the failure, babysitter-shaped, with the figures.
    let run_dir = std::fs::read_dir(&runs)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut journal: Vec<_> = std::fs::read_dir(run_dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    journal.sort();
    let last: Value =
        serde_json::from_slice(&std::fs::read(journal.last().unwrap()).unwrap()).unwrap();
    assert_eq!(last["type"], "RUN_FAILED", "{last}");
    assert_eq!(last["data"]["error"]["name"], "BudgetExceededError");
    assert_eq!(last["data"]["error"]["data"]["limit"], "tasks");
    let run_json: Value =
        serde_json::from_slice(&std::fs::read(run_dir.join("run.json")).unwrap()).unwrap();
    assert_eq!(run_json["budget"]["max-tasks"], 2);

    // A budget that cannot mean anything is refused before anything runs.
    let out = babysitter()
        .args(["run", process.to_str().unwrap(), "--budget", "tasks=two"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--budget tasks=two"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `ctx.subprocess`: the child run is made in the same runs directory and driven here; its
/// output is the effect's result, its failure the process's error; a parent stopped while the
/// child waits resumes into the same child (made once).
#[test]
fn subprocesses_run_here_as_child_runs_and_resume_into_the_same_child() {
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("project");
    std::fs::create_dir_all(project.join("procs")).unwrap();
    std::fs::write(
        project.join("procs/main.mjs"),
        "export async function process(inputs, ctx) {\n\
           try {\n\
             const r = await ctx.subprocess({ processPath: inputs.path, processId: 'child', inputs: inputs.child });\n\
             return { output: r.output, runId: r.runId };\n\
           } catch (e) { return { error: e.name, message: e.message }; }\n\
         }\n",
    )
    .unwrap();
    std::fs::write(
        project.join("procs/child.mjs"),
        "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
         const step = defineTask('step', (a) => ({ kind: 'shell', title: 'step', shell: { command: `echo step-${a.n} >> ../ledger; echo ${a.n}` } }));\n\
         export async function process(inputs, ctx) {\n\
           if (inputs.fail) throw new Error('the child gave up');\n\
           if (inputs.gate) await ctx.breakpoint({ question: 'go on?' }, { label: 'gate' });\n\
           const r = await ctx.task(step, { n: inputs.n });\n\
           return { n: Number(r.stdout.trim()) };\n\
         }\n",
    )
    .unwrap();
    let runs = dir.path().join("runs");
    let run = |inputs: Value, extra: &[&str]| {
        let file = dir.path().join("inputs.json");
        std::fs::write(&file, inputs.to_string()).unwrap();
        let mut c = Command::new(env!("CARGO_BIN_EXE_babysitter"));
        c.current_dir(&project)
            .env_remove("BABYSITTER_RUNS_DIR")
            .args(["run", "procs/main.mjs", "--json", "--inputs"])
            .arg(&file)
            // Relative, with `..`: run.json's import path is computed from the resolved folder.
            .args(["--runs-dir", "../runs"])
            .args(extra)
            .stdin(Stdio::null());
        c.output().unwrap()
    };
    let last_finished = |ev: &[Value]| -> Value {
        ev.iter()
            .rev()
            .find(|e| e["event"] == "run.finished")
            .cloned()
            .unwrap_or_default()
    };

    // From the project (run.json cwd), the child completes and its output comes back.
    let out = run(json!({"path": "procs/child.mjs", "child": {"n": 7}}), &[]);
    let ev = succeeded(&out);
    let parent = last_finished(&ev);
    assert_eq!(parent["status"], "completed", "{parent}");
    assert_eq!(parent["output"]["output"], json!({"n": 7}), "{parent}");
    let child_id = parent["output"]["runId"].as_str().unwrap().to_owned();
    let child_json: Value =
        serde_json::from_slice(&std::fs::read(runs.join(&child_id).join("run.json")).unwrap())
            .unwrap();
    assert_eq!(
        child_json["nested"]["parentRunId"], parent["runId"],
        "{child_json}"
    );
    assert_eq!(child_json["processId"], "child");
    let ledger = dir.path().join("ledger");
    assert_eq!(std::fs::read_to_string(&ledger).unwrap(), "step-7\n");

    // From the parent's folder too; a child that throws is the process's error.
    let out = run(json!({"path": "child.mjs", "child": {"fail": true}}), &[]);
    let parent = last_finished(&succeeded(&out));
    assert_eq!(
        parent["output"]["error"], "SubprocessFailedError",
        "{parent}"
    );
    assert!(
        parent["output"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("the child gave up")),
        "{parent}"
    );
    let out = run(json!({"path": "nowhere.mjs", "child": {}}), &[]);
    let parent = last_finished(&succeeded(&out));
    assert_eq!(parent["output"]["error"], "SubprocessError", "{parent}");

    // The child waits on a breakpoint nobody answers: both stop; --resume --yes finishes both.
    std::fs::remove_file(&ledger).unwrap();
    let out = run(
        json!({"path": "procs/child.mjs", "child": {"n": 1, "gate": true}}),
        &[],
    );
    assert!(!out.status.success());
    let ev = events(&out.stdout);
    let parent_id = ev
        .iter()
        .find(|e| e["event"] == "run.started")
        .and_then(|e| e["runId"].as_str())
        .unwrap()
        .to_owned();
    let before: Vec<_> = std::fs::read_dir(&runs).unwrap().collect();
    let out = Command::new(env!("CARGO_BIN_EXE_babysitter"))
        .current_dir(&project)
        .env_remove("BABYSITTER_RUNS_DIR")
        .args([
            "run",
            "--resume",
            &parent_id,
            "--yes",
            "--json",
            "--runs-dir",
        ])
        .arg(&runs)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let parent = last_finished(&succeeded(&out));
    assert_eq!(parent["runId"], parent_id.as_str());
    assert_eq!(parent["output"]["output"], json!({"n": 1}), "{parent}");
    let after: Vec<_> = std::fs::read_dir(&runs).unwrap().collect();
    assert_eq!(before.len(), after.len(), "no second child was made");
    assert_eq!(std::fs::read_to_string(&ledger).unwrap().lines().count(), 1);
}

/// A budget that asks: past the limit the run stops resumable (the wait journaled once, the
/// warning before it too); `--resume --budget` raises it (journaled) and the run finishes,
/// the extra task running once.
#[test]
fn a_budget_that_asks_stops_resumable_and_a_resume_with_more_raises_it() {
    let dir = tempfile::tempdir().unwrap();
    let process = dir.path().join("p.mjs");
    let ledger = dir.path().join("ledger");
    write_three_steps(&process, &ledger);
    let runs = dir.path().join("runs");
    let run = |args: &[&str]| {
        babysitter()
            .args(args)
            .arg("--runs-dir")
            .arg(&runs)
            .output()
            .unwrap()
    };
    let out = run(&[
        "run",
        process.to_str().unwrap(),
        "--budget",
        "tasks=2,on-exceed=ask",
        "--json",
    ]);
    // With --json the warning is an NDJSON event on stdout.
    let stderr = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(3), "stderr: {stderr}");
    assert!(
        stderr
            .contains("budget_exceeded: tasks 3 of 2; raise it and go on: babysitter run --resume")
            && stderr.contains("--budget tasks=<more>"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&ledger).unwrap(), "0\n1\n");
    let run_id = events(&out.stdout)
        .iter()
        .find(|e| e["event"] == "run.started")
        .and_then(|e| e["runId"].as_str().map(str::to_owned))
        .unwrap();
    let types = |run_dir: &Path| -> Vec<String> {
        let mut files: Vec<_> = std::fs::read_dir(run_dir.join("journal"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        files
            .iter()
            .map(|f| {
                let e: Value = serde_json::from_slice(&std::fs::read(f).unwrap()).unwrap();
                e["type"].as_str().unwrap().to_owned()
            })
            .collect()
    };
    let n = |t: &[String], ty: &str| t.iter().filter(|x| *x == ty).count();

    // Resumed with no more: it stops again, saying nothing twice.
    let out = run(&["run", "--resume", &run_id]);
    assert_eq!(out.status.code(), Some(3));
    let t = types(&runs.join(&run_id));
    assert_eq!(
        (n(&t, "BUDGET_WARNING"), n(&t, "BUDGET_EXCEEDED")),
        (1, 1),
        "{t:?}"
    );

    // A raise that is still exceeded is refused; one that is not goes on to the end.
    let out = run(&["run", "--resume", &run_id, "--budget", "tasks=2"]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("still exceeded: tasks 3 of 2"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(&["run", "--resume", &run_id, "--budget", "tasks=5"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&ledger).unwrap(), "0\n1\n2\n");
    let t = types(&runs.join(&run_id));
    assert_eq!(n(&t, "BUDGET_RAISED"), 1, "{t:?}");
    assert_eq!(t.last().map(String::as_str), Some("RUN_COMPLETED"), "{t:?}");
}

/// A process of three shell steps, each appending its number to `ledger`.
fn write_three_steps(process: &Path, ledger: &Path) {
    std::fs::write(
        process,
        format!(
            "import {{ defineTask }} from '@a5c-ai/babysitter-sdk';\n\
             const sh = defineTask('sh', (a) => ({{ kind: 'shell', title: `step ${{a.i}}`, shell: {{ command: `echo ${{a.i}} >> {}` }} }}));\n\
             export async function process(inputs, ctx) {{ for (let i = 0; i < 3; i++) await ctx.task(sh, {{ i }}); return 'done'; }}\n",
            ledger.display()
        ),
    )
    .unwrap();
}
