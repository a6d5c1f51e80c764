//! The five harnesses (coding-agent CLIs) this worker can launch, how each is found on the
//! machine, and what each needs to run headless, unattended and offline against a given model
//! endpoint (`harnesses.md` §1–§5).
//!
//! Why launch plans are plain data ([`LaunchPlan`]: program, args, env, files): every decision
//! that `harnesses.md` records — which env var carries the base URL, which settings file
//! pre-seeds onboarding or trust, which flag makes it unattended — is then a pure function that
//! unit tests pin down without starting anything, and the runner ([`crate::agent`]) stays one
//! code path for all five.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use babysitter_common::telemetry::{TRACEPARENT_ENV, TRACESTATE_ENV, W3cContext};
use babysitter_transport_proxy::protocol::Protocol;
use serde_json::json;

mod detect;

pub use detect::{Detected, Detector, HarnessCheck, Unavailable, available, detect, parse_version};

/// A supported harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum HarnessKind {
    ClaudeCode,
    Codex,
    GeminiCli,
    Pi,
    OpenCode,
}

impl HarnessKind {
    pub const ALL: [HarnessKind; 5] = [
        HarnessKind::ClaudeCode,
        HarnessKind::Codex,
        HarnessKind::GeminiCli,
        HarnessKind::Pi,
        HarnessKind::OpenCode,
    ];

    /// The adapter name used in `execution.harness` and `HarnessInfo.name`.
    pub fn name(self) -> &'static str {
        match self {
            HarnessKind::ClaudeCode => "claude-code",
            HarnessKind::Codex => "codex",
            HarnessKind::GeminiCli => "gemini-cli",
            HarnessKind::Pi => "pi",
            HarnessKind::OpenCode => "opencode",
        }
    }

    /// Accepts the adapter name and the reference's short agent names (`claude`, `gemini`).
    pub fn from_name(name: &str) -> Option<Self> {
        Some(match name {
            "claude-code" | "claude" => HarnessKind::ClaudeCode,
            "codex" => HarnessKind::Codex,
            "gemini-cli" | "gemini" => HarnessKind::GeminiCli,
            "pi" => HarnessKind::Pi,
            "opencode" => HarnessKind::OpenCode,
            _ => return None,
        })
    }

    /// The executable's name on PATH.
    pub fn binary_name(self) -> &'static str {
        match self {
            HarnessKind::ClaudeCode => "claude",
            HarnessKind::Codex => "codex",
            HarnessKind::GeminiCli => "gemini",
            HarnessKind::Pi => "pi",
            HarnessKind::OpenCode => "opencode",
        }
    }

    /// Wire protocols the harness can speak to a model server by configuration alone.
    pub fn native_protocols(self) -> &'static [Protocol] {
        match self {
            HarnessKind::ClaudeCode => &[Protocol::Anthropic],
            // `wire_api = "chat"` is rejected by Codex 0.171 (harnesses.md §2.2).
            HarnessKind::Codex => &[Protocol::OpenAiResponses],
            HarnessKind::GeminiCli => &[Protocol::Gemini],
            HarnessKind::Pi => &Protocol::ALL,
            HarnessKind::OpenCode => &[Protocol::OpenAiChat, Protocol::Anthropic],
        }
    }

    /// The protocol a transport proxy exposes to it when the provider speaks something else.
    pub fn proxy_front(self) -> Protocol {
        match self {
            HarnessKind::ClaudeCode => Protocol::Anthropic,
            HarnessKind::Codex => Protocol::OpenAiResponses,
            HarnessKind::GeminiCli => Protocol::Gemini,
            HarnessKind::Pi | HarnessKind::OpenCode => Protocol::OpenAiChat,
        }
    }
}

