//! `WatchRun` as a subscription to the run manager, and the run table's bound, over real tonic
//! servers on 127.0.0.1 with a bare `WorkerService` client as the worker.
//!
//! Both tests run with tokio's clock paused and held still ([`StillClock`]): no timer ever fires,
//! so a watch that needed one (a poll loop, a "wait a little for the summary") would never deliver
//! its next update, and the test would fail at the watchdog instead of passing late.

#[path = "support/service.rs"]
mod service_support;

use std::sync::Arc;
use std::time::Duration;

use babysitter_common::client::AuthedChannel;
use babysitter_common::server::ServerConfig;
use babysitter_journal::fs::FsStore;
use babysitter_journal::{Journal, JournalOptions};
use babysitter_orchestrator::engine::Engine;
use babysitter_orchestrator::service::config::OrchestratorConfig;
use babysitter_orchestrator::service::grpc::Services;
use babysitter_orchestrator::service::queue::{QueueConfig, TaskQueue};
use babysitter_orchestrator::service::runs::{ManagerConfig, RunManager, RunStatus};
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use service_support::*;

/// A shell task, a breakpoint, another shell task.
const STEPS: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: a.t, shell: { command: 'true' } }));
export async function process(inputs, ctx) {
  const a = await ctx.task(sh, { t: 'before' });
  const ok = await ctx.breakpoint({ question: 'go on?' }, { label: 'gate' });
  const b = await ctx.task(sh, { t: 'after' });
  return { approved: ok.approved, a: a.n, b: b.n };
}
"#;

const QUICK: &str = r#"
export async function process(inputs, ctx) { return { n: inputs.n }; }
"#;

/// Real time after which a held clock is let go: a regression then fails (the clock moved)
/// instead of hanging the suite.
const WATCHDOG: Duration = Duration::from_secs(120);

/// Holds tokio's paused clock still. A current-thread runtime with paused time jumps the clock
/// to the next timer whenever it is idle, except while a blocking task runs; this one runs until
/// released (or the watchdog elapses).
struct StillClock {
    release: std::sync::mpsc::Sender<()>,
    held: JoinHandle<bool>,
    since: tokio::time::Instant,
}

impl StillClock {
    fn hold() -> Self {
        let (release, rx) = std::sync::mpsc::channel::<()>();
        let held = tokio::task::spawn_blocking(move || rx.recv_timeout(WATCHDOG).is_ok());
        Self {
            release,
            held,
            since: tokio::time::Instant::now(),
        }
    }

    /// Lets the clock go, asserting it never moved.
    async fn release(self) {
        let now = tokio::time::Instant::now();
        let _ = self.release.send(());
        let held = self.held.await.unwrap();
        assert!(
            held,
            "the watchdog let the clock go: something waited for a timer"
        );
        assert_eq!(now, self.since, "no timer fired");
    }
}

/// The service over a fresh filesystem journal; leases that never expire.
async fn start_core(
    dir: tempfile::TempDir,
    finished_runs_cached: usize,
) -> (Service, RunManager, JoinHandle<()>) {
    let manager = manager_over(dir.path(), finished_runs_cached).await;
    let stop = CancellationToken::new();
    let services = Services::new(manager.clone(), stop.clone());
    let in_process = services.workers.in_process();
    let server = services.into_server(&ServerConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let token = stop.clone();
    let server = tokio::spawn(async move {
        server.serve_with_listener(listener, token).await.unwrap();
    });
    let service = Service {
        url,
        stop,
        dir,
        in_process,
        manager: manager.clone(),
        queue: QueueConfig::default(),
        config: ServerConfig::default(),
        secrets: Default::default(),
        server: None,
    };
    (service, manager, server)
}

async fn manager_over(dir: &std::path::Path, finished_runs_cached: usize) -> RunManager {
    let runs = dir.join("runs");
    let journal = Journal::new(Arc::new(FsStore::new(&runs)), JournalOptions::default());
    let engine = Engine::new(journal, OrchestratorConfig::default().engine_options(runs)).unwrap();
    let queue = QueueConfig {
        lease_duration: Duration::from_secs(24 * 3600),
        ..QueueConfig::default()
    };
    let manager = RunManager::new(
        engine,
        TaskQueue::new(queue, ulid::Ulid::generate().to_string()),
        ManagerConfig {
            finished_runs_cached,
            ..ManagerConfig::default()
        },
    );
    manager.recover().await.unwrap();
    manager
}

async fn stop(s: Service, manager: RunManager, server: JoinHandle<()>) {
    s.stop.cancel();
    server.await.unwrap();
    manager.shutdown().await;
}

/// Everything a watch has shown so far.
#[derive(Default)]
struct Seen {
    statuses: Vec<i32>,
    events: Vec<String>,
}

impl Seen {
    /// Reads `watch` until it shows a run matching `want`; returns that run and the events of
    /// the message that carried it.
    async fn until(
        &mut self,
        watch: &mut tonic::Streaming<pb::WatchRunResponse>,
        want: impl Fn(&pb::Run) -> bool,
    ) -> (pb::Run, Vec<String>) {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(3600), watch.message())
                .await
                .expect("a watch update")
                .unwrap()
                .expect("the watch ended early");
            let events: Vec<String> = m.events.iter().map(|e| e.r#type.clone()).collect();
            self.events.extend(events.iter().cloned());
            if let Some(run) = m.run {
                if self.statuses.last() != Some(&run.status) {
                    self.statuses.push(run.status);
                }
                if want(&run) {
                    return (run, events);
                }
            }
        }
    }
}

