//! `run:iterate` (spec §5.3.3): one engine iteration under the run's lock, reported as the
//! reference's `RunIterateResult` (pretty JSON) or its one-line text form.
//!
//! - B2: each iteration that runs the process appends `RUN_ITERATION {iteration}` first (the
//!   reference already counts these events), so `iterationCount` / `iteration` count calls.
//!   An iterate of a finished run replays the terminal state and appends nothing.
//! - Runtime hooks ([`crate::compat::runtime_hooks`]): the reference's sequence; the second
//!   `on-iteration-start` (with the pending effects) may decide `action` / `reason` / `count` /
//!   `until`. B12: `metadata.hookStatus` says `no-hooks-configured` when no hook ran (the
//!   reference says `executed` on completion whether or not any did).
//! - Exit codes stay the reference's (B6 allows it): 1 for `halted` and for errors, else 0.

use babysitter_engine::{IterationStatus, lifecycle};
use babysitter_harness_launcher::hooks::Hooks;
use babysitter_journal::{EventType, StoredEvent};
use serde_json::{Map, Value, json};

use crate::compat::cli::Cli;
use crate::compat::output;
use crate::compat::run_dir::Run;
use crate::compat::runtime_hooks::fire;
use crate::compat::{client, runtime_hooks, usage};
use babysitter_engine::lifecycle::completion_proof;

/// The reference's reason for a waiting iteration (`deriveIterationReason` without hooks).
fn waiting_reason(actions: &[Value]) -> String {
    let mut kinds: Vec<&str> = Vec::new();
    for a in actions {
        let k = a.get("kind").and_then(Value::as_str).unwrap_or("unknown");
        if !kinds.contains(&k) {
            kinds.push(k);
        }
    }
    match kinds.as_slice() {
        [] => "no-pending-effects".into(),
        ["breakpoint"] => "breakpoint-waiting".into(),
        ["sleep"] => "sleep-waiting".into(),
        [k] => format!("{k}-pending"),
        _ => {
            kinds.sort_unstable();
            format!("mixed-pending:{}", kinds.join(","))
        }
    }
}

/// Drops keys a JS object would not have had (`undefined` never serialises as `null`).
fn clean_action(mut a: Value) -> Value {
    if let Value::Object(m) = &mut a {
        m.retain(|k, v| !(v.is_null() && k != "taskDef"));
    }
    a
}

/// What the iteration ended in, in the reference's terms.
struct Outcome {
    status: &'static str,
    reason: String,
    next_actions: Option<Vec<Value>>,
    payload: Option<Value>,
    completion_proof: Option<String>,
    cache_reason: Option<&'static str>,
}

/// What the CLI wrapper's hooks made of an iteration (by default: nothing ran).
struct Decided {
    action: String,
    count: Option<Value>,
    until: Option<Value>,
    hook_status: &'static str,
}

impl Default for Decided {
    fn default() -> Self {
        Decided {
            action: "none".into(),
            count: None,
            until: None,
            hook_status: "no-hooks-configured",
        }
    }
}

/// The reference's `parseHookDecision`: a hook output object (or JSON text of one).
fn decision(output: Option<&Value>) -> Map<String, Value> {
    match output {
        Some(Value::Object(m)) => m.clone(),
        Some(Value::String(s)) => match serde_json::from_str(s) {
            Ok(Value::Object(m)) => m,
            _ => Map::new(),
        },
        _ => Map::new(),
    }
}

