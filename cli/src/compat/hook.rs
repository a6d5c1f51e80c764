//! `hook:run` (spec `adapters-and-hooks.md` §2.1, `babysitter-core.md` §6.1): the stop hook that
//! drives the orchestration loop in stop-hook harnesses (Claude Code and the unified plugin).
//!
//! stdout is `{}` (let the agent stop) or `{"decision":"block","reason":…,"systemMessage":…}`
//! (force another turn). Every decision taken with a run bound is journaled as
//! `STOP_HOOK_INVOKED` (field order of §2.3.3). `session-start` prepares the session the stop hook
//! drives ([`session_start`]).
//!
//! Fix kept here (B20): when the session file is missing and several live runs claim the session,
//! the reference exits 1 with `{}` and the loop silently ends; here the ambiguity is journaled in
//! every candidate run and the stop is blocked with a reason explaining how to re-associate.
//! A stop-hook payload that is not a JSON object is treated as `{}` (as the reference does) but
//! says so on stderr.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::time::Instant;

use babysitter_journal::EventType;
use serde_json::{Map, Value, json};

use super::Cli;
use super::lock;
use super::output;
use super::paths;
use super::runs::{self, Run};
use super::session::{self, DEFAULT_MAX_ITERATIONS, SessionFile, SessionState};

mod facts;
mod prompt_tools;
mod session_start;

pub use facts::ObservedState;
use facts::prior_fires;
pub(super) use facts::{RunFacts, facts_from, run_facts};

const HOOK_TYPES: &str = "stop, session-end, session-start, user-prompt-submit, pre-tool-use";

/// `hook:run --hook-type <t> [--harness h] [--state-dir d] [--runs-dir r] [--json]`.
pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let json_errors = cli.args.json();
    let Some(hook_type) = cli.args.value("--hook-type").filter(|s| !s.is_empty()) else {
        return Ok(hook_error(
            json_errors,
            "MISSING_HOOK_TYPE",
            "--hook-type is required for hook:run",
        ));
    };
    let harness = cli
        .args
        .value("--harness")
        .filter(|s| !s.is_empty())
        .unwrap_or("claude-code");
    // The reference's order: harness-agnostic hook types first, then the harness, then the
    // adapter's hook types.
    match hook_type {
        "user-prompt-submit" => return Ok(prompt_tools::user_prompt_submit(cli)),
        "pre-tool-use" => return Ok(prompt_tools::pre_tool_use(cli)),
        _ => {}
    }
    let Some(adapter) = session::binding::by_name(harness) else {
        return Ok(hook_error(
            json_errors,
            "UNSUPPORTED_HARNESS",
            &format!(
                "Unsupported harness: \"{harness}\". Supported: {}",
                session::binding::names().join(", ")
            ),
        ));
    };
    match hook_type {
        // A harness without hooks never holds its agent (the reference's `noHookSupport`).
        "stop" | "session-end" if adapter.no_hooks => {
            allow();
            return Ok(0);
        }
        "stop" | "session-end" => {}
        "session-start" => return session_start::run(cli, harness).await,
        other => {
            return Ok(hook_error(
                json_errors,
                "UNKNOWN_HOOK_TYPE",
                &format!("Unknown hook type: {other}. Supported: {HOOK_TYPES}"),
            ));
        }
    }
    let mut raw = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut raw) {
        errln!("[hook:run] cannot read the stop-hook payload from stdin: {e}; allowing the stop");
        allow();
        return Ok(0);
    }
    let payload = parse_payload(&raw);
    let hook = StopHook {
        cli,
        harness: harness.to_owned(),
        payload,
    };
    hook.handle().await
}

fn hook_error(json: bool, code: &str, message: &str) -> u8 {
    if json {
        errln!(
            "{}",
            output::pretty(&json!({"error": code, "message": message}))
        );
    } else {
        errln!("Error: {message}");
    }
    1
}

