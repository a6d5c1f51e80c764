//! Where each harness keeps its sessions under its home directory, and how one is captured
//! there, written into another home and resumed: what lets an agent task lost with its worker
//! continue elsewhere, and a follow-up task continue an earlier one's conversation
//! ([`babysitter_common::agent_session`] says how they are kept).
//!
//! Every attempt runs in a home of its own, so a harness's session store there holds this
//! task's session and nothing else. Per harness (`harnesses.md`; each verified by moving a
//! killed session to another home and project and resuming it):
//!
//! - **Claude Code**: `~/.claude/projects/<project>/<id>.jsonl` (and `<id>/` for subagents and
//!   large tool results), `<project>` being the real path with every character but ASCII
//!   letters and digits made `-`; resumed with `--resume <id>`.
//! - **Codex**: `$CODEX_HOME/sessions/**/rollout-<time>-<id>.jsonl` (the name must keep the id;
//!   nothing else is needed); resumed with `exec … resume <id> <prompt>`.
//! - **Gemini CLI**: `~/.gemini/tmp/<project>/chats/session-<time>-<id8>.jsonl`. Written back
//!   under the SHA-256 of the project path, a layout the CLI migrates to its own name for the
//!   project on start; resumed with `--resume <id>`. A resume in a later minute leaves an empty
//!   stub with the same id beside the transcript, so of files with one id the largest is kept.
//! - **Pi**: sessions go to `--session-dir ~/.pi/babysitter-sessions`; the file's first line
//!   names the working directory the session runs in, so it is rewritten to the new project;
//!   resumed with `--session <file>` (the path form: the id form asks interactively when the
//!   session is from another directory).
//! - **OpenCode**: sessions live in a SQLite database bound to the project directory, so its
//!   own `opencode export <id>` is what is kept, and `opencode import` (run in the new project)
//!   writes it back; resumed with `--session <id>`.
//!
//! A directory named after the project is kept as [`PROJECT_DIR`] and written back under the
//! name the new project gets. [`Saver`] captures while the harness runs: every [`SAVE_EVERY`]
//! it looks at the session files' sizes and modification times, and captures and sends only
//! when they changed; once more when the harness has exited.

use std::collections::BTreeMap;
use std::collections::hash_map::DefaultHasher;
use std::ffi::OsString;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use babysitter_common::agent_session::{PROJECT_DIR, SavedSession, SessionFile};
use bytes::Bytes;
use sha2::Digest as _;
use tokio::sync::mpsc;

use crate::harness::HarnessKind;

/// How often a running harness's session is looked at for changes.
pub const SAVE_EVERY: Duration = Duration::from_secs(1);
/// Pi's session directory (`--session-dir`), relative to the home.
pub const PI_SESSIONS: &str = ".pi/babysitter-sessions";
/// Where OpenCode's exported session is kept, relative to the home.
const OPENCODE_EXPORT: &str = ".babysitter/opencode-session.json";
/// Longest an `opencode export` / `import` may take.
const OPENCODE_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a harness's session files are, relative to its home (`/`-separated, [`PROJECT_DIR`]
/// for a directory named after the project).
fn root(kind: HarnessKind) -> &'static str {
    match kind {
        HarnessKind::ClaudeCode => ".claude/projects/{project}",
        HarnessKind::Codex => ".codex/sessions",
        HarnessKind::GeminiCli => ".gemini/tmp/{project}/chats",
        HarnessKind::Pi => PI_SESSIONS,
        // Watched for changes; what is kept is the export.
        HarnessKind::OpenCode => ".local/share/opencode",
    }
}

/// The harness's name for the directory of a project at `project`, where a session is
/// written back.
fn project_name(kind: HarnessKind, project: &Path) -> String {
    let real = std::fs::canonicalize(project).unwrap_or_else(|_| project.to_path_buf());
    let p = real.to_string_lossy();
    match kind {
        HarnessKind::ClaudeCode => claude_project(&p),
        HarnessKind::GeminiCli => hex::encode(sha2::Sha256::digest(p.as_bytes())),
        _ => p.into_owned(),
    }
}