/// The CLI wrapper's hooks after an iteration (the reference's `runIterate`): for a waiting run
/// `on-iteration-start` with the pending effects, whose output may set `action`, `reason`,
/// `count` and `until` (`executed-tasks` → status `executed`), then `on-iteration-end`; for a
/// finished one `on-iteration-end` alone (none after a process error, as the reference).
async fn wrapper_hooks(
    cli: &Cli<'_>,
    hooks: &Hooks,
    run_id: &str,
    iteration: u64,
    outcome: &mut Outcome,
    runtime_error: bool,
) -> Decided {
    let mut d = Decided::default();
    if outcome.status == "waiting" {
        // Copied only when a hook will see them (a fan-out's hundreds of actions).
        let pending = &outcome.next_actions;
        let start = fire(cli, hooks, "on-iteration-start", || {
            let pending = pending.clone().unwrap_or_default();
            json!({"runId": run_id, "iteration": iteration, "status": "waiting", "pending": pending})
        })
        .await;
        if let Some(r) = &start {
            d.hook_status = r.status();
            let m = decision(r.output.as_ref());
            if let Some(a) = m.get("action").and_then(Value::as_str) {
                d.action = a.to_owned();
            }
            d.count = m.get("count").filter(|v| v.is_number()).cloned();
            d.until = m.get("until").filter(|v| v.is_number()).cloned();
            match m.get("reason").and_then(Value::as_str) {
                Some(r) => outcome.reason = r.to_owned(),
                None if d.action == "executed-tasks"
                    && matches!(
                        outcome.reason.as_str(),
                        "node-pending" | "orchestrator_task-pending"
                    ) =>
                {
                    outcome.reason = "auto-runnable-tasks".into();
                }
                None => {}
            }
            if d.action == "executed-tasks" {
                outcome.status = "executed";
            }
        }
        let (action, reason, count) = (&d.action, &outcome.reason, &d.count);
        let status = outcome.status;
        fire(cli, hooks, "on-iteration-end", || {
            let mut p = json!({"runId": run_id, "iteration": iteration, "action": action,
                               "status": status, "reason": reason});
            if let Some(c) = count {
                p["count"] = c.clone();
            }
            p
        })
        .await;
        return d;
    }
    if runtime_error || !matches!(outcome.status, "completed" | "failed" | "halted") {
        return d;
    }
    let (status, reason, payload) = (outcome.status, &outcome.reason, &outcome.payload);
    if let Some(r) = fire(cli, hooks, "on-iteration-end", || {
        let mut p = json!({"runId": run_id, "iteration": iteration, "action": "none",
                           "status": status, "reason": reason});
        if let Some(pl) = payload {
            p["payload"] = pl.clone();
        }
        p
    })
    .await
    {
        d.hook_status = r.status();
    }
    d
}

fn terminal_outcome(ev: Option<&StoredEvent>, run_json: &Value) -> Outcome {
    let ty = ev.map(|e| e.body.kind.clone());
    let data = ev.map(|e| &e.body.data);
    let mut out = Outcome {
        status: "failed",
        reason: "failed".into(),
        next_actions: None,
        payload: None,
        completion_proof: None,
        cache_reason: None,
    };
    match ty {
        Some(EventType::RunCompleted) => {
            out.status = "completed";
            out.reason = "completed".into();
            out.completion_proof = Some(completion_proof(run_json));
        }
        Some(EventType::RunHalted) => {
            out.status = "halted";
            out.reason = data
                .and_then(|d| d.get("reason"))
                .and_then(Value::as_str)
                .unwrap_or("halted")
                .to_owned();
            out.payload = data
                .and_then(|d| d.get("payload"))
                .filter(|p| p.is_object())
                .cloned();
        }
        Some(EventType::ProcessRuntimeError) => {
            let msg = data
                .and_then(|d| d.pointer("/error/message"))
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            out.reason = format!("process-error: {msg}");
        }
        _ => {}
    }
    out
}

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let Some(run_dir) = cli.run_dir() else {
        errln!("{}", usage::USAGE);
        return Ok(1);
    };
    cli.verbose(
        "run:iterate",
        &[
            ("runDir", Some(run_dir.display().to_string())),
            (
                "iteration",
                cli.args.number("--iteration").map(|n| n.to_string()),
            ),
            ("json", Some(cli.args.json().to_string())),
            ("verbose", Some("true".into())),
        ],
    );
    match iterate(cli, &run_dir, None).await {
        Ok(done) => {
            if cli.args.json() {
                output::line(&output::pretty(&done.json));
            } else {
                for line in &done.text {
                    output::line(line);
                }
            }
            Ok(done.code)
        }
        Err(msg) => {
            errln!("[run:iterate] Error: {msg}");
            Ok(1)
        }
    }
}

