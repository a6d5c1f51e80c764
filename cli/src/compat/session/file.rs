//! The session state file `<stateDir>/<sessionId>.md` (spec `babysitter-core.md` §6.2): a
//! line-based pseudo-YAML front matter followed by a blank line and the prompt, written
//! byte-compatible with the reference (F10): timestamps without milliseconds, a trailing space
//! after `run_ids:` / `iteration_times:` when empty, `run_dir` only when set, `metadata_<key>`
//! values escaped for `\` and `"`. Writes are atomic (temp file + rename).

use std::path::{Path, PathBuf};

use babysitter_common::EnvMap;
use serde_json::{Map, Value, json};

use crate::compat::{output, paths};

/// `max_iterations` when none is given.
pub const DEFAULT_MAX_ITERATIONS: u64 = 65_000;

/// The front matter of a session file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionState {
    pub active: bool,
    pub iteration: u64,
    pub max_iterations: u64,
    pub run_id: String,
    pub run_dir: Option<String>,
    pub run_ids: Vec<String>,
    pub started_at: String,
    pub last_iteration_at: String,
    pub iteration_times: Vec<u64>,
    /// `metadata_<key>` entries in file order.
    pub metadata: Vec<(String, String)>,
}

/// A session file: state and prompt.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SessionFile {
    pub state: SessionState,
    pub prompt: String,
}

/// Now as the session file writes it: ISO-8601 UTC without milliseconds (F10).
pub fn now_ts() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `iterationTimes` with the seconds since `last` appended when positive, the last 10 kept.
pub fn update_iteration_times(times: &[u64], last: &str, now: &str) -> Vec<u64> {
    let (Ok(last), Ok(now)) = (
        chrono::DateTime::parse_from_rfc3339(last),
        chrono::DateTime::parse_from_rfc3339(now),
    ) else {
        return times.to_vec();
    };
    let secs = now.timestamp() - last.timestamp();
    if secs <= 0 {
        return times.to_vec();
    }
    let mut out = times.to_vec();
    out.push(secs.unsigned_abs());
    let excess = out.len().saturating_sub(10);
    out.drain(..excess);
    out
}

/// `<stateDir>` from `--state-dir`, `BABYSITTER_STATE_DIR`, else `~/.a5c/state`.
pub fn state_dir(env: &EnvMap, cwd: &Path, flag: Option<&str>) -> PathBuf {
    let explicit = flag
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .or_else(|| env.get_non_empty("BABYSITTER_STATE_DIR").map(str::trim));
    match explicit {
        Some(dir) => paths::resolve(cwd, dir),
        None => paths::global_state_root(env, cwd).join("state"),
    }
}

pub fn session_file_path(state_dir: &Path, session_id: &str) -> PathBuf {
    state_dir.join(format!("{session_id}.md"))
}

impl SessionState {
    /// A fresh active session at iteration 1.
    pub fn new(max_iterations: u64, run_id: &str) -> Self {
        let now = now_ts();
        SessionState {
            active: true,
            iteration: 1,
            max_iterations,
            run_id: run_id.to_owned(),
            run_dir: None,
            run_ids: Vec::new(),
            started_at: now.clone(),
            last_iteration_at: now,
            iteration_times: Vec::new(),
            metadata: Vec::new(),
        }
    }

    /// One metadata entry's value.
    pub fn metadata_value(&self, key: &str) -> Option<&str> {
        self.metadata
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Removes one metadata entry.
    pub fn remove_metadata(&mut self, key: &str) {
        self.metadata.retain(|(k, _)| k != key);
    }

    /// Sets (or replaces) one metadata entry.
    pub fn set_metadata(&mut self, key: &str, value: impl Into<String>) {
        let value = value.into();
        match self.metadata.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.metadata.push((key.to_owned(), value)),
        }
    }

    /// The front matter lines, without the `---` fences.
    pub fn serialize(&self) -> String {
        let mut lines = vec![
            format!("active: {}", self.active),
            format!("iteration: {}", self.iteration),
            format!("max_iterations: {}", self.max_iterations),
            format!("run_id: \"{}\"", self.run_id),
        ];
        if let Some(d) = self.run_dir.as_deref().filter(|d| !d.is_empty()) {
            lines.push(format!("run_dir: \"{d}\""));
        }
        lines.push(format!("run_ids: {}", self.run_ids.join(",")));
        lines.push(format!("started_at: \"{}\"", self.started_at));
        lines.push(format!("last_iteration_at: \"{}\"", self.last_iteration_at));
        let times: Vec<String> = self.iteration_times.iter().map(u64::to_string).collect();
        lines.push(format!("iteration_times: {}", times.join(",")));
        for (k, v) in &self.metadata {
            let escaped = v.replace('\\', "\\\\").replace('"', "\\\"");
            lines.push(format!("metadata_{k}: \"{escaped}\""));
        }
        lines.join("\n")
    }