/// The payload as an object; anything else becomes `{}` with a note on stderr.
fn parse_payload(raw: &str) -> Map<String, Value> {
    if raw.trim().is_empty() {
        errln!("[hook:run] empty stop-hook payload on stdin; treating it as {{}}");
        return Map::new();
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(Value::Object(m)) => m,
        Ok(other) => {
            let kind = match other {
                Value::Array(_) => "an array",
                Value::String(_) => "a string",
                Value::Number(_) => "a number",
                Value::Bool(_) => "a boolean",
                _ => "null",
            };
            errln!(
                "[hook:run] invalid stop-hook payload: expected a JSON object, got {kind}; treating it as {{}}"
            );
            Map::new()
        }
        Err(e) => {
            errln!(
                "[hook:run] invalid stop-hook payload: not valid JSON ({e}); treating it as {{}}"
            );
            Map::new()
        }
    }
}

/// `{}`: the agent may stop.
fn allow() {
    output::line("{}");
}

/// The block decision in the harness's shape: Cursor takes `{followup_message}`, the others
/// `{decision, reason, systemMessage}` (adapters-and-hooks §2.1).
fn block(harness: &str, reason: &str, system_message: &str) {
    let v = if harness == "cursor" {
        json!({"followup_message": system_message})
    } else {
        json!({
            "decision": "block",
            "reason": reason,
            "systemMessage": system_message,
        })
    };
    output::line(&output::compact(&v));
}

fn str_field<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a str> {
    m.get(k)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
}

/// The first `<promise>…</promise>`, trimmed, whitespace runs collapsed (F17).
pub(super) fn extract_promise(text: &str) -> Option<String> {
    let start = text.find("<promise>")? + "<promise>".len();
    let len = text[start..].find("</promise>")?;
    Some(
        text[start..start + len]
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    )
}

/// The text of the last assistant entry of a JSONL transcript (`role`, `type` or
/// `message.role` is `assistant`): its `text` blocks joined by `\n`; `None` when there is no
/// assistant entry, its content is not a block array, or it has no text block.
pub(super) fn transcript_text(raw: &str) -> Option<String> {
    let last = raw
        .split('\n')
        .rev()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| {
            v.get("role").and_then(Value::as_str) == Some("assistant")
                || v.get("type").and_then(Value::as_str) == Some("assistant")
                || v.get("message")
                    .and_then(|m| m.get("role"))
                    .and_then(Value::as_str)
                    == Some("assistant")
        })?;
    let content = match last.get("message") {
        Some(m) if m.is_object() => m.get("content"),
        _ => last.get("content"),
    };
    let parts: Vec<&str> = content?
        .as_array()?
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    (!parts.is_empty()).then(|| parts.join("\n"))
}

fn positive_env(cli: &Cli<'_>, name: &str, fallback: f64) -> f64 {
    cli.env
        .get_non_empty(name)
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|n| n.is_finite() && *n > 0.0)
        .unwrap_or(fallback)
}

/// A JSON number the way JavaScript writes it (integral floats without `.0`).
fn js_number(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        json!(n as i64)
    } else {
        json!(n)
    }
}

struct StopHook<'a, 'b> {
    cli: &'a Cli<'b>,
    harness: String,
    payload: Map<String, Value>,
}

impl StopHook<'_, '_> {
    fn note(&self, what: &str) {
        if self.cli.args.verbose() {
            errln!("[hook:run] stop: {what}");
        }
    }

