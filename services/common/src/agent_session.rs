//! A coding-agent harness's session, saved off the worker that runs it: what lets an agent
//! task lost with its worker continue on another one (`claude --resume <id>` and the like)
//! instead of starting over, and a follow-up task continue the session of an earlier one.
//!
//! Why files: every harness keeps its conversation in files under its home directory (a
//! transcript, sometimes an index or a database). The launcher captures the ones that make up
//! the session ([`SavedSession::files`], paths relative to the harness's home, a directory named
//! after the project written [`PROJECT_DIR`]), the orchestrator stores them as one run file
//! (the journal's redaction applies to the text in it), and the launcher that takes the task
//! next writes them into its own home before resuming.
//!
//! Where a session is kept ([`run_file_path`]): a task that names a session (`agent.session`,
//! a name of the process's choosing) shares it with every task of its run naming the same
//! one: the latest save wins, so such tasks should run one after the other. A task naming none
//! keeps its session to itself, for its later attempts.
//!
//! Everything here comes from outside (a worker's request, a stored file): [`SavedSession`]
//! is validated whenever it is built from one, and errors name the field.

use std::time::SystemTime;

use babysitter_proto::orchestrator::v1 as pb;
use base64::Engine as _;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The directory component that stands for the harness's name of the project directory.
pub const PROJECT_DIR: &str = "{project}";
/// The stored document's schema.
pub const SCHEMA_VERSION: &str = "babysitter-rs.agent-session/1";
/// Largest session kept (all files' contents together).
pub const MAX_BYTES: usize = 32 * 1024 * 1024;
/// Most files in one session.
pub const MAX_FILES: usize = 4096;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct SessionError {
    pub field: String,
    pub problem: String,
}

fn invalid(field: impl Into<String>, problem: impl Into<String>) -> SessionError {
    SessionError {
        field: field.into(),
        problem: problem.into(),
    }
}

/// One saved session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedSession {
    /// The adapter name, e.g. `claude-code`.
    pub harness: String,
    /// The harness's own session id.
    pub native_session_id: String,
    /// The task whose attempt saved it, and that attempt.
    pub effect_id: String,
    pub attempt: u32,
    pub saved_at: SystemTime,
    pub files: Vec<SessionFile>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionFile {
    /// Relative to the harness's home, `/`-separated.
    pub path: String,
    pub content: Bytes,
}

impl SavedSession {
    /// Checks what a worker or a stored file may have got wrong.
    pub fn validate(&self) -> Result<(), SessionError> {
        let name_like = |field: &str, v: &str, max: usize| {
            if v.is_empty() || v.len() > max || v.chars().any(char::is_control) {
                Err(invalid(
                    field,
                    format!("must be 1 to {max} printable characters"),
                ))
            } else {
                Ok(())
            }
        };
        name_like("harness", &self.harness, 64)?;
        name_like("native_session_id", &self.native_session_id, 256)?;
        name_like("effect_id", &self.effect_id, 256)?;
        if self.files.len() > MAX_FILES {
            return Err(invalid(
                "files",
                format!("{} files, more than {MAX_FILES}", self.files.len()),
            ));
        }
        let mut total = 0usize;
        for (i, f) in self.files.iter().enumerate() {
            check_path(&f.path).map_err(|p| invalid(format!("files[{i}].path"), p))?;
            total = total.saturating_add(f.content.len());
        }
        if total > MAX_BYTES {
            return Err(invalid(
                "files",
                format!("{total} bytes in all, more than {MAX_BYTES}"),
            ));
        }
        Ok(())
    }

    /// Whether this session was saved by an earlier attempt of `effect_id` (which then
    /// continues where it stopped) rather than by another task (whose follow-up it is).
    pub fn is_of(&self, effect_id: &str) -> bool {
        self.effect_id == effect_id
    }

