//! Binding a run to the harness session that drives it (spec `babysitter-core.md` §5.3.1, §6.2):
//! what `run:create` does after creating (or adopting) a run, and what the `session-start` hook
//! prepares. The binding is the session file `<stateDir>/<sessionId>.md` naming the run; the stop
//! hook reads it to decide whether the agent may stop.
//!
//! The harnesses are the reference's adapters (6.0.0), with their environment signals, the
//! variables their session ids come from and whether a session bound to a finished run is
//! released automatically. Fixes of the reference's behaviour kept here (listed in
//! `docs/compatibility.md`):
//! - a harness is detected from its own environment signals only: the reference also counts
//!   `AGENT_SESSION_ID` as every adapter's signal, so any environment with that variable looked
//!   like Codex (the first adapter it probes);
//! - a session id that is not a plain file name (`../x`, `a/b`) is refused: the reference builds
//!   the session file's path from it as given;
//! - the unified harness writes its session file as the others do (the reference's returned a
//!   binding without writing anything, so a run it bound was never seen by the stop hook);
//! - an unreadable session file is reported, not overwritten (the reference overwrote it after
//!   any error, including failing to write the update it had just decided on);
//! - binding a session file that has no prompt yet (session-start makes it with none) records
//!   `--prompt`: the reference kept the empty prompt, so the stop hook re-injected nothing.

use std::path::{Path, PathBuf};

use babysitter_common::EnvMap;
use serde_json::{Map, Value, json};

use super::decide::{self, BindFacts, Binding};
use super::file::{SessionFile, SessionState, session_file_path};
use super::run_facts::{ObservedState, facts_from, run_facts};
use crate::compat::run_dir::Run;

/// One harness adapter's session behaviour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adapter {
    pub name: &'static str,
    /// Variables whose presence says a command runs inside this harness.
    signals: &'static [&'static str],
    /// The harness's own session-id variables, before `AGENT_SESSION_ID`.
    pub native: &'static [&'static str],
    /// Session-id variables consulted after `AGENT_SESSION_ID`.
    pub fallback: &'static [&'static str],
    /// The harness supplies its session id itself: an explicit `--session-id` is a conflict.
    auto_resolves: bool,
    /// A session bound to a finished run is released when a new run binds it.
    auto_release: bool,
    /// The harness drives the loop with a stop hook (claude-code: `run:create` seeds iteration 1).
    pub stop_hook: bool,
    /// The harness has no hooks: `session-start` does nothing.
    pub no_hooks: bool,
}

const fn adapter(
    name: &'static str,
    signals: &'static [&'static str],
    native: &'static [&'static str],
    fallback: &'static [&'static str],
    auto_resolves: bool,
    auto_release: bool,
    stop_hook: bool,
) -> Adapter {
    Adapter {
        name,
        signals,
        native,
        fallback,
        auto_resolves,
        auto_release,
        stop_hook,
        no_hooks: false,
    }
}

