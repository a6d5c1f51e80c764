//! Typed proxy configuration: routes (which upstream serves which client protocol and model),
//! upstream providers, timeouts, retries and limits.
//!
//! Why two layers: [`ConfigFile`] is what a person writes (kebab-case TOML, unknown keys
//! rejected, secrets referenced by env-var name or file path, never inlined), and
//! [`ProxyConfig`] is the validated result with keys already read. The binary loads
//! [`ConfigFile`] with the shared layered loader (`babysitter_common::config::ConfigLoader`:
//! defaults → TOML file → `BABYSITTER_TRANSPORT_PROXY__…` environment → `--set` → flags, see
//! [`ENV_PREFIX`]), so it is `Serialize` + `Default` and every key has a default. The
//! environment is passed in as a lookup function so that tests inject values and nothing deep
//! in the code reads the process environment. Secrets live in [`Secret`], whose `Debug` never prints them. The shapes
//! follow `proto/babysitter/transport_proxy/v1` (`Route`, `RouteMatch`, `Upstream`,
//! `RoutePolicy`) so the gRPC control API can map onto them one to one. An upstream's
//! `base-url` is stored as written; what it means (the SDK convention of the protocol spoken:
//! `https://api.anthropic.com` → `…/v1/messages`) is decided in one place,
//! `upstream::api_base`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use babysitter_common::telemetry::TelemetryConfig;
use serde::{Deserialize, Serialize};

use crate::protocol::Protocol;

/// Prefix of the environment variables the binary reads as config keys
/// (`BABYSITTER_TRANSPORT_PROXY__MAX_BODY_BYTES`, `…__DEFAULTS__MAX_RETRIES`, …).
pub const ENV_PREFIX: &str = "BABYSITTER_TRANSPORT_PROXY";

/// The TOML file shape.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConfigFile {
    /// Config format version. Since v0.1.
    #[serde(default = "one")]
    pub version: u32,
    /// Listen address; port 0 picks a free one. Since v0.1.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Largest accepted request body in bytes (413 above). Since v0.1.
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    /// Env var holding the token clients must present; open if neither this nor the file is set.
    #[serde(default)]
    pub proxy_token_env: Option<String>,
    /// File holding the client token (trailing whitespace trimmed). Since v0.2.
    #[serde(default)]
    pub proxy_token_file: Option<PathBuf>,
    /// Directory for durable state (the Gemini thoughtSignature store). Memory only when unset.
    /// Since v0.2.
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    /// Bound of the signature store. Since v0.2.
    #[serde(default = "default_sig_max")]
    pub signature_store_max_entries: usize,
    /// Lifetime of a stored signature, seconds. Since v0.2.
    #[serde(default = "default_sig_ttl")]
    pub signature_store_ttl_secs: u64,
    /// Timeouts and retries for routes that do not set their own. Since v0.2.
    #[serde(default)]
    pub defaults: PolicyFile,
    /// Routes, tried by priority (highest first), ties in file order. Since v0.2.
    #[serde(default)]
    pub routes: Vec<RouteFile>,
    /// The gRPC control API (`TransportProxyService`: routes and stats) and its listener,
    /// limits and tokens; not served when absent. Since v0.2.
    #[serde(default)]
    pub control: Option<babysitter_common::server::ServerConfig>,
    /// Log filter and format (OTLP export from the standard `OTEL_*` variables). Since v0.3.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// Where route changes made through the control API are kept (JSON, replaced atomically on
    /// every change). When the file exists at start, its routes and revision replace
    /// `[[routes]]`; delete it to return to the config's routes. Changes live in memory only
    /// when unset. Since v0.3.
    #[serde(default)]
    pub routes_state_file: Option<PathBuf>,
    /// TLS on the HTTP front (`listen`): certificate, key, and with `client-ca-file` a client
    /// certificate of that CA required at the handshake; reloaded from disk. Off unless
    /// `cert-file` is set. Since v0.5.
    #[serde(default)]
    pub tls: babysitter_common::tls::ServerTlsConfig,
}