    /// The stored document (JSON; text files as text, so redaction sees them).
    pub fn to_json(&self) -> Vec<u8> {
        let files = self
            .files
            .iter()
            .map(|f| match std::str::from_utf8(&f.content) {
                Ok(text) => Stored {
                    path: f.path.clone(),
                    text: Some(text.to_owned()),
                    base64: None,
                },
                Err(_) => Stored {
                    path: f.path.clone(),
                    text: None,
                    base64: Some(base64::engine::general_purpose::STANDARD.encode(&f.content)),
                },
            })
            .collect();
        let doc = Doc {
            schema_version: SCHEMA_VERSION.to_owned(),
            harness: self.harness.clone(),
            native_session_id: self.native_session_id.clone(),
            effect_id: self.effect_id.clone(),
            attempt: self.attempt,
            saved_at: humantime::format_rfc3339_millis(self.saved_at).to_string(),
            files,
        };
        serde_json::to_vec(&doc).unwrap_or_default()
    }

    /// Reads a stored document; `what` names it in errors.
    pub fn from_json(bytes: &[u8], what: &str) -> Result<Self, SessionError> {
        let doc: Doc = serde_json::from_slice(bytes).map_err(|e| invalid(what, e.to_string()))?;
        if doc.schema_version != SCHEMA_VERSION {
            return Err(invalid(
                format!("{what}: schemaVersion"),
                format!("`{}`, expected `{SCHEMA_VERSION}`", doc.schema_version),
            ));
        }
        let saved_at = humantime::parse_rfc3339_weak(&doc.saved_at)
            .map_err(|e| invalid(format!("{what}: savedAt"), e.to_string()))?;
        let mut files = Vec::with_capacity(doc.files.len());
        for (i, f) in doc.files.into_iter().enumerate() {
            let content = match (f.text, f.base64) {
                (Some(t), None) => Bytes::from(t),
                (None, Some(b)) => base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map(Bytes::from)
                    .map_err(|e| invalid(format!("{what}: files[{i}].base64"), e.to_string()))?,
                _ => {
                    return Err(invalid(
                        format!("{what}: files[{i}]"),
                        "needs exactly one of `text` and `base64`",
                    ));
                }
            };
            files.push(SessionFile {
                path: f.path,
                content,
            });
        }
        let s = Self {
            harness: doc.harness,
            native_session_id: doc.native_session_id,
            effect_id: doc.effect_id,
            attempt: doc.attempt,
            saved_at,
            files,
        };
        s.validate()?;
        Ok(s)
    }

    /// From a worker's request.
    pub fn from_pb(s: pb::AgentSession) -> Result<Self, SessionError> {
        let saved_at = s
            .saved_at
            .and_then(|t| SystemTime::try_from(t).ok())
            .unwrap_or_else(SystemTime::now);
        let out = Self {
            harness: s.harness,
            native_session_id: s.native_session_id,
            effect_id: s.effect_id,
            attempt: s.attempt,
            saved_at,
            files: s
                .files
                .into_iter()
                .map(|f| SessionFile {
                    path: f.path,
                    content: f.content,
                })
                .collect(),
        };
        out.validate()?;
        Ok(out)
    }

    pub fn into_pb(self) -> pb::AgentSession {
        pb::AgentSession {
            harness: self.harness,
            native_session_id: self.native_session_id,
            effect_id: self.effect_id,
            attempt: self.attempt,
            saved_at: Some(self.saved_at.into()),
            files: self
                .files
                .into_iter()
                .map(|f| pb::SessionFile {
                    path: f.path,
                    content: f.content,
                })
                .collect(),
        }
    }
}

/// A relative path of plain components (no `..`, no `.`, no empty or absolute part).
fn check_path(path: &str) -> Result<(), String> {
    if path.is_empty() || path.len() > 1024 {
        return Err("must be 1 to 1024 characters".into());
    }
    if path.starts_with('/') || path.contains('\\') || path.contains('\0') {
        return Err(format!("`{path}` is not a relative `/`-separated path"));
    }
    if path
        .split('/')
        .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(format!("`{path}` has an empty, `.` or `..` component"));
    }
    Ok(())
}

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Doc {
    schema_version: String,
    harness: String,
    native_session_id: String,
    effect_id: String,
    attempt: u32,
    saved_at: String,
    files: Vec<Stored>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Stored {
    path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    text: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    base64: Option<String>,
}

/// The session a harness task names (`agent.session`), if any: 1 to 64 of `A-Z a-z 0-9 . _ -`.
pub fn session_name(def: &Value) -> Result<Option<&str>, SessionError> {
    match def.pointer("/agent/session") {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s))
            if !s.is_empty()
                && s.len() <= 64
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                && !s.starts_with('.') =>
        {
            Ok(Some(s))
        }
        Some(_) => Err(invalid(
            "agent.session",
            "must be a name of 1 to 64 characters A-Z a-z 0-9 . _ - (not starting with .)",
        )),
    }
}

