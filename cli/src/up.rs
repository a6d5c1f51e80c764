//! `babysitter up`: the services in one process — the journal service, the orchestrator and a
//! worker (shell, node and hook tasks) — for a single machine or a development setup, with the
//! same config keys as the separate binaries, nested under `[journal]`, `[orchestrator]` and
//! `[launcher]` (env `BABYSITTER_UP__JOURNAL__STORE__URL`, `--set orchestrator.queue.…`).
//!
//! Embedded default: a filesystem journal in babysitter's run layout under `<data-dir>/runs`
//! (`--data-dir`, default `./.babysitter/data`); an S3 journal is one setting away
//! (`--set journal.store.url=s3://bucket/prefix`). The orchestrator and the journal service share
//! one in-process `Journal`; the worker calls the orchestrator's `WorkerService` handlers in
//! process (`babysitter_common::worker_api::WorkerApi`, the trait a remote worker's gRPC client
//! also implements), so it needs no token and no loop back through the port. The transport proxy joins once its service is part of this build.
//!
//! It is its journal's one writer: before it recovers anything it takes the journal's leadership
//! lease (`[orchestrator.leadership]`, as the `orchestrator` binary does) and writes under its
//! epoch. A second `up` (or an `orchestrator`) on the same journal waits, naming the holder,
//! until the first stops — a SIGTERM releases the lease, a crash lets it lapse after its ttl —
//! and an `up` that loses its lease stops rather than write beside another.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use babysitter_common::EnvMap;
use babysitter_common::main_support::{CommonArgs, service_main};
use babysitter_common::server::{ServerBuilder, ServerConfig, shutdown_signal};
use babysitter_common::telemetry::{TelemetryConfig, init_telemetry};
use babysitter_harness_launcher::config::LauncherConfig;
use babysitter_harness_launcher::worker::Worker;
use babysitter_journal::config::{JournalServiceConfig, open_store_on};
use babysitter_journal::fs::FsRuntime;
use babysitter_journal::grpc::JournalGrpcServer;
use babysitter_journal::leadership::{
    Acquired, Arbiter, Candidate, FencedStore, LeaseKeeper, Term, WriterTerm,
};
use babysitter_journal::{Journal, JournalStore};
use babysitter_orchestrator::service::config::OrchestratorConfig;
use babysitter_orchestrator::service::grpc::Services;
use babysitter_orchestrator::service::leader::{End, renew_until_over};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::flags::{Arg, Flags};

/// `babysitter up`'s configuration: each service's own config under its name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct UpConfig {
    /// Config format version. Since v0.1.
    pub version: u32,
    /// Where the embedded default keeps runs and worker directories. Since v0.1.
    pub data_dir: PathBuf,
    /// Log filter and format (one for the whole process). Since v0.1.
    pub telemetry: TelemetryConfig,
    /// The journal service (`journal` binary keys). Since v0.1.
    pub journal: JournalServiceConfig,
    /// The orchestrator (`orchestrator` binary keys; its journal is the one above). Since v0.1.
    pub orchestrator: OrchestratorConfig,
    /// The in-process worker (`harness-launcher` binary keys). Since v0.1.
    pub launcher: LauncherConfig,
    /// Run the in-process worker. Since v0.1.
    pub worker: bool,
}

impl Default for UpConfig {
    fn default() -> Self {
        let mut journal = JournalServiceConfig::default();
        journal.store.url = String::new(); // = file://<data-dir>/runs
        Self {
            version: 1,
            data_dir: PathBuf::from("./.babysitter/data"),
            telemetry: TelemetryConfig::default(),
            journal,
            orchestrator: OrchestratorConfig::default(),
            launcher: LauncherConfig::default(),
            worker: true,
        }
    }
}

/// `--health-check` probes the orchestrator's port (the one clients and workers use).
impl babysitter_common::main_support::HealthPort for UpConfig {
    fn health_port(&self) -> Option<&babysitter_common::server::ServerConfig> {
        Some(&self.orchestrator.server)
    }
}

const USAGE: &str = "usage: babysitter up [--data-dir DIR] [--config FILE] [--set section.key=value]... [--no-worker] [--dump-config] [--health-check]";

