//! The `harness-launcher` binary's configuration (env prefix `BABYSITTER_LAUNCHER`), layered like
//! every babysitter service: defaults → TOML → env → `--set` → flags.
//!
//! The admin API (`HarnessLauncherService`, [`crate::grpc`]) is off unless `[server]` is given
//! (or `--listen`): a worker's job is to call the orchestrator, and an API that kills tasks
//! should not listen anywhere nobody asked for. When it is on, it needs an `admin` token in
//! `[server.auth]` ([`LauncherConfig::admin_api`]): unlike the other services, which run without
//! auth (and warn) when no token is set, there is nothing this API does that an anonymous caller
//! should be allowed to do.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use babysitter_common::auth::Role;
use babysitter_common::server::ServerConfig;
use babysitter_common::telemetry::TelemetryConfig;
use serde::{Deserialize, Serialize};

use babysitter_common::EnvMap;
use babysitter_transport_proxy::config::Secret;

use crate::agent::AgentSettings;
use crate::harness::{Detected, Detector, available};
use crate::outcome::{Price, default_prices};
use crate::provider::{Provider, ProviderConfig, RemoteProxy, default_providers};
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
    /// Agent tasks: harness binaries, providers, proxy, prices. Since v0.1.
    pub agent: AgentConfig,
    /// The admin API (`HarnessLauncherService`: status, harnesses, cancel, drain): unset = not
    /// served. When set, `listen-addr` defaults to 127.0.0.1:0 (the bound address is printed;
    /// 127.0.0.1:50053 is the conventional port) and `[server.auth]` must hold an `admin`
    /// token. Since v0.1.
    pub server: Option<ServerConfig>,
}

/// Why the admin API cannot be served as configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AdminApiConfigError {
    /// `[server]` is set but `[server.auth]` holds no `admin` token.
    #[error("the admin api ([server]) needs a token with role `admin` in [server.auth] tokens")]
    NoAdminToken,
}

impl LauncherConfig {
    /// The admin API's server settings, `None` when it is off; refused without an admin token.
    pub fn admin_api(&self) -> Result<Option<&ServerConfig>, AdminApiConfigError> {
        let Some(server) = &self.server else {
            return Ok(None);
        };
        if !server.auth.tokens.iter().any(|t| t.role == Role::Admin) {
            return Err(AdminApiConfigError::NoAdminToken);
        }
        Ok(Some(server))
    }
}

