//! From a harness's native hook payload to one [`Event`]: which event it is, the session, and
//! the fields babysitter's hooks read, wherever this harness puts them.
//!
//! The event is the payload's `hook_event_name` (every harness the plugin serves sends it; the
//! OpenCode and Pi modules send it too), else `--phase` (a canonical phase or this harness's
//! native event name). A payload naming an event this harness does not have is another
//! harness's payload: refused, naming the harness it looks like. The payload's event wins over
//! a disagreeing `--phase`, with a note. The session id comes from the payload first, then the
//! harness's own environment variables: never an inherited `AGENT_SESSION_ID` first (quirk H9).

use babysitter_common::EnvMap;
use serde_json::{Map, Value};

use crate::compat::session::binding;
use crate::plugins::harness::{Harness, Phase};

/// One hook invocation, normalised.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub harness: Harness,
    pub phase: Phase,
    /// The native event name, as the harness spells it.
    pub native: String,
    pub session_id: Option<String>,
    pub cwd: Option<String>,
    pub transcript_path: Option<String>,
    /// The agent's last message (Claude Code and Codex `last_assistant_message`, Gemini CLI
    /// `prompt_response`).
    pub last_message: Option<String>,
    pub prompt: Option<String>,
    pub tool_name: Option<String>,
    pub tool_input: Option<Value>,
    pub stop_hook_active: bool,
    /// Things worth saying on stderr that did not stop the hook.
    pub notes: Vec<String>,
    /// The payload as the harness sent it.
    pub raw: String,
}

fn text(m: &Map<String, Value>, k: &str) -> Option<String> {
    m.get(k)
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Where each harness's payload keeps what babysitter reads (its session-id variables are the
/// session binding's, [`binding::Adapter::session_variables`]).
struct Fields {
    session: &'static [&'static str],
    last_message: &'static [&'static str],
}

fn fields(h: Harness) -> Fields {
    match h {
        Harness::ClaudeCode => Fields {
            session: &["session_id"],
            last_message: &["last_assistant_message"],
        },
        Harness::Codex => Fields {
            session: &["session_id"],
            last_message: &["last_assistant_message"],
        },
        Harness::GeminiCli => Fields {
            session: &["session_id"],
            last_message: &["prompt_response"],
        },
        Harness::Cursor => Fields {
            session: &["conversation_id", "session_id"],
            last_message: &[],
        },
        Harness::OpenCode => Fields {
            session: &["session_id"],
            last_message: &["last_assistant_message"],
        },
        Harness::Pi => Fields {
            session: &["session_id"],
            last_message: &["last_assistant_message"],
        },
    }
}

/// Normalises `raw` from harness `h`; `Err` says why the hook should only allow.
pub fn normalise(
    h: Harness,
    phase_arg: Option<&str>,
    raw: &str,
    env: &EnvMap,
) -> Result<Event, String> {
    let mut notes = Vec::new();
    let payload: Map<String, Value> = if raw.trim().is_empty() {
        Map::new()
    } else {
        match serde_json::from_str::<Value>(raw) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err("the payload on stdin is JSON but not an object".into()),
            Err(e) => return Err(format!("the payload on stdin is not JSON ({e})")),
        }
    };
    let from_flag = match phase_arg.map(str::trim).filter(|s| !s.is_empty()) {
        None => None,
        Some(p) => match Phase::parse(p).or_else(|| h.event(p).map(|e| e.phase)) {
            Some(phase) => Some(phase),
            None => {
                let known: Vec<&str> = h.events().iter().map(|e| e.phase.as_str()).collect();
                return Err(format!(
                    "--phase {p:?} is neither a phase nor a {} event (phases: {})",
                    h.label(),
                    known.join(", ")
                ));
            }
        },
    };
    let (phase, native) = match text(&payload, "hook_event_name") {
        Some(name) => match h.event(&name) {
            Some(e) => {
                if let Some(f) = from_flag.filter(|f| *f != e.phase) {
                    notes.push(format!(
                        "--phase says {f} but the payload is a {name} event ({}); following the payload",
                        e.phase
                    ));
                }
                (e.phase, name)
            }
            None => {
                let owners: Vec<&str> = Harness::owners_of(&name).iter().map(|o| o.key()).collect();
                let looks = if owners.is_empty() {
                    String::new()
                } else {
                    format!(" (it looks like a {} payload)", owners.join(" or "))
                };
                return Err(format!(
                    "the payload's hook_event_name {name:?} is not a {} event{looks}",
                    h.label()
                ));
            }
        },
        None => match from_flag {
            Some(phase) => {
                let native = h
                    .events()
                    .iter()
                    .find(|e| e.phase == phase)
                    .map(|e| e.name.to_owned())
                    .unwrap_or_else(|| phase.as_str().to_owned());
                (phase, native)
            }
            None => {
                return Err(
                    "neither the payload's hook_event_name nor --phase says which event this is"
                        .into(),
                );
            }
        },
    };
    let f = fields(h);
    let session_id = f
        .session
        .iter()
        .find_map(|k| text(&payload, k))
        .or_else(|| {
            binding::by_name(h.key())
                .into_iter()
                .flat_map(binding::Adapter::session_variables)
                .find_map(|k| env.get_non_empty(k).map(|v| v.trim().to_owned()))
        });
    let cwd = text(&payload, "cwd").or_else(|| {
        payload
            .get("workspace_roots")
            .and_then(Value::as_array)
            .and_then(|a| a.first())
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    Ok(Event {
        harness: h,
        phase,
        native,
        session_id,
        cwd,
        transcript_path: text(&payload, "transcript_path"),
        last_message: f.last_message.iter().find_map(|k| text(&payload, k)),
        prompt: text(&payload, "prompt"),
        tool_name: text(&payload, "tool_name"),
        tool_input: payload.get("tool_input").cloned(),
        stop_hook_active: payload
            .get("stop_hook_active")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        notes,
        raw: raw.to_owned(),
    })
}