/// The adapters, in the order the reference probes them.
const ADAPTERS: &[Adapter] = &[
    adapter(
        "codex",
        &["CODEX_THREAD_ID", "CODEX_SESSION_ID", "CODEX_PLUGIN_ROOT"],
        &["CODEX_THREAD_ID", "CODEX_SESSION_ID"],
        &[],
        true,
        true,
        true,
    ),
    Adapter {
        no_hooks: true,
        ..adapter(
            "oh-my-pi",
            &["OMP_SESSION_ID", "OMP_PLUGIN_ROOT"],
            &["OMP_SESSION_ID"],
            &[],
            true,
            false,
            false,
        )
    },
    adapter(
        "pi",
        &["PI_SESSION_ID", "PI_PLUGIN_ROOT"],
        &["PI_SESSION_ID"],
        &[],
        true,
        false,
        false,
    ),
    adapter(
        "openclaw",
        &["OPENCLAW_SHELL", "OPENCLAW_HOME"],
        &[],
        &["OPENCLAW_SHELL"],
        true,
        false,
        false,
    ),
    adapter(
        "opencode",
        &[
            "OPENCODE_SESSION_ID",
            "OPENCODE_CONFIG",
            "OPENCODE_PLUGIN_ROOT",
            "ACCOMPLISH_TASK_ID",
        ],
        &[],
        &["OPENCODE_SESSION_ID"],
        false,
        false,
        false,
    ),
    // Claude Code gives every hook and tool command `CLAUDE_CODE_SESSION_ID`: a fallback when
    // the session-start hook's `AGENT_SESSION_ID` line has not reached the command.
    adapter(
        "claude-code",
        &["CLAUDE_ENV_FILE"],
        &[],
        &["CLAUDE_CODE_SESSION_ID"],
        true,
        true,
        true,
    ),
    adapter(
        "gemini-cli",
        &["GEMINI_SESSION_ID", "GEMINI_PROJECT_DIR", "GEMINI_CWD"],
        &["GEMINI_SESSION_ID"],
        &[],
        true,
        false,
        true,
    ),
    adapter(
        "hermes",
        &["HERMES_SESSION", "HERMES_PLUGIN_ROOT"],
        &["HERMES_SESSION"],
        &[],
        true,
        false,
        false,
    ),
    adapter(
        "cursor",
        &["CURSOR_PROJECT_DIR", "CURSOR_VERSION"],
        &[],
        &[],
        false,
        false,
        false,
    ),
    adapter(
        "github-copilot",
        &[
            "COPILOT_SESSION_ID",
            "COPILOT_ENV_FILE",
            "COPILOT_HOME",
            "COPILOT_GITHUB_TOKEN",
        ],
        &["COPILOT_SESSION_ID"],
        &[],
        false,
        false,
        true,
    ),
    // Signalled by `AGENT_UNIFIED_ADAPTER=1` (see `detect`); its session id is `AGENT_SESSION_ID`.
    adapter("unified", &[], &[], &[], true, false, false),
    // Detected by `AGENT_SESSION_ID` alone in the reference, which this build does not do (see the
    // module docs): chosen with `--harness genty` only.
    Adapter {
        no_hooks: true,
        ..adapter("genty", &[], &[], &[], true, false, false)
    },
    // Never detected: chosen with `--harness custom`, or for a bare `--session-id`.
    adapter("custom", &[], &[], &[], false, false, false),
];

impl Adapter {
    /// The harness's own session-id variables: its native ones, then its fallbacks (the
    /// hooks adapter and [`bound_server`] read a session id from the environment this way).
    pub fn session_variables(&self) -> impl Iterator<Item = &'static str> {
        self.native.iter().chain(self.fallback).copied()
    }
}

/// Every adapter's name, in the reference's order (`hook:run`'s supported harnesses).
pub fn names() -> Vec<&'static str> {
    ADAPTERS.iter().map(|a| a.name).collect()
}

/// The adapter called `name`.
pub fn by_name(name: &str) -> Option<&'static Adapter> {
    ADAPTERS.iter().find(|a| a.name == name)
}

/// The harness this command runs in, from the environment; `None` is babysitter's `custom`.
pub fn detect(env: &EnvMap) -> Option<&'static Adapter> {
    ADAPTERS.iter().find(|a| {
        if a.name == "unified" {
            env.get("AGENT_UNIFIED_ADAPTER") == Some("1")
        } else {
            a.signals.iter().any(|k| env.get_non_empty(k).is_some())
        }
    })
}

impl Adapter {
    /// Whether an explicit `--session-id` conflicts with the id this harness supplies.
    pub fn auto_resolves(&self, env: &EnvMap) -> bool {
        if self.name == "unified" {
            return env.get_non_empty("AGENT_SESSION_ID").is_some();
        }
        self.auto_resolves
    }

    /// The hint when no session id could be found.
    pub fn missing_id_hint(&self) -> String {
        if self.name == "unified" {
            return "Set AGENT_SESSION_ID (hooks-adapter convention) or pass --session-id explicitly."
                .into();
        }
        format!(
            "Pass --session-id explicitly or ensure the {} hook context provides one.",
            self.name
        )
    }
}

/// Whether `id` can name a session file: one path segment of printable characters.
pub fn valid_session_id(id: &str) -> Result<(), String> {
    let bad = id.is_empty()
        || id.len() > 256
        || id.starts_with('.')
        || id.chars().any(|c| c == '/' || c == '\\' || c.is_control());
    if bad {
        return Err(format!(
            "invalid session id {id:?}: a session id names the file <stateDir>/<id>.md and must be one path segment (no '/', '\\', control characters or leading '.')"
        ));
    }
    Ok(())
}

