//! Benchmark (prints figures, asserts nothing): issue 7 §4 — per harness, the time from the
//! lease (the task handed to the worker) to the harness's first model request, the whole task
//! through the worker versus running the same CLI directly with the same launch plan, and the
//! worker process's memory while five agent tasks (one per harness) run at once.
//!
//! Run: `cargo bench -p babysitter-harness-launcher --bench launcher` (needs the CLIs from
//! `scripts/ensure-*.sh`; a missing one is skipped, saying why). Everything runs on 127.0.0.1:
//! the scripted model server, the real orchestrator (its worker handlers called in process, see
//! `tests/support/orchestrator.rs`) and the real `Worker` in this process, the harnesses as child
//! processes (stopped with their process groups). The lease and the completion are timed where
//! the worker receives and sends them (the support's recorder), so the orchestrator's own work
//! (run creation, iterations, journal writes) is outside the worker's figures. `BENCH_N` = runs
//! per harness and mode (default 3); the figure is the median.
#![allow(clippy::print_stdout)] // a bench binary: its figures are its output

#[path = "../tests/support/orchestrator.rs"]
mod orchestrator;
#[path = "../tests/support/worker.rs"]
mod worker;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use babysitter_common::EnvMap;
use babysitter_harness_launcher::config::AgentConfig;
use babysitter_harness_launcher::harness::{self, Endpoint, HarnessKind, LaunchRequest};
use babysitter_harness_launcher::provider::ProviderConfig;
use babysitter_transport_proxy::scripted::ScriptedServer;
use serde_json::json;
use tokio::time::Instant;

use orchestrator::Orchestrator;

const PROMPT: &str = "Create out.txt containing hello using the shell, then reply DONE";

fn installed(kind: HarnessKind) -> Option<PathBuf> {
    let dir = match kind {
        HarnessKind::ClaudeCode => "claude",
        HarnessKind::Codex => "codex",
        HarnessKind::GeminiCli => "gemini",
        HarnessKind::Pi => "pi",
        HarnessKind::OpenCode => "opencode",
    };
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../.ci-work")
        .join(format!("harness-{dir}"))
        .join("node_modules/.bin")
        .join(kind.binary_name());
    if std::fs::metadata(&p).is_ok_and(|m| m.is_file()) {
        Some(p)
    } else {
        println!("{kind}: SKIPPED ({} missing)", p.display());
        None
    }
}

