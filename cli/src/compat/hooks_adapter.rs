//! `hooks:invoke --harness <h> --phase <p>`: the one entry every hook shim of the plugin calls
//! (spec `adapters-and-hooks.md` §1, the reference's `adapters-hooks invoke` with babysitter as
//! its only handler). One invocation:
//!
//! 1. reads the harness's native payload from stdin (at most 8 MiB, a JSON object);
//! 2. normalises it ([`normalise`]): the native event from the payload's `hook_event_name`
//!    first (quirk H1 fixed), else `--phase`; the session id from the payload first, then the
//!    harness's own variables (H9); the agent's last message wherever this harness puts it;
//! 3. runs babysitter's own hook for the phase (`hook:run`'s handlers: the stop hook that drives
//!    the loop, session start, prompt and tool hooks) on a babysitter-shaped payload, within a
//!    time limit;
//! 4. runs each `--handler` command too (the `a5c.hooks.v1` event on its stdin and in
//!    `HOOKS_PROXY_EVENT`, its stdout a `UnifiedHookResult`) and merges the answers by the
//!    spec's rules ([`unified`]: the most restrictive decision wins, texts join);
//! 5. renders the merged answer in the harness's native format ([`render`]): Claude Code, Codex and
//!    Gemini CLI `{"decision":"block","reason",…}` (never dropped, H2/H5), Claude Code's
//!    `hookSpecificOutput` for tool rewrites (H3), Cursor's `followup_message`, and the unified
//!    shape the OpenCode and Pi modules read.
//!
//! The plugin is dormant until its session is bound to a run (`run:create` in the session):
//! before that every hook answers "allow" and writes nothing but the session-start state; while
//! the bound run is unfinished the loop phases keep the agent on it.
//!
//! It fails open, loudly: an unknown harness, a payload of another harness's shape, a payload
//! that is not JSON, a handler error or a handler past its time limit each print one line on
//! stderr saying what was wrong and answer the harness's "allow" (`{}`), exit 0. A session is
//! never blocked without a reason.

use std::io::Read as _;
use std::time::Duration;

use babysitter_common::EnvMap;
use serde_json::{Map, Value, json};

use crate::compat::cli::Cli;
use crate::compat::hook::{self, protocol};
use crate::compat::output;
use crate::plugins::harness::{Harness, Phase};

mod normalise;
mod render;
mod unified;

pub use normalise::Event;

/// Payloads larger than this are refused (Claude Code's biggest, `PostToolUse` with a tool's
/// output, stay well under it).
const MAX_PAYLOAD: u64 = 8 * 1024 * 1024;

pub async fn invoke(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let harness_arg = cli.args.value("--harness").unwrap_or("");
    let Some(h) = Harness::parse(harness_arg) else {
        drain_stdin();
        errln!(
            "hooks:invoke: unknown harness {harness_arg:?} (known: {}); allowing",
            Harness::keys()
        );
        output::line("{}");
        return Ok(0);
    };
    let raw = match read_stdin() {
        Ok(raw) => raw,
        Err(why) => {
            errln!("hooks:invoke ({h}): {why}; allowing");
            output::line("{}");
            return Ok(0);
        }
    };
    let phase_arg = cli.args.value("--phase");
    let event = match normalise::normalise(h, phase_arg, &raw, cli.env) {
        Ok(e) => e,
        Err(why) => {
            errln!("hooks:invoke ({h}): {why}; allowing");
            output::line("{}");
            return Ok(0);
        }
    };
    for note in &event.notes {
        errln!("hooks:invoke ({h} {}): {note}", event.native);
    }
    let mut results = Vec::new();
    if let Some(answer) = run_handler(cli, &event).await {
        results.push(render::from_answer(answer));
    }
    for command in &cli.args.handlers {
        if let Some(r) = run_command(cli, &event, command).await {
            results.push(r);
        }
    }
    let (merged, conflicts) = unified::merge(results);
    for c in conflicts {
        errln!("hooks:invoke ({h} {}): {c}", event.native);
    }
    output::line(&output::compact(&render::render(h, event.phase, &merged)));
    Ok(0)
}

/// One `--handler` command: the unified event on its stdin (and in `HOOKS_PROXY_EVENT`), its
/// stdout its result; a failure or a timeout is reported and counts as no answer (§1.3).
async fn run_command(cli: &Cli<'_>, event: &Event, command: &str) -> Option<unified::HookResult> {
    use tokio::io::AsyncWriteExt as _;
    let key = event.harness.key();
    let unified = output::compact(&event.unified());
    let mut child = match tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .current_dir(event.cwd.as_deref().unwrap_or("."))
        .env("HOOKS_PROXY_EVENT", &unified)
        .env("AGENT_ADAPTER", key)
        .env(
            "AGENT_SESSION_ID",
            event.session_id.as_deref().unwrap_or(""),
        )
        .env("AGENT_WORKSPACE_ROOT", event.cwd.as_deref().unwrap_or(""))
        .env(
            "AGENT_TRANSCRIPT_PATH",
            event.transcript_path.as_deref().unwrap_or(""),
        )
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            errln!(
                "hooks:invoke ({key} {}): cannot start handler {command:?}: {e}",
                event.native
            );
            return None;
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A handler that does not read its input closes the pipe: not an error.
        let _ = stdin.write_all(unified.as_bytes()).await;
    }
    let limit = limit(cli, event.phase);
    match tokio::time::timeout(limit, child.wait_with_output()).await {
        Err(_) => {
            errln!(
                "hooks:invoke ({key} {}): handler {command:?} did not answer within {} ms; ignored",
                event.native,
                limit.as_millis()
            );
            None
        }
        Ok(Err(e)) => {
            errln!(
                "hooks:invoke ({key} {}): handler {command:?}: {e}; ignored",
                event.native
            );
            None
        }
        Ok(Ok(out)) if !out.status.success() => {
            errln!(
                "hooks:invoke ({key} {}): handler {command:?} failed ({}); ignored",
                event.native,
                out.status
            );
            None
        }
        Ok(Ok(out)) => Some(unified::parse(&String::from_utf8_lossy(&out.stdout))),
    }
}