/// The outcome of a binding, as `run:create` reports it (`session` in its JSON).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    pub harness: String,
    pub session_id: String,
    pub state_file: Option<PathBuf>,
    pub error: Option<String>,
    /// The run must not go on under this session (`run:create` exits 1).
    pub fatal: bool,
}

impl Bound {
    pub fn failed(harness: &str, session_id: &str, error: String) -> Bound {
        Bound {
            harness: harness.to_owned(),
            session_id: session_id.to_owned(),
            state_file: None,
            error: Some(error),
            fatal: false,
        }
    }

    /// `{harness, sessionId, stateFile?, error?, fatal?}` (the reference's key order).
    pub fn to_json(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("harness".into(), json!(self.harness));
        m.insert("sessionId".into(), json!(self.session_id));
        if let Some(f) = &self.state_file {
            m.insert("stateFile".into(), json!(f.display().to_string()));
        }
        if let Some(e) = &self.error {
            m.insert("error".into(), json!(e));
        }
        if self.fatal {
            m.insert("fatal".into(), json!(true));
        }
        m
    }
}

/// What to bind.
#[derive(Debug, Clone)]
pub struct BindRequest<'a> {
    pub adapter: &'a Adapter,
    pub session_id: &'a str,
    pub run_id: &'a str,
    pub run_dir: &'a Path,
    pub runs_dir: &'a Path,
    pub state_dir: &'a Path,
    pub max_iterations: u64,
    pub prompt: &'a str,
    pub verbose: bool,
    /// The orchestrator the run lives on (`run:create --server`): recorded in the session file
    /// (`metadata_server`), so the stop hook reads the run there.
    pub server: Option<&'a str>,
}

/// The session-file metadata key naming the orchestrator a bound run lives on.
pub const SERVER: &str = "server";

/// The orchestrator a run command should go to without `--server`: the one recorded in this
/// harness session's file when the session is bound to that very run (`run:create --server`
/// bound it). So a session's `run:iterate`, `task:list` and `task:post` follow its run to the
/// server whatever harness runs them. `argv`: the command's arguments after its name (the first
/// positional is the run directory or id).
pub fn bound_server(argv: &[String], env: &EnvMap, cwd: &Path) -> Option<String> {
    let mut state_flag = None;
    let mut run_arg = None;
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        if a == "--state-dir" {
            state_flag = it.next().map(String::as_str);
        } else if let Some(v) = a.strip_prefix("--state-dir=") {
            state_flag = Some(v);
        } else if !a.starts_with('-') && run_arg.is_none() {
            run_arg = Some(a.as_str());
        }
    }
    let run_id = Path::new(run_arg?).file_name()?.to_str()?;
    let state_dir = super::file::state_dir(env, cwd, state_flag);
    [
        "AGENT_SESSION_ID",
        "CLAUDE_CODE_SESSION_ID",
        "CODEX_THREAD_ID",
        "GEMINI_SESSION_ID",
    ]
    .iter()
    .filter_map(|k| env.get_non_empty(k))
    .filter(|sid| valid_session_id(sid).is_ok())
    .find_map(|sid| {
        let file = SessionFile::read(&session_file_path(&state_dir, sid.trim())).ok()??;
        (file.state.run_id == run_id)
            .then(|| file.state.metadata_value(SERVER).map(str::to_owned))
            .flatten()
    })
}

/// The observed state of the run in `run_dir` (`None`: it cannot be read).
pub async fn run_state(run_dir: &Path) -> Option<ObservedState> {
    let run = Run::open(run_dir).ok()?;
    run_facts(&run).await.ok().map(|f| f.state)
}

