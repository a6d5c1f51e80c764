//! `session:iteration-message --iteration <n> [--run-id <id>] [--json]` (spec §6.3): the status
//! banner a harness without a blocking stop hook shows at the start of each iteration — what the
//! run is waiting on, or that it completed and the agent must emit the completion proof.
//!
//! With `--plugin-root`, `skillContext` is the skill discovery summary for the run (as
//! `skill:discover` finds it, the run's entry as the process path); `null` otherwise.

use serde_json::json;

use super::run_facts::{ObservedState, run_facts};
use super::session_error;
use crate::compat::cli::Cli;
use crate::compat::run_dir::Run;
use crate::compat::{output, paths};
use babysitter_engine::lifecycle::completion_proof;

/// What the message needs of a run.
struct Facts {
    state: ObservedState,
    kinds: String,
    /// Completed runs only.
    proof: Option<String>,
}

/// The run's entry (`run.json`'s `entrypoint.importPath`) and, when its journal reads, its
/// facts.
async fn facts(cli: &Cli<'_>, run_id: &str) -> (Option<String>, Option<Facts>) {
    let dir = paths::resolve_existing_run_dir(run_id, &cli.runs_dir(), &cli.cwd);
    let Ok(run) = Run::open(&dir) else {
        return (None, None);
    };
    let Ok(meta) = run.metadata() else {
        return (None, None);
    };
    let entry = meta
        .pointer("/entrypoint/importPath")
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned);
    let Ok(f) = run_facts(&run).await else {
        return (entry, None);
    };
    let proof = (f.state == ObservedState::Completed).then(|| completion_proof(&meta));
    let facts = Facts {
        state: f.state,
        kinds: f.pending_kinds,
        proof,
    };
    (entry, Some(facts))
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
    let run_id = cli.args.value("--run-id").filter(|r| !r.is_empty());
    let (entry, found) = match run_id {
        Some(id) => facts(cli, id).await,
        None => (None, None),
    };
    let state = found.as_ref().map(|f| f.state);
    let kinds = found
        .as_ref()
        .map(|f| f.kinds.clone())
        .filter(|k| !k.is_empty());
    let proof = found.and_then(|f| f.proof);
    let skill_context = cli
        .args
        .value("--plugin-root")
        .filter(|r| !r.is_empty())
        .and_then(|root| {
            crate::compat::skill::context_summary(cli, root, run_id.unwrap_or(""), entry.as_deref())
        });
    let message = system_message(n, state, kinds.as_deref().unwrap_or(""), proof.is_some());
    if cli.args.json() {
        output::line(&output::pretty(&json!({
            "systemMessage": message,
            "runState": state.map(ObservedState::as_str),
            "completionProof": proof,
            "pendingKinds": kinds,
            "skillContext": skill_context,
            "iteration": n,
        })));
    } else {
        let none = || "none".to_owned();
        output::line(&format!(
            "[session:iteration-message] iteration={n} runState={} pendingKinds={} completionProof={} skillContext={} systemMessage={message}",
            state.map_or_else(none, |s| s.as_str().to_owned()),
            kinds.unwrap_or_else(none),
            proof.unwrap_or_else(none),
            skill_context.unwrap_or_else(none),
        ));
    }
    Ok(0)
}
