//! `orchestrator`: serves `RunService` and `WorkerService`. Parses flags, loads layered config,
//! starts telemetry, opens the journal (in-process store or remote `JournalService`), recovers
//! every unfinished run from it, serves, and on SIGTERM drains: readiness drops, in-flight RPCs
//! and iterations (with their journal writes) finish, then the process exits.

use std::process::ExitCode;

use babysitter_common::EnvMap;
use babysitter_common::main_support::{CommonArgs, service_main};
use babysitter_common::server::shutdown_signal;
use babysitter_common::telemetry::init_telemetry;
use babysitter_journal::Journal;
use babysitter_orchestrator::service::config::OrchestratorConfig;
use babysitter_orchestrator::service::grpc::Services;
use clap::Parser;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// mimalloc instead of glibc's malloc: a warm iteration allocates and frees many small objects
/// on runtime worker threads, where glibc's per-thread arenas grow their heaps a few pages at a
/// time (an `mprotect` per growth) — ~23% of the engine benchmark's CPU time. (QuickJS keeps
/// libc's malloc: its memory limit needs it.)
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The babysitter-rs orchestrator service.
#[derive(Debug, Parser)]
#[command(name = "orchestrator", version)]
struct Args {
    /// TOML config file.
    #[arg(long, env = "BABYSITTER_ORCHESTRATOR_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// In-process journal store URL (overrides journal.store.url).
    #[arg(long)]
    store: Option<String>,
    /// Remote JournalService URL, e.g. http://127.0.0.1:50051 (overrides journal.remote).
    #[arg(long)]
    journal: Option<String>,
    /// Address to listen on, e.g. 127.0.0.1:50052 (overrides server.listen-addr).
    #[arg(long)]
    listen: Option<String>,
    /// Any config key, e.g. `--set queue.lease-duration-ms=5000` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Print the effective config as TOML and exit.
    #[arg(long)]
    dump_config: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let flags = json!({
        "journal": {"remote": args.journal, "store": {"url": args.store}},
        "server": {"listen-addr": args.listen},
    });
    service_main(
        "orchestrator",
        "BABYSITTER_ORCHESTRATOR",
        CommonArgs {
            config: args.config,
            set: args.set,
            flags,
            dump_config: args.dump_config,
        },
        serve,
    )
}

async fn serve(config: OrchestratorConfig, env: EnvMap) -> anyhow::Result<()> {
    let telemetry = init_telemetry("orchestrator", &config.telemetry, &env)?;
    let store = config.open_journal_store(&env).await?;
    // "Ready" only once it answers: a journal still starting gets a while
    // (`journal.ready-timeout-secs`), a wrong address fails the start naming it.
    babysitter_journal::readiness::wait_reachable(
        store.as_ref(),
        "journal",
        config.journal.ready_timeout(),
    )
    .await
    .map_err(anyhow::Error::msg)?;
    tracing::info!(store = %store.describe(), "journal ready");
    let probe = babysitter_journal::readiness::probe(store.clone(), "journal");
    let secrets = std::sync::Arc::new(config.secrets.redactor(&env)?);
    let mut journal_options = config.journal.limits.journal_options();
    journal_options.redactor = (!secrets.is_empty()).then(|| secrets.clone());
    let journal = Journal::new(store, journal_options);
    let background = journal.clone();
    let runs_dir = config.runs_dir();
    std::fs::create_dir_all(&runs_dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", runs_dir.display()))?;
    let (manager, resumed) = config.start_manager(journal, runs_dir, secrets).await?;
    tracing::info!(resumed, "unfinished runs resumed");

    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_signal(shutdown.clone()));
    let services = Services::new(manager.clone(), shutdown.clone());
    let server = services.into_server(&config.server).with_probe(probe);
    let listener = tokio::net::TcpListener::bind(config.server.listen_addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.server.listen_addr))?;
    let addr = listener.local_addr()?;
    // One machine-readable line so scripts and tests can find the port when listening on :0.
    eprintln!("orchestrator listening on {addr}");
    tracing::info!(%addr, "orchestrator serving");
    server.serve_with_listener(listener, shutdown).await?;
    manager.shutdown().await;
    background.flush().await;
    telemetry.shutdown().await?;
    Ok(())
}
