//! `babysitter observe [DIR…]`: the web dashboard over local `.a5c/runs` directories — every
//! project found under the given folders (default: the working directory), live through file
//! notifications (`babysitter_dashboard::local`). Local and single-user: no tokens, loopback by
//! default. Read-only except breakpoint decisions, which are made exactly as a person would make
//! them from a terminal: `babysitter task:post <runDir> <effectId> --status ok --value-inline …`
//! (this same binary, under the run's lock; run in place, not through the warm server, so no
//! server is started on the user's behalf), so the harness session driving the run sees the
//! decision at its next iteration.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use babysitter_common::auth::Authenticator;
use babysitter_dashboard::local::{LocalResolver, LocalSource, discover};
use babysitter_dashboard::{DashboardConfig, Source};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::flags::{Arg, Flags};

const USAGE: &str =
    "usage: babysitter observe [DIR...] [--listen ADDR (default 127.0.0.1:7421)] [--read-only]";

/// Breakpoint decisions through `task:post` of this binary.
struct TaskPost {
    exe: PathBuf,
}

#[async_trait::async_trait]
impl LocalResolver for TaskPost {
    async fn resolve(&self, run_dir: &Path, effect_id: &str, value: Value) -> Result<(), String> {
        let out = tokio::process::Command::new(&self.exe)
            .arg("task:post")
            .arg(run_dir)
            .arg(effect_id)
            .args(["--status", "ok", "--json", "--value-inline"])
            .arg(value.to_string())
            .env("BABYSITTER_WARM", "off")
            .output()
            .await
            .map_err(|e| format!("cannot run task:post: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "task:post failed: {}{}",
                String::from_utf8_lossy(&out.stdout).trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        }
    }
}

pub fn main(args: &[String]) -> ExitCode {
    let mut dirs = Vec::new();
    let mut listen = SocketAddr::from(([127, 0, 0, 1], 7421));
    let mut read_only = false;
    let mut flags = Flags::new(args);
    while let Some(arg) = flags.next_arg() {
        match arg {
            Arg::Flag("--listen") => match flags.value("--listen").map(|v| v.parse()) {
                Ok(Ok(a)) => listen = a,
                _ => return usage("--listen needs an address such as 127.0.0.1:7421"),
            },
            Arg::Flag("--read-only") => read_only = true,
            Arg::Flag("-h" | "--help") => {
                eprintln!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            Arg::Flag(other) => return usage(&format!("unknown flag `{other}`")),
            Arg::Positional(d) => dirs.push(PathBuf::from(d)),
        }
    }
    if dirs.is_empty() {
        dirs.push(PathBuf::from("."));
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("babysitter observe: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(serve(dirs, listen, read_only)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("babysitter observe: {e:#}");
            ExitCode::from(1)
        }
    }
}

fn usage(why: &str) -> ExitCode {
    eprintln!("babysitter observe: {why}\n{USAGE}");
    ExitCode::from(2)
}

async fn serve(dirs: Vec<PathBuf>, listen: SocketAddr, read_only: bool) -> anyhow::Result<()> {
    let roots = discover(&dirs);
    for r in &roots {
        eprintln!("babysitter observe: runs in {}", r.display());
    }
    if roots.is_empty() {
        eprintln!("babysitter observe: no .a5c/runs directory under the given folders (yet)");
    }
    let resolver: Option<Arc<dyn LocalResolver>> = if read_only {
        None
    } else {
        Some(Arc::new(TaskPost {
            exe: std::env::current_exe()?,
        }))
    };
    let source: Arc<dyn Source> = Arc::new(LocalSource::new(roots, resolver)?);
    let stop = CancellationToken::new();
    tokio::spawn(babysitter_common::server::shutdown_signal(stop.clone()));
    let running = babysitter_dashboard::serve(
        listen,
        &DashboardConfig::default(),
        source,
        Authenticator::disabled(),
        "observe",
        stop.clone(),
    )
    .await?;
    stop.cancelled().await;
    running.stop().await;
    Ok(())
}
