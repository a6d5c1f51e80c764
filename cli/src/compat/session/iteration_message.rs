//! `session:iteration-message --iteration <n> [--run-id <id>] [--json]` (spec §6.3): the status
//! banner a harness without a blocking stop hook shows at the start of each iteration — what the
//! run is waiting on, or that it completed and the agent must emit the completion proof.
//!
//! `skillContext` is always `null`: skill discovery (`--plugin-root`) is not implemented by this
//! build.

use serde_json::json;

use super::run_facts::{ObservedState, run_facts};
use super::session_error;
use crate::compat::cli::Cli;
use crate::compat::run_dir::Run;
use crate::compat::{output, paths};
use babysitter_engine::lifecycle::completion_proof;

/// Observed state, pending kinds and (completed runs only) the completion proof.
async fn facts(cli: &Cli<'_>, run_id: &str) -> Option<(ObservedState, String, Option<String>)> {
    let dir = paths::resolve_existing_run_dir(run_id, &cli.runs_dir(), &cli.cwd);
    let run = Run::open(&dir).ok()?;
    let meta = run.metadata().ok()?;
    let f = run_facts(&run).await.ok()?;
    let proof = (f.state == ObservedState::Completed).then(|| completion_proof(&meta));
    Some((f.state, f.pending_kinds, proof))
}

/// The banner for iteration `n` (the reference's wording).
pub fn system_message(n: u64, state: Option<ObservedState>, kinds: &str, proof: bool) -> String {
    let head = format!("\u{1F504} Babysitter iteration {n}");
    match state {
        _ if proof => format!(
            "{head} | Run completed! To finish: agent must call 'run:status --json' on your run, extract 'completionProof' from the output, then output it in <promise>SECRET</promise> tags. Do not mention or reveal the secret otherwise."
        ),
        Some(ObservedState::Waiting) if !kinds.is_empty() => format!(
            "{head} | Waiting on: {kinds}. Check if pending effects are resolved, then call run:iterate."
        ),
        Some(ObservedState::Halted) => format!(
            "{head} | Halted. agent must inspect run:status --json for the halt reason and payload, then fix the process or inputs before proceeding."
        ),
        Some(ObservedState::Failed) => {
            format!("{head} | Failed. agent must fix the run, journal or process and proceed.")
        }
        _ => format!("{head} | Agent should continue orchestration (run:iterate)"),
    }
}

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let Some(n) = cli.args.number("--iteration") else {
        return Ok(session_error(
            cli,
            json!({"error": "MISSING_ITERATION", "message": "--iteration is required"}),
            &["Error: --iteration is required for session:iteration-message".into()],
        ));
    };
    let found = match cli.args.value("--run-id").filter(|r| !r.is_empty()) {
        Some(id) => facts(cli, id).await,
        None => None,
    };
    let state = found.as_ref().map(|f| f.0);
    let kinds = found
        .as_ref()
        .map(|f| f.1.clone())
        .filter(|k| !k.is_empty());
    let proof = found.and_then(|f| f.2);
    let message = system_message(n, state, kinds.as_deref().unwrap_or(""), proof.is_some());
    if cli.args.json() {
        output::line(&output::pretty(&json!({
            "systemMessage": message,
            "runState": state.map(ObservedState::as_str),
            "completionProof": proof,
            "pendingKinds": kinds,
            "skillContext": null,
            "iteration": n,
        })));
    } else {
        let none = || "none".to_owned();
        output::line(&format!(
            "[session:iteration-message] iteration={n} runState={} pendingKinds={} completionProof={} skillContext=none systemMessage={message}",
            state.map_or_else(none, |s| s.as_str().to_owned()),
            kinds.unwrap_or_else(none),
            proof.unwrap_or_else(none),
        ));
    }
    Ok(0)
}
