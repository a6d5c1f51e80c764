//! Fail-over benchmark: prints its figures (`cargo build --release --bins && cargo bench -p
//! babysitter-tests --bench failover`). Two `orchestrator` processes on one `journal` over a
//! real SeaweedFS, a `harness-launcher` worker on each; every trial `kill -9`s the active
//! orchestrator and times how long until the first task is dispatched by the one that took
//! over: the task (created through the survivor right after the kill, so it is forwarded until
//! that one is active) writes the wall-clock time it started. The killed one then comes back on
//! its port as the standby for the next trial.
//!
//! `FAILOVER_TRIALS` (20) trials; `FAILOVER_TTL_MS` is the lease ttl (5000, the default of
//! `leadership.ttl-ms`).

// A bench binary reports on stdout.
#![allow(clippy::print_stdout)]

#[path = "../tests/support/cluster.rs"]
mod cluster;

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use babysitter_proto::orchestrator::v1 as pb;
use babysitter_tests::{SeaweedFs, ServiceProcess, free_port, test_prefix};
use serde_json::json;

/// One task that writes the nanosecond wall-clock time it started to `inputs.marker`.
const MARK: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const mark = defineTask('mark', (a) => ({ kind: 'shell', title: 'mark', shell: { command: `date +%s%N > ${a.marker}.tmp && mv ${a.marker}.tmp ${a.marker}` } }));
export async function process(inputs, ctx) {
  await ctx.task(mark, { marker: inputs.marker });
  return {};
}
"#;

fn env_or<T: std::str::FromStr>(key: &str, default: T) -> T {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn orchestrator(dir: &Path, journal: &str, port: u16, ttl_ms: u64, i: usize) -> ServiceProcess {
    let mut args = cluster::orchestrator_args(
        journal,
        &format!("127.0.0.1:{port}"),
        &dir.join(format!("runs-{i}")),
    );
    args.extend(["--set".into(), format!("leadership.ttl-ms={ttl_ms}")]);
    cluster::start_orchestrator(&args, dir.join(format!("orchestrator-{i}.log")))
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn main() {
    let trials: usize = env_or("FAILOVER_TRIALS", 20);
    let ttl_ms: u64 = env_or("FAILOVER_TTL_MS", 5000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let weed = SeaweedFs::start().await.expect("seaweedfs");
        let dir = tempfile::tempdir().expect("tempdir");
        let envs: Vec<(String, String)> = weed
            .s3()
            .env_vars()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let journal = cluster::start_journal(
            &weed.s3_url(&test_prefix("failover-bench")),
            &[],
            &envs,
            dir.path().join("journal.log"),
        );
        let journal_url = format!("http://{}", journal.ready);
        let ports = [free_port().expect("port"), free_port().expect("port")];
        let mut orchestrators: Vec<Option<ServiceProcess>> = (0..2)
            .map(|i| Some(orchestrator(dir.path(), &journal_url, ports[i], ttl_ms, i)))
            .collect();
        let _workers: Vec<ServiceProcess> = (0..2)
            .map(|i| cluster::start_shell_worker(&format!("http://127.0.0.1:{}", ports[i]), &format!("w{i}"), dir.path(), &[]))
            .collect();

        let mut samples = Vec::with_capacity(trials);
        for trial in 0..trials {
            let mut active = None;
            while active.is_none() {
                for (i, port) in ports.iter().enumerate() {
                    if cluster::is_leader(*port).await == Some(true) {
                        active = Some(i);
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let active = active.unwrap_or_default();
            let survivor = 1 - active;
            // Let the standby see a few renewals first, as in steady operation.
            tokio::time::sleep(Duration::from_millis(ttl_ms / 2)).await;
            let marker = dir.path().join(format!("marker-{trial}"));
            if let Some(mut o) = orchestrators[active].take() {
                o.kill9();
            }
            let killed_at = SystemTime::now();
            let mut c = cluster::run_client(&format!("http://127.0.0.1:{}", ports[survivor]), None);
            loop {
                let created = c
                    .create_run(pb::CreateRunRequest {
                        process: Some(pb::ProcessBundle::single_file(
                            "main.mjs",
                            MARK.as_bytes().to_vec(),
                        )),
                        inputs_json: Some(
                            serde_json::to_vec(&json!({"marker": marker})).expect("inputs").into(),
                        ),
                        idempotency_key: format!("trial-{trial}"),
                        ..Default::default()
                    })
                    .await;
                if created.is_ok() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            while !marker.try_exists().unwrap_or(false) {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            let started_ns: u128 = std::fs::read_to_string(&marker)
                .expect("marker")
                .trim()
                .parse()
                .expect("nanoseconds");
            let killed_ns = killed_at.duration_since(UNIX_EPOCH).expect("clock").as_nanos();
            let took = Duration::from_nanos(started_ns.saturating_sub(killed_ns) as u64);
            println!("trial {trial}: orchestrator {active} killed, first task dispatched by {survivor} after {} ms", took.as_millis());
            samples.push(took);
            orchestrators[active] = Some(orchestrator(dir.path(), &journal_url, ports[active], ttl_ms, active));
        }
        samples.sort();
        println!(
            "fail-over (kill -9 of the active orchestrator → first task dispatched by the new one), lease ttl {ttl_ms} ms, {trials} trials: p50 {} ms, max {} ms, min {} ms",
            pct(&samples, 0.5).as_millis(),
            samples.last().copied().unwrap_or_default().as_millis(),
            samples.first().copied().unwrap_or_default().as_millis(),
        );
    });
}
