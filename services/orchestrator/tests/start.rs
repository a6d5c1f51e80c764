//! The `orchestrator` binary does not say "journal ready" for a journal that does not answer
//! (issue 25, item 8): it waits `journal.ready-timeout-secs`, then exits naming the journal,
//! without ever listening.

use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn an_unreachable_journal_fails_the_start_naming_it_instead_of_logging_ready() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A loopback port nobody listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let journal = format!("http://127.0.0.1:{port}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
        .args(["--journal", &journal, "--listen", "127.0.0.1:0"])
        .args(["--set", "journal.ready-timeout-secs=1"])
        .env_remove("BABYSITTER_ORCHESTRATOR_CONFIG")
        .env("RUST_LOG", "info")
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the orchestrator");
    // A guard against a start that never ends; never a timing assertion.
    let mut waited = Duration::ZERO;
    while child.try_wait().expect("wait").is_none() {
        assert!(
            waited < Duration::from_secs(60),
            "the orchestrator kept running without its journal"
        );
        std::thread::sleep(Duration::from_millis(50));
        waited += Duration::from_millis(50);
    }
    let out = child.wait_with_output().expect("output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("not reachable"), "{text}");
    assert!(text.contains(&format!("127.0.0.1:{port}")), "{text}");
    assert!(!text.contains("journal ready"), "{text}");
    assert!(!text.contains("listening on"), "{text}");
}
