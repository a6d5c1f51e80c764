//! What the multi-process suites (`orchestrator_cluster.rs`, `agent_end_to_end.rs`) share: the
//! `journal` and `orchestrator` binaries' command lines, a process bundle from one source file,
//! creating a run, and reading a run's events and files straight from the journal service (not
//! through the orchestrator, so a test can compare the two).

#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

use babysitter_common::auth::Secret;
use babysitter_common::client::{AuthedChannel, ClientOptions, client};
use babysitter_proto::journal::v1 as jpb;
use babysitter_proto::journal::v1::journal_service_client::JournalServiceClient;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use babysitter_tests::{ServiceProcess, workspace_bin};
use serde_json::Value;

/// Starts the `journal` binary on `store` (a store URL), listening on a free port.
pub fn start_journal(
    store: &str,
    extra_args: &[String],
    envs: &[(String, String)],
    log: PathBuf,
) -> ServiceProcess {
    let mut args = vec![
        "--store".to_owned(),
        store.to_owned(),
        "--listen".into(),
        "127.0.0.1:0".into(),
    ];
    args.extend_from_slice(extra_args);
    ServiceProcess::start(
        &workspace_bin("journal").expect("the journal binary"),
        &args,
        envs,
        "journal listening on ",
        log,
    )
    .expect("journal")
}

/// The `orchestrator` command line over the remote journal at `journal_url`, listening on
/// `listen`, with short leases, heartbeats and sweeps (crashes are noticed within seconds).
pub fn orchestrator_args(journal_url: &str, listen: &str, runs_dir: &Path) -> Vec<String> {
    [
        "--journal",
        journal_url,
        "--listen",
        listen,
        "--set",
        "queue.lease-duration-ms=2000",
        "--set",
        "queue.heartbeat-interval-ms=300",
        "--set",
        "queue.max-poll-wait-ms=2000",
        "--set",
        "queue.retry-backoff-ms=100",
        "--set",
        "runs.sweep-interval-ms=100",
        "--set",
        "leadership.ttl-ms=2000",
        "--set",
        &format!("engine.runs-dir={}", runs_dir.display()),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect()
}

/// Starts the `orchestrator` binary with `args`.
pub fn start_orchestrator(args: &[String], log: PathBuf) -> ServiceProcess {
    ServiceProcess::start(
        &workspace_bin("orchestrator").expect("the orchestrator binary"),
        args,
        &[],
        "orchestrator listening on ",
        log,
    )
    .expect("orchestrator")
}

/// A `RunService` client for `url`, with an optional bearer token.
pub fn run_client(url: &str, token: Option<&str>) -> RunServiceClient<AuthedChannel> {
    let token = token.map(Secret::new);
    client(url, token.as_ref(), &ClientOptions::default()).expect("orchestrator channel")
}

/// Creates a run of `src` with `inputs`; its id.
pub async fn create(c: &mut RunServiceClient<AuthedChannel>, src: &str, inputs: Value) -> String {
    c.create_run(pb::CreateRunRequest {
        process: Some(pb::ProcessBundle::single_file(
            "main.mjs",
            src.as_bytes().to_vec(),
        )),
        inputs_json: Some(serde_json::to_vec(&inputs).expect("inputs").into()),
        ..Default::default()
    })
    .await
    .expect("create run")
    .into_inner()
    .run
    .expect("the created run")
    .run_id
}

/// The run `run_id` as `GetRun` answers it now.
pub async fn get_run(c: &mut RunServiceClient<AuthedChannel>, run_id: &str) -> pb::Run {
    c.get_run(pb::GetRunRequest {
        run_id: run_id.to_owned(),
        ..Default::default()
    })
    .await
    .expect("get run")
    .into_inner()
    .run
    .expect("the run")
}

/// A `JournalService` client for the journal at `addr` (`host:port`).
pub fn journal_client(addr: &str, token: Option<&str>) -> JournalServiceClient<AuthedChannel> {
    let token = token.map(Secret::new);
    let url = format!("http://{addr}");
    client(&url, token.as_ref(), &ClientOptions::default()).expect("journal channel")
}

/// Every event of a run, read from the journal service at `addr`.
pub async fn journal_events(addr: &str, token: Option<&str>, run_id: &str) -> Vec<jpb::Event> {
    let mut stream = journal_client(addr, token)
        .read(jpb::ReadRequest {
            run_id: run_id.into(),
            from_seq: 1,
            to_seq: 0,
        })
        .await
        .expect("journal read")
        .into_inner();
    let mut out = Vec::new();
    while let Some(m) = stream.message().await.expect("journal read stream") {
        out.extend(m.events);
    }
    out
}

/// A run file (e.g. `tasks/<effect>/result.json`) from the journal service at `addr`.
pub async fn journal_file(addr: &str, token: Option<&str>, run_id: &str, path: &str) -> Vec<u8> {
    journal_client(addr, token)
        .get_run_file(jpb::GetRunFileRequest {
            run_id: run_id.into(),
            path: path.into(),
        })
        .await
        .unwrap_or_else(|e| panic!("{path} of run {run_id}: {e}"))
        .into_inner()
        .content
        .to_vec()
}

/// An event's data as JSON.
pub fn data(e: &jpb::Event) -> Value {
    serde_json::from_slice(&e.data_json).expect("event data is JSON")
}

/// A process whose shell tasks append `<idempotency key> <attempt>` to `inputs.ledger` before
/// they work, so a task that runs twice shows in the ledger even where the journal looks right:
/// one task, a fan-out (`inputs.fan`, three by default), one more; the output names them.
pub const LEDGER_STEPS: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: a.t,
  shell: { command: `echo "$BABYSITTER_IDEMPOTENCY_KEY $BABYSITTER_ATTEMPT" >> ${a.ledger}; sleep ${a.work}; echo ${a.t}` } }));
