//! The binary under the reference's env-only contract (`AGENT_MUX_PROXY_*`): it prints the
//! `ready` line with port, url and a generated `auth_token`, requires that token, forwards to
//! the target provider, and exits 0 on SIGTERM. Also the binary's layered config (the shared
//! loader): `--dump-config` shows file → env → `--set`, an unknown key exits 2 naming it.

#[path = "support/clients.rs"]
mod clients;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use babysitter_transport_proxy::protocol::Protocol;
use babysitter_transport_proxy::scripted::ScriptedServer;
use clients::{first_turn, path};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn env_contract_ready_line_token_and_sigterm() {
    let upstream = ScriptedServer::start(([127, 0, 0, 1], 0).into(), None, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_babysitter-transport-proxy"))
        .env_clear()
        .env("AGENT_MUX_PROXY_TARGET_PROVIDER", "openai")
        .env("AGENT_MUX_PROXY_TARGET_MODEL", "openai/fake-gpt")
        .env("AGENT_MUX_PROXY_EXPOSED_TRANSPORT", "anthropic")
        .env("AGENT_MUX_PROXY_API_BASE", upstream.url())
        .env("OPENAI_API_KEY", "sk-upstream")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn: {e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("{e}"));
    let ready: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    assert_eq!(ready["event"], "ready");
    let url = ready["url"].as_str().unwrap_or_default().to_owned();
    let token = ready["auth_token"].as_str().unwrap_or_default().to_owned();
    assert!(
        url.starts_with("http://127.0.0.1:") && !token.is_empty(),
        "{line}"
    );

    let http = reqwest::Client::new();
    let body = first_turn(Protocol::Anthropic, false);
    let denied = http
        .post(format!("{url}{}", path(Protocol::Anthropic, false)))
        .json(&body)
        .send()
        .await;
    assert_eq!(denied.map(|r| r.status().as_u16()).ok(), Some(401));
    let ok = http
        .post(format!("{url}{}", path(Protocol::Anthropic, false)))
        .header("x-api-key", &token)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(ok.status().as_u16(), 200);
    let logged = upstream
        .requests()
        .pop()
        .unwrap_or_else(|| panic!("no upstream request"));
    assert_eq!(logged.path, "/v1/chat/completions");
    assert_eq!(logged.body["model"], "fake-gpt");

    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap_or(0))
        .unwrap_or_else(|| panic!("pid"));
    rustix::process::kill_process(pid, rustix::process::Signal::TERM)
        .unwrap_or_else(|e| panic!("{e}"));
    let status = child.wait().unwrap_or_else(|e| panic!("{e}"));
    assert!(status.success(), "exit 0 on SIGTERM: {status:?}");
    upstream.stop().await;
}

fn proxy_bin(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_babysitter-transport-proxy"));
    cmd.env_clear().args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap_or_else(|e| panic!("spawn: {e}"))
}

#[test]
fn layered_config_dump_and_unknown_key() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let file = dir.path().join("proxy.toml");
    let text = "max-body-bytes = 100\n[defaults]\nmax-retries = 1\n[[routes]]\nname = \"r\"\n[routes.upstream]\nprovider = \"openai\"\n";
    std::fs::write(&file, text).unwrap_or_else(|e| panic!("{e}"));
    let path = file.to_string_lossy().into_owned();
    let out = proxy_bin(
        &[
            "--config",
            &path,
            "--set",
            "defaults.max-retries=5",
            "--dump-config",
        ],
        &[
            ("BABYSITTER_TRANSPORT_PROXY__MAX_BODY_BYTES", "200"),
            ("BABYSITTER_TRANSPORT_PROXY__DEFAULTS__MAX_RETRIES", "4"),
        ],
    );
    let dumped = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{dumped}");
    let v: toml::Table = dumped.parse().unwrap_or_else(|e| panic!("{e}: {dumped}"));
    assert_eq!(v["max-body-bytes"].as_integer(), Some(200), "{dumped}");
    assert_eq!(
        v["defaults"]["max-retries"].as_integer(),
        Some(5),
        "{dumped}"
    );
    assert_eq!(v["routes"][0]["name"].as_str(), Some("r"), "{dumped}");

    std::fs::write(&file, "max-body-bytez = 1\n").unwrap_or_else(|e| panic!("{e}"));
    let out = proxy_bin(&["--config", &path], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("max-body-bytez"), "{err}");
}
