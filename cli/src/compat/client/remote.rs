//! [`Remote`]: runs on an orchestrator (`--server URL`, `BABYSITTER_SERVER`), over its
//! `RunService`.
//!
//! Opening a run reads it whole: `run.json` and the state cache the server's journal keeps
//! (`GetRun` with `include_run_files`), and every event up to the head (`WatchRun` from 1), each
//! checksum verified as a local read verifies it; the effect index is built from the events by
//! the journal's own rules, so a command prints from a remote run exactly what it prints from a local one. The
//! orchestrator orders its runs' writes itself: there is no lock to hold here, and a result or a
//! seal is one call (`PostTaskResult`, `HaltRun`). The namespace is `BABYSITTER_NAMESPACE`
//! (empty: the server's default); the token `BABYSITTER_TOKEN_FILE` or `BABYSITTER_TOKEN`. An
//! `https://` server is dialled over TLS with `BABYSITTER_TLS_CA_FILE` (else the system's roots)
//! and, for mTLS, `BABYSITTER_TLS_CERT_FILE` + `BABYSITTER_TLS_KEY_FILE`.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use babysitter_common::EnvMap;
use babysitter_common::auth::Secret;
use babysitter_common::client::{AuthedChannel, ClientOptions};
use babysitter_engine::LogLine;
use babysitter_engine::commit::Commit;
use babysitter_engine::lifecycle;
use babysitter_engine::{Iteration, IterationStatus};
use babysitter_journal::index::EffectIndex;
use babysitter_journal::{Head, Location, NewEvent, StoredEvent};
use babysitter_orchestrator::service::budget::{BUDGET_KEY, Budget};
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use serde_json::Value;
use tonic::Status;

use super::{RunClient, Seal, Sealed, bundle};
use crate::compat::cli::Cli;
use crate::compat::lock::{LockError, RunGuard};
use crate::compat::output::{Category, CliError};
use crate::compat::paths::UserFiles;
use crate::compat::run_dir::{Fetched, Run};

/// An orchestrator's `RunService`.
#[derive(Debug, Clone)]
pub struct Remote {
    url: String,
    namespace: String,
    client: RunServiceClient<AuthedChannel>,
}

impl Remote {
    /// A client of the orchestrator at `url`, with the token and namespace of `env`.
    pub fn connect(url: &str, env: &EnvMap) -> anyhow::Result<Remote> {
        let token = match env.get_non_empty("BABYSITTER_TOKEN_FILE") {
            Some(p) => Some(Secret::from_file(Path::new(p)).map_err(anyhow::Error::msg)?),
            None => env.get_non_empty("BABYSITTER_TOKEN").map(Secret::new),
        };
        let client = babysitter_common::client::client_tls(
            url,
            token.as_ref(),
            &ClientOptions::default(),
            &babysitter_common::tls::ClientTlsConfig::from_env(env),
        )?;
        Ok(Remote {
            url: url.to_owned(),
            namespace: env
                .get_non_empty("BABYSITTER_NAMESPACE")
                .unwrap_or_default()
                .to_owned(),
            client,
        })
    }

    /// The service client (tonic's take `&mut self`; clones share the channel).
    pub fn client(&self) -> RunServiceClient<AuthedChannel> {
        self.client.clone()
    }

    /// `the orchestrator at URL`.
    fn home_text(&self) -> String {
        format!("the orchestrator at {}", self.url)
    }

    /// A refused call in one line: the server's message, and where it came from.
    fn failed(&self, call: &str, s: &Status) -> String {
        format!(
            "{call} on {}: {} ({:?})",
            self.home_text(),
            s.message(),
            s.code()
        )
    }