impl Default for ConfigFile {
    fn default() -> Self {
        Self {
            version: one(),
            listen: default_listen(),
            max_body_bytes: default_max_body(),
            proxy_token_env: None,
            proxy_token_file: None,
            data_dir: None,
            signature_store_max_entries: default_sig_max(),
            signature_store_ttl_secs: default_sig_ttl(),
            defaults: PolicyFile::default(),
            routes: Vec::new(),
            control: None,
            telemetry: TelemetryConfig::default(),
            routes_state_file: None,
            tls: babysitter_common::tls::ServerTlsConfig::default(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct RouteFile {
    /// `[a-z0-9-]+`.
    pub name: String,
    /// Client protocol this route takes; any when unset.
    #[serde(default)]
    pub front: Option<Protocol>,
    /// Requested model names, exact or with a trailing `*`; any when empty.
    #[serde(default)]
    pub models: Vec<String>,
    #[serde(default)]
    pub priority: i32,
    pub upstream: UpstreamFile,
    #[serde(default)]
    pub policy: PolicyFile,
}

/// Kind of provider: decides URL layout and authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Provider {
    /// `x-api-key`, Messages protocol.
    Anthropic,
    /// Bearer key; Chat Completions or Responses.
    Openai,
    /// `api-key` header, deployment + api-version in the URL.
    AzureOpenai,
    /// `x-goog-api-key`.
    Gemini,
    /// Bearer token (Vertex AI).
    Vertex,
}

impl Provider {
    fn default_protocol(self) -> Protocol {
        match self {
            Provider::Anthropic => Protocol::Anthropic,
            Provider::Openai | Provider::AzureOpenai => Protocol::OpenAiChat,
            Provider::Gemini | Provider::Vertex => Protocol::Gemini,
        }
    }

    /// The base URL when a route names none, written as the provider's SDK takes it
    /// (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`, `GOOGLE_GEMINI_BASE_URL`); azure-openai and
    /// vertex have none.
    pub(crate) fn default_base_url(self) -> Option<&'static str> {
        match self {
            Provider::Anthropic => Some("https://api.anthropic.com"),
            Provider::Openai => Some("https://api.openai.com/v1"),
            Provider::Gemini => Some("https://generativelanguage.googleapis.com"),
            Provider::AzureOpenai | Provider::Vertex => None,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct UpstreamFile {
    pub provider: Provider,
    /// Protocol spoken upstream; the provider's usual one when unset.
    #[serde(default)]
    pub protocol: Option<Protocol>,
    /// Base URL as the protocol's SDK takes it (rule and table: `upstream::api_base`):
    /// Anthropic `https://api.anthropic.com` (requests go to `{base}/v1/messages`), Gemini
    /// `https://generativelanguage.googleapis.com` (`{base}/v1beta/models/…`), OpenAI
    /// `https://api.openai.com/v1` with its version (`{base}/chat/completions`; a bare host gets
    /// `/v1`); a base already ending in a version (`…/v1`, `…/v1beta`) gets no second one.
    /// Azure OpenAI: the resource endpoint `https://<r>.openai.azure.com`; Vertex: the full
    /// `https://aiplatform.googleapis.com/v1/projects/<p>/locations/<l>/publishers/google`.
    /// The provider's default (above) when unset.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Model sent upstream; the client's model when unset.
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub api_key_env: Option<String>,
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// Forward the harness's own key instead of injecting one.
    #[serde(default)]
    pub pass_through_client_key: bool,
    #[serde(default)]
    pub azure_deployment: Option<String>,
    #[serde(default)]
    pub azure_api_version: Option<String>,
    /// Extra headers on every upstream request (no secrets here).
    #[serde(default)]
    pub extra_headers: BTreeMap<String, String>,
    /// `max_tokens` for an Anthropic upstream when the client gave none.
    #[serde(default = "default_max_tokens")]
    pub default_max_tokens: u64,
    /// Forward reasoning controls as Chat `reasoning_effort` (non-reasoning models reject it).
    #[serde(default)]
    pub forward_reasoning_effort: bool,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PolicyFile {
    pub connect_timeout_secs: Option<u64>,
    /// Until the upstream's response headers.
    pub first_byte_timeout_secs: Option<u64>,
    /// Longest silence inside a response body.
    pub idle_timeout_secs: Option<u64>,
    /// Retries on 429 / 5xx / connect errors before the first byte reached the client.
    pub max_retries: Option<u32>,
    /// First back-off; doubles per retry (capped at 8 s).
    pub retry_backoff_ms: Option<u64>,
}

fn one() -> u32 {
    1
}
fn default_listen() -> String {
    "127.0.0.1:0".to_owned()
}
fn default_max_body() -> usize {
    32 * 1024 * 1024
}
fn default_max_tokens() -> u64 {
    8192
}
fn default_sig_max() -> usize {
    100_000
}
fn default_sig_ttl() -> u64 {
    7 * 24 * 3600
}

/// A secret string; `Debug` is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Self(s.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    pub listen: SocketAddr,
    pub max_body_bytes: usize,
    pub proxy_token: Option<Secret>,
    pub data_dir: Option<PathBuf>,
    pub signature_store_max_entries: usize,
    pub signature_store_ttl: Duration,
    pub routes: Vec<Route>,
    /// Where control-API route changes are persisted (none: memory only).
    pub routes_state_file: Option<PathBuf>,
    /// Revision of `routes` when they came from the routes state file (0: from the config).
    pub routes_revision: u64,
    pub control: Option<babysitter_common::server::ServerConfig>,
}

impl ProxyConfig {
    /// A config with `routes` and defaults for everything else (tests, embedding).
    pub fn with_routes(routes: Vec<Route>) -> Self {
        Self {
            listen: ([127, 0, 0, 1], 0).into(),
            max_body_bytes: default_max_body(),
            proxy_token: None,
            data_dir: None,
            signature_store_max_entries: default_sig_max(),
            signature_store_ttl: Duration::from_secs(default_sig_ttl()),
            routes,
            routes_state_file: None,
            routes_revision: 0,
            control: None,
        }
    }

    /// The route for a request (see [`select_route`]).
    pub fn route_for(&self, front: Protocol, model: &str) -> Option<usize> {
        select_route(self.routes.iter(), front, model)
    }
}

/// The route for a request: matching front and model, highest priority, earliest on ties.
pub fn select_route<'a>(
    routes: impl Iterator<Item = &'a Route>,
    front: Protocol,
    model: &str,
) -> Option<usize> {
    let mut best: Option<(usize, i32)> = None;
    for (i, r) in routes.enumerate() {
        if r.matches(front, model) && best.is_none_or(|(_, p)| r.priority > p) {
            best = Some((i, r.priority));
        }
    }
    best.map(|(i, _)| i)
}

#[derive(Debug, Clone)]
pub struct Route {
    pub name: String,
    pub front: Option<Protocol>,
    pub models: Vec<String>,
    pub priority: i32,
    pub upstream: Upstream,
    pub policy: Policy,
}

impl Route {
    /// A catch-all route to `upstream` with default policy.
    pub fn new(name: impl Into<String>, upstream: Upstream) -> Self {
        Self {
            name: name.into(),
            front: None,
            models: Vec::new(),
            priority: 0,
            upstream,
            policy: Policy::default(),
        }
    }

    pub fn matches(&self, front: Protocol, model: &str) -> bool {
        self.front.is_none_or(|f| f == front)
            && (self.models.is_empty()
                || self.models.iter().any(|m| match m.strip_suffix('*') {
                    Some(prefix) => model.starts_with(prefix),
                    None => m == model,
                }))
    }
}

#[derive(Debug, Clone)]
pub struct Upstream {
    pub provider: Provider,
    pub protocol: Protocol,
    pub base_url: String,
    pub model: Option<String>,
    pub api_key: Option<Secret>,
    /// Where `api_key` came from (names only, shown by the control API).
    pub api_key_env: Option<String>,
    pub api_key_file: Option<PathBuf>,
    pub pass_through_client_key: bool,
    pub azure_deployment: Option<String>,
    pub azure_api_version: Option<String>,
    pub extra_headers: Vec<(String, String)>,
    pub default_max_tokens: u64,
    pub forward_reasoning_effort: bool,
}

impl Upstream {
    /// An upstream of `provider` at `base_url` speaking its usual protocol (tests, embedding).
    pub fn new(provider: Provider, base_url: impl Into<String>) -> Self {
        Self {
            provider,
            protocol: provider.default_protocol(),
            base_url: base_url.into(),
            model: None,
            api_key: None,
            api_key_env: None,
            api_key_file: None,
            pass_through_client_key: false,
            azure_deployment: None,
            azure_api_version: None,
            extra_headers: Vec::new(),
            default_max_tokens: default_max_tokens(),
            forward_reasoning_effort: false,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub connect_timeout: Duration,
    pub first_byte_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_retries: u32,
    pub retry_backoff: Duration,
}

impl Default for Policy {
    /// Connect 10 s; first byte 600 s (the legacy proxy's call timeout: long prompts are slow
    /// to start); idle 300 s inside a stream; 2 retries (legacy default) from 250 ms.
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            first_byte_timeout: Duration::from_secs(600),
            idle_timeout: Duration::from_secs(300),
            max_retries: 2,
            retry_backoff: Duration::from_millis(250),
        }
    }
}

impl Policy {
    fn layered(base: Policy, f: &PolicyFile) -> Policy {
        Policy {
            connect_timeout: f
                .connect_timeout_secs
                .map_or(base.connect_timeout, Duration::from_secs),
            first_byte_timeout: f
                .first_byte_timeout_secs
                .map_or(base.first_byte_timeout, Duration::from_secs),
            idle_timeout: f
                .idle_timeout_secs
                .map_or(base.idle_timeout, Duration::from_secs),
            max_retries: f.max_retries.unwrap_or(base.max_retries),
            retry_backoff: f
                .retry_backoff_ms
                .map_or(base.retry_backoff, Duration::from_millis),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    #[error("config file unreadable: {0}")]
    Toml(#[from] toml::de::Error),
    #[error("unsupported config version {0}")]
    Version(u32),
    #[error("invalid listen address {0}")]
    Listen(String),
    #[error("route {route}: {message}")]
    Route { route: String, message: String },
    #[error("env var {0} named by the config is not set")]
    MissingEnv(String),
    #[error("key file {path} unreadable: {source}")]
    KeyFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("routes state file {path}: {message}")]
    RoutesState { path: PathBuf, message: String },
}

/// Reads a key from the env var named `env_name`, else from `file`.
pub fn read_secret(
    env_name: Option<&String>,
    file: Option<&PathBuf>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Secret>, ConfigError> {
    match (env_name, file) {
        (Some(name), _) => Ok(Some(Secret(
            env(name).ok_or_else(|| ConfigError::MissingEnv(name.clone()))?,
        ))),
        (None, Some(path)) => {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::KeyFile {
                path: path.clone(),
                source,
            })?;
            Ok(Some(Secret(text.trim_end().to_owned())))
        }
        (None, None) => Ok(None),
    }
}

impl ConfigFile {
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        Ok(toml::from_str(text)?)
    }

    /// Validates and reads secrets; `env` looks up environment variables.
    pub fn resolve(self, env: &dyn Fn(&str) -> Option<String>) -> Result<ProxyConfig, ConfigError> {
        if self.version != 1 {
            return Err(ConfigError::Version(self.version));
        }
        let listen = self
            .listen
            .parse()
            .map_err(|_| ConfigError::Listen(self.listen.clone()))?;
        let proxy_token = read_secret(
            self.proxy_token_env.as_ref(),
            self.proxy_token_file.as_ref(),
            env,
        )?;
        let defaults = Policy::layered(Policy::default(), &self.defaults);
        let mut routes = Vec::with_capacity(self.routes.len());
        for r in self.routes {
            check_route_name(&r.name)?;
            routes.push(Route {
                front: r.front,
                models: r.models,
                priority: r.priority,
                policy: Policy::layered(defaults, &r.policy),
                upstream: r.upstream.resolve(&r.name, env)?,
                name: r.name,
            });
        }
        // Route changes made through the control API win over `[[routes]]` once they exist.
        let mut routes_revision = 0;
        if let Some(path) = &self.routes_state_file
            && let Some((revision, saved)) = crate::routes_state::load(path, env)?
        {
            tracing::info!(
                path = %path.display(),
                revision,
                routes = saved.len(),
                "routes loaded from the routes state file; [[routes]] of the config not used"
            );
            routes = saved;
            routes_revision = revision;
        }
        Ok(ProxyConfig {
            listen,
            max_body_bytes: self.max_body_bytes,
            proxy_token,
            data_dir: self.data_dir,
            signature_store_max_entries: self.signature_store_max_entries,
            signature_store_ttl: Duration::from_secs(self.signature_store_ttl_secs),
            routes,
            routes_state_file: self.routes_state_file,
            routes_revision,
            control: self.control,
        })
    }
}

/// Route names are `[a-z0-9-]+` (they appear in metrics labels and file names).
pub fn check_route_name(name: &str) -> Result<(), ConfigError> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        return Err(ConfigError::Route {
            route: name.to_owned(),
            message: "name must match [a-z0-9-]+".into(),
        });
    }
    Ok(())
}

impl UpstreamFile {
    /// Validates and reads the key (from the env var or file it names) for route `route`.
    pub fn resolve(
        &self,
        route: &str,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Upstream, ConfigError> {
        let bad = |message: String| ConfigError::Route {
            route: route.to_owned(),
            message,
        };
        let base_url = match (&self.base_url, self.provider.default_base_url()) {
            (Some(b), _) => b.clone(),
            (None, Some(d)) => d.to_owned(),
            (None, None) => return Err(bad("upstream.base-url is required".into())),
        };
        if url::Url::parse(&base_url).is_err() {
            return Err(bad(format!("invalid upstream.base-url {base_url}")));
        }
        if self.provider == Provider::AzureOpenai && self.azure_api_version.is_none() {
            return Err(bad("azure-openai needs upstream.azure-api-version".into()));
        }
        let api_key = read_secret(self.api_key_env.as_ref(), self.api_key_file.as_ref(), env)?;
        Ok(Upstream {
            provider: self.provider,
            protocol: self.protocol.unwrap_or(self.provider.default_protocol()),
            base_url,
            model: self.model.clone(),
            api_key,
            api_key_env: self.api_key_env.clone(),
            api_key_file: self.api_key_file.clone(),
            pass_through_client_key: self.pass_through_client_key,
            azure_deployment: self.azure_deployment.clone(),
            azure_api_version: self.azure_api_version.clone(),
            extra_headers: self
                .extra_headers
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            default_max_tokens: self.default_max_tokens,
            forward_reasoning_effort: self.forward_reasoning_effort,
        })
    }
}

impl From<&Upstream> for UpstreamFile {
    /// The file form of a resolved upstream: where its key comes from, never the key.
    fn from(u: &Upstream) -> Self {
        Self {
            provider: u.provider,
            protocol: Some(u.protocol),
            base_url: Some(u.base_url.clone()),
            model: u.model.clone(),
            api_key_env: u.api_key_env.clone(),
            api_key_file: u.api_key_file.clone(),
            pass_through_client_key: u.pass_through_client_key,
            azure_deployment: u.azure_deployment.clone(),
            azure_api_version: u.azure_api_version.clone(),
            extra_headers: u.extra_headers.iter().cloned().collect(),
            default_max_tokens: u.default_max_tokens,
            forward_reasoning_effort: u.forward_reasoning_effort,
        }
    }
}

impl babysitter_common::main_support::HealthPort for ConfigFile {
    fn health_port(&self) -> Option<&babysitter_common::server::ServerConfig> {
        self.control.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn example() -> ProxyConfig {
        let text = include_str!("../transport-proxy.example.toml");
        let env = |k: &str| k.ends_with("_KEY").then(|| "sk-secret".to_owned());
        match ConfigFile::from_toml(text).and_then(|f| f.resolve(&env)) {
            Ok(c) => c,
            Err(e) => panic!("example config: {e}"),
        }
    }

    #[test]
    fn example_config_resolves_and_never_prints_keys() {
        let cfg = example();
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("sk-secret"), "{shown}");
        assert_eq!(cfg.routes.len(), 5);
        let azure = &cfg.routes[0].upstream;
        assert_eq!(azure.provider, Provider::AzureOpenai);
        assert_eq!(
            azure.azure_api_version.as_deref(),
            Some("2025-04-01-preview")
        );
        assert_eq!(cfg.routes[0].policy.max_retries, 3, "route override");
        assert_eq!(cfg.routes[1].policy.max_retries, 2, "defaults section");
        let control = cfg.control.as_ref().map(|c| c.listen_addr.port());
        assert_eq!(control, Some(50054));
    }

    #[test]
    fn routes_match_by_front_model_and_priority() {
        let cfg = example();
        let name = |f, m| cfg.route_for(f, m).map(|i| cfg.routes[i].name.as_str());
        assert_eq!(
            name(Protocol::Anthropic, "claude-opus-4-8"),
            Some("claude-to-azure")
        );
        assert_eq!(
            name(Protocol::Anthropic, "claude-haiku-4"),
            Some("claude-haiku-to-openai")
        );
        assert_eq!(
            name(Protocol::OpenAiResponses, "gpt-5"),
            Some("codex-to-chat")
        );
        assert_eq!(name(Protocol::Gemini, "gemini-3"), Some("gemini-to-vertex"));
        assert_eq!(name(Protocol::OpenAiChat, "x"), Some("chat-to-anthropic"));
    }

    #[test]
    fn unknown_keys_bad_names_and_missing_env_are_rejected() {
        assert!(ConfigFile::from_toml("bogus = 1").is_err());
        let f = ConfigFile::from_toml(
            "[[routes]]\nname = \"a\"\n[routes.upstream]\nprovider = \"openai\"\napi-key-env = \"NOPE\"",
        );
        let r = f.and_then(|f| f.resolve(&|_| None));
        assert!(matches!(r, Err(ConfigError::MissingEnv(_))));
        let f = ConfigFile::from_toml(
            "[[routes]]\nname = \"Bad Name\"\n[routes.upstream]\nprovider = \"openai\"",
        );
        let r = f.and_then(|f| f.resolve(&|_| None));
        assert!(matches!(r, Err(ConfigError::Route { .. })));
        let f = ConfigFile::from_toml(
            "[[routes]]\nname = \"v\"\n[routes.upstream]\nprovider = \"vertex\"",
        );
        let r = f.and_then(|f| f.resolve(&|_| None));
        assert!(
            matches!(r, Err(ConfigError::Route { .. })),
            "vertex needs a base url"
        );
    }

    /// The binary's loader (`babysitter_common::config::ConfigLoader`) over this file shape: the
    /// example still loads as a file layer, an unknown key is rejected naming it, and a proxy key
    /// is layered file → env → `--set`.
    fn layered(
        file: &str,
        env: &[(&str, &str)],
        sets: &[&str],
    ) -> Result<ConfigFile, babysitter_common::config::ConfigError> {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("proxy.toml");
        std::fs::write(&path, file).unwrap_or_else(|e| panic!("{e}"));
        let mut map = babysitter_common::EnvMap::new();
        for (k, v) in env {
            map.insert(*k, *v);
        }
        babysitter_common::config::ConfigLoader::new(ENV_PREFIX)
            .file(Some(path))
            .env(map)
            .overrides(sets.iter().copied())
            .load()
    }

    #[test]
    fn layered_loader_reads_the_example_and_rejects_unknown_keys_by_name() {
        let f = layered(include_str!("../transport-proxy.example.toml"), &[], &[])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(f.routes.len(), 5);
        assert_eq!(f.listen, "127.0.0.1:8787");
        let err = layered("max-body-byte = 1", &[], &[]).map(|_| ());
        let msg = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("max-body-byte"), "{msg}");
        let err = layered("[defaults]\nmax-retry = 1", &[], &[]).map(|_| ());
        let msg = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(msg.contains("max-retry"), "{msg}");
        let err = layered("", &[("BABYSITTER_TRANSPORT_PROXY__BOGUS_KEY", "1")], &[]).map(|_| ());
        let msg = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            msg.contains("BABYSITTER_TRANSPORT_PROXY__BOGUS_KEY") && msg.contains("bogus-key"),
            "{msg}"
        );
        let err = layered("", &[], &["routes.0.nam=x"]).map(|_| ());
        assert!(err.is_err());
    }

    /// A `[[routes.upstream]]` base-url means what the provider's SDK makes of it (the rule is
    /// `upstream::api_base`): `https://api.anthropic.com`, as `ANTHROPIC_BASE_URL` holds it,
    /// reaches `/v1/messages`, not `/messages` at the host root; the defaults are the official
    /// endpoints.
    #[test]
    fn route_base_urls_follow_the_sdk_conventions() {
        use crate::upstream::{Call, url};
        let toml = r#"
[[routes]]
name = "anthropic-root"
[routes.upstream]
provider = "anthropic"
base-url = "https://api.anthropic.com"
[[routes]]
name = "anthropic-v1"
[routes.upstream]
provider = "anthropic"
base-url = "http://h/v1"
[[routes]]
name = "openai-v1"
[routes.upstream]
provider = "openai"
base-url = "http://h/v1"
[[routes]]
name = "gemini-root"
[routes.upstream]
provider = "gemini"
base-url = "http://h"
[[routes]]
name = "anthropic-default"
[routes.upstream]
provider = "anthropic"
[[routes]]
name = "openai-default"
[routes.upstream]
provider = "openai"
protocol = "openai-responses"
[[routes]]
name = "gemini-default"
[routes.upstream]
provider = "gemini"
"#;
        let cfg = ConfigFile::from_toml(toml)
            .and_then(|f| f.resolve(&|_| None))
            .unwrap_or_else(|e| panic!("{e}"));
        let got: Vec<String> = cfg
            .routes
            .iter()
            .map(|r| url(&r.upstream, "m", Call::Generate { stream: false }))
            .collect();
        assert_eq!(
            got,
            [
                "https://api.anthropic.com/v1/messages",
                "http://h/v1/messages",
                "http://h/v1/chat/completions",
                "http://h/v1beta/models/m:generateContent",
                "https://api.anthropic.com/v1/messages",
                "https://api.openai.com/v1/responses",
                "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent",
            ]
        );
    }

    #[test]
    fn layered_loader_env_then_set_override_proxy_keys() {
        let file = "max-body-bytes = 100\n[defaults]\nmax-retries = 1\n";
        let env = [
            ("BABYSITTER_TRANSPORT_PROXY__MAX_BODY_BYTES", "200"),
            ("BABYSITTER_TRANSPORT_PROXY__DEFAULTS__MAX_RETRIES", "4"),
            ("BABYSITTER_TRANSPORT_PROXY__TELEMETRY__LOG_FILTER", "warn"),
            // The config-file flag's variable is not a config key.
            ("BABYSITTER_TRANSPORT_PROXY_CONFIG", "/nowhere.toml"),
        ];
        let f = layered(file, &env, &["max-body-bytes=300"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(f.max_body_bytes, 300, "--set wins over env and file");
        assert_eq!(f.defaults.max_retries, Some(4), "env wins over file");
        assert_eq!(f.telemetry.log_filter, "warn");
        let routes = r#"routes=[{name = "r", upstream = {provider = "openai", base-url = "http://127.0.0.1:9/v1"}}]"#;
        let f = layered("", &[], &[routes]).unwrap_or_else(|e| panic!("{e}"));
        let cfg = f.resolve(&|_| None).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.routes[0].name, "r");
        assert_eq!(cfg.routes[0].policy.max_retries, 2);
        let dumped = babysitter_common::config::dump_config(&ConfigFile::default(), ENV_PREFIX)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(toml::from_str::<ConfigFile>(&dumped).is_ok(), "{dumped}");
    }
}
