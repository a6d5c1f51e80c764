//! `session:cleanup [--harness <name>] [--state-dir] [--dry-run] [--json]` (spec §6.3): removes
//! PID markers of harness processes that are gone, and deactivates session files left active
//! for runs that ended (or untouched for 24 h), so a later stop hook does not keep re-prompting
//! for a dead loop. Sessions whose harness process is alive (a live marker names them) are left
//! alone. With `--dry-run` nothing is changed; the answer lists what would be.
//!
//! Difference from the reference: a run counts as ended when its last *lifecycle* event is
//! terminal (`RUN_COMPLETED` / `RUN_HALTED` / `RUN_FAILED`), not when its last journal file is —
//! a stop-hook event appended after completion no longer hides that the run ended.

use std::collections::HashSet;
use std::path::Path;

use babysitter_journal::fs::pid_alive;
use serde_json::json;

use super::file::{SessionFile, state_dir};
use super::markers;
use super::run_facts::run_facts;
use crate::compat::cli::Cli;
use crate::compat::run_dir::Run;
use crate::compat::{output, paths};

/// Sessions idle longer than this are stale.
const STALE_SECS: i64 = 24 * 60 * 60;

/// `Some(true)` when the run ended, `Some(false)` when it did not (or cannot be read), `None`
/// when no readable runs root has it.
async fn run_ended(roots: &[std::path::PathBuf], run_id: &str) -> Option<bool> {
    for root in roots {
        let dir = root.join(run_id);
        if !dir.join("journal").is_dir() {
            continue;
        }
        let Ok(run) = Run::open(&dir) else {
            return Some(false);
        };
        return Some(run_facts(&run).await.is_ok_and(|f| f.sealed));
    }
    None
}

fn stale(last_iteration_at: &str) -> bool {
    chrono::DateTime::parse_from_rfc3339(last_iteration_at)
        .map(|t| chrono::Utc::now().timestamp() - t.timestamp() > STALE_SECS)
        .unwrap_or(true)
}

fn list(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(Result::ok)
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let dry = cli.args.dry_run();
    let dir = state_dir(cli.env, &cli.cwd, cli.args.value("--state-dir"));
    let roots = paths::readable_runs_dirs(&cli.runs_dir(), &cli.cwd);
    let want = cli.args.value("--harness").map(markers::slug);
    let names = list(&dir);

    let mut markers_removed = Vec::new();
    let mut live_sessions = HashSet::new();
    for name in &names {
        let Some((harness, pid)) = markers::parse_marker_name(name) else {
            continue;
        };
        if want.as_ref().is_some_and(|w| *w != harness) {
            continue;
        }
        let path = dir.join(name);
        if pid_alive(i64::from(pid)) {
            if let Ok(id) = std::fs::read_to_string(&path)
                && !id.trim().is_empty()
            {
                live_sessions.insert(id.trim().to_owned());
            }
            continue;
        }
        if dry || std::fs::remove_file(&path).is_ok() {
            markers_removed.push(name.clone());
        }
    }

    let mut deactivated = Vec::new();
    for name in &names {
        let Some(sid) = name.strip_suffix(".md") else {
            continue;
        };
        if live_sessions.contains(sid) {
            continue;
        }
        let path = dir.join(name);
        let Ok(Some(mut file)) = SessionFile::read(&path) else {
            continue;
        };
        if !file.state.active {
            continue;
        }
        let ended = if file.state.run_id.is_empty() {
            None
        } else {
            run_ended(&roots, &file.state.run_id).await
        };
        if ended != Some(true) && !stale(&file.state.last_iteration_at) {
            continue;
        }
        if !dry {
            let st = &mut file.state;
            st.active = false;
            let reason = if ended == Some(true) {
                "terminal_run"
            } else {
                "stale_session"
            };
            st.set_metadata("sessionCleanupReason", reason);
            st.set_metadata("sessionCleanupSource", "session:cleanup");
            st.set_metadata("sessionCleanupAt", babysitter_journal::journal::now_iso());
            st.set_metadata("sessionCleanupStateFile", path.display().to_string());
            if !st.run_id.is_empty() {
                let run_id = st.run_id.clone();
                st.set_metadata("sessionCleanupRunId", run_id);
            }
            if let Err(m) = file.write(&path) {
                errln!(
                    "[session:cleanup] cannot deactivate {}: {m}",
                    path.display()
                );
                continue;
            }
        }
        deactivated.push(sid.to_owned());
    }

    if cli.args.json() {
        output::line(&output::pretty(&json!({
            "markersRemoved": markers_removed, "statesDeactivated": deactivated, "dryRun": dry,
        })));
    } else {
        output::line(&format!(
            "[session:cleanup] dryRun={dry} markersRemoved={} statesDeactivated={}",
            markers_removed.len(),
            deactivated.len()
        ));
        for m in &markers_removed {
            output::line(&format!("  marker: {m}"));
        }
        for s in &deactivated {
            output::line(&format!("  deactivated: {s}"));
        }
    }
    Ok(0)
}
