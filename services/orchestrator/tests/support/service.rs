//! The orchestrator service in one process for the service suites (`service.rs`,
//! `agent_events.rs`): real tonic servers on 127.0.0.1 over the filesystem journal, clients, the
//! real worker loop and a bare `WorkerService` client, and watch helpers.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use babysitter_common::auth::{AuthConfig, Role, Secret, TokenEntry};
use babysitter_common::client::{AuthedChannel, ClientOptions, connect_lazy};
use babysitter_common::server::ServerConfig;
use babysitter_harness_launcher::worker::{Worker, WorkerSettings};
use babysitter_journal::fs::FsStore;
use babysitter_journal::redact::Redactor;
use babysitter_journal::{Journal, JournalOptions};
use babysitter_orchestrator::engine::Engine;
use babysitter_orchestrator::service::config::OrchestratorConfig;
use babysitter_orchestrator::service::grpc::{InProcess, Services};
use babysitter_orchestrator::service::queue::{QueueConfig, TaskQueue};
use babysitter_orchestrator::service::runs::{ManagerConfig, RunManager};
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use babysitter_proto::orchestrator::v1::worker_service_client::WorkerServiceClient;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub const FANOUT: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: a.t, shell: { command: a.cmd } }));
export async function process(inputs, ctx) {
  const first = await ctx.task(sh, { t: 'first', cmd: 'echo start' });
  const many = await ctx.parallel.map(inputs.items, (i) =>
    ctx.task(sh, { t: `item-${i}`, cmd: `echo item-${i}` }, { label: `item-${i}` }));
  const last = await ctx.task(sh, { t: 'last', cmd: 'echo done' });
  return { first: first.stdout.trim(), items: many.map((m) => m.stdout.trim()), last: last.stdout.trim() };
}
"#;

pub struct Service {
    pub url: String,
    pub stop: CancellationToken,
    pub dir: tempfile::TempDir,
    /// The `WorkerService` handlers as a worker in this process calls them (no network).
    pub in_process: InProcess,
    pub manager: RunManager,
    /// What [`Service::restart`] starts the next one with.
    pub queue: QueueConfig,
    pub config: ServerConfig,
    pub secrets: Arc<Redactor>,
    /// The server's task, awaited by [`Service::restart`] so the port is free again.
    pub server: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub fn token(t: &str, role: Role, ns: &[&str]) -> TokenEntry {
    TokenEntry {
        token: Some(Secret::new(t)),
        token_file: None,
        role,
        name: Some(format!("{t}-user")),
        namespaces: ns.iter().map(|s| (*s).to_owned()).collect(),
    }
}

pub async fn start(queue: QueueConfig, auth: AuthConfig) -> Service {
    start_with(queue, auth, Redactor::default()).await
}

pub async fn start_with(queue: QueueConfig, auth: AuthConfig, secrets: Redactor) -> Service {
    let server = ServerConfig {
        auth,
        ..ServerConfig::default()
    };
    start_with_server(queue, server, secrets).await
}

/// The orchestrator with its `[server]` section set to `config` (auth, limits).
pub async fn start_with_server(
    queue: QueueConfig,
    config: ServerConfig,
    secrets: Redactor,
) -> Service {
    let addr = "127.0.0.1:0".parse().unwrap();
    start_in(
        tempfile::tempdir().unwrap(),
        addr,
        queue,
        config,
        Arc::new(secrets),
    )
    .await
}

impl Service {
    /// Stops this orchestrator: its server (the port freed) and its runs; nothing more is
    /// written. [`Stopped::start`] starts the next one.
    pub async fn halt(mut self) -> Stopped {
        self.stop.cancel();
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
        self.manager.shutdown().await;
        let addr = self.url.trim_start_matches("http://").parse().unwrap();
        Stopped {
            dir: std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap()),
            addr,
            queue: self.queue.clone(),
            config: self.config.clone(),
            secrets: self.secrets.clone(),
        }
    }
}

/// An orchestrator [`Service::halt`] stopped: its journal and address.
pub struct Stopped {
    pub dir: tempfile::TempDir,
    addr: std::net::SocketAddr,
    queue: QueueConfig,
    config: ServerConfig,
    secrets: Arc<Redactor>,
}

