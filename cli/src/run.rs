//! `babysitter run <process>`: drives a process to completion on this machine, with the engine
//! and the filesystem journal in-process (babysitter's run layout, so the run can be inspected
//! and continued with the `run:*` / `task:*` commands or by the reference CLI).
//!
//! Shell and node tasks are executed here ([`exec`]); breakpoints are asked on the terminal,
//! approved with `--yes`, or approved without asking where babysitter's auto-approval rules
//! recommend it (`~/.a5c/breakpoint-approvals/rules.json`, edited with `babysitter
//! breakpoint:approve-rule`, or `--rules FILE`: the engine's advisory `autoApproval`); sleeps
//! are waited out; agent, skill and orchestrator tasks run through the harness launcher's code
//! on an installed coding-agent CLI ([`agents`]), their usage journaled as `COST_TRACKED`; with
//! no harness installed the run stops saying so (continue later with `task:post`, or
//! `babysitter run --resume`). Ctrl-C stops cleanly: running commands are killed, the run
//! stays resumable.

// The CLI's job is to print to stdout.
#![allow(clippy::print_stdout)]

mod agents;
mod budget_check;
mod subprocess;
mod ui;

use std::collections::HashMap;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail};
use babysitter_common::EnvMap;
use babysitter_common::kinds;
use babysitter_engine::commit::{Commit, TaskUsage};
use babysitter_engine::lifecycle::{self, NewRun};
use babysitter_engine::{Engine, EngineOptions, Iteration, IterationStatus};
use babysitter_harness_launcher::agent::AgentSettings;
use babysitter_harness_launcher::exec;
use babysitter_journal::fs::FsRuntime;
use babysitter_journal::store::RunFiles;
use babysitter_journal::{EventType, Journal, NewEvent};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use babysitter_journal::redact::Redactor;
use babysitter_orchestrator::service::budget::{BUDGET_KEY, Budget};
use babysitter_orchestrator::service::grpc;
use babysitter_orchestrator::service::runs::agents as agent_record;

use self::ui::Ui;
use crate::flags::{Arg, Flags};

/// Parsed `babysitter run` arguments.
#[derive(Debug, Default)]
struct Args {
    process: Option<String>,
    inputs: Option<PathBuf>,
    runs_dir: Option<PathBuf>,
    resume: Option<String>,
    harness: Option<String>,
    /// `--server URL` / `BABYSITTER_SERVER`: run on an orchestrator instead of this machine.
    server: Option<String>,
    yes: bool,
    /// `--rules FILE`: breakpoint auto-approval rules instead of `~/.a5c`'s.
    rules: Option<PathBuf>,
    json: bool,
    concurrency: usize,
    /// `--process-root DIR`: the folder the process's imports are confined to (default: the
    /// project holding the process file: the nearest folder with `.a5c/`, `.git` or
    /// `package.json`).
    process_root: Option<PathBuf>,
    /// `--budget tokens=N,cost=USD,wall=DURATION,tasks=N,agent-tasks=N,warn-at=F`.
    budget: Option<Budget>,
    /// `--config FILE` / `--set key=value`: `babysitter up`'s config, for the agent settings.
    config: Option<PathBuf>,
    sets: Vec<String>,
}

const USAGE: &str = "usage: babysitter run <process.mjs[#export]> [--inputs FILE] [--yes] [--rules FILE] [--json] [--runs-dir DIR] [--concurrency N] [--process-root DIR] [--budget tokens=N,cost=USD,wall=30m,tasks=N,agent-tasks=N,warn-at=0.8,on-exceed=fail|ask] [--harness NAME] [--config FILE] [--set launcher.agent.KEY=VALUE] [--server URL]\n       babysitter run --resume <runId> [--budget NEW-LIMITS] [--yes] [--rules FILE] [--json] [--runs-dir DIR] [--harness NAME] [--config FILE] [--server URL]";

