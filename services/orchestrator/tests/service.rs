//! The orchestrator service end to end in one process: real tonic servers on 127.0.0.1, the
//! filesystem journal, and the real worker loop (`babysitter-harness-launcher`) running shell
//! tasks. Agent tasks and their events are `agent_events.rs`; multi-process and crash tests live
//! in the `babysitter-tests` crate.

#[path = "support/service.rs"]
mod service_support;

use std::time::Duration;

use babysitter_common::auth::{AuthConfig, Role, Secret};
use babysitter_common::client::{AuthedChannel, ClientOptions};
use babysitter_common::error::{ERROR_KIND_KEY, ErrorKind, error_kind};
use babysitter_common::server::ServerConfig;
use babysitter_journal::redact::Redactor;
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use babysitter_proto::orchestrator::v1::worker_service_client::WorkerServiceClient;
use serde_json::{Value, json};
use tonic::Code;

use service_support::*;

const GATED: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const ext = defineTask('t.ext', (a) => ({ kind: 'external', title: 'an external step' }));
export async function process(inputs, ctx) {
  const ok = await ctx.breakpoint({ question: 'ship?' }, { label: 'Ship gate' });
  const v = await ctx.task(ext, {});
  await ctx.sleepUntil(Date.now() + 200, { label: 'nap' });
  return { approved: ok.approved, by: ok.respondedBy, v };
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fan_out_of_shell_tasks_completes_and_watch_sees_every_event_in_order() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let work = tempfile::tempdir().unwrap();
    let _w1 = spawn_worker(&s, "w1", None, work.path());
    let _w2 = spawn_worker(&s, "w2", None, work.path());
    let mut c = client(&s, None);
    let run = create(
        &mut c,
        "",
        FANOUT,
        json!({"items": (0..18).collect::<Vec<_>>()}),
    )
    .await;
    assert_eq!(run.namespace, "default");
    let (events, last) = watch_all(&mut c, "", &run.run_id).await;
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=events.len() as u64).collect::<Vec<_>>(),
        "in order, none missing"
    );
    assert_eq!(events.last().unwrap().r#type, "RUN_COMPLETED");
    let mut requested = effects_of(&events, "EFFECT_REQUESTED");
    let mut resolved = effects_of(&events, "EFFECT_RESOLVED");
    assert_eq!(requested.len(), 20);
    requested.sort();
    resolved.sort();
    assert_eq!(requested, resolved, "exactly one resolution per effect");
    assert_eq!(last.status, pb::RunStatus::Completed as i32);
    let got = c
        .get_run(pb::GetRunRequest {
            namespace: String::new(),
            run_id: run.run_id.clone(),
            include_run_files: false,
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    let output: Value = serde_json::from_slice(&got.output_json).unwrap();
    assert_eq!(output["first"], "start");
    assert_eq!(output["items"][17], "item-17");
    assert_eq!(output["last"], "done");
    // A watch resumes from any sequence number (after a disconnect: last seen + 1).
    let mut resumed = c
        .watch_run(pb::WatchRunRequest {
            namespace: String::new(),
            run_id: run.run_id.clone(),
            from_seq: 5,
            include_agent_events: false,
        })
        .await
        .unwrap()
        .into_inner();
    let mut tail = Vec::new();
    while let Some(m) = resumed.message().await.unwrap() {
        tail.extend(m.events.into_iter().map(|e| e.seq));
    }
    assert_eq!(tail, (5..=events.len() as u64).collect::<Vec<_>>());
    let listed = c
        .list_runs(pb::ListRunsRequest {
            statuses: vec![pb::RunStatus::Completed as i32],
            label_selector: [("team".to_owned(), "infra".to_owned())].into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.runs.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_in_process_runs_every_task_without_a_token() {
    // `babysitter up`'s shape: the worker calls the handlers directly; it holds no token although
    // the server requires one of every gRPC caller.
    let auth = AuthConfig {
        tokens: vec![token("c-tok", Role::Client, &[])],
        ..AuthConfig::default()
    };
    let s = start(fast_queue(), auth).await;
    let work = tempfile::tempdir().unwrap();
    let _local = spawn_in_process_worker(&s, "local", work.path());
    let mut c = client(&s, Some("c-tok"));
    let run = create(
        &mut c,
        "",
        FANOUT,
        json!({"items": (0..30).collect::<Vec<_>>()}),
    )
    .await;
    let (events, last) = watch_all(&mut c, "", &run.run_id).await;
    assert_eq!(last.status, pb::RunStatus::Completed as i32, "{last:?}");
    let mut requested = effects_of(&events, "EFFECT_REQUESTED");
    let mut resolved = effects_of(&events, "EFFECT_RESOLVED");
    requested.sort();
    resolved.sort();
    assert_eq!(requested.len(), 32);
    assert_eq!(requested, resolved, "exactly one resolution per effect");
    let output: Value = serde_json::from_slice(&last.output_json).unwrap();
    assert_eq!(output["first"], "start");
    assert_eq!(output["items"][29], "item-29");
    // A worker over gRPC without a token is still refused: only the server's own is trusted.
    let mut w: WorkerServiceClient<AuthedChannel> =
        babysitter_common::client::client(&s.url, None, &ClientOptions::default()).unwrap();
    let e = w
        .register_worker(pb::RegisterWorkerRequest {
            worker_id: "stranger".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn breakpoints_external_results_and_sleeps() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let run = create(&mut c, "team-a", GATED, json!({})).await;
    // The breakpoint shows up for approvers.
    let bp = first_breakpoint(&mut c, "team-a").await;
    assert_eq!(bp.run_id, run.run_id);
    assert_eq!(bp.label, "Ship gate");
    let decide = |c: &mut RunServiceClient<AuthedChannel>, decision: pb::BreakpointDecision| {
        let req = pb::ResolveBreakpointRequest {
            namespace: "team-a".into(),
            run_id: run.run_id.clone(),
            effect_id: bp.effect_id.clone(),
            decision: decision as i32,
            approver: "alice".into(),
            ..Default::default()
        };
        let mut c = c.clone();
        async move { c.resolve_breakpoint(req).await }
    };
    let first = decide(&mut c, pb::BreakpointDecision::Approve)
        .await
        .unwrap()
        .into_inner();
    assert!(!first.already_resolved && first.resolved_seq > 0);
    let again = decide(&mut c, pb::BreakpointDecision::Approve)
        .await
        .unwrap()
        .into_inner();
    assert!(again.already_resolved, "the same decision is idempotent");
    let flip = decide(&mut c, pb::BreakpointDecision::Reject)
        .await
        .unwrap_err();
    assert_eq!(flip.code(), Code::FailedPrecondition);

    // No worker runs `external` tasks: the run says so, and a posted result resolves it.
    let ext_effect = loop {
        let r = c
            .get_run(pb::GetRunRequest {
                namespace: "team-a".into(),
                run_id: run.run_id.clone(),
                include_run_files: false,
            })
            .await
            .unwrap()
            .into_inner()
            .run
            .unwrap();
        if r.pending_effects_by_kind.contains_key("external")
            && r.status_reason.contains("no live worker")
        {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(ext_effect.pending_effects, 1);
    let (events, _) = {
        // find the external effect id from the journal so far
        let mut stream = c
            .watch_run(pb::WatchRunRequest {
                namespace: "team-a".into(),
                run_id: run.run_id.clone(),
                from_seq: 1,
                include_agent_events: false,
            })
            .await
            .unwrap()
            .into_inner();
        let mut evs = Vec::new();
        while !effects_of(&evs, "EFFECT_REQUESTED").len().eq(&2) {
            let m = stream.message().await.unwrap().unwrap();
            evs.extend(m.events);
        }
        (evs, ())
    };
    let ext_id = effects_of(&events, "EFFECT_REQUESTED")[1].clone();
    let post = |value: Value| pb::PostTaskResultRequest {
        namespace: "team-a".into(),
        run_id: run.run_id.clone(),
        effect_id: ext_id.clone(),
        result: Some(cpb::TaskResult {
            outcome: Some(cpb::task_result::Outcome::ValueJson(
                serde_json::to_vec(&value).unwrap().into(),
            )),
            ..Default::default()
        }),
    };
    let r = c
        .post_task_result(post(json!({"n": 1})))
        .await
        .unwrap()
        .into_inner();
    assert!(!r.already_resolved);
    assert!(
        c.post_task_result(post(json!({"n": 1})))
            .await
            .unwrap()
            .into_inner()
            .already_resolved
    );
    assert_eq!(
        c.post_task_result(post(json!({"n": 2})))
            .await
            .unwrap_err()
            .code(),
        Code::FailedPrecondition
    );
    // Bad input is named.
    let mut bad = post(json!({}));
    bad.result = Some(cpb::TaskResult::default());
    let e = c.post_task_result(bad).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().contains("value_json"), "{}", e.message());

    // The durable sleep fires and the run completes.
    let (events, last) = watch_all(&mut c, "team-a", &run.run_id).await;
    assert_eq!(last.status, pb::RunStatus::Completed as i32);
    let output: Value = serde_json::from_slice(
        &c.get_run(pb::GetRunRequest {
            namespace: "team-a".into(),
            run_id: run.run_id.clone(),
            include_run_files: false,
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap()
        .output_json,
    )
    .unwrap();
    assert_eq!(
        output,
        json!({"approved": true, "by": "alice", "v": {"n": 1}})
    );
    assert_eq!(effects_of(&events, "EFFECT_RESOLVED").len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_roles_and_namespaces() {
    let auth = AuthConfig {
        tokens: vec![
            token("client-a", Role::Client, &["a"]),
            token("client-b", Role::Client, &["b"]),
            token("worker", Role::Worker, &[]),
        ],
        ..AuthConfig::default()
    };
    let s = start(fast_queue(), auth).await;
    let missing = client(&s, None)
        .list_runs(pb::ListRunsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::Unauthenticated);
    let wrong = client(&s, Some("nope"))
        .list_runs(pb::ListRunsRequest::default())
        .await
        .unwrap_err();
    assert_eq!(wrong.code(), Code::Unauthenticated);
    let mut a = client(&s, Some("client-a"));
    let run = create(&mut a, "a", GATED, json!({})).await;
    let mut b = client(&s, Some("client-b"));
    let hidden = b
        .get_run(pb::GetRunRequest {
            namespace: "a".into(),
            run_id: run.run_id.clone(),
            include_run_files: false,
        })
        .await
        .unwrap_err();
    assert_eq!(
        hidden.code(),
        Code::NotFound,
        "a run in another namespace is invisible"
    );
    let other_ns = b
        .get_run(pb::GetRunRequest {
            namespace: "b".into(),
            run_id: run.run_id.clone(),
            include_run_files: false,
        })
        .await
        .unwrap_err();
    assert_eq!(other_ns.code(), Code::NotFound);
    // A client token cannot act as a worker, a worker token cannot create runs.
    let mut as_worker: WorkerServiceClient<AuthedChannel> = babysitter_common::client::client(
        &s.url,
        Some(&Secret::new("client-a")),
        &ClientOptions::default(),
    )
    .unwrap();
    let denied = as_worker
        .register_worker(pb::RegisterWorkerRequest::default())
        .await
        .unwrap_err();
    assert_eq!(denied.code(), Code::PermissionDenied);
    let mut w = client(&s, Some("worker"));
    let e = w
        .create_run(pb::CreateRunRequest {
            process: Some(pb::ProcessBundle::single_file("main.mjs", GATED)),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_late_completion_under_an_expired_lease_is_refused() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let run = create(&mut c, "", FANOUT, json!({"items": []})).await;
    let mut w = raw_worker(&s, "slow").await;
    let task = loop {
        let got = w
            .poll_tasks(pb::PollTasksRequest {
                worker_id: "slow".into(),
                max_tasks: 1,
                wait: Some(prost_types::Duration {
                    seconds: 1,
                    nanos: 0,
                }),
            })
            .await
            .unwrap()
            .into_inner()
            .tasks;
        if let Some(t) = got.into_iter().next() {
            break t;
        }
    };
    assert_eq!(task.run_id, run.run_id);
    assert_eq!(task.kind, "shell");
    // No heartbeats: the lease expires, which a heartbeat then reports.
    loop {
        let hb = w
            .heartbeat(pb::HeartbeatRequest {
                worker_id: "slow".into(),
                lease_ids: vec![task.lease_id.clone()],
            })
            .await
            .unwrap()
            .into_inner();
        if hb.leases[0].state == pb::LeaseState::Lost as i32 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    let late = w
        .complete_task(completion("slow", &task, b"{}"))
        .await
        .unwrap_err();
    assert_eq!(late.code(), Code::FailedPrecondition);
    assert_eq!(
        babysitter_common::error::error_kind(&late),
        Some(babysitter_common::error::ErrorKind::LeaseLost)
    );
    // The task was put back: a healthy worker finishes the run.
    let work = tempfile::tempdir().unwrap();
    let _ok = spawn_worker(&s, "ok", None, work.path());
    let (events, last) = watch_all(&mut c, "", &run.run_id).await;
    assert_eq!(last.status, pb::RunStatus::Completed as i32);
    let resolved = effects_of(&events, "EFFECT_RESOLVED");
    assert_eq!(resolved.iter().filter(|e| **e == task.effect_id).count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cancelling_a_run_stops_its_running_task() {
    const SLOW: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: 'slow', shell: { command: a.cmd } }));
export async function process(inputs, ctx) {
  await ctx.task(sh, { cmd: 'sleep 30' });
  return {};
}
"#;
    let s = start(fast_queue(), AuthConfig::default()).await;
    let work = tempfile::tempdir().unwrap();
    let _w = spawn_worker(&s, "w", None, work.path());
    let mut c = client(&s, None);
    let run = create(&mut c, "", SLOW, json!({})).await;
    loop {
        let r = c
            .get_run(pb::GetRunRequest {
                namespace: String::new(),
                run_id: run.run_id.clone(),
                include_run_files: false,
            })
            .await
            .unwrap()
            .into_inner()
            .run
            .unwrap();
        if r.status == pb::RunStatus::Running as i32 && r.pending_effects == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let cancelled = c
        .cancel_run(pb::CancelRunRequest {
            namespace: String::new(),
            run_id: run.run_id.clone(),
            reason: "not needed".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    assert_eq!(cancelled.status, pb::RunStatus::Cancelled as i32);
    let (events, last) = watch_all(&mut c, "", &run.run_id).await;
    assert_eq!(last.status, pb::RunStatus::Cancelled as i32);
    assert_eq!(events.last().unwrap().r#type, "RUN_FAILED");
    assert_eq!(effects_of(&events, "EFFECT_CANCELLED").len(), 1);
    // Halting a finished run writes nothing.
    let h = c
        .halt_run(pb::HaltRunRequest {
            namespace: String::new(),
            run_id: run.run_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(h.already_terminal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn secrets_reach_the_worker_but_never_the_journal() {
    const SECRET: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: 'uses a secret',
  shell: { command: 'echo "token is $API_KEY"', env: { API_KEY: { $secret: 'API_KEY' } } } }));
const missing = defineTask('t.missing', (a) => ({ kind: 'shell', title: 'unknown secret',
  shell: { command: 'true', env: { X: { $secret: 'NOPE' } } } }));
export async function process(inputs, ctx) {
  const r = await ctx.task(sh, {});
  // A failed shell task arrives as a value (babysitter's rule), here with the reason.
  const m = await ctx.task(missing, {});
  return { out: r.stdout.trim(), missingOk: m.success, why: m.error };
}
"#;
    let value = "sk-live-abcdef123456";
    let secrets = Redactor::new([("API_KEY".to_owned(), value.to_owned())]).unwrap();
    let s = start_with(fast_queue(), AuthConfig::default(), secrets).await;
    let work = tempfile::tempdir().unwrap();
    let _w = spawn_worker(&s, "w", None, work.path());
    let mut c = client(&s, None);
    let run = create(&mut c, "", SECRET, json!({})).await;
    let (_, last) = watch_all(&mut c, "", &run.run_id).await;
    assert_eq!(last.status, pb::RunStatus::Completed as i32);
    let got = c
        .get_run(pb::GetRunRequest {
            namespace: String::new(),
            run_id: run.run_id.clone(),
            include_run_files: false,
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    let output: Value = serde_json::from_slice(&got.output_json).unwrap();
    // The worker ran with the real value; what came back was stored redacted.
    assert_eq!(output["out"], "token is [REDACTED:API_KEY]");
    assert_eq!(output["missingOk"], false);
    assert!(
        output["why"].as_str().unwrap().contains("`NOPE`"),
        "{output}"
    );
    let mut files = vec![s.dir.path().join("runs").join(&run.run_id)];
    let mut seen = 0;
    while let Some(p) = files.pop() {
        if p.is_dir() {
            files.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
        } else {
            seen += 1;
            let bytes = std::fs::read(&p).unwrap();
            assert!(
                !bytes.windows(value.len()).any(|w| w == value.as_bytes()),
                "{} holds the secret",
                p.display()
            );
        }
    }
    assert!(
        seen > 10,
        "the run's journal, task and result files were all checked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eager_dispatch_hands_over_the_next_task_with_the_completion() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let run = create(&mut c, "", FANOUT, json!({"items": []})).await;
    let mut w = raw_worker(&s, "eager").await;
    let mut task = poll_one(&mut w, "eager").await;
    let mut titles = Vec::new();
    loop {
        let def: Value = serde_json::from_slice(&task.task_json).unwrap();
        titles.push(def["title"].as_str().unwrap().to_owned());
        let reply = w
            .complete_task(pb::CompleteTaskRequest {
                next_max_tasks: 1,
                next_wait: Some(prost_types::Duration {
                    seconds: 0,
                    nanos: 300_000_000,
                }),
                ..completion("eager", &task, br#"{"stdout":"x\n"}"#)
            })
            .await
            .unwrap()
            .into_inner();
        match reply.next_tasks.into_iter().next() {
            Some(next) => task = next,
            None => break,
        }
    }
    assert_eq!(
        titles,
        ["first", "last"],
        "the second task came with the first completion"
    );
    let (_, last) = watch_all(&mut c, "", &run.run_id).await;
    assert_eq!(last.status, pb::RunStatus::Completed as i32);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn large_logs_are_stored_as_blobs_with_a_readable_head() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let run = create(&mut c, "", FANOUT, json!({"items": []})).await;
    let mut w = raw_worker(&s, "big").await;
    let task = poll_one(&mut w, "big").await;
    let big: String = (0..200_000).map(|i| format!("line {i:07}\n")).collect();
    assert!(big.len() > 2 * 1024 * 1024);
    w.complete_task(pb::CompleteTaskRequest {
        worker_id: "big".into(),
        lease_id: task.lease_id.clone(),
        effect_id: task.effect_id.clone(),
        result: Some(cpb::TaskResult {
            outcome: Some(cpb::task_result::Outcome::ValueJson(
                br#"{"stdout":"start\n"}"#.to_vec().into(),
            )),
            stdout: big.clone().into_bytes().into(),
            stderr: b"small\n".to_vec().into(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let task_dir = s
        .dir
        .path()
        .join("runs")
        .join(&run.run_id)
        .join("tasks")
        .join(&task.effect_id);
    let result: Value =
        serde_json::from_slice(&std::fs::read(task_dir.join("result.json")).unwrap()).unwrap();
    let blob = result["metadata"]["stdoutBlob"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(result["metadata"]["stdoutBytes"], big.len());
    assert!(
        result["metadata"].get("stderrBlob").is_none(),
        "small logs stay files"
    );
    let head = std::fs::read_to_string(task_dir.join("stdout.log")).unwrap();
    assert!(head.len() < 100 * 1024, "{}", head.len());
    assert!(head.starts_with("line 0000000\n"));
    assert!(head.contains(&blob), "the log names its blob");
    let hex = blob.strip_prefix("sha256:").unwrap();
    let stored = std::fs::read(
        s.dir
            .path()
            .join("runs")
            .join(&run.run_id)
            .join("blobs")
            .join(format!("sha256-{hex}")),
    )
    .unwrap();
    assert_eq!(stored, big.as_bytes(), "the whole output, byte for byte");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn both_services_enforce_the_configured_message_size() {
    const MIB: usize = 1024 * 1024;
    let server = ServerConfig {
        max_decoding_message_size: MIB,
        ..ServerConfig::default()
    };
    let s = start_with_server(fast_queue(), server, Redactor::default()).await;
    let over_limit = |e: &tonic::Status| {
        assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
        assert_eq!(error_kind(e), Some(ErrorKind::InvalidArgument), "{e:?}");
        assert!(e.metadata().get(ERROR_KIND_KEY).is_some(), "{e:?}");
    };

    // RunService: a 2 MiB bundle never reaches the handler, a small one runs.
    let mut c = client(&s, None);
    let padded = format!("{FANOUT}\n// {}\n", "x".repeat(2 * MIB));
    let refused = c
        .create_run(pb::CreateRunRequest {
            process: Some(pb::ProcessBundle::single_file("main.mjs", padded)),
            inputs_json: Some(br#"{"items": []}"#.to_vec().into()),
            ..Default::default()
        })
        .await
        .unwrap_err();
    over_limit(&refused);
    create(&mut c, "", FANOUT, json!({"items": []})).await;

    // WorkerService: a 2 MiB completion is refused, a 512 KiB one is taken.
    let mut w = raw_worker(&s, "w").await;
    let task = poll_one(&mut w, "w").await;
    let with_stdout = |bytes: usize| pb::CompleteTaskRequest {
        result: Some(cpb::TaskResult {
            outcome: Some(cpb::task_result::Outcome::ValueJson(
                br#"{"stdout":"start\n"}"#.to_vec().into(),
            )),
            stdout: vec![b'o'; bytes].into(),
            ..Default::default()
        }),
        ..completion("w", &task, b"{}")
    };
    over_limit(&w.complete_task(with_stdout(2 * MIB)).await.unwrap_err());
    w.complete_task(with_stdout(MIB / 2)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_workers_result_names_the_worker_and_its_attempt() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let run = create(&mut c, "", FANOUT, json!({"items": []})).await;
    let mut w = raw_worker(&s, "w-7").await;
    let task = poll_one(&mut w, "w-7").await;
    w.complete_task(pb::CompleteTaskRequest {
        worker_id: "w-7".into(),
        lease_id: task.lease_id.clone(),
        effect_id: task.effect_id.clone(),
        result: Some(cpb::TaskResult {
            outcome: Some(cpb::task_result::Outcome::ValueJson(
                br#"{"ok":true}"#.to_vec().into(),
            )),
            // What the worker says of itself is kept, except who it is: the orchestrator
            // knows that from the lease.
            metadata_json: br#"{"harness":"claude-code","workerId":"someone-else"}"#
                .to_vec()
                .into(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let path = s
        .dir
        .path()
        .join("runs")
        .join(&run.run_id)
        .join("tasks")
        .join(&task.effect_id)
        .join("result.json");
    let result: Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    assert_eq!(result["metadata"]["workerId"], "w-7", "{result}");
    assert_eq!(result["metadata"]["attempt"], 1, "{result}");
    assert_eq!(result["metadata"]["harness"], "claude-code", "{result}");
}
