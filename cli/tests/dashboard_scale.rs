//! The board with many runs (`DASHBOARD_SCALE_RUNS`, default 10,000): that many runs written in
//! babysitter's local layout (one in ten waiting on a breakpoint, the rest completed), served by
//! `babysitter observe`, loaded in the system Chromium through Playwright. Asserts the counts
//! the page shows; prints the time to index the runs, the page load, the page's JS heap and the
//! server's resident memory (`--nocapture`). Skipped without Chromium and Playwright
//! (scripts/ensure-playwright.sh).

mod dashboard_support;
#[path = "../../tests/src/skip.rs"]
mod skip;

use std::path::Path;
use std::process::Command;

use babysitter_journal::{EventBody, EventType, StoredEvent};
use serde_json::{Map, json};

use dashboard_support::{browser, repo, start};

/// One run: run.json and its verified event files, written directly (no fsync: a fixture).
fn write_run(root: &Path, i: u64, waiting: bool) -> String {
    let ms = 1_700_000_000_000 + i;
    let run_id = ulid::Ulid::from_parts(ms, u128::from(i)).to_string();
    let dir = root.join(&run_id);
    std::fs::create_dir_all(dir.join("journal")).unwrap();
    let at = chrono::DateTime::from_timestamp_millis(ms as i64)
        .unwrap()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string();
    let run_json = json!({"runId": run_id, "processId": format!("scale/process-{i}"), "createdAt": at, "labels": {"batch": "scale"}});
    std::fs::write(dir.join("run.json"), run_json.to_string()).unwrap();
    let second = if waiting {
        (
            EventType::EffectRequested,
            json!({"effectId": format!("bp{i}"), "invocationKey": format!("k{i}"), "stepId": "s1", "taskId": "gate", "kind": "breakpoint", "label": "gate", "taskDefRef": format!("tasks/bp{i}/task.json")}),
        )
    } else {
        (
            EventType::RunCompleted,
            json!({"outputRef": "state/output.json"}),
        )
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

#[test]
#[allow(clippy::print_stdout)]
fn a_board_of_ten_thousand_runs() {
    let python = match browser() {
        Ok(p) => p,
        Err(why) => return skip::skip(why),
    };
    let runs: u64 = std::env::var("DASHBOARD_SCALE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("proj/.a5c/runs");
    let mut last = String::new();
    for i in 0..runs {
        last = write_run(&root, i, i % 10 == 0);
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
        "completed": runs - needs_you,
        "needs_you": needs_you,
        "search": last,
    });
    let out = Command::new(&python)
        .arg(repo().join("cli/tests/dashboard_scale.py"))
        .arg(args.to_string())
        .output()
        .unwrap();
    let indexed = started.elapsed().unwrap_or_default();
    let stdout = String::from_utf8_lossy(&out.stdout);
    println!("{stdout}");
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "MEASURE observe over {runs} runs: indexed and checked in {:.1} s (start to the last check), server RSS {:.0} MiB",
        indexed.as_secs_f64(),
        rss_kib(server.0.id()) as f64 / 1024.0
    );
}
