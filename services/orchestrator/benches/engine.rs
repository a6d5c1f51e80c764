//! Engine benchmark: prints its figures (`cargo bench -p babysitter-orchestrator --bench engine`).
//!
//! Journal in memory (`object_store::memory`), so the figures are the engine's own: JS, replay
//! bookkeeping, result views, one journal append per iteration. Measured:
//! - whole sequential runs of N = 10, 100, 1,000, 10,000 tasks, warm (sessions kept) and cold
//!   (every iteration replays from the start; N ≤ 1,000);
//! - per-iteration engine time and JS time, and the warm cost per resolved effect;
//! - warm N = 1,000 and 10,000 with the engine configured as the orchestrator service does
//!   (only writer of its runs, no babysitter `nextActions`);
//! - one cold replay of a finished 10,000-effect run;
//! - a parallel fan-out of 1,000;
//! - JS heap per cached run.
//!
//! Everything runs on a runtime worker thread, the way the orchestrator service calls the engine,
//! with the orchestrator binary's allocator.

#![allow(clippy::print_stdout)]

use std::sync::Arc;

use babysitter_journal::config::LimitsConfig;
use babysitter_journal::store::RunFiles;
use babysitter_journal::{EventType, Journal, JournalOptions, NewEvent};
use babysitter_orchestrator::engine::commit::Commit;
use babysitter_orchestrator::engine::{Engine, EngineOptions, IterationStatus};
use babysitter_orchestrator::service::config::OrchestratorConfig;
use serde_json::json;
use tokio::time::{Duration, Instant};

/// The orchestrator binary's allocator (`src/main.rs`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SEQ: &str = "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
export const step = defineTask('bench.step', (args, taskCtx) => ({ kind: 'node', title: 'step ' + args.i, node: { entry: 'noop.js', args: ['--i', String(args.i)] }, io: { outputJsonPath: `tasks/${taskCtx.effectId}/result.json` }, labels: ['bench'] }));\n\
export async function process(inputs, ctx) { let sum = 0; for (let i = 0; i < inputs.n; i++) { const r = await ctx.task(step, { i }, { label: 'step-' + i }); sum += r.value; } return { n: inputs.n, sum }; }\n";

const PAR: &str = "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
export const step = defineTask('bench.par', (args) => ({ kind: 'node', title: 'par ' + args.i, node: { entry: 'noop.js' } }));\n\
export async function process(inputs, ctx) { const rs = await ctx.parallel.all(Array.from({ length: inputs.n }, (_, i) => () => ctx.task(step, { i }, { label: 'par-' + i }))); return rs.reduce((a, r) => a + r.value, 0); }\n";

struct Bench {
    _dir: tempfile::TempDir,
    engine: Engine,
    entry: String,
}

async fn bench(src: &str, warm: bool) -> Bench {
    bench_with(src, warm, |_| {}).await
}

/// The engine configured as the orchestrator service configures it (`OrchestratorConfig::
/// engine_options`): the only writer of its runs, no babysitter `nextActions` (tasks are
/// dispatched from what each iteration requested).
fn service_options(o: &mut EngineOptions) {
    let service = OrchestratorConfig::default().engine_options(o.runs_root.clone());
    o.exclusive_writer = service.exclusive_writer;
    o.next_actions = service.next_actions;
    o.js_placement = service.js_placement;
}

async fn bench_with(src: &str, warm: bool, tune: impl FnOnce(&mut EngineOptions)) -> Bench {
    let dir = tempfile::tempdir().unwrap();
    let entry = dir.path().join("processes/p.mjs");
    std::fs::create_dir_all(entry.parent().unwrap()).unwrap();
    std::fs::write(&entry, src).unwrap();
    let store = babysitter_journal::config::object_journal(
        Arc::new(object_store::memory::InMemory::new()),
        "",
        "memory://",
        &LimitsConfig::default(),
    )
    .await
    .unwrap();
    let journal = Journal::new(store, JournalOptions::default());
    let mut opts = EngineOptions::new(dir.path().join("runs"));
    opts.warm = warm;
    opts.cpu_limit = Duration::from_secs(600);
    tune(&mut opts);
    let engine = Engine::new(journal, opts).unwrap();
    Bench {
        _dir: dir,
        engine,
        entry: entry.display().to_string(),
    }
}

