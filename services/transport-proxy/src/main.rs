//! `babysitter-transport-proxy`: loads the config, binds, prints the `ready` line the launcher
//! parses (spec §1), serves the HTTP front (and the gRPC control API when `[control]` is
//! configured) until SIGINT/SIGTERM. Everything else lives in the library.

use std::path::PathBuf;

use anyhow::Context;
use babysitter_common::env::EnvMap;
use babysitter_common::server::{ServerBuilder, shutdown_signal};
use babysitter_transport_proxy::agent_mux;
use babysitter_transport_proxy::config::ConfigFile;
use babysitter_transport_proxy::forward::Proxy;
use babysitter_transport_proxy::grpc::TransportProxyGrpcServer;
use babysitter_transport_proxy::server::serve;
use clap::Parser;
use tokio_util::sync::CancellationToken;

/// LLM protocol proxy: Anthropic Messages, OpenAI Chat Completions, OpenAI Responses and
/// Gemini in front, any of them upstream.
#[derive(Debug, Parser)]
struct Args {
    /// TOML config file (see transport-proxy.example.toml). Without it the reference's
    /// `AGENT_MUX_PROXY_*` environment contract is used (one route, a client token).
    #[arg(long, env = "BABYSITTER_TRANSPORT_PROXY_CONFIG")]
    config: Option<PathBuf>,
    /// Listen address, overriding the config's `listen`.
    #[arg(long)]
    listen: Option<String>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let env = EnvMap::from_process();
    let lookup = |k: &str| env.get(k).map(str::to_owned);
    let mut config = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            ConfigFile::from_toml(&text)?.resolve(&lookup)?
        }
        None if agent_mux::requested(&lookup) => agent_mux::config_from_env(&lookup)?,
        None => anyhow::bail!("give --config or set AGENT_MUX_PROXY_TARGET_PROVIDER"),
    };
    if let Some(l) = args.listen {
        config.listen = l.parse().with_context(|| format!("invalid --listen {l}"))?;
    }
    // The launcher contract (spec §1): the client token is part of the ready line.
    let auth_token = args
        .config
        .is_none()
        .then(|| config.proxy_token.as_ref().map(|t| t.expose().to_owned()))
        .flatten();
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let control = config.control.clone();
    let state = Proxy::new(config).context("building the proxy")?;
    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_signal(shutdown.clone()));
    let mut ready =
        serde_json::json!({"event": "ready", "port": addr.port(), "url": format!("http://{addr}")});
    if let Some(t) = auth_token {
        ready["auth_token"] = serde_json::json!(t);
    }
    let grpc = match control {
        None => None,
        Some(cfg) => {
            let grpc_listener = tokio::net::TcpListener::bind(cfg.listen_addr)
                .await
                .with_context(|| format!("binding the control api on {}", cfg.listen_addr))?;
            ready["control_url"] =
                serde_json::json!(format!("http://{}", grpc_listener.local_addr()?));
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
    let token = shutdown.clone();
    serve(listener, state, async move { token.cancelled().await }).await?;
    if let Some(task) = grpc {
        task.await??;
    }
    Ok(())
}
