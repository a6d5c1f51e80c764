//! `harness-launcher`: a worker process. Parses flags, loads layered config, starts telemetry,
//! registers with the orchestrator and runs tasks until SIGTERM / Ctrl-C, then drains. With
//! `[server]` (or `--listen`) it also serves its admin API, `HarnessLauncherService`, which stays
//! up until the worker has drained, so a drain can be watched to its end.

use std::process::ExitCode;

use babysitter_common::EnvMap;
use babysitter_common::auth::{Authenticator, Secret};
use babysitter_common::client::{ClientOptions, connect_lazy_tls};
use babysitter_common::main_support::{CommonArgs, service_main};
use babysitter_common::server::{ServerBuilder, shutdown_signal};
use babysitter_common::telemetry::init_telemetry;
use babysitter_harness_launcher::admin::LauncherAdmin;
use babysitter_harness_launcher::config::LauncherConfig;
use babysitter_harness_launcher::grpc::HarnessLauncherGrpcServer;
use babysitter_harness_launcher::harness::available;
use babysitter_harness_launcher::worker::Worker;
use clap::Parser;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// The babysitter-rs worker.
#[derive(Debug, Parser)]
#[command(name = "harness-launcher", version)]
struct Args {
    /// TOML config file.
    #[arg(long, env = "BABYSITTER_LAUNCHER_CONFIG")]
    config: Option<std::path::PathBuf>,
    /// Orchestrator URL, e.g. http://127.0.0.1:50052 (overrides orchestrator.url).
    #[arg(long)]
    orchestrator: Option<String>,
    /// Worker id (overrides worker.id).
    #[arg(long)]
    id: Option<String>,
    /// Serve the admin API on this address, e.g. 127.0.0.1:50053 (sets server.listen-addr; the
    /// admin API is off without it or a `[server]` section, and needs an admin token).
    #[arg(long)]
    listen: Option<String>,
    /// Any config key, e.g. `--set worker.max-concurrency=8` (repeatable).
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
    let mut flags = json!({"orchestrator": {"url": args.orchestrator}, "worker": {"id": args.id}});
    // Only when given: an empty `server` table would turn the admin API on.
    if let Some(listen) = args.listen {
        flags["server"] = json!({ "listen-addr": listen });
    }
    service_main(
        "harness-launcher",
        "BABYSITTER_LAUNCHER",
        CommonArgs {
            config: args.config,
            set: args.set,
            flags,
            dump_config: args.dump_config,
            health_check: args.health_check,
        },
        run,
    )
}

async fn run(config: LauncherConfig, env: EnvMap) -> anyhow::Result<()> {
    let telemetry = init_telemetry("harness-launcher", &config.telemetry, &env)?;
    let token = Secret::from_optional_file(config.orchestrator.token_file.as_deref())
        .map_err(anyhow::Error::msg)?;
    let channel = connect_lazy_tls(
        &config.orchestrator.url,
        token.as_ref(),
        &ClientOptions::default(),
        &config.orchestrator.tls,
    )?;
    let settings = config.worker.settings();
    std::fs::create_dir_all(&settings.work_dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", settings.work_dir.display()))?;
    eprintln!(
        "harness-launcher {} serving kinds {:?} for {}",
        settings.worker_id, settings.task_kinds, config.orchestrator.url
    );
    let admin_api = config.admin_api()?;
    let stop = CancellationToken::new();
    tokio::spawn(shutdown_signal(stop.clone()));
    let detector = config.agent.detector(&env);
    let checks = detector.check_all().await;
    let agents = config.agent.settings_with(&env, available(&checks));
    let names: Vec<String> = agents
        .harnesses
        .iter()
        .map(|h| format!("{} {}", h.kind, h.version))
        .collect();
    eprintln!("harness-launcher: harnesses {names:?}");
    let mut worker = Worker::new(channel, settings)?;
    eprintln!("harness-launcher: home {}", worker.home_dir().display());
    if !agents.harnesses.is_empty() {
        worker = worker.with_agents(agents);
    }
    // Stopped after the worker: the admin API answers while the worker drains.
    let admin_stop = CancellationToken::new();
    let admin_server = match admin_api {
        Some(server_config) => {
            let admin = LauncherAdmin::new(&worker, &config.orchestrator.url, detector, checks);
            // Token files are read now, so a bad one fails the start rather than the server.
            let authenticator = Authenticator::from_config(&server_config.auth)?;
            let listener = tokio::net::TcpListener::bind(server_config.listen_addr)
                .await
                .map_err(|e| {
                    anyhow::anyhow!("cannot listen on {}: {e}", server_config.listen_addr)
                })?;
            // One machine-readable line so scripts and tests can find the port when on :0.
            eprintln!(
                "harness-launcher admin api listening on {}",
                listener.local_addr()?
            );
            let server = ServerBuilder::new("harness-launcher", server_config)
                .with_authenticator(authenticator)
                .add_service(
                    HarnessLauncherGrpcServer::new(admin).into_service(server_config),
                    babysitter_proto::FILE_DESCRIPTOR_SET,
                );
            Some(tokio::spawn(
                server.serve_with_listener(listener, admin_stop.clone()),
            ))
        }
        None => None,
    };
    let ran = worker.run(stop.clone()).await;
    // After a drain the process idles (the admin API keeps answering) until it is stopped; a
    // worker that stopped on its own (refused credentials) exits with the reason.
    if ran.is_ok() {
        stop.cancelled().await;
    }
    admin_stop.cancel();
    if let Some(server) = admin_server {
        server.await??;
    }
    telemetry.shutdown().await?;
    Ok(ran?)
}