impl std::fmt::Display for HarnessKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Where the harness sends its model requests.
#[derive(Clone)]
pub struct Endpoint {
    pub protocol: Protocol,
    /// Origin without a version path (`http://127.0.0.1:8080`); each harness adds its own.
    pub origin: String,
    pub api_key: String,
    pub model: String,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("protocol", &self.protocol)
            .field("origin", &self.origin)
            .field("api_key", &"<redacted>")
            .field("model", &self.model)
            .finish()
    }
}

/// What the task asks of the harness.
#[derive(Debug, Clone)]
pub struct LaunchRequest<'a> {
    pub prompt: &'a str,
    pub endpoint: &'a Endpoint,
    /// The task's project directory (the harness's cwd).
    pub project: &'a Path,
    /// A fresh home for the run: settings, onboarding state, sessions.
    pub home: &'a Path,
    pub max_turns: Option<u64>,
    /// Codex takes the schema as a file (`--output-schema`).
    pub output_schema: Option<&'a serde_json::Value>,
    /// Running as root: Claude Code refuses bypass mode without `IS_SANDBOX=1` (Z1).
    pub as_root: bool,
    /// The trace context of the harness process's span: in its environment (`TRACEPARENT`,
    /// `TRACESTATE`) and, where the harness can add headers to its model requests, sent as
    /// `traceparent` / `tracestate` with each of them (see [`trace_headers`]).
    pub trace: Option<&'a W3cContext>,
    /// The harness's own id of a session whose files are in `home` to resume (see
    /// [`crate::session`]); `prompt` is then the next user message in it.
    pub resume: Option<&'a str>,
}

/// Everything needed to start one harness run.
#[derive(Clone, Default)]
pub struct LaunchPlan {
    pub args: Vec<String>,
    /// Set on top of a cleared environment (plus PATH and the worker's extra env).
    pub env: BTreeMap<String, String>,
    /// Names in `env` whose values are secrets (never logged).
    pub secret_env: Vec<String>,
    /// Files written before the start (settings, provider config).
    pub files: Vec<(PathBuf, String)>,
    /// Pi in `-p` mode exits by itself (Z13), so no idle kill is needed for any harness here;
    /// kept for harnesses that do not.
    pub idle_kill: Option<Duration>,
}

impl std::fmt::Debug for LaunchPlan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let env: BTreeMap<&str, &str> = self
            .env
            .iter()
            .map(|(k, v)| {
                let shown = if self.secret_env.contains(k) {
                    "<redacted>"
                } else {
                    v.as_str()
                };
                (k.as_str(), shown)
            })
            .collect();
        f.debug_struct("LaunchPlan")
            .field("args", &self.args)
            .field("env", &env)
            .field(
                "files",
                &self.files.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// The env var each harness's key travels in (an env-var *name* in the config files, so the
/// key itself is never written to disk).
const KEY_ENV: &str = "BABYSITTER_MODEL_API_KEY";

fn key_path(p: Protocol) -> &'static str {
    match p {
        Protocol::Anthropic => "",
        Protocol::OpenAiChat | Protocol::OpenAiResponses => "/v1",
        Protocol::Gemini => "/v1beta",
    }
}