    /// The run's `run.json` and stored state cache.
    async fn get(&self, run_id: &str) -> Result<(Value, Option<Value>), String> {
        let r = self
            .client()
            .get_run(pb::GetRunRequest {
                namespace: self.namespace.clone(),
                run_id: run_id.to_owned(),
                include_run_files: true,
            })
            .await
            .map_err(|s| self.failed("GetRun", &s))?
            .into_inner();
        let run_json: Value = serde_json::from_slice(&r.run_json)
            .map_err(|e| format!("run.json from {} is not JSON: {e}", self.home_text()))?;
        if !run_json.is_object() {
            return Err(format!(
                "run.json from {} is not a JSON object",
                self.home_text()
            ));
        }
        let state = if r.state_json.is_empty() {
            None
        } else {
            let v = serde_json::from_slice(&r.state_json).map_err(|e| {
                format!(
                    "state/state.json from {} is not JSON: {e}",
                    self.home_text()
                )
            })?;
            Some(v)
        };
        Ok((run_json, state))
    }

    /// Every event of the run up to its head when the call starts, checksums verified.
    pub async fn events_to_head(&self, run_id: &str) -> Result<Vec<StoredEvent>, String> {
        let mut stream = self
            .client()
            .watch_run(pb::WatchRunRequest {
                namespace: self.namespace.clone(),
                run_id: run_id.to_owned(),
                from_seq: 1,
                include_agent_events: false,
            })
            .await
            .map_err(|s| self.failed("WatchRun", &s))?
            .into_inner();
        let mut head = None;
        let mut out: Vec<StoredEvent> = Vec::new();
        loop {
            if head.is_some_and(|h| out.len() as u64 >= h) {
                break;
            }
            let Some(m) = stream
                .message()
                .await
                .map_err(|s| self.failed("WatchRun", &s))?
            else {
                break;
            };
            if head.is_none() {
                head = m.run.as_ref().map(|r| r.head_seq);
            }
            for e in m.events {
                let ev = babysitter_journal::grpc::event_from_pb(run_id, e)
                    .map_err(|e| format!("{e} (from {})", self.home_text()))?;
                if ev.seq != out.len() as u64 + 1 {
                    return Err(format!(
                        "{} sent event {} of run {run_id} after event {}",
                        self.home_text(),
                        ev.seq,
                        out.len()
                    ));
                }
                out.push(ev);
            }
        }
        Ok(out)
    }
}

/// An ISO-8601 instant as a protobuf timestamp (`None` when it is not one).
fn timestamp(iso: Option<&str>) -> Option<prost_types::Timestamp> {
    let t = chrono::DateTime::parse_from_rfc3339(iso?).ok()?;
    Some(prost_types::Timestamp {
        seconds: t.timestamp(),
        nanos: i32::try_from(t.timestamp_subsec_nanos()).unwrap_or(0),
    })
}

/// An error result as the wire's `TaskError` (`name`, `message`, `stack`, the rest as `data`).
fn task_error(v: &Value) -> cpb::TaskError {
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    cpb::TaskError {
        name: text("name").unwrap_or_else(|| "Error".into()),
        message: text("message").unwrap_or_else(|| v.to_string()),
        stack: text("stack").unwrap_or_default(),
        data_json: v
            .get("data")
            .map(|d| d.to_string().into_bytes().into())
            .unwrap_or_default(),
    }
}

/// An `IterateRun` answer as the engine's [`Iteration`] (what the server's engine returned).
fn iteration_of(r: pb::IterateRunResponse, head: Head) -> Result<Iteration, String> {
    let status = match r.status.as_str() {
        "waiting" => IterationStatus::Waiting,
        "completed" => IterationStatus::Completed,
        "halted" => IterationStatus::Halted,
        "failed" => IterationStatus::Failed,
        "none" => IterationStatus::None,
        other => return Err(format!("unknown iteration status `{other}`")),
    };
    let json = |what: &str, b: &[u8]| -> Result<Option<Value>, String> {
        if b.is_empty() {
            return Ok(None);
        }
        serde_json::from_slice(b)
            .map(Some)
            .map_err(|e| format!("{what} is not JSON: {e}"))
    };
    let next_actions = match json("next_actions_json", &r.next_actions_json)? {
        Some(Value::Array(a)) => a,
        None => Vec::new(),
        Some(_) => return Err("next_actions_json is not a JSON array".into()),
    };
    let (requested, requested_tasks) = r
        .requested
        .into_iter()
        .map(|e| (e.effect_id, e.task_json))
        .unzip();
    Ok(Iteration {
        status,
        reason: (!r.reason.is_empty()).then_some(r.reason),
        output: json("output_json", &r.output_json)?,
        error: json("error_json", &r.error_json)?,
        next_actions,
        requested,
        requested_tasks,
        warnings: r.warnings,
        unreached: Vec::new(),
        js_time: Duration::ZERO,
        warm: false,
        head,
        logs: r
            .logs
            .into_iter()
            .map(|l| LogLine {
                seq: 0,
                label: (!l.label.is_empty()).then_some(l.label),
                message: l.message,
            })
            .collect(),
    })
}