    async fn handle(&self) -> anyhow::Result<u8> {
        let env_sid = self
            .cli
            .env
            .get_non_empty("AGENT_SESSION_ID")
            .map(str::trim);
        let payload_sid = str_field(&self.payload, "session_id").or_else(|| {
            (self.harness != "unified")
                .then(|| str_field(&self.payload, "conversation_id"))
                .flatten()
        });
        let Some(sid) = payload_sid.or(env_sid).map(str::to_owned) else {
            self.note("no_session_id");
            allow();
            return Ok(0);
        };
        if let Err(e) = session::binding::valid_session_id(&sid) {
            errln!("[hook:run] stop: {e}; allowing the stop");
            allow();
            return Ok(0);
        }
        let state_dir = session::state_dir(
            self.cli.env,
            &self.cli.cwd,
            self.cli.args.value("--state-dir"),
        );
        let mut sid = sid;
        let mut path = session::session_file_path(&state_dir, &sid);
        let mut file = match SessionFile::read(&path) {
            Ok(f) => f,
            Err(m) => {
                self.note(&format!("session_read_error: {m}"));
                allow();
                return Ok(0);
            }
        };
        if file.is_none()
            && let Some(env) =
                env_sid.filter(|e| *e != sid && session::binding::valid_session_id(e).is_ok())
        {
            let alt = session::session_file_path(&state_dir, env);
            if let Ok(Some(f)) = SessionFile::read(&alt) {
                sid = env.to_owned();
                path = alt;
                file = Some(f);
            }
        }
        let mut file = match file {
            Some(f) => f,
            None => match self.recover(&sid, &path).await? {
                Recovery::Recovered(f) => *f,
                Recovery::Done(code) => return Ok(code),
            },
        };
        if !file.state.active {
            self.note("session_inactive");
            allow();
            return Ok(0);
        }
        let iteration = file.state.iteration;
        let max = file.state.max_iterations;
        let run = self.bound_run(&file.state);
        if max > 0 && iteration >= max {
            if let Some(run) = &run {
                self.journal(
                    run,
                    &sid,
                    iteration,
                    "approve",
                    "max_iterations_reached",
                    state_fields("", "", false),
                )
                .await;
            }
            self.deactivate(&mut file, &path, "max_iterations_reached");
            allow();
            return Ok(0);
        }
        let now = session::now_ts();
        let times = if iteration >= 5 {
            session::update_iteration_times(
                &file.state.iteration_times,
                &file.state.last_iteration_at,
                &now,
            )
        } else {
            file.state.iteration_times.clone()
        };
        let text = str_field(&self.payload, "transcript_path")
            .and_then(|p| std::fs::read_to_string(paths::resolve(&self.cli.cwd, p)).ok())
            .and_then(|raw| transcript_text(&raw))
            .or_else(|| {
                ["last_assistant_message", "last_response", "prompt_response"]
                    .iter()
                    .find_map(|k| str_field(&self.payload, k).map(str::to_owned))
            });
        let promise = text.as_deref().and_then(extract_promise);
        if file.state.run_id.is_empty() {
            self.note("no_run_id");
            self.deactivate(&mut file, &path, "no_run_id");
            allow();
            return Ok(0);
        }
        let Some(run) = run else {
            errln!(
                "[hook:run] stop: cannot resolve run {} of session {sid}; allowing the stop",
                file.state.run_id
            );
            allow();
            return Ok(1);
        };
        let facts = match run_facts(&run).await {
            Ok(f) => f,
            Err(e) => {
                errln!(
                    "[hook:run] stop: run state unknown for {}: {e:#}",
                    run.dir.display()
                );
                self.journal(
                    &run,
                    &sid,
                    iteration,
                    "approve",
                    "run_state_unknown",
                    state_fields("", "", promise.is_some()),
                )
                .await;
                allow();
                return Ok(1);
            }
        };
        let waiting = facts.state == ObservedState::Waiting;
        if waiting && facts.only_breakpoints {
            self.journal(
                &run,
                &sid,
                iteration,
                "approve",
                "breakpoint_waiting",
                state_fields(
                    facts.state.as_str(),
                    &facts.pending_kinds,
                    promise.is_some(),
                ),
            )
            .await;
            allow();
            return Ok(0);
        }
        if waiting && !facts.pending_kinds.is_empty() && facts.current_effect.is_none() {
            self.journal(
                &run,
                &sid,
                iteration,
                "approve",
                "external_waiting",
                state_fields(
                    facts.state.as_str(),
                    &facts.pending_kinds,
                    promise.is_some(),
                ),
            )
            .await;
            allow();
            return Ok(0);
        }
        let run_json = run.metadata().unwrap_or(Value::Null);
        let proof =
            (facts.state == ObservedState::Completed).then(|| runs::completion_proof(&run_json));
        if let (Some(p), Some(proof)) = (&promise, &proof)
            && p == proof
        {
            self.journal(
                &run,
                &sid,
                iteration,
                "approve",
                "completion_proof_matched",
                state_fields(
                    facts.state.as_str(),
                    &facts.pending_kinds,
                    promise.is_some(),
                ),
            )
            .await;
            self.deactivate(&mut file, &path, "completion_proof_matched");
            allow();
            return Ok(0);
        }
        // Continue the loop.
        let next = iteration + 1;
        file.state.iteration = next;
        file.state.last_iteration_at = now;
        file.state.iteration_times = times;
        if let Err(m) = file.write(&path) {
            errln!("[hook:run] stop: cannot update the session file: {m}");
        }
        let backoff = if waiting && !facts.sealed {
            match &facts.current_effect {
                Some(effect) => Some(self.backoff(&run, effect, &facts).await),
                None => None,
            }
        } else {
            None
        };
        let mut extra = state_fields(
            facts.state.as_str(),
            &facts.pending_kinds,
            promise.is_some(),
        );
        if let Some(b) = &backoff {
            extra.insert("effectId".into(), json!(b.effect_id));
            extra.insert("hookBackoffFireCount".into(), json!(b.fire_count));
            extra.insert("hookBackoffDelaySeconds".into(), js_number(b.delay_seconds));
            extra.insert("hookBackoffInterrupted".into(), json!(b.interrupted));
        }
        self.journal(&run, &sid, iteration, "block", "continue_loop", extra)
            .await;
        let (reason, system) = continuation(
            next,
            max,
            facts.state,
            &facts.pending_kinds,
            proof.is_some(),
            &file.prompt,
        );
        block(&self.harness, &reason, &system);
        Ok(0)
    }

