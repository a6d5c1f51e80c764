//! What one harness session is asked to do, read from a task definition (`task.json`) of any
//! kind a harness executes ([`babysitter_common::kinds::HARNESS_KINDS`]):
//!
//! - `agent`: `agent.prompt` (a string, or an object babysitter's library uses for role, task,
//!   context and instructions, given to the model as JSON);
//! - `skill`: the harness is told to use the skill `skill.name` (its own skill system finds
//!   it: `.claude/skills/<name>`, Codex and Gemini skills, …), with `skill.prompt` and
//!   `skill.context` as what to do with it;
//! - `orchestrator_task`: work babysitter gives its orchestrating agent: the task's title and
//!   description, `agent.prompt` when the process wrote one, and the payload
//!   (`orchestratorTask.payload`, or `metadata.payload` from `ctx.orchestratorTask`).
//!
//! Harness, provider, model, turn limit, timeout and a named session (`agent.session`, see
//! [`babysitter_common::agent_session`]) come from `execution` and `agent` for every kind; the answer's JSON Schema from the kind's own block, else the top-level
//! `outputSchema`. A definition that says nothing to do is an error naming the field.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use crate::workspace::Workspace;

/// The parts of `task.json` a harness session needs.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentSpec {
    pub harness: Option<String>,
    pub prompt: String,
    pub provider: Option<String>,
    pub model: Option<String>,
    pub output_schema: Option<Value>,
    pub max_turns: Option<u64>,
    pub timeout: Option<Duration>,
    /// The project the agent works in.
    pub workspace: Workspace,
    /// `agent.session`: the named session of its run this task continues (and saves).
    pub session: Option<String>,
}

/// A prompt part as text: a non-blank string as it is, an object or array as pretty JSON.
fn text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) if !s.trim().is_empty() => Some(s.clone()),
        Value::Object(m) if !m.is_empty() => serde_json::to_string_pretty(v).ok(),
        Value::Array(a) if !a.is_empty() => serde_json::to_string_pretty(v).ok(),
        _ => None,
    }
}

fn schema(v: &Value) -> Option<Value> {
    Some(v.clone()).filter(Value::is_object)
}

/// `agent.prompt`, which must be there and say something.
fn agent_prompt(def: &Value) -> Result<String, String> {
    match &def["agent"]["prompt"] {
        Value::Null => Err("agent.prompt is missing".into()),
        Value::String(_) | Value::Object(_) | Value::Array(_) => {
            text(&def["agent"]["prompt"]).ok_or_else(|| "agent.prompt is empty".into())
        }
        other => Err(format!(
            "agent.prompt must be a string or an object, not {other}"
        )),
    }
}

fn skill_prompt(def: &Value) -> Result<String, String> {
    let skill = &def["skill"];
    let name = match &skill["name"] {
        Value::String(n) if !n.trim().is_empty() => n.trim(),
        Value::Null => return Err("skill.name is missing".into()),
        _ => return Err("skill.name must be a non-empty string".into()),
    };
    let mut parts = vec![format!("Use the `{name}` skill for this task.")];
    parts.extend(text(&def["title"]));
    parts.extend(text(&def["description"]));
    parts.extend(text(&skill["prompt"]).or_else(|| text(&def["agent"]["prompt"])));
    if let Some(c) = text(&skill["context"]) {
        parts.push(format!("Context:\n{c}"));
    }
    Ok(parts.join("\n\n"))
}

fn orchestrator_prompt(def: &Value) -> Result<String, String> {
    let mut parts: Vec<String> = Vec::new();
    parts.extend(text(&def["title"]));
    parts.extend(text(&def["description"]));
    parts.extend(text(&def["agent"]["prompt"]));
    let payload = [
        &def["orchestratorTask"]["payload"],
        &def["metadata"]["payload"],
    ]
    .into_iter()
    .find_map(|p| match p {
        Value::Null => None,
        Value::String(s) if s.trim().is_empty() => None,
        v => Some(serde_json::to_string_pretty(v).unwrap_or_default()),
    });
    if let Some(p) = payload {
        parts.push(format!("Payload:\n{p}"));
    }
    if parts.is_empty() {
        return Err(
            "orchestrator_task has nothing saying what to do (no orchestratorTask.payload, metadata.payload, agent.prompt, title or description)"
                .into(),
        );
    }
    Ok(parts.join("\n\n"))
}

