//! `discover` / `list [--json]`: which agent harnesses are installed here and which one (if any)
//! runs this command, as the reference's `handleHarnessDiscover` reports it —
//! `{installed: [{name, installed, version?, cliPath?, cliCommand, configFound, capabilities,
//! platform}], caller: {name, matchedEnvVars, capabilities} | null}`.
//!
//! The reference asks its `adapters` package first and falls back to probing each harness's CLI
//! on `PATH` (`which`, then `<cli> --version` within 2 s) and its config directory in the
//! project or home; this build has no `adapters` package, so it always does the latter (the
//! reference's own fallback). The harness table is the reference's `KNOWN_HARNESSES` (from its
//! Atlas catalog, 6.0.0), in its order; caller detection takes the first harness one of whose
//! variables is set — except that `AGENT_SESSION_ID`, which every adapter sets, does not count
//! as OpenCode's (the same fix as session binding's, `docs/compatibility.md`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value, json};

use crate::compat::cli::Cli;
use crate::compat::output::{self, Style};
use crate::compat::paths;

/// (name, CLI, caller variables, capabilities, config directories).
type Harness = (
    &'static str,
    &'static str,
    &'static [&'static str],
    &'static [&'static str],
    &'static [&'static str],
);

const HARNESSES: &[Harness] = &[
    (
        "claude-code",
        "claude",
        &["CLAUDE_ENV_FILE"],
        &["session-binding", "stop-hook", "mcp", "headless-prompt"],
        &[".claude"],
    ),
    (
        "codex",
        "codex",
        &["CODEX_THREAD_ID", "CODEX_SESSION_ID", "CODEX_PLUGIN_ROOT"],
        &["session-binding", "stop-hook", "headless-prompt"],
        &[".codex"],
    ),
    (
        "genty",
        "genty",
        &["GENTY_PLUGIN_ROOT"],
        &["session-binding", "headless-prompt"],
        &[],
    ),
    (
        "pi",
        "pi",
        &["PI_SESSION_ID"],
        &[
            "programmatic",
            "session-binding",
            "stop-hook",
            "headless-prompt",
        ],
        &[".pi"],
    ),
    (
        "oh-my-pi",
        "pi",
        &["OMP_SESSION_ID"],
        &["session-binding", "stop-hook", "programmatic"],
        &[".omp"],
    ),
    (
        "gemini-cli",
        "gemini",
        &["GEMINI_SESSION_ID", "GEMINI_CWD", "GEMINI_PROJECT_DIR"],
        &["session-binding", "stop-hook", "headless-prompt"],
        &[".gemini"],
    ),
    (
        "cursor",
        "cursor",
        &["CURSOR_PROJECT_DIR", "CURSOR_VERSION"],
        &["session-binding", "stop-hook", "headless-prompt"],
        &[".cursor"],
    ),
    (
        "hermes",
        "hermes",
        &["HERMES_SESSION", "HERMES_PLUGIN_ROOT"],
        &["headless-prompt"],
        &[".hermes"],
    ),
    (
        "opencode",
        "opencode",
        &["OPENCODE_SESSION_ID"],
        &["session-binding", "stop-hook", "headless-prompt"],
        &[".opencode"],
    ),
    (
        "github-copilot",
        "gh",
        &["COPILOT_SESSION_ID"],
        &["session-binding", "stop-hook", "headless-prompt"],
        &[".github", ".copilot"],
    ),
    (
        "openclaw",
        "openclaw",
        &[],
        &["programmatic", "headless-prompt"],
        &[".openclaw"],
    ),
    (
        "unified",
        "a5c-hooks-adapter",
        &["AGENT_UNIFIED_ADAPTER"],
        &["programmatic", "session-binding", "headless-prompt"],
        &[],
    ),
];

/// How long `<cli> --version` may take.
const VERSION_TIMEOUT: Duration = Duration::from_secs(2);

/// Node's `process.platform`.
fn platform() -> &'static str {
    match std::env::consts::OS {
        "macos" => "darwin",
        "windows" => "win32",
        other => other,
    }
}