    /// The camelCase JSON of `session:state` (`runDir`, `metadata` only when set).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("active".into(), json!(self.active));
        m.insert("iteration".into(), json!(self.iteration));
        m.insert("maxIterations".into(), json!(self.max_iterations));
        m.insert("runId".into(), json!(self.run_id));
        if let Some(d) = self.run_dir.as_deref().filter(|d| !d.is_empty()) {
            m.insert("runDir".into(), json!(d));
        }
        m.insert("runIds".into(), json!(self.run_ids));
        m.insert("startedAt".into(), json!(self.started_at));
        m.insert("lastIterationAt".into(), json!(self.last_iteration_at));
        m.insert("iterationTimes".into(), json!(self.iteration_times));
        if !self.metadata.is_empty() {
            let md: Map<String, Value> = self
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), json!(v)))
                .collect();
            m.insert("metadata".into(), Value::Object(md));
        }
        Value::Object(m)
    }
}

impl SessionFile {
    /// The whole file: fenced front matter, a blank line, the prompt and a final newline.
    pub fn render(&self) -> String {
        format!("---\n{}\n---\n\n{}\n", self.state.serialize(), self.prompt)
    }

    /// Parses a session file the reference's way: lines trimmed, the first `---` opens the
    /// front matter and the next closes it, `key: value` with surrounding quotes stripped; the
    /// body after it, trimmed, is the prompt. Metadata values are unescaped (the reference reads
    /// them raw, so its escapes would pile up on every rewrite).
    pub fn parse(text: &str) -> Result<SessionFile, String> {
        let lines: Vec<&str> = text.split('\n').collect();
        let mut st = SessionState {
            iteration: 1,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            ..SessionState::default()
        };
        let mut opened = false;
        let mut end = None;
        for (i, line) in lines.iter().enumerate() {
            let line = line.trim();
            if line == "---" {
                if opened {
                    end = Some(i);
                    break;
                }
                opened = true;
                continue;
            }
            if !opened || line.is_empty() {
                continue;
            }
            let Some((key, raw)) = line.split_once(':').filter(|(k, _)| !k.is_empty()) else {
                continue;
            };
            let key = key.trim();
            let raw = raw.trim();
            let quoted = raw.len() >= 2
                && ((raw.starts_with('"') && raw.ends_with('"'))
                    || (raw.starts_with('\'') && raw.ends_with('\'')));
            let value = if quoted { &raw[1..raw.len() - 1] } else { raw };
            match key {
                "active" => st.active = value.eq_ignore_ascii_case("true"),
                "iteration" => st.iteration = leading_int(value).unwrap_or(1),
                "max_iterations" => {
                    st.max_iterations = leading_int(value).unwrap_or(DEFAULT_MAX_ITERATIONS)
                }
                "run_id" if value != "undefined" => st.run_id = value.to_owned(),
                "run_dir" => st.run_dir = Some(value.trim().to_owned()).filter(|v| !v.is_empty()),
                "run_ids" => {
                    st.run_ids = value
                        .split(',')
                        .map(str::trim)
                        .filter(|s| !s.is_empty())
                        .map(str::to_owned)
                        .collect()
                }
                "started_at" => st.started_at = value.to_owned(),
                "last_iteration_at" => st.last_iteration_at = value.to_owned(),
                "iteration_times" => {
                    st.iteration_times = value
                        .split(',')
                        .filter_map(|s| leading_int(s.trim()))
                        .filter(|n| *n > 0)
                        .collect()
                }
                k => {
                    if let Some(mk) = k.strip_prefix("metadata_") {
                        st.set_metadata(mk, unescape(value));
                    }
                }
            }
        }
        let prompt = match end {
            Some(i) => lines[i + 1..].join("\n").trim().to_owned(),
            None => text.to_owned(),
        };
        Ok(SessionFile { state: st, prompt })
    }