pub fn main(args: &[String], fs: FsRuntime) -> ExitCode {
    let mut common = CommonArgs::default();
    let mut data_dir: Option<String> = None;
    let mut no_worker = false;
    let mut flags = Flags::new(args);
    while let Some(arg) = flags.next_arg() {
        let value = match arg {
            Arg::Flag(f @ ("--config" | "--set" | "--data-dir")) => match flags.value(f) {
                Ok(v) => Some(v),
                Err(e) => return usage_error(&e),
            },
            _ => None,
        };
        match (arg, value) {
            (Arg::Flag("--config"), v) => common.config = v.map(PathBuf::from),
            (Arg::Flag("--set"), Some(v)) => common.set.push(v),
            (Arg::Flag("--data-dir"), v) => data_dir = v,
            (Arg::Flag("--no-worker"), _) => no_worker = true,
            (Arg::Flag("--dump-config"), _) => common.dump_config = true,
            (Arg::Flag("--health-check"), _) => common.health_check = true,
            (Arg::Flag("-h" | "--help"), _) => {
                eprintln!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            (Arg::Flag(other) | Arg::Positional(other), _) => {
                return usage_error(&format!("unknown argument `{other}`"));
            }
        }
    }
    common.flags = json!({"data-dir": data_dir, "worker": no_worker.then_some(false)});
    service_main("babysitter up", "BABYSITTER_UP", common, |config, env| {
        serve(config, env, fs.clone())
    })
}

fn usage_error(why: &str) -> ExitCode {
    eprintln!("babysitter up: {why}\n{USAGE}");
    ExitCode::from(2)
}

async fn listen(config: &ServerConfig) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(config.listen_addr)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen_addr))
}

async fn serve(mut config: UpConfig, env: EnvMap, fs: FsRuntime) -> anyhow::Result<()> {
    // Refused rather than ignored: the key is valid for the `harness-launcher` binary.
    if config.launcher.server.is_some() {
        anyhow::bail!(
            "[launcher.server] (the worker's admin api) is served by the `harness-launcher` binary, not by `babysitter up`"
        );
    }
    let telemetry = init_telemetry("babysitter-up", &config.telemetry, &env)?;
    let data = &config.data_dir;
    std::fs::create_dir_all(data).with_context(|| format!("cannot create {}", data.display()))?;
    let data = data
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", data.display()))?;
    if config.journal.store.url.is_empty() {
        config.journal.store.url = format!("file://{}", data.join("runs").display());
    }
    let store = open_store_on(&fs, &config.journal.store, &config.journal.limits, &env)
        .await
        .map_err(|e| anyhow::anyhow!("cannot use store {}: {e}", config.journal.store.url))?;
    // A signal stops the worker first (its running tasks finish and complete), then the servers.
    let signal = CancellationToken::new();
    tokio::spawn(shutdown_signal(signal.clone()));
    let orchestrator_listener = listen(&config.orchestrator.server).await?;
    let orchestrator_addr = orchestrator_listener.local_addr()?;
    // The journal's one writer: wait for its leadership lease (another `babysitter up` or
    // orchestrator on this journal keeps it until it stops), write under it, stop if it is lost.
    let lease = if config.orchestrator.leadership.enabled {
        match Lease::take(
            store.clone(),
            &config.orchestrator,
            orchestrator_addr,
            &signal,
        )
        .await?
        {
            Some(lease) => Some(lease),
            None => return Ok(telemetry.shutdown().await?),
        }
    } else {
        None
    };
    let store = match &lease {
        Some(l) => l.fenced(store),
        None => store,
    };
    let secrets = Arc::new(config.orchestrator.secrets.redactor(&env)?);
    let mut options = config.journal.limits.journal_options();
    options.redactor = (!secrets.is_empty()).then(|| secrets.clone());
    let journal = Journal::new(store, options);

    // The engine reads process files where the store keeps runs (file://), else from a cache.
    let runs_dir = match (
        &config.orchestrator.engine.runs_dir,
        config.journal.store.url.strip_prefix("file://"),
    ) {
        (Some(d), _) => d.clone(),
        (None, Some(path)) => PathBuf::from(path),
        (None, None) => data.join("orchestrator-runs"),
    };
    std::fs::create_dir_all(&runs_dir)?;
    let o = &config.orchestrator;
    let (manager, resumed) = o.start_manager(journal.clone(), runs_dir, secrets).await?;
    let shutdown = CancellationToken::new();
    let journal_listener = listen(&config.journal.server).await?;
    let journal_addr = journal_listener.local_addr()?;
    let journal_server = ServerBuilder::new("journal", &config.journal.server).add_service(
        JournalGrpcServer::new(journal.clone())
            .with_shutdown(shutdown.clone())
            .into_service(&config.journal.server),
        babysitter_proto::FILE_DESCRIPTOR_SET,
    );
    let services = Services::new(manager.clone(), shutdown.clone());
    // The worker calls the orchestrator's handlers directly: no loop back through the port.
    let in_process = services.workers.in_process();
    let orchestrator_server = services.into_server(&o.server);

    let journal_task =
        tokio::spawn(journal_server.serve_with_listener(journal_listener, shutdown.clone()));
    let orchestrator_task = tokio::spawn(
        orchestrator_server.serve_with_listener(orchestrator_listener, shutdown.clone()),
    );
    let worker_stop = CancellationToken::new();
    let worker_task = if config.worker {
        let mut settings = config.launcher.worker.settings();
        if config.launcher.worker.work_dir == LauncherConfig::default().worker.work_dir {
            settings.work_dir = data.join("work");
        }
        std::fs::create_dir_all(&settings.work_dir)?;
        let agents = config.launcher.agent.settings(&env).await;
        let harnesses: Vec<String> = agents
            .harnesses
            .iter()
            .map(|h| format!("{} {}", h.kind, h.version))
            .collect();
        eprintln!(
            "babysitter up: worker {} runs {:?}, harnesses {harnesses:?}",
            settings.worker_id, settings.task_kinds
        );
        let mut worker = Worker::with_api(Arc::new(in_process), settings)?;
        if !agents.harnesses.is_empty() {
            worker = worker.with_agents(agents);
        }
        Some(tokio::spawn(worker.run(worker_stop.clone())))
    } else {
        None
    };
    // Machine-readable lines (tests and scripts read the ports when listening on :0).
    eprintln!("babysitter up: journal listening on {journal_addr}");
    eprintln!(
        "babysitter up: orchestrator listening on {orchestrator_addr} ({resumed} unfinished runs resumed)"
    );
    eprintln!("babysitter up: runs in {}", config.journal.store.url);

    signal.cancelled().await;
    worker_stop.cancel();
    if let Some(t) = worker_task
        && let Ok(Err(e)) = t.await
    {
        eprintln!("babysitter up: the worker stopped: {e}");
    }
    shutdown.cancel();
    orchestrator_task.await??;
    journal_task.await??;
    manager.shutdown().await;
    journal.flush().await;
    if let Some(lease) = lease {
        lease.release().await;
    }
    telemetry.shutdown().await?;
    Ok(())
}

