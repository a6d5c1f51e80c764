//! Writing a new run directory — `run.json` in the 6.0.0 form of §1.3, `inputs.json`, the layout
//! — and its `RUN_CREATED`: what `run:create` does once its inputs are checked, and what the
//! unified session-start hook does for the bare run it binds. What the run says is the engine's
//! [`lifecycle::NewRun`]; this adds what a CLI process supplies (its working directory, a fresh
//! completion proof) and the reference's errors.

use std::path::Path;

use babysitter_engine::lifecycle;
use babysitter_journal::store::RunFiles;
use babysitter_journal::{EventType, JournalError};
use serde_json::Value;

use crate::compat::cli::Cli;
use crate::compat::output::{Category, CliError};
use crate::compat::run_dir::Run;

/// A run of `process_id` at `entrypoint`, created now.
pub(crate) fn new_run(
    run_id: &str,
    process_id: &str,
    entrypoint: lifecycle::Entrypoint,
) -> lifecycle::NewRun {
    lifecycle::NewRun::new(
        run_id,
        process_id,
        entrypoint,
        babysitter_journal::journal::now_iso(),
    )
}

/// Writes a new run — `run.json`, `inputs.json` — and journals its `RUN_CREATED`; returns
/// `run.json`. An existing run is never overwritten.
pub(crate) async fn write_run(
    cli: &Cli<'_>,
    run: &Run,
    runs_dir: &Path,
    mut spec: lifecycle::NewRun,
    inputs: Option<Value>,
) -> Result<Value, CliError> {
    let run_id = spec.run_id.clone();
    spec.completion_proof = Some(lifecycle::new_completion_proof().map_err(|e| {
        CliError::plain(
            "Error",
            format!("cannot read random bytes for the completion proof: {e}"),
        )
    })?);
    spec.cwd = Some(cli.cwd.display().to_string());
    spec.has_inputs = inputs.is_some();
    let run_json = spec.run_json();
    let files = RunFiles {
        run_json: run_json.clone(),
        inputs_json: inputs,
    };
    match run.journal.create_run(&run_id, files).await {
        Ok(_) => {}
        Err(JournalError::RunAlreadyExists { .. }) => {
            return Err(CliError::new(
                "RunAlreadyExistsError",
                format!("run {run_id} already exists at {}", run.dir.display()),
                Category::Validation,
            )
            .next_steps(vec![
                "Pick another --run-id, or continue the existing run with run:iterate".into(),
            ]));
        }
        Err(e) => {
            return Err(CliError::plain(
                "Error",
                format!(
                    "cannot create run {run_id} under {}: {e}",
                    runs_dir.display()
                ),
            ));
        }
    }
    run.append(
        EventType::RunCreated,
        spec.created_data(),
        &run_json,
        cli.env,
    )
    .await
    .map_err(|e| CliError::plain("Error", format!("{e:#}")))?;
    Ok(run_json)
}
