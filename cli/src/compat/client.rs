//! Where a command's runs live: one trait, [`RunClient`], with three homes.
//!
//! - [`OnDisk::Local`]: this process opens the run directory's filesystem journal and an engine for
//!   the one command (`BABYSITTER_WARM=0`, or no warm server to reach).
//! - [`OnDisk::Warm`]: the per-user warm server runs the command over the journal and warm engine it
//!   keeps for the runs root between commands (see [`super::warm::context`]).
//! - [`remote::Remote`]: `--server URL` / `BABYSITTER_SERVER`: the run lives on an
//!   orchestrator; it is read over `RunService` when the command opens it and changed through
//!   that service.
//!
//! A command is written once over it: it opens the run ([`open`]), reads through [`Run`]
//! (`run.json`, events, the effect index, the state cache: the same for every home), and
//! changes it through the client ([`RunClient::commit_result`], [`RunClient::seal`]), so what
//! it prints, its exit code and its error forms do not depend on where the run lives.
//! Commands with no remote form refuse `--server` before they run (`main.rs`).

pub mod bundle;
pub mod remote;

/// The commands written over [`RunClient`] that take `--server` (`run:cancel`, which only an
/// orchestrator has, is `crate::remote`'s).
pub const REMOTE: &[&str] = &[
    "run:create",
    "run:iterate",
    "run:status",
    "run:events",
    "run:halt",
    "task:list",
    "task:post",
];

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use babysitter_common::EnvMap;
use babysitter_engine::Iteration;
use babysitter_engine::commit::Commit;
use babysitter_engine::lifecycle;
use babysitter_journal::store::RunFiles;
use babysitter_journal::{EventType, JournalError, NewEvent, StoredEvent};
use babysitter_orchestrator::service::budget;
use serde_json::Value;

use super::cli::Cli;
use super::lock::{self, LockError, RunGuard};
use super::output::{self, Category, CliError};
use super::paths::UserFiles;
use super::run_dir::Run;

/// What sealing a run (`run:halt`) appended and the state it left.
#[derive(Debug)]
pub struct Sealed {
    /// The `RUN_COMPLETED` / `RUN_FAILED` event appended.
    pub event: StoredEvent,
    /// The state cache rebuilt after it (`rebuildReason: manual_halt`).
    pub state: Value,
}

/// What `run:halt` seals a run with.
#[derive(Debug, Clone, Copy)]
pub struct Seal<'a> {
    pub run_json: &'a Value,
    pub reason: &'a str,
    pub failed: bool,
    pub force: bool,
    pub env: &'a EnvMap,
}

/// A home for runs: how a command opens one and changes it.
#[async_trait]
pub trait RunClient: Send + Sync + std::fmt::Debug {
    /// The run at `dir` (`<runDir>` as the command resolved it; its last segment is the run id).
    async fn open(&self, dir: &Path) -> Result<Run, String>;

    /// Keeps other writers of the run out until the guard drops (`None`: the home orders its
    /// writes itself, as an orchestrator does).
    async fn hold(&self, run: &Run, timeout: Duration) -> Result<Option<RunGuard>, LockError>;

    /// Commits a task result: `result.json`, the logs and one `EFFECT_RESOLVED`. The message of
    /// a refused commit is the engine's (or the server's) in the reference's words.
    async fn commit_result(&self, run: &Run, commit: Commit) -> Result<(), String>;

    /// Creates the run `spec` describes at `dir` — `run.json`, `inputs.json`, `RUN_CREATED` —
    /// and returns its `run.json`; an existing run is never overwritten. `entry`: the process
    /// file on this machine (an orchestrator gets it uploaded with the modules it imports).
    async fn create_run(
        &self,
        cli: &Cli<'_>,
        dir: &Path,
        spec: lifecycle::NewRun,
        inputs: Option<Value>,
        entry: Option<&Path>,
    ) -> Result<Value, CliError>;

    /// One iteration of `run`, journaling `marker` (babysitter's `RUN_ITERATION`) in the same
    /// append; returns it and the run as it stands after it. `user`: the caller's files
    /// (`ctx.log` lines, breakpoint rules) where the home runs the process here. The message of
    /// a failed iteration is the engine's in the reference's words.
    async fn iterate(
        &self,
        run: &Run,
        marker: Option<NewEvent>,
        user: UserFiles,
    ) -> Result<(Iteration, Run), String>;

    /// Seals the run with babysitter's manual seal (`RUN_COMPLETED`, or `RUN_FAILED` when
    /// `failed`) carrying `reason`; `force`: also when it has already ended (the caller checked
    /// that it had not, or was told to seal it anyway).
    async fn seal(&self, run: &Run, seal: Seal<'_>) -> anyhow::Result<Sealed>;

    /// The orchestrator's URL when the runs live on one.
    fn server(&self) -> Option<&str> {
        None
    }
}

/// A runs directory on this machine: opened by this process ([`OnDisk::Local`]) or by the
/// warm server ([`OnDisk::Warm`]), which differ only in the journal and engine a [`Run`] gets
/// ([`Run::open`] finds the server's through the command's warm scope); the changes are the
/// same code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDisk {
    Local,
    Warm,
}

tokio::task_local! {
    /// The home of the command being run ([`scope`]).
    static CLIENT: Arc<dyn RunClient>;
}

/// Runs `command` with `client` as the home [`open`] and [`current`] answer.
pub async fn scope<T>(client: Arc<dyn RunClient>, command: impl Future<Output = T>) -> T {
    CLIENT.scope(client, command).await
}