impl Stopped {
    /// A new orchestrator over the same journal on the same address, started as the binary
    /// starts: every unfinished run recovered before it serves.
    pub async fn start(self) -> Service {
        start_in(self.dir, self.addr, self.queue, self.config, self.secrets).await
    }
}

async fn start_in(
    dir: tempfile::TempDir,
    addr: std::net::SocketAddr,
    queue: QueueConfig,
    config: ServerConfig,
    secrets: Arc<Redactor>,
) -> Service {
    let runs = dir.path().join("runs");
    let journal = Journal::new(
        Arc::new(FsStore::new(&runs)),
        JournalOptions {
            redactor: Some(secrets.clone()),
            ..JournalOptions::default()
        },
    );
    // The engine as the orchestrator binary configures it.
    let engine_options = OrchestratorConfig::default().engine_options(runs.clone());
    let engine = Engine::new(journal, engine_options).unwrap();
    let manager = RunManager::new(
        engine,
        TaskQueue::new(queue.clone(), ulid::Ulid::generate().to_string()),
        ManagerConfig {
            sweep_interval: Duration::from_millis(50),
            retry_delay: Duration::from_millis(100),
            secrets: secrets.clone(),
            ..ManagerConfig::default()
        },
    );
    manager.recover().await.unwrap();
    manager.spawn_sweeper();
    let stop = CancellationToken::new();
    let services = Services::new(manager.clone(), stop.clone());
    let in_process = services.workers.in_process();
    let server = services.into_server(&config);
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let token = stop.clone();
    let server = tokio::spawn(async move {
        let _ = server.serve_with_listener(listener, token).await;
    });
    Service {
        url,
        stop,
        dir,
        in_process,
        manager,
        queue,
        config,
        secrets,
        server: Some(server),
    }
}

pub fn fast_queue() -> QueueConfig {
    QueueConfig {
        lease_duration: Duration::from_millis(600),
        heartbeat_interval: Duration::from_millis(100),
        max_poll_wait: Duration::from_secs(2),
        retry_backoff: Duration::from_millis(20),
        retry_backoff_max: Duration::from_millis(100),
        ..QueueConfig::default()
    }
}

pub fn client(s: &Service, tok: Option<&str>) -> RunServiceClient<AuthedChannel> {
    let token = tok.map(Secret::new);
    babysitter_common::client::client(&s.url, token.as_ref(), &ClientOptions::default()).unwrap()
}

pub fn spawn_worker(
    s: &Service,
    id: &str,
    tok: Option<&str>,
    dir: &std::path::Path,
) -> CancellationToken {
    let channel = connect_lazy(&s.url, tok.map(Secret::new).as_ref()).unwrap();
    spawn(Worker::new(channel, shell_worker(id, dir)).unwrap())
}

/// The real worker loop calling the orchestrator's handlers in this process (as `babysitter up`
/// runs its worker): no channel, no token.
pub fn spawn_in_process_worker(s: &Service, id: &str, dir: &std::path::Path) -> CancellationToken {
    spawn(Worker::with_api(Arc::new(s.in_process.clone()), shell_worker(id, dir)).unwrap())
}

fn shell_worker(id: &str, dir: &std::path::Path) -> WorkerSettings {
    WorkerSettings {
        worker_id: id.into(),
        namespaces: vec![],
        labels: Default::default(),
        task_kinds: vec!["shell".into()],
        max_concurrency: 8,
        work_dir: dir.join(id),
        drain_timeout: Duration::from_secs(5),
    }
}

fn spawn(worker: Worker) -> CancellationToken {
    let stop = CancellationToken::new();
    tokio::spawn(worker.run(stop.clone()));
    stop
}

