use std::path::Path;

use babysitter_transport_proxy::protocol::Protocol;

use super::*;

fn ep(protocol: Protocol) -> Endpoint {
    Endpoint {
        protocol,
        origin: "http://127.0.0.1:4000/".into(),
        api_key: "sk-secret-value".into(),
        model: "fake-model".into(),
    }
}

fn req<'a>(e: &'a Endpoint, schema: Option<&'a serde_json::Value>) -> LaunchRequest<'a> {
    LaunchRequest {
        prompt: "do it",
        endpoint: e,
        project: Path::new("/w/proj"),
        home: Path::new("/w/home"),
        max_turns: Some(7),
        output_schema: schema,
        as_root: true,
        trace: None,
        resume: None,
    }
}

fn file<'a>(p: &'a LaunchPlan, suffix: &str) -> &'a str {
    p.files
        .iter()
        .find(|(path, _)| path.ends_with(suffix))
        .map(|(_, c)| c.as_str())
        .unwrap_or_else(|| panic!("no {suffix} in {p:?}"))
}

#[test]
fn claude_code_runs_unattended_as_root_offline_with_the_endpoint() {
    let e = ep(Protocol::Anthropic);
    let p = plan(HarnessKind::ClaudeCode, &req(&e, None)).unwrap_or_else(|| panic!("plan"));
    assert_eq!(p.env["ANTHROPIC_BASE_URL"], "http://127.0.0.1:4000");
    assert_eq!(p.env["ANTHROPIC_API_KEY"], "sk-secret-value");
    assert_eq!(p.env["IS_SANDBOX"], "1");
    assert_eq!(p.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"], "1");
    assert!(
        p.args
            .contains(&"--dangerously-skip-permissions".to_owned())
    );
    assert!(p.args.windows(2).any(|w| w == ["--max-turns", "7"]));
    assert!(
        p.args
            .windows(2)
            .any(|w| w == ["--output-format", "stream-json"])
    );
    let state: serde_json::Value =
        serde_json::from_str(file(&p, ".claude.json")).unwrap_or_default();
    assert_eq!(state["hasCompletedOnboarding"], true);
    assert_eq!(state["projects"]["/w/proj"]["hasTrustDialogAccepted"], true);
    // The key is redacted from debug output.
    let shown = format!("{p:?} {e:?}");
    assert!(!shown.contains("sk-secret-value"), "{shown}");
}

#[test]
fn claude_code_cannot_speak_chat_without_a_proxy() {
    assert!(
        plan(
            HarnessKind::ClaudeCode,
            &req(&ep(Protocol::OpenAiChat), None)
        )
        .is_none()
    );
    assert!(plan(HarnessKind::Codex, &req(&ep(Protocol::Anthropic), None)).is_none());
    assert!(
        plan(
            HarnessKind::GeminiCli,
            &req(&ep(Protocol::OpenAiChat), None)
        )
        .is_none()
    );
    assert!(plan(HarnessKind::OpenCode, &req(&ep(Protocol::Gemini), None)).is_none());
    for p in Protocol::ALL {
        assert!(plan(HarnessKind::Pi, &req(&ep(p), None)).is_some(), "{p}");
    }
}

#[test]
fn codex_gets_a_responses_provider_with_analytics_and_plugins_off_and_the_schema_file() {
    let e = ep(Protocol::OpenAiResponses);
    let schema = serde_json::json!({"type": "object"});
    let p = plan(HarnessKind::Codex, &req(&e, Some(&schema))).unwrap_or_else(|| panic!("plan"));
    let toml_text = file(&p, ".codex/config.toml");
    let config: toml::Value =
        toml::from_str(toml_text).unwrap_or_else(|e| panic!("{e}: {toml_text}"));
    let prov = &config["model_providers"]["babysitter"];
    assert_eq!(prov["base_url"].as_str(), Some("http://127.0.0.1:4000/v1"));
    assert_eq!(prov["wire_api"].as_str(), Some("responses"));
    assert_eq!(prov["env_key"].as_str(), Some(KEY_ENV));
    assert_eq!(config["model_provider"].as_str(), Some("babysitter"));
    assert_eq!(config["analytics"]["enabled"].as_bool(), Some(false));
    assert_eq!(config["features"]["plugins"].as_bool(), Some(false));
    assert_eq!(
        config["projects"]["/w/proj"]["trust_level"].as_str(),
        Some("trusted")
    );
    assert!(
        !toml_text.contains("sk-secret-value"),
        "the key stays in the env"
    );
    assert_eq!(p.env[KEY_ENV], "sk-secret-value");
    assert_eq!(p.args[..2], ["exec".to_owned(), "--json".to_owned()]);
    assert!(p.args.contains(&"--skip-git-repo-check".to_owned()));
    assert!(p.args.contains(&"--output-schema".to_owned()));
    assert_eq!(p.args.last().map(String::as_str), Some("do it"));
}

#[test]
fn gemini_cli_selects_api_key_auth_and_skips_trust_and_the_router() {
    let e = ep(Protocol::Gemini);
    let p = plan(HarnessKind::GeminiCli, &req(&e, None)).unwrap_or_else(|| panic!("plan"));
    let settings: serde_json::Value =
        serde_json::from_str(file(&p, ".gemini/settings.json")).unwrap_or_default();
    assert_eq!(
        settings["security"]["auth"]["selectedType"],
        "gemini-api-key"
    );
    assert_eq!(settings["privacy"]["usageStatisticsEnabled"], false);
    assert_eq!(p.env["GOOGLE_GEMINI_BASE_URL"], "http://127.0.0.1:4000");
    assert!(p.args.windows(2).any(|w| w == ["-m", "fake-model"]));
    assert!(p.args.contains(&"--skip-trust".to_owned()));
    assert!(p.args.contains(&"--yolo".to_owned()));
}

#[test]
fn pi_and_opencode_get_provider_files_naming_the_key_variable() {
    let e = ep(Protocol::Gemini);
    let p = plan(HarnessKind::Pi, &req(&e, None)).unwrap_or_else(|| panic!("plan"));
    let models: serde_json::Value =
        serde_json::from_str(file(&p, ".pi/agent/models.json")).unwrap_or_default();
    let prov = &models["providers"]["babysitter"];
    assert_eq!(prov["api"], "google-generative-ai");
    assert_eq!(prov["baseUrl"], "http://127.0.0.1:4000/v1beta");
    assert_eq!(prov["apiKey"], KEY_ENV);
    assert_eq!(p.env["PI_OFFLINE"], "1");

    let e = ep(Protocol::OpenAiChat);
    let p = plan(HarnessKind::OpenCode, &req(&e, None)).unwrap_or_else(|| panic!("plan"));
    let config: serde_json::Value =
        serde_json::from_str(file(&p, "opencode/opencode.json")).unwrap_or_default();
    let prov = &config["provider"]["babysitter"];
    assert_eq!(prov["npm"], "@ai-sdk/openai-compatible");
    assert_eq!(prov["options"]["baseURL"], "http://127.0.0.1:4000/v1");
    assert_eq!(prov["options"]["apiKey"], format!("{{env:{KEY_ENV}}}"));
    assert_eq!(p.env["OPENCODE_DISABLE_MODELS_FETCH"], "1");
    assert_eq!(p.env["NPM_CONFIG_REGISTRY"], "http://127.0.0.1:9/");
    assert!(
        p.args
            .windows(2)
            .any(|w| w == ["-m", "babysitter/fake-model"])
    );
}

#[test]
fn every_harness_gets_the_trace_context_in_its_env_and_on_its_model_requests() {
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let trace = W3cContext {
        traceparent: tp.into(),
        tracestate: "k=v".into(),
    };
    for kind in HarnessKind::ALL {
        let e = ep(kind.native_protocols()[0]);
        let mut r = req(&e, None);
        r.trace = Some(&trace);
        let p = plan(kind, &r).unwrap_or_else(|| panic!("plan {kind}"));
        assert_eq!(p.env["TRACEPARENT"], tp, "{kind}");
        assert_eq!(p.env["TRACESTATE"], "k=v", "{kind}");
        match kind {
            HarnessKind::ClaudeCode => assert_eq!(
                p.env["ANTHROPIC_CUSTOM_HEADERS"],
                format!("traceparent: {tp}\ntracestate: k=v")
            ),
            HarnessKind::Codex => {
                let config: toml::Value = toml::from_str(file(&p, "config.toml")).unwrap();
                let headers = &config["model_providers"]["babysitter"]["http_headers"];
                assert_eq!(headers["traceparent"].as_str(), Some(tp), "{config}");
                assert_eq!(headers["tracestate"].as_str(), Some("k=v"), "{config}");
            }
            HarnessKind::GeminiCli => assert_eq!(
                p.env["GEMINI_CLI_CUSTOM_HEADERS"],
                format!("traceparent: {tp}")
            ),
            HarnessKind::Pi => {
                let models: serde_json::Value =
                    serde_json::from_str(file(&p, "models.json")).unwrap();
                assert_eq!(
                    models["providers"]["babysitter"]["headers"],
                    json!({"traceparent": "TRACEPARENT", "tracestate": "TRACESTATE"})
                );
            }
            HarnessKind::OpenCode => {
                let config: serde_json::Value =
                    serde_json::from_str(file(&p, "opencode.json")).unwrap();
                assert_eq!(
                    config["provider"]["babysitter"]["options"]["headers"],
                    json!({"traceparent": "{env:TRACEPARENT}", "tracestate": "{env:TRACESTATE}"})
                );
            }
        }
    }
    // Without a trace: no variable, no header setting.
    let e = ep(Protocol::Anthropic);
    let p = plan(HarnessKind::ClaudeCode, &req(&e, None)).unwrap_or_else(|| panic!("plan"));
    assert!(!p.env.contains_key("TRACEPARENT"));
    assert!(!p.env.contains_key("ANTHROPIC_CUSTOM_HEADERS"));
}