/// The first executable `cli` on `PATH` (`which`).
pub(super) fn which(path_var: Option<&str>, cwd: &Path, cli: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt as _;
    path_var?
        .split(':')
        .filter(|d| !d.is_empty())
        .map(|d| paths::resolve(cwd, d).join(cli))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// `v?(\d+\.\d+\.\d+\S*)` in `--version`'s output.
fn version_in(raw: &str) -> Option<String> {
    raw.split_whitespace().find_map(|word| {
        let w = word.strip_prefix('v').unwrap_or(word);
        // The first `d.d.d` inside the word, and the rest of the word after it.
        (0..w.len())
            .filter(|&i| w.is_char_boundary(i))
            .find_map(|i| {
                let rest = &w[i..];
                let mut parts = rest.splitn(3, '.');
                let (a, b, c) = (parts.next()?, parts.next()?, parts.next()?);
                let digits = |s: &str| !s.is_empty() && s.chars().all(|ch| ch.is_ascii_digit());
                let c_digits: String = c.chars().take_while(char::is_ascii_digit).collect();
                (digits(a) && digits(b) && !c_digits.is_empty()).then(|| rest.to_owned())
            })
    })
}

/// `<cli> --version`'s version, within [`VERSION_TIMEOUT`].
pub(super) async fn version_of(cli: &Path, env: &babysitter_common::EnvMap) -> Option<String> {
    let mut cmd = tokio::process::Command::new(cli);
    cmd.arg("--version")
        .env_clear()
        .envs(env.iter())
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(VERSION_TIMEOUT, cmd.output())
        .await
        .ok()?
        .ok()?;
    out.status
        .success()
        .then(|| version_in(&String::from_utf8_lossy(&out.stdout)))
        .flatten()
}

/// One harness's `HarnessDiscoveryResult`.
async fn probe(cli: &Cli<'_>, h: &Harness) -> Value {
    let &(name, command, _, capabilities, configs) = h;
    let found = which(cli.env.get("PATH"), &cli.cwd, command);
    let version = match &found {
        Some(p) => version_of(p, cli.env).await,
        None => None,
    };
    let home = paths::home(cli.env, &cli.cwd);
    let config_found = configs.iter().any(|d| {
        [Some(cli.cwd.clone()), home.clone()]
            .into_iter()
            .flatten()
            .any(|base| base.join(d).try_exists().unwrap_or(false))
    });
    let mut m = Map::new();
    m.insert("name".into(), json!(name));
    m.insert("installed".into(), json!(found.is_some()));
    if let Some(v) = version {
        m.insert("version".into(), json!(v));
    }
    if let Some(p) = &found {
        m.insert("cliPath".into(), json!(p.display().to_string()));
    }
    m.insert("cliCommand".into(), json!(command));
    m.insert("configFound".into(), json!(config_found));
    m.insert("capabilities".into(), json!(capabilities));
    m.insert("platform".into(), json!(platform()));
    Value::Object(m)
}

/// The harness that runs this command, by its variables (`detectCallerHarness`).
fn caller(env: &babysitter_common::EnvMap) -> Value {
    HARNESSES
        .iter()
        .find_map(|&(name, _, vars, capabilities, _)| {
            let matched: Vec<&str> = vars
                .iter()
                .copied()
                .filter(|v| env.get_non_empty(v).is_some())
                .collect();
            (!matched.is_empty()).then(
                || json!({"name": name, "matchedEnvVars": matched, "capabilities": capabilities}),
            )
        })
        .unwrap_or(Value::Null)
}

/// `discover` / `list`.
pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    // Concurrently: each `--version` may take up to its timeout.
    let mut installed = futures::future::join_all(HARNESSES.iter().map(|h| probe(cli, h))).await;
    installed.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let caller = caller(cli.env);
    if cli.args.json() {
        output::line(&output::pretty(
            &json!({"installed": installed, "caller": caller}),
        ));
        return Ok(0);
    }
    let st = Style::for_stdout(cli.env);
    let text = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).unwrap_or("-").to_owned();
    let yes = |v: &Value, k: &str| if v[k] == json!(true) { "yes" } else { "no" };
    let mut out = vec![
        String::new(),
        st.paint("Installed Harnesses", "1"),
        String::new(),
        "  Name            Installed  Version          Config   Capabilities".to_owned(),
        "  ──────────────  ─────────  ───────────────  ───────  ────────────────────────"
            .to_owned(),
    ];
    for r in &installed {
        let caps: Vec<&str> = r["capabilities"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let caps = if caps.is_empty() {
            "-".to_owned()
        } else {
            caps.join(", ")
        };
        out.push(format!(
            "  {:<14}  {:<9}  {:<15}  {:<7}  {caps}",
            text(r, "name"),
            yes(r, "installed"),
            text(r, "version"),
            yes(r, "configFound"),
        ));
    }
    out.push(String::new());
    match caller.get("name").and_then(Value::as_str) {
        Some(name) => {
            let vars: Vec<&str> = caller["matchedEnvVars"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            out.push(format!(
                "{}  {}  (env: {})",
                st.paint("Caller Harness", "1"),
                st.paint(name, "32"),
                vars.join(", ")
            ));
        }
        None => out.push(format!(
            "{}  none detected",
            st.paint("Caller Harness", "1")
        )),
    }
    out.push(String::new());
    output::line(&out.join("\n"));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_found_as_the_reference_finds_them() {
        assert_eq!(
            version_in("claude 2.1.159 (Claude Code)"),
            Some("2.1.159".into())
        );
        assert_eq!(
            version_in("v0.135.0-beta.1\n"),
            Some("0.135.0-beta.1".into())
        );
        assert_eq!(
            version_in("gh version 2.45.0 (2024-03-04)"),
            Some("2.45.0".into())
        );
        assert_eq!(version_in("no version"), None);
    }

    #[test]
    fn caller_is_the_first_harness_with_a_variable_set() {
        let env: babysitter_common::EnvMap = [("OMP_SESSION_ID", "s"), ("AGENT_SESSION_ID", "x")]
            .into_iter()
            .collect();
        assert_eq!(caller(&env)["name"], "oh-my-pi");
        let env: babysitter_common::EnvMap = [("AGENT_SESSION_ID", "x")].into_iter().collect();
        assert_eq!(caller(&env), Value::Null);
    }
}