/// A bare WorkerService client registered as a shell worker `id`.
pub async fn raw_worker(s: &Service, id: &str) -> WorkerServiceClient<AuthedChannel> {
    let mut w: WorkerServiceClient<AuthedChannel> =
        babysitter_common::client::client(&s.url, None, &ClientOptions::default()).unwrap();
    w.register_worker(pb::RegisterWorkerRequest {
        worker_id: id.into(),
        capabilities: Some(cpb::WorkerCapabilities {
            task_kinds: vec!["shell".into()],
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    w
}

/// The next task for `id`, waiting up to 5 s.
pub async fn poll_one(w: &mut WorkerServiceClient<AuthedChannel>, id: &str) -> pb::TaskAssignment {
    w.poll_tasks(pb::PollTasksRequest {
        worker_id: id.into(),
        max_tasks: 1,
        wait: Some(prost_types::Duration {
            seconds: 5,
            nanos: 0,
        }),
    })
    .await
    .unwrap()
    .into_inner()
    .tasks
    .remove(0)
}

pub async fn create(
    c: &mut RunServiceClient<AuthedChannel>,
    ns: &str,
    src: &str,
    inputs: Value,
) -> pb::Run {
    c.create_run(pb::CreateRunRequest {
        namespace: ns.into(),
        process: Some(pb::ProcessBundle::single_file(
            "main.mjs",
            src.as_bytes().to_vec(),
        )),
        inputs_json: Some(serde_json::to_vec(&inputs).unwrap().into()),
        labels: [("team".to_owned(), "infra".to_owned())].into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .run
    .unwrap()
}

/// Every journal event of a run from seq 1 until the watch ends (after the terminal event).
pub async fn watch_all(
    c: &mut RunServiceClient<AuthedChannel>,
    ns: &str,
    run_id: &str,
) -> (Vec<babysitter_proto::journal::v1::Event>, pb::Run) {
    let mut stream = c
        .watch_run(pb::WatchRunRequest {
            namespace: ns.into(),
            run_id: run_id.into(),
            from_seq: 1,
            include_agent_events: false,
        })
        .await
        .unwrap()
        .into_inner();
    let mut events = Vec::new();
    let mut last = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while let Some(msg) = tokio::time::timeout_at(deadline, stream.message())
        .await
        .expect("the watch ends once the run ends")
        .unwrap()
    {
        events.extend(msg.events);
        if let Some(r) = msg.run {
            last = Some(r);
        }
    }
    (events, last.unwrap())
}

pub fn effects_of(events: &[babysitter_proto::journal::v1::Event], ty: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.r#type == ty)
        .map(|e| {
            serde_json::from_slice::<Value>(&e.data_json).unwrap()["effectId"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// A watch of `run_id` from its start, with the live agent events.
pub async fn watch_with_agents(
    c: &mut RunServiceClient<AuthedChannel>,
    run_id: &str,
) -> tonic::Streaming<pb::WatchRunResponse> {
    c.watch_run(pb::WatchRunRequest {
        namespace: String::new(),
        run_id: run_id.into(),
        from_seq: 1,
        include_agent_events: true,
    })
    .await
    .unwrap()
    .into_inner()
}

/// Worker `id` completing `task` with the JSON `value`.
pub fn completion(
    id: &str,
    task: &pb::TaskAssignment,
    value: &'static [u8],
) -> pb::CompleteTaskRequest {
    pb::CompleteTaskRequest {
        worker_id: id.into(),
        lease_id: task.lease_id.clone(),
        effect_id: task.effect_id.clone(),
        result: Some(cpb::TaskResult {
            outcome: Some(cpb::task_result::Outcome::ValueJson(value.into())),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The waiting breakpoints of namespace `ns`.
pub async fn breakpoints(c: &mut RunServiceClient<AuthedChannel>, ns: &str) -> Vec<pb::Breakpoint> {
    c.list_breakpoints(pb::ListBreakpointsRequest {
        namespace: ns.into(),
        ..Default::default()
    })
    .await
    .expect("list breakpoints")
    .into_inner()
    .breakpoints
}

/// The first breakpoint of namespace `ns`, once one waits.
pub async fn first_breakpoint(c: &mut RunServiceClient<AuthedChannel>, ns: &str) -> pb::Breakpoint {
    loop {
        if let Some(b) = breakpoints(c, ns).await.into_iter().next() {
            return b;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The run `run_id` of the default namespace.
pub async fn get_run(c: &mut RunServiceClient<AuthedChannel>, run_id: &str) -> pb::Run {
    c.get_run(pb::GetRunRequest {
        run_id: run_id.into(),
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
    .run
    .unwrap()
}

/// Polls until the run has ended (a guard of 60 s against a hang, not a timing assertion).
pub async fn ended(c: &mut RunServiceClient<AuthedChannel>, run_id: &str) -> pb::Run {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let run = get_run(c, run_id).await;
        if run.status >= pb::RunStatus::Completed as i32 {
            return run;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never ended: {run:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