/// What one `run:iterate` produced: its exit code, its `--json` document and its text lines.
pub(crate) struct Iterated {
    pub code: u8,
    pub json: Value,
    pub text: Vec<String>,
}

/// One iteration of the run in `run_dir` (`iteration`: the number to report instead of the
/// journal's count + 1, as `--iteration` gives it): the run is checked ([`open_iterable`]), the
/// process runs under the run's lock ([`run_process`]), what it ended in is decided
/// ([`outcome_of`], then the wrapper's hooks), the state cache is settled and the result is
/// reported ([`report`]).
pub(crate) async fn iterate(
    cli: &Cli<'_>,
    run_dir: &std::path::Path,
    iteration: Option<u64>,
) -> Result<Iterated, String> {
    let home = client::current();
    let (run, run_json) = open_iterable(run_dir).await?;
    let _guard = home
        .hold(&run, cli.lock_timeout())
        .await
        .map_err(|e| e.to_string())?;
    let (count, finished) = run
        .inspect(|_, idx| {
            let terminal = idx
                .last_lifecycle
                .as_ref()
                .is_some_and(|m| m.event_type != "RUN_CREATED");
            (idx.iterations, terminal && idx.pending().next().is_none())
        })
        .await
        .map_err(|e| format!("{e:#}"))?;
    let iteration = iteration
        .or_else(|| cli.args.number("--iteration"))
        .unwrap_or(count + 1);
    if cli.args.verbose() {
        errln!(
            "[run:iterate] Starting iteration {iteration} for run {}",
            run.id
        );
    }
    let at = Position {
        iteration,
        count,
        finished,
    };
    let (mut it, hooks, run) = run_process(cli, &run, &run_json, &at).await?;
    let mut outcome = outcome_of(&run, &run_json, &mut it).await?;
    let runtime_error = outcome.cache_reason == Some("post_process_runtime_error");
    let decided = if it.status == IterationStatus::None {
        Decided::default()
    } else {
        wrapper_hooks(cli, &hooks, &run.id, iteration, &mut outcome, runtime_error).await
    };
    // Keep `state/state.json` current for the tools that read it: rebuilt with the reference's
    // reason after a terminal event, else only when it no longer matches the journal.
    run.settle_state_cache("run:iterate", outcome.cache_reason)
        .await;
    if outcome.reason.starts_with("process-error: ") {
        errln!("[run:iterate] {}", outcome.reason);
    }
    if cli.args.verbose() {
        for w in &it.warnings {
            errln!("[run:iterate] Warning: {w}");
        }
    }
    Ok(report(
        &run,
        &run_json,
        &at,
        outcome,
        &decided,
        &it.warnings,
    ))
}

/// Where an iteration stands in its run's journal.
struct Position {
    /// The number reported.
    iteration: u64,
    /// `RUN_ITERATION`s journaled before this one.
    count: u64,
    /// The run has ended and waits on nothing: the process is not run again.
    finished: bool,
}

/// The run and its `run.json`, once the engine could iterate it. These checks are the engine's
/// own, made before `RUN_ITERATION` is appended so a run that cannot iterate is left unchanged.
async fn open_iterable(run_dir: &std::path::Path) -> Result<(Run, Value), String> {
    let run = client::open(run_dir).await?;
    let run_json = run.metadata()?;
    babysitter_engine::lifecycle::iterable_entry(&run_json).map_err(str::to_owned)?;
    // The process file is checked where the process runs: here, for a run on this machine.
    if let Some(import) = run_json
        .pointer("/entrypoint/importPath")
        .and_then(Value::as_str)
        .filter(|_| run.on_disk())
    {
        let entry = crate::compat::paths::resolve(&run.dir, import);
        if let Err(e) = std::fs::metadata(&entry) {
            return Err(format!(
                "process file {} cannot be opened: {}",
                entry.display(),
                output::io_message("open", &entry, &e)
            ));
        }
    }
    Ok((run, run_json))
}

