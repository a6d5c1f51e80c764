//! The real orchestrator in this process for driving the real [`Worker`]: the run manager as the
//! `orchestrator` binary builds it with its default config (engine, task queue, lease sweeper)
//! over a filesystem journal in a temporary directory, and its `WorkerService` handlers —
//! called directly (`InProcess`, as `babysitter up` runs its worker) or served over gRPC on
//! 127.0.0.1:0 — behind a [`Recorder`] that logs what the worker sends.
//!
//! A test hands the worker a task by starting a run of [`PROCESS`], whose one task is the task
//! definition the test wrote; the task's result is read from the run's journal (its
//! `result.json`, logs and `COST_TRACKED`) and its agent events from the orchestrator's live
//! event hub, by watching the run as `WatchRun` does.
//!
//! [`Worker`]: babysitter_harness_launcher::worker::Worker

#![allow(dead_code)]

#[path = "recording.rs"]
mod recording;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use babysitter_common::EnvMap;
use babysitter_common::server::ServerConfig;
use babysitter_common::worker_api::WorkerApi;
use babysitter_journal::Journal;
use babysitter_journal::store::RunFile;
use babysitter_orchestrator::service::bundle::Bundle;
use babysitter_orchestrator::service::config::OrchestratorConfig;
use babysitter_orchestrator::service::grpc::Services;
use babysitter_orchestrator::service::runs::{
    DEFAULT_NAMESPACE, Decision, NewRun, RunManager, RunWatch,
};
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1::worker_service_client::WorkerServiceClient;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

pub use recording::{Completed, Recorder};

/// The process every test run executes: its one task is the definition the test wrote (the
/// run's input). It first waits at a breakpoint, which the test support approves once it
/// watches the run, so not one of the task's agent events is reported before anyone listens
/// (the orchestrator relays agent events only while someone watches).
pub const PROCESS: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const asWritten = defineTask('launcher.test', (def) => def);
export async function process(inputs, ctx) {
  await ctx.breakpoint({ question: 'is the test watching?' }, { label: 'watching' });
  return await ctx.task(asWritten, inputs.task, { label: inputs.label });
}
"#;

/// What the worker is told it talks to when the handlers are called in process.
pub const IN_PROCESS: &str = "in-process";

/// A guard against a hung orchestrator or worker; never a timing assertion.
const GUARD: Duration = Duration::from_secs(60);

/// A task a test started: one run of [`PROCESS`].
#[derive(Debug, Clone)]
pub struct Task {
    pub name: String,
    pub run_id: String,
    /// The task's effect.
    pub effect_id: String,
    view: watch::Receiver<RunView>,
}

/// What watching a task's run has shown so far.
#[derive(Debug, Default)]
struct RunView {
    /// The task's effect, once requested.
    effect_id: Option<String>,
    /// A summary listed the task pending: the queue held it.
    queued: bool,
    /// Its `EFFECT_RESOLVED` (or `EFFECT_CANCELLED`) is journaled.
    resolved: bool,
    /// Its `COST_TRACKED`.
    cost: Option<Value>,
    /// The agent events the orchestrator relayed to this watcher.
    agent_events: Vec<cpb::AgentEvent>,
    status_reason: String,
    /// The watch ended: the run's terminal event (and every agent batch) has been delivered.
    ended: bool,
    /// The watch or the breakpoint approval failed.
    failure: Option<String>,
}

/// A task's result as the orchestrator stored it.
#[derive(Debug, Clone)]
pub struct Stored {
    /// `tasks/<effectId>/result.json`.
    pub doc: Value,
    /// `stdout.log` / `stderr.log` (empty when the worker sent none).
    pub stdout: String,
    pub stderr: String,
    /// The task's `COST_TRACKED` event data (provider, model, tokens, cost).
    pub cost: Option<Value>,
}

impl Stored {
    /// `Ok(value)` or `Err(error)` as `result.json` records them (`{name, message, data?}`).
    pub fn outcome(&self) -> Result<&Value, &Value> {
        match self.doc["status"].as_str() {
            Some("ok") => Ok(&self.doc["value"]),
            _ => Err(&self.doc["error"]),
        }
    }

    /// The stored error; panics (showing the result) when the task succeeded.
    pub fn error(&self) -> &Value {
        self.outcome()
            .err()
            .unwrap_or_else(|| panic!("expected an error, got {}", self.doc))
    }

    pub fn metadata(&self) -> &Value {
        &self.doc["metadata"]
    }
}