fn parse(args: &[String]) -> Result<Args> {
    let mut a = Args {
        concurrency: 4,
        ..Args::default()
    };
    let mut flags = Flags::new(args);
    while let Some(arg) = flags.next_arg() {
        let mut value = |name: &str| flags.value(name).map_err(anyhow::Error::msg);
        match arg {
            Arg::Flag("--inputs") => a.inputs = Some(PathBuf::from(value("--inputs")?)),
            Arg::Flag("--runs-dir") => a.runs_dir = Some(PathBuf::from(value("--runs-dir")?)),
            Arg::Flag("--resume") => a.resume = Some(value("--resume")?),
            Arg::Flag("--harness") => a.harness = Some(value("--harness")?),
            Arg::Flag("--server") => a.server = Some(value("--server")?),
            Arg::Flag("--rules") => a.rules = Some(PathBuf::from(value("--rules")?)),
            Arg::Flag("--config") => a.config = Some(PathBuf::from(value("--config")?)),
            Arg::Flag("--set") => a.sets.push(value("--set")?),
            Arg::Flag("--budget") => {
                let spec = value("--budget")?;
                a.budget = Some(spec.parse().map_err(|e| anyhow!("--budget {spec}: {e}"))?);
            }
            Arg::Flag("--process-root") => {
                let dir = value("--process-root")?;
                a.process_root = Some(
                    std::fs::canonicalize(&dir)
                        .with_context(|| format!("--process-root {dir}: no such folder"))?,
                );
            }
            Arg::Flag("--concurrency") => {
                a.concurrency = value("--concurrency")?
                    .parse()
                    .context("--concurrency must be a positive number")?;
                if a.concurrency == 0 {
                    bail!("--concurrency must be at least 1");
                }
            }
            Arg::Flag("--yes" | "-y") => a.yes = true,
            Arg::Flag("--json") => a.json = true,
            Arg::Flag("--help" | "-h") => bail!("{USAGE}"),
            Arg::Flag(f) => bail!("unknown flag {f}\n{USAGE}"),
            Arg::Positional(p) => {
                if a.process.replace(p.to_owned()).is_some() {
                    bail!("one process file at a time\n{USAGE}");
                }
            }
        }
    }
    if a.process.is_none() && a.resume.is_none() {
        bail!("{USAGE}");
    }
    Ok(a)
}

