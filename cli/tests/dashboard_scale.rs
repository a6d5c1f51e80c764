//! The board with many runs (`DASHBOARD_SCALE_RUNS`, default 10,000), loaded in the system
//! Chromium through Playwright (`dashboard_scale.py`), once per way the dashboard is served:
//!
//! - `babysitter observe`: every run written beforehand in babysitter's local layout (one in ten
//!   waiting on a breakpoint, the rest completed).
//! - `babysitter up` (the orchestrator's dashboard, with a client token): all runs but a few
//!   written beforehand into the filesystem journal `up` uses (`<data-dir>/runs`, the same
//!   run-directory layout, events sealed with the journal crate's own types: completed, one in
//!   fifty failed) — far more than the 4,096 finished runs the orchestrator's run table caches,
//!   so most digests are read back from the journal; the rest (one in a hundred, at most 100)
//!   created live through `CreateRun` and waiting on a breakpoint, so the live path and the
//!   "need you" banner are exercised. Writing them is what keeps the test short: the creation
//!   rate of the live ones is printed, with what all of them would have taken.
//!
//! Asserts the counts per bucket the page shows equal what was put in, the banner, search (the
//! oldest run, the newest), a run's detail; through the orchestrator, the newest written run's
//! idempotency key still known once the board read every run (its listing leaves the
//! finished-run cache alone), and a breakpoint approved over gRPC moves its card out of "needs
//! you" live. Prints (`--nocapture`) the time to index the runs, the page load
//! median, the page's JS heap and the server's resident memory; asserts no timing. Skipped
//! without Chromium and Playwright (scripts/ensure-playwright.sh).

