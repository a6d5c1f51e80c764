//! The reference's environment-only process contract (spec §1, §17 P1/P2): a launcher starts
//! the proxy with `AGENT_MUX_PROXY_*` variables instead of a config file and reads one `ready`
//! line (`{"event":"ready","port","auth_token","url"}`) from stdout.
//!
//! Why a separate module: the contract is a compatibility surface with its own vocabulary
//! (`targetProvider`, `exposedTransport`, `"<provider>/<model>"` target models, per-provider key
//! variables, default base URLs); it maps onto one [`Route`] of the normal configuration and
//! nothing else depends on it. The environment is passed in as a lookup function.

use crate::config::{ConfigError, Provider, ProxyConfig, Route, Secret, Upstream};
use crate::protocol::Protocol;

const PREFIX: &str = "AGENT_MUX_PROXY_";

/// Whether the environment asks for the env-only contract (a target provider is set).
pub fn requested(env: &dyn Fn(&str) -> Option<String>) -> bool {
    env(&format!("{PREFIX}TARGET_PROVIDER")).is_some()
}

/// An OpenAI-compatible provider of spec §4.5: default base URL (with its version, as
/// `OPENAI_BASE_URL` holds it) and key variable.
fn openai_compatible(provider: &str) -> Option<(&'static str, &'static str)> {
    Some(match provider {
        "openai" => ("https://api.openai.com/v1", "OPENAI_API_KEY"),
        "openrouter" => ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
        "groq" => ("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
        "fireworks" => ("https://api.fireworks.ai/inference/v1", "FIREWORKS_API_KEY"),
        "together" => ("https://api.together.xyz/v1", "TOGETHER_API_KEY"),
        "deepseek" => ("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
        "mistral" => ("https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
        "cerebras" => ("https://api.cerebras.ai/v1", "CEREBRAS_API_KEY"),
        "sambanova" => ("https://api.sambanova.ai/v1", "SAMBANOVA_API_KEY"),
        "nvidia-nim" => ("https://integrate.api.nvidia.com/v1", "NVIDIA_API_KEY"),
        "perplexity" => ("https://api.perplexity.ai/v1", "PERPLEXITY_API_KEY"),
        "ollama" => ("http://localhost:11434/v1", "OLLAMA_API_KEY"),
        "local" => ("http://localhost:8080/v1", "OPENAI_API_KEY"),
        "lmstudio" => ("http://localhost:1234/v1", "OPENAI_API_KEY"),
        "vllm" => ("http://localhost:8000/v1", "OPENAI_API_KEY"),
        _ => return None,
    })
}

/// Builds the configuration (one catch-all route for the exposed transport) and the client
/// token (generated when `AGENT_MUX_PROXY_AUTH_TOKEN` is unset).
pub fn config_from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<ProxyConfig, ConfigError> {
    let var = |k: &str| env(&format!("{PREFIX}{k}")).filter(|v| !v.is_empty());
    let bad = |m: String| ConfigError::Route {
        route: "agent-mux".into(),
        message: m,
    };
    let provider = var("TARGET_PROVIDER")
        .ok_or_else(|| bad("AGENT_MUX_PROXY_TARGET_PROVIDER is required".into()))?;
    let target = var("TARGET_MODEL")
        .ok_or_else(|| bad("AGENT_MUX_PROXY_TARGET_MODEL is required".into()))?;
    let exposed = var("EXPOSED_TRANSPORT")
        .ok_or_else(|| bad("AGENT_MUX_PROXY_EXPOSED_TRANSPORT is required".into()))?;
    let front = match exposed.as_str() {
        "anthropic" => Protocol::Anthropic,
        "openai-chat" => Protocol::OpenAiChat,
        "openai-responses" => Protocol::OpenAiResponses,
        "google" => Protocol::Gemini,
        other => return Err(bad(format!("exposed transport {other} is not supported"))),
    };
    let model = target
        .strip_prefix(&format!("{provider}/"))
        .unwrap_or(&target)
        .to_owned();
    // Kept as given: `upstream::api_base` reads it (one rule with `[[routes.upstream]]`), so a
    // host root gets the protocol's version and `…/v1` is left alone.
    let base = var("API_BASE").or_else(|| var("TARGET_API_BASE"));
    let key = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| env(n).filter(|v| !v.is_empty()))
            .map(Secret::new)
    };
    let mut up = match provider.as_str() {
        "anthropic" => {
            let mut u = Upstream::new(
                Provider::Anthropic,
                base.unwrap_or_else(|| "https://api.anthropic.com".into()),
            );
            u.api_key = key(&["ANTHROPIC_API_KEY"]);
            u
        }
        "google" | "gemini" => {
            let mut u = Upstream::new(
                Provider::Gemini,
                base.unwrap_or_else(|| "https://generativelanguage.googleapis.com".into()),
            );
            u.api_key = key(&["GOOGLE_API_KEY", "GEMINI_API_KEY"]);
            u
        }
        "vertex" => {
            let project = env("GOOGLE_CLOUD_PROJECT")
                .ok_or_else(|| bad("vertex needs GOOGLE_CLOUD_PROJECT".into()))?;
            let location = env("GOOGLE_CLOUD_LOCATION").unwrap_or_else(|| "global".into());
            let default = format!(
                "https://aiplatform.googleapis.com/v1/projects/{project}/locations/{location}/publishers/google"
            );
            let mut u = Upstream::new(Provider::Vertex, base.unwrap_or(default));
            u.api_key = key(&["GOOGLE_ACCESS_TOKEN", "VERTEX_ACCESS_TOKEN"]);
            u
        }
        "azure" | "azure-openai" | "azure-foundry" => {
            let base = base.ok_or_else(|| bad("azure needs AGENT_MUX_PROXY_API_BASE".into()))?;
            let mut u = Upstream::new(Provider::AzureOpenai, base);
            u.azure_deployment = Some(model.clone());
            u.azure_api_version = Some(
                env("AZURE_OPENAI_API_VERSION").unwrap_or_else(|| "2025-04-01-preview".into()),
            );
            u.api_key = key(&["AZURE_OPENAI_API_KEY", "AZURE_API_KEY", "OPENAI_API_KEY"]);
            u
        }
        other => {
            let (default, key_var) =
                openai_compatible(other).ok_or_else(|| bad(format!("unknown provider {other}")))?;
            let mut u = Upstream::new(Provider::Openai, base.unwrap_or_else(|| default.into()));
            u.api_key = key(&[key_var, "OPENAI_API_KEY"]);
            u
        }
    };
    up.model = Some(model);
    let mut route = Route::new("agent-mux", up);
    route.front = Some(front);
    let host = var("HOST").unwrap_or_else(|| "127.0.0.1".into());
    let port = var("PORT").unwrap_or_else(|| "0".into());
    let listen = format!("{host}:{port}");
    let mut config = ProxyConfig::with_routes(vec![route]);
    config.listen = listen.parse().map_err(|_| ConfigError::Listen(listen))?;
    config.proxy_token = Some(Secret::new(var("AUTH_TOKEN").unwrap_or_else(|| {
        format!("bsp-{}", ulid::Ulid::generate().to_string().to_lowercase())
    })));
    Ok(config)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::upstream::{Call, url};

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect();
        move |k: &str| m.get(k).cloned()
    }

    #[test]
    fn launcher_env_maps_onto_one_route() {
        let e = env(&[
            ("AGENT_MUX_PROXY_TARGET_PROVIDER", "openrouter"),
            (
                "AGENT_MUX_PROXY_TARGET_MODEL",
                "openrouter/qwen/qwen3-coder",
            ),
            ("AGENT_MUX_PROXY_EXPOSED_TRANSPORT", "anthropic"),
            ("OPENROUTER_API_KEY", "sk-or"),
        ]);
        assert!(requested(&e));
        let c = config_from_env(&e).unwrap_or_else(|err| panic!("{err}"));
        let r = &c.routes[0];
        assert_eq!(r.front, Some(Protocol::Anthropic));
        assert_eq!(r.upstream.base_url, "https://openrouter.ai/api/v1");
        assert_eq!(r.upstream.model.as_deref(), Some("qwen/qwen3-coder"));
        assert_eq!(
            r.upstream.api_key.as_ref().map(Secret::expose),
            Some("sk-or")
        );
        assert!(
            c.proxy_token
                .as_ref()
                .is_some_and(|t| t.expose().starts_with("bsp-")),
            "token generated"
        );
        assert_eq!(c.listen.to_string(), "127.0.0.1:0");
    }

    /// `AGENT_MUX_PROXY_API_BASE` means what a `[[routes.upstream]]` base-url means
    /// (`upstream::api_base`): Anthropic and Gemini bases get their version unless they end in
    /// one, OpenAI-compatible ones are used as given unless they are a bare host.
    #[test]
    fn api_base_follows_the_sdk_conventions() {
        let cases = [
            ("anthropic", None, "https://api.anthropic.com/v1/messages"),
            (
                "anthropic",
                Some("https://api.anthropic.com"),
                "https://api.anthropic.com/v1/messages",
            ),
            (
                "anthropic",
                Some("http://127.0.0.1:9/v1"),
                "http://127.0.0.1:9/v1/messages",
            ),
            (
                "anthropic",
                Some("https://openrouter.ai/api"),
                "https://openrouter.ai/api/v1/messages",
            ),
            (
                "google",
                None,
                "https://generativelanguage.googleapis.com/v1beta/models/m:generateContent",
            ),
            (
                "google",
                Some("http://h/v1beta/"),
                "http://h/v1beta/models/m:generateContent",
            ),
            ("openai", None, "https://api.openai.com/v1/chat/completions"),
            (
                "openai",
                Some("http://127.0.0.1:9"),
                "http://127.0.0.1:9/v1/chat/completions",
            ),
            (
                "openai",
                Some("http://127.0.0.1:9/v1"),
                "http://127.0.0.1:9/v1/chat/completions",
            ),
            (
                "groq",
                None,
                "https://api.groq.com/openai/v1/chat/completions",
            ),
            (
                "perplexity",
                None,
                "https://api.perplexity.ai/v1/chat/completions",
            ),
            (
                "ollama",
                Some("http://localhost:11434"),
                "http://localhost:11434/v1/chat/completions",
            ),
        ];
        for (provider, base, want) in cases {
            let mut pairs = vec![
                ("AGENT_MUX_PROXY_TARGET_PROVIDER", provider),
                ("AGENT_MUX_PROXY_TARGET_MODEL", "m"),
                ("AGENT_MUX_PROXY_EXPOSED_TRANSPORT", "openai-chat"),
            ];
            pairs.extend(base.map(|b| ("AGENT_MUX_PROXY_API_BASE", b)));
            let c = config_from_env(&env(&pairs)).unwrap_or_else(|err| panic!("{err}"));
            let got = url(&c.routes[0].upstream, "m", Call::Generate { stream: false });
            assert_eq!(got, want, "{provider} {base:?}");
        }
    }

    #[test]
    fn azure_gemini_and_bad_inputs() {
        let az = config_from_env(&env(&[
            ("AGENT_MUX_PROXY_TARGET_PROVIDER", "azure"),
            ("AGENT_MUX_PROXY_TARGET_MODEL", "gpt-41"),
            ("AGENT_MUX_PROXY_EXPOSED_TRANSPORT", "openai-responses"),
            ("AGENT_MUX_PROXY_API_BASE", "https://r.openai.azure.com"),
            ("AGENT_MUX_PROXY_AUTH_TOKEN", "tok"),
        ]))
        .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            az.routes[0].upstream.azure_deployment.as_deref(),
            Some("gpt-41")
        );
        assert_eq!(az.proxy_token.as_ref().map(Secret::expose), Some("tok"));
        let g = config_from_env(&env(&[
            ("AGENT_MUX_PROXY_TARGET_PROVIDER", "google"),
            ("AGENT_MUX_PROXY_TARGET_MODEL", "gemini-3"),
            ("AGENT_MUX_PROXY_EXPOSED_TRANSPORT", "anthropic"),
            ("AGENT_MUX_PROXY_API_BASE", "http://127.0.0.1:9"),
        ]))
        .unwrap_or_else(|err| panic!("{err}"));
        assert_eq!(
            url(
                &g.routes[0].upstream,
                "gemini-3",
                Call::Generate { stream: true }
            ),
            "http://127.0.0.1:9/v1beta/models/gemini-3:streamGenerateContent?alt=sse"
        );
        let missing = config_from_env(&env(&[("AGENT_MUX_PROXY_TARGET_PROVIDER", "openai")]));
        assert!(missing.is_err());
        let weird = config_from_env(&env(&[
            ("AGENT_MUX_PROXY_TARGET_PROVIDER", "openai"),
            ("AGENT_MUX_PROXY_TARGET_MODEL", "m"),
            ("AGENT_MUX_PROXY_EXPOSED_TRANSPORT", "bedrock-converse"),
        ]));
        assert!(weird.is_err());
    }
}
