//! Runs one `agent` task: picks the harness and provider, routes (maybe through a transport
//! proxy), launches the harness headless in the task's own project and home directories,
//! streams its native output through the parser as universal events while it runs, and turns
//! the end of the run into the task's result with usage and cost.
//!
//! Harness output is outside input: nothing in it can panic the worker, a run that prints
//! nothing understandable is a task error naming that, and the process group is killed on
//! timeout and cancellation (and after exit, so no stray child outlives its task).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use babysitter_common::agent_session::SavedSession;
use babysitter_common::telemetry::W3cContext;
use babysitter_proto::common::v1 as cpb;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::events::{Envelope, Ev};
use crate::exec::{Attempt, Done, read_capped};
use crate::group;
use crate::harness::{self, Detected, HarnessKind, LaunchRequest};
use crate::outcome::{self, Price};
use crate::parse::LineParser;
use crate::provider::{self, Provider, RemoteProxy};
use crate::quota;
use crate::session::{self, Saver};
use crate::workspace;

pub use crate::agent_spec::AgentSpec;

/// Largest output kept per stream (the orchestrator stores logs over 1 MiB as blobs).
const MAX_OUTPUT: usize = 16 * 1024 * 1024;
/// Longest stdout line parsed as one; a longer one is cut into pieces of this size (each then
/// unparsed) so a harness printing without newlines cannot grow the worker's memory.
const MAX_LINE: u64 = 1024 * 1024;
/// How much of stdout / stderr an error message quotes.
const TAIL: usize = 2000;

/// What the worker knows for agent tasks.
#[derive(Debug, Clone)]
pub struct AgentSettings {
    /// Harnesses detected on this machine (only these are advertised).
    pub harnesses: Vec<Detected>,
    pub providers: BTreeMap<String, Provider>,
    pub default_provider: String,
    pub remote_proxy: Option<RemoteProxy>,
    pub default_timeout: Duration,
    pub prices: BTreeMap<String, Price>,
    /// Added to every harness's environment (e.g. an auditing `HTTPS_PROXY`).
    pub extra_env: BTreeMap<String, String>,
    /// PATH for the harnesses (npm shims need `node`).
    pub path_env: OsString,
    pub as_root: bool,
    /// Where a task that names no workspace works: `None` on a worker (a fresh directory per
    /// attempt), the project `babysitter run` was started in when it runs tasks itself.
    pub default_workspace: Option<std::path::PathBuf>,
    /// How long a task whose harness was stopped by a rate limit or quota waits before its
    /// next attempt resumes it ([`crate::quota`]).
    pub quota_retry: Duration,
}

/// A task to give back instead of completing: its harness was stopped by a quota window.
#[derive(Debug, Clone, PartialEq)]
pub struct Release {
    pub reason: String,
    pub retry_after: Duration,
}

/// What an agent task produced.
#[derive(Debug)]
pub struct AgentDone {
    pub done: Done,
    pub usage: Option<cpb::TaskUsage>,
    /// One per model request, when the task's in-process transport proxy carried its traffic.
    pub requests: Vec<cpb::RequestUsage>,
    pub metadata: Value,
    /// Set when the harness was stopped by a rate limit or quota: `done` is its error, for
    /// when the task cannot be given back.
    pub release: Option<Release>,
    /// The attempt's events for the record (see [`KEPT_EVENTS`]).
    pub events: Vec<cpb::AgentEvent>,
}

fn fail(name: &str, message: String, data: Value) -> Done {
    Done {
        outcome: Err(json!({"name": name, "message": message, "data": data})),
        stdout: None,
        stderr: None,
    }
}

fn tail(s: &str) -> &str {
    let start = s.len().saturating_sub(TAIL);
    let start = (start..=s.len())
        .find(|i| s.is_char_boundary(*i))
        .unwrap_or(s.len());
    &s[start..]
}

/// Events of one attempt kept for its completion (the record the orchestrator stores); the
/// live stream has them all.
pub const KEPT_EVENTS: usize = 2000;
/// Payload bytes of the kept events: the completion carries them beside up to 16 MiB of output,
/// well inside a gRPC message (64 MiB), however much a verbose agent prints.
pub const KEPT_BYTES: usize = 8 * 1024 * 1024;

