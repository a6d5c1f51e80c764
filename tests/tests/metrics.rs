//! Prometheus metrics of every service, scraped over HTTP from the real binaries: the journal,
//! the orchestrator and a shell worker each serve `GET /metrics` on
//! `telemetry.metrics-listen-addr`, and the figures move as runs go through (issue 27 §4). The
//! transport proxy serves its own `/metrics` on its HTTP port (its suite checks it).

#[path = "support/cluster.rs"]
mod cluster;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use babysitter_common::client::AuthedChannel;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use babysitter_tests::ServiceProcess;
use cluster::create;
use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const METRICS_ON: [&str; 2] = ["--set", "telemetry.metrics-listen-addr=127.0.0.1:0"];

/// Two shell tasks in a row.
const TWO_SHELL_TASKS: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: a.t, shell: { command: `echo ${a.t}` } }));
export async function process(inputs, ctx) {
  const a = await ctx.task(sh, { t: 'a' });
  const b = await ctx.task(sh, { t: 'b' });
  return [a.stdout.trim(), b.stdout.trim()];
}
"#;

/// One task of a kind no worker here runs: it stays queued.
const ONE_NODE_TASK: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const n = defineTask('t.node', () => ({ kind: 'node', title: 'n', node: { entry: 'x.js' } }));
export async function process(inputs, ctx) {
  return await ctx.task(n, {});
}
"#;

/// The address a service printed for its metrics endpoint (in its log).
fn metrics_addr(log: &Path) -> SocketAddr {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("metrics listening on "))
        .unwrap_or_else(|| panic!("no metrics address in {}:\n{text}", log.display()))
        .trim()
        .parse()
        .expect("a socket address")
}

/// `GET /metrics` over plain HTTP/1.1, as Prometheus scrapes.
async fn scrape(addr: SocketAddr) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.write_all(b"GET /metrics HTTP/1.1\r\nhost: prometheus\r\nconnection: close\r\n\r\n")
        .await
        .expect("request");
    let mut out = String::new();
    s.read_to_string(&mut out).await.expect("response");
    let (head, body) = out.split_once("\r\n\r\n").expect("an HTTP response");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text"),
        "{head}"
    );
    assert!(body.ends_with("# EOF\n"), "not OpenMetrics text:\n{body}");
    body.to_owned()
}

/// The value of `series` (name and labels exactly as exposed), 0 when absent.
fn value(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().expect("a number"))
        .unwrap_or(0.0)
}

