//! babysitter-compatible commands (`babysitter <noun>:<verb> …`): a drop-in for the reference
//! CLI's run and task commands over the same on-disk run layout, so babysitter's plugins,
//! skills and existing runs work unchanged (spec `babysitter-core.md` §5).
//!
//! - [`args`]: the reference's global flag grammar (with `--x=value`, B22).
//! - [`paths`]: runs-root resolution and path arguments (§1.1).
//! - [`cli`]: what every command gets (arguments, environment, working directory).
//! - [`run_dir`]: one run directory — journal, engine, `run.json`, state cache, serialisations.
//! - [`lock`]: whole-command exclusion on a run, waiting quietly with one message.
//! - [`output`]: Node-exact JSON and the reference's error forms.
//! - [`run`], [`task`], [`health`]: the commands, one module per verb.
//! - [`hook`], [`session`]: `hook:run` (the stop hook, §6.1) and the session-file commands (§6.2–6.3).
//! - [`instructions`]: the orchestration instructions agents load (`instructions:babysit-skill`).
//! - [`process_library`], [`skill`], [`profile`], [`compression`], [`tokens_stats`],
//!   [`configure`], [`discover`]: the peripheral commands (`process-library:*`, `skill:*`,
//!   `profile:*`, `compression:*`, `tokens:stats`, `configure`, `discover` / `list`).
//!
//! Behaviour fixes of the reference kept here (formats unchanged, §11.2): `run:iterate` appends
//! `RUN_ITERATION` and reports true counts (B2), `hookStatus` never claims hooks ran (B12),
//! `task:post` exits 0 when an error result was committed (B7), `run:halt` on a terminal run is a
//! no-op unless `--force` (B18), the stop hook's ambiguous missing-session recovery blocks with
//! an explanation instead of silently ending the loop (B20), no `node_modules` symlink in the user's tree (B17), `run:create`
//! refuses to overwrite an existing run.

// First: its `errln!` macro serves every command module below.
#[macro_use]
pub(crate) mod output;

mod args;
mod breakpoint;
mod cli;
pub mod client;
mod compress_output;
mod compression;
mod configure;
mod discover;
mod health;
mod hook;
mod hooks_adapter;
mod instructions;
mod json_file;
mod lock;
pub(crate) mod log;
pub(crate) mod paths;
mod plugin_cmds;
mod process_library;
mod profile;
mod run;
mod run_dir;
mod runtime_hooks;
pub(crate) mod session;
mod skill;
mod task;
mod tls_cmd;
mod tokens_stats;
mod usage;
pub mod warm;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use babysitter_common::EnvMap;
use babysitter_journal::fs::FsRuntime;

use cli::Cli;
use output::{Category, CliError};

/// Runs one babysitter command on `fs` (the process's filesystem journal runtime); returns its
/// exit code (every failure is 1, F19).
/// `server`: the orchestrator's URL when the runs live there (`--server`), else on this machine.
pub fn main(argv: &[String], env: &EnvMap, fs: FsRuntime, server: Option<&str>) -> ExitCode {
    // For the two failures before the arguments are parsed.
    let json = argv.iter().any(|a| a == "--json");
    let cwd = match std::env::current_dir() {
        Ok(d) => d,
        Err(e) => {
            CliError::plain("Error", format!("cannot read the working directory: {e}"))
                .report(json);
            return ExitCode::from(1);
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            CliError::plain("Error", format!("cannot start the async runtime: {e}")).report(json);
            return ExitCode::from(1);
        }
    };
    ExitCode::from(runtime.block_on(async {
        let home: Arc<dyn client::RunClient> = match server {
            None => Arc::new(client::OnDisk::Local),
            Some(url) => match client::remote::Remote::connect(url, env) {
                Ok(r) => Arc::new(r),
                Err(e) => {
                    CliError::plain("Error", format!("cannot reach {url}: {e:#}")).report(json);
                    return 1;
                }
            },
        };
        execute(argv, env, cwd, fs, home).await
    }))
}

/// Parses and runs one command in `cwd`, its runs in `client`'s home (see [`client::scope`])
/// and the stores and holds of runs on this machine on `fs` (see [`run_dir::with_fs`]);
/// everything it prints goes through `output` (the process's streams, or the warm server's
/// capture).
pub async fn execute(
    argv: &[String],
    env: &EnvMap,
    cwd: PathBuf,
    fs: FsRuntime,
    client: Arc<dyn client::RunClient>,
) -> u8 {
    // Boxed: a command's future is large (tens of KiB), and a scope would carry it inline.
    let command = Box::pin(execute_command(argv, env, cwd));
    run_dir::with_fs(fs, client::scope(client, command)).await
}

