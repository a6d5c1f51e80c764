//! The admin API (`HarnessLauncherService`) over real gRPC on 127.0.0.1, in front of the real
//! worker taking real shell tasks from the real orchestrator (in process, see
//! `support/orchestrator.rs`): status lists a running task, cancel kills its process and
//! completes it as cancelled, drain stops leasing and lets running tasks finish (or cancels them
//! at its deadline), and the installed harnesses are what detection found on a PATH of stand-in
//! executables.

#[path = "support/admin.rs"]
mod admin;
#[path = "support/orchestrator.rs"]
mod orchestrator;
#[path = "support/worker.rs"]
mod worker;

use babysitter_harness_launcher::testing::processes::{alive, gone};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use babysitter_common::EnvMap;
use babysitter_common::error::{ErrorKind, error_kind};
use babysitter_harness_launcher::admin::LauncherAdmin;
use babysitter_harness_launcher::config::AgentConfig;
use babysitter_harness_launcher::harness::{Detector, available};
use babysitter_harness_launcher::worker::Worker;
use babysitter_proto::harness_launcher::v1 as pb;
use babysitter_proto::harness_launcher::v1::harness_launcher_service_client::HarnessLauncherServiceClient;
use serde_json::json;
use tonic::Code;

use orchestrator::Orchestrator;

/// Guards against a hung worker or server; never a timing assertion.
const GUARD: Duration = Duration::from_secs(60);

type Client = HarnessLauncherServiceClient<babysitter_common::client::AuthedChannel>;

fn no_harnesses() -> Detector {
    Detector {
        binaries: BTreeMap::new(),
        path_env: OsString::from("/nonexistent"),
    }
}

async fn status(client: &mut Client) -> pb::GetStatusResponse {
    client
        .get_status(pb::GetStatusRequest {})
        .await
        .unwrap_or_else(|s| panic!("get_status: {s:?}"))
        .into_inner()
}