async fn create(b: &Bench, run_id: &str, n: u64) {
    let run_json = json!({"runId": run_id, "request": "bench", "processId": "bench/p",
        "entrypoint": {"importPath": b.entry, "exportName": "process"}, "processPath": b.entry,
        "layoutVersion": "2026.01-storage-preview", "createdAt": "2026-01-01T00:00:00.000Z"});
    let j = b.engine.journal();
    j.create_run(
        run_id,
        RunFiles {
            run_json,
            inputs_json: Some(json!({"n": n})),
        },
    )
    .await
    .unwrap();
    j.append(
        run_id,
        1,
        vec![NewEvent::new(
            EventType::RunCreated,
            json!({"runId": run_id}),
        )],
    )
    .await
    .unwrap();
}

struct Figures {
    iterations: usize,
    iterate: Duration,
    js: Duration,
    post: Duration,
}

/// Drives a run to completion, posting `{value: 1}` for every action.
async fn drive(b: &Bench, run_id: &str) -> Figures {
    let mut f = Figures {
        iterations: 0,
        iterate: Duration::ZERO,
        js: Duration::ZERO,
        post: Duration::ZERO,
    };
    loop {
        let t = Instant::now();
        let it = b.engine.iterate(run_id).await.unwrap();
        f.iterate += t.elapsed();
        f.js += it.js_time;
        f.iterations += 1;
        if it.status != IterationStatus::Waiting {
            assert_eq!(it.status, IterationStatus::Completed, "{:?}", it.error);
            break;
        }
        let t = Instant::now();
        // babysitter's nextActions, or (service options) what the iteration requested.
        let actions: Vec<String> = if b.engine.options().next_actions {
            it.next_actions
                .iter()
                .map(|a| a["effectId"].as_str().unwrap().to_owned())
                .collect()
        } else {
            it.requested.clone()
        };
        for effect_id in actions {
            let commit = Commit {
                effect_id,
                outcome: Ok(json!({"value": 1})),
                stdout: None,
                stderr: None,
                started_at: None,
                finished_at: None,
                metadata: None,
                stdout_ref: None,
                stderr_ref: None,
            };
            b.engine.commit_result(run_id, commit).await.unwrap();
        }
        f.post += t.elapsed();
    }
    f
}

/// Cold replays of a finished 10,000-effect run: the best of three.
async fn cold_replay(b: &Bench, run_id: &str) {
    let mut best = Duration::MAX;
    let mut best_js = Duration::MAX;
    for _ in 0..3 {
        let t = Instant::now();
        let r = b.engine.replay_dry(run_id).await.unwrap();
        best = best.min(t.elapsed());
        best_js = best_js.min(r.js_time);
        assert!(r.requests.is_empty());
    }
    println!(
        "cold replay of 10,000 resolved effects: {:.1} ms total ({:.1} ms in JS, the rest reading 10,000 result views)",
        best.as_secs_f64() * 1000.0,
        best_js.as_secs_f64() * 1000.0
    );
}

/// One line of the sequential runs.
fn print_run(n: u64, mode: &str, total: Duration, f: &Figures) {
    println!(
        "N={n:>6} {mode:<4} total {:>9.1} ms | iterate {:>8.1} µs/it (js {:>7.1} µs/it) | post {:>7.1} µs/effect | engine per resolved effect {:>7.1} µs",
        total.as_secs_f64() * 1000.0,
        us(f.iterate) / f.iterations as f64,
        us(f.js) / f.iterations as f64,
        us(f.post) / n as f64,
        us(f.iterate) / n as f64,
    );
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // The engine is driven from a runtime worker, as the orchestrator service's handlers drive
    // it (driving from `block_on` on the main thread would add a cross-thread wake-up to every
    // journal write, which the journal runs as its own task).
    tokio::spawn(run()).await.expect("the benchmark panicked");
}

