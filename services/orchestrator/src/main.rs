//! `orchestrator`: serves `RunService` and `WorkerService`. Parses flags, loads layered config,
//! starts telemetry, opens the journal (in-process store or remote `JournalService`), listens,
//! and takes the journal's leadership lease (`service::leader`): standing by, it forwards calls
//! to the active orchestrator; granted, it recovers every unfinished run and serves them. On
//! SIGTERM it drains: readiness drops, in-flight RPCs and iterations (with their journal writes)
//! finish, the lease is released, then the process exits. With `leadership.enabled = false` it
//! is the journal's only writer: it recovers before it listens and writes unfenced.

use std::process::ExitCode;

use babysitter_common::EnvMap;
use babysitter_common::main_support::{CommonArgs, service_main};
use babysitter_common::server::shutdown_signal;
use babysitter_common::telemetry::init_telemetry;
use std::sync::Arc;

use babysitter_journal::leadership::Candidate;
use babysitter_journal::redact::Redactor;
use babysitter_journal::{Journal, JournalOptions};
use babysitter_orchestrator::service::config::OrchestratorConfig;
use babysitter_orchestrator::service::grpc::Services;
use babysitter_orchestrator::service::leader::Leadership;
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
    /// Probe this process's gRPC health over loopback (TLS when the port has it): exit 0 when
    /// SERVING. For container health checks.
    #[arg(long)]
    health_check: bool,
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
            health_check: args.health_check,
        },
        serve,
    )
}

async fn serve(config: OrchestratorConfig, env: EnvMap) -> anyhow::Result<()> {
    let telemetry = init_telemetry("orchestrator", &config.telemetry, &env)?;
    if !config.leadership.enabled {
        serve_alone(config, env).await?;
        return Ok(telemetry.shutdown().await?);
    }
    let fenced = config.open_fenced_journal(&env).await?;
    let store = fenced.store.clone();
    wait_for_journal(&config, store.as_ref()).await?;
    let probe = babysitter_journal::readiness::probe(store, "journal");
    let (secrets, journal_options) = journal_options(&config, &env)?;
    let runs_dir = runs_dir(&config)?;

    // Listen first: a standby serves (forwarding) from the start, and the lease names the port.
    let listener = bind(&config).await?;
    let addr = listener.local_addr()?;
    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_signal(shutdown.clone()));
    let (server, seat) = Services::switched_server(&config.server, fenced.term.clone());
    let (settled_tx, settled_rx) = tokio::sync::oneshot::channel();
    let server = server.with_probe(probe);
    let address = config.leadership.advertise_url.clone().unwrap_or_else(|| {
        let scheme = if config.server.tls.enabled() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{addr}")
    });
    if config.leadership.tls.is_set() {
        // Set explicitly: bad material is a configuration error.
        seat.forward_over_tls(babysitter_common::tls::ClientTls::load(
            &config.leadership.tls,
        )?);
    } else if address.starts_with("https://") {
        // Only a standby dials: with the system's roots when there are any.
        match babysitter_common::tls::ClientTls::load(&config.leadership.tls) {
            Ok(tls) => seat.forward_over_tls(tls),
            Err(e) => tracing::warn!(
                error = %e,
                "set [leadership.tls] ca-file so a standby can forward to the active instance over TLS"
            ),
        }
    }
    let candidate = Candidate {
        group: config.leadership.group.clone(),
        holder: format!("orchestrator-{}", ulid::Ulid::generate()).to_lowercase(),
        address,
        ttl: config.leadership.ttl(),
    };
    candidate.validate()?;
    if let Some(warning) = config
        .leadership
        .unsuited_to(config.queue.queue_config().lease_duration)
    {
        tracing::warn!("{warning}");
    }
    let leadership = Leadership {
        journal: fenced,
        journal_options,
        runs_dir,
        secrets,
        seat,
        health: server.health_reporter(),
        candidate,
        shutdown: shutdown.clone(),
        settled: std::sync::Mutex::new(Some(settled_tx)),
        config,
    };
    let stop = CancellationToken::new();
    let terms = tokio::spawn(leadership.run(stop.clone()));
    let serving = tokio::spawn(server.serve_with_listener(listener, shutdown.clone()));
    // The port is announced once calls get answers: active, or standing by behind a holder.
    tokio::select! {
        _ = settled_rx => {
            // One machine-readable line so scripts and tests can find the port.
            eprintln!("orchestrator listening on {addr}");
            tracing::info!(%addr, "orchestrator serving");
        }
        _ = shutdown.cancelled() => {}
    }
    let served = serving
        .await
        .map_err(|e| anyhow::anyhow!("the server task failed: {e}"))?;
    // Drained: the term's work ends and the lease is released for a standby.
    stop.cancel();
    terms
        .await
        .map_err(|e| anyhow::anyhow!("the leadership loop failed: {e}"))??;
    served?;
    Ok(telemetry.shutdown().await?)
}

/// Without leadership: the only orchestrator of its journal, writing unfenced.
async fn serve_alone(config: OrchestratorConfig, env: EnvMap) -> anyhow::Result<()> {
    let store = config.open_journal_store(&env).await?;
    wait_for_journal(&config, store.as_ref()).await?;
    let probe = babysitter_journal::readiness::probe(store.clone(), "journal");
    let (secrets, journal_options) = journal_options(&config, &env)?;
    let journal = Journal::new(store, journal_options);
    let background = journal.clone();
    let (manager, resumed) = config
        .start_manager(journal, runs_dir(&config)?, secrets)
        .await?;
    tracing::info!(resumed, "unfinished runs resumed");

    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_signal(shutdown.clone()));
    let services = Services::new(manager.clone(), shutdown.clone());
    let server = services.into_server(&config.server).with_probe(probe);
    let listener = bind(&config).await?;
    let addr = listener.local_addr()?;
    // One machine-readable line so scripts and tests can find the port when listening on :0.
    eprintln!("orchestrator listening on {addr}");
    tracing::info!(%addr, "orchestrator serving");
    server.serve_with_listener(listener, shutdown).await?;
    manager.shutdown().await;
    background.flush().await;
    Ok(())
}

/// "Ready" only once the journal answers: a journal still starting gets a while
/// (`journal.ready-timeout-secs`), a wrong address fails the start naming it.
async fn wait_for_journal(
    config: &OrchestratorConfig,
    store: &dyn babysitter_journal::JournalStore,
) -> anyhow::Result<()> {
    babysitter_journal::readiness::wait_reachable(store, "journal", config.journal.ready_timeout())
        .await
        .map_err(anyhow::Error::msg)?;
    tracing::info!(store = %store.describe(), "journal ready");
    Ok(())
}

fn journal_options(
    config: &OrchestratorConfig,
    env: &EnvMap,
) -> anyhow::Result<(Arc<Redactor>, JournalOptions)> {
    let secrets = Arc::new(config.secrets.redactor(env)?);
    let mut options = config.journal.limits.journal_options();
    options.redactor = (!secrets.is_empty()).then(|| secrets.clone());
    Ok((secrets, options))
}

fn runs_dir(config: &OrchestratorConfig) -> anyhow::Result<std::path::PathBuf> {
    let runs_dir = config.runs_dir();
    std::fs::create_dir_all(&runs_dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", runs_dir.display()))?;
    Ok(runs_dir)
}

async fn bind(config: &OrchestratorConfig) -> anyhow::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(config.server.listen_addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.server.listen_addr))
}