/// Runs the process once in the run's home (B2: `RUN_ITERATION` is journaled in the same append
/// as the iteration's own events; nothing for a finished run), with the orchestrator's hooks
/// around it; returns the iteration, the hooks and the run as it stands after it.
async fn run_process(
    cli: &Cli<'_>,
    run: &Run,
    run_json: &Value,
    at: &Position,
) -> Result<(babysitter_engine::Iteration, Hooks, Run), String> {
    let marker = (!at.finished).then(|| {
        let mut data = Map::new();
        data.insert("iteration".into(), json!(at.count + 1));
        crate::compat::run_dir::new_event(EventType::RunIteration, data, run_json, cli.env)
    });
    let hooks = runtime_hooks::for_run(cli, &run.dir);
    let began = tokio::time::Instant::now();
    if !at.finished {
        fire(
            cli,
            &hooks,
            "on-iteration-start",
            || json!({"runId": run.id, "iteration": at.iteration}),
        )
        .await;
    }
    let user = crate::compat::paths::UserFiles::of(cli.env, &cli.cwd);
    let (it, run) = client::current().iterate(run, marker, user).await?;
    orchestrator_hooks(cli, &hooks, &run, run_json, at.iteration, &it, began).await;
    Ok((it, hooks, run))
}

/// What the iteration ended in (its next actions are moved out of `it`), reading the last
/// lifecycle event when the run has ended.
async fn outcome_of(
    run: &Run,
    run_json: &Value,
    it: &mut babysitter_engine::Iteration,
) -> Result<Outcome, String> {
    let last_lifecycle = async {
        let seq = run
            .inspect(|_, idx| idx.last_lifecycle.as_ref().map_or(0, |m| m.seq))
            .await?;
        run.event(seq).await
    };
    Ok(match it.status {
        IterationStatus::Waiting => {
            let actions: Vec<Value> = std::mem::take(&mut it.next_actions)
                .into_iter()
                .map(clean_action)
                .collect();
            Outcome {
                status: "waiting",
                reason: waiting_reason(&actions),
                next_actions: Some(actions),
                payload: None,
                completion_proof: None,
                cache_reason: None,
            }
        }
        IterationStatus::Completed => Outcome {
            status: "completed",
            reason: "completed".into(),
            next_actions: None,
            payload: None,
            completion_proof: Some(completion_proof(run_json)),
            cache_reason: lifecycle::iteration_cache_reason(it.status, false),
        },
        IterationStatus::Halted => {
            let ev = last_lifecycle.await.map_err(|e| format!("{e:#}"))?;
            let mut o = terminal_outcome(ev.as_ref(), run_json);
            o.reason = it.reason.clone().unwrap_or(o.reason);
            o.cache_reason = lifecycle::iteration_cache_reason(it.status, false);
            o
        }
        IterationStatus::Failed => {
            let ev = last_lifecycle.await.map_err(|e| format!("{e:#}"))?;
            let runtime_error = ev
                .as_ref()
                .is_some_and(|e| e.body.kind == EventType::ProcessRuntimeError);
            Outcome {
                status: "failed",
                reason: it.reason.clone().unwrap_or_else(|| "failed".into()),
                next_actions: None,
                payload: None,
                completion_proof: None,
                cache_reason: lifecycle::iteration_cache_reason(it.status, runtime_error),
            }
        }
        IterationStatus::None => {
            let ev = last_lifecycle.await.map_err(|e| format!("{e:#}"))?;
            terminal_outcome(ev.as_ref(), run_json)
        }
    })
}

