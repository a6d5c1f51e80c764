//! Agent tasks through the orchestrator service in one process: universal agent events
//! relayed live from `ReportEvents` to `WatchRun` watchers (redacted, and all of them before
//! the watch ends), and an agent task run by the real worker on a stand-in Claude Code with its
//! value, COST_TRACKED and events. The real CLIs run in `babysitter-tests`' `agent_end_to_end`.

#[path = "support/service.rs"]
mod service_support;

use std::time::Duration;

use babysitter_common::auth::AuthConfig;
use babysitter_common::client::{AuthedChannel, connect_lazy};
use babysitter_harness_launcher::worker::{Worker, WorkerSettings};
use babysitter_journal::redact::Redactor;
use babysitter_orchestrator::service::queue::QueueConfig;
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::worker_service_client::WorkerServiceClient;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use service_support::*;

/// An `item.delta` event of session `s1` with `data`.
fn delta(seq: u64, data: Value) -> cpb::AgentEvent {
    cpb::AgentEvent {
        event_id: format!("ev-{seq}"),
        sequence: seq,
        session_id: "s1".into(),
        r#type: "item.delta".into(),
        data_json: serde_json::to_vec(&data).unwrap().into(),
        ..Default::default()
    }
}

/// Reports `batches` on one `ReportEvents` stream; how many events the orchestrator accepted.
async fn report(
    w: &mut WorkerServiceClient<AuthedChannel>,
    batches: Vec<pb::ReportEventsRequest>,
) -> u64 {
    w.report_events(futures::stream::iter(batches))
        .await
        .unwrap()
        .into_inner()
        .accepted_events
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agent_events_stream_from_the_worker_to_watchers_redacted() {
    let value = "sk-agent-0987654321";
    let secrets = Redactor::new([("KEY".to_owned(), value.to_owned())]).unwrap();
    let s = start_with(fast_queue(), AuthConfig::default(), secrets).await;
    let mut c = client(&s, None);
    let run = create(&mut c, "", FANOUT, json!({"items": []})).await;
    let mut watch = watch_with_agents(&mut c, &run.run_id).await;
    let mut w = raw_worker(&s, "agent").await;
    let task = poll_one(&mut w, "agent").await;
    let event = |seq: u64, text: &str| delta(seq, json!({"text": text}));
    let batches = vec![
        pb::ReportEventsRequest {
            worker_id: "agent".into(),
            lease_id: task.lease_id.clone(),
            events: vec![event(1, "thinking"), event(2, &format!("using {value}"))],
        },
        // Events under a lease this worker does not hold are dropped.
        pb::ReportEventsRequest {
            worker_id: "agent".into(),
            lease_id: "bogus".into(),
            events: vec![event(3, "lost")],
        },
    ];
    let accepted = report(&mut w, batches).await;
    assert_eq!(accepted, 2);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let m = watch.message().await.unwrap().unwrap();
        for group in m.agent_events {
            assert_eq!(group.effect_id, task.effect_id);
            for e in group.events {
                let d: Value = serde_json::from_slice(&e.data_json).unwrap();
                seen.push(d["text"].as_str().unwrap().to_owned());
            }
        }
    }
    assert_eq!(seen, ["thinking", "using [REDACTED:KEY]"]);

    // The completion carries the attempt's events for the record: stored as one JSON-lines
    // blob that result.json names, redacted too.
    let mut done = completion("agent", &task, br#"{"stdout":"x\n"}"#);
    let record = |seq: u64, kind: &str, data: Value| cpb::AgentEvent {
        r#type: kind.into(),
        ..delta(seq, data)
    };
    done.result.as_mut().unwrap().agent_events = vec![
        record(
            1,
            "session.started",
            json!({"metadata": {"harness": "claude-code"}}),
        ),
        record(
            4,
            "item.completed",
            json!({"item": {"kind": "tool_call", "content": [{"type": "tool_call", "name": "Bash", "arguments": format!("echo {value}")}]}}),
        ),
    ];
    w.complete_task(done).await.unwrap();
    let result = stored_result(&s, &run.run_id, &task.effect_id);
    assert_eq!(result["metadata"]["agentEvents"], 2, "{result}");
    let lines = stored_blob(&s, &run.run_id, &result["metadata"]["agentEventsBlob"]);
    assert!(!lines.contains(value), "{lines}");
    let events: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events.len(), 2, "{lines}");
    assert_eq!(events[0]["type"], "session.started");
    assert_eq!(events[0]["session_id"], "s1");
    assert_eq!(events[1]["sequence"], 4);
    assert_eq!(
        events[1]["data"]["item"]["content"][0]["arguments"],
        "echo [REDACTED:KEY]"
    );
}