/// The launch plan of `kind` for `req`; `None` when the harness cannot speak the endpoint's
/// protocol (the caller puts a proxy in between first).
pub fn plan(kind: HarnessKind, req: &LaunchRequest<'_>) -> Option<LaunchPlan> {
    let ep = req.endpoint;
    if !kind.native_protocols().contains(&ep.protocol) {
        return None;
    }
    let mut p = LaunchPlan::default();
    let origin = ep.origin.trim_end_matches('/');
    let home = req.home;
    let cwd = req.project.display().to_string();
    match kind {
        HarnessKind::ClaudeCode => {
            p.args = vec![
                "-p".into(),
                req.prompt.into(),
                "--output-format".into(),
                "stream-json".into(),
                "--verbose".into(),
                "--dangerously-skip-permissions".into(),
                "--model".into(),
                ep.model.clone(),
            ];
            if let Some(n) = req.max_turns {
                p.args.extend(["--max-turns".into(), n.to_string()]);
            }
            if let Some(id) = req.resume {
                p.args.extend(["--resume".into(), id.into()]);
            }
            p.env.insert("ANTHROPIC_BASE_URL".into(), origin.into());
            p.env.insert("ANTHROPIC_API_KEY".into(), ep.api_key.clone());
            p.secret_env.push("ANTHROPIC_API_KEY".into());
            p.env.insert(
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            );
            p.env
                .insert("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP".into(), "0".into());
            if req.as_root {
                p.env.insert("IS_SANDBOX".into(), "1".into());
            }
            // `Name: value` lines, added to every API request (its Anthropic client and the
            // gateway model listing both read them).
            if let Some(t) = req.trace {
                let lines: Vec<String> = t
                    .headers()
                    .iter()
                    .map(|(k, v)| format!("{k}: {v}"))
                    .collect();
                p.env
                    .insert("ANTHROPIC_CUSTOM_HEADERS".into(), lines.join("\n"));
            }
            // Onboarding, trust and the bypass-mode prompt pre-answered (adapters-and-hooks §5.6).
            let mut projects = serde_json::Map::new();
            projects.insert(
                cwd,
                json!({"hasTrustDialogAccepted": true, "hasCompletedProjectOnboarding": true,
                       "projectOnboardingSeenCount": 1, "allowedTools": [], "mcpServers": {}}),
            );
            p.files.push((
                home.join(".claude.json"),
                json!({"numStartups": 1, "hasCompletedOnboarding": true,
                       "lastOnboardingVersion": "999.999.999", "lastReleaseNotesSeen": "999.999.999",
                       "projects": projects})
                .to_string(),
            ));
            p.files.push((
                home.join(".claude/settings.json"),
                json!({"skipDangerousModePermissionPrompt": true}).to_string(),
            ));
        }
        HarnessKind::Codex => {
            let codex_home = home.join(".codex");
            p.env
                .insert("CODEX_HOME".into(), codex_home.display().to_string());
            p.env.insert(KEY_ENV.into(), ep.api_key.clone());
            p.secret_env.push(KEY_ENV.into());
            // A custom provider (never OPENAI_BASE_URL, which 0.171 ignores: Z6), analytics and
            // plugins off (Z9), the project trusted.
            // A provider's `http_headers` go with each of its model requests.
            let headers = req
                .trace
                .map(|t| {
                    let pairs: Vec<String> = t
                        .headers()
                        .iter()
                        .map(|(k, v)| format!("{k} = {}", toml_str(v)))
                        .collect();
                    format!("http_headers = {{ {} }}\n", pairs.join(", "))
                })
                .unwrap_or_default();
            p.files.push((
                codex_home.join("config.toml"),
                format!(
                    "model = {model}\nmodel_provider = \"babysitter\"\n\n\
                     [model_providers.babysitter]\nname = \"babysitter\"\nbase_url = {base}\n\
                     env_key = \"{KEY_ENV}\"\nwire_api = \"responses\"\n{headers}\n\
                     [analytics]\nenabled = false\n\n[features]\nplugins = false\n\n\
                     [projects.{cwd_key}]\ntrust_level = \"trusted\"\n",
                    model = toml_str(&ep.model),
                    base = toml_str(&format!("{origin}/v1")),
                    cwd_key = toml_str(&cwd),
                ),
            ));
            p.args = vec![
                "exec".into(),
                "--json".into(),
                "--skip-git-repo-check".into(),
                "-s".into(),
                "danger-full-access".into(),
            ];
            if req.output_schema.is_some() {
                let path = home.join("output-schema.json");
                p.args
                    .extend(["--output-schema".into(), path.display().to_string()]);
                p.files.push((
                    path,
                    req.output_schema.map(|s| s.to_string()).unwrap_or_default(),
                ));
            }
            // Exec options first: `resume` takes only the session id (a UUID; anything else
            // silently starts a new session) and the prompt.
            if let Some(id) = req.resume {
                p.args.extend(["resume".into(), id.into()]);
            }
            p.args.push(req.prompt.into());
        }
        HarnessKind::GeminiCli => {
            // Env alone picks auth type `gateway`, which headless mode rejects (Z10).
            p.files.push((
                home.join(".gemini/settings.json"),
                json!({"security": {"auth": {"selectedType": "gemini-api-key"}},
                       "privacy": {"usageStatisticsEnabled": false}})
                .to_string(),
            ));
            p.env.insert("GOOGLE_GEMINI_BASE_URL".into(), origin.into());
            p.env.insert("GEMINI_API_KEY".into(), ep.api_key.clone());
            p.secret_env.push("GEMINI_API_KEY".into());
            p.env
                .insert("GEMINI_CLI_TRUST_WORKSPACE".into(), "true".into());
            // `Name: value` entries separated by commas; only traceparent: a tracestate value
            // may hold the `,`+`name:` shape its splitter cuts at (gemini-cli 0.61
            // `parseCustomHeaders`).
            if let Some(t) = req.trace {
                p.env.insert(
                    "GEMINI_CLI_CUSTOM_HEADERS".into(),
                    format!("traceparent: {}", t.traceparent),
                );
            }
            // `-m` avoids the router side call; `--skip-trust` keeps `--yolo` (Z11).
            p.args = vec![
                "-p".into(),
                req.prompt.into(),
                "-m".into(),
                ep.model.clone(),
                "--output-format".into(),
                "stream-json".into(),
                "--yolo".into(),
                "--skip-trust".into(),
            ];
            if let Some(id) = req.resume {
                p.args.extend(["--resume".into(), id.into()]);
            }
        }
        HarnessKind::Pi => {
            let api = match ep.protocol {
                Protocol::Anthropic => "anthropic-messages",
                Protocol::OpenAiChat => "openai-completions",
                Protocol::OpenAiResponses => "openai-responses",
                Protocol::Gemini => "google-generative-ai",
            };
            // `apiKey` names an env var: the key never lands on disk (Z12). Header values are
            // resolved the same way, so the trace headers name the env vars that hold them.
            let mut provider = json!({
                "baseUrl": format!("{origin}{}", key_path(ep.protocol)),
                "api": api,
                "apiKey": KEY_ENV,
                "models": [{"id": ep.model, "name": ep.model, "contextWindow": 128000, "maxTokens": 16384}]
            });
            if let Some(t) = req.trace {
                provider["headers"] = trace_headers(t, |env| env.to_owned());
            }
            p.files.push((
                home.join(".pi/agent/models.json"),
                json!({"providers": {"babysitter": provider}}).to_string(),
            ));
            p.env.insert(KEY_ENV.into(), ep.api_key.clone());
            p.secret_env.push(KEY_ENV.into());
            p.env.insert("PI_OFFLINE".into(), "1".into());
            // Sessions are kept (flat) in the home, so an interrupted task can resume its own
            // (`crate::session`); a resume names the session's file.
            p.args = vec![
                "-p".into(),
                "--mode".into(),
                "json".into(),
                "--session-dir".into(),
                home.join(crate::session::PI_SESSIONS).display().to_string(),
                "--provider".into(),
                "babysitter".into(),
                "--model".into(),
                ep.model.clone(),
            ];
            if let Some(file) = req.resume {
                p.args.extend(["--session".into(), file.into()]);
            }
            p.args.push(req.prompt.into());
        }
        HarnessKind::OpenCode => {
            let npm = match ep.protocol {
                Protocol::Anthropic => "@ai-sdk/anthropic",
                _ => "@ai-sdk/openai-compatible",
            };
            let config = home.join(".config/opencode/opencode.json");
            let mut options =
                json!({"baseURL": format!("{origin}/v1"), "apiKey": format!("{{env:{KEY_ENV}}}")});
            // The AI SDK provider's `headers` option; `{env:…}` is substituted from the env.
            if let Some(t) = req.trace {
                options["headers"] = trace_headers(t, |env| format!("{{env:{env}}}"));
            }
            p.files.push((
                config.clone(),
                json!({"$schema": "https://opencode.ai/config.json",
                       "provider": {"babysitter": {
                           "npm": npm, "name": "babysitter",
                           "options": options,
                           "models": {ep.model.clone(): {"name": ep.model, "tool_call": true}}}},
                       "model": format!("babysitter/{}", ep.model),
                       "autoupdate": false, "share": "disabled"})
                .to_string(),
            ));
            p.env
                .insert("OPENCODE_CONFIG".into(), config.display().to_string());
            p.env.insert(KEY_ENV.into(), ep.api_key.clone());
            p.secret_env.push(KEY_ENV.into());
            for v in [
                "OPENCODE_DISABLE_AUTOUPDATE",
                "OPENCODE_DISABLE_MODELS_FETCH",
                "OPENCODE_DISABLE_SHARE",
                "OPENCODE_DISABLE_LSP_DOWNLOAD",
            ] {
                p.env.insert(v.into(), "1".into());
            }
            // The background plugin install survives every switch but this one (Z14).
            p.env
                .insert("NPM_CONFIG_REGISTRY".into(), "http://127.0.0.1:9/".into());
            p.args = vec![
                "run".into(),
                "--format".into(),
                "json".into(),
                "--auto".into(),
                "-m".into(),
                format!("babysitter/{}", ep.model),
            ];
            if let Some(id) = req.resume {
                p.args.extend(["--session".into(), id.into()]);
            }
            p.args.push(req.prompt.into());
        }
    }
    // Every harness's process (and what it runs) learns its parent span from the environment.
    for (k, v) in req.trace.iter().flat_map(|t| t.env()) {
        p.env.insert(k.into(), v);
    }
    p.env.insert("HOME".into(), home.display().to_string());
    p.env.insert(
        "XDG_CONFIG_HOME".into(),
        home.join(".config").display().to_string(),
    );
    // Model traffic to loopback goes direct even when the machine routes the rest through a proxy.
    p.env
        .insert("NO_PROXY".into(), "127.0.0.1,localhost".into());
    p.env
        .insert("no_proxy".into(), "127.0.0.1,localhost".into());
    Some(p)
}