    /// The bound run: the session's `run_dir` when it holds `run.json`, else the run id looked
    /// up under the readable runs roots.
    fn bound_run(&self, st: &SessionState) -> Option<Run> {
        if st.run_id.is_empty() {
            return None;
        }
        let dir = st
            .run_dir
            .as_deref()
            .map(PathBuf::from)
            .filter(|d| d.join("run.json").is_file())
            .unwrap_or_else(|| {
                paths::resolve_existing_run_dir(&st.run_id, &self.cli.runs_dir(), &self.cli.cwd)
            });
        if !dir.join("run.json").is_file() {
            return None;
        }
        Run::open(&dir).ok()
    }

    fn deactivate(&self, file: &mut SessionFile, path: &Path, reason: &str) {
        file.state.active = false;
        file.state.set_metadata("hookExitReason", reason);
        file.state.set_metadata("hookExitedAt", session::now_ts());
        if let Err(m) = file.write(path) {
            errln!("[hook:run] stop: cannot update the session file: {m}");
        }
    }

    /// Appends `STOP_HOOK_INVOKED` (best effort: a journal failure never changes the decision).
    async fn journal(
        &self,
        run: &Run,
        sid: &str,
        iteration: u64,
        decision: &str,
        reason: &str,
        extra: Map<String, Value>,
    ) {
        let mut data = Map::new();
        data.insert("sessionId".into(), json!(sid));
        data.insert("iteration".into(), json!(iteration));
        data.insert("decision".into(), json!(decision));
        data.insert("reason".into(), json!(reason));
        data.extend(extra);
        data.insert("harness".into(), json!(self.harness));
        data.insert(
            "timestamp".into(),
            json!(babysitter_journal::journal::now_iso()),
        );
        let result = async {
            let _guard = lock::acquire(&run.dir, self.cli.lock_timeout()).await?;
            let run_json = run.metadata().unwrap_or(Value::Null);
            run.append(EventType::StopHookInvoked, data, &run_json, self.cli.env)
                .await
        }
        .await;
        if let Err(e) = result {
            errln!(
                "[hook:run] stop: cannot journal STOP_HOOK_INVOKED in {}: {e:#}",
                run.dir.display()
            );
        }
    }