/// The reference's `RunIterateResult` and its text lines; exit 1 for `halted`.
fn report(
    run: &Run,
    run_json: &Value,
    at: &Position,
    mut outcome: Outcome,
    decided: &Decided,
    warnings: &[String],
) -> Iterated {
    let (iteration, count) = (at.iteration, at.count);
    let process_id = run_json
        .get("processId")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut m = Map::new();
    m.insert("iteration".into(), json!(iteration));
    m.insert("iterationCount".into(), json!(count));
    m.insert("status".into(), json!(outcome.status));
    m.insert("action".into(), json!(decided.action));
    m.insert("reason".into(), json!(outcome.reason));
    if let Some(c) = &decided.count {
        m.insert("count".into(), c.clone());
    }
    if let Some(u) = &decided.until {
        m.insert("until".into(), u.clone());
    }
    if let Some(a) = outcome.next_actions.take() {
        m.insert("nextActions".into(), Value::Array(a));
    }
    if let Some(p) = &outcome.completion_proof {
        m.insert("completionProof".into(), json!(p));
    }
    if let Some(p) = &outcome.payload {
        m.insert("payload".into(), p.clone());
    }
    if !warnings.is_empty() {
        m.insert("warnings".into(), json!(warnings));
    }
    m.insert(
        "metadata".into(),
        json!({"runId": run.id, "processId": process_id, "hookStatus": decided.hook_status}),
    );
    let progress = if count > 0 {
        format!(" ({count} completed)")
    } else {
        String::new()
    };
    let count_text = decided
        .count
        .as_ref()
        .map(|c| format!(" count={c}"))
        .unwrap_or_default();
    let mut text = vec![format!(
        "[run:iterate] iteration={iteration}{progress} status={} action={}{count_text} reason={}",
        outcome.status, decided.action, outcome.reason
    )];
    if let Some(p) = &outcome.completion_proof {
        text.push(format!("[run:iterate] completionProof={p}"));
    }
    Iterated {
        code: if outcome.status == "halted" { 1 } else { 0 },
        json: Value::Object(m),
        text,
    }
}

/// The hooks the reference's orchestrator calls around the process: `task.created` for each
/// effect requested (after they are journaled: a denial here cannot undo them, and is reported),
/// `babysitter-log` for each new `ctx.log` line, `on-run-complete` / `on-run-fail` when the run
/// ended in this iteration, `on-iteration-end`.
async fn orchestrator_hooks(
    cli: &Cli<'_>,
    hooks: &Hooks,
    run: &Run,
    run_json: &Value,
    iteration: u64,
    it: &babysitter_engine::Iteration,
    began: tokio::time::Instant,
) {
    let process_id = run_json
        .get("processId")
        .and_then(Value::as_str)
        .unwrap_or("");
    if hooks.any_for("task.created") {
        for (effect_id, task) in it.requested.iter().zip(&it.requested_tasks) {
            let t: Value = serde_json::from_slice(task).unwrap_or(Value::Null);
            let r = fire(cli, hooks, "task.created", || {
                json!({"runId": run.id, "processId": process_id,
                       "task_id": effect_id, "task_kind": t["kind"], "task_title": t["title"],
                       "task_labels": t["labels"], "taskId": t["taskId"], "effectId": effect_id,
                       "kind": t["kind"], "title": t["title"], "labels": t["labels"]})
            })
            .await;
            if let Some(why) = r.as_ref().and_then(|r| r.blocked()) {
                errln!("[run:iterate] {why} (effect {effect_id} was already requested)");
            }
        }
    }
    // `babysitter-log`: the line's text (label first) is the whole payload, as the reference's
    // `ctx.log` sends it.
    for l in &it.logs {
        fire(cli, hooks, "babysitter-log", || {
            Value::String(match &l.label {
                Some(label) => format!("{label} {}", l.message),
                None => l.message.clone(),
            })
        })
        .await;
    }
    let duration = began.elapsed().as_millis() as u64;
    let status = match it.status {
        IterationStatus::Completed => {
            fire(cli, hooks, "on-run-complete", || {
                json!({"runId": run.id, "status": "completed", "output": it.output, "duration": duration})
            })
            .await;
            "completed"
        }
        IterationStatus::Failed => {
            let message = it
                .error
                .as_ref()
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .or(it.reason.as_deref())
                .unwrap_or("Unknown error");
            fire(cli, hooks, "on-run-fail", || {
                json!({"runId": run.id, "status": "failed", "error": message, "duration": duration})
            })
            .await;
            "failed"
        }
        IterationStatus::Halted => "halted",
        IterationStatus::Waiting => "waiting",
        IterationStatus::None => return,
    };
    fire(
        cli,
        hooks,
        "on-iteration-end",
        || json!({"runId": run.id, "iteration": iteration, "status": status}),
    )
    .await;
}