pub fn main(args: &[String], env: &EnvMap, fs: FsRuntime) -> ExitCode {
    // Help asked for is an answer, on stdout, exit 0 (a usage error is exit 2, on stderr).
    if args.first().is_some_and(|a| a == "--help" || a == "-h") {
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), "{USAGE}");
        return ExitCode::SUCCESS;
    }
    let args = match parse(args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("babysitter run: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("babysitter run: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(url) = args
        .server
        .clone()
        .or_else(|| env.get_non_empty("BABYSITTER_SERVER").map(str::to_owned))
    {
        let remote = crate::remote::drive_run(
            &url,
            env,
            crate::remote::WhichRun {
                process: args.process.as_deref(),
                inputs: args.inputs.as_deref(),
                resume: args.resume.as_deref(),
                budget: args.budget.clone(),
            },
            args.yes,
            args.json,
        );
        return match runtime.block_on(remote) {
            Ok(code) => ExitCode::from(code),
            Err(e) => {
                eprintln!("babysitter run: {e:#}");
                ExitCode::FAILURE
            }
        };
    }
    let ui = Ui::new(args.json, std::io::stderr().is_terminal());
    match runtime.block_on(drive(args, env, &ui, fs)) {
        Ok(code) => code,
        Err(e) => {
            ui.error(&format!("{e:#}"));
            ExitCode::FAILURE
        }
    }
}

fn runs_dir(args: &Args, env: &EnvMap) -> Result<PathBuf> {
    let dir = match (&args.runs_dir, env.get_non_empty("BABYSITTER_RUNS_DIR")) {
        (Some(d), _) => d.clone(),
        (None, Some(d)) => PathBuf::from(d),
        (None, None) => PathBuf::from(".a5c/runs"),
    };
    let dir = if dir.is_absolute() {
        dir
    } else {
        std::env::current_dir()?.join(dir)
    };
    std::fs::create_dir_all(&dir)
        .with_context(|| format!("cannot create the runs directory {}", dir.display()))?;
    // Canonical: run.json's import path is computed relative to it (`../runs` would count the
    // `..` as a folder).
    std::fs::canonicalize(&dir)
        .with_context(|| format!("cannot resolve the runs directory {}", dir.display()))
}

/// `path` relative to `base`, POSIX separators (babysitter stores run-relative import paths).
fn relative(path: &Path, base: &Path) -> String {
    let p: Vec<_> = path.components().collect();
    let b: Vec<_> = base.components().collect();
    let common = p.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let mut parts: Vec<String> = vec!["..".to_owned(); b.len() - common];
    parts.extend(
        p[common..]
            .iter()
            .map(|c| c.as_os_str().to_string_lossy().into_owned()),
    );
    parts.join("/")
}

async fn create_run(engine: &Engine, runs: &Path, args: &Args) -> Result<String> {
    let spec = args.process.as_deref().unwrap_or_default();
    let (file, export) = match spec.rsplit_once('#') {
        Some((f, e)) if !e.is_empty() => (f, e),
        _ => (spec, "process"),
    };
    let entry =
        std::fs::canonicalize(file).with_context(|| format!("process file {file} not found"))?;
    let inputs = match &args.inputs {
        Some(p) => {
            let raw = std::fs::read(p)
                .with_context(|| format!("inputs file {} not found", p.display()))?;
            Some(
                serde_json::from_slice::<Value>(&raw)
                    .with_context(|| format!("inputs file {} is not valid JSON", p.display()))?,
            )
        }
        None => None,
    };
    let run = LocalRun {
        run_id: ulid::Ulid::generate().to_string(),
        entry,
        export: export.to_owned(),
        process_id: None,
        inputs,
        harness: args.harness.clone(),
        budget: args.budget.clone(),
        nested: None,
    };
    create_local_run(engine, runs, run).await
}

/// A run to create in the runs directory.
struct LocalRun {
    run_id: String,
    /// The process file, canonical.
    entry: PathBuf,
    export: String,
    /// Default: the entry file's stem.
    process_id: Option<String>,
    inputs: Option<Value>,
    harness: Option<String>,
    budget: Option<Budget>,
    /// babysitter's `nested`, for a subprocess run.
    nested: Option<Value>,
}

/// Creates `r` as babysitter's `run:create` does: run.json, inputs.json, `RUN_CREATED`.
async fn create_local_run(engine: &Engine, runs: &Path, r: LocalRun) -> Result<String> {
    use sha2::Digest;
    let entry = &r.entry;
    let source =
        std::fs::read(entry).with_context(|| format!("cannot read {}", entry.display()))?;
    // The import closure's hash; a module that does not load fails the run at its first
    // iteration, with the entry file's hash recorded.
    let code_hash = match engine.check_entry(entry, Some(&r.export)).await {
        Ok(check) => check.code_hash,
        Err(_) => hex::encode(sha2::Sha256::digest(&source)),
    };
    let run_id = r.run_id;
    let run_dir = runs.join(&run_id);
    let import_path = relative(entry, &run_dir);
    let process_id = r.process_id.unwrap_or_else(|| {
        entry
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("process")
            .to_owned()
    });
    let mut new = NewRun::new(
        &run_id,
        &process_id,
        lifecycle::Entrypoint {
            import_path,
            export_name: Some(r.export.clone()),
        },
        babysitter_engine::iso(chrono::Utc::now().timestamp_millis()),
    );
    new.harness = r.harness;
    new.nested = r.nested;
    new.cwd = Some(std::env::current_dir()?.display().to_string());
    new.completion_proof = Some(
        lifecycle::new_completion_proof()
            .context("cannot read random bytes for the completion proof")?,
    );
    new.code_hash = Some(code_hash);
    new.has_inputs = r.inputs.is_some();
    if let Some(b) = &r.budget {
        new.extra
            .insert(BUDGET_KEY.into(), serde_json::to_value(b)?);
    }
    let journal = engine.journal();
    journal
        .create_run(
            &run_id,
            RunFiles {
                run_json: new.run_json(),
                inputs_json: r.inputs,
            },
        )
        .await?;
    let mut ev = NewEvent::new(EventType::RunCreated, Value::Object(new.created_data()));
    ev.recorded_at = Some(new.created_at.clone());
    journal.append(&run_id, 1, vec![ev]).await?;
    Ok(run_id)
}

async fn drive(args: Args, env: &EnvMap, ui: &Ui, fs: FsRuntime) -> Result<ExitCode> {
    let runs = runs_dir(&args, env)?;
    let engine = open_engine(&args, env, &runs, fs)?;
    let run_id = match &args.resume {
        Some(id) => {
            engine
                .journal()
                .run_files(id)
                .await
                .with_context(|| format!("run {id} not found in {}", runs.display()))?;
            id.clone()
        }
        None => create_run(&engine, &runs, &args).await?,
    };
    let run_dir = runs.join(&run_id);
    ui.run_started(&run_id, &run_dir);
    let stop = CancellationToken::new();
    {
        let stop = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stop.cancel();
            }
        });
    }
    let spinner = ui.spinner();
    let _stop_spinner = scopeguard(spinner);
    let mut driver = Driver {
        args: &args,
        ui,
        engine,
        run_id,
        run_dir,
        stop,
        interactive: std::io::stdin().is_terminal(),
        started: HashMap::new(),
        warned: Default::default(),
        budget: None,
        env: env.clone(),
        agents: None,
        ended_with: None,
    };
    if let (Some(_), Some(asked)) = (&args.resume, &args.budget) {
        driver.raise_on_resume(asked).await?;
    }
    driver.run().await
}