/// Sends events with envelopes; a closed channel (no reporter) only drops them. Keeps the first
/// [`KEPT_EVENTS`] (and [`KEPT_BYTES`]) that are not `item.delta` for the record: a completed
/// item carries the text its deltas streamed, so the record loses nothing but the pace.
struct Events<'a> {
    env: Envelope,
    tx: &'a mpsc::Sender<cpb::AgentEvent>,
    count: u64,
    kept: Vec<cpb::AgentEvent>,
    kept_bytes: usize,
}

impl Events<'_> {
    async fn send(&mut self, evs: Vec<Ev>, native: Option<&str>) {
        for ev in evs {
            self.count += 1;
            let e = self.env.wrap(ev, native);
            let size = e.data_json.len() + e.raw_json.len();
            if e.r#type != "item.delta"
                && self.kept.len() < KEPT_EVENTS
                && self.kept_bytes + size <= KEPT_BYTES
            {
                self.kept_bytes += size;
                self.kept.push(e.clone());
            }
            let _ = self.tx.send(e).await;
        }
    }
}

/// One attempt at a task a harness executes.
#[derive(Debug, Clone, Copy)]
pub struct AgentTask<'a> {
    /// `agent`, `skill` or `orchestrator_task` ([`babysitter_common::kinds::HARNESS_KINDS`]).
    pub kind: &'a str,
    pub def: &'a Value,
    /// The attempt's own directory: the harness's home, and its project unless the task (or
    /// [`AgentSettings::default_workspace`]) names one.
    pub work_dir: &'a Path,
    pub attempt: Attempt<'a>,
    /// The lease's time limit, when the task names none.
    pub timeout: Option<Duration>,
    /// The saved session this task continues: an earlier attempt's, or the one its named
    /// session (`agent.session`) holds.
    pub resume: Option<&'a SavedSession>,
    /// Where the harness's session goes while it runs (see [`crate::session::Saver`]).
    pub saves: Option<&'a mpsc::Sender<SavedSession>>,
}

/// What a harness resuming a session of its own task is told.
pub const CONTINUE_PROMPT: &str = "Your earlier session on this task was interrupted before it finished (the machine running it stopped). Continue from where it stopped: do not redo steps whose results are already in this conversation. When you are done, give your final answer as the task asks.";

