//! Orchestrator service benchmark: prints its figures
//! (`cargo bench -p babysitter-orchestrator --bench service`). Everything on 127.0.0.1 over real
//! tonic servers and clients.
//!
//! - **Dispatch round trip**: a worker completes effect k and long-polls; the time until effect
//!   k+1 (requested by the iteration that the completion triggered) reaches it. Side by side with
//!   a bare unary call (`Heartbeat` with no leases) on the same server. Journal in memory (the
//!   service's own cost) and on the filesystem (fsync'd appends, the embedded default).
//! - **1,000 concurrent runs × 10 shell tasks** on one node, filesystem journal, executed by the
//!   real worker loop (`sh -c true`), wall time and throughput.
//! - **Memory per idle waiting run**: RSS growth per run parked at a breakpoint.
//!
//! `SERVICE_BENCH_RUNS` overrides the 1,000 runs, `SERVICE_BENCH_TRIPS` the 340 dispatch trips (the first 40
//! are warm-up, not counted);
//! `SERVICE_BENCH_ONLY=dispatch` runs the in-memory dispatch loop alone (for profiling);
//! `SERVICE_BENCH_ONLY=fence` the memory and filesystem dispatch without and with the
//! leadership fence (what the `orchestrator` binary runs by default), alternated three times;
//! `SERVICE_BENCH_ONLY=budget` the in-memory dispatch and the many-runs figure with runs created
//! without and with a budget (every limit set, none reached: the check runs after each
//! iteration), alternated three times;
//! `SERVICE_BENCH_ONLY=tls` the memory and filesystem dispatch with TLS off and on (mTLS: server
//! certificate, client CA, the worker's client certificate), alternated three times.

#![allow(clippy::print_stdout)]

use std::sync::Arc;
use tokio::time::{Duration, Instant};

use babysitter_common::client::{AuthedChannel, ClientOptions, connect_lazy};
use babysitter_common::server::ServerConfig;
use babysitter_harness_launcher::worker::{Worker, WorkerSettings};
use babysitter_journal::config::LimitsConfig;
use babysitter_journal::fs::FsStore;
use babysitter_journal::leadership::{
    Acquired, Arbiter, Candidate, FencedStore, LeaseKeeper, WriterTerm,
};
use babysitter_journal::store::JournalStore;
use babysitter_journal::{Journal, JournalOptions};
use babysitter_orchestrator::engine::Engine;
use babysitter_orchestrator::service::config::OrchestratorConfig;
use babysitter_orchestrator::service::grpc::Services;
use babysitter_orchestrator::service::queue::{QueueConfig, TaskQueue};
use babysitter_orchestrator::service::runs::{ManagerConfig, RunManager};
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use babysitter_proto::orchestrator::v1::worker_service_client::WorkerServiceClient;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The orchestrator binary's allocator (`src/main.rs`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

const SEQ: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const step = defineTask('bench.step', (a) => ({ kind: a.kind, title: 'step', shell: { command: 'true' } }));
export async function process(inputs, ctx) {
  for (let i = 0; i < inputs.n; i++) await ctx.task(step, { i, kind: inputs.kind }, { label: 'step-' + i });
  return { n: inputs.n };
}
"#;

const PARKED: &str = r#"
export async function process(inputs, ctx) {
  const ok = await ctx.breakpoint({ question: 'go?' }, { label: 'gate' });
  return { ok: ok.approved };
}
"#;

struct Stack {
    url: String,
    stop: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Where the bench's journal lives, and whether behind the leadership fence.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Store {
    memory: bool,
    /// Behind the leadership fence, served through the switched services: what the
    /// `orchestrator` binary runs by default (every write admitted under its epoch, every call
    /// checked for a fresh lease).
    fenced: bool,
}

impl Store {
    const MEMORY: Store = Store {
        memory: true,
        fenced: false,
    };
    const FILESYSTEM: Store = Store {
        memory: false,
        fenced: false,
    };