/// The engine over the filesystem journal at `runs`, with the breakpoint rules and process
/// root the arguments name.
fn open_engine(args: &Args, env: &EnvMap, runs: &Path, fs: FsRuntime) -> Result<Engine> {
    let journal = Journal::new(Arc::new(fs.store(runs)), crate::journal_options::for_cli());
    let mut options = EngineOptions::new(runs);
    options.breakpoint_rules = match &args.rules {
        // Given explicitly: it must be there and readable.
        Some(file) => {
            let file = std::env::current_dir()?.join(file);
            if let Err(e) = std::fs::metadata(&file) {
                bail!("rules file {}: {e}", file.display());
            }
            babysitter_engine::breakpoints::read_rules(&file)?;
            Some(file)
        }
        None => {
            crate::compat::paths::UserFiles::of(env, &std::env::current_dir()?).breakpoint_rules
        }
    };
    options.process_root = args.process_root.clone();
    // Child runs are created and driven here (`run::subprocess`).
    options.subprocesses = true;
    Ok(Engine::new(journal, options)?)
}

/// One run being driven: iterate, then do what the iteration asks, until it ends, needs a
/// harness, or is stopped.
struct Driver<'a> {
    args: &'a Args,
    ui: &'a Ui,
    engine: Engine,
    run_id: String,
    run_dir: PathBuf,
    stop: CancellationToken,
    /// A terminal to ask breakpoints on.
    interactive: bool,
    /// When each effect started executing (for the durations shown).
    started: HashMap<String, tokio::time::Instant>,
    /// Budget warnings already shown.
    warned: std::collections::HashSet<String>,
    /// run.json's budget (if any) and creation time, once read.
    budget: Option<(Option<Budget>, Option<String>)>,
    env: EnvMap,
    /// Agent settings, harnesses detected, once a harness task is due.
    agents: Option<Arc<babysitter_harness_launcher::agent::AgentSettings>>,
    /// The iteration that ended the run, once one has.
    ended_with: Option<Iteration>,
}

/// What one iteration asks of the driver.
#[derive(Default)]
struct Plan {
    /// Breakpoints, shell, node, hook and harness effects, to do now.
    runnable: Vec<Value>,
    /// Subprocess effects: child runs driven here, after the rest.
    subprocesses: Vec<Value>,
    /// The earliest sleep's target (epoch ms).
    sleep_until: Option<i64>,
}

