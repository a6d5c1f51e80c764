//! The `session:*` commands the stop-hook loop needs (spec `babysitter-core.md` §6.2, §6.3):
//! `init`, `associate`, `state`, `update`, `check-iteration` and `last-message` here, the others
//! in their own modules ([`cleanup`], [`iteration_message`], [`resume`], [`whoami`]); and what
//! they and the stop hook share: the session file ([`file`]), what a run's journal says about
//! it ([`run_facts`]), the agent's last message ([`transcript`]), the harnesses and the binding
//! of a run to a session ([`binding`], [`markers`]), and the stop hook's decision ([`decide`]).
//!
//! Session command errors are JSON on stderr (`{error, message, …}`) under `--json`, text
//! otherwise, exit 1.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::compat::cli::Cli;
use crate::compat::run_dir::Run;
use crate::compat::{output, paths};

pub mod binding;
pub mod cleanup;
pub mod decide;
pub mod file;
pub mod iteration_message;
pub mod markers;
pub mod resume;
pub mod run_facts;
pub mod transcript;
pub mod whoami;

use file::{
    DEFAULT_MAX_ITERATIONS, SessionFile, SessionState, leading_int, now_ts, session_file_path,
    state_dir, update_iteration_times,
};

/// A session command error: JSON on stderr under `--json`, else text lines; exit 1.
fn session_error(cli: &Cli<'_>, error: Value, lines: &[String]) -> u8 {
    if cli.args.json() {
        errln!("{}", output::pretty(&error));
    } else {
        for l in lines {
            errln!("{l}");
        }
    }
    1
}

/// Writes a new (or replaced) session file; `FS_ERROR` when it cannot be.
fn create_file(cli: &Cli<'_>, file: &SessionFile, path: &Path) -> Result<(), u8> {
    file.write(path).map_err(|m| {
        session_error(
            cli,
            json!({"error": "FS_ERROR", "message": m}),
            &[format!("Error: failed to create state file: {m}")],
        )
    })
}

/// `--session-id` (required) and the state dir.
fn scope(cli: &Cli<'_>, require_run_id: bool) -> Result<(String, PathBuf), u8> {
    let Some(sid) = cli
        .args
        .value("--session-id")
        .map(str::trim)
        .filter(|s| !s.is_empty())
    else {
        return Err(session_error(
            cli,
            json!({"error": "MISSING_SESSION_ID", "message": "--session-id is required"}),
            &["Error: --session-id is required".into()],
        ));
    };
    if require_run_id && cli.args.value("--run-id").is_none_or(str::is_empty) {
        return Err(session_error(
            cli,
            json!({"error": "MISSING_RUN_ID", "message": "--run-id is required"}),
            &["Error: --run-id is required".into()],
        ));
    }
    let dir = state_dir(cli.env, &cli.cwd, cli.args.value("--state-dir"));
    Ok((sid.to_owned(), dir))
}

