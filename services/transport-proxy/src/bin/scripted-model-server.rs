//! `scripted-model-server`: the project's offline model server for harness and proxy tests.
//!
//! Speaks Anthropic Messages, OpenAI Chat Completions, OpenAI Responses and Gemini on one port
//! (routing by path suffix, so any `/v1`, `/v1beta` or empty prefix works), answering from a
//! JSON script (`--script`) or, without one, with the built-in harness rule: one call of the
//! shell-like tool (`echo hello > out.txt`), then `DONE`. See `babysitter_transport_proxy::scripted`
//! for the script format. Listens on 127.0.0.1 only; `--port 0` (the default) picks a free port.
//! Prints one stdout line when ready:
//! `{"event":"ready","port":<n>,"url":"http://127.0.0.1:<n>"}`; stops on SIGINT/SIGTERM.
//! `--log <file>` appends every request (credentials redacted) as JSON lines.

use std::path::PathBuf;

use anyhow::Context;
use babysitter_transport_proxy::scripted::{Script, ScriptedServer};
use clap::Parser;

/// Scripted LLM server speaking Anthropic, OpenAI Chat, OpenAI Responses and Gemini.
#[derive(Debug, Parser)]
struct Args {
    /// Port on 127.0.0.1 (0 = pick a free one).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// JSON script file; without it the built-in harness rule answers.
    #[arg(long)]
    script: Option<PathBuf>,
    /// Append every request as a JSON line to this file.
    #[arg(long)]
    log: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let script = match &args.script {
        None => None,
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Some(
                serde_json::from_str::<Script>(&text)
                    .with_context(|| format!("parsing {}", p.display()))?,
            )
        }
    };
    let server =
        ScriptedServer::start(([127, 0, 0, 1], args.port).into(), script, args.log).await?;
    #[allow(clippy::print_stdout)]
    {
        println!(
            "{}",
            serde_json::json!({"event": "ready", "port": server.addr().port(), "url": server.url()})
        );
    }
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! { _ = tokio::signal::ctrl_c() => {}, _ = term => {} }
    server.stop().await;
    Ok(())
}
