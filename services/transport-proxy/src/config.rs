//! Typed proxy configuration: which upstream serves each front, and the limits.
//!
//! Why two layers: [`ConfigFile`] is what a person writes (kebab-case TOML, unknown keys
//! rejected, secrets referenced by env-var name or file path, never inlined), and
//! [`ProxyConfig`] is the validated result with keys already read. The environment is passed in
//! as a lookup function so that tests inject values and nothing deep in the code reads the
//! process environment. Secrets live in [`Secret`], whose `Debug` never prints them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// The TOML file shape.
#[derive(Debug, Clone, Deserialize)]
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
    /// Env var holding the token clients must present (`x-api-key` or `Bearer`); open if unset.
    #[serde(default)]
    pub proxy_token_env: Option<String>,
    /// Upstream (OpenAI Chat Completions) behind `POST /v1/messages`. Since v0.1.
    #[serde(default)]
    pub anthropic_front: Option<UpstreamFile>,
    /// Upstream (Anthropic Messages) behind `POST /v1/chat/completions`. Since v0.1.
    #[serde(default)]
    pub chat_front: Option<UpstreamFile>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct UpstreamFile {
    /// Base URL including the version segment, e.g. `https://api.openai.com/v1`.
    pub base_url: String,
    /// Name of the env var holding the upstream API key.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// File holding the upstream API key (trailing whitespace trimmed).
    #[serde(default)]
    pub api_key_file: Option<PathBuf>,
    /// Model sent upstream; when unset the client's model name is forwarded.
    #[serde(default)]
    pub model: Option<String>,
    /// `max_tokens` for an Anthropic upstream when the client gave none.
    #[serde(default = "default_max_tokens")]
    pub default_max_tokens: u64,
    /// Forward reasoning controls as Chat `reasoning_effort` (non-reasoning models reject it).
    #[serde(default)]
    pub forward_reasoning_effort: bool,
    /// Whole-request timeout towards the upstream, in seconds (legacy default 600).
    #[serde(default = "default_timeout")]
    pub timeout_secs: u64,
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
fn default_timeout() -> u64 {
    600
}

/// A secret string; `Debug` and `Display` are redacted.
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
    pub anthropic_front: Option<Upstream>,
    pub chat_front: Option<Upstream>,
}

#[derive(Debug, Clone)]
pub struct Upstream {
    pub base_url: String,
    pub api_key: Option<Secret>,
    pub model: Option<String>,
    pub default_max_tokens: u64,
    pub forward_reasoning_effort: bool,
    pub timeout: Duration,
}

impl Upstream {
    /// An upstream at `base_url` with defaults (tests, embedding).
    pub fn new(base_url: impl Into<String>) -> Self {
        Self {
            base_url: base_url.into(),
            api_key: None,
            model: None,
            default_max_tokens: default_max_tokens(),
            forward_reasoning_effort: false,
            timeout: Duration::from_secs(default_timeout()),
        }
    }

    /// `<base>/<path>` without a doubled slash.
    pub fn url(&self, path: &str) -> String {
        format!(
            "{}/{}",
            self.base_url.trim_end_matches('/'),
            path.trim_start_matches('/')
        )
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
    #[error("invalid upstream base url {0}")]
    BaseUrl(String),
    #[error("env var {0} named by the config is not set")]
    MissingEnv(String),
    #[error("key file {path} unreadable: {source}")]
    KeyFile {
        path: PathBuf,
        source: std::io::Error,
    },
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
        let proxy_token = match &self.proxy_token_env {
            None => None,
            Some(name) => Some(Secret(
                env(name).ok_or_else(|| ConfigError::MissingEnv(name.clone()))?,
            )),
        };
        let up = |u: Option<UpstreamFile>| -> Result<Option<Upstream>, ConfigError> {
            let Some(u) = u else { return Ok(None) };
            if url::Url::parse(&u.base_url).is_err() {
                return Err(ConfigError::BaseUrl(u.base_url));
            }
            let api_key = match (&u.api_key_env, &u.api_key_file) {
                (Some(name), _) => Some(Secret(
                    env(name).ok_or_else(|| ConfigError::MissingEnv(name.clone()))?,
                )),
                (None, Some(path)) => {
                    let text =
                        std::fs::read_to_string(path).map_err(|source| ConfigError::KeyFile {
                            path: path.clone(),
                            source,
                        })?;
                    Some(Secret(text.trim_end().to_owned()))
                }
                (None, None) => None,
            };
            Ok(Some(Upstream {
                base_url: u.base_url,
                api_key,
                model: u.model,
                default_max_tokens: u.default_max_tokens,
                forward_reasoning_effort: u.forward_reasoning_effort,
                timeout: Duration::from_secs(u.timeout_secs),
            }))
        };
        Ok(ProxyConfig {
            listen,
            max_body_bytes: self.max_body_bytes,
            proxy_token,
            anthropic_front: up(self.anthropic_front)?,
            chat_front: up(self.chat_front)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_resolves_and_never_prints_keys() {
        let text = include_str!("../transport-proxy.example.toml");
        let env = |k: &str| {
            (k == "OPENAI_API_KEY" || k == "ANTHROPIC_API_KEY").then(|| "sk-secret".to_owned())
        };
        let cfg = ConfigFile::from_toml(text).and_then(|f| f.resolve(&env));
        let cfg = match cfg {
            Ok(c) => c,
            Err(e) => panic!("example config: {e}"),
        };
        let shown = format!("{cfg:?}");
        assert!(!shown.contains("sk-secret"), "{shown}");
        assert!(cfg.anthropic_front.is_some() && cfg.chat_front.is_some());
    }

    #[test]
    fn unknown_keys_and_missing_env_are_rejected() {
        assert!(ConfigFile::from_toml("bogus = 1").is_err());
        let f = ConfigFile::from_toml(
            "[chat-front]\nbase-url = \"http://x/v1\"\napi-key-env = \"NOPE\"",
        );
        let r = f.and_then(|f| f.resolve(&|_| None));
        assert!(matches!(r, Err(ConfigError::MissingEnv(_))));
    }
}