/// When the scripted server had seen `n0 + 1` requests (polled every 2 ms), within `limit`.
async fn first_request(s: &ScriptedServer, n0: usize, limit: Duration) -> Option<Instant> {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if s.requests().len() > n0 {
            return Some(Instant::now());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    None
}

/// When the task `name` was handed to the worker (its lease) and when the worker sent its
/// completion.
async fn lease_span(orch: &Orchestrator, name: &str) -> anyhow::Result<(Instant, Instant)> {
    let completed = orch.sent(name).await.at;
    let t = orch.task(name);
    let leased = orch
        .recorder()
        .read(|l| {
            l.assigned
                .iter()
                .find(|a| a.task.run_id == t.run_id && a.task.effect_id == t.effect_id)
                .map(|a| a.at)
        })
        .ok_or_else(|| anyhow::anyhow!("{name}: no lease recorded"))?;
    Ok((leased, completed))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The CLI alone, launched with the launcher's own plan: (to first request, total) seconds.
async fn direct(
    kind: HarnessKind,
    bin: &PathBuf,
    s: &Arc<ScriptedServer>,
) -> anyhow::Result<(f64, f64)> {
    let tmp = tempfile::tempdir()?;
    let (project, home) = (tmp.path().join("project"), tmp.path().join("home"));
    std::fs::create_dir_all(&project)?;
    let ep = Endpoint {
        protocol: kind.native_protocols()[0],
        origin: s.url(),
        api_key: "bench-key".into(),
        model: "fake-model".into(),
    };
    let req = LaunchRequest {
        prompt: PROMPT,
        endpoint: &ep,
        project: &project,
        home: &home,
        max_turns: None,
        output_schema: None,
        as_root: rustix::process::geteuid().is_root(),
        trace: None,
        resume: None,
    };
    let plan = harness::plan(kind, &req).ok_or_else(|| anyhow::anyhow!("no plan"))?;
    for (p, c) in &plan.files {
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::write(p, c)?;
    }
    let n0 = s.requests().len();
    let t0 = Instant::now();
    let mut child = tokio::process::Command::new(bin)
        .args(&plan.args)
        .current_dir(&project)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .envs(&plan.env)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()?;
    let pid = child.id();
    let s2 = s.clone();
    let first = tokio::spawn(async move { first_request(&s2, n0, Duration::from_secs(120)).await });
    let status = tokio::time::timeout(Duration::from_secs(180), child.wait()).await;
    let total = t0.elapsed().as_secs_f64();
    if let Some(pid) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let ok = matches!(status, Ok(Ok(st)) if st.success());
    anyhow::ensure!(ok, "{kind} failed when run directly");
    let first = first.await?.map(|t| t.duration_since(t0).as_secs_f64());
    Ok((first.unwrap_or(f64::NAN), total))
}

fn vm_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|n| n.parse().ok()))
        })
        .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let scripted = Arc::new(ScriptedServer::start(([127, 0, 0, 1], 0).into(), None, None).await?);
    let kinds: Vec<(HarnessKind, PathBuf)> = HarnessKind::ALL
        .into_iter()
        .filter_map(|k| installed(k).map(|p| (k, p)))
        .collect();
    let config = AgentConfig {
        binaries: kinds
            .iter()
            .map(|(k, p)| (k.name().to_owned(), p.clone()))
            .collect(),
        providers: kinds
            .iter()
            .map(|(k, _)| {
                (
                    k.name().to_owned(),
                    ProviderConfig {
                        protocol: k.native_protocols()[0],
                        base_url: scripted.url(),
                        api_key_env: None,
                        model: Some("fake-model".into()),
                        kind: Default::default(),
                    },
                )
            })
            .collect::<BTreeMap<_, _>>(),
        ..AgentConfig::default()
    };
    let path = std::env::var("PATH").unwrap_or_default();
    let agents = config.settings(&EnvMap::new().with("PATH", path)).await;
    let orch = Orchestrator::start().await;
    let work = tempfile::tempdir()?;
    let w = worker::start_n(&orch, agents, work.path(), 5);
    orch.capabilities().await;

    println!("harness        | direct: 1st req / total | worker: lease→1st req / total | overhead");
    let mut lease = 0;
    for (kind, bin) in &kinds {
        let (mut d_first, mut d_total, mut w_first, mut w_total) = (vec![], vec![], vec![], vec![]);
        for _ in 0..n {
            let (f, t) = direct(*kind, bin, &scripted).await?;
            d_first.push(f);
            d_total.push(t);
            lease += 1;
            let id = format!("b{lease}");
            let n0 = scripted.requests().len();
            let s2 = scripted.clone();
            let first =
                tokio::spawn(async move { first_request(&s2, n0, Duration::from_secs(180)).await });
            orch.push(
                &id,
                "agent",
                json!({"kind": "agent", "execution": {"harness": kind.name()},
                                            "agent": {"prompt": PROMPT, "provider": kind.name()}}),
            )
            .await;
            let r = orch.result(&id, Duration::from_secs(180)).await;
            if let Err(e) = r.outcome() {
                first.abort();
                anyhow::bail!("{kind} failed through the worker: {e}");
            }
            let (leased, completed) = lease_span(&orch, &id).await?;
            w_total.push(completed.duration_since(leased).as_secs_f64());
            let first = first.await?;
            w_first.push(first.map_or(f64::NAN, |t| t.duration_since(leased).as_secs_f64()));
        }
        let (df, dt, wf, wt) = (
            median(d_first),
            median(d_total),
            median(w_first),
            median(w_total),
        );
        println!(
            "{:<14} | {:>7.3} s / {:>7.3} s       | {:>7.3} s / {:>7.3} s          | {:+.3} s",
            kind.name(),
            df,
            dt,
            wf,
            wt,
            wt - dt
        );
    }

    // Five at once, one per harness: the worker's (this process's) memory meanwhile.
    let rss_before = vm_kib("VmRSS:");
    let mut peak = rss_before;
    let t0 = Instant::now();
    let mut ids = Vec::new();
    for (k, _) in &kinds {
        lease += 1;
        let id = format!("c{lease}");
        orch.push(
            &id,
            "agent",
            json!({"kind": "agent", "execution": {"harness": k.name()},
                                        "agent": {"prompt": PROMPT, "provider": k.name()}}),
        )
        .await;
        ids.push(id);
    }
    {
        let done = async {
            for id in &ids {
                orch.result(id, Duration::from_secs(300)).await;
            }
        };
        tokio::pin!(done);
        loop {
            tokio::select! {
                () = &mut done => break,
                () = tokio::time::sleep(Duration::from_millis(50)) => peak = peak.max(vm_kib("VmRSS:")),
            }
        }
    }
    println!(
        "{} tasks at once: {:.1} s; worker RSS {:.1} MiB before, peak {:.1} MiB",
        ids.len(),
        t0.elapsed().as_secs_f64(),
        rss_before as f64 / 1024.0,
        peak as f64 / 1024.0
    );
    w.stop().await;
    orch.stop().await;
    if let Ok(s) = Arc::try_unwrap(scripted) {
        s.stop().await;
    }
    Ok(())
}
