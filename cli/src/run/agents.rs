//! Agent, skill and orchestrator tasks in `babysitter run`: executed on this machine by the
//! harness launcher's own code (`agent::run`: the same harness plans, provider routing,
//! in-process transport proxy, output parsing, usage and cost as on a worker), so a process
//! with agents runs to completion with no server.
//!
//! Settings are `babysitter up`'s `[launcher.agent]` (binaries, providers, default provider,
//! prices, extra environment), layered as there: defaults, `--config FILE`,
//! `BABYSITTER_UP__LAUNCHER__AGENT__…`, `--set launcher.agent.…=…`. Harnesses are looked for
//! once, when the first such task is due, not on every run. The harness is the task's own
//! (`execution.harness`), else `--harness`, else the first one installed. Unlike a worker's,
//! a task that names no workspace works in place in the directory `babysitter run` was
//! started in (babysitter's agents work in the project); its harness still gets a home of its
//! own, thrown away afterwards, so nothing of the user's own harness configuration leaks in
//! or is changed.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use babysitter_common::EnvMap;
use babysitter_common::agent_session::SavedSession;
use babysitter_common::config::ConfigLoader;
use babysitter_harness_launcher::agent::{self, AgentDone, AgentSettings, AgentTask};
use babysitter_harness_launcher::exec::Attempt;
use babysitter_harness_launcher::harness::HarnessKind;
use babysitter_journal::{Journal, agent_sessions};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::up::UpConfig;

/// Where `babysitter run` reads its agent settings.
#[derive(Debug, Default, Clone)]
pub struct Source {
    pub config: Option<PathBuf>,
    pub sets: Vec<String>,
    /// `--harness`: the harness for tasks that name none.
    pub harness: Option<String>,
}

/// The agent settings, harnesses detected; an error says why no task can run (bad config, the
/// `--harness` asked for is not installed, none is installed).
pub async fn load(source: &Source, env: &EnvMap) -> Result<Arc<AgentSettings>> {
    let config: UpConfig = ConfigLoader::new("BABYSITTER_UP")
        .file(source.config.clone())
        .env(env.clone())
        .overrides(source.sets.clone())
        .load()
        .context("agent settings")?;
    let agent = config.launcher.agent;
    let checks = agent.detector(env).check_all().await;
    let mut settings = agent.settings_with(
        env,
        babysitter_harness_launcher::harness::available(&checks),
    );
    settings.default_workspace = Some(std::env::current_dir()?);
    if let Some(name) = &source.harness {
        let Some(kind) = HarnessKind::from_name(name) else {
            let known: Vec<&str> = HarnessKind::ALL.iter().map(|k| k.name()).collect();
            bail!("--harness {name}: not a harness ({})", known.join(", "));
        };
        let Some(at) = settings.harnesses.iter().position(|d| d.kind == kind) else {
            let why = checks
                .iter()
                .find(|c| c.kind == kind)
                .and_then(|c| c.outcome.as_ref().err())
                .map(|u| u.reason.clone())
                .unwrap_or_else(|| "not found".into());
            bail!("--harness {name}: {why}");
        };
        let chosen = settings.harnesses.remove(at);
        settings.harnesses.insert(0, chosen);
    }
    if settings.harnesses.is_empty() {
        let why: Vec<String> = checks
            .iter()
            .filter_map(|c| c.outcome.as_ref().err().map(|u| u.reason.clone()))
            .collect();
        bail!("no coding-agent harness is installed ({})", why.join("; "));
    }
    Ok(Arc::new(settings))
}

/// Runs one agent / skill / orchestrator task (`a` is the iteration's action) to its result.
///
/// Its harness session is kept in the run as a worker's is (`agent_sessions`): saved while
/// it runs, so a follow-up task naming the same session (`agent.session`) continues it, and
/// so does this task when `babysitter run --resume` takes up a run stopped in the middle of it.
/// A harness stopped by a rate limit or quota window is waited out (`quota-retry-secs`) and
/// its session resumed, at most [`QUOTA_WAITS`] times, as a worker gives such a task back.
pub async fn execute(
    settings: &AgentSettings,
    journal: &Journal,
    run_id: &str,
    a: &Value,
    stop: &CancellationToken,
) -> Result<AgentDone> {
    let mut number = 1;
    loop {
        let done = attempt(settings, journal, run_id, a, number, stop).await?;
        let Some(r) = &done.release else {
            return Ok(done);
        };
        if number > QUOTA_WAITS {
            return Ok(done);
        }
        tracing::warn!(%run_id, reason = %r.reason, retry_after_s = r.retry_after.as_secs(),
            "the agent waits out a quota window, then resumes its session");
        tokio::select! {
            () = tokio::time::sleep(r.retry_after) => {}
            () = stop.cancelled() => return Ok(done),
        }
        number += 1;
    }
}

/// Quota windows one task waits out before it fails with the harness's error.
pub const QUOTA_WAITS: u32 = 5;

async fn attempt(
    settings: &AgentSettings,
    journal: &Journal,
    run_id: &str,
    a: &Value,
    number: u32,
    stop: &CancellationToken,
) -> Result<AgentDone> {
    let effect_id = a["effectId"].as_str().unwrap_or_default();
    let kind = a["kind"].as_str().unwrap_or_default();
    // The harness's home and any fresh project live here, and go with it.
    let work_dir = tempfile::Builder::new()
        .prefix("babysitter-agent-")
        .tempdir()
        .context("cannot make a directory for the agent's home")?;
    let marker = format!("babysitter-run:{run_id}");
    let file = agent_sessions::run_file(&a["taskDef"], effect_id).ok();
    let resume = match &file {
        Some(f) => agent_sessions::load(journal, run_id, f)
            .await
            .unwrap_or_else(|e| {
                tracing::warn!(%run_id, %effect_id, error = %e, "the saved agent session cannot be read; the task starts a new one");
                None
            }),
        None => None,
    };
    let (saves, mut saved) = tokio::sync::mpsc::channel::<SavedSession>(8);
    let saver = file.map(|file| {
        let (journal, run_id) = (journal.clone(), run_id.to_owned());
        tokio::spawn(async move {
            while let Some(mut latest) = saved.recv().await {
                while let Ok(newer) = saved.try_recv() {
                    latest = newer;
                }
                if let Err(e) = agent_sessions::save(&journal, &run_id, &file, &latest).await {
                    tracing::warn!(%run_id, error = %e, "saving the agent session failed");
                }
            }
        })
    });
    let task = AgentTask {
        kind,
        def: &a["taskDef"],
        work_dir: work_dir.path(),
        attempt: Attempt {
            run_id,
            effect_id,
            number,
            home_marker: &marker,
        },
        timeout: None,
        resume: resume.as_ref(),
        saves: saver.as_ref().map(|_| &saves),
    };
    // The universal events are for watchers of a server's run; here they are dropped.
    let (tx, mut rx) = tokio::sync::mpsc::channel(256);
    let drain = tokio::spawn(async move { while rx.recv().await.is_some() {} });
    let done = agent::run(settings, task, &tx, stop).await;
    drop(tx);
    drop(saves);
    let _ = drain.await;
    if let Some(saver) = saver {
        let _ = saver.await;
    }
    Ok(done)
}
