//! Session PID markers (spec `adapters-and-hooks.md` §2.2): `<stateDir>/current-session-<harness
//! slug>-pid-<pid>` holds the session id of the harness process `<pid>`, so a command run by that
//! harness finds its own session even when inherited environment variables name another one.
//! Markers are only consulted when `AGENT_ENABLE_SESSION_PID_MARKERS` (or the deprecated
//! `BABYSITTER_ENABLE_SESSION_PID_MARKERS`) is `1`/`true`, as in the reference.

use std::path::{Path, PathBuf};

use babysitter_common::EnvMap;

/// Whether markers are enabled.
pub fn enabled(env: &EnvMap) -> bool {
    [
        "AGENT_ENABLE_SESSION_PID_MARKERS",
        "BABYSITTER_ENABLE_SESSION_PID_MARKERS",
    ]
    .iter()
    .find_map(|k| env.get_non_empty(k))
    .map(|v| v.trim().to_lowercase())
    .is_some_and(|v| v == "1" || v == "true")
}

/// Whether markers are used for `harness`: as [`enabled`] says, except that Gemini CLI uses them
/// unless they are turned off explicitly. Its shell commands carry no session variable and its
/// hooks no way to export one, so the marker its session-start hook leaves is the only way a
/// `run:create` run by its agent finds the session (the reference derived an id from the
/// directory and a 15-minute window instead, quirk H7).
pub fn enabled_for(env: &EnvMap, harness: &str) -> bool {
    if slug(harness) != "gemini-cli" {
        return enabled(env);
    }
    let off = [
        "AGENT_ENABLE_SESSION_PID_MARKERS",
        "BABYSITTER_ENABLE_SESSION_PID_MARKERS",
    ]
    .iter()
    .find_map(|k| env.get_non_empty(k))
    .map(|v| v.trim().to_lowercase())
    .is_some_and(|v| v == "0" || v == "false");
    !off
}

/// `Claude Code` → `claude-code`: lower case, runs of other characters as one `-`, trimmed.
pub fn slug(harness: &str) -> String {
    let mut out = String::new();
    for c in harness.to_lowercase().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').to_owned()
}

pub fn marker_path(state_dir: &Path, harness: &str, pid: u32) -> PathBuf {
    let s = slug(harness);
    let s = if s.is_empty() { "harness".into() } else { s };
    state_dir.join(format!("current-session-{s}-pid-{pid}"))
}

/// `current-session-<harness>-pid-<pid>` → (harness slug, pid).
pub fn parse_marker_name(name: &str) -> Option<(String, u32)> {
    let rest = name.strip_prefix("current-session-")?;
    let (harness, pid) = rest.rsplit_once("-pid-")?;
    let pid: u32 = pid.parse().ok().filter(|p| *p > 0)?;
    (!harness.is_empty()).then(|| (harness.to_owned(), pid))
}

/// The process names a harness runs as (the reference's `deriveProcessNames`).
pub fn process_names(harness: &str) -> Vec<String> {
    let names: &[&str] = match slug(harness).as_str() {
        "claude-code" => &["claude"],
        "codex" => &["codex"],
        "cursor" => &["cursor"],
        "gemini-cli" | "gemini" => &["gemini", "node"],
        "github-copilot" => &["copilot", "gh"],
        "pi" | "oh-my-pi" => &["pi"],
        _ => return vec![slug(harness)],
    };
    names.iter().map(|s| (*s).to_owned()).collect()
}

/// `(ppid, comm)` of a process, from `/proc` (Linux; `None` elsewhere).
fn parent_of(pid: u32) -> Option<(u32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid …`; comm may contain spaces and parentheses.
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_owned();
    let ppid = stat
        .get(close + 2..)?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((ppid, comm))
}

/// The nearest ancestor of this process whose name is one of `names`.
pub fn harness_ancestor(names: &[String]) -> Option<u32> {
    let mut pid = std::os::unix::process::parent_id();
    for _ in 0..64 {
        if pid <= 1 {
            return None;
        }
        let (ppid, comm) = parent_of(pid)?;
        if names.contains(&comm) {
            return Some(pid);
        }
        pid = ppid;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_slugs() {
        assert_eq!(slug("Claude Code"), "claude-code");
        assert_eq!(slug("--x__y--"), "x-y");
        assert_eq!(
            parse_marker_name("current-session-claude-code-pid-42"),
            Some(("claude-code".into(), 42))
        );
        assert_eq!(parse_marker_name("current-session-x-pid-0"), None);
        assert_eq!(parse_marker_name("s1.md"), None);
        assert_eq!(
            marker_path(Path::new("/s"), "Codex", 7),
            PathBuf::from("/s/current-session-codex-pid-7")
        );
    }
}
