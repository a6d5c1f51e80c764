//! `babysitter-transport-proxy`: loads the config, binds, prints the `ready` line the launcher
//! parses (spec §1), serves the HTTP front (and the gRPC control API when `[control]` is
//! configured) until SIGINT/SIGTERM. Everything else lives in the library.

use std::path::PathBuf;

use anyhow::Context;
use babysitter_common::env::EnvMap;
use babysitter_common::server::{ServerBuilder, shutdown_signal};
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
    /// TOML config file (see transport-proxy.example.toml).
    #[arg(long, env = "BABYSITTER_TRANSPORT_PROXY_CONFIG")]
    config: PathBuf,
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
    let text = std::fs::read_to_string(&args.config)
        .with_context(|| format!("reading {}", args.config.display()))?;
    let mut file = ConfigFile::from_toml(&text)?;
    if let Some(l) = args.listen {
        file.listen = l;
    }
    let env = EnvMap::from_process();
    let config = file.resolve(&|k| env.get(k).map(str::to_owned))?;
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let control = config.control.clone();
    let state = Proxy::new(config).context("building the proxy")?;
    let shutdown = CancellationToken::new();
    tokio::spawn(shutdown_signal(shutdown.clone()));
    let mut ready =
        serde_json::json!({"event": "ready", "port": addr.port(), "url": format!("http://{addr}")});
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
