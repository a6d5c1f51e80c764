//! The harness-agnostic hook types of `hook:run` (spec `adapters-and-hooks.md` §2.1):
//! `user-prompt-submit` echoes the harness's payload, its `prompt` density-filtered when
//! compression is on and the prompt is over the threshold ([`compression`]); `pre-tool-use`
//! rewrites a simple `git` / `ls` / `grep` / `diff` Bash command (no pipes, redirections,
//! sequences or substitutions) to `babysitter compress-output <command>`, and says nothing
//! otherwise. A payload that is not JSON passes through (`user-prompt-submit`) or is left alone
//! (`pre-tool-use`), as the reference does.
//!
//! Difference (fixed): `cat`, `head`, `tail`, `less` and `more` are not rewritten — see
//! `compress_output`.

use serde_json::{Value, json};

use super::protocol::{Answer, answer, read_payload};
use crate::compat::cli::Cli;
use crate::compat::compress_output::family;
use crate::compat::compression::{Compression, compress_prompt};
use crate::compat::{output, paths};

fn stdin() -> Option<String> {
    read_payload().ok()
}

fn settings(cli: &Cli<'_>) -> Compression {
    let home = paths::home(cli.env, &cli.cwd);
    Compression::load(cli.env, &cli.cwd, home.as_deref())
}

pub(super) fn user_prompt_submit(cli: &Cli<'_>) -> u8 {
    let Some(raw) = stdin() else {
        return 0;
    };
    let mut payload: Value = match serde_json::from_str(&raw) {
        Ok(v) => v,
        Err(_) => {
            output::write_out(format_args!("{raw}"));
            return 0;
        }
    };
    if let Value::Object(m) = &mut payload {
        compress_prompt(m, &settings(cli));
    }
    answer("", Answer::Echo(payload));
    0
}

/// A command with nothing for a shell to interpret beyond words.
fn simple(command: &str) -> bool {
    !command.contains(['|', ';', '&', '<', '>', '`']) && !command.contains("$(")
}

pub(super) fn pre_tool_use(cli: &Cli<'_>) -> u8 {
    let Some(raw) = stdin() else {
        return 0;
    };
    let c = settings(cli);
    if !(c.enabled && c.commands_enabled) {
        return 0;
    }
    let Ok(Value::Object(payload)) = serde_json::from_str::<Value>(&raw) else {
        return 0;
    };
    let Some(Value::Object(input)) = payload.get("tool_input") else {
        return 0;
    };
    let command = input
        .get("command")
        .and_then(Value::as_str)
        .unwrap_or("")
        .trim();
    let first = command
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_lowercase();
    let rewritable = matches!(family(command), "git" | "ls" | "grep" | "diff");
    let excluded = c
        .commands_excluded
        .iter()
        .any(|e| e.to_lowercase() == first);
    if command.is_empty() || !rewritable || !simple(command) || excluded {
        return 0;
    }
    let mut updated = input.clone();
    updated.insert(
        "command".into(),
        json!(format!("babysitter compress-output {command}")),
    );
    answer(
        "",
        Answer::RewriteTool {
            input: Value::Object(updated),
            reason: "babysitter output compression".into(),
        },
    );
    0
}