pub struct Orchestrator {
    manager: RunManager,
    recorder: Recorder,
    /// The orchestrator endpoint the worker's admin API reports.
    pub endpoint: String,
    tasks: Mutex<HashMap<String, Task>>,
    collectors: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    shutdown: CancellationToken,
    server: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Orchestrator {
    /// The worker calls the handlers in this process (no token, no network).
    pub async fn start() -> Self {
        let (manager, dir) = manager(OrchestratorConfig::default()).await;
        let shutdown = CancellationToken::new();
        let services = Services::new(manager.clone(), shutdown.clone());
        let api: Arc<dyn WorkerApi> = Arc::new(services.workers.in_process());
        Self::with(manager, dir, api, IN_PROCESS.to_owned(), shutdown, None)
    }

    /// The worker calls `WorkerService` over gRPC on 127.0.0.1:0, served as the binary serves it
    /// (the shared server builder, a default `[server]` config: its limits and compression).
    pub async fn start_grpc() -> Self {
        Self::start_grpc_with(OrchestratorConfig::default()).await
    }

    /// [`Orchestrator::start_grpc`] with this config (its journal store set here).
    pub async fn start_grpc_with(config: OrchestratorConfig) -> Self {
        let (manager, dir) = manager(config).await;
        let shutdown = CancellationToken::new();
        let server =
            Services::new(manager.clone(), shutdown.clone()).into_server(&ServerConfig::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("bind: {e}"));
        let url = format!(
            "http://{}",
            listener.local_addr().unwrap_or_else(|e| panic!("{e}"))
        );
        let token = shutdown.clone();
        let task = tokio::spawn(async move {
            server
                .serve_with_listener(listener, token)
                .await
                .unwrap_or_else(|e| panic!("orchestrator server: {e}"));
        });
        let channel =
            babysitter_common::client::connect_lazy(&url, None).unwrap_or_else(|e| panic!("{e}"));
        let client: WorkerServiceClient<_> =
            babysitter_common::client::ClientOptions::default().client(channel);
        Self::with(manager, dir, Arc::new(client), url, shutdown, Some(task))
    }

    fn with(
        manager: RunManager,
        dir: tempfile::TempDir,
        api: Arc<dyn WorkerApi>,
        endpoint: String,
        shutdown: CancellationToken,
        server: Option<tokio::task::JoinHandle<()>>,
    ) -> Self {
        Self {
            manager,
            recorder: Recorder::new(api),
            endpoint,
            tasks: Mutex::new(HashMap::new()),
            collectors: Mutex::new(Vec::new()),
            shutdown,
            server,
            _dir: dir,
        }
    }

    /// What the worker calls: the orchestrator behind the recorder.
    pub fn api(&self) -> Arc<dyn WorkerApi> {
        Arc::new(self.recorder.clone())
    }

    pub fn recorder(&self) -> &Recorder {
        &self.recorder
    }

    /// Starts a run whose one task is `def` (its `kind` set to `kind`), labelled `name`, and
    /// returns once the orchestrator has queued the task (or already resolved it).
    pub async fn push(&self, name: &str, kind: &str, mut def: Value) -> Task {
        if let Some(d) = def.as_object_mut() {
            d.insert("kind".into(), json!(kind));
        }
        let run = self
            .manager
            .create(NewRun {
                bundle: Bundle {
                    entry_path: "main.mjs".into(),
                    export_name: None,
                    files: vec![(
                        "main.mjs".into(),
                        bytes::Bytes::from_static(PROCESS.as_bytes()),
                    )],
                },
                inputs: Some(json!({"label": name, "task": def})),
                ..NewRun::default()
            })
            .await
            .unwrap_or_else(|e| panic!("create the run of {name}: {e}"));
        let watch = self
            .manager
            .watch(DEFAULT_NAMESPACE, &run.run_id, 1, true)
            .await
            .unwrap_or_else(|e| panic!("watch the run of {name}: {e}"));
        let (tx, mut view) = watch::channel(RunView::default());
        let collector = tokio::spawn(collect(self.manager.clone(), run.run_id.clone(), watch, tx));
        lock(&self.collectors).push(collector);
        let settled = tokio::time::timeout(
            GUARD,
            view.wait_for(|v| {
                // The summary (pending counts) may show the task before its journal event does.
                v.effect_id.is_some() && (v.queued || v.resolved) || v.ended || v.failure.is_some()
            }),
        )
        .await;
        // The watch's read guard goes with the closure, before the view is read again.
        let effect_id = settled
            .ok()
            .and_then(Result::ok)
            .filter(|v| v.queued || v.resolved)
            .and_then(|v| v.effect_id.clone());
        let effect_id = effect_id.unwrap_or_else(|| {
            panic!(
                "task {name} was not queued within {GUARD:?}: {:?}",
                view.borrow()
            )
        });
        let task = Task {
            name: name.to_owned(),
            run_id: run.run_id,
            effect_id,
            view,
        };
        lock(&self.tasks).insert(name.to_owned(), task.clone());
        task
    }

    /// The task started as `name`.
    pub fn task(&self, name: &str) -> Task {
        lock(&self.tasks)
            .get(name)
            .cloned()
            .unwrap_or_else(|| panic!("no task {name} was pushed"))
    }

    /// Waits for the task's result to be journaled (`within` guards against a hung worker), then
    /// reads it as the orchestrator stored it.
    pub async fn result(&self, name: &str, within: Duration) -> Stored {
        let task = self.task(name);
        let mut view = task.view.clone();
        let waited = tokio::time::timeout(
            within,
            view.wait_for(|v| v.resolved || v.ended || v.failure.is_some()),
        )
        .await;
        let sent = self
            .recorder
            .read(|l| l.completions(&task.run_id, &task.effect_id));
        let resolved = waited.is_ok_and(|r| r.is_ok_and(|v| v.resolved));
        if !resolved {
            panic!(
                "task {name} not resolved within {within:?}: {:?}; the worker sent {sent:?}",
                view.borrow()
            );
        }
        let cost = view.borrow().cost.clone();
        self.stored(&task, cost).await
    }

    async fn stored(&self, task: &Task, cost: Option<Value>) -> Stored {
        let journal = self.manager.journal();
        let doc: Value = serde_json::from_slice(&read(journal, task, "result.json").await)
            .unwrap_or_else(|e| panic!("result.json of {}: {e}", task.name));
        let stdout = if doc.get("stdoutRef").is_some() {
            String::from_utf8_lossy(&read(journal, task, "stdout.log").await).into_owned()
        } else {
            String::new()
        };
        let stderr = if doc.get("stderrRef").is_some() {
            String::from_utf8_lossy(&read(journal, task, "stderr.log").await).into_owned()
        } else {
            String::new()
        };
        Stored {
            doc,
            stdout,
            stderr,
            cost,
        }
    }

    /// The task's agent events as a watcher of its run received them from the orchestrator,
    /// once the run has ended (by then every batch has been relayed). They must be exactly
    /// what the worker reported.
    pub async fn events(&self, name: &str) -> Vec<cpb::AgentEvent> {
        let task = self.task(name);
        let mut view = task.view.clone();
        tokio::time::timeout(GUARD, view.wait_for(|v| v.ended))
            .await
            .unwrap_or_else(|_| panic!("the run of {name} did not end within {GUARD:?}"))
            .unwrap_or_else(|e| panic!("the watch of {name} ended: {e}"));
        let relayed = view.borrow().agent_events.clone();
        let sent = self
            .recorder
            .read(|l| l.events_of(&task.run_id, &task.effect_id));
        assert_eq!(
            relayed, sent,
            "the orchestrator relays every agent event of {name} the worker reported, unchanged"
        );
        relayed
    }

    /// The capabilities the worker registered with (waits for its registration).
    pub async fn capabilities(&self) -> cpb::WorkerCapabilities {
        self.recorder
            .wait_for(GUARD, |l| l.registered.last().cloned())
            .await
            .unwrap_or_else(|| panic!("the worker never registered"))
    }

    /// The leases under which the task was handed to the worker.
    pub fn leases(&self, name: &str) -> Vec<String> {
        let t = self.task(name);
        self.recorder.read(|l| l.leases(&t.run_id, &t.effect_id))
    }

    /// The completion the worker sent for the task, once the orchestrator has answered it
    /// (accepted: the task's result is journaled by then).
    pub async fn sent(&self, name: &str) -> Completed {
        let t = self.task(name);
        let sent = self
            .recorder
            .wait_for(GUARD, |l| {
                Some(l.completions(&t.run_id, &t.effect_id)).filter(|c| !c.is_empty())
            })
            .await
            .unwrap_or_default();
        match sent.as_slice() {
            [one] if one.refused.is_none() => one.clone(),
            other => panic!("expected one accepted completion of {name}, got {other:?}"),
        }
    }

    /// `next_max_tasks` of the worker's completion of the task.
    pub async fn next_asked(&self, name: &str) -> u32 {
        self.sent(name).await.request.next_max_tasks
    }

    /// Whether the task waits in the orchestrator's queue, never handed to any worker.
    pub fn queued_unleased(&self, name: &str) -> bool {
        let t = self.task(name);
        self.manager.queue().counts_for_run(&t.run_id) == (1, 0) && self.leases(name).is_empty()
    }

    /// The run's `status_reason` once it starts with `prefix`.
    pub async fn status_reason(&self, name: &str, prefix: &str) -> String {
        let mut view = self.task(name).view;
        tokio::time::timeout(
            GUARD,
            view.wait_for(|v| v.status_reason.starts_with(prefix)),
        )
        .await
        .unwrap_or_else(|_| {
            panic!("the run of {name} never gave a reason starting with {prefix:?}")
        })
        .unwrap_or_else(|e| panic!("the watch of {name} ended: {e}"))
        .status_reason
        .clone()
    }

    pub async fn stop(self) {
        for c in lock(&self.collectors).drain(..) {
            c.abort();
        }
        self.shutdown.cancel();
        if let Some(server) = self.server {
            let _ = server.await;
        }
        self.manager.shutdown().await;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The run manager as the `orchestrator` binary starts it with `config`, over a filesystem
/// journal (`file://<tempdir>/runs`, babysitter's layout).
async fn manager(mut config: OrchestratorConfig) -> (RunManager, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let runs = dir.path().join("runs");
    std::fs::create_dir_all(&runs).unwrap_or_else(|e| panic!("{e}"));
    config.journal.store.url = format!("file://{}", runs.display());
    let store = config
        .open_journal_store(&EnvMap::new())
        .await
        .unwrap_or_else(|e| panic!("journal store: {e}"));
    let journal = Journal::new(store, config.journal.limits.journal_options());
    let (manager, _) = config
        .start_manager(journal, config.runs_dir(), Arc::default())
        .await
        .unwrap_or_else(|e| panic!("run manager: {e}"));
    (manager, dir)
}

async fn read(journal: &Journal, task: &Task, file: &str) -> bytes::Bytes {
    let path = RunFile::task(&task.effect_id, file).unwrap_or_else(|e| panic!("{file}: {e}"));
    journal
        .get_run_file(&task.run_id, &path)
        .await
        .unwrap_or_else(|e| panic!("{file} of {}: {e}", task.name))
}

/// Watches one test run to its end: approves its breakpoint (the watch is open now), notes its
/// task's request, queueing, resolution and cost, and keeps the agent events relayed.
async fn collect(
    manager: RunManager,
    run_id: String,
    mut watch: RunWatch,
    tx: watch::Sender<RunView>,
) {
    while let Some(update) = watch.next().await {
        let update = match update {
            Ok(u) => u,
            Err(e) => {
                tx.send_modify(|v| v.failure = Some(e.to_string()));
                return;
            }
        };
        // One change per update, so a waiter never sees a resolution without its cost.
        let mut breakpoints = Vec::new();
        tx.send_modify(|v| {
            for e in &update.events {
                let data = &e.body.data;
                let effect = data["effectId"].as_str().unwrap_or_default().to_owned();
                match e.body.kind.as_str() {
                    "EFFECT_REQUESTED" if data["kind"] == "breakpoint" => breakpoints.push(effect),
                    "EFFECT_REQUESTED" => v.effect_id = Some(effect),
                    "EFFECT_RESOLVED" | "EFFECT_CANCELLED" => {
                        v.resolved |= v.effect_id.as_deref() == Some(effect.as_str());
                    }
                    "COST_TRACKED" => v.cost = Some(data.clone()),
                    _ => {}
                }
            }
            if let Some(run) = &update.run {
                v.status_reason = run.status_reason.clone();
                v.queued |= run.pending_by_kind.keys().any(|k| k != "breakpoint");
            }
            for batch in &update.agent_events {
                v.agent_events.extend(
                    batch
                        .events
                        .iter()
                        .map(babysitter_orchestrator::service::grpc::agent_event_pb),
                );
            }
        });
        // The watch is open: the process may go on to its task.
        for effect in breakpoints {
            let decision = Decision {
                approved: true,
                principal: "launcher-tests".into(),
                ..Decision::default()
            };
            if let Err(e) = manager
                .resolve_breakpoint(DEFAULT_NAMESPACE, &run_id, &effect, decision)
                .await
            {
                tx.send_modify(|v| v.failure = Some(format!("approve the breakpoint: {e}")));
            }
        }
    }
    tx.send_modify(|v| v.ended = true);
}