    fn fenced(self) -> Store {
        Store {
            fenced: true,
            ..self
        }
    }

    fn name(self) -> &'static str {
        match (self.memory, self.fenced) {
            (true, false) => "memory",
            (true, true) => "memory + leadership fence",
            (false, false) => "filesystem",
            (false, true) => "filesystem + leadership fence",
        }
    }
}

/// A granted term over `inner` and the fenced store, renewed for as long as `stop` is not.
async fn fenced(
    inner: Arc<dyn JournalStore>,
    stop: &CancellationToken,
) -> (Arc<dyn JournalStore>, Arc<WriterTerm>) {
    let arbiter = Arc::new(Arbiter::new(inner.clone()));
    let term = WriterTerm::new();
    let candidate = Candidate {
        group: "orchestrator".into(),
        holder: "bench".into(),
        address: String::new(),
        ttl: Duration::from_secs(5),
    };
    let asked = Instant::now();
    let Acquired::Granted(granted) = arbiter.acquire(&candidate).await.unwrap() else {
        panic!("a fresh store's lease is free")
    };
    term.set(Some((granted.clone(), asked)));
    // Renewed as the binary does, every third of the ttl.
    let (keeper, renewing, stop) = (arbiter.clone(), term.clone(), stop.clone());
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(granted.ttl / 3) => {}
            }
            let sent = Instant::now();
            if let Err(e) = keeper.renew(&granted).await {
                // Visible: the dispatch that follows is refused.
                eprintln!("bench lease renewal failed: {e}");
                return;
            }
            renewing.renewed(granted.epoch, sent);
        }
    });
    let store = FencedStore::new(inner, arbiter, term.clone(), "orchestrator");
    (Arc::new(store), term)
}

