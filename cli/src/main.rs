//! `babysitter`: babysitter's CLI (the `noun:verb` commands in [`compat`], a drop-in for the
//! reference's binary) and `babysitter run`, which drives a whole process on this machine
//! ([`run`]). Both sit on the same engine and filesystem journal, in babysitter's run layout.
//! `babysitter up` ([`up`]) runs the services (journal, orchestrator, a worker) in one process;
//! with `--server URL` / `BABYSITTER_SERVER` the run and task commands talk to an orchestrator
//! instead ([`remote`]).

use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: the warm server and long `run`s allocate and free many
/// small objects (glibc's malloc was ~20% of the warm server's CPU). QuickJS keeps libc's
/// malloc: its memory limit needs it.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod compat;
mod remote;
mod run;
mod up;

/// Journal settings for CLI processes: every command opens the run anew, so snapshots come
/// often (an open reads the latest snapshot plus at most this many events).
pub(crate) fn cli_journal_options() -> babysitter_journal::JournalOptions {
    babysitter_journal::JournalOptions {
        snapshot_every: 64,
        // The process exits right after the command: store the snapshot before it does.
        background_snapshots: false,
        ..Default::default()
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env = babysitter_common::EnvMap::from_process();
    // `up` sets up the services' telemetry and `warm serve` its own (each command's logs go to
    // its client); every other command logs warnings on stderr (a library's warning was
    // dropped before: no subscriber).
    let first = args.first().map(String::as_str);
    let serving = first == Some("warm") && args.get(1).map(String::as_str) == Some("serve");
    if first != Some("up") && !serving {
        babysitter_common::telemetry::init_command_logging(
            babysitter_common::telemetry::command_log_level(env.get("BABYSITTER_LOG_LEVEL")),
        );
    }
    match first {
        Some("run") => run::main(&args[1..], &env),
        Some("up") => up::main(&args[1..]),
        Some("warm") => compat::warm::main(&args[1..], &env),
        Some(cmd) if remote::COMMANDS.contains(&cmd) => match remote::server_of(&args[1..], &env) {
            Some((url, rest)) => remote::main(cmd, &url, &rest, &env),
            None => compat::warm::forward(&args, &env).unwrap_or_else(|| compat::main(&args, &env)),
        },
        _ => compat::warm::forward(&args, &env).unwrap_or_else(|| compat::main(&args, &env)),
    }
}