/// Polls `GetStatus` until `ok` holds.
async fn status_when(
    client: &mut Client,
    what: &str,
    ok: impl Fn(&pb::GetStatusResponse) -> bool,
) -> pb::GetStatusResponse {
    let wait = async {
        loop {
            let s = status(client).await;
            if ok(&s) {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(GUARD, wait)
        .await
        .unwrap_or_else(|_| panic!("status never showed {what}"))
}

/// The pid a shell task wrote to `file` (`echo $$ > file`).
async fn pid_in(file: &Path) -> i32 {
    let wait = async {
        loop {
            if let Ok(text) = tokio::fs::read_to_string(file).await
                && let Some(line) = text.strip_suffix('\n')
            {
                return line
                    .parse::<i32>()
                    .unwrap_or_else(|e| panic!("pid {line:?}: {e}"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(GUARD, wait)
        .await
        .unwrap_or_else(|_| panic!("the task never wrote {}", file.display()))
}

/// The error the worker completed the task `name` with (the orchestrator accepted it).
async fn sent_error(orch: &Orchestrator, name: &str) -> (String, String) {
    let result = orch.sent(name).await.request.result.unwrap_or_default();
    match result.outcome {
        Some(babysitter_proto::common::v1::task_result::Outcome::Error(e)) => (e.name, e.message),
        other => panic!("expected an error, got {other:?}"),
    }
}

/// What the journal holds for a shell task that did not succeed: babysitter stores a failed
/// shell task as a value `{success: false, error, …}` (its F15), so the process sees it fail.
fn assert_stored_failure(stored: &orchestrator::Stored, message: &str) {
    let v = stored
        .outcome()
        .unwrap_or_else(|e| panic!("a failed shell task is stored as a value, got {e}"));
    assert_eq!(
        (&v["success"], &v["error"]),
        (&json!(false), &json!(message)),
        "{v}"
    );
}

/// The worker's running task from `task`'s run, if it lists one.
fn running<'a>(
    s: &'a pb::GetStatusResponse,
    task: &orchestrator::Task,
) -> Option<&'a pb::RunningTask> {
    s.running_tasks.iter().find(|t| t.run_id == task.run_id)
}

/// A shell task that records its pid, then becomes `sleep 600` (same pid).
fn sleeper(pid_file: &Path) -> serde_json::Value {
    json!({"shell": {"command": format!("echo $$ > {}; exec sleep 600", pid_file.display())}})
}

fn admin_for(worker: &Worker, orch: &Orchestrator) -> LauncherAdmin {
    LauncherAdmin::new(worker, &orch.endpoint, no_harnesses(), Vec::new())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_a_running_task_and_cancel_kills_its_process() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let orch = Orchestrator::start().await;
    let pid_file = dir.path().join("pid");
    let l1 = orch.push("l1", "shell", sleeper(&pid_file)).await;
    let w = worker::build(&orch, &dir.path().join("work"), 2);
    let server = admin::start(admin_for(&w, &orch)).await;
    let handle = worker::spawn(w);
    let mut client = server.client();

    let s = status_when(&mut client, "task l1 running", |s| {
        running(s, &l1).is_some()
    })
    .await;
    assert_eq!(s.worker_id, "w1");
    assert_eq!(s.state(), pb::WorkerState::Ready);
    assert_eq!(s.orchestrator_endpoint, orch.endpoint);
    assert_eq!(s.version, env!("CARGO_PKG_VERSION"));
    let caps = s.capabilities.clone().unwrap_or_default();
    assert_eq!(caps.task_kinds, vec!["shell".to_owned()]);
    assert_eq!(caps.max_concurrency, 2);
    assert!(s.started_at.is_some());
    assert_eq!(s.running_tasks.len(), 1);
    let t = &s.running_tasks[0];
    assert_eq!(
        (
            t.kind.as_str(),
            t.run_id.as_str(),
            t.effect_id.as_str(),
            t.attempt,
            t.harness.as_str()
        ),
        ("shell", l1.run_id.as_str(), l1.effect_id.as_str(), 1, "")
    );
    // Listed under the lease the orchestrator handed out.
    assert_eq!(orch.leases("l1"), vec![t.lease_id.clone()]);
    assert!(t.started_at.is_some());
    let lease = t.lease_id.clone();

    let pid = pid_in(&pid_file).await;
    assert!(alive(pid), "the task's process runs before the cancel");
    let r = client
        .cancel_task(pb::CancelTaskRequest {
            lease_id: lease.clone(),
            reason: "stopped from the admin api".into(),
        })
        .await
        .unwrap_or_else(|s| panic!("cancel_task: {s:?}"))
        .into_inner();
    assert!(r.was_running);

    // Completed as cancelled, the way a cancel from the orchestrator completes it, and
    // journaled as the shell task's failure.
    let stored = orch.result("l1", GUARD).await;
    assert_eq!(
        sent_error(&orch, "l1").await,
        (
            "EffectCancelledError".to_owned(),
            "stopped from the admin api".to_owned()
        )
    );
    assert_stored_failure(&stored, "stopped from the admin api");
    assert!(gone(pid).await, "pid {pid} still exists after the cancel");

    status_when(&mut client, "no task running", |s| {
        s.running_tasks.is_empty()
    })
    .await;
    let again = client
        .cancel_task(pb::CancelTaskRequest {
            lease_id: lease,
            reason: String::new(),
        })
        .await
        .unwrap_or_else(|s| panic!("cancel_task: {s:?}"))
        .into_inner();
    assert!(!again.was_running, "nothing runs under l1 any more");

    let missing = client
        .cancel_task(pb::CancelTaskRequest::default())
        .await
        .expect_err("a cancel without a lease id is refused");
    assert_eq!(missing.code(), Code::InvalidArgument);
    assert_eq!(error_kind(&missing), Some(ErrorKind::InvalidArgument));

    for token in [None, Some("wrong-token")] {
        let denied = server
            .client_with(token)
            .get_status(pb::GetStatusRequest {})
            .await
            .expect_err("the admin api needs the admin token");
        assert_eq!(denied.code(), Code::Unauthenticated, "{token:?}");
    }

    server.stop().await;
    handle.stop().await;
    orch.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_stops_leasing_and_lets_the_running_task_finish() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let orch = Orchestrator::start().await;
    let go = dir.path().join("go");
    // Runs until the test creates `go` (no clock involved).
    let wait_for_go = format!(
        "while [ ! -e {} ]; do sleep 0.05; done; echo finished",
        go.display()
    );
    let l1 = orch
        .push("l1", "shell", json!({"shell": {"command": wait_for_go}}))
        .await;
    // One slot: while l1 runs the worker does not poll, so l2 waits in the queue.
    let w = worker::build(&orch, &dir.path().join("work"), 1);
    let server = admin::start(admin_for(&w, &orch)).await;
    let handle = worker::spawn(w);
    let mut client = server.client();
    status_when(&mut client, "task l1 running", |s| {
        running(s, &l1).is_some()
    })
    .await;
    orch.push(
        "l2",
        "shell",
        json!({"shell": {"command": "echo leased-after-drain"}}),
    )
    .await;

    let r = client
        .drain(pb::DrainRequest { deadline: None })
        .await
        .unwrap_or_else(|s| panic!("drain: {s:?}"))
        .into_inner();
    assert_eq!(r.state(), pb::WorkerState::Draining);
    let leases: Vec<String> = r.running_tasks.iter().map(|t| t.lease_id.clone()).collect();
    assert_eq!(leases, orch.leases("l1"));
    assert_eq!(status(&mut client).await.state(), pb::WorkerState::Draining);

    std::fs::write(&go, "").unwrap_or_else(|e| panic!("{e}"));
    match orch.result("l1", GUARD).await.outcome() {
        Ok(v) => assert_eq!(v["stdout"], "finished\n", "{v}"),
        Err(e) => panic!("l1 should have finished, got {e}"),
    }
    assert_eq!(
        orch.next_asked("l1").await,
        0,
        "a draining worker takes no task along with a completion"
    );

    let s = status_when(&mut client, "drained", |s| {
        s.state() == pb::WorkerState::Drained
    })
    .await;
    assert!(s.running_tasks.is_empty());
    // The loop returned by itself: it polls no more, and l2 was never leased.
    handle.returned(GUARD).await;
    assert!(
        orch.queued_unleased("l2"),
        "l2 waits in the orchestrator's queue, never leased"
    );
    let again = client
        .drain(pb::DrainRequest { deadline: None })
        .await
        .unwrap_or_else(|s| panic!("drain: {s:?}"))
        .into_inner();
    assert_eq!(again.state(), pb::WorkerState::Drained);

    server.stop().await;
    orch.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_deadline_cancels_the_tasks_left() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let orch = Orchestrator::start().await;
    let pid_file = dir.path().join("pid");
    let l1 = orch.push("l1", "shell", sleeper(&pid_file)).await;
    let w = worker::build(&orch, &dir.path().join("work"), 1);
    let server = admin::start(admin_for(&w, &orch)).await;
    let handle = worker::spawn(w);
    let mut client = server.client();
    status_when(&mut client, "task l1 running", |s| {
        running(s, &l1).is_some()
    })
    .await;
    let pid = pid_in(&pid_file).await;

    // A deadline of zero has passed as soon as it is set.
    client
        .drain(pb::DrainRequest {
            deadline: prost_types::Duration::try_from(Duration::ZERO).ok(),
        })
        .await
        .unwrap_or_else(|s| panic!("drain: {s:?}"));
    let stored = orch.result("l1", GUARD).await;
    let reason = babysitter_harness_launcher::worker::DRAIN_DEADLINE_REASON;
    assert_eq!(
        sent_error(&orch, "l1").await,
        ("EffectCancelledError".to_owned(), reason.to_owned())
    );
    assert_stored_failure(&stored, reason);
    assert!(
        gone(pid).await,
        "pid {pid} still exists after the drain deadline"
    );
    status_when(&mut client, "drained", |s| {
        s.state() == pb::WorkerState::Drained
    })
    .await;
    handle.returned(GUARD).await;

    server.stop().await;
    orch.stop().await;
}

fn executable(dir: &Path, name: &str, script: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{script}\n")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{e}"));
    p
}

fn by_name(list: &pb::ListHarnessesResponse) -> BTreeMap<String, pb::HarnessStatus> {
    list.harnesses
        .iter()
        .map(|h| {
            let info = h.harness.clone().unwrap_or_default();
            (info.name, h.clone())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installed_harnesses_are_what_detection_found_on_path() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap_or_else(|e| panic!("{e}"));
    executable(&bin, "codex", "echo 'codex-cli 9.8.7'");
    executable(&bin, "gemini", "exit 3");
    let path =
        std::env::join_paths([bin.as_path(), Path::new("/bin")]).unwrap_or_else(|e| panic!("{e}"));
    let env = EnvMap::new().with("PATH", path.to_string_lossy().as_ref());
    let config = AgentConfig::default();
    let detector = config.detector(&env);
    let checks = detector.check_all().await;

    let orch = Orchestrator::start().await;
    let w = worker::build(&orch, &dir.path().join("work"), 1)
        .with_agents(config.settings_with(&env, available(&checks)));
    let server = admin::start(LauncherAdmin::new(&w, &orch.endpoint, detector, checks)).await;
    let handle = worker::spawn(w);
    let mut client = server.client();

    let list = client
        .list_harnesses(pb::ListHarnessesRequest { refresh: false })
        .await
        .unwrap_or_else(|s| panic!("list_harnesses: {s:?}"))
        .into_inner();
    let names: Vec<String> = list
        .harnesses
        .iter()
        .map(|h| h.harness.clone().unwrap_or_default().name)
        .collect();
    assert_eq!(
        names,
        ["claude-code", "codex", "gemini-cli", "pi", "opencode"]
    );
    let found = by_name(&list);
    let codex = &found["codex"];
    assert!(codex.available, "{codex:?}");
    let info = codex.harness.clone().unwrap_or_default();
    assert_eq!(info.version, "9.8.7");
    assert!(info.binary_path.ends_with("/bin/codex"), "{info:?}");
    let gemini = &found["gemini-cli"];
    assert!(!gemini.available);
    assert!(
        gemini.unavailable_reason.contains("`--version` failed"),
        "{gemini:?}"
    );
    assert!(
        gemini
            .harness
            .clone()
            .unwrap_or_default()
            .binary_path
            .ends_with("/bin/gemini")
    );
    assert_eq!(
        found["claude-code"].unavailable_reason,
        "`claude` not found on PATH"
    );

    // What the worker advertises (to the orchestrator and in the status) is the working one.
    let advertised = orch.capabilities().await;
    let status = status(&mut client).await;
    assert_eq!(status.capabilities.as_ref(), Some(&advertised));
    let advertised: Vec<(String, String)> = advertised
        .harnesses
        .iter()
        .map(|h| (h.name.clone(), h.version.clone()))
        .collect();
    assert_eq!(advertised, [("codex".to_owned(), "9.8.7".to_owned())]);

    // A harness installed later shows up on refresh (a report: the worker advertises it on
    // restart).
    executable(&bin, "pi", "echo 0.61.0");
    let stale = client
        .list_harnesses(pb::ListHarnessesRequest { refresh: false })
        .await
        .unwrap_or_else(|s| panic!("list_harnesses: {s:?}"))
        .into_inner();
    assert!(!by_name(&stale)["pi"].available, "cached until a refresh");
    let fresh = client
        .list_harnesses(pb::ListHarnessesRequest { refresh: true })
        .await
        .unwrap_or_else(|s| panic!("list_harnesses: {s:?}"))
        .into_inner();
    let pi = &by_name(&fresh)["pi"];
    assert!(pi.available, "{pi:?}");
    assert_eq!(pi.harness.clone().unwrap_or_default().version, "0.61.0");

    server.stop().await;
    handle.stop().await;
    orch.stop().await;
}