export async function process(inputs, ctx) {
  const l = inputs.ledger;
  const w = inputs.work ?? 0.2;
  const a = await ctx.task(sh, { t: 'a', ledger: l, work: w });
  const fan = await ctx.parallel.map(inputs.fan ?? [1, 2, 3], (i) => ctx.task(sh, { t: `f${i}`, ledger: l, work: w }, { label: `f${i}` }));
  const b = await ctx.task(sh, { t: 'b', ledger: l, work: w });
  return { n: inputs.n, a: a.stdout.trim(), fan: fan.map((f) => f.stdout.trim()), b: b.stdout.trim() };
}
"#;

/// A process of one shell task running `inputs.cmd`; its output is `{ out: <stdout, trimmed> }`.
pub const ONE_SHELL_TASK: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: 'marked', shell: { command: a.cmd } }));
export async function process(inputs, ctx) {
  const r = await ctx.task(sh, { cmd: inputs.cmd });
  return { out: r.stdout.trim() };
}
"#;

/// The ledger's lines of tasks that ran more than once (empty when each ran once) and how many
/// distinct tasks ran.
pub fn ledger_repeats(ledger: &Path) -> (Vec<String>, usize) {
    let ran = std::fs::read_to_string(ledger).unwrap_or_default();
    let mut per_effect: std::collections::HashMap<&str, usize> = Default::default();
    for line in ran.lines() {
        *per_effect
            .entry(line.split(' ').next().unwrap_or_default())
            .or_default() += 1;
    }
    let repeated = ran
        .lines()
        .filter(|l| per_effect[l.split(' ').next().unwrap_or_default()] > 1)
        .map(str::to_owned)
        .collect();
    (repeated, per_effect.len())
}

/// A reproducible "random" schedule (xorshift from a printed seed, for replays).
pub struct Schedule(u64);