    /// Reads and parses `path`; `Ok(None)` when it does not exist.
    pub fn read(path: &Path) -> Result<Option<SessionFile>, String> {
        match std::fs::read_to_string(path) {
            Ok(t) => SessionFile::parse(&t).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(output::io_message("open", path, &e)),
        }
    }

    /// Writes atomically (temp file in the same directory, then rename).
    pub fn write(&self, path: &Path) -> Result<(), String> {
        write_file_atomic(path, &self.render())
            .map_err(|e| format!("Failed to write session state file: {e}"))
    }
}

/// Writes `text` to `path` through a temp file in the same directory renamed over it (a reader
/// sees the old content or the new, never part of it).
pub fn write_file_atomic(path: &Path, text: &str) -> Result<(), String> {
    let dir = path.parent().unwrap_or_else(|| Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| output::io_message("mkdir", dir, &e))?;
    let tmp = PathBuf::from(format!("{}.tmp.{}", path.display(), std::process::id()));
    if let Err(e) = std::fs::write(&tmp, text) {
        let _ = std::fs::remove_file(&tmp);
        return Err(output::io_message("open", &tmp, &e));
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        output::io_message("rename", path, &e)
    })
}

/// Undoes the writer's `\\` / `\"` escapes, left to right.
fn unescape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some(n @ ('\\' | '"')) => out.push(n),
                Some(n) => {
                    out.push(c);
                    out.push(n);
                }
                None => out.push(c),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `parseInt(value, 10)` for non-negative values: the leading digits.
pub(super) fn leading_int(value: &str) -> Option<u64> {
    let digits: String = value
        .trim_start()
        .trim_start_matches('+')
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// Appends `export NAME="value"` to a harness's env file (Claude Code's `CLAUDE_ENV_FILE`, which
/// it sources before each tool command), unless its last export of `NAME` already says so. A
/// value the double quotes would not hold literally is refused.
pub fn export_to_env_file(env_file: &str, name: &str, value: &str) -> std::io::Result<()> {
    if value
        .chars()
        .any(|c| matches!(c, '$' | '`' | '\\' | '"') || c.is_control())
    {
        return Err(std::io::Error::other(format!(
            "{name} value {value:?} would need shell quoting"
        )));
    }
    let line = format!("export {name}=\"{value}\"");
    let current = match std::fs::read_to_string(env_file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    let prefix = format!("export {name}=");
    let last = current
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with(&prefix));
    if last.map(str::trim) == Some(line.as_str()) {
        return Ok(());
    }
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(env_file)?;
    let sep = if current.is_empty() || current.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    std::io::Write::write_all(&mut f, format!("{sep}{line}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_reference_layout_with_trailing_spaces() {
        let mut st = SessionState {
            active: true,
            iteration: 2,
            max_iterations: 65000,
            run_id: "01JSESSRUN0000000000000000".into(),
            run_dir: Some("/r/01JSESSRUN0000000000000000".into()),
            run_ids: vec![],
            started_at: "2026-11-30T07:03:58Z".into(),
            last_iteration_at: "2026-11-30T07:04:00Z".into(),
            iteration_times: vec![],
            metadata: vec![],
        };
        st.set_metadata("hookExitReason", "completion_proof_matched");
        let f = SessionFile {
            state: st,
            prompt: "do the thing".into(),
        };
        let text = f.render();
        assert_eq!(
            text,
            "---\nactive: true\niteration: 2\nmax_iterations: 65000\nrun_id: \"01JSESSRUN0000000000000000\"\nrun_dir: \"/r/01JSESSRUN0000000000000000\"\nrun_ids: \nstarted_at: \"2026-11-30T07:03:58Z\"\nlast_iteration_at: \"2026-11-30T07:04:00Z\"\niteration_times: \nmetadata_hookExitReason: \"completion_proof_matched\"\n---\n\ndo the thing\n"
        );
        assert_eq!(SessionFile::parse(&text).unwrap(), f);
    }

    #[test]
    fn metadata_escapes_round_trip() {
        let mut st = SessionState::new(3, "");
        st.set_metadata("note", "a \"b\" \\c");
        let f = SessionFile {
            state: st,
            prompt: "multi\nline".into(),
        };
        assert_eq!(SessionFile::parse(&f.render()).unwrap(), f);
    }

    #[test]
    fn timestamps_have_no_milliseconds() {
        let t = now_ts();
        assert_eq!(t.len(), 20, "{t}");
        assert!(t.ends_with('Z'));
    }
}
