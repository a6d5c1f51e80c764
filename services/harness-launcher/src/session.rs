//! Where each harness keeps its sessions under its home directory, and how one is captured
//! there, written into another home and resumed: what lets an agent task lost with its worker
//! continue elsewhere, and a follow-up task continue an earlier one's conversation
//! ([`babysitter_common::agent_session`] says how they are kept).
//!
//! Why whole directories: each harness keeps a session as a transcript plus whatever its
//! resume needs beside it (an index, a database), and every attempt runs in a home of its own,
//! so the session directories hold this task's session and nothing else. A directory the
//! harness names after the project it ran in is stored as `{project}` and written back under
//! the name the new project directory gets, so the harness finds the session from wherever
//! the next attempt works.
//!
//! [`Saver`] captures while the harness runs: every [`SAVE_EVERY`] it looks at sizes and
//! modification times, and captures and sends only when something changed; once more when
//! the harness has exited. What it sends is the latest state; the worker keeps only the newest
//! unsent one.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use babysitter_common::agent_session::{PROJECT_DIR, SavedSession, SessionFile};
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::harness::HarnessKind;

/// How often a running harness's session is looked at for changes.
pub const SAVE_EVERY: Duration = Duration::from_secs(1);

/// The directories (relative to the home, `/`-separated, [`PROJECT_DIR`] for the harness's
/// name of the project directory) that hold `kind`'s sessions.
fn roots(kind: HarnessKind) -> &'static [&'static str] {
    match kind {
        // `~/.claude/projects/<project>/<session id>.jsonl` (+ `<session id>/` for subagents
        // and large tool results).
        HarnessKind::ClaudeCode => &[".claude/projects/{project}"],
        HarnessKind::Codex => &[".codex/sessions"],
        HarnessKind::GeminiCli => &[".gemini/tmp/{project}"],
        HarnessKind::Pi => &[".pi/agent/sessions/{project}"],
        HarnessKind::OpenCode => &[".local/share/opencode"],
    }
}

/// `kind`'s name for the directory of the project at `project`.
fn project_name(kind: HarnessKind, project: &Path) -> String {
    let p = project.to_string_lossy();
    match kind {
        // Every character but ASCII letters and digits becomes `-`.
        HarnessKind::ClaudeCode => p
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect(),
        HarnessKind::Pi => format!(
            "--{}--",
            p.trim_start_matches('/').replace(['/', '\\', ':'], "-")
        ),
        _ => p.into_owned(),
    }
}

fn root_dir(kind: HarnessKind, home: &Path, project: &Path, root: &str) -> PathBuf {
    let name = project_name(kind, project);
    let mut dir = home.to_path_buf();
    for c in root.split('/') {
        dir.push(if c == PROJECT_DIR { name.as_str() } else { c });
    }
    dir
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

/// Sizes and modification times of `kind`'s session files: what changes when the session does.
pub fn signature(kind: HarnessKind, home: &Path, project: &Path) -> std::io::Result<u64> {
    let mut h = DefaultHasher::new();
    for root in roots(kind) {
        for (rel, _, meta) in walk(&root_dir(kind, home, project, root))? {
            (root, rel, meta.len(), meta.modified().ok()).hash(&mut h);
        }
    }
    Ok(h.finish())
}

/// `kind`'s session files under `home`, paths as they are kept.
pub fn capture(
    kind: HarnessKind,
    home: &Path,
    project: &Path,
) -> std::io::Result<Vec<SessionFile>> {
    let mut files = Vec::new();
    for root in roots(kind) {
        for (rel, path, _) in walk(&root_dir(kind, home, project, root))? {
            let content = match std::fs::read(&path) {
                Ok(c) => c,
                // Removed since the walk (a temporary file the harness renamed).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            files.push(SessionFile {
                path: format!("{root}/{rel}"),
                content: Bytes::from(content),
            });
        }
    }
    Ok(files)
}

