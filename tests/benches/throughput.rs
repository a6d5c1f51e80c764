//! Throughput benchmark (issue 27's measure): prints its figures (`cargo build --release --bins
//! && cargo bench -p babysitter-tests --bench throughput`). The services as processes on
//! 127.0.0.1 — a `journal` over a real SeaweedFS, one `orchestrator`, 1, 2 and 4
//! `harness-launcher` shell workers (8 slots each) — run `THROUGHPUT_RUNS` (1000) runs of
//! `THROUGHPUT_TASKS` (10) shell tasks each, one after another in each run, the runs created
//! by 32 clients at once. Each configuration is measured with budgets and metrics off, then
//! on (a default budget on every run, checked after every iteration, none reached; the
//! Prometheus endpoint of every service listening, its counters and histograms updated on the
//! hot path), `THROUGHPUT_ROUNDS` (1) times, alternating (which mode goes first alternates by
//! round); the last lines are each configuration's medians and the on/off throughput ratio.
//!
//! Tasks per second: all tasks over the time from the first creation to the last run
//! completed. Dispatch latency: from the task's `EFFECT_REQUESTED` (its `recordedAt`, the
//! journal's clock) to the moment its command started (`date +%s%N` in the command, written to
//! a ledger), over every task: what a task waits between being asked for and running, through
//! queue, long poll, lease and process start, measured the same way whichever mode runs.
//!
//! `THROUGHPUT_STACK=containers` runs the same workload on the service images instead (one
//! container per service, `deploy/images/build.sh` first, `BABYSITTER_IT_DOCKER=1`), then each
//! service's cold start in its container; `both` runs the containers, then the processes.

// A bench binary reports on stdout.
#![allow(clippy::print_stdout)]

#[path = "../tests/support/cluster.rs"]
mod cluster;
#[path = "throughput/containers.rs"]
mod containers;

use std::collections::HashMap;
use std::time::Duration;

use babysitter_proto::orchestrator::v1 as pb;
use babysitter_tests::{SeaweedFs, ServiceProcess, test_prefix};
use serde_json::json;

/// `inputs.n` shell tasks one after another; each appends `<effect id> <ns started>`.
const SEQ: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const step = defineTask('step', (a) => ({ kind: 'shell', title: `step ${a.i}`,
  shell: { command: `echo "$BABYSITTER_EFFECT_ID $(date +%s%N)" >> ${a.ledger}` } }));
export async function process(inputs, ctx) {
  for (let i = 0; i < inputs.n; i++) await ctx.task(step, { i, ledger: inputs.ledger });
  return { done: inputs.n };
}
"#;

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What one configuration measured.
struct Figures {
    tasks_per_s: f64,
    p50: Duration,
    p99: Duration,
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted
        .get(((sorted.len().saturating_sub(1)) as f64 * p).round() as usize)
        .copied()
        .unwrap_or_default()
}

/// The flags that turn budgets and metrics on for a service (`budgets`: the orchestrator's).
fn on_flags(budgets: bool) -> Vec<String> {
    let mut f = vec![
        "--set".to_owned(),
        "telemetry.metrics-listen-addr=127.0.0.1:0".to_owned(),
    ];
    if budgets {
        for limit in [
            "runs.budgets.default.max-tokens=1000000000",
            "runs.budgets.default.max-cost-usd=1000",
            "runs.budgets.default.max-tasks=100000",
            "runs.budgets.default.max-agent-tasks=1000",
        ] {
            f.extend(["--set".to_owned(), limit.to_owned()]);
        }
    }
    f
}

async fn one(weed: &SeaweedFs, workers: usize, on: bool, runs: usize, tasks: usize) -> Figures {
    let dir = tempfile::tempdir().expect("tempdir");
    let envs: Vec<(String, String)> = weed
        .s3()
        .env_vars()
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
    let extra = if on { on_flags(false) } else { Vec::new() };
    let journal = cluster::start_journal(
        &weed.s3_url(&test_prefix("throughput")),
        &extra,
        &envs,
        dir.path().join("journal.log"),
    );
    let mut args = cluster::orchestrator_args(
        &format!("http://{}", journal.ready),
        "127.0.0.1:0",
        &dir.path().join("runs"),
    );
    if on {
        args.extend(on_flags(true));
    }
    let orchestrator = cluster::start_orchestrator(&args, dir.path().join("orchestrator.log"));
    let url = format!("http://{}", orchestrator.ready);
    let _workers: Vec<ServiceProcess> = (0..workers)
        .map(|i| cluster::start_shell_worker(&url, &format!("w{i}"), dir.path(), &extra))
        .collect();
    let ledger = dir.path().join("ledger");
    let c = cluster::run_client(&url, None);
    let target = Target {
        journal: journal.ready.clone(),
        journal_token: None,
        ledger_host: ledger.clone(),
        ledger_in_task: ledger.display().to_string(),
    };
    measure(c, &target, runs, tasks).await
}