#[async_trait]
impl RunClient for Remote {
    fn server(&self) -> Option<&str> {
        Some(&self.url)
    }

    async fn open(&self, dir: &Path) -> Result<Run, String> {
        let run_id = dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .ok_or_else(|| format!("{} names no run", dir.display()))?;
        babysitter_journal::validate_id("run id", &run_id).map_err(|e| e.to_string())?;
        let (run_json, state) = self.get(&run_id).await?;
        let events = self.events_to_head(&run_id).await?;
        let mut index = EffectIndex::default();
        for e in &events {
            let at = Location::file(&run_id, e.seq, e.file_name());
            index.apply(e, &at).map_err(|e| e.to_string())?;
        }
        let head = events.last().map_or_else(Head::default, |e| Head {
            seq: e.seq,
            ulid: e.ulid.clone(),
        });
        Run::fetched(
            dir,
            Fetched {
                run_json,
                events,
                head,
                index,
                state,
                home: self.home_text(),
            },
        )
    }

    /// `CreateRun` of a client-driven run from the process bundle of `entry`.
    async fn create_run(
        &self,
        _cli: &Cli<'_>,
        dir: &Path,
        spec: lifecycle::NewRun,
        inputs: Option<Value>,
        entry: Option<&Path>,
    ) -> Result<Value, CliError> {
        let Some(entry) = entry else {
            return Err(CliError::plain(
                "Error",
                format!(
                    "a run without a process cannot be created on {}: pass --entry",
                    self.home_text()
                ),
            ));
        };
        let mut arg = entry.display().to_string();
        if let Some(x) = &spec.entrypoint.export_name {
            arg.push('#');
            arg.push_str(x);
        }
        let process = bundle::bundle(&arg)
            .await
            .map_err(|e| CliError::plain("Error", format!("{e:#}")))?;
        let inputs_json = inputs
            .map(|v| serde_json::to_vec(&v).map(Into::into))
            .transpose()
            .map_err(|e| CliError::plain("Error", e.to_string()))?;
        let request = pb::CreateRunRequest {
            namespace: self.namespace.clone(),
            process: Some(process),
            inputs_json,
            labels: Default::default(),
            run_id: spec.run_id.clone(),
            process_id: spec.process_id.clone(),
            request: spec.request.clone(),
            prompt: spec.prompt.clone().unwrap_or_default(),
            idempotency_key: String::new(),
            client_driven: true,
            // `run:create --budget`: the server checks it before each of the run's iterations.
            budget: spec
                .extra
                .get(BUDGET_KEY)
                .and_then(|b| serde_json::from_value::<Budget>(b.clone()).ok())
                .map(babysitter_orchestrator::service::grpc::budget_pb),
        };
        match self.client().create_run(request).await {
            Ok(_) => {}
            Err(s) if s.code() == tonic::Code::AlreadyExists => {
                return Err(CliError::new(
                    "RunAlreadyExistsError",
                    format!("run {} already exists at {}", spec.run_id, dir.display()),
                    Category::Validation,
                ));
            }
            Err(s) => return Err(CliError::plain("Error", self.failed("CreateRun", &s))),
        }
        let (run_json, _) = self
            .get(&spec.run_id)
            .await
            .map_err(|m| CliError::plain("Error", m))?;
        Ok(run_json)
    }