/// Writes a saved session's files into `home` for a harness working in `project`.
pub fn restore(
    kind: HarnessKind,
    home: &Path,
    project: &Path,
    files: &[SessionFile],
) -> std::io::Result<()> {
    let name = project_name(kind, project);
    for f in files {
        // Validated relative paths of plain components (SavedSession::validate).
        let mut path = home.to_path_buf();
        for c in f.path.split('/') {
            path.push(if c == PROJECT_DIR { name.as_str() } else { c });
        }
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, &f.content)?;
    }
    Ok(())
}

/// Captures a running harness's session whenever it changed and sends it on.
pub struct Saver<'a> {
    pub kind: HarnessKind,
    pub harness: &'a str,
    pub home: &'a Path,
    pub project: &'a Path,
    pub effect_id: &'a str,
    pub attempt: u32,
    pub tx: &'a mpsc::Sender<SavedSession>,
    /// The signature of the last capture sent.
    pub last: Option<u64>,
}

impl Saver<'_> {
    /// Captures and sends the session if it changed since the last time (and the harness has
    /// said which session it is); errors are logged, never fail the task.
    pub async fn save_if_changed(&mut self, native_session_id: Option<&str>) {
        let Some(native) = native_session_id else {
            return;
        };
        let (kind, home, project) = (
            self.kind,
            self.home.to_path_buf(),
            self.project.to_path_buf(),
        );
        let last = self.last;
        let captured = tokio::task::spawn_blocking(move || -> std::io::Result<_> {
            let sig = signature(kind, &home, &project)?;
            if Some(sig) == last {
                return Ok(None);
            }
            Ok(Some((sig, capture(kind, &home, &project)?)))
        })
        .await;
        let (sig, files) = match captured {
            Ok(Ok(Some(c))) => c,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::warn!(harness = %self.kind, error = %e, "cannot capture the harness's session");
                return;
            }
            Err(e) => {
                tracing::warn!(harness = %self.kind, error = %e, "capturing the harness's session failed");
                return;
            }
        };
        if files.is_empty() {
            return;
        }
        let session = SavedSession {
            harness: self.harness.to_owned(),
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
mod tests {
    use super::*;

    #[test]
    fn a_session_moves_to_another_home_and_project() {
        let a = tempfile::tempdir().unwrap();
        let home = a.path().join("home");
        let project = a.path().join("w-1/project");
        let dir = root_dir(
            HarnessKind::ClaudeCode,
            &home,
            &project,
            roots(HarnessKind::ClaudeCode)[0],
        );
        assert!(dir.ends_with(project_name(HarnessKind::ClaudeCode, &project)));
        std::fs::create_dir_all(dir.join("s1/subagents")).unwrap();
        std::fs::write(dir.join("s1.jsonl"), "{\"a\":1}\n").unwrap();
        std::fs::write(dir.join("s1/subagents/x.jsonl"), "{}\n").unwrap();
        let before = signature(HarnessKind::ClaudeCode, &home, &project).unwrap();
        let files = capture(HarnessKind::ClaudeCode, &home, &project).unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                ".claude/projects/{project}/s1.jsonl",
                ".claude/projects/{project}/s1/subagents/x.jsonl"
            ]
        );

        let b = tempfile::tempdir().unwrap();
        let (home2, project2) = (b.path().join("h"), b.path().join("elsewhere/p"));
        restore(HarnessKind::ClaudeCode, &home2, &project2, &files).unwrap();
        let moved = root_dir(
            HarnessKind::ClaudeCode,
            &home2,
            &project2,
            roots(HarnessKind::ClaudeCode)[0],
        );
        assert_eq!(
            std::fs::read_to_string(moved.join("s1.jsonl")).unwrap(),
            "{\"a\":1}\n"
        );
        assert_eq!(
            capture(HarnessKind::ClaudeCode, &home2, &project2).unwrap(),
            files
        );

        std::fs::write(dir.join("s1.jsonl"), "{\"a\":1}\n{\"b\":2}\n").unwrap();
        assert_ne!(
            signature(HarnessKind::ClaudeCode, &home, &project).unwrap(),
            before
        );
    }

    #[test]
    fn claude_names_a_project_directory_by_its_path() {
        assert_eq!(
            project_name(HarnessKind::ClaudeCode, Path::new("/tmp/w_1/my.project")),
            "-tmp-w-1-my-project"
        );
    }
}