/// Where one configuration's services are, for [`measure`].
struct Target {
    /// The journal service (`host:port`), read for `EFFECT_REQUESTED` times.
    journal: String,
    journal_token: Option<&'static str>,
    /// The ledger as the host reads it, and its path as the tasks' shell sees it.
    ledger_host: std::path::PathBuf,
    ledger_in_task: String,
}

/// Creates `runs` runs of `tasks` steps through `c` (32 at a time), waits for them and reads
/// the figures off the journal and the ledger.
async fn measure(
    c: babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient<
        babysitter_common::client::AuthedChannel,
    >,
    target: &Target,
    runs: usize,
    tasks: usize,
) -> Figures {
    let ledger = &target.ledger_in_task;
    let t0 = tokio::time::Instant::now();
    let mut creating = tokio::task::JoinSet::new();
    let mut ids = Vec::with_capacity(runs);
    for i in 0..runs {
        if creating.len() == 32
            && let Some(Ok(id)) = creating.join_next().await
        {
            ids.push(id);
        }
        let mut c = c.clone();
        let ledger = ledger.clone();
        creating.spawn(async move {
            create_retrying(&mut c, json!({"n": tasks, "i": i, "ledger": ledger})).await
        });
    }
    while let Some(Ok(id)) = creating.join_next().await {
        ids.push(id);
    }
    wait_completed(&mut c.clone(), runs).await;
    let took = t0.elapsed();

    // Dispatch latency, task by task: requested (journal) → started (ledger).
    let started: HashMap<String, i128> = std::fs::read_to_string(&target.ledger_host)
        .expect("ledger")
        .lines()
        .filter_map(|l| {
            let (id, ns) = l.split_once(' ')?;
            Some((id.to_owned(), ns.parse().ok()?))
        })
        .collect();
    let mut latencies = Vec::with_capacity(runs * tasks);
    for id in &ids {
        for e in cluster::journal_events(&target.journal, target.journal_token, id).await {
            if e.r#type != "EFFECT_REQUESTED" {
                continue;
            }
            let d = cluster::data(&e);
            let (Some(effect), Ok(at)) = (
                d["effectId"].as_str(),
                chrono::DateTime::parse_from_rfc3339(&e.recorded_at),
            ) else {
                continue;
            };
            if let Some(ns) = started.get(effect) {
                let requested_ns = i128::from(at.timestamp_millis()) * 1_000_000;
                latencies.push(Duration::from_nanos((ns - requested_ns).max(0) as u64));
            }
        }
    }
    assert_eq!(
        latencies.len(),
        runs * tasks,
        "every task requested and started once"
    );
    latencies.sort();
    Figures {
        tasks_per_s: (runs * tasks) as f64 / took.as_secs_f64(),
        p50: pct(&latencies, 0.5),
        p99: pct(&latencies, 0.99),
    }
}

/// Creates a run of [`SEQ`], again while the orchestrator answers Unavailable (with 2 s
/// leadership leases a loaded machine can depose it for a moment; it takes over again).
async fn create_retrying(
    c: &mut babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient<
        babysitter_common::client::AuthedChannel,
    >,
    inputs: serde_json::Value,
) -> String {
    loop {
        let r = c
            .create_run(pb::CreateRunRequest {
                process: Some(pb::ProcessBundle::single_file(
                    "main.mjs",
                    SEQ.as_bytes().to_vec(),
                )),
                inputs_json: Some(serde_json::to_vec(&inputs).expect("inputs").into()),
                ..Default::default()
            })
            .await;
        match r {
            Ok(r) => return r.into_inner().run.expect("the created run").run_id,
            Err(e) if e.code() == tonic::Code::Unavailable => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("create run: {e}"),
        }
    }
}

