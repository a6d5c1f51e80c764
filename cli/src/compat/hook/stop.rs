//! `hook:run --hook-type stop` (and `session-end`; spec `adapters-and-hooks.md` §2.1,
//! `babysitter-core.md` §6.1): the stop hook that drives the orchestration loop in stop-hook
//! harnesses (Claude Code and the unified plugin).
//!
//! stdout is `{}` (let the agent stop) or `{"decision":"block","reason":…,"systemMessage":…}`
//! (force another turn). Every decision taken with a run bound is journaled as
//! `STOP_HOOK_INVOKED` (field order of §2.3.3).
//!
//! One call runs in four steps: find the session the stop belongs to ([`StopHook::session`]),
//! gather what the decision asks for and take it ([`decide`], pure), then commit it (journal,
//! session file, back-off) and print the answer ([`StopHook::approve`],
//! [`StopHook::continue_loop`]).
//!
//! Fix kept here (B20): when the session file is missing and several live runs claim the session,
//! the reference exits 1 with `{}` and the loop silently ends; here the ambiguity is journaled in
//! every candidate run and the stop is blocked with a reason explaining how to re-associate.
//! A stop-hook payload that is not a JSON object is treated as `{}` (as the reference does) but
//! says so on stderr.

use std::path::{Path, PathBuf};
use std::time::Duration;

use babysitter_journal::EventType;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::protocol::{allow, block, parse_payload, read_payload, str_field};
use crate::compat::cli::Cli;
use crate::compat::client::RunClient as _;
use crate::compat::client::remote::Remote;
use crate::compat::run_dir::Run;
use crate::compat::session::binding::{SERVER, valid_session_id};
use crate::compat::session::decide::{
    self, Approval, Continuation, Decision, Facts, Reason, Recovery, RunView, StateFields, decide,
};
use crate::compat::session::file::{
    DEFAULT_MAX_ITERATIONS, SessionFile, SessionState, now_ts, session_file_path, state_dir,
};
use crate::compat::session::run_facts::{ObservedState, prior_fires, run_facts};
use crate::compat::session::transcript::{extract_promise, transcript_text};
use crate::compat::{lock, paths};
use babysitter_engine::lifecycle::completion_proof;

/// The stop hook for `harness`, its payload read from stdin.
pub(super) async fn run(cli: &Cli<'_>, harness: &str) -> anyhow::Result<u8> {
    let raw = match read_payload() {
        Ok(raw) => raw,
        Err(e) => {
            errln!(
                "[hook:run] cannot read the stop-hook payload from stdin: {e}; allowing the stop"
            );
            allow();
            return Ok(0);
        }
    };
    let hook = StopHook {
        cli,
        harness: harness.to_owned(),
        payload: parse_payload(&raw),
    };
    hook.handle().await
}

struct StopHook<'a, 'b> {
    cli: &'a Cli<'b>,
    harness: String,
    payload: Map<String, Value>,
}

/// The session a stop belongs to, or the exit code of a stop already answered.
enum Session {
    Found {
        sid: String,
        path: PathBuf,
        file: Box<SessionFile>,
    },
    Answered(u8),
}

/// The run the decision is about, as far as it has been looked at.
#[derive(Default)]
struct RunSeen {
    run: Option<Run>,
    /// The journal's `(type, effectId)` pairs, for back-off counting.
    events: Vec<(String, Option<String>)>,
    /// The orchestrator the run lives on (`run:create --server`), read again while backing
    /// off; its journal takes no stop-hook events from here, so decisions are not journaled.
    remote: Option<Remote>,
}

impl StopHook<'_, '_> {
    fn note(&self, what: &str) {
        if self.cli.args.verbose() {
            errln!("[hook:run] stop: {what}");
        }
    }