    /// Sleeps `min(base × 3^k, cap)` seconds, polling the journal every ≤ 1 s and stopping early
    /// once the effect is no longer pending.
    async fn backoff(&self, run: &Run, effect_id: &str, facts: &RunFacts) -> Backoff {
        let fire_count = prior_fires(&facts.events, effect_id);
        let base = positive_env(self.cli, "BABYSITTER_HOOK_BACKOFF_BASE", 10.0);
        let cap = positive_env(self.cli, "BABYSITTER_HOOK_BACKOFF_CAP", 300.0);
        let planned = (base * 3f64.powi(i32::try_from(fire_count).unwrap_or(i32::MAX))).min(cap);
        let start = Instant::now();
        let mut interrupted = false;
        let poll = (planned / 10.0).clamp(0.001, 1.0);
        while start.elapsed().as_secs_f64() < planned {
            let remaining = planned - start.elapsed().as_secs_f64();
            tokio::time::sleep(Duration::from_secs_f64(poll.min(remaining.max(0.0)))).await;
            let still = run
                .inspect(|_, idx| idx.pending().any(|r| r.effect_id == effect_id))
                .await;
            match still {
                Ok(true) => {}
                Ok(false) => {
                    interrupted = true;
                    break;
                }
                Err(_) => break,
            }
        }
        // The planned delay, or the time actually slept when the effect resolved early.
        let delay_seconds = if interrupted {
            (start.elapsed().as_secs_f64().min(planned) * 1000.0).round() / 1000.0
        } else {
            planned
        };
        Backoff {
            effect_id: effect_id.to_owned(),
            fire_count,
            delay_seconds,
            interrupted,
        }
    }

    /// Missing session file: look for live runs that journaled this session.
    async fn recover(&self, sid: &str, path: &Path) -> anyhow::Result<Recovery> {
        let mut candidates: Vec<(Run, ObservedState)> = Vec::new();
        for dir in paths::all_run_dirs(&self.cli.runs_dir(), &self.cli.cwd) {
            let Ok(run) = Run::open(&dir) else { continue };
            let Ok(events) = run.events().await else {
                continue;
            };
            let claims = events.iter().any(|e| {
                let d = &e.body.data;
                d.get("sessionId").and_then(Value::as_str) == Some(sid)
                    && d.get("harness")
                        .and_then(Value::as_str)
                        .is_none_or(|h| h == self.harness)
            });
            if !claims {
                continue;
            }
            let Ok(facts) = run_facts(&run).await else {
                continue;
            };
            if !facts.state.terminal() {
                candidates.push((run, facts.state));
            }
        }
        match candidates.len() {
            0 => {
                self.note("no_session_file");
                allow();
                Ok(Recovery::Done(0))
            }
            1 => {
                let (run, state) = candidates.remove(0);
                let run_json = run.metadata().unwrap_or(Value::Null);
                let mut st = SessionState::new(DEFAULT_MAX_ITERATIONS, &run.id);
                st.run_dir = Some(run.dir.display().to_string());
                st.set_metadata("recoveredFromMissingSessionFile", "true");
                st.set_metadata("missingSessionRecoveredAt", session::now_ts());
                st.set_metadata("missingSessionRecoverySource", "stop-hook");
                st.set_metadata("missingSessionRecoveryRunState", state.as_str());
                let file = SessionFile {
                    state: st,
                    prompt: run_json
                        .get("prompt")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                };
                if let Err(m) = file.write(path) {
                    errln!("[hook:run] stop: cannot recreate the session file: {m}");
                }
                errln!(
                    "[hook:run] stop: recovered missing session file {} from run {}",
                    path.display(),
                    run.id
                );
                Ok(Recovery::Recovered(Box::new(file)))
            }
            n => {
                let ids: Vec<String> = candidates.iter().map(|(r, _)| r.id.clone()).collect();
                errln!(
                    "[hook:run] stop: session {sid} has no state file and {n} active runs claim it ({}); blocking until it is re-associated",
                    ids.join(", ")
                );
                for (run, state) in &candidates {
                    let mut extra = state_fields(state.as_str(), "", false);
                    extra.insert("candidateRunIds".into(), json!(ids));
                    self.journal(run, sid, 0, "block", "ambiguous_session_recovery", extra)
                        .await;
                }
                let reason = format!(
                    "Babysitter | The session state file for session {sid} is missing and {n} active runs are bound to this session: {}. Choose the run to continue and re-associate it: babysitter session:associate --session-id {sid} --run-id <runId> --force (or session:init --session-id {sid} --run-id <runId>), and halt the others with run:halt. Then continue orchestrating that run.",
                    ids.join(", ")
                );
                let system = format!(
                    "\u{1F504} Babysitter | Ambiguous session: {n} runs claim this session — re-associate one"
                );
                block(&self.harness, &reason, &system);
                Ok(Recovery::Done(0))
            }
        }
    }
}

