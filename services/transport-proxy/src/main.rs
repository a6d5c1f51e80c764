//! `babysitter-transport-proxy`: loads the config, binds, prints the `ready` line the launcher
//! parses (spec §1), serves until SIGINT/SIGTERM. Everything else lives in the library.

use std::path::PathBuf;

use anyhow::Context;
use babysitter_transport_proxy::config::ConfigFile;
use babysitter_transport_proxy::forward::Proxy;
use babysitter_transport_proxy::server::serve;
use clap::Parser;

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
    let config = file.resolve(&|k| std::env::var(k).ok())?;
    let listener = tokio::net::TcpListener::bind(config.listen).await?;
    let addr = listener.local_addr()?;
    let state = Proxy::new(config).context("building the proxy")?;
    #[allow(clippy::print_stdout)]
    {
        println!(
            "{}",
            serde_json::json!({"event": "ready", "port": addr.port(), "url": format!("http://{addr}")})
        );
    }
    serve(listener, state, shutdown_signal()).await?;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
