//! `hook:run` (spec `adapters-and-hooks.md` §2.1, `babysitter-core.md` §6.1): the harness hooks.
//! The hook type picks the handler: the stop hook that drives the orchestration loop in
//! stop-hook harnesses ([`stop`], also for `session-end`), the session-start hook that prepares
//! the session it drives ([`session_start`]), and the harness-agnostic prompt and tool hooks
//! ([`prompt_tools`]). What a hook reads from and writes to its harness is [`protocol`].

use crate::compat::cli::Cli;
use crate::compat::session::binding;

mod prompt_tools;
pub(crate) mod protocol;
mod session_start;
mod stop;

use protocol::{allow, hook_error};

const HOOK_TYPES: &str = "stop, session-end, session-start, user-prompt-submit, pre-tool-use";

/// `hook:run --hook-type <t> [--harness h] [--state-dir d] [--runs-dir r] [--json]`.
pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let json_errors = cli.args.json();
    let Some(hook_type) = cli.args.value("--hook-type").filter(|s| !s.is_empty()) else {
        return Ok(hook_error(
            json_errors,
            "MISSING_HOOK_TYPE",
            "--hook-type is required for hook:run",
        ));
    };
    let harness = cli
        .args
        .value("--harness")
        .filter(|s| !s.is_empty())
        .unwrap_or("claude-code");
    handle(cli, hook_type, harness).await
}

/// Runs the babysitter hook `hook_type` for `harness` (its payload from stdin, or from
/// `hooks:invoke` through [`protocol::adapted`]).
pub(crate) async fn handle(cli: &Cli<'_>, hook_type: &str, harness: &str) -> anyhow::Result<u8> {
    let json_errors = cli.args.json();
    // The reference's order: harness-agnostic hook types first, then the harness, then the
    // adapter's hook types.
    match hook_type {
        "user-prompt-submit" => return Ok(prompt_tools::user_prompt_submit(cli)),
        "pre-tool-use" => return Ok(prompt_tools::pre_tool_use(cli)),
        _ => {}
    }
    let Some(adapter) = binding::by_name(harness) else {
        return Ok(hook_error(
            json_errors,
            "UNSUPPORTED_HARNESS",
            &format!(
                "Unsupported harness: \"{harness}\". Supported: {}",
                binding::names().join(", ")
            ),
        ));
    };
    match hook_type {
        // A harness without hooks never holds its agent (the reference's `noHookSupport`).
        "stop" | "session-end" if adapter.no_hooks => {
            allow();
            Ok(0)
        }
        "stop" | "session-end" => stop::run(cli, harness).await,
        "session-start" => session_start::run(cli, harness).await,
        other => Ok(hook_error(
            json_errors,
            "UNKNOWN_HOOK_TYPE",
            &format!("Unknown hook type: {other}. Supported: {HOOK_TYPES}"),
        )),
    }
}
