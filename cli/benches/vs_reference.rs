//! `babysitter` CLI vs the reference's published CLI (npm `@a5c-ai/babysitter-sdk`), side by
//! side in one run: per-command latency of `run:iterate`, `task:list`, `task:post`, and the whole
//! CLI-driven loop for N = 10, 50, 200 sequential tasks and a parallel fan-out of 200.
//! Prints its figures (`cargo bench -p babysitter-cli --bench vs_reference`). Ours runs twice
//! per scenario: as it runs by default ("default": the run loop's commands go to this build's
//! warm server, which the bench's first `run:create` starts) and with
//! `BABYSITTER_WARM=0` ("WARM=0": every call a process of its own on the run directory).
//!
//! The reference is installed on first use into `.ci-work/ref-cli` (`npm install`); set
//! `BABYSITTER_BENCH_N` (e.g. `10,50`) to shorten the run — the reference's N = 200 loop takes
//! about five minutes on this machine; `BABYSITTER_BENCH_OURS_ONLY=1` skips the reference. The
//! fan-out is driven three times on each side (`BABYSITTER_BENCH_REPEAT`), its figures the means
//! over every call of every drive (the loop's: per drive): one drive gives only two `run:iterate`
//! samples.
//!
//! Both sides get the same filesystem: every run directory is kept until the end (deleting one
//! scenario's thousands of files would bill the next scenario: on ext4 without a journal each
//! new inode is allocated past the inodes deleted in the last minutes), and the page cache is
//! synced before each drive (one side's leftover writeback is not flushed by the other's sync).
//! Each drive also gets a directory of its own placement: the bench root is marked as the top of
//! a directory hierarchy (`chattr +T`), so ext4 places each drive's directory, and so its files,
//! in a block group of its own choosing (as it does for top-level directories) instead of next
//! to the previous drives' churn. Without it, a scenario measured after the reference's N = 200
//! loop (minutes of rewritten state files) ran our fan-out `run:iterate` at 30 ms instead of 21.
//! For the same reason the bench first syncs and waits out that window (65 s;
//! `BABYSITTER_BENCH_SETTLE_SECS` changes it): files deleted just before — a previous bench's
//! run directories, a test suite's — would otherwise slow whichever side creates files first.
//! At the end it deletes its directories and syncs, so that window is as short as it can be.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use tokio::time::{Duration, Instant};

const SEQ: &str = "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
export const step = defineTask('trivial-step', (args, taskCtx) => ({ kind: 'node', title: `step ${args.i}`, description: 'trivial step; result is posted by the driver', node: { entry: 'scripts/noop.js', args: ['--i', String(args.i)] }, io: { inputJsonPath: `tasks/${taskCtx.effectId}/input.json`, outputJsonPath: `tasks/${taskCtx.effectId}/result.json` }, labels: ['bench'] }));\n\
export async function process(inputs, ctx) { let sum = 0; for (let i = 0; i < inputs.n; i++) { const r = await ctx.task(step, { i }, { label: `step-${i}` }); sum += r.value; } return { mode: 'sequential', n: inputs.n, sum }; }\n";

const PAR: &str = "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
export const step = defineTask('trivial-par-step', (args) => ({ kind: 'node', title: `step ${args.i}`, node: { entry: 'scripts/noop.js', args: ['--i', String(args.i)] }, labels: ['bench'] }));\n\
export async function process(inputs, ctx) { const rs = await ctx.parallel.all(Array.from({ length: inputs.n }, (_, i) => () => ctx.task(step, { i }, { label: `par-${i}` }))); return { mode: 'parallel', n: inputs.n, sum: rs.reduce((a, r) => a + r.value, 0) }; }\n";

#[derive(Default)]
struct Times {
    iterate: Vec<Duration>,
    list: Vec<Duration>,
    post: Vec<Duration>,
    /// Summed over `drives`.
    total: Duration,
    drives: u32,
}

impl Times {
    /// Another drive's calls added to this one's.
    fn add(&mut self, other: Times) {
        self.iterate.extend(other.iterate);
        self.list.extend(other.list);
        self.post.extend(other.post);
        self.total += other.total;
        self.drives += other.drives;
    }

    /// The whole loop's time per drive.
    fn per_drive(&self) -> Duration {
        self.total / self.drives.max(1)
    }
}

fn mean(v: &[Duration]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.iter().map(Duration::as_secs_f64).sum::<f64>() / v.len() as f64 * 1000.0
}

