//! The CLI's runtime hook calls (spec §3.10; the dispatch itself is
//! [`babysitter_harness_launcher::hooks`]): `run:create` calls `on-run-start`; `run:iterate`
//! calls `on-iteration-start` before the process runs, `task.created` for each effect it
//! requested, `babysitter-log` for each new `ctx.log` line, `on-run-complete` / `on-run-fail` when
//! the run ends, `on-iteration-end`, and — as the
//! reference's CLI wrapper does — `on-iteration-start` again with the pending effects, whose
//! output may decide the answer (`{action, reason, count, until}`), then `on-iteration-end` again;
//! `task:post` calls `task.completed` before committing, and a `{"decision": "deny" | "ask"}` answer
//! refuses the post.
//!
//! Hooks run from the run's project directory (the ancestor holding `.a5c`), with the caller's
//! environment. A hook never fails a command (only a `task.*` denial does); with `--verbose` what
//! ran and what failed is said on stderr.

use std::path::Path;

use babysitter_harness_launcher::hooks::{HookResult, Hooks};
use serde_json::Value;

use super::cli::Cli;
use super::paths;

/// The hooks of the run at `run_dir` (made absolute against the cwd).
pub fn for_run(cli: &Cli<'_>, run_dir: &Path) -> Hooks {
    let dir = paths::resolve(&cli.cwd, run_dir);
    let hooks = Hooks::for_run_dir(&dir, |k| cli.env.get(k).map(str::to_owned));
    // The warm server runs a client's command: the scripts get the client's environment, not
    // the server's (a local call's hooks inherit the caller's as they are).
    if super::warm::context::serving() {
        hooks.with_env(cli.env.iter())
    } else {
        hooks
    }
}

/// Calls `hook_type`; `payload` is built only when some hook would run.
pub async fn fire(
    cli: &Cli<'_>,
    hooks: &Hooks,
    hook_type: &str,
    payload: impl FnOnce() -> Value,
) -> Option<HookResult> {
    let r = hooks.call_if_any(hook_type, payload).await?;
    if cli.args.verbose() {
        if !r.executed.is_empty() {
            errln!(
                "[hooks] Executed {} hook(s) for {hook_type}",
                r.executed.len()
            );
        }
        if let Some(e) = &r.error {
            errln!("[hooks] Hook execution failed for {hook_type}: {e}");
        }
    }
    Some(r)
}
