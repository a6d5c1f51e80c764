//! `run:*` commands.

pub mod assign_process;
pub mod create;
mod create_session;
mod entry;
pub mod events;
pub mod halt;
pub mod iterate;
pub mod new_run;
pub mod rebuild_state;
pub mod recover_process_error;
pub mod repair_journal;
mod rewrite;
pub mod status;

use serde_json::Value;

use super::cli::Cli;
use super::run_dir::Run;

/// The opening every `run:<verb> <runDir>` maintenance command shares: the resolved `<runDir>`
/// (the usage text when it is missing), the `--verbose` line (`runDir`, `dryRun`, `json`, then
/// `extra`), and the run opened with its `run.json` (`[<cmd>] unable to read run metadata at …`
/// when unreadable). `Err` carries the exit code that ends the command.
pub(crate) fn open_run_arg(
    cli: &Cli<'_>,
    cmd: &str,
    extra: &[(&str, Option<String>)],
) -> Result<(Run, Value), u8> {
    let Some(run_dir) = cli.run_dir() else {
        errln!("{}", super::usage::USAGE);
        return Err(1);
    };
    let a = &cli.args;
    let mut details = vec![
        ("runDir", Some(run_dir.display().to_string())),
        ("dryRun", Some(a.dry_run().to_string())),
        ("json", Some(a.json().to_string())),
    ];
    details.extend(extra.iter().cloned());
    cli.verbose(cmd, &details);
    Run::open(&run_dir)
        .and_then(|r| r.metadata().map(|m| (r, m)))
        .map_err(|m| {
            errln!(
                "[{cmd}] unable to read run metadata at {}: {m}",
                run_dir.display()
            );
            1
        })
}
