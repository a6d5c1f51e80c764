//! `babysitter-transport-proxy`: loads the layered config (the shared
//! `babysitter_common::main_support::service_main`: defaults → TOML → `BABYSITTER_TRANSPORT_PROXY__…`
//! env → `--set` → flags, `--dump-config`), starts the shared telemetry, binds, prints the
//! `ready` line the launcher parses (spec §1), serves the HTTP front (and the gRPC control API
//! when `[control]` is configured) until SIGINT/SIGTERM. Everything else lives in the library.
//!
//! Without a config file and without routes, the reference's `AGENT_MUX_PROXY_*` environment
//! contract is used instead (one route, a client token printed in the ready line).

/// mimalloc instead of glibc's malloc: every request allocates and frees its JSON, headers and
/// buffers on the runtime's worker threads (glibc's malloc was ~11% of the proxy's CPU).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use babysitter_common::env::EnvMap;
use babysitter_common::main_support::{CommonArgs, service_main};
use babysitter_common::server::{ServerBuilder, shutdown_signal};
use babysitter_common::telemetry::init_telemetry;
use babysitter_common::tls::{Protocol, ServerTls};
use babysitter_transport_proxy::agent_mux;
use babysitter_transport_proxy::config::{ConfigFile, ENV_PREFIX};
use babysitter_transport_proxy::forward::Proxy;
use babysitter_transport_proxy::grpc::TransportProxyGrpcServer;
use babysitter_transport_proxy::server::{serve, serve_tls};
use clap::Parser;
use serde_json::json;
use tokio_util::sync::CancellationToken;

/// LLM protocol proxy: Anthropic Messages, OpenAI Chat Completions, OpenAI Responses and
/// Gemini in front, any of them upstream.
#[derive(Debug, Parser)]
#[command(name = "babysitter-transport-proxy", version)]
struct Args {
    /// TOML config file (see transport-proxy.example.toml). Without it, and without routes from
    /// `--set` / the environment, the reference's `AGENT_MUX_PROXY_*` environment contract is
    /// used (one route, a client token).
    #[arg(long, env = "BABYSITTER_TRANSPORT_PROXY_CONFIG")]
    config: Option<PathBuf>,
    /// Listen address, e.g. 127.0.0.1:8787 (overrides `listen`).
    #[arg(long)]
    listen: Option<String>,
    /// Any config key, e.g. `--set defaults.max-retries=3` (repeatable).
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
    let has_file = args.config.is_some();
    let listen_flag = args.listen.clone();
    service_main(
        "babysitter-transport-proxy",
        ENV_PREFIX,
        CommonArgs {
            config: args.config,
            set: args.set,
            flags: json!({ "listen": args.listen }),
            dump_config: args.dump_config,
            health_check: args.health_check,
        },
        move |config, env| run(config, env, has_file, listen_flag),
    )
}

async fn run(
    file: ConfigFile,
    env: EnvMap,
    has_file: bool,
    listen_flag: Option<String>,
) -> anyhow::Result<()> {
    let telemetry = init_telemetry("transport-proxy", &file.telemetry, &env)?;
    let tls = ServerTls::load(&file.tls, Protocol::Http)?;
    let lookup = |k: &str| env.get(k).map(str::to_owned);
    let env_contract = !has_file && file.routes.is_empty() && agent_mux::requested(&lookup);
    let mut config = if env_contract {
        let mut c = agent_mux::config_from_env(&lookup)?;
        if let Some(l) = &listen_flag {
            c.listen = l.parse().with_context(|| format!("invalid --listen {l}"))?;
        }
        c
    } else {
        if !has_file && file.routes.is_empty() && file.control.is_none() {
            anyhow::bail!(
                "no routes: give --config, set routes, or set AGENT_MUX_PROXY_TARGET_PROVIDER"
            );
        }
        file.resolve(&lookup)?
    };
    // The launcher contract (spec §1): the client token is part of the ready line.
    let auth_token = env_contract
        .then(|| config.proxy_token.as_ref().map(|t| t.expose().to_owned()))
        .flatten();
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;
    let control = config.control.take();
    let state = Proxy::new(config).context("building the proxy")?;
    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_signal(shutdown.clone()));
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut ready =
        json!({"event": "ready", "port": addr.port(), "url": format!("{scheme}://{addr}")});
    if let Some(t) = auth_token {
        ready["auth_token"] = json!(t);
    }
    let grpc = match control {
        None => None,
        Some(cfg) => {
            let grpc_listener = tokio::net::TcpListener::bind(cfg.listen_addr)
                .await
                .with_context(|| format!("binding the control api on {}", cfg.listen_addr))?;
            let control_scheme = if cfg.tls.enabled() { "https" } else { "http" };
            ready["control_url"] = json!(format!(
                "{control_scheme}://{}",
                grpc_listener.local_addr()?
            ));
            let service = babysitter_common::tune_grpc_service!(
                TransportProxyGrpcServer::new(state.clone(), env.clone()).into_service(),
                &cfg
            );
            let server = ServerBuilder::new("transport-proxy", &cfg)
                .add_service(service, babysitter_proto::FILE_DESCRIPTOR_SET);
            let token = shutdown.clone();
            Some(tokio::spawn(async move {
                server.serve_with_listener(grpc_listener, token).await
            }))
        }
    };
    #[allow(clippy::print_stdout)]
    {
        println!("{ready}");
    }
    tracing::info!(%addr, "transport proxy serving");
    // The line the other services print, for supervisors and tests reading stderr.
    eprintln!("transport-proxy listening on {addr}");
    let token = shutdown.clone();
    match tls {
        Some(tls) => {
            tls.watch(shutdown.clone());
            let listener = tls.incoming(listener, None).into_listener();
            serve_tls(listener, state, async move { token.cancelled().await }).await?
        }
        None => serve(listener, state, async move { token.cancelled().await }).await?,
    }
    if let Some(task) = grpc {
        task.await??;
    }
    telemetry.shutdown().await?;
    Ok(())
}