impl Default for LauncherConfig {
    fn default() -> Self {
        Self {
            version: 1,
            telemetry: TelemetryConfig::default(),
            orchestrator: OrchestratorLink::default(),
            worker: WorkerConfig::default(),
            agent: AgentConfig::default(),
            server: None,
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
    /// TLS to the orchestrator (`https://` URL): its CA, this worker's client certificate.
    /// Since v0.5.
    pub tls: babysitter_common::tls::ClientTlsConfig,
}

impl Default for OrchestratorLink {
    fn default() -> Self {
        Self {
            url: "http://127.0.0.1:50052".into(),
            token_file: None,
            tls: babysitter_common::tls::ClientTlsConfig::default(),
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct AgentConfig {
    /// Harness binaries by adapter name (`claude-code`, `codex`, `gemini-cli`, `pi`,
    /// `opencode`); a harness not listed is looked up on PATH. Since v0.1.
    pub binaries: BTreeMap<String, PathBuf>,
    /// Providers by name, added to / overriding the built-in anthropic, openai, gemini. Since v0.1.
    pub providers: BTreeMap<String, ProviderConfig>,
    /// Provider for tasks that name none. Since v0.1.
    pub default_provider: String,
    /// A remote transport proxy's origin; unset = start one in-process when needed. Since v0.1.
    pub proxy_url: Option<String>,
    /// Env var holding the remote proxy's client token. Since v0.1.
    pub proxy_token_env: Option<String>,
    /// Seconds an agent task may run when neither the task nor the lease says. Since v0.1.
    pub timeout_secs: u64,
    /// USD per million tokens by model (prefix match), over the built-in table. Since v0.1.
    pub prices: BTreeMap<String, Price>,
    /// Extra environment for every harness (e.g. an auditing `HTTPS_PROXY`). Since v0.1.
    pub env: BTreeMap<String, String>,
    /// Seconds before a task whose harness was stopped by a rate limit or quota window is
    /// tried again, resuming its session. Since v0.1.
    pub quota_retry_secs: u64,
}

impl Default for AgentConfig {
    fn default() -> Self {
        Self {
            binaries: BTreeMap::new(),
            providers: BTreeMap::new(),
            default_provider: "anthropic".into(),
            proxy_url: None,
            proxy_token_env: None,
            timeout_secs: 30 * 60,
            prices: BTreeMap::new(),
            env: BTreeMap::new(),
            quota_retry_secs: 300,
        }
    }
}

impl AgentConfig {
    /// Where harnesses are looked for: the configured binaries and `env`'s PATH.
    pub fn detector(&self, env: &EnvMap) -> Detector {
        Detector {
            binaries: self.binaries.clone(),
            path_env: path_env(env),
        }
    }

    /// Detects the harnesses and reads provider keys from `env` (the only place they are read).
    pub async fn settings(&self, env: &EnvMap) -> AgentSettings {
        let checks = self.detector(env).check_all().await;
        self.settings_with(env, available(&checks))
    }

    /// [`settings`](Self::settings) with the harnesses already detected.
    pub fn settings_with(&self, env: &EnvMap, harnesses: Vec<Detected>) -> AgentSettings {
        let path_env = path_env(env);
        let mut configs = default_providers();
        configs.extend(self.providers.clone());
        let providers = configs
            .iter()
            .map(|(name, c)| (name.clone(), Provider::resolve(name, c, env)))
            .collect();
        let mut prices = default_prices();
        prices.extend(self.prices.clone());
        AgentSettings {
            harnesses,
            providers,
            default_provider: self.default_provider.clone(),
            remote_proxy: self.proxy_url.as_ref().map(|url| RemoteProxy {
                origin: url.trim_end_matches('/').to_owned(),
                token: self
                    .proxy_token_env
                    .as_deref()
                    .and_then(|k| env.get_non_empty(k))
                    .map(Secret::new),
            }),
            default_timeout: Duration::from_secs(self.timeout_secs.max(1)),
            prices,
            extra_env: self.env.clone(),
            path_env,
            as_root: rustix::process::geteuid().is_root(),
            default_workspace: None,
            quota_retry: Duration::from_secs(self.quota_retry_secs),
        }
    }
}

fn path_env(env: &EnvMap) -> std::ffi::OsString {
    std::ffi::OsString::from(env.get("PATH").unwrap_or("/usr/local/bin:/usr/bin:/bin"))
}

impl babysitter_common::main_support::HealthPort for LauncherConfig {
    fn health_port(&self) -> Option<&babysitter_common::server::ServerConfig> {
        self.server.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_example_config_loads() {
        let text = include_str!("../harness-launcher.example.toml");
        let c: LauncherConfig = toml::from_str(text).unwrap_or_else(|e| panic!("{e}"));
        let p = &c.agent.providers["local-chat"];
        assert_eq!(
            p.protocol,
            babysitter_transport_proxy::protocol::Protocol::OpenAiChat
        );
        assert_eq!(p.api_key_env.as_deref(), Some("LOCAL_LLM_KEY"));
        assert_eq!(c.agent.timeout_secs, 1800);
        assert_eq!(c.agent.prices["qwen3"].output, 0.0);
    }

    #[test]
    fn the_admin_api_is_off_by_default_and_needs_an_admin_token() {
        let off = LauncherConfig::default();
        assert_eq!(off.admin_api(), Ok(None));
        let dumped = toml::to_string(&off).unwrap_or_else(|e| panic!("{e}"));
        assert!(!dumped.contains("[server]"), "{dumped}");

        let no_token: LauncherConfig =
            toml::from_str("[server]\nlisten-addr = \"127.0.0.1:50053\"\n")
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(no_token.admin_api(), Err(AdminApiConfigError::NoAdminToken));

        let worker_only: LauncherConfig =
            toml::from_str("[server.auth]\ntokens = [{ token = \"w\", role = \"worker\" }]\n")
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            worker_only.admin_api(),
            Err(AdminApiConfigError::NoAdminToken)
        );

        let on: LauncherConfig = toml::from_str(
            "[server]\nlisten-addr = \"127.0.0.1:50053\"\n[server.auth]\ntokens = [{ token = \"a\", role = \"admin\" }]\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let server = on
            .admin_api()
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("the admin api is on"));
        assert_eq!(server.listen_addr.to_string(), "127.0.0.1:50053");
    }

    #[tokio::test]
    async fn provider_keys_come_from_the_env_map_and_config_adds_providers() {
        let c: LauncherConfig = toml::from_str(include_str!("../harness-launcher.example.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        let env = EnvMap::new()
            .with("PATH", "/nonexistent")
            .with("ANTHROPIC_API_KEY", "sk-a")
            .with("LOCAL_LLM_KEY", " ");
        let s = c.agent.settings(&env).await;
        assert!(s.harnesses.is_empty(), "nothing on PATH: {:?}", s.harnesses);
        assert_eq!(
            s.providers["anthropic"]
                .api_key
                .as_ref()
                .map(|k| k.expose()),
            Some("sk-a")
        );
        // A blank key is no key.
        assert!(s.providers["local-chat"].api_key.is_none());
        assert!(s.providers.contains_key("openai") && s.providers.contains_key("gemini"));
    }
}