    /// `IterateRun`: the server iterates the run on its engine; the run is read again after it.
    async fn iterate(
        &self,
        run: &Run,
        marker: Option<NewEvent>,
        _user: UserFiles,
    ) -> Result<(Iteration, Run), String> {
        let marker_json = match marker {
            Some(m) => serde_json::to_vec(&m.data).map_err(|e| e.to_string())?,
            None => Vec::new(),
        };
        let r = self
            .client()
            .iterate_run(pb::IterateRunRequest {
                namespace: self.namespace.clone(),
                run_id: run.id.clone(),
                marker_json: marker_json.into(),
            })
            .await
            .map_err(|s| self.failed("IterateRun", &s))?
            .into_inner();
        let after = self.open(&run.dir).await?;
        let head = after
            .inspect(|h, _| h.clone())
            .await
            .map_err(|e| format!("{e:#}"))?;
        let it = iteration_of(r, head)
            .map_err(|m| format!("{m} (IterateRun on {})", self.home_text()))?;
        Ok((it, after))
    }

    async fn hold(&self, _run: &Run, _timeout: Duration) -> Result<Option<RunGuard>, LockError> {
        Ok(None)
    }

    async fn commit_result(&self, run: &Run, commit: Commit) -> Result<(), String> {
        let outcome = match &commit.outcome {
            Ok(v) => cpb::task_result::Outcome::ValueJson(
                serde_json::to_vec(v).map_err(|e| e.to_string())?.into(),
            ),
            Err(e) => cpb::task_result::Outcome::Error(task_error(e)),
        };
        let result = cpb::TaskResult {
            outcome: Some(outcome),
            stdout: commit
                .stdout
                .clone()
                .unwrap_or_default()
                .into_bytes()
                .into(),
            stderr: commit
                .stderr
                .clone()
                .unwrap_or_default()
                .into_bytes()
                .into(),
            started_at: timestamp(commit.started_at.as_deref()),
            finished_at: timestamp(commit.finished_at.as_deref()),
            metadata_json: commit
                .metadata
                .as_ref()
                .map(|m| m.to_string().into_bytes().into())
                .unwrap_or_default(),
            usage: None,
            requests: Vec::new(),
            agent_events: Vec::new(),
        };
        self.client()
            .post_task_result(pb::PostTaskResultRequest {
                namespace: self.namespace.clone(),
                run_id: run.id.clone(),
                effect_id: commit.effect_id.clone(),
                result: Some(result),
            })
            .await
            .map_err(|s| self.failed("PostTaskResult", &s))?;
        Ok(())
    }

    /// `HaltRun`, then the run read again for the event the server appended and the state cache
    /// it rebuilt (`rebuildReason: manual_halt`, as a local seal rebuilds it).
    async fn seal(&self, run: &Run, seal: Seal<'_>) -> anyhow::Result<Sealed> {
        let final_status = if seal.failed {
            pb::HaltFinalStatus::Failed
        } else {
            pb::HaltFinalStatus::Completed
        };
        let r = self
            .client()
            .halt_run(pb::HaltRunRequest {
                namespace: self.namespace.clone(),
                run_id: run.id.clone(),
                reason: seal.reason.to_owned(),
                final_status: final_status as i32,
                force: seal.force,
            })
            .await
            .map_err(|s| anyhow::anyhow!(self.failed("HaltRun", &s)))?
            .into_inner();
        if r.already_terminal && !seal.force {
            anyhow::bail!("run {} had already ended on {}", run.id, self.home_text());
        }
        let after = self.open(&run.dir).await.map_err(anyhow::Error::msg)?;
        let event = after
            .events()
            .await?
            .pop()
            .ok_or_else(|| anyhow::anyhow!("run {} has no events after HaltRun", run.id))?;
        let state = after
            .read_state_cache()
            .map_err(anyhow::Error::msg)?
            .ok_or_else(|| anyhow::anyhow!("run {} has no state cache after HaltRun", run.id))?;
        Ok(Sealed { event, state })
    }
}
