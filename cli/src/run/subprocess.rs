//! `ctx.subprocess` in `babysitter run`: the child run is created in the same runs directory
//! (babysitter's run.json `nested` naming the parent run and effect, the parent's budget) and
//! driven to its end right here, depth first, by the same driver; its end is committed into
//! the parent: `{runId, runDir, output}` when it completed, `SubprocessFailedError` when it
//! failed, `SubprocessError` when the invocation names no loadable process file.
//!
//! The child's run id is the effect's id (a ULID of its own): `--resume` of the parent finds
//! the child it already made and resumes or reads it, never making a second one. A child that
//! stops without ending (Ctrl-C, a breakpoint nobody can answer, a task no harness can run)
//! stops its parent with the same exit code; both stay resumable.
//!
//! `processPath` is resolved as babysitter's harness resolves it: from the directory the
//! parent run was created in (its run.json `cwd`), else from the parent's process folder.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Result;
use babysitter_harness_launcher::exec::Done;
use babysitter_journal::store::RunFile;
use serde_json::Value;

use super::{BUDGET_KEY, Budget, Driver, LocalRun, commit, create_local_run};
use babysitter_engine::{Iteration, IterationStatus, subprocess};

impl Driver<'_> {
    /// Drives each subprocess effect's child run to its end and commits it into this run;
    /// `Some(code)`: a child stopped without ending, and this run stops with it.
    pub(super) async fn run_subprocesses(&mut self, subs: Vec<Value>) -> Result<Option<ExitCode>> {
        for a in subs {
            let effect_id = a["effectId"].as_str().unwrap_or_default().to_owned();
            self.ui.effect_started(&a);
            let child_id = effect_id.clone();
            let journal = self.engine.journal();
            if journal.run_files(&child_id).await.is_err() {
                let made = match self.child_run(&child_id, &effect_id, &a).await {
                    Ok(run) => create_local_run(&self.engine, self.runs(), run).await,
                    Err(why) => {
                        self.settle(&a, Err(subprocess::invalid(&why))).await?;
                        continue;
                    }
                };
                if let Err(e) = made {
                    let e = subprocess::invalid(&format!("{e:#}"));
                    self.settle(&a, Err(e)).await?;
                    continue;
                }
            }
            let mut child = Driver {
                args: self.args,
                ui: self.ui,
                engine: self.engine.clone(),
                run_id: child_id.clone(),
                run_dir: self.runs().join(&child_id),
                stop: self.stop.clone(),
                interactive: self.interactive,
                started: Default::default(),
                warned: Default::default(),
                budget: None,
                env: self.env.clone(),
                agents: self.agents.clone(),
                ended_with: None,
            };
            let code = Box::pin(child.run()).await?;
            self.agents = child.agents.take().or(self.agents.take());
            let ended = match child.ended_with.take() {
                Some(it) => self.outcome_of(&child_id, it),
                None => self.ended(&child_id).await?,
            };
            match ended {
                Some(outcome) => self.settle(&a, outcome).await?,
                None => return Ok(Some(code)),
            }
        }
        Ok(None)
    }

    fn runs(&self) -> &Path {
        self.run_dir.parent().unwrap_or(Path::new("."))
    }

    /// The child run the invocation (`taskDef.subprocess`) describes; `Err`: why none can be.
    async fn child_run(
        &self,
        child_id: &str,
        effect_id: &str,
        a: &Value,
    ) -> std::result::Result<LocalRun, String> {
        let inv = &a["taskDef"]["subprocess"];
        let Some(path) = inv["processPath"].as_str().filter(|p| !p.is_empty()) else {
            return Err("subprocess.processPath is missing".into());
        };
        let run_json = self
            .engine
            .journal()
            .run_files(&self.run_id)
            .await
            .map_err(|e| e.to_string())?
            .run_json;
        let mut bases: Vec<PathBuf> = Vec::new();
        if let Some(cwd) = run_json.get("cwd").and_then(Value::as_str) {
            bases.push(PathBuf::from(cwd));
        }
        if let Some(import) = run_json
            .pointer("/entrypoint/importPath")
            .and_then(Value::as_str)
            && let Some(folder) = self.run_dir.join(import).parent()
        {
            bases.push(folder.to_owned());
        }
        let entry = bases
            .iter()
            .map(|b| b.join(path))
            .find_map(|p| std::fs::canonicalize(p).ok())
            .ok_or_else(|| {
                let tried: Vec<String> = bases
                    .iter()
                    .map(|b| b.join(path).display().to_string())
                    .collect();
                format!(
                    "processPath `{path}` names no file (tried {})",
                    tried.join(", ")
                )
            })?;
        let text = |k: &str| inv[k].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
        let budget = run_json
            .get(BUDGET_KEY)
            .and_then(|b| serde_json::from_value::<Budget>(b.clone()).ok());
        let key = a["invocationKey"].as_str().unwrap_or_default();
        let nested = subprocess::nested(&self.run_id, effect_id, key, inv);
        Ok(LocalRun {
            run_id: child_id.to_owned(),
            entry,
            export: text("exportName").unwrap_or_else(|| "process".into()),
            process_id: text("processId"),
            inputs: Some(inv["inputs"].clone()).filter(|v| !v.is_null()),
            harness: run_json
                .get("harness")
                .and_then(Value::as_str)
                .map(str::to_owned),
            budget,
            nested: Some(nested),
        })
    }

    /// How the child run ended, from the iteration that ended it (`None`: not an ending its
    /// journal does not tell better, e.g. a run resumed after it had ended).
    fn outcome_of(
        &self,
        child_id: &str,
        it: Iteration,
    ) -> Option<std::result::Result<Value, Value>> {
        let run_dir = self.runs().join(child_id).display().to_string();
        match it.status {
            IterationStatus::Completed => {
                Some(Ok(subprocess::result(child_id, &run_dir, it.output)))
            }
            IterationStatus::Failed | IterationStatus::Halted => Some(Err(subprocess::failed(
                child_id,
                it.status.as_str(),
                it.error,
            ))),
            IterationStatus::Waiting | IterationStatus::None => None,
        }
    }

    /// How the child run ended, from its journal (`None`: it has not).
    async fn ended(&self, child_id: &str) -> Result<Option<std::result::Result<Value, Value>>> {
        let journal = self.engine.journal();
        let (_, index) = journal.index(child_id).await?;
        let Some(mark) = index.last_lifecycle.clone() else {
            return Ok(None);
        };
        let run_dir = self.runs().join(child_id).display().to_string();
        match mark.event_type.as_str() {
            "RUN_COMPLETED" => {
                let output = journal
                    .get_run_file(child_id, &RunFile::state("output.json")?)
                    .await
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
                Ok(Some(Ok(subprocess::result(child_id, &run_dir, output))))
            }
            "RUN_FAILED" => {
                let event = journal.read(child_id, mark.seq, mark.seq).await?;
                let error = event.first().map(|e| e.body.data["error"].clone());
                Ok(Some(Err(subprocess::failed(child_id, "failed", error))))
            }
            _ => Ok(None),
        }
    }

    async fn settle(
        &mut self,
        a: &Value,
        outcome: std::result::Result<Value, Value>,
    ) -> Result<()> {
        let ok = outcome.is_ok();
        let id = a["effectId"].as_str().unwrap_or_default();
        let done = Done {
            outcome,
            stdout: None,
            stderr: None,
        };
        commit(&self.engine, &self.run_id, id, done, None, None).await?;
        self.ui.effect_done(a, ok, None);
        Ok(())
    }
}