async fn execute_command(argv: &[String], env: &EnvMap, cwd: PathBuf) -> u8 {
    // Everything after the command name is the command to run, flags included.
    if argv.first().map(String::as_str) == Some("compress-output") {
        return compress_output::run(&argv[1..]).await;
    }
    let parsed = match args::parse(argv) {
        Ok(p) => p,
        Err(e) => {
            CliError::plain("Error", e.0).report(false);
            return 1;
        }
    };
    let cli = Cli {
        args: parsed,
        env,
        cwd,
    };
    if cli.args.verbose() {
        for f in &cli.args.ignored_flags {
            errln!("[babysitter] ignoring unknown flag {f}");
        }
    }
    match dispatch(&cli).await {
        Ok(code) => code,
        Err(e) => {
            output::to_cli_error(&e).report(cli.args.json());
            1
        }
    }
}

/// Commands of the reference this build does not implement yet.
const NOT_YET: &[&str] = &[];

/// Commands the reference moved to the separate harness CLI.
const MOVED: &[&str] = &[
    "create-run",
    "call",
    "yolo",
    "plan",
    "forever",
    "resume-run",
    "resume",
    "retrospect",
    "cleanup",
    "assimilate",
    "doctor",
    "contrib",
    "anycli",
    "session-history",
    "help",
    "observe",
    "user-install",
    "project-install",
    "invoke",
    "tui",
    "daemon:start",
    "daemon:stop",
    "daemon:status",
    "daemon:run",
    "cost:stats",
    "start-server",
];

const IMPLEMENTED: &[&str] = &[
    "run:create",
    "run:status",
    "run:iterate",
    "run:events",
    "run:rebuild-state",
    "run:halt",
    "run:assign-process",
    "run:repair-journal",
    "run:recover-process-error",
    "task:post",
    "task:cancel",
    "task:list",
    "task:show",
    "health",
    "hook:run",
    "hook:log",
    "log",
    "breakpoint:approve-rule",
    "breakpoint:remove-rule",
    "breakpoint:list-rules",
    "breakpoint:should-auto-approve",
    "breakpoint:history",
    "session:init",
    "session:associate",
    "session:state",
    "session:update",
    "session:check-iteration",
    "session:last-message",
    "session:resume",
    "session:iteration-message",
    "session:whoami",
    "session:cleanup",
    "instructions:babysit-skill",
    "instructions:orchestrate",
    "instructions:process-create",
    "instructions:breakpoint-handling",
    "process-library:clone",
    "process-library:update",
    "process-library:use",
    "process-library:active",
    "compression:status",
    "compression:toggle",
    "compression:set",
    "compression:reset",
    "tokens:stats",
    "profile:read",
    "profile:write",
    "profile:merge",
    "profile:render",
    "skill:discover",
    "skill:fetch-remote",
    "configure",
    "discover",
    "list",
    "version",
    "hooks:invoke",
    "harness:install-plugin",
    "harness:install",
    "harness:discover",
    "plugin:list-installed",
    "plugin:uninstall",
    "plugin:generate",
    "tls:generate",
];

async fn dispatch(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let command = match cli.args.command.as_deref() {
        Some("version") => {
            output::line(cli::SDK_VERSION);
            return Ok(0);
        }
        None => {
            output::line(usage::USAGE);
            return Ok(0);
        }
        Some(c) if cli.args.help && !IMPLEMENTED.contains(&c) => {
            // `--help` on a command this build does not have is that command's error, so a
            // caller checking that a command exists learns that it does not.
            unknown_command(c).report_pretty(cli.args.json());
            return Ok(1);
        }
        _ if cli.args.help => {
            output::line(usage::USAGE);
            return Ok(0);
        }
        Some(c) => c,
    };
    match command {
        "run:create" => run::create::run(cli).await,
        "run:iterate" => run::iterate::run(cli).await,
        "run:status" => run::status::run(cli).await,
        "run:events" => run::events::run(cli).await,
        "run:halt" => run::halt::run(cli).await,
        "run:rebuild-state" => run::rebuild_state::run(cli).await,
        "run:assign-process" => run::assign_process::run(cli).await,
        "run:repair-journal" => run::repair_journal::run(cli).await,
        "run:recover-process-error" => run::recover_process_error::run(cli).await,
        "task:list" => task::list::run(cli).await,
        "task:show" => task::show::run(cli).await,
        "task:post" => task::post::run(cli).await,
        "task:cancel" => task::cancel::run(cli).await,
        "health" => health::run(cli).await,
        "hook:run" => hook::run(cli).await,
        "hook:log" => log::hook_log(cli).await,
        "hooks:invoke" => hooks_adapter::invoke(cli).await,
        "harness:install-plugin" => plugin_cmds::install_plugin(cli).await,
        "harness:install" => plugin_cmds::install_harness(cli).await,
        "harness:discover" => plugin_cmds::discover(cli).await,
        "plugin:list-installed" => plugin_cmds::list_installed(cli).await,
        "plugin:uninstall" => plugin_cmds::uninstall(cli).await,
        "plugin:generate" => plugin_cmds::generate(cli).await,
        "log" => log::log(cli).await,
        "breakpoint:approve-rule" => breakpoint::approve_rule(cli).await,
        "breakpoint:remove-rule" => breakpoint::remove_rule(cli).await,
        "breakpoint:list-rules" => breakpoint::list_rules(cli).await,
        "breakpoint:should-auto-approve" => breakpoint::should_auto_approve(cli).await,
        "breakpoint:history" => breakpoint::history(cli).await,
        "session:init" => session::init(cli).await,
        "session:associate" => session::associate(cli).await,
        "session:state" => session::state(cli).await,
        "session:update" => session::update(cli).await,
        "session:check-iteration" => session::check_iteration(cli).await,
        "session:last-message" => session::last_message(cli).await,
        "session:resume" => session::resume::run(cli).await,
        "session:iteration-message" => session::iteration_message::run(cli).await,
        "session:whoami" => session::whoami::run(cli).await,
        "session:cleanup" => session::cleanup::run(cli).await,
        "instructions:babysit-skill"
        | "instructions:orchestrate"
        | "instructions:process-create"
        | "instructions:breakpoint-handling" => {
            instructions::instructions(cli, &command["instructions:".len()..]).await
        }
        "tokens:stats" => tokens_stats::run(cli).await,
        "tls:generate" => tls_cmd::run(cli).await,
        "skill:discover" => skill::discover(cli).await,
        "configure" => configure::run(cli).await,
        "discover" | "list" => discover::run(cli).await,
        "skill:fetch-remote" => skill::fetch_remote(cli).await,
        "profile:read" | "profile:write" | "profile:merge" | "profile:render" => {
            profile::run(cli, &command["profile:".len()..]).await
        }
        "compression:status" => compression::commands::status(cli).await,
        "compression:toggle" => compression::commands::toggle(cli).await,
        "compression:set" => compression::commands::set(cli).await,
        "compression:reset" => compression::commands::reset(cli).await,
        "process-library:clone"
        | "process-library:update"
        | "process-library:use"
        | "process-library:active" => {
            process_library::run(cli, &command["process-library:".len()..]).await
        }
        other => {
            unknown_command(other).report_pretty(cli.args.json());
            Ok(1)
        }
    }
}