mod dashboard_support;
#[path = "../../tests/src/skip.rs"]
mod skip;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use babysitter_journal::{EventBody, EventType, StoredEvent};
use babysitter_proto::orchestrator::v1 as pb;
use futures::StreamExt;
use serde_json::{Map, Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::time::Instant;

use dashboard_support::{
    Client, GATED, breakpoint_of, browser, connect, create, http, repo, start, start_up,
};

const TOKEN: &str = "scale-token";
/// Runs created live through `CreateRun` (at most; one in a hundred of a smaller board).
const LIVE: u64 = 100;

/// How a written run ends (or waits).
#[derive(Clone, Copy, PartialEq)]
enum Outcome {
    Completed,
    Failed,
    Waiting,
}

/// One run: run.json and its verified event files, written directly (no fsync: a fixture), in
/// babysitter's run-directory layout — the layout of `.a5c/runs` and of the filesystem journal
/// alike (`services/journal/src/fs.rs`: `<root>/<runId>/{run.json, journal/{seq:06}.{ULID}.json}`,
/// each event sealed by `StoredEvent::seal`; that layout has no hash chain).
fn write_run(root: &Path, i: u64, outcome: Outcome) -> String {
    let ms = 1_700_000_000_000 + i;
    let run_id = ulid::Ulid::from_parts(ms, u128::from(i)).to_string();
    let dir = root.join(&run_id);
    std::fs::create_dir_all(dir.join("journal")).unwrap();
    let at = chrono::DateTime::from_timestamp_millis(ms as i64)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string();
    let run_json = json!({"runId": run_id, "processId": format!("scale/process-{i}"), "createdAt": at, "labels": {"batch": "scale"}, "idempotencyKey": format!("scale-{i}")});
    std::fs::write(dir.join("run.json"), run_json.to_string()).unwrap();
    let second = match outcome {
        Outcome::Waiting => (
            EventType::EffectRequested,
            json!({"effectId": format!("bp{i}"), "invocationKey": format!("k{i}"), "stepId": "s1", "taskId": "gate", "kind": "breakpoint", "label": "gate", "taskDefRef": format!("tasks/bp{i}/task.json")}),
        ),
        Outcome::Completed => (
            EventType::RunCompleted,
            json!({"outputRef": "state/output.json"}),
        ),
        Outcome::Failed => (
            EventType::RunFailed,
            json!({"error": {"name": "Error", "message": "a scale fixture"}}),
        ),
    };
    for (seq, (kind, data)) in [(EventType::RunCreated, json!({"runId": run_id})), second]
        .into_iter()
        .enumerate()
    {
        let seq = seq as u64 + 1;
        let body = EventBody {
            kind,
            recorded_at: at.clone(),
            data,
            sdk_version: None,
            extra: Map::new(),
        };
        let ulid = ulid::Ulid::from_parts(ms, u128::from(seq)).to_string();
        let event = StoredEvent::seal(seq, ulid, body, None);
        std::fs::write(
            dir.join("journal").join(event.file_name()),
            event.file_bytes(),
        )
        .unwrap();
    }
    run_id
}

fn scale_runs() -> u64 {
    std::env::var("DASHBOARD_SCALE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmRSS:")
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// A breakpoint to approve over gRPC once the page shows its card (the script prints `ready`).
struct Approval {
    client: Client,
    run_id: String,
    effect_id: String,
}

/// Runs `dashboard_scale.py` with `args`, printing its lines as they come; with `approve`, resolves
/// that breakpoint when the page is ready and tells the script. Fails the test if the script does.
#[allow(clippy::print_stdout)]
async fn browse(python: &Path, args: &Value, mut approve: Option<Approval>) {
    let mut child = tokio::process::Command::new(python)
        .arg(repo().join("cli/tests/dashboard_scale.py"))
        .arg(args.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let errors = tokio::spawn(async move {
        let mut s = String::new();
        tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut s)
            .await
            .unwrap();
        s
    });
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while let Some(line) = lines.next_line().await.unwrap() {
        println!("{line}");
        if line == "ready"
            && let Some(a) = approve.as_mut()
        {
            a.client
                .resolve_breakpoint(pb::ResolveBreakpointRequest {
                    run_id: a.run_id.clone(),
                    effect_id: a.effect_id.clone(),
                    decision: pb::BreakpointDecision::Approve as i32,
                    ..Default::default()
                })
                .await
                .unwrap();
            stdin.write_all(b"approved\n").await.unwrap();
            stdin.flush().await.unwrap();
        }
    }
    let status = child.wait().await.unwrap();
    let errors = errors.await.unwrap();
    assert!(status.success(), "the browser checks failed:\n{errors}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stdout)]
async fn a_board_of_ten_thousand_runs() {
    let python = match browser() {
        Ok(p) => p,
        Err(why) => return skip::skip(why),
    };
    let runs = scale_runs();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj/.a5c/runs");
    let mut last = String::new();
    for i in 0..runs {
        let outcome = if i % 10 == 0 {
            Outcome::Waiting
        } else {
            Outcome::Completed
        };
        last = write_run(&root, i, outcome);
    }
    let started = std::time::SystemTime::now();
    let s = |v: &str| v.to_owned();
    let (server, addr) = start(
        &[
            s("observe"),
            dir.path().display().to_string(),
            s("--listen"),
            s("127.0.0.1:0"),
            s("--read-only"),
        ],
        &["dashboard listening on "],
    );
    let addr = &addr[0];
    let needs_you = runs.div_ceil(10);
    let args = json!({
        "url": format!("http://{addr}"),
        "profile": dir.path().join("profile"),
        "runs": runs,
        "counts": {"completed": runs - needs_you, "needs-you": needs_you},
        "needs_you": needs_you,
        "searches": [last],
        "detail": [last, "completed"],
    });
    browse(&python, &args, None).await;
    let indexed = started.elapsed().unwrap_or_default();
    println!(
        "MEASURE observe over {runs} runs: indexed and checked in {:.1} s (start to the last check), server RSS {:.0} MiB",
        indexed.as_secs_f64(),
        rss_kib(server.0.id()) as f64 / 1024.0
    );
}

/// The board's counts per bucket as the dashboard's API answers them (with the token).
async fn board_counts(addr: &str) -> Map<String, Value> {
    let auth = format!("Bearer {TOKEN}");
    let (status, body) = http(
        addr,
        "GET",
        "/api/board?limit=1",
        &[("authorization", &auth)],
        "",
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let board: Value = serde_json::from_str(&body).unwrap();
    board["counts"].as_object().cloned().unwrap_or_default()
}

/// Waits until the board counts `bucket` at `n` (the index is built after the port opens).
async fn until_counted(addr: &str, bucket: &str, n: u64) {
    for _ in 0..6000 {
        if board_counts(addr).await.get(bucket).and_then(Value::as_u64) == Some(n) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!(
        "the board never counted {n} {bucket} runs: {:?}",
        board_counts(addr).await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::print_stdout)]
async fn a_board_of_ten_thousand_runs_through_the_orchestrator() {
    let python = match browser() {
        Ok(p) => p,
        Err(why) => return skip::skip(why),
    };
    let runs = scale_runs();
    assert!(runs >= 3, "DASHBOARD_SCALE_RUNS must be at least 3");
    let live = (runs / 100).clamp(2, LIVE);
    let written = runs - live;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let root: PathBuf = data.join("runs");
    let (mut oldest, mut newest_written) = (String::new(), String::new());
    let mut failed = 0;
    let t0 = Instant::now();
    for i in 0..written {
        let outcome = if i % 50 == 1 {
            failed += 1;
            Outcome::Failed
        } else {
            Outcome::Completed
        };
        let id = write_run(&root, i, outcome);
        if i == 0 {
            oldest.clone_from(&id);
        }
        newest_written = id;
    }
    let completed = written - failed;
    println!(
        "MEASURE {written} runs written into the journal in {:.1} s",
        t0.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    let (server, addr, grpc) = start_up(dir.path(), &data, TOKEN, "scale", "");
    let listening = started.elapsed();
    until_counted(&addr, "completed", completed).await;
    let indexed = started.elapsed();
    println!(
        "MEASURE up over {written} written runs: ports open {:.1} s after start (recovery), board indexed {:.1} s after start, server RSS {:.0} MiB",
        listening.as_secs_f64(),
        indexed.as_secs_f64(),
        rss_kib(server.0.id()) as f64 / 1024.0
    );

    // The board read every run, most of them beyond the run table's finished-run cache; the
    // newest written run is still cached, its idempotency key known: a CreateRun under it is
    // that run (refused, as the request differs), not a second one.
    let mut c = connect(&grpc, Some(TOKEN)).await;
    let again = c
        .create_run(pb::CreateRunRequest {
            process: Some(pb::ProcessBundle::single_file(
                "main.mjs",
                GATED.as_bytes().to_vec(),
            )),
            idempotency_key: format!("scale-{}", written - 1),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(again.code(), tonic::Code::AlreadyExists, "{again:?}");
    assert!(again.message().contains(&newest_written), "{again:?}");

    // The live runs: created through CreateRun, each waiting on its breakpoint (four in flight).
    let t0 = Instant::now();
    let mut waiting: Vec<(String, String)> = futures::stream::iter(0..live)
        .map(|_| {
            let mut c = c.clone();
            async move {
                let run_id = create(&mut c, GATED, None).await;
                let effect_id = breakpoint_of(&mut c, &run_id).await;
                (run_id, effect_id)
            }
        })
        .buffer_unordered(4)
        .collect()
        .await;
    let took = t0.elapsed().as_secs_f64();
    let rate = live as f64 / took;
    println!(
        "MEASURE CreateRun to waiting on its breakpoint: {live} runs in {took:.1} s, {rate:.1} runs/s (all {runs} this way: ~{:.0} s)",
        runs as f64 / rate
    );
    until_counted(&addr, "needs-you", live).await;
    waiting.sort();
    let (newest, effect_id) = waiting.pop().unwrap();

    let args = json!({
        "url": format!("http://{addr}"),
        "token": TOKEN,
        "profile": dir.path().join("profile"),
        "runs": runs,
        "counts": {"completed": completed, "failed": failed, "needs-you": live, "working": 0, "stale": 0, "orphaned": 0},
        "needs_you": live,
        "searches": [oldest, newest.clone()],
        "detail": [oldest, "completed"],
        "approve": newest,
    });
    let approval = Approval {
        client: c.clone(),
        run_id: newest.clone(),
        effect_id,
    };
    browse(&python, &args, Some(approval)).await;
    let counts = board_counts(&addr).await;
    assert_eq!(counts["completed"], json!(completed + 1), "{counts:?}");
    assert_eq!(counts["needs-you"], json!(live - 1), "{counts:?}");
    println!(
        "MEASURE up over {runs} runs after the browser checks: server RSS {:.0} MiB",
        rss_kib(server.0.id()) as f64 / 1024.0
    );
}