async fn stack(kind: Store) -> Stack {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let stop = CancellationToken::new();
    let mut term = None;
    let store: Arc<dyn JournalStore> = if kind.memory {
        babysitter_journal::config::object_journal(
            Arc::new(object_store::memory::InMemory::new()),
            "",
            "memory://",
            &LimitsConfig::default(),
        )
        .await
        .unwrap()
    } else {
        Arc::new(FsStore::new(&runs))
    };
    let store = if kind.fenced {
        let (store, t) = fenced(store, &stop).await;
        term = Some(t);
        store
    } else {
        store
    };
    let journal = Journal::new(store, JournalOptions::default());
    // The engine as the orchestrator binary configures it.
    let engine_options = OrchestratorConfig::default().engine_options(runs.clone());
    let engine = Engine::new(journal, engine_options).unwrap();
    let queue = QueueConfig {
        max_poll_wait: Duration::from_secs(5),
        ..QueueConfig::default()
    };
    let manager = RunManager::new(
        engine,
        TaskQueue::new(queue, ulid::Ulid::generate().to_string()),
        ManagerConfig::default(),
    );
    manager.spawn_sweeper();
    let services = Services::new(manager, stop.clone());
    let tls = match tls_dir() {
        None => babysitter_common::tls::ServerTlsConfig::default(),
        Some(d) => babysitter_common::tls::ServerTlsConfig {
            client_ca_file: Some(d.join("ca.crt")),
            ..babysitter_common::tls::ServerTlsConfig::with_files(
                d.join("orchestrator.crt"),
                d.join("orchestrator.key"),
            )
        },
    };
    let scheme = if tls.enabled() { "https" } else { "http" };
    let config = ServerConfig {
        concurrency_limit: 100_000,
        tls,
        ..ServerConfig::default()
    };
    let server = match term {
        None => services.into_server(&config),
        Some(term) => {
            let (server, seat) = Services::switched_server(&config, term);
            seat.activate(services, stop.clone());
            server
        }
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("{scheme}://{}", listener.local_addr().unwrap());
    let token = stop.clone();
    tokio::spawn(async move { server.serve_with_listener(listener, token).await });
    Stack {
        url,
        stop,
        _dir: dir,
    }
}

fn runs_client(s: &Stack) -> RunServiceClient<AuthedChannel> {
    babysitter_common::client::client_tls(&s.url, None, &ClientOptions::default(), &client_tls())
        .unwrap()
}

/// The server has TLS with client certificates (mTLS) and the clients dial it so while this is
/// set: the directory of the generated certificates.
static WITH_TLS: std::sync::Mutex<Option<std::path::PathBuf>> = std::sync::Mutex::new(None);

fn tls_dir() -> Option<std::path::PathBuf> {
    WITH_TLS.lock().unwrap().clone()
}

/// The clients' TLS settings (default: none) for the current mode.
fn client_tls() -> babysitter_common::tls::ClientTlsConfig {
    match tls_dir() {
        None => babysitter_common::tls::ClientTlsConfig::default(),
        Some(d) => babysitter_common::tls::ClientTlsConfig {
            ca_file: Some(d.join("ca.crt")),
            cert_file: Some(d.join("worker.crt")),
            key_file: Some(d.join("worker.key")),
            server_name: Some("orchestrator".into()),
        },
    }
}

/// Runs are created with a budget (every limit set, none reached) while this is set.
static WITH_BUDGET: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

async fn create(
    c: &mut RunServiceClient<AuthedChannel>,
    src: &str,
    inputs: serde_json::Value,
) -> String {
    let budget = WITH_BUDGET
        .load(std::sync::atomic::Ordering::Relaxed)
        .then_some(pb::RunBudget {
            max_tokens: Some(u64::MAX / 2),
            max_cost_usd: Some(1e9),
            max_wall_time: Some(prost_types::Duration {
                seconds: 24 * 3600,
                nanos: 0,
            }),
            max_tasks: Some(u32::MAX / 2),
            max_agent_tasks: Some(u32::MAX / 2),
            warn_at: None,
            ask_to_raise: None,
        });
    c.create_run(pb::CreateRunRequest {
        process: Some(pb::ProcessBundle::single_file(
            "main.mjs",
            src.as_bytes().to_vec(),
        )),
        inputs_json: Some(serde_json::to_vec(&inputs).unwrap().into()),
        budget,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .run
    .unwrap()
    .run_id
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    v.sort();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn us(d: Duration) -> String {
    format!("{:.0} µs", d.as_secs_f64() * 1e6)
}

async fn dispatch(kind: Store) {
    let s = stack(kind).await;
    let mut c = runs_client(&s);
    let mut w: WorkerServiceClient<AuthedChannel> = babysitter_common::client::client_tls(
        &s.url,
        None,
        &ClientOptions::default(),
        &client_tls(),
    )
    .unwrap();
    w.register_worker(pb::RegisterWorkerRequest {
        worker_id: "bench".into(),
        capabilities: Some(cpb::WorkerCapabilities {
            task_kinds: vec!["noop".into()],
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let n: usize = std::env::var("SERVICE_BENCH_TRIPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(340);
    create(&mut c, SEQ, json!({"n": n, "kind": "noop"})).await;
    let poll = pb::PollTasksRequest {
        worker_id: "bench".into(),
        max_tasks: 1,
        wait: Some(prost_types::Duration {
            seconds: 5,
            nanos: 0,
        }),
    };
    let mut task = w
        .poll_tasks(poll.clone())
        .await
        .unwrap()
        .into_inner()
        .tasks
        .remove(0);
    // Half the trips complete then poll; half use eager dispatch (the completion's reply carries
    // the next task).
    const WARMUP_TRIPS: usize = 40;
    // Bare unary calls interleaved with the trips (a few after each eager one), so a change in
    // machine load meets both sides of the ratio alike.
    const BARE_PER_TRIP: usize = 4;
    let mut bare = Vec::with_capacity(n * BARE_PER_TRIP);
    let mut polled = Vec::with_capacity(n);
    let mut eager = Vec::with_capacity(n);
    for i in 1..n {
        let use_eager = i % 2 == 0;
        let t0 = Instant::now();
        let reply = w
            .complete_task(pb::CompleteTaskRequest {
                worker_id: "bench".into(),
                lease_id: task.lease_id.clone(),
                effect_id: task.effect_id.clone(),
                result: Some(cpb::TaskResult {
                    outcome: Some(cpb::task_result::Outcome::ValueJson(b"{}".to_vec().into())),
                    ..Default::default()
                }),
                next_max_tasks: u32::from(use_eager),
                next_wait: Some(prost_types::Duration {
                    seconds: 5,
                    nanos: 0,
                }),
            })
            .await
            .unwrap()
            .into_inner();
        let got = if use_eager {
            reply.next_tasks
        } else {
            w.poll_tasks(poll.clone()).await.unwrap().into_inner().tasks
        };
        let Some(next) = got.into_iter().next() else {
            panic!("no task {i} within 5 s");
        };
        let took = t0.elapsed();
        // The first trips warm the connection, the allocator and the run's session: not counted.
        if i > WARMUP_TRIPS {
            if use_eager {
                eager.push(took);
            } else {
                polled.push(took);
            }
            // After an eager trip the server's work for it is done (the reply waited for the
            // iteration); after complete + poll a driver may still be finishing.
            for _ in 0..if use_eager { BARE_PER_TRIP } else { 0 } {
                let t0 = Instant::now();
                w.heartbeat(pb::HeartbeatRequest {
                    worker_id: "bench".into(),
                    lease_ids: vec![],
                })
                .await
                .unwrap();
                bare.push(t0.elapsed());
            }
        }
        task = next;
    }
    let (b50, b99) = (pct(&mut bare, 0.5), pct(&mut bare, 0.99));
    let journal = kind.name();
    let journal = if tls_dir().is_some() {
        format!("{journal} + mTLS")
    } else {
        journal.to_owned()
    };
    println!("bare unary (Heartbeat) p50 {} p99 {}", us(b50), us(b99));
    for (how, trips) in [
        ("complete + poll", &mut polled),
        ("eager dispatch", &mut eager),
    ] {
        let (d50, d99) = (pct(trips, 0.5), pct(trips, 0.99));
        println!(
            "dispatch round trip, {journal} journal, {how} ({} trips): p50 {} p99 {} = {:.1}x bare unary p50",
            trips.len(),
            us(d50),
            us(d99),
            d50.as_secs_f64() / b50.as_secs_f64()
        );
    }
}

async fn wait_all(c: &mut RunServiceClient<AuthedChannel>, status: pb::RunStatus, n: usize) {
    loop {
        let mut count = 0;
        let mut token = String::new();
        loop {
            let r = c
                .list_runs(pb::ListRunsRequest {
                    statuses: vec![status as i32],
                    page_size: 1000,
                    page_token: token,
                    ..Default::default()
                })
                .await
                .unwrap()
                .into_inner();
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

async fn many_runs(runs: usize) {
    let s = stack(Store::FILESYSTEM).await;
    let work = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    let worker = Worker::new(
        connect_lazy(&s.url, None).unwrap(),
        WorkerSettings {
            worker_id: "w".into(),
            namespaces: vec![],
            labels: Default::default(),
            task_kinds: vec!["shell".into()],
            max_concurrency: 64,
            work_dir: work.path().to_owned(),
            drain_timeout: Duration::from_secs(5),
        },
    )
    .unwrap();
    tokio::spawn(worker.run(stop.clone()));
    let mut c = runs_client(&s);
    let t0 = Instant::now();
    // Clients create runs concurrently (32 in flight), as a CI fleet would.
    let mut creating = tokio::task::JoinSet::new();
    for i in 0..runs {
        if creating.len() == 32 {
            creating.join_next().await;
        }
        let mut c = c.clone();
        creating.spawn(async move {
            create(&mut c, SEQ, json!({"n": 10, "kind": "shell", "i": i})).await
        });
    }
    while creating.join_next().await.is_some() {}
    let created = t0.elapsed();
    wait_all(&mut c, pb::RunStatus::Completed, runs).await;
    let total = t0.elapsed();
    stop.cancel();
    println!(
        "{runs} runs x 10 shell tasks (filesystem journal, 1 worker x 64 slots): all completed in {:.1} s (created in {:.1} s) = {:.0} tasks/s, {:.0} runs/s",
        total.as_secs_f64(),
        created.as_secs_f64(),
        (runs * 10) as f64 / total.as_secs_f64(),
        runs as f64 / total.as_secs_f64()
    );
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

async fn idle_memory(runs: usize) {
    let s = stack(Store::FILESYSTEM).await;
    let mut c = runs_client(&s);
    // Warm up allocator pools, JS threads and the connection first.
    for _ in 0..20 {
        create(&mut c, PARKED, json!({})).await;
    }
    wait_all(&mut c, pb::RunStatus::Waiting, 20).await;
    let before = rss_kib();
    for _ in 0..runs {
        create(&mut c, PARKED, json!({})).await;
    }
    wait_all(&mut c, pb::RunStatus::Waiting, runs + 20).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss_kib();
    println!(
        "idle waiting runs: {runs} runs parked at a breakpoint add {} KiB RSS = {:.1} KiB per run",
        after.saturating_sub(before),
        after.saturating_sub(before) as f64 / runs as f64
    );
}

fn main() {
    let runs: usize = std::env::var("SERVICE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    // SERVICE_BENCH_ONLY=dispatch: only the in-memory dispatch loop (for profiling).
    let only_dispatch = std::env::var("SERVICE_BENCH_ONLY").is_ok_and(|v| v == "dispatch");
    // SERVICE_BENCH_ONLY=fence: each journal without and with the leadership fence, alternated
    // three times (so machine load meets both alike).
    let only_fence = std::env::var("SERVICE_BENCH_ONLY").is_ok_and(|v| v == "fence");
    let only_budget = std::env::var("SERVICE_BENCH_ONLY").is_ok_and(|v| v == "budget");
    let only_tls = std::env::var("SERVICE_BENCH_ONLY").is_ok_and(|v| v == "tls");
    rt.block_on(async {
        if only_tls {
            let certs = tempfile::tempdir().unwrap();
            let leaves = ["orchestrator", "worker"]
                .map(|n| babysitter_common::tls::generate::Leaf::for_host(n, &[]));
            babysitter_common::tls::generate::generate(certs.path(), &leaves).unwrap();
            for _ in 0..3 {
                for store in [Store::MEMORY, Store::FILESYSTEM] {
                    for on in [false, true] {
                        *WITH_TLS.lock().unwrap() = on.then(|| certs.path().to_owned());
                        dispatch(store).await;
                    }
                }
            }
            return;
        }
        if only_budget {
            for _ in 0..3 {
                for on in [false, true] {
                    WITH_BUDGET.store(on, std::sync::atomic::Ordering::Relaxed);
                    println!("== runs created with a budget: {on}");
                    dispatch(Store::MEMORY).await;
                    many_runs(runs).await;
                }
            }
            return;
        }
        if only_fence {
            for _ in 0..3 {
                for store in [Store::MEMORY, Store::FILESYSTEM] {
                    dispatch(store).await;
                    dispatch(store.fenced()).await;
                }
            }
            return;
        }
        dispatch(Store::MEMORY).await;
        if only_dispatch {
            return;
        }
        dispatch(Store::MEMORY.fenced()).await;
        dispatch(Store::FILESYSTEM).await;
        dispatch(Store::FILESYSTEM.fenced()).await;
        idle_memory(runs).await;
        many_runs(runs).await;
    });
}
