//! `session:resume --session-id <id> --run-id <id> [--state-dir] [--max-iterations] [--json]`
//! (spec §6.3): points a session at an existing run so the stop-hook loop continues it — the
//! session file is (re)written active at iteration 1 with a prompt naming the run, its process
//! and its observed state. A completed run cannot be resumed (`RUN_COMPLETED`); an unreadable
//! run is resumed with state `unknown`, so the agent is told to fix it.

use serde_json::{Value, json};

use super::file::{DEFAULT_MAX_ITERATIONS, SessionFile, SessionState, session_file_path};
use super::run_facts::{ObservedState, run_facts};
use super::{create_file, scope, session_error};
use crate::compat::cli::Cli;
use crate::compat::run_dir::Run;
use crate::compat::{output, paths};

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let (sid, dir) = match scope(cli, true) {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    let run_id = cli.args.value("--run-id").unwrap_or("").to_owned();
    let run_dir = paths::resolve_existing_run_dir(&run_id, &cli.runs_dir(), &cli.cwd);
    if !run_dir.is_dir() {
        return Ok(session_error(
            cli,
            json!({"error": "RUN_NOT_FOUND", "message": format!("Run not found: {run_id}"), "runDir": run_dir.display().to_string()}),
            &[
                format!("Error: run not found: {run_id}"),
                format!("  expected directory: {}", run_dir.display()),
            ],
        ));
    }
    let (run_state, process_id) = observe(&run_dir).await;
    if run_state == ObservedState::Completed.as_str() {
        return Ok(session_error(
            cli,
            json!({"error": "RUN_COMPLETED", "message": "Run is already completed", "runId": run_id}),
            &[
                "Error: run is already completed".into(),
                format!("  run id: {run_id}"),
                "  a completed run cannot be resumed.".into(),
            ],
        ));
    }
    let max = cli
        .args
        .number("--max-iterations")
        .unwrap_or(DEFAULT_MAX_ITERATIONS);
    let prompt = format!(
        "Resume Babysitter run: {run_id}\n\nProcess: {process_id}\nCurrent state: {run_state}\n\nContinue orchestration using run:iterate, task:post, etc. or fix the run if it's broken/failed/unknown."
    );
    let file = SessionFile {
        state: SessionState::new(max, &run_id),
        prompt,
    };
    let path = session_file_path(&dir, &sid);
    if let Err(code) = create_file(cli, &file, &path) {
        return Ok(code);
    }
    let state_file = path.display().to_string();
    if cli.args.json() {
        output::line(&output::pretty(&json!({
            "stateFile": state_file, "runId": run_id, "runState": run_state, "processId": process_id,
        })));
    } else {
        output::line(&format!("[session:resume] runId={run_id}"));
        output::line(&format!("  stateFile: {state_file}"));
        output::line(&format!("  process: {process_id}"));
        output::line(&format!("  runState: {run_state}"));
    }
    Ok(0)
}

/// The observed state (§2.9) and `processId`, `unknown` for what cannot be read.
async fn observe(run_dir: &std::path::Path) -> (String, String) {
    let unknown = || "unknown".to_owned();
    let Ok(run) = Run::open(run_dir) else {
        return (unknown(), unknown());
    };
    let Ok(meta) = run.metadata() else {
        return (unknown(), unknown());
    };
    let process_id = meta
        .get("processId")
        .and_then(Value::as_str)
        .map_or_else(unknown, str::to_owned);
    let state = run_facts(&run)
        .await
        .map_or_else(|_| unknown(), |f| f.state.as_str().to_owned());
    (state, process_id)
}
