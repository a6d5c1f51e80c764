//! `journal`: serves `JournalService` over a filesystem or object-store backend.
//! Parses flags, loads layered config, starts telemetry, opens the store, serves.

use std::process::ExitCode;

use babysitter_common::EnvMap;
use babysitter_common::main_support::{CommonArgs, service_main};
use babysitter_common::server::{ServerBuilder, shutdown_signal};
use babysitter_common::telemetry::init_telemetry;
use babysitter_journal::Journal;
use babysitter_journal::config::{JournalServiceConfig, open_store_on};
use babysitter_journal::fs::FsRuntime;
use babysitter_journal::grpc::JournalGrpcServer;
use clap::Parser;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The babysitter-rs journal service.
#[derive(Debug, Parser)]
#[command(name = "journal", version)]
struct Args {
    /// TOML config file.
    #[arg(long, env = "BABYSITTER_JOURNAL_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Store URL: file:///path, s3://bucket/prefix, object+file:///path or memory:// (overrides store.url).
    #[arg(long)]
    store: Option<String>,
    /// Address to listen on, e.g. 127.0.0.1:50051 (overrides server.listen-addr).
    #[arg(long)]
    listen: Option<String>,
    /// Any config key, e.g. `--set limits.snapshot-every=500` (repeatable).
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
    // The filesystem store's runtime, built before the async runtime's threads (see
    // `FsRuntime::new`); dropped last, on the way out, it settles what its stores wrote.
    let fs = FsRuntime::new();
    let args = Args::parse();
    let flags = json!({"store": {"url": args.store}, "server": {"listen-addr": args.listen}});
    service_main(
        "journal",
        "BABYSITTER_JOURNAL",
        CommonArgs {
            config: args.config,
            set: args.set,
            flags,
            dump_config: args.dump_config,
            health_check: args.health_check,
        },
        |config, env| serve(config, env, fs.clone()),
    )
}

async fn serve(config: JournalServiceConfig, env: EnvMap, fs: FsRuntime) -> anyhow::Result<()> {
    let telemetry = init_telemetry("journal", &config.telemetry, &env)?;
    let store = open_store_on(&fs, &config.store, &config.limits, &env)
        .await
        .map_err(|e| anyhow::anyhow!("cannot use store {}: {e}", config.store.url))?;
    tracing::info!(store = %store.describe(), "journal store ready");
    let probe = babysitter_journal::readiness::probe(store.clone(), "store");
    let journal = Journal::new(store, config.limits.journal_options());
    let background = journal.clone();
    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_signal(shutdown.clone()));
    let server = ServerBuilder::new("journal", &config.server)
        .with_probe(probe)
        .add_service(
            JournalGrpcServer::new(journal)
                .with_shutdown(shutdown.clone())
                .into_service(&config.server),
            babysitter_proto::FILE_DESCRIPTOR_SET,
        );
    let listener = tokio::net::TcpListener::bind(config.server.listen_addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.server.listen_addr))?;
    let addr = listener.local_addr()?;
    // One machine-readable line so scripts and tests can find the port when listening on :0.
    eprintln!("journal listening on {addr}");
    tracing::info!(%addr, "journal serving");
    server.serve_with_listener(listener, shutdown).await?;
    background.flush().await;
    telemetry.shutdown().await?;
    Ok(())
}