/// `session:init --session-id --state-dir [--max-iterations] [--run-id] [--prompt]`.
pub async fn init(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let (sid, dir) = match scope(cli, false) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let path = session_file_path(&dir, &sid);
    match SessionFile::read(&path) {
        Ok(None) => {}
        Ok(Some(existing)) if !existing.state.run_id.is_empty() => {
            let run_id = existing.state.run_id;
            return Ok(session_error(
                cli,
                json!({"error": "SESSION_EXISTS", "message": format!("Session already associated with run: {run_id}"), "runId": run_id}),
                &[format!(
                    "Error: this session is already associated with run {run_id}"
                )],
            ));
        }
        Ok(Some(_)) => {
            return Ok(session_error(
                cli,
                json!({"error": "SESSION_EXISTS", "message": "A babysitter run is already active for this session"}),
                &["Error: a babysitter run is already active for this session".into()],
            ));
        }
        Err(_) => {
            return Ok(session_error(
                cli,
                json!({"error": "SESSION_EXISTS", "message": "Session state file exists but could not be read"}),
                &["Error: session state file exists but could not be read".into()],
            ));
        }
    }
    let max = cli
        .args
        .number("--max-iterations")
        .unwrap_or(DEFAULT_MAX_ITERATIONS);
    let run_id = cli.args.value("--run-id").unwrap_or("");
    let file = SessionFile {
        state: SessionState::new(max, run_id),
        prompt: cli.args.value("--prompt").unwrap_or("").to_owned(),
    };
    if let Err(code) = create_file(cli, &file, &path) {
        return Ok(code);
    }
    let state_file = path.display().to_string();
    if cli.args.json() {
        output::line(&output::pretty(&json!({
            "stateFile": state_file,
            "iteration": 1,
            "maxIterations": max,
            "runId": run_id,
        })));
    } else {
        output::line("[session:init] initialized");
        output::line(&format!("  stateFile: {state_file}"));
        output::line("  iteration: 1");
        let shown = if max > 0 {
            max.to_string()
        } else {
            "unlimited".into()
        };
        output::line(&format!("  maxIterations: {shown}"));
        if !run_id.is_empty() {
            output::line(&format!("  runId: {run_id}"));
        }
    }
    Ok(0)
}

/// `session:associate --session-id --run-id [--force]`.
pub async fn associate(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let (sid, dir) = match scope(cli, true) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let run_id = cli.args.value("--run-id").unwrap_or("").to_owned();
    let path = session_file_path(&dir, &sid);
    let existing = match SessionFile::read(&path) {
        Ok(Some(f)) => f,
        other => {
            let message = match other {
                Err(m) => m,
                _ => format!("Session state file not found: {}", path.display()),
            };
            return Ok(session_error(
                cli,
                json!({"error": "SESSION_NOT_FOUND", "message": message}),
                &[
                    "Error: no active babysitter session found".into(),
                    format!("  expected state file: {}", path.display()),
                    "  run session:init first.".into(),
                ],
            ));
        }
    };
    if !existing.state.run_id.is_empty() {
        let old = existing.state.run_id.clone();
        if !cli.args.flag("--force") {
            return Ok(session_error(
                cli,
                json!({"error": "RUN_ALREADY_ASSOCIATED", "message": format!("Session already associated with run: {old}. Use --force to rebind if the existing run is completed or failed."), "existingRunId": old}),
                &[
                    format!("Error: this session is already associated with run {old}"),
                    format!("  use --force to rebind to {run_id}"),
                ],
            ));
        }
        // An unreadable old run counts as terminal (as the reference does).
        let old_dir = paths::resolve_existing_run_dir(&old, &cli.runs_dir(), &cli.cwd);
        let terminal = match Run::open(&old_dir) {
            Ok(run) => match run.events().await {
                Ok(evs) => evs.iter().any(|e| {
                    matches!(
                        e.body.kind.as_str(),
                        "RUN_COMPLETED" | "RUN_HALTED" | "RUN_FAILED"
                    )
                }),
                Err(_) => true,
            },
            Err(_) => true,
        };
        if !terminal {
            return Ok(session_error(
                cli,
                json!({"error": "RUN_STILL_ACTIVE", "message": format!("Cannot rebind: run {old} is still active. Complete or fail the run first."), "existingRunId": old}),
                &[format!(
                    "Error: cannot rebind while run {old} is still active"
                )],
            ));
        }
    }
    let mut file = existing;
    file.state.run_id = run_id.clone();
    if let Err(m) = file.write(&path) {
        return Ok(session_error(
            cli,
            json!({"error": "FS_ERROR", "message": m}),
            &[format!("Error: failed to update state file: {m}")],
        ));
    }
    let state_file = path.display().to_string();
    if cli.args.json() {
        output::line(&output::pretty(
            &json!({"stateFile": state_file, "runId": run_id}),
        ));
    } else {
        output::line(&format!("[session:associate] runId={run_id}"));
        output::line(&format!("  stateFile: {state_file}"));
    }
    Ok(0)
}