/// The home of the command being run; outside a command (a unit test), [`OnDisk::Local`].
pub fn current() -> Arc<dyn RunClient> {
    CLIENT
        .try_with(Arc::clone)
        .unwrap_or_else(|_| Arc::new(OnDisk::Local))
}

/// Opens `dir` in the command's home.
pub async fn open(dir: &Path) -> Result<Run, String> {
    current().open(dir).await
}

#[async_trait]
impl RunClient for OnDisk {
    async fn open(&self, dir: &Path) -> Result<Run, String> {
        Run::open(dir)
    }

    async fn hold(&self, run: &Run, timeout: Duration) -> Result<Option<RunGuard>, LockError> {
        lock::acquire(&run.dir, timeout).await.map(Some)
    }

    async fn create_run(
        &self,
        cli: &Cli<'_>,
        dir: &Path,
        spec: lifecycle::NewRun,
        inputs: Option<Value>,
        _entry: Option<&Path>,
    ) -> Result<Value, CliError> {
        let run = Run::open(dir).map_err(|m| CliError::plain("Error", m))?;
        write_run(cli, &run, spec, inputs).await
    }

    async fn iterate(
        &self,
        run: &Run,
        marker: Option<NewEvent>,
        user: UserFiles,
    ) -> Result<(Iteration, Run), String> {
        let engine = run.engine(Some(user)).map_err(|e| format!("{e:#}"))?;
        let mut it = engine
            .iterate_with(&run.id, marker)
            .await
            .map_err(|e| output::engine_message(&e))?;
        // A budget given at run:create, before the caller gets what was requested: past a
        // limit the run fails (what it requested cancelled, as on a server), and the
        // iteration reports that instead.
        if it.status == babysitter_engine::IterationStatus::Waiting {
            let now = chrono::Utc::now().timestamp_millis();
            let stop = budget::client_driven_check(engine.journal(), &run.id, now)
                .await
                .map_err(|e| e.to_string())?;
            if let Some(stop) = stop {
                tracing::warn!(run_id = %run.id, reason = %stop.reason, "budget exceeded: the run is stopped");
                let pending: Vec<String> = run
                    .inspect(|_, idx| idx.pending().map(|r| r.effect_id.clone()).collect())
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                for effect_id in pending {
                    engine
                        .cancel_effect(&run.id, &effect_id, Some(&stop.reason))
                        .await
                        .map_err(|e| output::engine_message(&e))?;
                }
                let head = engine
                    .journal()
                    .head(&run.id)
                    .await
                    .map_err(|e| e.to_string())?;
                engine
                    .journal()
                    .append(&run.id, head.seq + 1, vec![stop.event])
                    .await
                    .map_err(|e| e.to_string())?;
                engine
                    .evict(&run.id)
                    .await
                    .map_err(|e| output::engine_message(&e))?;
                it = engine
                    .iterate_with(&run.id, None)
                    .await
                    .map_err(|e| output::engine_message(&e))?;
            }
        }
        Ok((it, run.clone()))
    }

    /// Through the run's engine, then the state cache (`post_effect_resolution`).
    async fn commit_result(&self, run: &Run, commit: Commit) -> Result<(), String> {
        let engine = run.engine(None).map_err(|e| format!("{e:#}"))?;
        engine
            .commit_result(&run.id, commit)
            .await
            .map_err(|e| output::engine_message(&e))?;
        run.settle_state_cache("task:post", Some("post_effect_resolution"))
            .await;
        Ok(())
    }

    /// Appended at the head (the caller holds the run), then the state cache (`manual_halt`).
    async fn seal(&self, run: &Run, seal: Seal<'_>) -> anyhow::Result<Sealed> {
        let (kind, data) = lifecycle::manual_seal(seal.run_json, seal.reason, seal.failed);
        let event = run.append(kind, data, seal.run_json, seal.env).await?;
        let state = run.write_state_cache("manual_halt").await?;
        Ok(Sealed { event, state })
    }
}

/// Writes a new run — `run.json`, `inputs.json` — and journals its `RUN_CREATED`; returns
/// `run.json`. An existing run is never overwritten.
async fn write_run(
    cli: &Cli<'_>,
    run: &Run,
    mut spec: lifecycle::NewRun,
    inputs: Option<Value>,
) -> Result<Value, CliError> {
    let run_id = spec.run_id.clone();
    spec.completion_proof = Some(lifecycle::new_completion_proof().map_err(|e| {
        CliError::plain(
            "Error",
            format!("cannot read random bytes for the completion proof: {e}"),
        )
    })?);
    spec.cwd = Some(cli.cwd.display().to_string());
    spec.has_inputs = inputs.is_some();
    let run_json = spec.run_json();
    let files = RunFiles {
        run_json: run_json.clone(),
        inputs_json: inputs,
    };
    let journal = run
        .journal()
        .map_err(|e| CliError::plain("Error", format!("{e:#}")))?;
    match journal.create_run(&run_id, files).await {
        Ok(_) => {}
        Err(JournalError::RunAlreadyExists { .. }) => {
            return Err(CliError::new(
                "RunAlreadyExistsError",
                format!("run {run_id} already exists at {}", run.dir.display()),
                Category::Validation,
            )
            .next_steps(vec![
                "Pick another --run-id, or continue the existing run with run:iterate".into(),
            ]));
        }
        Err(e) => {
            return Err(CliError::plain(
                "Error",
                format!(
                    "cannot create run {run_id} under {}: {e}",
                    run.root.display()
                ),
            ));
        }
    }
    run.append(
        EventType::RunCreated,
        spec.created_data(),
        &run_json,
        cli.env,
    )
    .await
    .map_err(|e| CliError::plain("Error", format!("{e:#}")))?;
    Ok(run_json)
}