impl Driver<'_> {
    async fn run(&mut self) -> Result<ExitCode> {
        loop {
            if self.stop.is_cancelled() {
                return Ok(interrupted(self.ui, &self.run_id));
            }
            let it: Iteration = self.engine.iterate(&self.run_id).await?;
            for w in &it.warnings {
                self.ui.warn(w);
            }
            if let Some(code) = self.finished(&it).await {
                self.ended_with = Some(it);
                return Ok(code);
            }
            if let Some(code) = self.over_budget().await? {
                return Ok(code);
            }
            let plan = match self.plan(&it) {
                Ok(plan) => plan,
                Err(code) => return Ok(code),
            };
            let (breakpoints, work): (Vec<Value>, Vec<Value>) = plan
                .runnable
                .into_iter()
                .partition(|a| a["kind"] == "breakpoint");
            if let Some(code) = self.answer_breakpoints(&breakpoints).await? {
                return Ok(code);
            }
            if let Some(code) = self.execute(work).await? {
                return Ok(code);
            }
            if let Some(code) = self.run_subprocesses(plan.subprocesses).await? {
                return Ok(code);
            }
            if let Some(t) = plan.sleep_until
                && !self.sleep_until(t).await
            {
                return Ok(interrupted(self.ui, &self.run_id));
            }
        }
    }

    /// The exit code, once the iteration has ended the run (after saying how it ended).
    async fn finished(&self, it: &Iteration) -> Option<ExitCode> {
        let (how, output, error, code) = match it.status {
            IterationStatus::Waiting => return None,
            IterationStatus::Completed => {
                ("completed", it.output.as_ref(), None, ExitCode::SUCCESS)
            }
            IterationStatus::None => (
                it.reason.as_deref().unwrap_or("finished"),
                it.output.as_ref(),
                None,
                ExitCode::SUCCESS,
            ),
            IterationStatus::Failed | IterationStatus::Halted => (
                it.status.as_str(),
                None,
                it.error
                    .as_ref()
                    .or(it.reason.as_ref().map(|_| &Value::Null)),
                ExitCode::FAILURE,
            ),
        };
        self.ui
            .finished(
                &self.run_id,
                how,
                output,
                error,
                &self.engine,
                &self.started,
            )
            .await;
        if code == ExitCode::FAILURE
            && let Some(r) = &it.reason
        {
            self.ui.warn(r);
        }
        Some(code)
    }

    /// Sleeps wait; everything else runs now (shell / node concurrently, breakpoints asked). A
    /// kind this build cannot run stops the run with the exit code that says so.
    fn plan(&self, it: &Iteration) -> Result<Plan, ExitCode> {
        let mut plan = Plan::default();
        for a in &it.next_actions {
            let id = a["effectId"].as_str().unwrap_or_default();
            match a["kind"].as_str().unwrap_or_default() {
                "sleep" => {
                    let t = a["taskDef"]["sleep"]["targetEpochMs"].as_i64().unwrap_or(0);
                    plan.sleep_until = Some(plan.sleep_until.map_or(t, |s: i64| s.min(t)));
                    self.ui.sleeping(id, t);
                }
                "shell" | "node" | "breakpoint" | "hook" => plan.runnable.push(a.clone()),
                kind if kinds::runs_on_a_harness(kind) => plan.runnable.push(a.clone()),
                "subprocess" => plan.subprocesses.push(a.clone()),
                kind => {
                    self.ui.blocked(a, kind);
                    return Err(needs_harness(self.ui, &self.run_id, kind));
                }
            }
        }
        Ok(plan)
    }

    /// Breakpoints, one at a time, on the terminal (or approved by `--yes` or an auto-approval
    /// rule); a breakpoint nobody can answer stops the run, resumable.
    async fn answer_breakpoints(&mut self, breakpoints: &[Value]) -> Result<Option<ExitCode>> {
        for a in breakpoints {
            let id = a["effectId"].as_str().unwrap_or_default();
            let advice = &a["taskDef"]["autoApproval"];
            let answer = if advice["recommended"] == true {
                let why = advice["reason"].as_str().unwrap_or("auto-approval rule");
                self.ui.note(&format!("breakpoint auto-approved: {why}"));
                Some(json!({"approved": true, "response": format!("auto-approved: {why}")}))
            } else {
                ui::ask_breakpoint(a, self.args.yes, self.interactive && !self.args.json)?
            };
            let Some(answer) = answer else {
                self.ui.warn(
                    "breakpoint needs an answer: run in a terminal, or pass --yes to approve breakpoints",
                );
                return Ok(Some(interrupted(self.ui, &self.run_id)));
            };
            let done = exec::Done {
                outcome: Ok(answer),
                stdout: None,
                stderr: None,
            };
            commit(&self.engine, &self.run_id, id, done, None, None).await?;
            self.ui.effect_done(a, true, None);
        }
        Ok(None)
    }

    /// The agent settings, loaded when the first harness task is due; `Err` is the exit code
    /// of a run that cannot go on (no harness, bad settings), said on the terminal.
    async fn agents(&mut self, work: &[Value]) -> Result<Option<Arc<AgentSettings>>, ExitCode> {
        let Some(first) = work
            .iter()
            .find(|a| kinds::runs_on_a_harness(a["kind"].as_str().unwrap_or_default()))
        else {
            return Ok(None);
        };
        if let Some(a) = &self.agents {
            return Ok(Some(a.clone()));
        }
        let source = agents::Source {
            config: self.args.config.clone(),
            sets: self.args.sets.clone(),
            harness: self.args.harness.clone(),
        };
        match agents::load(&source, &self.env).await {
            Ok(a) => {
                self.agents = Some(a.clone());
                Ok(Some(a))
            }
            Err(e) => {
                let kind = first["kind"].as_str().unwrap_or_default();
                self.ui.blocked(first, kind);
                self.ui.warn(&format!("{e:#}"));
                Err(needs_harness(self.ui, &self.run_id, kind))
            }
        }
    }

    /// Runs `work` (`--concurrency` at a time) and commits each result as it comes in.
    async fn execute(&mut self, work: Vec<Value>) -> Result<Option<ExitCode>> {
        let agent_settings = match self.agents(&work).await {
            Ok(a) => a,
            Err(code) => return Ok(Some(code)),
        };
        let sem = Arc::new(tokio::sync::Semaphore::new(self.args.concurrency));
        let mut tasks = tokio::task::JoinSet::new();
        for a in work {
            let id = a["effectId"].as_str().unwrap_or_default().to_owned();
            self.started.insert(id, tokio::time::Instant::now());
            self.ui.effect_started(&a);
            let sem = sem.clone();
            let stop = self.stop.clone();
            let run_dir = self.run_dir.clone();
            let run_id = self.run_id.clone();
            let agent_settings = agent_settings.clone();
            let journal = self.engine.journal().clone();
            tasks.spawn(async move {
                let _permit = sem.acquire_owned().await;
                let effect_id = a["effectId"].as_str().unwrap_or_default().to_owned();
                let kind = a["kind"].as_str().unwrap_or_default().to_owned();
                if let Some(settings) = agent_settings.filter(|_| kinds::runs_on_a_harness(&kind)) {
                    let out = agents::execute(&settings, &journal, &run_id, &a, &stop).await;
                    return (
                        a,
                        out.map(|d| {
                            (
                                d.done,
                                Some(AgentExtras {
                                    usage: d.usage,
                                    requests: d.requests,
                                    metadata: d.metadata,
                                    events: d.events,
                                }),
                            )
                        }),
                    );
                }
                let task = exec::Task {
                    effect_id: &effect_id,
                    kind: &kind,
                    def: &a["taskDef"],
                    work_dir: &run_dir,
                    attempt: None,
                };
                let out = exec::execute(task, &stop).await;
                (a, out.map(|d| (d, None)).map_err(anyhow::Error::new))
            });
        }
        while let Some(joined) = tasks.join_next().await {
            let (a, out) = joined.map_err(|e| anyhow!("task executor crashed: {e}"))?;
            if self.stop.is_cancelled() {
                continue;
            }
            let id = a["effectId"].as_str().unwrap_or_default();
            let elapsed = self.started.get(id).map(|s| s.elapsed());
            match out {
                Ok((done, extras)) => {
                    let ok = done.outcome.is_ok();
                    let kind = a["kind"].as_str().unwrap_or_default();
                    // The orchestrator's rules for a worker's report, checks included: its usage,
                    // its metadata, its agent events on record.
                    let (usage, metadata) = match extras {
                        Some(x) => {
                            let usage = babysitter_orchestrator::service::grpc::task_usage_of(
                                x.usage, x.requests,
                            )?;
                            let mut metadata = Some(x.metadata).filter(Value::is_object);
                            let events = x.events.into_iter().map(grpc::agent_event_of).collect();
                            let journal = self.engine.journal();
                            agent_record::store_record(
                                journal,
                                &Redactor::default(),
                                &self.run_id,
                                events,
                                &mut metadata,
                            )
                            .await?;
                            (Some((usage, kind)), metadata)
                        }
                        None => (None, None),
                    };
                    commit(&self.engine, &self.run_id, id, done, usage, metadata).await?;
                    self.ui.effect_done(&a, ok, elapsed);
                }
                Err(e) => {
                    self.ui.effect_done(&a, false, elapsed);
                    return Err(e.context(format!("executing effect {id}")));
                }
            }
        }
        Ok(None)
    }

    /// Waits until `target` (epoch ms); false when stopped meanwhile.
    async fn sleep_until(&self, target: i64) -> bool {
        let now = chrono::Utc::now().timestamp_millis();
        if target <= now {
            return true;
        }
        let wait = std::time::Duration::from_millis((target - now) as u64);
        tokio::select! {
            _ = tokio::time::sleep(wait) => true,
            _ = self.stop.cancelled() => false,
        }
    }
}