/// `session:state --session-id [--state-dir]` → `{found, state?, prompt?, stateFile}`.
pub async fn state(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let (sid, dir) = match scope(cli, false) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let path = session_file_path(&dir, &sid);
    let state_file = path.display().to_string();
    match SessionFile::read(&path) {
        Ok(None) => {
            if cli.args.json() {
                output::line(&output::pretty(
                    &json!({"found": false, "stateFile": state_file}),
                ));
            } else {
                output::line(&format!("[session:state] not found: {state_file}"));
            }
            Ok(0)
        }
        Ok(Some(f)) => {
            if cli.args.json() {
                output::line(&output::pretty(&json!({
                    "found": true,
                    "state": f.state.to_json(),
                    "prompt": f.prompt,
                    "stateFile": state_file,
                })));
            } else {
                let s = &f.state;
                output::line(&format!("[session:state] found: {state_file}"));
                output::line(&format!("  active: {}", s.active));
                output::line(&format!("  iteration: {}", s.iteration));
                output::line(&format!("  maxIterations: {}", s.max_iterations));
                let rid = if s.run_id.is_empty() {
                    "(none)"
                } else {
                    &s.run_id
                };
                output::line(&format!("  runId: {rid}"));
                output::line(&format!("  startedAt: {}", s.started_at));
                output::line(&format!("  lastIterationAt: {}", s.last_iteration_at));
                let times: Vec<String> = s.iteration_times.iter().map(u64::to_string).collect();
                output::line(&format!("  iterationTimes: [{}]", times.join(", ")));
            }
            Ok(0)
        }
        Err(m) => Ok(session_error(
            cli,
            json!({"error": "CORRUPTED_STATE", "message": m, "stateFile": state_file}),
            &[format!("Error: failed to read state file: {m}")],
        )),
    }
}

/// `session:update --session-id [--iteration n] [--last-iteration-at iso] [--iteration-times csv]`
/// → `{success: true, state, stateFile}`.
pub async fn update(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let (sid, dir) = match scope(cli, false) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let path = session_file_path(&dir, &sid);
    let mut file = match SessionFile::read(&path) {
        Ok(Some(f)) => f,
        other => {
            let message = match other {
                Err(m) => m,
                _ => format!("Session state file not found: {}", path.display()),
            };
            return Ok(session_error(
                cli,
                json!({"error": "SESSION_NOT_FOUND", "message": message}),
                &[format!("Error: session not found: {message}")],
            ));
        }
    };
    if let Some(n) = cli.args.number("--iteration") {
        file.state.iteration = n;
    }
    if let Some(t) = cli.args.value("--last-iteration-at") {
        file.state.last_iteration_at = t.to_owned();
    }
    if let Some(csv) = cli.args.value("--iteration-times") {
        file.state.iteration_times = csv
            .split(',')
            .filter_map(|v| leading_int(v.trim()))
            .filter(|n| *n > 0)
            .collect();
    }
    if let Err(m) = file.write(&path) {
        return Ok(session_error(
            cli,
            json!({"error": "FS_ERROR", "message": m}),
            &[format!("Error: failed to update state file: {m}")],
        ));
    }
    let state_file = path.display().to_string();
    if cli.args.json() {
        output::line(&output::pretty(&json!({
            "success": true,
            "state": file.state.to_json(),
            "stateFile": state_file,
        })));
    } else {
        output::line("[session:update] updated");
        output::line(&format!("  stateFile: {state_file}"));
    }
    Ok(0)
}

