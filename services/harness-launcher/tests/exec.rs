//! Shell execution as the worker does it: results, failures as task errors, timeouts and
//! cancellation that kill the whole process group, and tasks that cannot start.

use std::time::Duration;

use babysitter_harness_launcher::exec::{ExecError, Task, execute};
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn task<'a>(kind: &'a str, def: &'a serde_json::Value, dir: &'a std::path::Path) -> Task<'a> {
    Task {
        effect_id: "e1",
        kind,
        def,
        work_dir: dir,
    }
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
