//! `session:whoami [--harness <name>] [--state-dir] [--json]` (spec §6.3): which session id this
//! command would act for, and where that id came from — the harness's PID marker, its native
//! environment variable, or `AGENT_SESSION_ID` — following the documented precedence of
//! `adapters-and-hooks.md` §2.2 (marker first; `AGENT_TRUST_ENV_SESSION=1` puts the environment
//! first). A diagnostic for stale-session problems: it changes nothing and always exits 0.

use babysitter_common::EnvMap;
use babysitter_journal::fs::pid_alive;
use serde_json::json;

use super::file::state_dir;
use super::{binding, markers};
use crate::compat::cli::Cli;
use crate::compat::output;

/// What `session:whoami` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Whoami {
    pub session_id: Option<String>,
    pub resolved_from: &'static str,
    pub ancestor_pid: Option<u32>,
    pub ancestor_alive: Option<bool>,
    pub marker_path: Option<String>,
}

/// Resolves the session id for `harness`.
pub fn resolve(env: &EnvMap, state_dir: &std::path::Path, harness: &str) -> Whoami {
    let (ancestor_pid, marker_path, marker) = if markers::enabled_for(env, harness) {
        match markers::harness_ancestor(&markers::process_names(harness)) {
            Some(pid) => {
                let path = markers::marker_path(state_dir, harness, pid);
                let id = std::fs::read_to_string(&path)
                    .ok()
                    .map(|s| s.trim().to_owned())
                    .filter(|s| !s.is_empty() && pid_alive(i64::from(pid)));
                (Some(pid), Some(path.display().to_string()), id)
            }
            None => (None, None, None),
        }
    } else {
        (None, None, None)
    };
    let ancestor_alive = ancestor_pid.map(|p| pid_alive(i64::from(p)));
    let adapter = binding::by_name(&markers::slug(harness));
    let first = |vars: &[&str]| vars.iter().find_map(|k| env.get_non_empty(k));
    let native = adapter.and_then(|a| first(a.native));
    let fallback = adapter.and_then(|a| first(a.fallback));
    let agent = env.get_non_empty("AGENT_SESSION_ID");
    let trust_env = ["AGENT_TRUST_ENV_SESSION", "BABYSITTER_TRUST_ENV_SESSION"]
        .iter()
        .any(|k| env.get(k) == Some("1"));
    let from_env = if trust_env {
        agent.or(native)
    } else {
        native.or(agent)
    }
    .or(fallback);
    let (session_id, resolved_from) = match (&marker, from_env) {
        (Some(m), _) if !trust_env || from_env.is_none() => (Some(m.clone()), "pid-marker"),
        (_, Some(e)) => (Some(e.to_owned()), "env-var"),
        _ => (None, "none"),
    };
    Whoami {
        session_id,
        resolved_from,
        ancestor_pid,
        ancestor_alive,
        marker_path,
    }
}

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let harness = cli.args.value("--harness").unwrap_or("claude-code");
    let dir = state_dir(cli.env, &cli.cwd, cli.args.value("--state-dir"));
    let w = resolve(cli.env, &dir, harness);
    let env_file = (markers::slug(harness) == "claude-code")
        .then(|| cli.env.get("CLAUDE_ENV_FILE").map(str::to_owned))
        .flatten();
    let agent = cli.env.get_non_empty("AGENT_SESSION_ID");
    let matches = match (agent, &w.session_id) {
        (Some(a), Some(s)) => Some(a == s),
        _ => None,
    };
    if cli.args.json() {
        output::line(&output::pretty(&json!({
            "harness": harness,
            "sessionId": w.session_id,
            "resolvedFrom": w.resolved_from,
            "ancestorPid": w.ancestor_pid,
            "ancestorAlive": w.ancestor_alive,
            "markerPath": w.marker_path,
            "envFilePath": env_file,
            "envVarPresent": agent.is_some(),
            "envVarMatches": matches,
        })));
    } else {
        let or = |v: Option<String>, d: &str| v.unwrap_or_else(|| d.to_owned());
        output::line(&format!("harness: {harness}"));
        output::line(&format!("sessionId: {}", or(w.session_id, "(none)")));
        output::line(&format!("resolvedFrom: {}", w.resolved_from));
        output::line(&format!(
            "ancestorPid: {}",
            or(w.ancestor_pid.map(|p| p.to_string()), "(none)")
        ));
        output::line(&format!(
            "ancestorAlive: {}",
            or(w.ancestor_alive.map(|a| a.to_string()), "(unknown)")
        ));
        output::line(&format!("markerPath: {}", or(w.marker_path, "(none)")));
        output::line(&format!("envFilePath: {}", or(env_file, "(none)")));
        output::line(&format!("envVarPresent: {}", agent.is_some()));
        output::line(&format!(
            "envVarMatches: {}",
            or(matches.map(|m| m.to_string()), "(n/a)")
        ));
    }
    Ok(0)
}