async fn wait_completed(
    c: &mut RunServiceClient<AuthedChannel>,
    run_id: &str,
    logs: &[&ServiceProcess],
) {
    for _ in 0..600 {
        let run = cluster::get_run(c, run_id).await;
        if run.status == pb::RunStatus::Completed as i32 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let tails: Vec<String> = logs.iter().map(|p| p.log_tail(30)).collect();
    panic!("run {run_id} did not complete:\n{}", tails.join("\n---\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_service_serves_metrics_that_move_as_runs_go_through() {
    let dir = tempfile::tempdir().unwrap();
    let metrics_on: Vec<String> = METRICS_ON.iter().map(|s| (*s).to_owned()).collect();
    let journal = cluster::start_journal(
        &format!("file://{}", dir.path().join("journal").display()),
        &metrics_on,
        &[],
        dir.path().join("journal.log"),
    );
    let port = babysitter_tests::free_port().unwrap();
    let mut args = cluster::orchestrator_args(
        &format!("http://{}", journal.ready),
        &format!("127.0.0.1:{port}"),
        &dir.path().join("runs"),
    );
    args.extend(metrics_on.iter().cloned());
    let orchestrator = cluster::start_orchestrator(&args, dir.path().join("orchestrator.log"));
    let url = format!("http://127.0.0.1:{port}");
    let worker = cluster::start_shell_worker(&url, "w1", dir.path(), &metrics_on);

    let journal_m = metrics_addr(&dir.path().join("journal.log"));
    let orchestrator_m = metrics_addr(&dir.path().join("orchestrator.log"));
    let worker_m = metrics_addr(&dir.path().join("w1.log"));
    let before = (
        scrape(journal_m).await,
        scrape(orchestrator_m).await,
        scrape(worker_m).await,
    );

    let mut c = cluster::run_client(&url, None);
    let mut runs = Vec::new();
    for _ in 0..3 {
        runs.push(create(&mut c, TWO_SHELL_TASKS, json!({})).await);
    }
    for run in &runs {
        wait_completed(&mut c, run, &[&orchestrator, &worker, &journal]).await;
    }
    let stuck = create(&mut c, ONE_NODE_TASK, json!({})).await;
    // The node task is queued once the run's first iteration has run.
    let mut after_o = String::new();
    for _ in 0..200 {
        after_o = scrape(orchestrator_m).await;
        let queued = r#"babysitter_orchestrator_queue_tasks{kind="node",namespace="default",state="queued"}"#;
        if value(&after_o, queued) == 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = (scrape(journal_m).await, after_o, scrape(worker_m).await);

    let moved = |text: (&str, &str), series: &str| value(text.1, series) - value(text.0, series);

    // The journal service: what it committed, on its file store.
    let events = moved(
        (&before.0, &after.0),
        r#"babysitter_journal_appended_events_total{backend="file"}"#,
    );
    let mut journaled = 0;
    for run in runs.iter().chain([&stuck]) {
        journaled += cluster::journal_events(&journal.ready, None, run)
            .await
            .len();
    }
    assert_eq!(
        events, journaled as f64,
        "every event of the four runs, counted once:\n{}",
        after.0
    );
    assert!(
        value(
            &after.0,
            r#"babysitter_journal_append_seconds_count{backend="file"}"#
        ) > 0.0,
        "{}",
        after.0
    );

    // The orchestrator: leases, dispatch latency, runs, live state, its remote journal.
    let o = (before.1.as_str(), after.1.as_str());
    let shell = r#"{kind="shell",namespace="default"}"#;
    assert_eq!(
        moved(
            o,
            &format!("babysitter_orchestrator_leases_granted_total{shell}")
        ),
        6.0,
        "{}",
        after.1
    );
    assert_eq!(
        moved(
            o,
            &format!("babysitter_orchestrator_dispatch_latency_seconds_count{shell}")
        ),
        6.0
    );
    assert_eq!(
        moved(
            o,
            r#"babysitter_orchestrator_runs_finished_total{status="completed"}"#
        ),
        3.0
    );
    assert_eq!(
        value(o.1, r#"babysitter_orchestrator_runs{state="running"}"#),
        1.0,
        "the run waiting for its node task:\n{}",
        o.1
    );
    assert_eq!(
        value(
            o.1,
            r#"babysitter_orchestrator_queue_tasks{kind="node",namespace="default",state="queued"}"#
        ),
        1.0
    );
    assert_eq!(value(o.1, "babysitter_orchestrator_workers"), 1.0);
    assert_eq!(
        moved(
            o,
            r#"babysitter_journal_appended_events_total{backend="remote"}"#
        ),
        journaled as f64,
        "the orchestrator's appends through the journal service:\n{}",
        o.1
    );

    // The worker: six shell tasks succeeded, none runs now.
    let w = (before.2.as_str(), after.2.as_str());
    assert_eq!(
        moved(
            w,
            r#"babysitter_launcher_tasks_total{kind="shell",harness="none",outcome="succeeded"}"#
        ),
        6.0,
        "{}",
        after.2
    );
    assert_eq!(
        moved(
            w,
            r#"babysitter_launcher_task_seconds_count{kind="shell",harness="none"}"#
        ),
        6.0
    );
    assert_eq!(value(w.1, "babysitter_launcher_running_tasks"), 0.0);
}
