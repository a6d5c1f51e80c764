//! The agent suites' service stack: the `journal` (filesystem store) and the `orchestrator`
//! as OS processes on 127.0.0.1, and `harness-launcher` workers started from TOML configs;
//! plus watching a run to its end and picking its events.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use babysitter_harness_launcher::config::{
    AgentConfig, LauncherConfig, OrchestratorLink, WorkerConfig,
};
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::journal::v1 as jpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_tests::ServiceProcess;

use super::cluster;

/// A guard against a hung CLI or service, not a timing assertion.
pub const RUN_GUARD: Duration = Duration::from_secs(300);

/// Journal and orchestrator processes, the worker once started, and their directory.
pub struct Stack {
    pub dir: tempfile::TempDir,
    pub journal: ServiceProcess,
    pub orchestrator: ServiceProcess,
    /// Workers started, in order.
    pub workers: Vec<ServiceProcess>,
}

impl Stack {
    pub fn start() -> Stack {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = format!("file://{}", dir.path().join("journal").display());
        let journal = cluster::start_journal(&store, &[], &[], dir.path().join("journal.log"));
        let args = cluster::orchestrator_args(
            &format!("http://{}", journal.ready),
            "127.0.0.1:0",
            &dir.path().join("orchestrator-runs"),
        );
        let orchestrator = cluster::start_orchestrator(&args, dir.path().join("orchestrator.log"));
        Stack {
            dir,
            journal,
            orchestrator,
            workers: Vec::new(),
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.orchestrator.ready)
    }

    /// Starts `harness-launcher` `id` (its own work dir) from a TOML config with `agent`;
    /// ready once it has detected its harnesses (registration follows at once).
    pub fn start_worker(&mut self, id: &str, agent: AgentConfig) -> String {
        let config = LauncherConfig {
            orchestrator: OrchestratorLink {
                url: self.url(),
                token_file: None,
                ..OrchestratorLink::default()
            },
            worker: WorkerConfig {
                id: id.into(),
                work_dir: self.dir.path().join(format!("work-{id}")),
                max_concurrency: 2,
                drain_timeout_secs: 10,
                ..WorkerConfig::default()
            },
            agent,
            ..LauncherConfig::default()
        };
        let file = self.dir.path().join(format!("harness-launcher-{id}.toml"));
        let text = toml::to_string(&config).expect("the launcher config as TOML");
        std::fs::write(&file, text).expect("write the launcher config");
        let w = ServiceProcess::start(
            &babysitter_tests::workspace_bin("harness-launcher").expect("the launcher binary"),
            &["--config".to_owned(), file.display().to_string()],
            &[],
            "harness-launcher: harnesses ",
            self.dir.path().join(format!("harness-launcher-{id}.log")),
        )
        .expect("harness-launcher");
        let harnesses = w.ready.clone();
        self.workers.push(w);
        harnesses
    }

    pub fn logs(&self) -> String {
        let mut s = format!(
            "--- orchestrator\n{}\n--- journal\n{}\n",
            self.orchestrator.log_tail(40),
            self.journal.log_tail(20)
        );
        for w in &self.workers {
            s.push_str(&format!("--- {}\n{}\n", w.name(), w.log_tail(40)));
        }
        s
    }
}

/// What a watch of the whole run saw.
#[derive(Default)]
pub struct Watched {
    pub events: Vec<jpb::Event>,
    /// Agent events by effect id, in arrival order.
    pub agent: BTreeMap<String, Vec<cpb::AgentEvent>>,
    pub last: Option<pb::Run>,
}

pub async fn watch_to_end(
    stream: &mut tonic::Streaming<pb::WatchRunResponse>,
    stack: &Stack,
) -> Watched {
    let mut w = Watched::default();
    let deadline = tokio::time::Instant::now() + RUN_GUARD;
    loop {
        let Ok(msg) = tokio::time::timeout_at(deadline, stream.message()).await else {
            panic!("the run did not finish:\n{}", stack.logs());
        };
        let Some(m) = msg.unwrap_or_else(|e| panic!("watch: {e}\n{}", stack.logs())) else {
            return w;
        };
        w.events.extend(m.events);
        for g in m.agent_events {
            w.agent.entry(g.effect_id).or_default().extend(g.events);
        }
        if let Some(r) = m.run {
            w.last = Some(r);
        }
    }
}

/// The run's single event of `ty`; panics naming the types when there is not exactly one.
pub fn only<'a>(events: &'a [jpb::Event], ty: &str) -> &'a jpb::Event {
    let found: Vec<&jpb::Event> = events.iter().filter(|e| e.r#type == ty).collect();
    let types: Vec<&str> = events.iter().map(|e| e.r#type.as_str()).collect();
    assert_eq!(found.len(), 1, "exactly one {ty}: {types:?}");
    found[0]
}

/// The run's single `EFFECT_RESOLVED` (its data) and the `result.json` it names, read from the
/// journal service.
pub async fn resolution(stack: &Stack, run_id: &str) -> (serde_json::Value, serde_json::Value) {
    let stored = cluster::journal_events(&stack.journal.ready, None, run_id).await;
    let resolved = cluster::data(only(&stored, "EFFECT_RESOLVED"));
    let result_ref = resolved["resultRef"]
        .as_str()
        .expect("resultRef")
        .to_owned();
    let result = serde_json::from_slice(
        &cluster::journal_file(&stack.journal.ready, None, run_id, &result_ref).await,
    )
    .expect("result.json is JSON");
    (resolved, result)
}