/// `session:check-iteration --session-id` (only the max-iteration rule; `active` is ignored).
pub async fn check_iteration(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let (sid, dir) = match scope(cli, false) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let path = session_file_path(&dir, &sid);
    let json_out = cli.args.json();
    let Ok(Some(file)) = SessionFile::read(&path) else {
        if json_out {
            output::line(&output::pretty(&json!({
                "found": false,
                "shouldContinue": false,
                "reason": "session_not_found",
                "iteration": 0,
                "maxIterations": 0,
                "runId": "",
                "prompt": "",
                "stopMessage": "Session not found",
            })));
        } else {
            output::line("[session:check-iteration] shouldContinue=false reason=session_not_found");
        }
        return Ok(0);
    };
    let st = &file.state;
    if st.max_iterations > 0 && st.iteration >= st.max_iterations {
        if json_out {
            output::line(&output::pretty(&json!({
                "found": true,
                "shouldContinue": false,
                "reason": "max_iterations_reached",
                "iteration": st.iteration,
                "maxIterations": st.max_iterations,
                "runId": st.run_id,
                "prompt": file.prompt,
                "stopMessage": format!("Max iterations ({}) reached", st.max_iterations),
            })));
        } else {
            output::line(&format!(
                "[session:check-iteration] shouldContinue=false reason=max_iterations_reached iteration={}",
                st.iteration
            ));
        }
        return Ok(0);
    }
    let times = if st.iteration >= 5 {
        update_iteration_times(&st.iteration_times, &st.last_iteration_at, &now_ts())
    } else {
        st.iteration_times.clone()
    };
    if json_out {
        output::line(&output::pretty(&json!({
            "found": true,
            "shouldContinue": true,
            "nextIteration": st.iteration + 1,
            "updatedIterationTimes": times,
            "iteration": st.iteration,
            "maxIterations": st.max_iterations,
            "runId": st.run_id,
            "prompt": file.prompt,
        })));
    } else {
        output::line(&format!(
            "[session:check-iteration] shouldContinue=true nextIteration={}",
            st.iteration + 1
        ));
    }
    Ok(0)
}

/// `session:last-message --transcript-path f` → `{found, text, hasPromise, promiseValue, error?}`.
pub async fn last_message(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let Some(raw_path) = cli
        .args
        .value("--transcript-path")
        .filter(|p| !p.is_empty())
    else {
        let message = "--transcript-path is required for session:last-message";
        if cli.args.json() {
            errln!(
                "{}",
                output::compact(&json!({"error": "MISSING_TRANSCRIPT_PATH", "message": message}))
            );
        } else {
            errln!("{message}");
        }
        return Ok(1);
    };
    let path = paths::resolve_input_path(raw_path, &cli.cwd);
    let mut found = false;
    let mut text: Option<String> = None;
    let mut promise: Option<String> = None;
    let mut error: Option<&str> = None;
    match std::fs::read(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => error = Some("TRANSCRIPT_NOT_FOUND"),
        Err(_) => error = Some("TRANSCRIPT_PARSE_ERROR"),
        Ok(bytes) => {
            let raw = String::from_utf8_lossy(&bytes);
            if let Some(t) = transcript::transcript_text(&raw) {
                found = true;
                promise = transcript::extract_promise(&t);
                text = Some(t);
            }
        }
    }
    if cli.args.json() {
        let mut v = json!({
            "found": found,
            "text": text,
            "hasPromise": promise.is_some(),
            "promiseValue": promise,
        });
        if let (Some(e), Some(m)) = (error, v.as_object_mut()) {
            m.insert("error".into(), json!(e));
        }
        output::line(&output::pretty(&v));
    } else if error == Some("TRANSCRIPT_NOT_FOUND") {
        output::line(&format!(
            "[session:last-message] error=TRANSCRIPT_NOT_FOUND path={}",
            path.display()
        ));
    } else {
        let pv = promise
            .as_deref()
            .filter(|p| !p.is_empty())
            .map(|p| format!(" promiseValue={p}"))
            .unwrap_or_default();
        output::line(&format!(
            "[session:last-message] found={found} hasPromise={}{pv}",
            promise.is_some()
        ));
    }
    Ok(0)
}
