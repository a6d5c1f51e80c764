//! `babysitter`: babysitter's CLI (the `noun:verb` commands in [`compat`], a drop-in for the
//! reference's binary) and `babysitter run`, which drives a whole process on this machine
//! ([`run`]). Both sit on the same engine and filesystem journal, in babysitter's run layout.
//! `babysitter up` ([`up`]) runs the services (journal, orchestrator, a worker) in one process;
//! with `--server URL` / `BABYSITTER_SERVER` the run and task commands talk to an orchestrator
//! instead ([`remote`]).

use std::process::ExitCode;

/// mimalloc, or the system's allocator in a thin client of the warm server (see
/// [`babysitter_cli_alloc`]). QuickJS keeps libc's malloc: its memory limit needs it.
#[global_allocator]
static ALLOC: babysitter_cli_alloc::Chosen = babysitter_cli_alloc::Chosen;

mod compat;
mod flags;
mod journal_options;
mod mcp;
mod observe;
mod plugins;
mod remote;
mod run;
mod up;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env = babysitter_common::EnvMap::from_process();
    let first = args.first().map(String::as_str);
    let remote = match first {
        Some(cmd) if remote::COMMANDS.contains(&cmd) || compat::client::REMOTE.contains(&cmd) => {
            remote::server_of(&args[1..], &env).or_else(|| {
                // A harness session bound to a run on an orchestrator sends that run's
                // commands there.
                let cwd = std::env::current_dir().ok()?;
                compat::session::binding::bound_server(&args[1..], &env, &cwd)
                    .map(|url| (url, args[1..].to_vec()))
            })
        }
        // `run` follows a run on a server itself; `up` and `warm` are servers.
        Some(cmd)
            if !matches!(cmd, "run" | "up" | "warm" | "observe")
                && args
                    .iter()
                    .any(|a| a == "--server" || a.starts_with("--server=")) =>
        {
            eprintln!(
                "babysitter: {cmd} has no remote form (with --server: {}, {})",
                compat::client::REMOTE.join(", "),
                remote::COMMANDS.join(", ")
            );
            return ExitCode::from(1);
        }
        _ => None,
    };
    // A command the warm server runs needs nothing set up here: it goes first.
    if remote.is_none()
        && let Some(code) = compat::warm::forward(&args, &env)
    {
        return code;
    }
    if remote.is_none() && first == Some("run:create") {
        compat::warm::prestart(&env);
    }
    // Still one thread: the filesystem journal's runtime, which every command's stores and run
    // holds share, grows the descriptor table for large batches now, before it would have to
    // grow under several threads (see `FsRuntime::new`). Dropped when the command ends, it
    // settles what its stores wrote.
    let fs = babysitter_journal::fs::FsRuntime::new();
    // `up` sets up the services' telemetry and `warm serve` its own (each command's logs go to
    // its client); every other command logs warnings on stderr (a library's warning was
    // dropped before: no subscriber).
    let serving = first == Some("warm") && args.get(1).map(String::as_str) == Some("serve");
    if first != Some("up") && !serving {
        babysitter_common::telemetry::init_command_logging(
            babysitter_common::telemetry::command_log_level(env.get("BABYSITTER_LOG_LEVEL")),
        );
    }
    match (first, remote) {
        (Some("run"), _) => run::main(&args[1..], &env, fs),
        (Some("up"), _) => up::main(&args[1..], fs),
        (Some("observe"), _) => observe::main(&args[1..]),
        (Some("warm"), _) => compat::warm::main(&args[1..], &env, fs),
        (Some("mcp:serve"), _) if args.iter().any(|a| a == "--help" || a == "-h") => {
            mcp::help();
            ExitCode::SUCCESS
        }
        (Some("mcp:serve"), _) => mcp::main(&env, fs),
        (Some(cmd), Some((url, rest))) if remote::COMMANDS.contains(&cmd) => {
            remote::main(cmd, &url, &rest, &env)
        }
        (Some(cmd), Some((url, rest))) => {
            let argv: Vec<String> = std::iter::once(cmd.to_owned()).chain(rest).collect();
            compat::main(&argv, &env, fs, Some(&url))
        }
        _ => compat::main(&args, &env, fs, None),
    }
}