/// Where a run keeps the session of a task: `state/agent-session.<name>.json` for a named
/// session, else `tasks/<effectId>/agent-session.json`.
pub fn run_file_path(name: Option<&str>, effect_id: &str) -> String {
    match name {
        Some(n) => format!("state/agent-session.{n}.json"),
        None => format!("tasks/{effect_id}/agent-session.json"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> SavedSession {
        SavedSession {
            harness: "claude-code".into(),
            native_session_id: "4acf55e5".into(),
            effect_id: "01EFFECT".into(),
            attempt: 2,
            saved_at: SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_123),
            files: vec![
                SessionFile {
                    path: ".claude/projects/{project}/4acf55e5.jsonl".into(),
                    content: Bytes::from_static(b"{\"type\":\"user\"}\n"),
                },
                SessionFile {
                    path: ".local/share/opencode/opencode.db".into(),
                    content: Bytes::from_static(&[0, 159, 146, 150]),
                },
            ],
        }
    }

    #[test]
    fn a_session_survives_its_stored_form() {
        let s = sample();
        let json = s.to_json();
        let doc: Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(doc["files"][0]["text"], "{\"type\":\"user\"}\n");
        assert_eq!(doc["files"][1]["base64"], "AJ+Slg==");
        assert_eq!(SavedSession::from_json(&json, "f").unwrap(), s);
        assert_eq!(SavedSession::from_pb(s.clone().into_pb()).unwrap(), s);
    }

    #[test]
    fn bad_sessions_are_refused_naming_what_is_wrong() {
        for (path, bad) in [
            ("../etc/passwd", "files[0].path"),
            ("/abs", "files[0].path"),
            ("a//b", "files[0].path"),
            ("a/./b", "files[0].path"),
        ] {
            let mut s = sample();
            s.files[0].path = path.into();
            let e = s.validate().unwrap_err();
            assert_eq!(e.field, bad, "{path}");
        }
        let mut s = sample();
        s.native_session_id.clear();
        assert_eq!(s.validate().unwrap_err().field, "native_session_id");
        let mut s = sample();
        s.files[0].content = Bytes::from(vec![b'x'; MAX_BYTES + 1]);
        assert_eq!(s.validate().unwrap_err().field, "files");
        let e = SavedSession::from_json(br#"{"schemaVersion":"x"}"#, "state/a.json").unwrap_err();
        assert!(e.to_string().contains("state/a.json"), "{e}");
        let mut doc: Value = serde_json::from_slice(&sample().to_json()).unwrap();
        doc["files"][0]["base64"] = json!("AA==");
        let e = SavedSession::from_json(doc.to_string().as_bytes(), "f").unwrap_err();
        assert_eq!(e.field, "f: files[0]");
    }

    #[test]
    fn a_named_session_is_kept_for_the_run_and_an_unnamed_one_for_its_task() {
        let named = json!({"kind": "agent", "agent": {"session": "reviewer"}});
        let name = session_name(&named).unwrap();
        assert_eq!(name, Some("reviewer"));
        assert_eq!(
            run_file_path(name, "E1"),
            "state/agent-session.reviewer.json"
        );
        let plain = json!({"kind": "agent", "agent": {"prompt": "p"}});
        assert_eq!(session_name(&plain).unwrap(), None);
        assert_eq!(run_file_path(None, "E1"), "tasks/E1/agent-session.json");
        for bad in [
            json!("../x"),
            json!(""),
            json!(3),
            json!(".hidden"),
            json!("a/b"),
        ] {
            let def = json!({"agent": {"session": bad}});
            assert_eq!(session_name(&def).unwrap_err().field, "agent.session");
        }
    }
}