fn unknown_command(command: &str) -> CliError {
    if MOVED.contains(&command) {
        return CliError::new(
            "CommandMovedToHarnessCli",
            format!("Command \"{command}\" is provided by @a5c-ai/genty-platform."),
            Category::Validation,
        )
        .suggestions(vec![
            "Install @a5c-ai/genty-platform".into(),
            format!("agent-platform {command}"),
        ])
        .next_steps(vec![
            "Run agent-platform --help-human to see the harness runtime commands.".into(),
        ])
        .details(serde_json::json!({"command": command, "program": "babysitter", "movedTo": "agent-platform"}));
    }
    if NOT_YET.contains(&command) || command.starts_with("session:") || command.starts_with("hook:")
    {
        return CliError::new(
            "NotImplementedError",
            format!("Command \"{command}\" is not implemented by this babysitter build yet"),
            Category::Configuration,
        )
        .next_steps(vec![
            "Use the reference CLI (npm @a5c-ai/babysitter-sdk) for this command; runs are compatible".into(),
        ])
        .details(serde_json::json!({"command": command, "program": "babysitter"}));
    }
    let suggestion = suggest(command);
    CliError::new(
        "UnknownCommandError",
        format!("Unknown command: {command}"),
        Category::Validation,
    )
    .suggestions(
        suggestion
            .map(|s| vec![format!("Did you mean: {s}?")])
            .unwrap_or_default(),
    )
    .next_steps(vec![
        "Run babysitter --help to see available commands".into(),
    ])
    .details(serde_json::json!({"command": command, "program": "babysitter"}))
}

/// The closest implemented command within edit distance 2.
fn suggest(command: &str) -> Option<&'static str> {
    fn distance(a: &str, b: &str) -> usize {
        let b: Vec<char> = b.chars().collect();
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.chars().enumerate() {
            let mut cur = vec![i + 1];
            for (j, cb) in b.iter().enumerate() {
                let cost = usize::from(ca != *cb);
                cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
            }
            prev = cur;
        }
        prev[b.len()]
    }
    IMPLEMENTED
        .iter()
        .map(|c| (distance(command, c), *c))
        .filter(|(d, _)| *d <= 2)
        .min_by_key(|(d, _)| *d)
        .map(|(_, c)| c)
}

impl CliError {
    /// The unknown-command handler prints its structured error pretty (unlike the top-level
    /// handler's single line).
    fn report_pretty(&self, json: bool) {
        if json {
            errln!("{}", output::pretty(&self.structured()));
        } else {
            errln!("{}", self.text());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_tables_do_not_overlap() {
        for c in IMPLEMENTED {
            assert!(
                !NOT_YET.contains(c) && !MOVED.contains(c),
                "{c} is implemented"
            );
        }
        for c in NOT_YET {
            assert!(!MOVED.contains(c), "{c}");
        }
    }
}