/// Runs a harness task (one attempt at it); `<effect id>-<attempt>` names its universal event
/// stream, and the harness gets the attempt's environment.
pub async fn run(
    settings: &AgentSettings,
    task: AgentTask<'_>,
    events: &mpsc::Sender<cpb::AgentEvent>,
    cancel: &CancellationToken,
) -> AgentDone {
    let AgentTask {
        kind,
        def,
        work_dir,
        attempt,
        timeout: assignment_timeout,
        resume,
        saves,
    } = task;
    let no_usage = |done| AgentDone {
        done,
        usage: None,
        requests: Vec::new(),
        metadata: Value::Null,
        release: None,
        events: Vec::new(),
    };
    let spec = match AgentSpec::from_task(kind, def, settings.default_workspace.as_ref()) {
        Ok(s) => s,
        Err(e) => {
            return no_usage(fail(
                "InvalidTaskError",
                format!("invalid {kind} task: {e}"),
                Value::Null,
            ));
        }
    };
    let detected = match &spec.harness {
        Some(name) => {
            let kind = HarnessKind::from_name(name);
            match settings.harnesses.iter().find(|d| Some(d.kind) == kind) {
                Some(d) => d.clone(),
                None => {
                    return no_usage(fail(
                        "HarnessUnavailableError",
                        format!("harness `{name}` is not installed on this worker"),
                        Value::Null,
                    ));
                }
            }
        }
        None => match resume
            .and_then(|r| HarnessKind::from_name(&r.harness))
            .and_then(|k| settings.harnesses.iter().find(|d| d.kind == k))
            .or_else(|| settings.harnesses.first())
        {
            Some(d) => d.clone(),
            None => {
                return no_usage(fail(
                    "HarnessUnavailableError",
                    "no harness is installed on this worker".into(),
                    Value::Null,
                ));
            }
        },
    };
    let provider_name = spec
        .provider
        .clone()
        .unwrap_or_else(|| settings.default_provider.clone());
    let Some(provider) = settings.providers.get(&provider_name) else {
        let e = provider::RouteError::UnknownProvider(provider_name);
        return no_usage(fail("ProviderError", e.to_string(), Value::Null));
    };
    let Some(model) = spec.model.clone().or_else(|| provider.model.clone()) else {
        let e = provider::RouteError::NoModel(provider_name);
        return no_usage(fail("ProviderError", e.to_string(), Value::Null));
    };
    let routed = match provider::route(
        detected.kind,
        provider,
        &model,
        settings.remote_proxy.as_ref(),
    )
    .await
    {
        Ok(r) => r,
        Err(e) => return no_usage(fail("ProviderError", e.to_string(), Value::Null)),
    };
    let session_id = &format!("{}-{}", attempt.effect_id, attempt.number);
    let prepared = match workspace::prepare(&spec.workspace, work_dir, session_id).await {
        Ok(p) => p,
        Err(e) => return no_usage(fail("WorkspaceError", e, Value::Null)),
    };
    let project = prepared.dir.clone();
    let home = work_dir.join("home");
    // A session of another harness cannot be resumed by this one: the task starts anew.
    let resume = resume.filter(|r| HarnessKind::from_name(&r.harness) == Some(detected.kind));
    if let Some(r) = resume
        && let Err(e) = session::restore(detected.kind, &home, &project, &r.files).await
    {
        prepared.finish().await;
        return no_usage(fail(
            "WorkerError",
            format!("cannot restore the saved {} session: {e}", detected.kind),
            Value::Null,
        ));
    }
    let resume_target =
        resume.map(|r| session::resume_target(detected.kind, &home, &r.native_session_id));
    // Its own session goes on where it stopped; another task's gets this task's prompt.
    let prompt = match resume {
        Some(r) if r.is_of(attempt.effect_id) => CONTINUE_PROMPT.to_owned(),
        _ => spec.full_prompt(),
    };
    // The harness process's span (a child of the task's): its context is in the harness's
    // environment and on its model requests, so a proxy's request spans hang under it.
    let process_span = tracing::info_span!(
        "harness.process",
        harness = %detected.kind,
        provider = %provider.name,
        model = %model,
        exit_code = tracing::field::Empty,
    );
    let trace = W3cContext::of_span(&process_span);
    let req = LaunchRequest {
        prompt: &prompt,
        endpoint: &routed.endpoint,
        project: &project,
        home: &home,
        max_turns: spec.max_turns,
        output_schema: spec.output_schema.as_ref(),
        as_root: settings.as_root,
        trace: trace.as_ref(),
        resume: resume_target.as_deref(),
    };
    let plan = match write_plan(detected.kind, &req, &home).await {
        Ok(p) => p,
        Err(done) => {
            prepared.finish().await;
            return no_usage(done);
        }
    };
    let via = routed.via_proxy.map(|(f, u)| format!("{f}->{u}"));
    tracing::info!(harness = %detected.kind, provider = %provider.name, %model, via_proxy = ?via, "launching harness");
    let mut evs = Events {
        env: Envelope::new(session_id),
        tx: events,
        count: 0,
        kept: Vec::new(),
        kept_bytes: 0,
    };
    evs.send(
        vec![Ev {
            kind: "session.started",
            data: json!({"metadata": {"harness": detected.kind.name(), "harness_version": detected.version,
                                      "provider": provider.name, "model": model, "via_proxy": via}}),
            synthetic: true,
        }],
        None,
    )
    .await;

    let timeout = spec
        .timeout
        .or(assignment_timeout)
        .unwrap_or(settings.default_timeout);
    // The harness's whole environment: for it, and for its own session commands.
    let mut env: Vec<(OsString, OsString)> = vec![("PATH".into(), settings.path_env.clone())];
    env.extend(settings.extra_env.iter().map(|(k, v)| (k.into(), v.into())));
    env.extend(attempt.env().into_iter().map(|(k, v)| (k.into(), v.into())));
    env.extend(plan.env.iter().map(|(k, v)| (k.into(), v.into())));
    let harness_command = session::HarnessCommand {
        bin: detected.path.clone(),
        env: env.clone(),
        project: project.clone(),
    };
    if resume.is_some()
        && let Err(e) = session::import(detected.kind, &home, &harness_command).await
    {
        prepared.finish().await;
        return no_usage(fail(
            "WorkerError",
            format!("cannot import the saved {} session: {e}", detected.kind),
            Value::Null,
        ));
    }
    let mut cmd = group::command(&detected.path);
    cmd.args(&plan.args)
        .current_dir(&project)
        .env_clear()
        .envs(env)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut saver = saves.map(|tx| Saver {
        kind: detected.kind,
        home: &home,
        effect_id: attempt.effect_id,
        attempt: attempt.number,
        command: Some(harness_command),
        tx,
        last: None,
        last_at: None,
    });
    let ran = supervise(
        cmd,
        detected.kind,
        timeout,
        cancel,
        &mut evs,
        saver.as_mut(),
    )
    .instrument(process_span.clone())
    .await;
    // The session as the harness left it (a follow-up task continues from here).
    if let (Some(saver), Ok((_, parser))) = (saver.as_mut(), &ran) {
        let native = parser
            .sink
            .native_session_id
            .as_deref()
            .or(resume.map(|r| r.native_session_id.as_str()));
        saver.save_if_changed(native, true).await;
    }
    if let Ok((r, _)) = &ran {
        process_span.record("exit_code", r.code);
    }
    drop(process_span);
    let requests = match routed.guard {
        Some(g) => g.stop().await,
        None => Vec::new(),
    };
    let workspace_meta = prepared.finish().await;
    let (ran, mut parser) = match ran {
        Ok(r) => r,
        Err(e) => {
            return no_usage(fail(
                "HarnessStartError",
                format!(
                    "cannot start {} ({}): {e}",
                    detected.kind,
                    detected.path.display()
                ),
                Value::Null,
            ));
        }
    };
    let out = parser.sink.outcome.clone();
    let native = parser.sink.native_session_id.clone();
    let ended_reason = if ran.timed_out || ran.cancelled {
        "terminated"
    } else if ran.code == Some(0) && out.failure.is_none() {
        "completed"
    } else {
        "error"
    };
    let mut end = parser.take();
    end.push(Ev {
        kind: "session.ended",
        data: json!({"reason": ended_reason,
                     "terminated_by": if ran.timed_out || ran.cancelled { "daemon" } else { "agent" },
                     "exit_code": ran.code, "stderr": {"tail": tail(&ran.stderr), "truncated": ran.stderr.len() > TAIL}}),
        synthetic: true,
    });
    evs.send(end, native.as_deref()).await;

    let data =
        json!({"exitCode": ran.code, "stdout": tail(&ran.stdout), "stderr": tail(&ran.stderr)});
    let h = detected.kind;
    let result = if ran.cancelled {
        Err((
            "EffectCancelledError",
            format!("{h} was cancelled; its process group was killed"),
        ))
    } else if ran.timed_out {
        Err((
            "AgentTimeoutError",
            format!(
                "{h} did not finish within {} s; its process group was killed",
                timeout.as_secs()
            ),
        ))
    } else if ran.code != Some(0) {
        let why = out
            .failure
            .clone()
            .or_else(|| {
                ran.stderr
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .map(str::to_owned)
            })
            .unwrap_or_default();
        let code = ran
            .code
            .map_or("a signal".to_owned(), |c| format!("code {c}"));
        Err(("AgentExitError", format!("{h} exited with {code}: {why}")))
    } else if let Some(f) = &out.failure {
        Err(("AgentError", f.clone()))
    } else if out.recognised == 0 || !out.finished {
        Err((
            "AgentOutputError",
            format!(
                "{h} exited 0 but its output has no end-of-run event this worker understands ({} lines understood, {} not)",
                out.recognised, out.unparsed
            ),
        ))
    } else {
        outcome::value_from_answer(out.final_text.as_deref(), spec.output_schema.as_ref())
            .map_err(|e| ("AgentOutputError", format!("{h}: {e}")))
    };
    // Stopped by a quota window (not by us, not for the task): given back to resume later.
    let release = match &result {
        Err(("AgentExitError" | "AgentError", _)) => {
            quota::stop_reason(&out, &ran.stderr).map(|why| Release {
                reason: format!("{h} was stopped by a rate limit or quota: {why}"),
                retry_after: settings.quota_retry,
            })
        }
        _ => None,
    };
    let outcome = match result {
        Ok(v) => Ok(v),
        Err((name, message)) => Err(json!({"name": name, "message": message, "data": data})),
    };
    let usage = cpb::TaskUsage {
        provider: provider.name.clone(),
        model: model.clone(),
        input_tokens: out.tokens.input,
        output_tokens: out.tokens.output,
        cache_read_tokens: out.tokens.cache_read,
        cache_write_tokens: out.tokens.cache_write,
        cost_usd: outcome::cost_usd(&settings.prices, &model, out.tokens),
    };
    AgentDone {
        done: Done {
            outcome,
            stdout: Some(ran.stdout),
            stderr: Some(ran.stderr),
        },
        usage: Some(usage),
        requests: outcome::priced_requests(&settings.prices, &provider.name, requests),
        metadata: json!({"harness": h.name(), "harnessVersion": detected.version,
                         "provider": provider.name, "model": model, "reportedModel": out.model,
                         "viaProxy": via, "nativeSessionId": native, "exitCode": ran.code,
                         "events": evs.count, "unparsedEvents": out.unparsed,
                         "workspace": workspace_meta,
                         "session": {"name": spec.session,
                                     "resumed": resume.map(|r| json!({"effectId": r.effect_id, "attempt": r.attempt,
                                                                      "nativeSessionId": r.native_session_id}))}}),
        release,
        events: evs.kept,
    }
}

