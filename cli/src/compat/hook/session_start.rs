//! `hook:run --hook-type session-start` (spec `adapters-and-hooks.md` §2.1, `babysitter-core.md`
//! §6.2): prepares the session the stop hook will drive. The session id comes from the hook's
//! stdin payload (`session_id`, `conversation_id`) for harnesses that pipe one, else from the
//! environment (`AGENT_SESSION_ID`, then the harness's own variables); the unified harness reads
//! `AGENT_SESSION_ID` only. Then:
//! - the session file `<stateDir>/<sessionId>.md` is created, unbound, when it does not exist;
//! - with PID markers enabled, the marker of the harness process names the session;
//! - Claude Code: `export AGENT_SESSION_ID="<id>"` goes to `CLAUDE_ENV_FILE`, which Claude Code
//!   sources before each tool command, so the agent's `run:create` binds this session;
//! - unified: a bare run is created and bound (a later `run:create --entry` adopts it).
//!
//! Always prints `{}` and exits 0: a failure here must not stop the harness from starting; it is
//! reported on stderr. Fixes of the reference's behaviour (listed in `docs/compatibility.md`): a
//! session id that is not a file name is refused; the unified hook binds a new bare run only when
//! the session has no live run (the reference re-bound the session to a fresh bare run at every
//! session start — after `/compact` or a resume too — abandoning the run the agent was driving)
//! and records the run directory in the session file as `run:create` does.

use babysitter_engine::lifecycle::Entrypoint;
use serde_json::{Map, Value};

use super::protocol::{allow, parse_payload, read_payload, str_field};
use crate::compat::cli::Cli;
use crate::compat::client;
use crate::compat::run::new_run::new_run;
use crate::compat::session::binding::{self, Adapter};
use crate::compat::session::file::{
    DEFAULT_MAX_ITERATIONS, SessionFile, export_to_env_file, session_file_path, state_dir,
    write_file_atomic,
};
use crate::compat::session::markers;

pub(super) async fn run(cli: &Cli<'_>, harness: &str) -> anyhow::Result<u8> {
    let Some(adapter) = binding::by_name(harness).filter(|a| !a.no_hooks) else {
        allow();
        return Ok(0);
    };
    let payload = if adapter.name != "unified" && adapter.stop_hook {
        match read_payload() {
            Ok(raw) => parse_payload(&raw),
            Err(e) => {
                errln!("[hook:run session-start] cannot read the payload from stdin: {e}");
                Map::new()
            }
        }
    } else {
        Map::new()
    };
    let Some(sid) = session_id(cli, adapter, &payload) else {
        allow();
        return Ok(0);
    };
    if let Err(e) = binding::valid_session_id(&sid) {
        errln!("[hook:run session-start] {e}; no session state written");
        allow();
        return Ok(0);
    }
    let state_dir = state_dir(cli.env, &cli.cwd, cli.args.value("--state-dir"));
    match binding::initialize(&state_dir, &sid, DEFAULT_MAX_ITERATIONS) {
        Ok((path, true)) if cli.args.verbose() => errln!(
            "[hook:run session-start] Created session state: {}",
            path.display()
        ),
        Ok(_) => {}
        Err(e) => errln!("[hook:run session-start] Failed to create session state: {e}"),
    }
    if markers::enabled_for(cli.env, adapter.name)
        && let Some(pid) = markers::harness_ancestor(&markers::process_names(adapter.name))
    {
        let path = markers::marker_path(&state_dir, adapter.name, pid);
        let written = write_file_atomic(&path, &format!("{sid}\n"));
        if let Err(e) = written {
            errln!("[hook:run session-start] cannot write the session marker: {e}");
        }
    }
    if adapter.name == "claude-code"
        && let Some(env_file) = cli.env.get_non_empty("CLAUDE_ENV_FILE")
        && let Err(e) = export_to_env_file(env_file, "AGENT_SESSION_ID", &sid)
    {
        errln!("[hook:run session-start] cannot write AGENT_SESSION_ID to {env_file}: {e}");
    }
    if adapter.name == "unified"
        && let Err(e) = bind_bare_run(cli, &state_dir, &sid).await
    {
        errln!("[hook:run session-start] bare run creation failed: {e:#}");
    }
    allow();
    Ok(0)
}

/// The session id of this hook call (see the module docs for the order).
fn session_id(cli: &Cli<'_>, adapter: &Adapter, payload: &Map<String, Value>) -> Option<String> {
    let env = |k: &str| cli.env.get_non_empty(k).map(str::trim);
    if adapter.name == "unified" {
        return env("AGENT_SESSION_ID").map(str::to_owned);
    }
    str_field(payload, "session_id")
        .or_else(|| str_field(payload, "conversation_id"))
        .map(str::trim)
        .or_else(|| env("AGENT_SESSION_ID"))
        .or_else(|| {
            adapter
                .native
                .iter()
                .chain(adapter.fallback)
                .find_map(|k| env(k))
        })
        .map(str::to_owned)
}

/// Appends `export AGENT_SESSION_ID="<id>"` to Claude Code's env file, unless its last such line
/// names this session already. Only ids that need no shell quoting are written.
/// Unified: a bare run (harness `unified`) bound to the session, unless the session already has a
/// run that has not ended.
async fn bind_bare_run(
    cli: &Cli<'_>,
    state_dir: &std::path::Path,
    sid: &str,
) -> anyhow::Result<()> {
    let path = session_file_path(state_dir, sid);
    let Some(mut file) = SessionFile::read(&path).map_err(anyhow::Error::msg)? else {
        anyhow::bail!("the session file {} is missing", path.display());
    };
    let runs_dir = cli.runs_dir();
    if !file.state.run_id.is_empty() {
        let dir = file
            .state
            .run_dir
            .clone()
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| runs_dir.join(&file.state.run_id));
        if binding::run_state(&dir)
            .await
            .is_some_and(|s| !s.terminal())
        {
            return Ok(());
        }
    }
    let run_id = ulid::Ulid::generate().to_string();
    let run_dir = runs_dir.join(&run_id);
    let mut spec = new_run(&run_id, "bare-run", Entrypoint::bare());
    spec.request = run_id.clone();
    spec.harness = Some("unified".into());
    client::current()
        .create_run(cli, &run_dir, spec, None, None)
        .await
        .map_err(|e| anyhow::anyhow!("{}", e.message))?;
    file.state.run_id = run_id.clone();
    file.state.run_dir = Some(run_dir.display().to_string());
    file.state.run_ids = vec![run_id.clone()];
    file.write(&path).map_err(anyhow::Error::msg)?;
    if cli.args.verbose() {
        errln!("[session-start] bare run created and bound: {run_id}");
    }
    Ok(())
}