/// Commits an effect's result, its model usage (if any, with the effect's kind) journaled with
/// it as `COST_TRACKED` by the orchestrator's rule ([`TaskUsage::events`]; attempt 1).
async fn commit(
    engine: &Engine,
    run_id: &str,
    effect_id: &str,
    done: exec::Done,
    usage: Option<(TaskUsage, &str)>,
    metadata: Option<Value>,
) -> Result<()> {
    let now = chrono::Utc::now()
        .format("%Y-%m-%dT%H:%M:%S%.3fZ")
        .to_string();
    let then = usage
        .map(|(u, kind)| u.events(effect_id, Some(kind), None))
        .unwrap_or_default();
    engine
        .commit_result_then(
            run_id,
            Commit {
                effect_id: effect_id.to_owned(),
                outcome: done.outcome,
                stdout: done.stdout,
                stderr: done.stderr,
                started_at: None,
                finished_at: Some(now),
                metadata,
                stdout_ref: None,
                stderr_ref: None,
            },
            then,
        )
        .await?;
    Ok(())
}

/// What an agent task gives besides its outcome.
struct AgentExtras {
    usage: Option<babysitter_proto::common::v1::TaskUsage>,
    requests: Vec<babysitter_proto::common::v1::RequestUsage>,
    metadata: Value,
    events: Vec<babysitter_proto::common::v1::AgentEvent>,
}

/// Aborts the spinner task when the driver returns, whichever way.
struct SpinnerGuard(Option<tokio::task::JoinHandle<()>>);

impl Drop for SpinnerGuard {
    fn drop(&mut self) {
        if let Some(h) = self.0.take() {
            h.abort();
        }
    }
}

fn scopeguard(h: Option<tokio::task::JoinHandle<()>>) -> SpinnerGuard {
    SpinnerGuard(h)
}

fn interrupted(ui: &Ui, run_id: &str) -> ExitCode {
    ui.warn(&format!(
        "stopped; the run is resumable: babysitter run --resume {run_id}"
    ));
    ExitCode::from(130)
}

fn needs_harness(ui: &Ui, run_id: &str, kind: &str) -> ExitCode {
    let how = if kinds::runs_on_a_harness(kind) {
        "are executed by a coding-agent harness (install one: `babysitter harness:install claude-code`)"
    } else {
        "are not executed by babysitter run"
    };
    ui.warn(&format!(
        "tasks of kind `{kind}` {how}; or post the result with `babysitter task:post` and continue with `babysitter run --resume {run_id}`"
    ));
    ExitCode::from(3)
}