/// The task's `result.json`.
fn stored_result(s: &Service, run_id: &str, effect_id: &str) -> Value {
    let path = s
        .dir
        .path()
        .join(format!("runs/{run_id}/tasks/{effect_id}/result.json"));
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The run's blob `sha256:<hex>` as text.
fn stored_blob(s: &Service, run_id: &str, blob: &Value) -> String {
    let hex = blob.as_str().unwrap().strip_prefix("sha256:").unwrap();
    std::fs::read_to_string(
        s.dir
            .path()
            .join(format!("runs/{run_id}/blobs/sha256-{hex}")),
    )
    .unwrap()
}

/// Every agent event reported before a task completed reaches a watcher before its stream ends,
/// even a watcher that reads only once the run has finished: the watch falls behind (large
/// events, more than its buffers hold), so when it resumes the run's terminal journal batch and
/// the queued agent batches are ready at once, and the terminal batch must not end it early.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watcher_that_falls_behind_still_gets_every_agent_event_before_the_end() {
    const N: u64 = 64;
    // A lease that outlives reporting 8 MiB on a loaded machine (this worker never heartbeats).
    let queue = QueueConfig {
        lease_duration: Duration::from_secs(60),
        ..fast_queue()
    };
    let s = start(queue, AuthConfig::default()).await;
    let mut c = client(&s, None);
    let run = create(&mut c, "", FANOUT, json!({"items": []})).await;
    let mut watch = watch_with_agents(&mut c, &run.run_id).await;
    let mut w = raw_worker(&s, "agent").await;
    let first = poll_one(&mut w, "agent").await;
    let pad = "x".repeat(128 * 1024);
    let batches: Vec<pb::ReportEventsRequest> = (1..=N)
        .map(|seq| pb::ReportEventsRequest {
            worker_id: "agent".into(),
            lease_id: first.lease_id.clone(),
            events: vec![delta(seq, json!({"seq": seq, "pad": pad}))],
        })
        .collect();
    let accepted = report(&mut w, batches).await;
    assert_eq!(accepted, N);
    // The first task and then the last one complete: the run ends.
    let mut task = first;
    for n in 0..2 {
        if n > 0 {
            task = poll_one(&mut w, "agent").await;
        }
        w.complete_task(completion("agent", &task, br#"{"stdout":"x\n"}"#))
            .await
            .unwrap();
    }
    // A second watch, read as it goes, ends with the run.
    let (_, last) = watch_all(&mut c, "", &run.run_id).await;
    assert_eq!(last.status, pb::RunStatus::Completed as i32);
    // Only now is the watch read, to its end.
    let mut seqs = Vec::new();
    let mut ended = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Some(m) = tokio::time::timeout_at(deadline, watch.message())
        .await
        .expect("the watch ends once the run ends")
        .unwrap()
    {
        for g in m.agent_events {
            seqs.extend(g.events.iter().map(|e| e.sequence));
        }
        if let Some(r) = m.run {
            ended = Some(r.status);
        }
    }
    assert_eq!(ended, Some(pb::RunStatus::Completed as i32));
    assert_eq!(seqs, (1..=N).collect::<Vec<_>>());
}

/// A stand-in Claude Code: answers `--version`, prints stream-json for one tool call and a JSON
/// answer (the worker's real parser reads it; the real CLIs run in the launcher's own tests).
const STAND_IN_CLAUDE: &str = r#"#!/bin/sh
if [ "$1" = --version ]; then echo '2.1.197 (Claude Code)'; exit 0; fi
echo '{"type":"system","subtype":"init","session_id":"native-1","model":"claude-sonnet-4-20250514"}'
echo '{"type":"assistant","message":{"id":"m1","content":[{"type":"tool_use","id":"toolu_1","name":"Bash","input":{"command":"echo hello > out.txt"}}]}}'
echo '{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"","is_error":false}]}}'
echo '{"type":"assistant","message":{"id":"m2","content":[{"type":"text","text":"{\"ok\": true}"}]}}'
echo '{"type":"result","subtype":"success","is_error":false,"result":"{\"ok\": true}","usage":{"input_tokens":1000000,"output_tokens":100000}}'
"#;

/// An agent task end to end: the orchestrator routes it by `execution.harness` to the worker
/// advertising that harness, the worker runs it (stand-in Claude Code), the schema-checked value
/// reaches the process, usage and cost are journaled as COST_TRACKED, and the universal events
/// reach a watcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agent_tasks_run_on_a_harness_with_cost_and_events() {
    use std::os::unix::fs::PermissionsExt;
    const AGENT: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const ag = defineTask('t.agent', () => ({ kind: 'agent', title: 'write',
  execution: { harness: 'claude-code' },
  agent: { prompt: 'write out.txt', outputSchema: { type: 'object', required: ['ok'] } } }));
export async function process(inputs, ctx) { const r = await ctx.task(ag, {}); return { ok: r.ok }; }
"#;
    let s = start(fast_queue(), AuthConfig::default()).await;
    let bin = s.dir.path().join("claude");
    std::fs::write(&bin, STAND_IN_CLAUDE).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config: babysitter_harness_launcher::config::AgentConfig = serde_json::from_value(json!({
        "binaries": {"claude-code": bin},
        "providers": {"local": {"protocol": "anthropic", "base-url": "http://127.0.0.1:9",
                                "model": "claude-sonnet-4-20250514"}},
        "default-provider": "local"}))
    .unwrap();
    let env = babysitter_common::EnvMap::new().with("PATH", "/usr/bin:/bin");
    let agents = config.settings(&env).await;
    let stop = CancellationToken::new();
    let worker = Worker::new(
        connect_lazy(&s.url, None).unwrap(),
        WorkerSettings {
            worker_id: "agents".into(),
            namespaces: vec![],
            labels: Default::default(),
            task_kinds: vec![],
            max_concurrency: 2,
            work_dir: s.dir.path().join("work"),
            drain_timeout: Duration::from_secs(5),
        },
    )
    .unwrap()
    .with_agents(agents);
    tokio::spawn(worker.run(stop.clone()));

    let mut c = client(&s, None);
    let run = create(&mut c, "", AGENT, json!({})).await;
    let mut watch = watch_with_agents(&mut c, &run.run_id).await;
    let (mut journal, mut agent_types, mut last) = (Vec::new(), Vec::new(), None);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while let Some(m) = tokio::time::timeout_at(deadline, watch.message())
        .await
        .expect("the watch ends once the run ends")
        .unwrap()
    {
        journal.extend(m.events);
        for g in m.agent_events {
            agent_types.extend(g.events.into_iter().map(|e| e.r#type));
        }
        if let Some(r) = m.run {
            last = Some(r);
        }
    }
    stop.cancel();
    let last = last.unwrap();
    assert_eq!(last.status, pb::RunStatus::Completed as i32, "{journal:?}");
    let cost = journal
        .iter()
        .find(|e| e.r#type == "COST_TRACKED")
        .map(|e| serde_json::from_slice::<Value>(&e.data_json).unwrap())
        .expect("a COST_TRACKED event");
    let text = cost.to_string();
    assert!(text.contains("claude-sonnet-4-20250514"), "{text}");
    assert!(
        text.contains("1000000") && text.contains("100000"),
        "{text}"
    );
    // 1 M input at $3 + 100 k output at $15 per million (the worker's price table).
    assert!(text.contains("4.5"), "{text}");
    assert_eq!(
        agent_types.first().map(String::as_str),
        Some("session.started"),
        "{agent_types:?}"
    );
    assert!(
        agent_types.iter().any(|t| t == "item.completed"),
        "{agent_types:?}"
    );
    assert!(
        !agent_types.iter().any(|t| t == "agent.unparsed"),
        "{agent_types:?}"
    );
    // The record: every event but the deltas, in order, with the worker that ran the task.
    let effect = journal
        .iter()
        .find(|e| e.r#type == "EFFECT_RESOLVED")
        .map(|e| serde_json::from_slice::<Value>(&e.data_json).unwrap())
        .expect("the agent task resolved");
    let result = stored_result(&s, &run.run_id, effect["effectId"].as_str().unwrap());
    assert_eq!(result["metadata"]["workerId"], "agents", "{result}");
    let lines = stored_blob(&s, &run.run_id, &result["metadata"]["agentEventsBlob"]);
    let stored: Vec<Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let live: Vec<&String> = agent_types.iter().filter(|t| *t != "item.delta").collect();
    let kinds: Vec<&str> = stored.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, live, "{lines}");
    assert_eq!(result["metadata"]["agentEvents"], stored.len(), "{result}");
    assert!(
        stored
            .iter()
            .any(|e| e["data"]["item"]["content"][0]["name"] == "Bash"),
        "the tool call is on record: {lines}"
    );
    let sequences: Vec<u64> = stored
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert!(sequences.is_sorted(), "{sequences:?}");
}