/// Claude Code's project directory name: non-alphanumerics made `-`; past 200 characters cut
/// there and suffixed with the base-36 of a 32-bit string hash of the path.
fn claude_project(path: &str) -> String {
    let s: String = path
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    if s.chars().count() <= 200 {
        return s;
    }
    let mut h: i32 = 0;
    for unit in path.encode_utf16() {
        h = h
            .wrapping_shl(5)
            .wrapping_sub(h)
            .wrapping_add(i32::from(unit));
    }
    let mut n = h.unsigned_abs();
    let mut digits = Vec::new();
    loop {
        digits.push(char::from_digit(n % 36, 36).unwrap_or('0'));
        n /= 36;
        if n == 0 {
            break;
        }
    }
    let cut: String = s.chars().take(200).collect();
    format!("{cut}-{}", digits.iter().rev().collect::<String>())
}

/// Every file under `dir`, with its path relative to `dir`, sorted.
fn walk(dir: &Path) -> std::io::Result<Vec<(String, PathBuf, std::fs::Metadata)>> {
    let mut out = Vec::new();
    let mut stack = vec![(String::new(), dir.to_path_buf())];
    while let Some((rel, path)) = stack.pop() {
        let entries = match std::fs::read_dir(&path) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            // Not followed: a link could lead out of the home.
            let meta = entry.path().symlink_metadata()?;
            if meta.is_dir() {
                stack.push((rel, entry.path()));
            } else if meta.is_file() {
                out.push((rel, entry.path(), meta));
            }
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// The session files under `home`: (kept path, file, metadata). A [`PROJECT_DIR`] in the root
/// matches whichever directory the harness made (the home is the attempt's own).
fn session_files(
    kind: HarnessKind,
    home: &Path,
) -> std::io::Result<Vec<(String, PathBuf, std::fs::Metadata)>> {
    let pattern = root(kind);
    let (before, after) = match pattern.split_once(PROJECT_DIR) {
        Some((b, a)) => (b.trim_end_matches('/'), Some(a.trim_start_matches('/'))),
        None => (pattern, None),
    };
    let base = home.join(before);
    let mut out = Vec::new();
    match after {
        None => {
            for (rel, path, meta) in walk(&base)? {
                out.push((format!("{before}/{rel}"), path, meta));
            }
        }
        Some(after) => {
            let dirs = match std::fs::read_dir(&base) {
                Ok(d) => d,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(out),
                Err(e) => return Err(e),
            };
            let mut names: Vec<PathBuf> = dirs
                .filter_map(Result::ok)
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect();
            names.sort();
            for dir in names {
                let inner = if after.is_empty() {
                    dir
                } else {
                    dir.join(after)
                };
                for (rel, path, meta) in walk(&inner)? {
                    let kept = [before, PROJECT_DIR, after, &rel]
                        .iter()
                        .filter(|s| !s.is_empty())
                        .copied()
                        .collect::<Vec<_>>()
                        .join("/");
                    out.push((kept, path, meta));
                }
            }
        }
    }
    if kind == HarnessKind::GeminiCli {
        out = gemini_transcripts(out);
    }
    if kind == HarnessKind::OpenCode {
        // The database changes with the session; its logs change all the time.
        out.retain(|(p, _, _)| {
            p.rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with("opencode.db"))
        });
    }
    Ok(out)
}

/// Gemini CLI's transcripts: `session-*` files, the largest of those sharing an id suffix.
fn gemini_transcripts(
    files: Vec<(String, PathBuf, std::fs::Metadata)>,
) -> Vec<(String, PathBuf, std::fs::Metadata)> {
    let mut by_id: BTreeMap<String, (String, PathBuf, std::fs::Metadata)> = BTreeMap::new();
    for f in files {
        let name = f.0.rsplit('/').next().unwrap_or_default().to_owned();
        if !name.starts_with("session-") {
            continue;
        }
        let id = name.rsplit('-').next().unwrap_or_default().to_owned();
        match by_id.get(&id) {
            Some(kept) if kept.2.len() >= f.2.len() => {}
            _ => {
                by_id.insert(id, f);
            }
        }
    }
    by_id.into_values().collect()
}

/// Sizes and modification times of the session files: what changes when the session does.
pub fn signature(kind: HarnessKind, home: &Path) -> std::io::Result<u64> {
    let mut h = DefaultHasher::new();
    for (rel, _, meta) in session_files(kind, home)? {
        (rel, meta.len(), meta.modified().ok()).hash(&mut h);
    }
    Ok(h.finish())
}

/// How to run the harness's own commands on its home (OpenCode's export and import).
#[derive(Debug, Clone)]
pub struct HarnessCommand {
    pub bin: PathBuf,
    /// The harness's whole environment, as it runs.
    pub env: Vec<(OsString, OsString)>,
    pub project: PathBuf,
}

impl HarnessCommand {
    async fn output(&self, args: &[&str]) -> std::io::Result<Vec<u8>> {
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(args)
            .current_dir(&self.project)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let out = tokio::time::timeout(OPENCODE_COMMAND_TIMEOUT, cmd.output())
            .await
            .map_err(|_| std::io::Error::other(format!("{args:?} did not finish in time")))??;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            return Err(std::io::Error::other(format!(
                "{args:?} exited with {}: {last}",
                out.status
            )));
        }
        Ok(out.stdout)
    }
}