/// Binds the session to the run (§6.2) as [`decide::bind`] rules: a file bound to another run
/// is refused — fatally for harnesses that release finished runs, after checking that the other
/// run is not finished — the same run or no run is updated, and otherwise a file is created
/// fresh.
pub async fn bind(req: &BindRequest<'_>) -> Bound {
    let harness = req.adapter.name;
    let sid = req.session_id;
    if let Err(e) = valid_session_id(sid) {
        return Bound::failed(harness, sid, e);
    }
    let path = session_file_path(req.state_dir, sid);
    let existing = SessionFile::read(&path);
    let binding = {
        let state_file = path.display().to_string();
        let mut facts = BindFacts {
            existing: match &existing {
                Ok(f) => Ok(f.as_ref().map(|f| f.state.run_id.as_str())),
                Err(e) => Err(e.as_str()),
            },
            run_id: req.run_id,
            auto_release: req.adapter.auto_release,
            state_file: &state_file,
            old_run_finished: None,
        };
        loop {
            match decide::bind(&facts) {
                Binding::CheckOldRun => {
                    let old = existing.as_ref().ok().and_then(Option::as_ref);
                    facts.old_run_finished = Some(match old {
                        Some(old) => old_run_finished(req, &old.state).await,
                        None => false,
                    });
                }
                decided => break decided,
            }
        }
    };
    let bound = |error: Option<String>, fatal: bool| Bound {
        harness: harness.to_owned(),
        session_id: sid.to_owned(),
        state_file: Some(path.clone()),
        error,
        fatal,
    };
    match (binding, existing) {
        (Binding::Refuse { error, fatal }, _) => bound(Some(error), fatal),
        (Binding::Update, Ok(Some(file))) => match update(req, file, &path) {
            Ok(()) => bound(None, false),
            Err(e) => bound(Some(e), false),
        },
        (Binding::Create { released }, _) => {
            if let (Some(old), true) = (released, req.verbose) {
                errln!("[run:create] Auto-releasing stale session {sid} from terminal run {old}");
            }
            match create(req, &path) {
                Ok(()) => bound(None, false),
                Err(e) => {
                    Bound::failed(harness, sid, format!("Failed to write session state: {e}"))
                }
            }
        }
        // `decide::bind` updates existing files only and asks about the old run once: reaching
        // here is a bug, reported as a failed binding rather than a panic mid-command.
        (Binding::Update | Binding::CheckOldRun, _) => Bound::failed(
            harness,
            sid,
            "internal error: the session binding decision did not settle".to_owned(),
        ),
    }
}

/// The session file names no run or this one: it is bound to the run in place.
fn update(req: &BindRequest<'_>, mut file: SessionFile, path: &Path) -> Result<(), String> {
    file.state.run_id = req.run_id.to_owned();
    file.state.run_dir = Some(req.run_dir.display().to_string());
    file.state.active = true;
    match req.server {
        Some(url) => file.state.set_metadata(SERVER, url),
        None => file.state.remove_metadata(SERVER),
    }
    // A file made by session-start has no prompt yet: the stop hook re-injects this one.
    if file.prompt.is_empty() {
        file.prompt = req.prompt.to_owned();
    }
    file.write(path)?;
    if req.verbose {
        errln!(
            "[run:create] Updated existing session {} with run {}",
            req.session_id,
            req.run_id
        );
    }
    Ok(())
}

/// A fresh session file bound to the run.
fn create(req: &BindRequest<'_>, path: &Path) -> Result<(), String> {
    let mut state = SessionState::new(req.max_iterations, req.run_id);
    state.run_dir = Some(req.run_dir.display().to_string());
    if let Some(url) = req.server {
        state.set_metadata(SERVER, url);
    }
    let file = SessionFile {
        state,
        prompt: req.prompt.to_owned(),
    };
    file.write(path)?;
    if req.verbose {
        errln!(
            "[run:create] Session {} initialized and bound to run {}",
            req.session_id,
            req.run_id
        );
    }
    Ok(())
}

/// Whether the run a session file names (its `run_dir`, else the run id under the runs root)
/// has ended.
async fn old_run_finished(req: &BindRequest<'_>, old: &SessionState) -> bool {
    let old_dir = old
        .run_dir
        .clone()
        .map(PathBuf::from)
        .unwrap_or_else(|| req.runs_dir.join(&old.run_id));
    run_state(&old_dir)
        .await
        .is_some_and(ObservedState::terminal)
}

