//! Test support (feature `test-support`) for runs of the real harness CLIs: where
//! `scripts/ensure-{claude-code,codex,gemini-cli,pi,opencode}.sh` put them
//! (`<repo>/.ci-work/harness-*`), the agent config that points one at the scripted model server,
//! and the checks a "one shell call (`echo hello > out.txt`), then `DONE`" run must pass.
//!
//! Why it lives here: two suites run that same turn and must hold the CLIs to the same bar —
//! the launcher's `tests/real_harnesses.rs` (the worker and the real orchestrator in one
//! process) and the workspace `tests/tests/agent_end_to_end.rs` (orchestrator, journal and
//! launcher as separate processes, configured as deployed). The scripted
//! server itself is `babysitter_transport_proxy::scripted`; with no script its built-in harness
//! rule answers exactly this turn for every protocol.
//!
//! [`processes`]: whether a task's process still runs, for the tests that kill workers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use babysitter_proto::common::v1 as cpb;
use babysitter_transport_proxy::protocol::Protocol;
use serde_json::Value;

use crate::config::AgentConfig;
use crate::harness::HarnessKind;
use crate::provider::ProviderConfig;

/// The provider name the scripted model server is configured under.
pub const SCRIPTED_PROVIDER: &str = "scripted";
/// The model the scripted provider names (it answers any).
pub const SCRIPTED_MODEL: &str = "fake-model";
/// The prompt of the tool turn (the scripted server does not read it; the CLIs need one).
pub const TOOL_TURN_PROMPT: &str =
    "Create out.txt containing hello using the shell, then reply DONE";

/// One real harness CLI as the ensure scripts install it.
#[derive(Debug, Clone, Copy)]
pub struct RealCli {
    /// The adapter name (`execution.harness`).
    pub harness: &'static str,
    /// The folder under `.ci-work/`.
    pub dir: &'static str,
    /// The binary under `node_modules/.bin/`.
    pub bin: &'static str,
    /// A protocol the CLI speaks itself (no proxy).
    pub native: Protocol,
}

pub const CLAUDE_CODE: RealCli = cli(
    "claude-code",
    "harness-claude",
    "claude",
    Protocol::Anthropic,
);
pub const CODEX: RealCli = cli("codex", "harness-codex", "codex", Protocol::OpenAiResponses);
pub const GEMINI_CLI: RealCli = cli("gemini-cli", "harness-gemini", "gemini", Protocol::Gemini);
pub const PI: RealCli = cli("pi", "harness-pi", "pi", Protocol::OpenAiChat);
pub const OPENCODE: RealCli = cli(
    "opencode",
    "harness-opencode",
    "opencode",
    Protocol::OpenAiChat,
);

const fn cli(
    harness: &'static str,
    dir: &'static str,
    bin: &'static str,
    native: Protocol,
) -> RealCli {
    RealCli {
        harness,
        dir,
        bin,
        native,
    }
}

impl RealCli {
    /// Where the ensure script installs it (suites check it through the one skip policy,
    /// `tests/src/skip.rs`, which fails instead of skipping in CI).
    pub fn path(&self) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../.ci-work")
            .join(self.dir)
            .join("node_modules/.bin")
            .join(self.bin)
    }

    /// Whether it reaches an `upstream` provider without the transport proxy.
    pub fn speaks(&self, upstream: Protocol) -> bool {
        HarnessKind::from_name(self.harness)
            .is_some_and(|k| k.native_protocols().contains(&upstream))
    }

    /// Agent config with only this CLI (at `bin`) and the scripted server at `base_url`
    /// speaking `upstream` as the default provider. Outside traffic goes to a dead loopback
    /// proxy, so a run is offline or fails.
    pub fn scripted_config(
        &self,
        bin: PathBuf,
        upstream: Protocol,
        base_url: String,
    ) -> AgentConfig {
        AgentConfig {
            binaries: BTreeMap::from([(self.harness.to_owned(), bin)]),
            providers: BTreeMap::from([(
                SCRIPTED_PROVIDER.to_owned(),
                ProviderConfig {
                    protocol: upstream,
                    base_url,
                    api_key_env: None,
                    model: Some(SCRIPTED_MODEL.to_owned()),
                    kind: Default::default(),
                },
            )]),
            default_provider: SCRIPTED_PROVIDER.to_owned(),
            env: BTreeMap::from([
                ("HTTPS_PROXY".to_owned(), "http://127.0.0.1:9".to_owned()),
                ("HTTP_PROXY".to_owned(), "http://127.0.0.1:9".to_owned()),
            ]),
            ..AgentConfig::default()
        }
    }
}

/// The tool turn's universal events: `session.started` first, `session.ended` last, a
/// completed tool call and tool result, and zero `agent.unparsed`. `ctx` is quoted on failure.
pub fn check_tool_turn_events(evs: &[cpb::AgentEvent], ctx: &str) {
    let types: Vec<&str> = evs.iter().map(|e| e.r#type.as_str()).collect();
    let unparsed: Vec<String> = evs
        .iter()
        .filter(|e| e.r#type == "agent.unparsed")
        .map(|e| String::from_utf8_lossy(&e.data_json).into_owned())
        .collect();
    assert!(unparsed.is_empty(), "{unparsed:?}\n{ctx}");
    let kinds: Vec<String> = evs
        .iter()
        .filter(|e| e.r#type == "item.completed")
        .filter_map(|e| serde_json::from_slice::<Value>(&e.data_json).ok())
        .filter_map(|d| d["item"]["kind"].as_str().map(str::to_owned))
        .collect();
    assert!(kinds.iter().any(|k| k == "tool_call"), "{kinds:?}\n{ctx}");
    assert!(kinds.iter().any(|k| k == "tool_result"), "{kinds:?}\n{ctx}");
    assert_eq!(types.first(), Some(&"session.started"), "{types:?}\n{ctx}");
    assert_eq!(types.last(), Some(&"session.ended"), "{types:?}\n{ctx}");
}

/// The tool turn's effect on the project: `out.txt` holding `hello`.
pub fn check_out_txt(project: &Path, ctx: &str) {
    let written = std::fs::read_to_string(project.join("out.txt")).unwrap_or_default();
    assert_eq!(written.trim(), "hello", "{}\n{ctx}", project.display());
}

/// The tool turn's answer: the JSON string `DONE` (whitespace aside).
pub fn check_done(value: &Value, ctx: &str) {
    assert_eq!(
        value.as_str().map(str::trim),
        Some("DONE"),
        "{value}\n{ctx}"
    );
}

/// Whether processes a test started are alive, waiting with guard bounds (never timing
/// assertions: a kill takes microseconds where the bound is ten seconds).
pub mod processes {
    use std::path::Path;
    use std::time::Duration;

    /// Alive and not a zombie (a zombie is dead for every purpose here).
    pub fn alive(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| {
                s.rsplit_once(") ")
                    .is_some_and(|(_, rest)| !rest.starts_with('Z'))
            })
            .unwrap_or(false)
    }

    /// Whether `pid` is gone within ten seconds.
    pub async fn gone(pid: i32) -> bool {
        for _ in 0..500 {
            if !alive(pid) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// The pid a command wrote to `file`, once it has (panics after ten seconds).
    pub async fn wait_for_pid(file: &Path) -> i32 {
        for _ in 0..500 {
            if let Ok(s) = std::fs::read_to_string(file)
                && let Ok(p) = s.trim().parse()
            {
                return p;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("{} never got a pid", file.display());
    }
}