/// `{"traceparent": …, "tracestate": …}` for a config file whose header values refer to the
/// environment: `value_of(env var name)` is how that file spells "the value of this variable"
/// (the values themselves are in the plan's env, [`TRACEPARENT_ENV`] / [`TRACESTATE_ENV`]).
///
/// How each harness sends the trace context with its model requests (and so to a transport
/// proxy, whose request span becomes the harness span's child):
/// - Claude Code: `ANTHROPIC_CUSTOM_HEADERS` (`Name: value` lines);
/// - Codex: the model provider's `http_headers` in `config.toml`;
/// - Gemini CLI: `GEMINI_CLI_CUSTOM_HEADERS` (`Name: value`, comma separated; traceparent only);
/// - Pi: the provider's `headers` in `models.json`, values naming env vars;
/// - OpenCode: the provider's `options.headers` in `opencode.json`, values as `{env:NAME}`.
pub fn trace_headers(t: &W3cContext, value_of: impl Fn(&str) -> String) -> serde_json::Value {
    let mut headers = serde_json::Map::new();
    headers.insert("traceparent".into(), value_of(TRACEPARENT_ENV).into());
    if !t.tracestate.is_empty() {
        headers.insert("tracestate".into(), value_of(TRACESTATE_ENV).into());
    }
    serde_json::Value::Object(headers)
}

/// A TOML basic string.
fn toml_str(s: &str) -> String {
    serde_json::Value::String(s.to_owned()).to_string()
}

#[cfg(test)]
#[path = "harness_tests.rs"]
mod tests;
