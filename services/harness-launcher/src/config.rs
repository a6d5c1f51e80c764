//! The `harness-launcher` binary's configuration (env prefix `BABYSITTER_LAUNCHER`), layered like
//! every babysitter service: defaults → TOML → env → `--set` → flags.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use babysitter_common::telemetry::TelemetryConfig;
use serde::{Deserialize, Serialize};

use crate::worker::WorkerSettings;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct LauncherConfig {
    /// Config format version. Since v0.1.
    pub version: u32,
    /// Log filter and format. Since v0.1.
    pub telemetry: TelemetryConfig,
    /// The orchestrator to take tasks from. Since v0.1.
    pub orchestrator: OrchestratorLink,
    /// What this worker runs. Since v0.1.
    pub worker: WorkerConfig,
}

impl Default for LauncherConfig {
    fn default() -> Self {
        Self {
            version: 1,
            telemetry: TelemetryConfig::default(),
            orchestrator: OrchestratorLink::default(),
            worker: WorkerConfig::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct OrchestratorLink {
    /// `WorkerService` URL. Since v0.1.
    pub url: String,
    /// File holding the worker-role bearer token. Since v0.1.
    pub token_file: Option<PathBuf>,
}

impl Default for OrchestratorLink {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:50052".into(),
            token_file: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct WorkerConfig {
    /// Stable worker id; empty = `<hostname>-<pid>`. Since v0.1.
    pub id: String,
    /// Namespaces served; empty = every namespace the token allows. Since v0.1.
    pub namespaces: Vec<String>,
    /// Routing labels. Since v0.1.
    pub labels: HashMap<String, String>,
    /// Task kinds offered; empty = everything this build can run here. Since v0.1.
    pub task_kinds: Vec<String>,
    /// Tasks run at once. Since v0.1.
    pub max_concurrency: usize,
    /// Where per-task working directories are made. Since v0.1.
    pub work_dir: PathBuf,
    /// Seconds running tasks get to finish on shutdown. Since v0.1.
    pub drain_timeout_secs: u64,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            id: String::new(),
            namespaces: Vec::new(),
            labels: HashMap::new(),
            task_kinds: Vec::new(),
            max_concurrency: 4,
            work_dir: PathBuf::from("./.babysitter/worker"),
            drain_timeout_secs: 60,
        }
    }
}

/// Whether a `node` binary answers on this machine.
pub fn node_installed() -> bool {
    std::process::Command::new("node")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl WorkerConfig {
    pub fn settings(&self) -> WorkerSettings {
        let worker_id = if self.id.is_empty() {
            let host = std::fs::read_to_string("/etc/hostname")
                .map(|h| h.trim().to_owned())
                .unwrap_or_else(|_| "worker".into());
            format!("{host}-{}", std::process::id())
        } else {
            self.id.clone()
        };
        let task_kinds = if self.task_kinds.is_empty() {
            crate::exec::supported_kinds(node_installed())
        } else {
            self.task_kinds.clone()
        };
        WorkerSettings {
            worker_id,
            namespaces: self.namespaces.clone(),
            labels: self.labels.clone(),
            task_kinds,
            max_concurrency: self.max_concurrency.max(1),
            work_dir: self.work_dir.clone(),
            drain_timeout: Duration::from_secs(self.drain_timeout_secs),
        }
    }
}