impl Schedule {
    /// Seeded from `BABYSITTER_TEST_SEED` when set (to replay a printed schedule), else the clock.
    pub fn from_clock() -> Self {
        let seed = std::env::var("BABYSITTER_TEST_SEED")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(7) as u64
            });
        eprintln!("schedule seed {seed}");
        Self(seed | 1)
    }

    /// The next value below `bound`.
    pub fn below(&mut self, bound: u64) -> u64 {
        let x = &mut self.0;
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x % bound
    }
}

/// Starts a `harness-launcher` shell worker `id` polling `orchestrator` (a URL), working under
/// `dir/work-<id>`, logging to `dir/<id>.log`, with `extra` flags.
pub fn start_shell_worker(
    orchestrator: &str,
    id: &str,
    dir: &Path,
    extra: &[String],
) -> ServiceProcess {
    let mut args: Vec<String> = [
        "--orchestrator".to_owned(),
        orchestrator.to_owned(),
        "--id".into(),
        id.into(),
        "--set".into(),
        format!(
            "worker.work-dir={}",
            dir.join(format!("work-{id}")).display()
        ),
        "--set".into(),
        "worker.max-concurrency=8".into(),
        "--set".into(),
        "worker.task-kinds=[\"shell\"]".into(),
    ]
    .into();
    args.extend_from_slice(extra);
    ServiceProcess::start(
        &workspace_bin("harness-launcher").expect("the harness-launcher binary"),
        &args,
        &[],
        "harness-launcher ",
        dir.join(format!("{id}.log")),
    )
    .expect("worker")
}

/// The health entry an orchestrator reports `SERVING` while it holds the journal's lease.
pub const LEADER_HEALTH: &str = "babysitter.orchestrator.v1.Leader";

/// The health status of `service` (`""`: the server overall) at `addr` (`host:port`), or `None`
/// when the server does not answer within two seconds (stopped, paused).
pub async fn health_of(addr: &str, service: &str) -> Option<i32> {
    use tonic_health::pb::HealthCheckRequest;
    use tonic_health::pb::health_client::HealthClient;
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .ok()?
        .connect_timeout(std::time::Duration::from_secs(2))
        .timeout(std::time::Duration::from_secs(2))
        .connect_lazy();
    let r = HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: service.to_owned(),
        })
        .await
        .ok()?;
    Some(r.into_inner().status)
}

/// Whether the orchestrator on 127.0.0.1:`port` says it is the active one (`None`: no answer).
pub async fn is_leader(port: u16) -> Option<bool> {
    use tonic_health::pb::health_check_response::ServingStatus;
    health_of(&format!("127.0.0.1:{port}"), LEADER_HEALTH)
        .await
        .map(|s| s == ServingStatus::Serving as i32)
}

/// Each effect requested once (one id per invocation key) and resolved exactly once.
pub fn assert_exactly_once(run_id: &str, events: &[jpb::Event]) {
    let mut requested: HashMap<String, usize> = HashMap::new();
    let mut keys = HashSet::new();
    let mut resolved: HashMap<String, usize> = HashMap::new();
    for e in events {
        let d = data(e);
        let id = d["effectId"].as_str().unwrap_or_default().to_owned();
        match e.r#type.as_str() {
            "EFFECT_REQUESTED" => {
                *requested.entry(id).or_default() += 1;
                assert!(
                    keys.insert(d["invocationKey"].as_str().unwrap().to_owned()),
                    "run {run_id}: invocation {} requested twice",
                    d["invocationKey"]
                );
            }
            "EFFECT_RESOLVED" => *resolved.entry(id).or_default() += 1,
            _ => {}
        }
    }
    assert!(
        requested.values().all(|n| *n == 1),
        "run {run_id}: {requested:?}"
    );
    assert!(
        resolved.values().all(|n| *n == 1),
        "run {run_id}: resolved twice: {resolved:?}"
    );
    assert_eq!(
        requested.keys().collect::<HashSet<_>>(),
        resolved.keys().collect::<HashSet<_>>(),
        "run {run_id}: every requested effect resolved"
    );
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
}