    async fn handle(&self) -> anyhow::Result<u8> {
        let (sid, path, file) = match self.session().await {
            Session::Found { sid, path, file } => (sid, path, *file),
            Session::Answered(code) => return Ok(code),
        };
        let mut facts = Facts {
            session: file.clone(),
            promise: self.promise(),
            now: now_ts(),
            run_found: None,
            run: None,
        };
        let mut seen = RunSeen::default();
        loop {
            match decide(&facts) {
                Decision::FindRun => {
                    (seen.run, seen.remote) = self.bound_run(&file.state).await;
                    facts.run_found = Some(seen.run.is_some());
                }
                Decision::ReadRun => {
                    let (view, events) = match &seen.run {
                        Some(run) => self.read_run(run).await,
                        None => (RunView::Unreadable, Vec::new()),
                    };
                    facts.run = Some(view);
                    seen.events = events;
                }
                Decision::Approve(a) => return Ok(self.approve(&sid, &path, file, &seen, a).await),
                Decision::Continue(c) => {
                    return Ok(self.continue_loop(&sid, &path, file, &seen, c).await);
                }
            }
        }
    }

    /// The session of this stop: the payload's id (or `AGENT_SESSION_ID`), its file — the
    /// environment's session file when the payload's has none — or one recovered from the runs
    /// that claim the session.
    async fn session(&self) -> Session {
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
            return Session::Answered(0);
        };
        if let Err(e) = valid_session_id(&sid) {
            errln!("[hook:run] stop: {e}; allowing the stop");
            allow();
            return Session::Answered(0);
        }
        let state_dir = state_dir(
            self.cli.env,
            &self.cli.cwd,
            self.cli.args.value("--state-dir"),
        );
        let mut sid = sid;
        let mut path = session_file_path(&state_dir, &sid);
        let mut file = match SessionFile::read(&path) {
            Ok(f) => f,
            Err(m) => {
                self.note(&format!("session_read_error: {m}"));
                allow();
                return Session::Answered(0);
            }
        };
        if file.is_none()
            && let Some(env) = env_sid.filter(|e| *e != sid && valid_session_id(e).is_ok())
        {
            let alt = session_file_path(&state_dir, env);
            if let Ok(Some(f)) = SessionFile::read(&alt) {
                sid = env.to_owned();
                path = alt;
                file = Some(f);
            }
        }
        match file {
            Some(file) => Session::Found {
                sid,
                path,
                file: Box::new(file),
            },
            None => self.recover(sid, path).await,
        }
    }

    /// The `<promise>` of the agent's last message: the transcript's last assistant entry, else
    /// the payload's last message.
    fn promise(&self) -> Option<String> {
        let text = str_field(&self.payload, "transcript_path")
            .and_then(|p| std::fs::read_to_string(paths::resolve(&self.cli.cwd, p)).ok())
            .and_then(|raw| transcript_text(&raw))
            .or_else(|| {
                ["last_assistant_message", "last_response", "prompt_response"]
                    .iter()
                    .find_map(|k| str_field(&self.payload, k).map(str::to_owned))
            });
        text.as_deref().and_then(extract_promise)
    }

    /// The bound run: on its orchestrator when the session names one (`metadata_server`), else
    /// the session's `run_dir` when it holds `run.json`, else the run id looked up under the
    /// readable runs roots.
    async fn bound_run(&self, st: &SessionState) -> (Option<Run>, Option<Remote>) {
        if st.run_id.is_empty() {
            return (None, None);
        }
        if let Some(url) = st.metadata_value(SERVER) {
            let remote = match Remote::connect(url, self.cli.env) {
                Ok(r) => r,
                Err(e) => {
                    errln!(
                        "[hook:run] stop: cannot reach {url} for run {}: {e:#}",
                        st.run_id
                    );
                    return (None, None);
                }
            };
            return match remote.open(Path::new(&st.run_id)).await {
                Ok(run) => (Some(run), Some(remote)),
                Err(e) => {
                    errln!("[hook:run] stop: run {} on {url}: {e}", st.run_id);
                    (None, None)
                }
            };
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
            return (None, None);
        }
        (Run::open(&dir).ok(), None)
    }

    /// What the run's journal says (a read failure is reported here, as it happens), and its
    /// events for back-off counting.
    async fn read_run(&self, run: &Run) -> (RunView, Vec<(String, Option<String>)>) {
        match run_facts(run).await {
            Ok(f) => {
                let run_json = run.metadata().unwrap_or(Value::Null);
                let view = RunView::Read {
                    state: f.state,
                    pending_kinds: f.pending_kinds,
                    only_breakpoints: f.only_breakpoints,
                    current_effect: f.current_effect,
                    sealed: f.sealed,
                    completion_proof: completion_proof(&run_json),
                };
                (view, f.events)
            }
            Err(e) => {
                errln!(
                    "[hook:run] stop: run state unknown for {}: {e:#}",
                    run.dir.display()
                );
                (RunView::Unreadable, Vec::new())
            }
        }
    }

    /// Lets the agent stop: says why (stderr), journals, ends the session when the decision
    /// says so, prints `{}`.
    async fn approve(
        &self,
        sid: &str,
        path: &Path,
        mut file: SessionFile,
        seen: &RunSeen,
        a: Approval,
    ) -> u8 {
        match a.reason {
            Reason::SessionInactive | Reason::NoRunId => self.note(a.reason.as_str()),
            Reason::RunUnresolved => errln!(
                "[hook:run] stop: cannot resolve run {} of session {sid}; allowing the stop",
                file.state.run_id
            ),
            _ => {}
        }
        if let (Some(fields), Some(run), None) = (&a.journal, &seen.run, &seen.remote) {
            let extra = state_fields(fields);
            let iteration = file.state.iteration;
            self.journal(run, sid, iteration, "approve", a.reason.as_str(), extra)
                .await;
        }
        if a.deactivate {
            self.deactivate(&mut file, path, a.reason.as_str());
        }
        allow();
        a.exit_code
    }

    /// Blocks the stop: the session file moves to the next iteration, the hook backs off on the
    /// effect the run waits on, journals and prints the block decision.
    async fn continue_loop(
        &self,
        sid: &str,
        path: &Path,
        mut file: SessionFile,
        seen: &RunSeen,
        c: Continuation,
    ) -> u8 {
        let iteration = file.state.iteration;
        file.state.iteration = c.next;
        file.state.last_iteration_at = c.last_iteration_at;
        file.state.iteration_times = c.iteration_times;
        if let Err(m) = file.write(path) {
            errln!("[hook:run] stop: cannot update the session file: {m}");
        }
        // The run was found before the loop could continue; journaling is best effort.
        if let Some(run) = &seen.run {
            let backoff = match &c.backoff_effect {
                Some(effect) => Some(
                    self.backoff(run, seen.remote.as_ref(), effect, &seen.events)
                        .await,
                ),
                None => None,
            };
            if seen.remote.is_some() {
                block(&self.harness, &c.reason, &c.system_message);
                return 0;
            }
            let mut extra = state_fields(&c.fields);
            if let Some(b) = &backoff {
                extra.insert("effectId".into(), json!(b.effect_id));
                extra.insert("hookBackoffFireCount".into(), json!(b.fire_count));
                extra.insert("hookBackoffDelaySeconds".into(), js_number(b.delay_seconds));
                extra.insert("hookBackoffInterrupted".into(), json!(b.interrupted));
            }
            self.journal(run, sid, iteration, "block", "continue_loop", extra)
                .await;
        }
        block(&self.harness, &c.reason, &c.system_message);
        0
    }

    fn deactivate(&self, file: &mut SessionFile, path: &Path, reason: &str) {
        file.state.active = false;
        file.state.set_metadata("hookExitReason", reason);
        file.state.set_metadata("hookExitedAt", now_ts());
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
    async fn backoff(
        &self,
        run: &Run,
        remote: Option<&Remote>,
        effect_id: &str,
        events: &[(String, Option<String>)],
    ) -> Backoff {
        let fire_count = prior_fires(events, effect_id);
        let base = positive_env(self.cli, "BABYSITTER_HOOK_BACKOFF_BASE", 10.0);
        let cap = positive_env(self.cli, "BABYSITTER_HOOK_BACKOFF_CAP", 300.0);
        let planned = (base * 3f64.powi(i32::try_from(fire_count).unwrap_or(i32::MAX))).min(cap);
        let start = Instant::now();
        let mut interrupted = false;
        let poll = (planned / 10.0).clamp(0.001, 1.0);
        while start.elapsed().as_secs_f64() < planned {
            let remaining = planned - start.elapsed().as_secs_f64();
            tokio::time::sleep(Duration::from_secs_f64(poll.min(remaining.max(0.0)))).await;
            // A run on an orchestrator is read again: its copy here does not change.
            let fresh = match remote {
                Some(r) => match r.open(&run.dir).await {
                    Ok(run) => Some(run),
                    Err(_) => break,
                },
                None => None,
            };
            let still = fresh
                .as_ref()
                .unwrap_or(run)
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

    /// Missing session file: the live runs that journaled this session decide
    /// ([`decide::recover`]).
    async fn recover(&self, sid: String, path: PathBuf) -> Session {
        let mut candidates = self.claiming_runs(&sid).await;
        let ids: Vec<&str> = candidates.iter().map(|(r, _)| r.id.as_str()).collect();
        match decide::recover(&sid, &ids) {
            Recovery::Nothing => {
                self.note("no_session_file");
                allow();
                Session::Answered(0)
            }
            Recovery::Recreate(i) => {
                let (run, state) = candidates.swap_remove(i);
                let file = recreated_session(&run, state);
                if let Err(m) = file.write(&path) {
                    errln!("[hook:run] stop: cannot recreate the session file: {m}");
                }
                errln!(
                    "[hook:run] stop: recovered missing session file {} from run {}",
                    path.display(),
                    run.id
                );
                Session::Found {
                    sid,
                    path,
                    file: Box::new(file),
                }
            }
            Recovery::Ambiguous {
                reason,
                system_message,
            } => {
                let n = ids.len();
                errln!(
                    "[hook:run] stop: session {sid} has no state file and {n} active runs claim it ({}); blocking until it is re-associated",
                    ids.join(", ")
                );
                for (run, state) in &candidates {
                    let mut extra = state_fields(&StateFields {
                        run_state: state.as_str(),
                        pending_kinds: String::new(),
                        has_promise: false,
                    });
                    extra.insert("candidateRunIds".into(), json!(ids));
                    self.journal(run, &sid, 0, "block", "ambiguous_session_recovery", extra)
                        .await;
                }
                block(&self.harness, &reason, &system_message);
                Session::Answered(0)
            }
        }
    }

    /// The live runs whose journal names this session (for this harness, or for none).
    async fn claiming_runs(&self, sid: &str) -> Vec<(Run, ObservedState)> {
        let mut candidates = Vec::new();
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
        candidates
    }
}

/// The session file recreated for the one live run that claims a session.
fn recreated_session(run: &Run, state: ObservedState) -> SessionFile {
    let run_json = run.metadata().unwrap_or(Value::Null);
    let mut st = SessionState::new(DEFAULT_MAX_ITERATIONS, &run.id);
    st.run_dir = Some(run.dir.display().to_string());
    st.set_metadata("recoveredFromMissingSessionFile", "true");
    st.set_metadata("missingSessionRecoveredAt", now_ts());
    st.set_metadata("missingSessionRecoverySource", "stop-hook");
    st.set_metadata("missingSessionRecoveryRunState", state.as_str());
    SessionFile {
        state: st,
        prompt: run_json
            .get("prompt")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
    }
}

struct Backoff {
    effect_id: String,
    fire_count: u32,
    delay_seconds: f64,
    interrupted: bool,
}

/// `runState`, `pendingKinds`, `hasPromise` in `STOP_HOOK_INVOKED`'s order.
fn state_fields(f: &StateFields) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("runState".into(), json!(f.run_state));
    m.insert("pendingKinds".into(), json!(f.pending_kinds));
    m.insert("hasPromise".into(), json!(f.has_promise));
    m
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
