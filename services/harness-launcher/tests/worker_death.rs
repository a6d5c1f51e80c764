//! A dead worker's work dies with it (issue 25): the `harness-launcher` binary, a separate
//! process, runs a shell task that starts a background process; the worker is killed with
//! SIGKILL mid-task. Every process of the task must be gone at once (not re-parented to PID 1 and
//! left running), and the task must run again — once — on the next worker after the lease
//! lapses, never overlapping the first attempt. The task appends to a ledger at its start and at
//! its end, so a second execution or an overlap shows.

#[path = "support/orchestrator.rs"]
mod orchestrator;

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use babysitter_harness_launcher::testing::processes::{alive, gone, wait_for_pid};
use babysitter_orchestrator::service::config::OrchestratorConfig;
use orchestrator::Orchestrator;
use serde_json::json;

/// A guard against a hung run; never a timing assertion.
const GUARD: Duration = Duration::from_secs(60);

/// The launcher binary as deployed, against `orch`, with its home under `work`.
fn launcher(orch: &Orchestrator, id: &str, work: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_harness-launcher"))
        .args(["--orchestrator", &orch.endpoint, "--id", id])
        .arg("--set")
        .arg(format!("worker.work-dir={}", work.display()))
        .args(["--set", "worker.task-kinds=[\"shell\"]"])
        .env_remove("BABYSITTER_LAUNCHER_CONFIG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start harness-launcher: {e}"))
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_task_takes_its_processes_along_and_the_task_runs_again_once() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let mut config = OrchestratorConfig::default();
    config.queue.lease_duration_ms = 2_000;
    config.queue.heartbeat_interval_ms = 300;
    config.queue.retry_backoff_ms = 50;
    let orch = Orchestrator::start_grpc_with(config).await;
    let ledger = dir.path().join("ledger");
    let pids = dir.path().join("pids");
    // First attempt: records itself, starts a background sleeper (its pid kept), and hangs.
    // Later attempts: record themselves and finish.
    let command = format!(
        "echo \"start $BABYSITTER_ATTEMPT\" >> {ledger}; \
         if [ \"$BABYSITTER_ATTEMPT\" = 1 ]; then sleep 600 & echo $! > {pids}; wait; fi; \
         echo \"end $BABYSITTER_ATTEMPT\" >> {ledger}",
        ledger = ledger.display(),
        pids = pids.display()
    );
    orch.push("doomed", "shell", json!({"shell": {"command": command}}))
        .await;

    let work = dir.path().join("work");
    let mut first = Killed(launcher(&orch, "w-first", &work));
    let sleeper = wait_for_pid(&pids).await;
    assert!(alive(sleeper), "the task's background process runs");
    // SIGKILL: the worker gets no chance to clean up.
    first.0.kill().unwrap_or_else(|e| panic!("kill: {e}"));
    let _ = first.0.wait();
    assert!(
        gone(sleeper).await,
        "the dead worker's task process {sleeper} kept running"
    );

    // Another worker (its own home) runs the task again once the lease lapses.
    let second = Killed(launcher(&orch, "w-second", &dir.path().join("work2")));
    let stored = orch.result("doomed", GUARD).await;
    assert!(stored.outcome().is_ok(), "{:?}", stored.outcome());
    let ran = std::fs::read_to_string(&ledger).unwrap_or_default();
    assert_eq!(
        ran.lines().collect::<Vec<_>>(),
        vec!["start 1", "start 2", "end 2"],
        "attempt 1 never finished (killed), attempt 2 ran once after it"
    );
    // The worker first: the orchestrator's stop waits for its long poll otherwise.
    drop(second);
    orch.stop().await;
}