/// The babysitter hook type a phase runs, if any (the others are observed, answered "allow").
fn hook_type(p: Phase) -> Option<&'static str> {
    match p {
        Phase::SessionStart => Some("session-start"),
        Phase::Stop | Phase::AfterAgent | Phase::SessionIdle => Some("stop"),
        Phase::ToolBefore => Some("pre-tool-use"),
        Phase::UserPromptSubmitted => Some("user-prompt-submit"),
        Phase::SessionEnd | Phase::ToolAfter | Phase::SubagentEnd | Phase::BeforeAgent => None,
    }
}

/// The handler's time limit: `--timeout-ms`, else long enough for the stop hook's back-off
/// (300 s at most) on loop phases and 25 s on the others, both under what the bundles register.
fn limit(cli: &Cli<'_>, p: Phase) -> Duration {
    let ms = cli
        .args
        .value("--timeout-ms")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .unwrap_or(if p.drives_loop() { 330_000 } else { 25_000 });
    Duration::from_millis(ms)
}

async fn run_handler(cli: &Cli<'_>, event: &Event) -> Option<protocol::Answer> {
    let hook_type = hook_type(event.phase)?;
    // The handlers find the session in `AGENT_SESSION_ID` when their payload has none: the
    // normalised id goes there too, so every harness's id reaches them the same way.
    let mut env: EnvMap = cli.env.clone();
    if let Some(sid) = &event.session_id {
        env = env.with("AGENT_SESSION_ID", sid.clone());
    }
    let sub = Cli {
        args: cli.args.clone(),
        env: &env,
        cwd: event
            .cwd
            .as_deref()
            .map(std::path::PathBuf::from)
            .filter(|d| d.is_dir())
            .unwrap_or_else(|| cli.cwd.clone()),
    };
    let payload = output::compact(&Value::Object(event.babysitter_payload()));
    let key = event.harness.key();
    let run = protocol::adapted(payload, hook::handle(&sub, hook_type, key));
    match tokio::time::timeout(limit(cli, event.phase), run).await {
        Err(_) => {
            errln!(
                "hooks:invoke ({key} {}): babysitter's {hook_type} hook did not answer within {} ms; allowing",
                event.native,
                limit(cli, event.phase).as_millis()
            );
            None
        }
        Ok((Err(e), _)) => {
            errln!(
                "hooks:invoke ({key} {}): babysitter's {hook_type} hook failed: {e:#}; allowing",
                event.native
            );
            None
        }
        Ok((Ok(_), answer)) => answer,
    }
}

fn read_stdin() -> Result<String, String> {
    let mut raw = Vec::new();
    let stdin = std::io::stdin();
    let mut limited = stdin.lock().take(MAX_PAYLOAD + 1);
    limited
        .read_to_end(&mut raw)
        .map_err(|e| format!("cannot read the payload from stdin: {e}"))?;
    if raw.len() as u64 > MAX_PAYLOAD {
        drain_stdin();
        return Err(format!(
            "the payload on stdin is larger than {} MiB",
            MAX_PAYLOAD / 1024 / 1024
        ));
    }
    String::from_utf8(raw).map_err(|e| format!("the payload on stdin is not UTF-8: {e}"))
}

/// Reads what is left on stdin, so a harness writing a large payload is not left blocked.
fn drain_stdin() {
    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut std::io::sink());
}

impl Event {
    /// The event as the `a5c.hooks.v1` `UnifiedHookEvent` (§1.7), for `--handler` commands.
    fn unified(&self) -> Value {
        json!({
            "version": "a5c.hooks.v1",
            "adapter": self.harness.key(),
            "phase": self.phase.as_str(),
            "rawEventName": self.native,
            "supportLevel": "native",
            "execution": {
                "sessionId": self.session_id,
                "adapter": self.harness.key(),
                "cwd": self.cwd,
                "transcriptPath": self.transcript_path,
                "toolName": self.tool_name,
                "nativeEventName": self.native,
                "metadata": {"stop_hook_active": self.stop_hook_active},
            },
            "payload": {
                "prompt": self.prompt,
                "toolName": self.tool_name,
                "toolInput": self.tool_input,
                "lastAssistantMessage": self.last_message,
            },
            "raw": self.raw,
        })
    }

    /// The payload babysitter's own hooks read (Claude Code's field names, which `hook:run`
    /// has always taken).
    fn babysitter_payload(&self) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("hook_event_name".into(), json!(self.native));
        let mut put = |k: &str, v: &Option<String>| {
            if let Some(v) = v {
                m.insert(k.into(), json!(v));
            }
        };
        put("session_id", &self.session_id);
        put("cwd", &self.cwd);
        // The stop hook reads the agent's last message from a transcript in Claude Code's
        // format only; other harnesses' transcripts would be misread, their payload has it.
        if self.harness == Harness::ClaudeCode {
            put("transcript_path", &self.transcript_path);
        }
        put("last_assistant_message", &self.last_message);
        put("prompt", &self.prompt);
        put("tool_name", &self.tool_name);
        if let Some(input) = &self.tool_input {
            m.insert("tool_input".into(), input.clone());
        }
        m.insert("stop_hook_active".into(), json!(self.stop_hook_active));
        m
    }
}
