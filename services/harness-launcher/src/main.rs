//! `harness-launcher`: a worker process. Parses flags, loads layered config, starts telemetry,
//! registers with the orchestrator and runs tasks until SIGTERM / Ctrl-C, then drains.

use std::process::ExitCode;

use babysitter_common::EnvMap;
use babysitter_common::auth::Secret;
use babysitter_common::client::connect_lazy;
use babysitter_common::main_support::{CommonArgs, service_main};
use babysitter_common::server::shutdown_signal;
use babysitter_common::telemetry::init_telemetry;
use babysitter_harness_launcher::config::LauncherConfig;
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
    /// Any config key, e.g. `--set worker.max-concurrency=8` (repeatable).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Print the effective config as TOML and exit.
    #[arg(long)]
    dump_config: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let flags = json!({"orchestrator": {"url": args.orchestrator}, "worker": {"id": args.id}});
    service_main(
        "harness-launcher",
        "BABYSITTER_LAUNCHER",
        CommonArgs {
            config: args.config,
            set: args.set,
            flags,
            dump_config: args.dump_config,
        },
        run,
    )
}

async fn run(config: LauncherConfig, env: EnvMap) -> anyhow::Result<()> {
    let telemetry = init_telemetry("harness-launcher", &config.telemetry, &env)?;
    let token = Secret::from_optional_file(config.orchestrator.token_file.as_deref())
        .map_err(anyhow::Error::msg)?;
    let channel = connect_lazy(&config.orchestrator.url, token.as_ref())?;
    let settings = config.worker.settings();
    std::fs::create_dir_all(&settings.work_dir)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", settings.work_dir.display()))?;
    eprintln!(
        "harness-launcher {} serving kinds {:?} for {}",
        settings.worker_id, settings.task_kinds, config.orchestrator.url
    );
    let stop = CancellationToken::new();
    tokio::spawn(shutdown_signal(stop.clone()));
    let agents = config.agent.settings(&env).await;
    let names: Vec<String> = agents
        .harnesses
        .iter()
        .map(|h| format!("{} {}", h.kind, h.version))
        .collect();
    eprintln!("harness-launcher: harnesses {names:?}");
    let mut worker = Worker::new(channel, settings);
    if !agents.harnesses.is_empty() {
        worker = worker.with_agents(agents);
    }
    worker.run(stop).await;
    telemetry.shutdown().await?;
    Ok(())
}