/// The launch plan of `kind`, its home and files written.
async fn write_plan(
    kind: HarnessKind,
    req: &LaunchRequest<'_>,
    home: &Path,
) -> Result<harness::LaunchPlan, Done> {
    let Some(plan) = harness::plan(kind, req) else {
        let msg = format!(
            "harness `{kind}` cannot speak {} (routing error)",
            req.endpoint.protocol
        );
        return Err(fail("ProviderError", msg, Value::Null));
    };
    let cannot = |what: &str, p: &Path, e: std::io::Error| {
        fail(
            "WorkerError",
            format!("cannot {what} {}: {e}", p.display()),
            Value::Null,
        )
    };
    tokio::fs::create_dir_all(home)
        .await
        .map_err(|e| cannot("create", home, e))?;
    for (path, content) in &plan.files {
        if let Some(parent) = path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| cannot("create", parent, e))?;
        }
        tokio::fs::write(path, content)
            .await
            .map_err(|e| cannot("write", path, e))?;
    }
    Ok(plan)
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    timed_out: bool,
    cancelled: bool,
}

/// Starts `cmd`, parses stdout line by line into events as they come, and stops the whole
/// process group on timeout, cancellation, or after the harness exits.
async fn supervise(
    mut cmd: tokio::process::Command,
    kind: HarnessKind,
    timeout: Duration,
    cancel: &CancellationToken,
    evs: &mut Events<'_>,
    mut saver: Option<&mut Saver<'_>>,
) -> std::io::Result<(Ran, LineParser)> {
    let mut group = group::spawn(&mut cmd)?;
    let child = group.child();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take().map(|s| tokio::spawn(read_capped(s)));
    let mut parser = LineParser::new(kind);
    let mut captured = Vec::new();
    let deadline = tokio::time::Instant::now() + timeout;
    let (mut timed_out, mut cancelled) = (false, false);
    let mut save_tick = tokio::time::interval(session::SAVE_EVERY);
    save_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    if let Some(out) = stdout {
        let mut reader = tokio::io::BufReader::new(out);
        let mut line = Vec::new();
        loop {
            line.clear();
            let mut bounded = (&mut reader).take(MAX_LINE);
            tokio::select! {
                r = bounded.read_until(b'\n', &mut line) => match r {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if captured.len() < MAX_OUTPUT {
                            let take = line.len().min(MAX_OUTPUT - captured.len());
                            captured.extend_from_slice(&line[..take]);
                        }
                        parser.line(&String::from_utf8_lossy(&line));
                        let native = parser.sink.native_session_id.clone();
                        let batch = parser.take();
                        evs.send(batch, native.as_deref()).await;
                    }
                },
                _ = save_tick.tick(), if saver.is_some() => {
                    if let Some(s) = saver.as_deref_mut() {
                        s.save_if_changed(parser.sink.native_session_id.as_deref(), false).await;
                    }
                }
                () = tokio::time::sleep_until(deadline) => { timed_out = true; break; }
                () = cancel.cancelled() => { cancelled = true; break; }
            }
        }
    }
    let status = if timed_out || cancelled {
        None
    } else {
        tokio::select! {
            s = group.wait() => Some(s?),
            () = tokio::time::sleep_until(deadline) => { timed_out = true; None }
            () = cancel.cancelled() => { cancelled = true; None }
        }
    };
    // The whole group: the harness and everything it started (tool shells, MCP servers).
    let status = match status {
        Some(s) => {
            group.kill();
            s
        }
        None => group.kill_and_wait().await?,
    };
    parser.finish();
    let stderr = match stderr {
        Some(h) => h.await.unwrap_or_default(),
        None => String::new(),
    };
    Ok((
        Ran {
            code: status.code(),
            stdout: String::from_utf8_lossy(&captured).into_owned(),
            stderr,
            timed_out,
            cancelled,
        },
        parser,
    ))
}

#[cfg(test)]
#[path = "agent_tests.rs"]
mod tests;
