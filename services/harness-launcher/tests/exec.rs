//! Shell execution as the worker does it: results, failures as task errors, timeouts and
//! cancellation that kill the whole process group, and tasks that cannot start.

use std::time::Duration;

use babysitter_harness_launcher::exec::{Attempt, ExecError, Task, execute};
use babysitter_harness_launcher::testing::processes::{alive, gone, wait_for_pid};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn task<'a>(kind: &'a str, def: &'a serde_json::Value, dir: &'a std::path::Path) -> Task<'a> {
    Task {
        effect_id: "e1",
        kind,
        def,
        work_dir: dir,
        attempt: None,
    }
}

/// A worker's third attempt at effect `e1` of run `r1`, its home marked `home-marker`.
fn on_a_worker<'a>(task: Task<'a>) -> Task<'a> {
    Task {
        attempt: Some(Attempt {
            run_id: "r1",
            effect_id: "e1",
            number: 3,
            home_marker: "home-marker",
        }),
        ..task
    }
}

#[tokio::test]
async fn a_workers_attempt_knows_itself_runs_in_its_own_directory_and_ends_with_its_processes() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("bg.pid");
    let script = format!(
        "pwd; echo \"$BABYSITTER_RUN_ID $BABYSITTER_EFFECT_ID $BABYSITTER_ATTEMPT $BABYSITTER_IDEMPOTENCY_KEY $BABYSITTER_WORKER_HOME\"; \
         sleep 300 > /dev/null 2>&1 & echo $! > {}",
        pidfile.display()
    );
    let def = json!({"shell": {"command": script}});
    let done = execute(
        on_a_worker(task("shell", &def, dir.path())),
        &CancellationToken::new(),
    )
    .await
    .unwrap();
    let out = done.outcome.unwrap()["stdout"].as_str().unwrap().to_owned();
    let here = dir.path().canonicalize().unwrap();
    assert_eq!(
        out,
        format!("{}\nr1 e1 3 r1/e1 home-marker\n", here.display())
    );
    let bg = wait_for_pid(&pidfile).await;
    assert!(
        gone(bg).await,
        "a process the task left in the background outlived it"
    );

    // A cwd the task names wins; `babysitter run` (no attempt) keeps what it leaves running.
    let elsewhere = tempfile::tempdir().unwrap();
    let def = json!({"shell": {"command": format!("pwd; sleep 300 > /dev/null 2>&1 & echo $! > {}", pidfile.display()),
                               "cwd": elsewhere.path()}});
    let done = execute(task("shell", &def, dir.path()), &CancellationToken::new())
        .await
        .unwrap();
    let out = done.outcome.unwrap()["stdout"].as_str().unwrap().to_owned();
    assert_eq!(out.trim(), elsewhere.path().display().to_string());
    let bg = wait_for_pid(&pidfile).await;
    assert!(
        alive(bg),
        "babysitter run killed what its command left running"
    );
    let _ = std::process::Command::new("kill")
        .arg("-9")
        .arg(bg.to_string())
        .status();
}

#[tokio::test]
async fn shell_results_and_failures() {
    let dir = tempfile::tempdir().unwrap();
    let ok = json!({"shell": {"command": "echo hi; echo oops >&2"}});
    let done = execute(task("shell", &ok, dir.path()), &CancellationToken::new())
        .await
        .unwrap();
    let v = done.outcome.unwrap();
    assert_eq!(v["stdout"], "hi\n");
    assert_eq!(v["stderr"], "oops\n");
    assert_eq!(v["exitCode"], 0);
    let bad = json!({"shell": {"command": "exit 3"}});
    let done = execute(task("shell", &bad, dir.path()), &CancellationToken::new())
        .await
        .unwrap();
    let e = done.outcome.unwrap_err();
    assert_eq!(e["data"]["exitCode"], 3);
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("exited with code 3")
    );
}

#[tokio::test]
async fn timeout_and_cancellation_kill_the_process_group() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("child-alive");
    // The shell starts a grandchild that would touch the marker after 2 s.
    let cmd = format!("(sleep 2; touch {}) & sleep 30", marker.display());
    let def = json!({"shell": {"command": cmd, "timeout": 200}});
    let done = execute(task("shell", &def, dir.path()), &CancellationToken::new())
        .await
        .unwrap();
    assert!(
        done.outcome.unwrap_err()["message"]
            .as_str()
            .unwrap()
            .contains("timed out")
    );
    let stop = CancellationToken::new();
    let def =
        json!({"shell": {"command": format!("(sleep 2; touch {}) & sleep 30", marker.display())}});
    let stopper = stop.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        stopper.cancel();
    });
    let done = execute(task("shell", &def, dir.path()), &stop)
        .await
        .unwrap();
    assert!(done.outcome.is_err());
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(
        !marker.try_exists().unwrap(),
        "the grandchildren were killed with their group"
    );
}

#[tokio::test]
async fn tasks_that_cannot_start() {
    let dir = tempfile::tempdir().unwrap();
    let def = json!({"shell": {}});
    let err = execute(task("shell", &def, dir.path()), &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(matches!(err, ExecError::BadTask { .. }), "{err}");
    assert!(err.to_string().contains("shell.command"));
    let err = execute(task("agent", &def, dir.path()), &CancellationToken::new())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("`agent`"), "{err}");
}