/// The session file `session-start` leaves: created (unbound, iteration 1) when missing, an
/// existing one untouched. Returns the path and whether it was created.
pub fn initialize(
    state_dir: &Path,
    session_id: &str,
    max_iterations: u64,
) -> Result<(PathBuf, bool), String> {
    valid_session_id(session_id)?;
    let path = session_file_path(state_dir, session_id);
    if SessionFile::read(&path)?.is_some() {
        return Ok((path, false));
    }
    let file = SessionFile {
        state: SessionState::new(max_iterations, ""),
        prompt: String::new(),
    };
    file.write(&path)?;
    Ok((path, true))
}

/// What `run:create` may adopt instead of creating a run: the active *bare* run the session is
/// bound to (typically made by the unified session-start hook), when it lives in `runs_dir`, was
/// created for this harness in this directory, has no process yet, was journaled for no other
/// session and has not ended (the reference's `findAdoptableSessionRun`).
pub async fn adoptable(
    state_dir: &Path,
    session_id: &str,
    runs_dir: &Path,
    harness: &str,
    cwd: &Path,
) -> Option<(String, PathBuf)> {
    valid_session_id(session_id).ok()?;
    let session = SessionFile::read(&session_file_path(state_dir, session_id))
        .ok()
        .flatten()?;
    if !session.state.active || session.state.run_id.is_empty() {
        return None;
    }
    let run_id = session.state.run_id;
    let expected = runs_dir.join(&run_id);
    let run_dir = session
        .state
        .run_dir
        .map(PathBuf::from)
        .unwrap_or_else(|| expected.clone());
    if run_dir != expected {
        return None;
    }
    let run = Run::open(&run_dir).ok()?;
    let meta = run.metadata().ok()?;
    let field = |k: &str| meta.get(k).and_then(Value::as_str);
    if field("runId") != Some(run_id.as_str())
        || meta
            .pointer("/entrypoint/importPath")
            .and_then(Value::as_str)
            != Some("bare-run")
    {
        return None;
    }
    if field("harness").is_some_and(|h| h != harness) {
        return None;
    }
    if field("cwd").is_some_and(|c| Path::new(c) != cwd) {
        return None;
    }
    let events = run.events().await.ok()?;
    if events
        .iter()
        .any(|e| e.body.kind.as_str() == "PROCESS_ASSIGNED")
    {
        return None;
    }
    let other_session = events.iter().any(|e| {
        e.body
            .data
            .get("sessionId")
            .and_then(Value::as_str)
            .is_some_and(|s| s != session_id)
    });
    if other_session
        || facts_from(&run, &events)
            .await
            .map_or(true, |f| f.state.terminal())
    {
        return None;
    }
    Some((run_id, run_dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_uses_each_harness_own_signals() {
        let env = |pairs: &[(&str, &str)]| pairs.iter().copied().collect::<EnvMap>();
        assert_eq!(detect(&env(&[("AGENT_SESSION_ID", "s")])), None);
        assert_eq!(
            detect(&env(&[("CLAUDE_ENV_FILE", "/x")])).map(|a| a.name),
            Some("claude-code")
        );
        assert_eq!(
            detect(&env(&[
                ("AGENT_UNIFIED_ADAPTER", "1"),
                ("AGENT_SESSION_ID", "s")
            ]))
            .map(|a| a.name),
            Some("unified")
        );
        // Probed in the reference's order: Codex before Claude Code.
        assert_eq!(
            detect(&env(&[("CLAUDE_ENV_FILE", "/x"), ("CODEX_THREAD_ID", "t")])).map(|a| a.name),
            Some("codex")
        );
        assert!(
            by_name("unified").is_some_and(|u| u.auto_resolves(&env(&[("AGENT_SESSION_ID", "s")])))
        );
        assert!(by_name("unified").is_some_and(|u| !u.auto_resolves(&env(&[]))));
        assert!(by_name("cursor").is_some_and(|c| !c.auto_resolves(&env(&[]))));
    }

    #[test]
    fn session_ids_must_be_file_names() {
        for bad in ["", "../x", "a/b", "a\\b", ".hidden", "a\nb"] {
            assert!(valid_session_id(bad).is_err(), "{bad:?} accepted");
        }
        for good in ["4acf55e5-1b2c-4d5e-8f90-123456789abc", "sess_1", "S.1"] {
            assert!(valid_session_id(good).is_ok(), "{good:?} refused");
        }
    }
}