/// This process's term as the journal's writer (see `babysitter_orchestrator::service::leader`).
struct Lease {
    arbiter: Arc<Arbiter>,
    writer: Arc<WriterTerm>,
    term: Term,
    renewing: tokio::task::JoinHandle<()>,
    stop: CancellationToken,
}

impl Lease {
    /// Waits until the lease is granted (`None`: `signal` came first); renews it from then on,
    /// and cancels `signal` (stopping everything) if it is lost.
    async fn take(
        store: Arc<dyn JournalStore>,
        config: &OrchestratorConfig,
        addr: std::net::SocketAddr,
        signal: &CancellationToken,
    ) -> anyhow::Result<Option<Lease>> {
        let arbiter = Arc::new(Arbiter::new(store));
        let candidate = Candidate {
            group: config.leadership.group.clone(),
            holder: format!("babysitter-up-{}", ulid::Ulid::generate()).to_lowercase(),
            address: format!("http://{addr}"),
            ttl: config.leadership.ttl(),
        };
        candidate.validate()?;
        let mut told = false;
        let (term, granted) = loop {
            let asked = tokio::time::Instant::now();
            match arbiter.acquire(&candidate).await? {
                Acquired::Granted(term) => break (term, asked),
                Acquired::Held(held) => {
                    if !told {
                        eprintln!(
                            "babysitter up: waiting for the journal's lease, held by {} at {} (epoch {}); it is free once that process stops",
                            held.holder, held.address, held.epoch
                        );
                        told = true;
                    }
                }
            }
            tokio::select! {
                () = signal.cancelled() => return Ok(None),
                () = tokio::time::sleep(config.leadership.poll_interval()) => {}
            }
        };
        let writer = WriterTerm::new();
        writer.set(Some((term.clone(), granted)));
        let stop = CancellationToken::new();
        let renewing = {
            let (arbiter, writer, term, stop, signal) = (
                arbiter.clone(),
                writer.clone(),
                term.clone(),
                stop.clone(),
                signal.clone(),
            );
            tokio::spawn(async move {
                let mut deposed = writer.deposed();
                let end = renew_until_over(
                    arbiter.as_ref(),
                    &writer,
                    &term,
                    granted,
                    &stop,
                    &mut deposed,
                )
                .await;
                if let End::SteppedDown(why) = end {
                    eprintln!("babysitter up: lost the journal's lease ({why}); stopping");
                    signal.cancel();
                }
            })
        };
        Ok(Some(Lease {
            arbiter,
            writer,
            term,
            renewing,
            stop,
        }))
    }

    /// `store` with every write fenced by this term.
    fn fenced(&self, store: Arc<dyn JournalStore>) -> Arc<dyn JournalStore> {
        Arc::new(FencedStore::new(
            store,
            self.arbiter.clone(),
            self.writer.clone(),
            &self.term.group,
        ))
    }

    async fn release(self) {
        self.stop.cancel();
        let _ = self.renewing.await;
        if let Err(e) = self.arbiter.release(&self.term).await {
            eprintln!(
                "babysitter up: cannot release the journal's lease ({e}): it lapses in its ttl"
            );
        }
    }
}