/// The session under `home`, as it is kept.
pub async fn capture(
    kind: HarnessKind,
    home: &Path,
    native_session_id: &str,
    command: Option<&HarnessCommand>,
) -> std::io::Result<Vec<SessionFile>> {
    if kind == HarnessKind::OpenCode {
        let Some(cmd) = command else {
            return Ok(Vec::new());
        };
        let json = cmd.output(&["export", native_session_id]).await?;
        if serde_json::from_slice::<serde_json::Value>(&json).is_err() {
            return Err(std::io::Error::other("opencode export printed no JSON"));
        }
        return Ok(vec![SessionFile {
            path: OPENCODE_EXPORT.to_owned(),
            content: Bytes::from(json),
        }]);
    }
    let home = home.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut files = Vec::new();
        for (kept, path, _) in session_files(kind, &home)? {
            match std::fs::read(&path) {
                Ok(c) => files.push(SessionFile {
                    path: kept,
                    content: Bytes::from(c),
                }),
                // Removed since the walk (a temporary file the harness renamed).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
        Ok(files)
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Writes a saved session's files into `home` for the harness to resume in `project`
/// (OpenCode's is then imported: [`import`]).
pub async fn restore(
    kind: HarnessKind,
    home: &Path,
    project: &Path,
    files: &[SessionFile],
) -> std::io::Result<()> {
    let name = project_name(kind, project);
    let project_text = project.to_string_lossy().into_owned();
    for f in files {
        // Validated relative paths of plain components (SavedSession::validate).
        let mut path = home.to_path_buf();
        for c in f.path.split('/') {
            path.push(if c == PROJECT_DIR { name.as_str() } else { c });
        }
        let content = match kind {
            HarnessKind::Pi => pi_moved(&f.content, &project_text),
            _ => f.content.clone(),
        };
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent).await?;
        }
        tokio::fs::write(&path, &content).await?;
    }
    Ok(())
}

/// Brings a restored session into the harness's own store where it keeps one that files
/// cannot carry (OpenCode: `opencode import`, run in the project with the harness's
/// configuration in place); nothing for the others.
pub async fn import(
    kind: HarnessKind,
    home: &Path,
    command: &HarnessCommand,
) -> std::io::Result<()> {
    if kind == HarnessKind::OpenCode {
        let export = home.join(OPENCODE_EXPORT);
        command
            .output(&["import", &export.to_string_lossy()])
            .await?;
    }
    Ok(())
}

/// A Pi transcript whose header (first line) names `project` as the session's directory.
fn pi_moved(content: &Bytes, project: &str) -> Bytes {
    let text = String::from_utf8_lossy(content);
    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
    match serde_json::from_str::<serde_json::Value>(first) {
        Ok(mut header) if header["type"] == "session" => {
            header["cwd"] = serde_json::Value::String(project.to_owned());
            Bytes::from(format!("{header}\n{rest}"))
        }
        _ => content.clone(),
    }
}

/// What the harness is told to resume: the session id, or for Pi the session's file.
pub fn resume_target(kind: HarnessKind, home: &Path, native_session_id: &str) -> String {
    if kind == HarnessKind::Pi {
        let suffix = format!("_{native_session_id}.jsonl");
        let dir = home.join(PI_SESSIONS);
        let found = std::fs::read_dir(&dir).ok().and_then(|d| {
            d.filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| p.to_string_lossy().ends_with(&suffix))
        });
        if let Some(p) = found {
            return p.to_string_lossy().into_owned();
        }
    }
    native_session_id.to_owned()
}