async fn wait_completed(
    c: &mut babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient<
        babysitter_common::client::AuthedChannel,
    >,
    n: usize,
) {
    loop {
        let mut count = 0;
        let mut token = String::new();
        loop {
            let r = c
                .list_runs(pb::ListRunsRequest {
                    statuses: vec![pb::RunStatus::Completed as i32],
                    page_size: 1000,
                    page_token: token.clone(),
                    ..Default::default()
                })
                .await;
            // A moment without an active orchestrator (see `create_retrying`): count again.
            let Ok(r) = r.map(tonic::Response::into_inner) else {
                count = 0;
                break;
            };
            count += r.runs.len();
            if r.next_page_token.is_empty() {
                break;
            }
            token = r.next_page_token;
        }
        if count >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn main() {
    let runs: usize = env_or("THROUGHPUT_RUNS", 1000);
    let tasks: usize = env_or("THROUGHPUT_TASKS", 10);
    let rounds: usize = env_or("THROUGHPUT_ROUNDS", 1);
    let workers: Vec<usize> = std::env::var("THROUGHPUT_WORKERS")
        .unwrap_or_else(|_| "1,2,4".into())
        .split(',')
        .filter_map(|w| w.trim().parse().ok())
        .collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    // processes (default) | containers | both: see `containers`.
    let stack = std::env::var("THROUGHPUT_STACK").unwrap_or_else(|_| "processes".into());
    if stack != "processes" {
        rt.block_on(async {
            println!(
                "{runs} runs x {tasks} shell tasks on the container stack (babysitter/* images, SeaweedFS container), workers of 8 slots"
            );
            for &w in &workers {
                for round in 0..rounds {
                    let f = containers::one(w, runs, tasks).await;
                    println!(
                        "{w} worker(s), containers, round {}: {:.0} tasks/s, dispatch p50 {:.1} ms, p99 {:.1} ms",
                        round + 1,
                        f.tasks_per_s,
                        f.p50.as_secs_f64() * 1000.0,
                        f.p99.as_secs_f64() * 1000.0,
                    );
                }
            }
            containers::cold_starts(rounds.max(3)).await;
        });
        if stack == "containers" {
            return;
        }
    }
    rt.block_on(async {
        let weed = SeaweedFs::start().await.expect("seaweedfs");
        println!(
            "{runs} runs x {tasks} shell tasks, SeaweedFS journal, workers of 8 slots; dispatch latency = EFFECT_REQUESTED -> command started"
        );
        let mut summary = Vec::new();
        for &w in &workers {
            let mut by_mode: [Vec<Figures>; 2] = [Vec::new(), Vec::new()];
            for round in 0..rounds {
                // Each round alternates which mode goes first, so drift over the run (the
                // store growing, the machine warming) falls on both alike.
                let order = if round % 2 == 0 { [false, true] } else { [true, false] };
                for on in order {
                    let f = one(&weed, w, on, runs, tasks).await;
                    println!(
                        "{w} worker(s), budgets+metrics {:3}, round {}: {:.0} tasks/s, dispatch p50 {:.1} ms, p99 {:.1} ms",
                        if on { "on" } else { "off" },
                        round + 1,
                        f.tasks_per_s,
                        f.p50.as_secs_f64() * 1000.0,
                        f.p99.as_secs_f64() * 1000.0,
                    );
                    by_mode[usize::from(on)].push(f);
                }
            }
            summary.push((w, by_mode));
        }
        println!("median of {rounds} round(s) per configuration:");
        for (w, [off, on]) in &summary {
            let med = |v: &[Figures], f: fn(&Figures) -> f64| {
                let mut xs: Vec<f64> = v.iter().map(f).collect();
                xs.sort_by(f64::total_cmp);
                xs.get(xs.len() / 2).copied().unwrap_or_default()
            };
            let (t_off, t_on) = (med(off, |f| f.tasks_per_s), med(on, |f| f.tasks_per_s));
            let p50 = |f: &Figures| f.p50.as_secs_f64() * 1000.0;
            let p99 = |f: &Figures| f.p99.as_secs_f64() * 1000.0;
            println!(
                "{w} worker(s): off {t_off:.0} tasks/s, on {t_on:.0} tasks/s ({:+.1} %); dispatch p50 off {:.1} ms / on {:.1} ms, p99 off {:.1} ms / on {:.1} ms",
                (t_on / t_off - 1.0) * 100.0,
                med(off, p50),
                med(on, p50),
                med(off, p99),
                med(on, p99),
            );
        }
    });
}