async fn run() {
    // `ENGINE_BENCH_PROFILE=replay`: only the N=10,000 run and its cold replays.
    if std::env::var("ENGINE_BENCH_PROFILE").as_deref() == Ok("replay") {
        let b = bench(SEQ, true).await;
        create(&b, "replay", 10_000).await;
        drive(&b, "replay").await;
        cold_replay(&b, "replay").await;
        return;
    }
    // `ENGINE_BENCH_PROFILE=1`: only the warm N=1,000 run (`ENGINE_BENCH_N` to change N; for
    // callgrind / perf);
    // `=service`: the same with the service's engine options.
    if let Ok(mode) = std::env::var("ENGINE_BENCH_PROFILE") {
        let b = if mode == "service" {
            bench_with(SEQ, true, service_options).await
        } else {
            bench(SEQ, true).await
        };
        let n = std::env::var("ENGINE_BENCH_N")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1000);
        create(&b, "profile", n).await;
        let f = drive(&b, "profile").await;
        println!(
            "profile: {} iterations, iterate {:.1} µs/it (js {:.1} µs/it)",
            f.iterations,
            us(f.iterate) / f.iterations as f64,
            us(f.js) / f.iterations as f64
        );
        return;
    }
    println!("== sequential runs (memory journal) ==");
    for (n, cold_too) in [(10u64, true), (100, true), (1000, true), (10_000, false)] {
        for warm in [true, false] {
            if !warm && !cold_too {
                continue;
            }
            let b = bench(SEQ, warm).await;
            let id = format!("seq-{n}-{warm}");
            create(&b, &id, n).await;
            let t = Instant::now();
            let f = drive(&b, &id).await;
            let total = t.elapsed();
            print_run(n, if warm { "warm" } else { "cold" }, total, &f);
            if warm && n == 10_000 {
                cold_replay(&b, &id).await;
            }
        }
    }
    println!("== sequential runs, engine configured as the orchestrator service does ==");
    for n in [1000u64, 10_000] {
        let b = bench_with(SEQ, true, service_options).await;
        let id = format!("svc-{n}");
        create(&b, &id, n).await;
        let t = Instant::now();
        let f = drive(&b, &id).await;
        let total = t.elapsed();
        print_run(n, "warm", total, &f);
    }
    println!("== parallel fan-out ==");
    for warm in [true, false] {
        let b = bench(PAR, warm).await;
        create(&b, "par", 1000).await;
        let t = Instant::now();
        let f = drive(&b, "par").await;
        println!(
            "fan-out 1,000 {:<4}: total {:.1} ms, {} iterations, iterate {:.1} ms, js {:.1} ms, posting 1,000 results {:.1} ms",
            if warm { "warm" } else { "cold" },
            t.elapsed().as_secs_f64() * 1000.0,
            f.iterations,
            f.iterate.as_secs_f64() * 1000.0,
            f.js.as_secs_f64() * 1000.0,
            f.post.as_secs_f64() * 1000.0
        );
    }
    println!("== memory per cached run ==");
    let b = bench(SEQ, true).await;
    for i in 0..100 {
        let id = format!("mem-{i}");
        create(&b, &id, 50).await;
        b.engine.iterate(&id).await.unwrap();
    }
    let (runs, bytes) = b.engine.cache_stats().await.unwrap();
    println!(
        "{runs} cached runs waiting on their first task: {:.1} KiB of JS heap per run",
        bytes as f64 / runs.max(1) as f64 / 1024.0
    );
}