/// Captures a running harness's session whenever it changed and sends it on.
pub struct Saver<'a> {
    pub kind: HarnessKind,
    pub home: &'a Path,
    pub effect_id: &'a str,
    pub attempt: u32,
    pub command: Option<HarnessCommand>,
    pub tx: &'a mpsc::Sender<SavedSession>,
    /// The signature of the last capture sent.
    pub last: Option<u64>,
    /// When the last capture was taken ([`min_gap`] apart while the harness runs).
    pub last_at: Option<tokio::time::Instant>,
}

/// The least time between two captures while a harness runs: OpenCode's is a process of its
/// own (`opencode export`), so it is taken at most every few seconds; the others are file
/// reads. The capture after the harness exited is always taken.
fn min_gap(kind: HarnessKind) -> Duration {
    match kind {
        HarnessKind::OpenCode => Duration::from_secs(5),
        _ => Duration::ZERO,
    }
}

impl Saver<'_> {
    /// Captures and sends the session if it changed since the last time (and the harness has
    /// said which session it is); errors are logged, never fail the task. `last`: the harness
    /// has exited (no gap is kept).
    pub async fn save_if_changed(&mut self, native_session_id: Option<&str>, last: bool) {
        let Some(native) = native_session_id else {
            return;
        };
        if !last
            && self
                .last_at
                .is_some_and(|t| t.elapsed() < min_gap(self.kind))
        {
            return;
        }
        let (kind, home) = (self.kind, self.home.to_path_buf());
        let sig = match tokio::task::spawn_blocking(move || signature(kind, &home)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::warn!(harness = %self.kind, error = %e, "cannot look at the harness's session");
                return;
            }
            Err(e) => {
                tracing::warn!(harness = %self.kind, error = %e, "looking at the harness's session failed");
                return;
            }
        };
        if Some(sig) == self.last {
            return;
        }
        self.last_at = Some(tokio::time::Instant::now());
        let files = match capture(self.kind, self.home, native, self.command.as_ref()).await {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(harness = %self.kind, error = %e, "cannot capture the harness's session");
                return;
            }
        };
        if files.is_empty() {
            return;
        }
        let session = SavedSession {
            harness: self.kind.name().to_owned(),
            native_session_id: native.to_owned(),
            effect_id: self.effect_id.to_owned(),
            attempt: self.attempt,
            saved_at: SystemTime::now(),
            files,
        };
        if let Err(e) = session.validate() {
            tracing::warn!(harness = %self.kind, error = %e, "the harness's session cannot be saved");
            self.last = Some(sig);
            return;
        }
        if self.tx.send(session).await.is_ok() {
            self.last = Some(sig);
        }
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
