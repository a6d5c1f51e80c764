//! Shared runner of the real-harness tests: the proxy (client token `sk-proxy-token`) in front
//! of the scripted server with the harness rule (`harnesses.md` §7.2), a fresh home and
//! project directory, outside traffic pointed at a dead loopback proxy, and the assertions every
//! harness run shares (exit 0, `out.txt` holds `hello`, two model turns, the tool result
//! upstream).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use babysitter_transport_proxy::config::{ProxyConfig, Route, Secret};
use babysitter_transport_proxy::protocol::Protocol;

use crate::fixture::{Fixture, upstream_for};

/// The workspace's one skip policy, included by path (`babysitter-tests` is not a dependency).
#[path = "../../../../tests/src/skip.rs"]
mod skip;

pub const TOKEN: &str = "sk-proxy-token";
pub const PROMPT: &str = "Create out.txt containing hello using the shell, then reply DONE";

/// The pinned CLI under `.ci-work/<rel>`, or `None` with the test skipped, saying why (a failure
/// under `BABYSITTER_REQUIRE_ALL=1`, as in CI; see `tests/src/skip.rs`).
pub fn cli(rel: &str, install_script: &str) -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = root.join("../../.ci-work").join(rel);
    if let Some(bin) = skip::installed(&bin) {
        return Some(bin);
    }
    skip::skip::<()>(format!(
        "needs {}: run {install_script}",
        skip::tidy(&bin).display()
    ));
    None
}

pub struct Run {
    pub fx: Fixture,
    pub upstream: Protocol,
    pub home: PathBuf,
    pub proj: PathBuf,
    _dir: tempfile::TempDir,
}

impl Run {
    pub async fn start(upstream: Protocol) -> Self {
        let fx = Fixture::start(None, |b| {
            let mut c =
                ProxyConfig::with_routes(vec![Route::new("harness", upstream_for(upstream, b))]);
            c.proxy_token = Some(Secret::new(TOKEN));
            c
        })
        .await;
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (home, proj) = (dir.path().join("home"), dir.path().join("proj"));
        for d in [&home, &proj] {
            std::fs::create_dir_all(d).unwrap_or_else(|e| panic!("{e}"));
        }
        Self {
            fx,
            upstream,
            home,
            proj,
            _dir: dir,
        }
    }

    /// `bin` in the project directory with a clean environment (PATH, HOME, dead proxies).
    pub fn command(&self, bin: &Path) -> tokio::process::Command {
        let dead_proxy = "http://127.0.0.1:9";
        let mut cmd = tokio::process::Command::new(bin);
        cmd.current_dir(&self.proj)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("HTTPS_PROXY", dead_proxy)
            .env("HTTP_PROXY", dead_proxy)
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `cmd` (a guard of 240 s against a hung CLI, not a timing assertion), checks what
    /// every harness run must show, stops the servers and returns stdout for the
    /// harness-specific final-answer check.
    pub async fn finish(self, mut cmd: tokio::process::Command) -> String {
        let upstream = self.upstream;
        let out: Output = tokio::time::timeout(Duration::from_secs(240), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("{upstream}: the CLI did not finish within 240 s"))
            .unwrap_or_else(|e| panic!("running the CLI: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr);
        let requests = self.fx.scripted.requests();
        let summary: Vec<String> = requests
            .iter()
            .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
            .collect();
        assert!(
            out.status.success(),
            "{upstream}: exit {:?}\nupstream: {summary:?}\n{stdout}\n{stderr}",
            out.status.code()
        );
        let written = std::fs::read_to_string(self.proj.join("out.txt")).unwrap_or_default();
        assert_eq!(written.trim(), "hello", "{upstream}: {stdout}\n{stderr}");
        let turns: Vec<_> = requests
            .iter()
            .filter(|r| r.protocol == Some(upstream))
            .collect();
        assert_eq!(turns.len(), 2, "{upstream}: {summary:?}");
        let second = turns[1].body.to_string();
        assert!(
            [
                "\"tool_result\"",
                "\"role\":\"tool\"",
                "function_call_output",
                "functionResponse"
            ]
            .iter()
            .any(|m| second.contains(m)),
            "{upstream}: the tool result reached the upstream: {second}"
        );
        self.fx.stop().await;
        stdout
    }
}