fn watch_request(run_id: &str, from_seq: u64) -> pb::WatchRunRequest {
    pb::WatchRunRequest {
        namespace: String::new(),
        run_id: run_id.into(),
        from_seq,
        include_agent_events: false,
    }
}

async fn get(c: &mut RunServiceClient<AuthedChannel>, run_id: &str) -> pb::Run {
    c.get_run(pb::GetRunRequest {
        namespace: String::new(),
        run_id: run_id.into(),
        include_run_files: false,
    })
    .await
    .unwrap()
    .into_inner()
    .run
    .unwrap()
}

/// A run driven through a task, a breakpoint and a task: the watch shows every status it goes
/// through as it happens, the last one together with the terminal event, and then ends.
#[tokio::test(start_paused = true)]
async fn watch_run_shows_every_status_change_as_it_happens() {
    use pb::RunStatus::{Completed, Created, Running, Waiting};
    let clock = StillClock::hold();
    let (s, manager, server) = start_core(tempfile::tempdir().unwrap(), 16).await;
    let mut c = client(&s, None);
    let mut w = raw_worker(&s, "w").await;
    let run = create(&mut c, "", STEPS, json!({})).await;
    let mut watch = c
        .watch_run(watch_request(&run.run_id, 1))
        .await
        .unwrap()
        .into_inner();
    let mut seen = Seen::default();

    // The first task is queued.
    seen.until(&mut watch, |r| r.status == Running as i32).await;
    let first = poll_one(&mut w, "w").await;
    w.complete_task(completion("w", &first, br#"{"n": 1}"#))
        .await
        .unwrap();
    // The breakpoint.
    let (waiting, _) = seen.until(&mut watch, |r| r.status == Waiting as i32).await;
    assert_eq!(waiting.status_reason, "breakpoint-waiting");
    assert_eq!(waiting.pending_effects_by_kind.get("breakpoint"), Some(&1));
    let bp = c
        .list_breakpoints(pb::ListBreakpointsRequest {
            run_id: run.run_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .breakpoints
        .remove(0);
    c.resolve_breakpoint(pb::ResolveBreakpointRequest {
        run_id: run.run_id.clone(),
        effect_id: bp.effect_id,
        decision: pb::BreakpointDecision::Approve as i32,
        ..Default::default()
    })
    .await
    .unwrap();
    // The second task.
    seen.until(&mut watch, |r| r.status == Running as i32).await;
    let second = poll_one(&mut w, "w").await;
    w.complete_task(completion("w", &second, br#"{"n": 2}"#))
        .await
        .unwrap();
    // The end: the finished run comes with the terminal event, then the stream ends.
    let (done, events) = seen
        .until(&mut watch, |r| r.status == Completed as i32)
        .await;
    assert!(events.iter().any(|e| e == "RUN_COMPLETED"), "{events:?}");
    let output: Value = serde_json::from_slice(&done.output_json).unwrap();
    assert_eq!(output, json!({"approved": true, "a": 1, "b": 2}));
    assert!(watch.message().await.unwrap().is_none());

    let mut statuses = seen.statuses.clone();
    if statuses.first() == Some(&(Created as i32)) {
        statuses.remove(0); // whether the first iteration ran before the watch began
    }
    let expected = [Running, Waiting, Running, Completed].map(|s| s as i32);
    assert_eq!(statuses, expected, "events: {:?}", seen.events);
    assert_eq!(seen.events.first().map(String::as_str), Some("RUN_CREATED"));
    assert_eq!(manager.live_runs(), 0);
    assert_eq!(get(&mut c, &run.run_id).await, done);

    clock.release().await;
    stop(s, manager, server).await;
}

/// Runs that end in every way (completed, cancelled, halted) leave the run table; it keeps only
/// the configured number of finished summaries, and `GetRun`, `ListRuns`, `WatchRun` and a
/// restarted manager still find every run in the journal.
#[tokio::test(start_paused = true)]
async fn finished_runs_leave_the_table_and_are_read_back_from_the_journal() {
    use pb::RunStatus::{Cancelled, Completed, Failed};
    let clock = StillClock::hold();
    let (s, manager, server) = start_core(tempfile::tempdir().unwrap(), 2).await;
    let mut c = client(&s, None);
    let mut w = raw_worker(&s, "w").await;
    let mut expected = Vec::new();
    for n in 0..3 {
        let run = create(&mut c, "", QUICK, json!({"n": n})).await;
        let (_, last) = watch_all(&mut c, "", &run.run_id).await;
        assert_eq!(last.status, Completed as i32);
        expected.push((run.run_id, Completed as i32));
    }
    // Cancelled while its task is leased; a CreateRun retry finds it while it is live.
    let create_steps = pb::CreateRunRequest {
        process: Some(pb::ProcessBundle::single_file(
            "main.mjs",
            STEPS.as_bytes().to_vec(),
        )),
        idempotency_key: "steps-once".into(),
        ..Default::default()
    };
    let steps = c
        .create_run(create_steps.clone())
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    poll_one(&mut w, "w").await;
    let again = c
        .create_run(create_steps.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.run.unwrap().run_id, steps.run_id);
    assert_eq!(manager.live_runs(), 1);
    let cancelled = c
        .cancel_run(pb::CancelRunRequest {
            run_id: steps.run_id.clone(),
            reason: "not needed".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    assert_eq!(cancelled.status, Cancelled as i32);
    expected.push((steps.run_id.clone(), Cancelled as i32));
    // Halted as failed before it ever iterated to its end.
    let halted = create(&mut c, "", STEPS, json!({})).await;
    let h = c
        .halt_run(pb::HaltRunRequest {
            run_id: halted.run_id.clone(),
            final_status: pb::HaltFinalStatus::Failed as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!h.already_terminal);
    expected.push((halted.run_id.clone(), Failed as i32));

    assert_eq!(manager.live_runs(), 0);
    assert_eq!(manager.cached_finished_runs(), 2);
    // Still deduplicated: the cancelled run is one of the two cached.
    let again = c
        .create_run(create_steps.clone())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(again.run.unwrap().run_id, steps.run_id);

    // GetRun, from the cache or the journal.
    for (n, (run_id, status)) in expected.iter().enumerate() {
        let r = get(&mut c, run_id).await;
        assert_eq!(r.status, *status, "{run_id}");
        if n < 3 {
            let output: Value = serde_json::from_slice(&r.output_json).unwrap();
            assert_eq!(output, json!({"n": n}));
        }
    }
    assert_eq!(
        manager.cached_finished_runs(),
        2,
        "reads stay within the bound"
    );
    // ListRuns, newest first, paged.
    let mut listed = Vec::new();
    let mut token = String::new();
    loop {
        let page = c
            .list_runs(pb::ListRunsRequest {
                page_size: 2,
                page_token: token,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        listed.extend(page.runs.into_iter().map(|r| (r.run_id, r.status)));
        if page.next_page_token.is_empty() {
            break;
        }
        token = page.next_page_token;
    }
    let mut newest_first = expected.clone();
    newest_first.sort_by(|a, b| b.0.cmp(&a.0));
    assert_eq!(listed, newest_first);
    let completed = c
        .list_runs(pb::ListRunsRequest {
            statuses: vec![Completed as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .runs;
    assert_eq!(completed.len(), 3);
    let unfinished = c
        .list_runs(pb::ListRunsRequest {
            statuses: vec![pb::RunStatus::Running as i32, pb::RunStatus::Waiting as i32],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .runs;
    assert!(unfinished.is_empty());
    // WatchRun of a run that is no longer cached: its events to the terminal one, the final
    // state, the end; resumed past its end: the final state, the end.
    let (oldest, _) = &newest_first[4];
    let (events, last) = watch_all(&mut c, "", oldest).await;
    assert_eq!(last.status, Completed as i32);
    assert_eq!(
        events.last().map(|e| e.r#type.as_str()),
        Some("RUN_COMPLETED")
    );
    let mut past_end = c
        .watch_run(watch_request(oldest, events.len() as u64 + 1))
        .await
        .unwrap()
        .into_inner();
    let first = past_end.message().await.unwrap().unwrap();
    assert_eq!(first.run.map(|r| r.status), Some(Completed as i32));
    assert!(past_end.message().await.unwrap().is_none());

    // A manager started over the same journal: nothing live, the newest finished runs cached.
    let restarted = manager_over(s.dir.path(), 2).await;
    assert_eq!(restarted.live_runs(), 0);
    assert_eq!(restarted.cached_finished_runs(), 2);
    let r = restarted.get("default", oldest).await.unwrap();
    assert_eq!(r.status, RunStatus::Completed);
    restarted.shutdown().await;

    clock.release().await;
    stop(s, manager, server).await;
}