enum Recovery {
    Recovered(Box<SessionFile>),
    Done(u8),
}

struct Backoff {
    effect_id: String,
    fire_count: u32,
    delay_seconds: f64,
    interrupted: bool,
}

/// `runState`, `pendingKinds`, `hasPromise`: carried by every `STOP_HOOK_INVOKED`.
fn state_fields(run_state: &str, pending_kinds: &str, has_promise: bool) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("runState".into(), json!(run_state));
    m.insert("pendingKinds".into(), json!(pending_kinds));
    m.insert("hasPromise".into(), json!(has_promise));
    m
}

/// The block `reason` and `systemMessage` for iteration `next`.
fn continuation(
    next: u64,
    max: u64,
    state: ObservedState,
    pending_kinds: &str,
    completed: bool,
    prompt: &str,
) -> (String, String) {
    let first = if completed {
        format!(
            "Babysitter iteration {next} | Run completed! To finish: call 'run:status --json' on your run, extract 'completionProof' from the output, then output it in <promise>SECRET</promise> tags. Do not mention or reveal the secret otherwise."
        )
    } else if state == ObservedState::Waiting && !pending_kinds.is_empty() {
        format!(
            "Babysitter iteration {next} | Waiting on: {pending_kinds}. Check if pending effects are resolved, then call run:iterate."
        )
    } else if state == ObservedState::Halted {
        format!(
            "Babysitter iteration {next} | Run halted. Inspect run:status --json for the halt reason and payload, then fix the process or inputs before continuing."
        )
    } else if state == ObservedState::Failed {
        format!(
            "Babysitter iteration {next} | Run failed. Fix the run, journal or process (inspect the sdk.md if needed) and proceed."
        )
    } else {
        format!("Babysitter iteration {next} | Continue orchestration (run:iterate).")
    };
    let banner = format!("\u{1F504} Babysitter iteration {next}/{max}");
    let system = if completed {
        format!("{banner} | Run completed! Extract promise tag to finish.")
    } else if state == ObservedState::Waiting && !pending_kinds.is_empty() {
        format!("{banner} | Waiting on: {pending_kinds}")
    } else if state == ObservedState::Failed {
        format!("{banner} | Failed — check run state")
    } else {
        format!("{banner} [{}]", state.as_str())
    };
    (format!("{first}\n\n{prompt}"), system)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promise_is_first_trimmed_and_collapsed() {
        assert_eq!(
            extract_promise("x <promise>\n  ab \n\t cd  </promise> <promise>zz</promise>"),
            Some("ab cd".into())
        );
        assert_eq!(extract_promise("<promise>unterminated"), None);
        assert_eq!(extract_promise("none"), None);
    }

    #[test]
    fn prior_fires_reset_on_resolution() {
        let ev = |t: &str, e: &str| (t.to_owned(), Some(e.to_owned()));
        let events = vec![
            ev("EFFECT_REQUESTED", "a"),
            ev("STOP_HOOK_INVOKED", "a"),
            ev("STOP_HOOK_INVOKED", "b"),
            ev("STOP_HOOK_INVOKED", "a"),
        ];
        assert_eq!(prior_fires(&events, "a"), 2);
        let mut resolved = events.clone();
        resolved.push(ev("EFFECT_RESOLVED", "a"));
        assert_eq!(prior_fires(&resolved, "a"), 0);
        assert_eq!(prior_fires(&events, "zz"), 0);
    }

    #[test]
    fn continuation_texts() {
        let (r, s) = continuation(3, 10, ObservedState::Waiting, "agent, node", false, "P");
        assert_eq!(
            r,
            "Babysitter iteration 3 | Waiting on: agent, node. Check if pending effects are resolved, then call run:iterate.\n\nP"
        );
        assert_eq!(
            s,
            "\u{1F504} Babysitter iteration 3/10 | Waiting on: agent, node"
        );
        let (_, s) = continuation(2, 5, ObservedState::Halted, "", false, "P");
        assert_eq!(s, "\u{1F504} Babysitter iteration 2/5 [halted]");
    }
}