fn run(cmd: &[String], cwd: &Path, env: &[(String, String)]) -> (Value, Duration) {
    let t = Instant::now();
    let out = Command::new(&cmd[0])
        .args(&cmd[1..])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .current_dir(cwd)
        .output()
        .expect("spawn cli");
    let took = t.elapsed();
    let text = String::from_utf8_lossy(&out.stdout);
    let v = serde_json::from_str(text.trim()).unwrap_or(Value::Null);
    if v.is_null() && !out.status.success() {
        panic!(
            "{:?} failed: {}{}",
            cmd,
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    (v, took)
}

/// Drives one run to completion through a CLI binary (`cli` = argv prefix) with `env` added;
/// returns the run's directory too (dropped at the end of the bench).
fn drive(
    root: &Path,
    cli: &[String],
    source: &str,
    n: u64,
    env: &[(String, String)],
) -> (Times, tempfile::TempDir) {
    rustix::fs::sync();
    let dir = tempfile::tempdir_in(root).unwrap();
    std::fs::write(dir.path().join("process.mjs"), source).unwrap();
    std::fs::write(dir.path().join("inputs.json"), format!("{{\"n\": {n}}}")).unwrap();
    // The reference imports the SDK with Node's resolution: make it resolvable from here.
    let sdk = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.ci-work/ref-cli/node_modules/@a5c-ai/babysitter-sdk");
    if sdk.is_dir() {
        let link = dir.path().join("node_modules/@a5c-ai");
        std::fs::create_dir_all(&link).unwrap();
        std::os::unix::fs::symlink(sdk.canonicalize().unwrap(), link.join("babysitter-sdk"))
            .unwrap();
    }
    let runs = dir.path().join(".a5c/runs");
    let arg = |s: &str| s.to_owned();
    let mut cmd: Vec<String> = cli.to_vec();
    cmd.extend([
        arg("run:create"),
        arg("--process-id"),
        arg("bench/p"),
        arg("--entry"),
        format!("{}#process", dir.path().join("process.mjs").display()),
        arg("--inputs"),
        arg("inputs.json"),
        arg("--runs-dir"),
        runs.display().to_string(),
        arg("--json"),
    ]);
    let start = Instant::now();
    let (created, _) = run(&cmd, dir.path(), env);
    let run_dir = created["runDir"].as_str().expect("runDir").to_owned();
    let mut t = Times::default();
    let with = |extra: &[&str]| -> Vec<String> {
        let mut c = cli.to_vec();
        c.extend(extra.iter().map(|s| s.to_string()));
        c.extend([arg("--runs-dir"), runs.display().to_string(), arg("--json")]);
        c
    };
    std::fs::write(dir.path().join("value.json"), "{\"value\": 1}").unwrap();
    let value = dir.path().join("value.json").display().to_string();
    loop {
        let (it, took) = run(&with(&["run:iterate", &run_dir]), dir.path(), env);
        t.iterate.push(took);
        match it["status"].as_str() {
            Some("waiting") => {}
            Some("completed") => break,
            other => panic!("unexpected iterate status {other:?}: {it}"),
        }
        let (list, took) = run(
            &with(&["task:list", &run_dir, "--pending"]),
            dir.path(),
            env,
        );
        t.list.push(took);
        let tasks = list["tasks"].as_array().cloned().unwrap_or_default();
        assert!(!tasks.is_empty(), "waiting without pending tasks");
        for task in tasks {
            let id = task["effectId"].as_str().unwrap();
            let (_, took) = run(
                &with(&[
                    "task:post",
                    &run_dir,
                    id,
                    "--status",
                    "ok",
                    "--value",
                    &value,
                ]),
                dir.path(),
                env,
            );
            t.post.push(took);
        }
    }
    t.total = start.elapsed();
    t.drives = 1;
    (t, dir)
}

fn reference_cli(repo: &Path) -> Option<Vec<String>> {
    let prefix = repo.join(".ci-work/ref-cli");
    let bin = prefix.join("node_modules/.bin/babysitter");
    if !bin.is_file() {
        eprintln!(
            "installing the reference CLI (npm @a5c-ai/babysitter-sdk@0.0.187) into {}",
            prefix.display()
        );
        let ok = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&prefix)
            .arg("@a5c-ai/babysitter-sdk@0.0.187")
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok || !bin.is_file() {
            eprintln!("the reference CLI could not be installed; printing our figures only");
            return None;
        }
    }
    Some(vec![bin.display().to_string()])
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let repo: PathBuf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .canonicalize()
        .unwrap();
    let ours = vec![env!("CARGO_BIN_EXE_babysitter").to_owned()];
    // `BABYSITTER_BENCH_OURS_ONLY=1`: skip the reference (its N = 200 loop takes minutes).
    let reference = if std::env::var("BABYSITTER_BENCH_OURS_ONLY").is_ok() {
        None
    } else {
        reference_cli(&repo)
    };
    let settle: u64 = std::env::var("BABYSITTER_BENCH_SETTLE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(65);
    rustix::fs::sync();
    if settle > 0 {
        eprintln!("settling {settle} s: files deleted before the bench must not bill either side");
        std::thread::sleep(std::time::Duration::from_secs(settle));
    }
    let ns: Vec<u64> = std::env::var("BABYSITTER_BENCH_N")
        .ok()
        .map(|s| s.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10, 50, 200]);
    // Our CLI twice: as it runs by default — the first `run:create` starts this build's warm
    // server, which the run loop's calls use (it keeps the run's JS
    // session and journal index between calls) — and with BABYSITTER_WARM=0, every call a fresh
    // process working on the run directory alone. The default's server lives in a directory of
    // the bench's own and is stopped by its pid at the end.
    let warm_dir = tempfile::tempdir().unwrap();
    let local: Vec<(String, String)> = vec![
        ("BABYSITTER_WARM".into(), "0".into()),
        ("BABYSITTER_WARM_SOCKET".into(), String::new()),
    ];
    let default: Vec<(String, String)> = vec![
        ("BABYSITTER_WARM".into(), String::new()),
        ("BABYSITTER_WARM_SOCKET".into(), String::new()),
        (
            "XDG_RUNTIME_DIR".into(),
            warm_dir.path().display().to_string(),
        ),
    ];
    println!(
        "{:<36} {:>10} {:>10} {:>10} {:>12} | {:>10} {:>10} {:>10} {:>12} | speed-up (iterate, list, post, loop)",
        "scenario",
        "iterate",
        "list",
        "post",
        "loop",
        "ref iter",
        "ref list",
        "ref post",
        "ref loop"
    );
    // A fan-out drive makes two `run:iterate` calls and one `task:list` (a sequential one N + 1
    // and N): one drive's figures for those are one or two samples of a call that takes tens of
    // milliseconds on a shared machine. The fan-out is driven this many times on each side
    // (`BABYSITTER_BENCH_REPEAT`), in rounds, and every call of every drive is counted.
    let repeat: u32 = std::env::var("BABYSITTER_BENCH_REPEAT")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(3);
    let mut cases: Vec<(String, &str, u64, u32)> = ns
        .iter()
        .map(|n| (format!("sequential N={n}"), SEQ, *n, 1))
        .collect();
    cases.push((
        format!("parallel fan-out 200 (x{repeat})"),
        PAR,
        200,
        repeat,
    ));
    // Where every drive's directory goes (see the module docs for the `+T` flag; where it cannot
    // be set — not ext2/3/4, no `chattr` — the drives share the usual placement).
    let root = tempfile::tempdir().unwrap();
    let placed = Command::new("chattr")
        .arg("+T")
        .arg(root.path())
        .output()
        .is_ok_and(|o| o.status.success());
    if !placed {
        eprintln!(
            "note: chattr +T failed on {}: drives share one directory's placement",
            root.path().display()
        );
    }
    let mut dirs = Vec::new();
    let mut keep = |(t, dir): (Times, tempfile::TempDir)| {
        dirs.push(dir);
        t
    };
    for (name, src, n, rounds) in cases {
        let (mut ours_local, mut ours_warm) = (Times::default(), Times::default());
        let mut b = reference.as_ref().map(|_| Times::default());
        for _ in 0..rounds {
            ours_local.add(keep(drive(root.path(), &ours, src, n, &local)));
            ours_warm.add(keep(drive(root.path(), &ours, src, n, &default)));
            if let (Some(r), Some(b)) = (&reference, &mut b) {
                b.add(keep(drive(root.path(), r, src, n, &[])));
            }
        }
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        for (mode, a) in [("default", ours_warm), ("WARM=0", ours_local)] {
            let label = format!("{name} ({mode})");
            match &b {
                Some(b) => println!(
                    "{label:<36} {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>10.0}ms | {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>10.0}ms | {:.0}x {:.0}x {:.0}x {:.0}x",
                    mean(&a.iterate),
                    mean(&a.list),
                    mean(&a.post),
                    ms(a.per_drive()),
                    mean(&b.iterate),
                    mean(&b.list),
                    mean(&b.post),
                    ms(b.per_drive()),
                    mean(&b.iterate) / mean(&a.iterate),
                    mean(&b.list) / mean(&a.list),
                    mean(&b.post) / mean(&a.post),
                    ms(b.per_drive()) / ms(a.per_drive())
                ),
                None => println!(
                    "{label:<36} {:>8.1}ms {:>8.1}ms {:>8.1}ms {:>10.0}ms | (reference not available)",
                    mean(&a.iterate),
                    mean(&a.list),
                    mean(&a.post),
                    ms(a.per_drive())
                ),
            }
        }
    }
    // The auto-started server(s), by pid.
    let pids = std::fs::read_dir(warm_dir.path().join("babysitter"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "pid"))
        .filter_map(|e| std::fs::read_to_string(e.path()).ok());
    for pid in pids {
        let _ = Command::new("kill").arg(pid.trim()).status();
    }
    drop(dirs);
    drop(root);
    rustix::fs::sync();
}