impl AgentSpec {
    /// The session a task of `kind` asks for; `default_workspace` is where a task that names
    /// no workspace works (`None`: a fresh directory of its own).
    pub fn from_task(
        kind: &str,
        def: &Value,
        default_workspace: Option<&PathBuf>,
    ) -> Result<Self, String> {
        let agent = &def["agent"];
        let exec = &def["execution"];
        let s = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
        let (prompt, own_schema) = match kind {
            "agent" => (agent_prompt(def)?, schema(&agent["outputSchema"])),
            "skill" => (skill_prompt(def)?, schema(&def["skill"]["outputSchema"])),
            "orchestrator_task" => (orchestrator_prompt(def)?, schema(&agent["outputSchema"])),
            other => return Err(format!("tasks of kind `{other}` do not run on a harness")),
        };
        let workspace = match (Workspace::from_task(def)?, default_workspace) {
            (Workspace::Fresh, Some(dir)) => Workspace::InPlace(dir.clone()),
            (w, _) => w,
        };
        let session = babysitter_common::agent_session::session_name(def)
            .map_err(|e| e.to_string())?
            .map(str::to_owned);
        Ok(Self {
            session,
            harness: s(&exec["harness"]).or_else(|| s(&agent["harness"])),
            prompt,
            provider: s(&agent["provider"]).or_else(|| s(&exec["provider"])),
            model: s(&agent["model"]).or_else(|| s(&exec["model"])),
            output_schema: own_schema.or_else(|| schema(&def["outputSchema"])),
            max_turns: agent["maxTurns"].as_u64(),
            timeout: agent["timeoutMs"].as_u64().map(Duration::from_millis),
            workspace,
        })
    }

    /// The prompt the harness gets: the task's, plus the answer format when a schema is set.
    pub fn full_prompt(&self) -> String {
        match &self.output_schema {
            None => self.prompt.clone(),
            Some(s) => format!(
                "{}\n\nWhen you are done, reply with only a JSON value (no other text) that matches this JSON Schema:\n{}",
                self.prompt, s
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_skill_task_names_its_skill_with_its_prompt_context_and_schema() {
        let def = json!({"kind": "skill", "title": "Implement multi-query RAG",
            "skill": {"name": "retrieval-strategies",
                      "prompt": {"role": "RAG Developer", "task": "implement it"},
                      "context": {"patternName": "fusion"},
                      "outputSchema": {"type": "object", "required": ["implementation"]}},
            "execution": {"harness": "codex"}});
        let s = AgentSpec::from_task("skill", &def, None).unwrap();
        assert!(
            s.prompt
                .starts_with("Use the `retrieval-strategies` skill for this task.")
        );
        assert!(s.prompt.contains("Implement multi-query RAG"));
        assert!(s.prompt.contains("\"role\": \"RAG Developer\""));
        assert!(
            s.prompt
                .contains("Context:\n{\n  \"patternName\": \"fusion\"")
        );
        assert_eq!(
            s.output_schema.unwrap()["required"],
            json!(["implementation"])
        );
        assert_eq!(s.harness.as_deref(), Some("codex"));
        assert_eq!(s.workspace, Workspace::Fresh);
    }

    #[test]
    fn an_orchestrator_task_is_its_title_description_and_payload() {
        // The library's builder form and ctx.orchestratorTask's (payload in metadata).
        let built = json!({"kind": "orchestrator_task", "title": "Milestone preflight check",
            "description": "Verify audit exists",
            "orchestratorTask": {"payload": {"skill": "verification-suite", "operation": "preflight"}}});
        let s = AgentSpec::from_task("orchestrator_task", &built, None).unwrap();
        assert_eq!(
            s.prompt,
            "Milestone preflight check\n\nVerify audit exists\n\nPayload:\n{\n  \"skill\": \"verification-suite\",\n  \"operation\": \"preflight\"\n}"
        );
        let intrinsic = json!({"kind": "orchestrator_task", "title": "orchestrator-task",
            "metadata": {"payload": "tag the release", "orchestratorTask": true}});
        let s = AgentSpec::from_task("orchestrator_task", &intrinsic, None).unwrap();
        assert!(
            s.prompt.ends_with("Payload:\n\"tag the release\""),
            "{}",
            s.prompt
        );
    }

    #[test]
    fn a_task_that_says_nothing_to_do_is_an_error_naming_the_field() {
        let cases = [
            ("agent", json!({"agent": {}}), "agent.prompt is missing"),
            (
                "agent",
                json!({"agent": {"prompt": "  "}}),
                "agent.prompt is empty",
            ),
            (
                "agent",
                json!({"agent": {"prompt": 7}}),
                "agent.prompt must be",
            ),
            (
                "skill",
                json!({"skill": {"prompt": "x"}}),
                "skill.name is missing",
            ),
            (
                "skill",
                json!({"skill": {"name": ""}}),
                "skill.name must be",
            ),
            (
                "orchestrator_task",
                json!({"metadata": {}}),
                "orchestrator_task has nothing",
            ),
            (
                "shell",
                json!({"shell": {"command": "true"}}),
                "kind `shell` do not run",
            ),
        ];
        for (kind, def, want) in cases {
            let e = AgentSpec::from_task(kind, &def, None).unwrap_err();
            assert!(e.contains(want), "{kind} {def}: {e}");
        }
    }

    #[test]
    fn a_task_without_a_workspace_works_in_the_default_one_when_given() {
        let def = json!({"agent": {"prompt": "p"}});
        let here = PathBuf::from("/work/project");
        let s = AgentSpec::from_task("agent", &def, Some(&here)).unwrap();
        assert_eq!(s.workspace, Workspace::InPlace(here.clone()));
        let own = json!({"agent": {"prompt": "p"}, "execution": {"cwd": "/elsewhere"}});
        let s = AgentSpec::from_task("agent", &own, Some(&here)).unwrap();
        assert_eq!(s.workspace, Workspace::InPlace(PathBuf::from("/elsewhere")));
    }
}
