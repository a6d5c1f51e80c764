//! The dashboard's cost to dispatch: `babysitter up` without the dashboard, with it and nobody
//! watching, and with a watcher on `/api/stream` that reads the board (`/api/board`) on every
//! change (as the page does, minus its rendering), the same runs of sequential shell tasks in each; prints the dispatch latency (from a
//! task's `EFFECT_REQUESTED` `recordedAt` to its command starting, `date +%s%N` in the
//! command) side by side. `DASHBOARD_DISPATCH_RUNS` (default 20) runs of
//! `DASHBOARD_DISPATCH_TASKS` (default 5) tasks, all runs at once on one worker of 8 slots. Asserts only that every task ran
//! and the watcher saw changes; the figures are for the closing note (`--nocapture`).

mod dashboard_support;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use babysitter_proto::orchestrator::v1 as pb;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use dashboard_support::{Server, connect, create, http, start, wait_status};

const SEQ: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const step = defineTask('step', (a) => ({ kind: 'shell', title: `step ${a.i}`,
  shell: { command: `echo "$BABYSITTER_EFFECT_ID $(date +%s%N)" >> ${a.ledger}` } }));
export async function process(inputs, ctx) {
  for (let i = 0; i < inputs.n; i++) await ctx.task(step, { i, ledger: inputs.ledger });
  return { done: inputs.n };
}
"#;

fn env_or(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `babysitter up` on `data`: the server, the orchestrator's and the dashboard's addresses.
fn up(data: &Path, dashboard: bool) -> (Server, String, Option<String>) {
    let mut args: Vec<String> = [
        "up",
        "--data-dir",
        &data.display().to_string(),
        "--set",
        "journal.server.listen-addr=127.0.0.1:0",
        "--set",
        "orchestrator.server.listen-addr=127.0.0.1:0",
        "--set",
        "launcher.worker.max-concurrency=8",
    ]
    .map(str::to_owned)
    .to_vec();
    let mut wanted = vec!["babysitter up: orchestrator listening on "];
    if dashboard {
        args.extend(
            [
                "--set",
                "orchestrator.dashboard.listen-addr=\"127.0.0.1:0\"",
            ]
            .map(str::to_owned),
        );
        wanted.push("dashboard listening on ");
    } else {
        args.push("--no-dashboard".into());
    }
    let (server, mut addrs) = start(&args, &wanted);
    let dash = addrs.get(1).cloned();
    (server, addrs.swap_remove(0), dash)
}

/// Follows `/api/stream` and reads the board on every change; counts the changes.
fn watch_board(addr: String, seen: Arc<AtomicUsize>) {
    tokio::spawn(async move {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let req = format!(
            "GET /api/stream HTTP/1.1\r\nHost: {addr}\r\nAccept: text/event-stream\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut lines = tokio::io::BufReader::new(s).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if line.starts_with("event: board") {
                seen.fetch_add(1, Ordering::Relaxed);
                http(&addr, "GET", "/api/board?limit=50", &[], "").await;
            }
        }
    });
}

/// Dispatch latencies (ms) of every task of the runs under `data`, from the ledger.
fn latencies(data: &Path, ledger: &Path) -> Vec<f64> {
    let started: HashMap<String, i64> = std::fs::read_to_string(ledger)
        .unwrap()
        .lines()
        .filter_map(|l| {
            let (e, ns) = l.split_once(' ')?;
            Some((e.to_owned(), ns.trim().parse().ok()?))
        })
        .collect();
    let mut out = Vec::new();
    for run in std::fs::read_dir(data.join("runs")).unwrap().flatten() {
        let Ok(files) = std::fs::read_dir(run.path().join("journal")) else {
            continue;
        };
        for f in files.flatten() {
            let Ok(ev) = serde_json::from_slice::<Value>(&std::fs::read(f.path()).unwrap()) else {
                continue;
            };
            if ev["type"] != "EFFECT_REQUESTED" {
                continue;
            }
            let effect = ev["data"]["effectId"].as_str().unwrap_or_default();
            let at =
                chrono::DateTime::parse_from_rfc3339(ev["recordedAt"].as_str().unwrap_or_default());
            if let (Some(ns), Ok(at)) = (started.get(effect), at) {
                let requested_ns = at.timestamp_nanos_opt().unwrap_or_default();
                out.push((ns - requested_ns) as f64 / 1e6);
            }
        }
    }
    out.sort_by(f64::total_cmp);
    out
}

async fn measure(dashboard: bool, watcher: bool, runs: usize, tasks: usize) -> (Vec<f64>, usize) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let ledger = dir.path().join("ledger");
    let (_up, grpc, dash) = up(&data, dashboard);
    let seen = Arc::new(AtomicUsize::new(0));
    if let Some(addr) = dash.filter(|_| watcher) {
        watch_board(addr, seen.clone());
    }
    let mut c = connect(&grpc, None).await;
    let inputs = json!({"n": tasks, "ledger": ledger});
    let mut ids = Vec::new();
    for _ in 0..runs {
        ids.push(create(&mut c, SEQ, Some(inputs.clone())).await);
    }
    for id in &ids {
        wait_status(&mut c, id, pb::RunStatus::Completed).await;
    }
    (latencies(&data, &ledger), seen.load(Ordering::Relaxed))
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted
        .get(((sorted.len().saturating_sub(1)) as f64 * p).round() as usize)
        .copied()
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stdout)]
async fn dispatch_latency_with_the_dashboard_on_and_off() {
    let (runs, tasks) = (
        env_or("DASHBOARD_DISPATCH_RUNS", 20),
        env_or("DASHBOARD_DISPATCH_TASKS", 5),
    );
    let (off, _) = measure(false, false, runs, tasks).await;
    let (idle, _) = measure(true, false, runs, tasks).await;
    let (on, changes) = measure(true, true, runs, tasks).await;
    for l in [&off, &idle, &on] {
        assert_eq!(l.len(), runs * tasks);
    }
    assert!(changes > 0, "the board watcher saw no change");
    for (name, l) in [
        ("off", &off),
        ("on, nobody watching", &idle),
        ("on, a page watching", &on),
    ] {
        println!(
            "MEASURE dispatch, dashboard {name}: {} tasks, p50 {:.1} ms, p99 {:.1} ms",
            l.len(),
            pct(l, 0.5),
            pct(l, 0.99)
        );
    }
    println!("MEASURE board changes followed by the watcher (dashboard on): {changes}");
}
