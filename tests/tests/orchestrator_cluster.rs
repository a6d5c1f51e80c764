//! The distributed setup as separate OS processes on 127.0.0.1: SeaweedFS, the `journal` service
//! on it, the `orchestrator` using that journal remotely, and `harness-launcher` workers running
//! shell tasks. Crashes are real: `kill -9` of a worker mid-task and of the orchestrator at
//! random points while 20 runs are in flight. Tasks append to a ledger, so a side effect run
//! twice shows even where the journal looks right.

#[path = "support/cluster.rs"]
mod cluster;

use std::collections::HashSet;
use std::path::Path;
use std::time::Duration;

use babysitter_common::client::{AuthedChannel, ClientOptions};
use babysitter_harness_launcher::testing::processes::gone;
use babysitter_proto::journal::v1 as jpb;
use babysitter_proto::journal::v1::journal_service_client::JournalServiceClient;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use babysitter_tests::{SeaweedFs, ServiceProcess, free_port, test_prefix};
use cluster::{assert_exactly_once, create};
use serde_json::{Value, json};
use tonic_health::pb::health_check_response::ServingStatus;

struct Cluster {
    dir: tempfile::TempDir,
    journal: ServiceProcess,
    orchestrator: Option<ServiceProcess>,
    orchestrator_port: u16,
    workers: Vec<ServiceProcess>,
    /// With tokens: the orchestrator's and journal's config files, the worker's token file.
    auth: Option<(std::path::PathBuf, std::path::PathBuf)>,
    _weed: SeaweedFs,
}

/// Tokens of the authenticated cluster.
const JOURNAL_TOKEN: &str = "journal-token-0123456789";
const CLIENT_A: &str = "client-a-token-0123456789";
const CLIENT_B: &str = "client-b-token-0123456789";
const WORKER_TOKEN: &str = "worker-token-0123456789";

/// Writes the token files and configs; returns (orchestrator config, journal config).
fn write_auth(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let file = |name: &str, token: &str| {
        let p = dir.join(name);
        std::fs::write(&p, format!("{token}\n")).unwrap();
        p.display().to_string()
    };
    let journal_tok = file("journal.token", JOURNAL_TOKEN);
    let a = file("a.token", CLIENT_A);
    let b = file("b.token", CLIENT_B);
    let w = file("worker.token", WORKER_TOKEN);
    let orch = dir.join("orchestrator.toml");
    std::fs::write(
        &orch,
        format!(
            r#"[journal]
token-file = "{journal_tok}"

[[server.auth.tokens]]
token-file = "{a}"
role = "client"
name = "alice"
namespaces = ["a"]

[[server.auth.tokens]]
token-file = "{b}"
role = "client"
name = "bob"
namespaces = ["b"]

[[server.auth.tokens]]
token-file = "{w}"
role = "worker"
"#
        ),
    )
    .unwrap();
    let journal = dir.join("journal.toml");
    std::fs::write(
        &journal,
        format!(
            r#"[[server.auth.tokens]]
token-file = "{journal_tok}"
role = "admin"
"#
        ),
    )
    .unwrap();
    (orch, journal)
}

impl Cluster {
    async fn start() -> Cluster {
        Self::start_with(false).await
    }

    async fn start_with(auth: bool) -> Cluster {
        let weed = SeaweedFs::start().await.expect("seaweedfs");
        let dir = tempfile::tempdir().unwrap();
        let auth = auth.then(|| write_auth(dir.path()));
        let envs: Vec<(String, String)> = weed
            .s3()
            .env_vars()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let mut journal_args = Vec::new();
        if let Some((_, journal_config)) = &auth {
            journal_args.extend(["--config".to_owned(), journal_config.display().to_string()]);
        }
        let journal = cluster::start_journal(
            &weed.s3_url(&test_prefix("cluster")),
            &journal_args,
            &envs,
            dir.path().join("journal.log"),
        );
        let mut c = Cluster {
            dir,
            journal,
            orchestrator: None,
            orchestrator_port: free_port().unwrap(),
            workers: Vec::new(),
            auth,
            _weed: weed,
        };
        c.start_orchestrator();
        c
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.orchestrator_port)
    }

    fn start_orchestrator(&mut self) {
        let runs = self.dir.path().join("orchestrator-runs");
        let mut args = cluster::orchestrator_args(
            &format!("http://{}", self.journal.ready),
            &format!("127.0.0.1:{}", self.orchestrator_port),
            &runs,
        );
        if let Some((config, _)) = &self.auth {
            args.extend(["--config".to_owned(), config.display().to_string()]);
        }
        self.orchestrator = Some(cluster::start_orchestrator(
            &args,
            self.dir.path().join("orchestrator.log"),
        ));
    }

    fn start_worker(&mut self, id: &str) {
        let extra = match self.auth {
            Some(_) => vec![
                "--set".to_owned(),
                format!(
                    "orchestrator.token-file={}",
                    self.dir.path().join("worker.token").display()
                ),
            ],
            None => Vec::new(),
        };
        let worker = cluster::start_shell_worker(&self.url(), id, self.dir.path(), &extra);
        self.workers.push(worker);
    }

    fn client(&self) -> RunServiceClient<AuthedChannel> {
        self.client_as(None)
    }

    fn client_as(&self, token: Option<&str>) -> RunServiceClient<AuthedChannel> {
        cluster::run_client(&self.url(), token)
    }

    /// Every event of a run, read from the journal service (not through the orchestrator).
    async fn journal_events(&self, run_id: &str) -> Vec<jpb::Event> {
        let token = self.auth.as_ref().map(|_| JOURNAL_TOKEN);
        cluster::journal_events(&self.journal.ready, token, run_id).await
    }

    /// Every log line (orchestrators, workers, journal) naming an effect of the ledger lines
    /// `repeated` (`<run>/<effect> <attempt>`): what each process did with a task that ran twice.
    fn log_lines_naming(&self, repeated: &[String]) -> String {
        let effects: HashSet<&str> = repeated
            .iter()
            .filter_map(|l| l.split([' ', '/']).nth(1))
            .collect();
        let mut out = String::new();
        let mut logs: Vec<_> = std::fs::read_dir(self.dir.path())
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default();
        logs.retain(|p| p.extension().is_some_and(|e| e == "log"));
        logs.sort();
        // The whole logs, kept for a closer look when asked (the temp dir goes with the test).
        if let Some(keep) = std::env::var_os("BABYSITTER_TEST_KEEP_LOGS") {
            let keep = Path::new(&keep).join(format!("cluster-{}", std::process::id()));
            if std::fs::create_dir_all(&keep).is_ok() {
                for log in &logs {
                    if let Some(name) = log.file_name() {
                        let _ = std::fs::copy(log, keep.join(name));
                    }
                }
                out.push_str(&format!("logs kept in {}\n", keep.display()));
            }
        }
        for log in logs {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            for line in text.lines() {
                if effects.iter().any(|e| line.contains(e)) {
                    out.push_str(&format!("{}: {line}\n", log.display()));
                }
            }
        }
        out
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        if let Some(o) = &self.orchestrator {
            s.push_str(&format!("--- orchestrator\n{}\n", o.log_tail(40)));
        }
        for w in &self.workers {
            s.push_str(&format!("--- {}\n{}\n", w.name(), w.log_tail(20)));
        }
        s.push_str(&format!("--- journal\n{}\n", self.journal.log_tail(20)));
        s
    }
}

const FANOUT: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: a.t, shell: { command: a.cmd } }));
export async function process(inputs, ctx) {
  const first = await ctx.task(sh, { t: 'first', cmd: 'echo start' });
  const many = await ctx.parallel.map(inputs.items, (i) =>
    ctx.task(sh, { t: `item-${i}`, cmd: `echo item-${i}` }, { label: `item-${i}` }));
  const last = await ctx.task(sh, { t: 'last', cmd: 'echo done' });
  return { first: first.stdout.trim(), items: many.map((m) => m.stdout.trim()), last: last.stdout.trim() };
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_shell_tasks_across_two_workers_and_an_ordered_watch() {
    let mut cluster = Cluster::start().await;
    cluster.start_worker("w1");
    cluster.start_worker("w2");
    let mut c = cluster.client();
    let run_id = create(
        &mut c,
        FANOUT,
        json!({"items": (0..18).collect::<Vec<_>>()}),
    )
    .await;
    let mut stream = c
        .watch_run(pb::WatchRunRequest {
            run_id: run_id.clone(),
            from_seq: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut watched = Vec::new();
    let mut status = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let msg = tokio::time::timeout_at(deadline, stream.message()).await;
        let Ok(msg) = msg else {
            panic!("the run did not finish:\n{}", cluster.logs());
        };
        let Some(m) = msg.unwrap() else { break };
        watched.extend(m.events);
        if let Some(r) = m.run {
            status = r.status;
        }
    }
    assert_eq!(
        status,
        pb::RunStatus::Completed as i32,
        "{}",
        cluster.logs()
    );
    let stored = cluster.journal_events(&run_id).await;
    assert_eq!(
        watched
            .iter()
            .map(|e| (e.seq, e.checksum.clone()))
            .collect::<Vec<_>>(),
        stored
            .iter()
            .map(|e| (e.seq, e.checksum.clone()))
            .collect::<Vec<_>>(),
        "the watch saw every stored event, in order"
    );
    assert_exactly_once(&run_id, &stored);
    assert_eq!(
        stored
            .iter()
            .filter(|e| e.r#type == "EFFECT_REQUESTED")
            .count(),
        20
    );
    // SIGTERM: the services drain and exit cleanly.
    for w in &mut cluster.workers {
        let status = w.terminate().expect("worker exits on SIGTERM");
        assert!(status.success(), "worker: {status}");
    }
    let status = cluster
        .orchestrator
        .as_mut()
        .and_then(ServiceProcess::terminate)
        .expect("orchestrator exits on SIGTERM");
    assert!(
        status.success(),
        "orchestrator: {status}\n{}",
        cluster.logs()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_killed_mid_task_loses_its_lease_and_the_task_runs_on_the_other() {
    let mut cluster = Cluster::start().await;
    let marks = cluster.dir.path().join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    let m = marks.display();
    let cmd = format!(
        "if [ -e {m}/started ]; then echo second; else echo $$ > {m}/pid; touch {m}/started; sleep 60; echo first; fi"
    );
    cluster.start_worker("doomed");
    let mut c = cluster.client();
    let run_id = create(&mut c, cluster::ONE_SHELL_TASK, json!({"cmd": cmd})).await;
    wait_for_file(&marks.join("started"), &cluster).await;
    let first = std::fs::read_to_string(marks.join("pid"))
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
        .expect("the first attempt wrote its pid");
    cluster.workers[0].kill9();
    // The killed worker's task dies with it: nothing of the first attempt is left to overlap
    // the second.
    assert!(
        gone(first).await,
        "the killed worker's task process {first} kept running"
    );
    cluster.start_worker("survivor");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let run = loop {
        let r = cluster::get_run(&mut c, &run_id).await;
        if r.status == pb::RunStatus::Completed as i32 {
            break r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not completed:\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let output: Value = serde_json::from_slice(&run.output_json).unwrap();
    assert_eq!(
        output["out"], "second",
        "the second attempt ran on the survivor"
    );
    let events = cluster.journal_events(&run_id).await;
    assert_exactly_once(&run_id, &events);
    assert_eq!(
        events
            .iter()
            .filter(|e| e.r#type == "EFFECT_RESOLVED")
            .count(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_orchestrator_killed_at_random_points_during_20_runs_loses_and_repeats_nothing() {
    let mut cluster = Cluster::start().await;
    let ledger = cluster.dir.path().join("ledger");
    cluster.start_worker("w1");
    cluster.start_worker("w2");
    let mut c = cluster.client();
    let mut runs = Vec::new();
    for n in 0..20 {
        runs.push(
            create(
                &mut c,
                cluster::LEDGER_STEPS,
                json!({"n": n, "ledger": ledger}),
            )
            .await,
        );
    }
    // A reproducible "random" schedule of kills: four kill -9 and two SIGTERM, interleaved.
    let mut schedule = cluster::Schedule::from_clock();
    for kill in 0..6 {
        let wait = Duration::from_millis(150 + schedule.below(700));
        tokio::time::sleep(wait).await;
        let graceful = kill % 3 == 2;
        eprintln!("stop orchestrator #{kill} after {wait:?} (SIGTERM: {graceful})");
        if let Some(o) = cluster.orchestrator.as_mut() {
            if graceful {
                o.terminate();
            } else {
                o.kill9();
            }
        }
        cluster.start_orchestrator();
    }
    let mut c = cluster.client();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    loop {
        let listed = c
            .list_runs(pb::ListRunsRequest {
                page_size: 100,
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .runs;
        let done = listed
            .iter()
            .filter(|r| r.status == pb::RunStatus::Completed as i32)
            .count();
        if done == 20 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{done}/20 completed: {:?}\n{}",
            listed
                .iter()
                .map(|r| (r.status, r.status_reason.clone()))
                .collect::<Vec<_>>(),
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (n, run_id) in runs.iter().enumerate() {
        let events = cluster.journal_events(run_id).await;
        assert_exactly_once(run_id, &events);
        assert_eq!(
            events
                .iter()
                .filter(|e| e.r#type == "EFFECT_REQUESTED")
                .count(),
            5
        );
        assert_eq!(events.last().unwrap().r#type, "RUN_COMPLETED");
        let r = cluster::get_run(&mut c, run_id).await;
        let output: Value = serde_json::from_slice(&r.output_json).unwrap();
        assert_eq!(
            output,
            json!({"n": n, "a": "a", "fan": ["f1", "f2", "f3"], "b": "b"})
        );
    }
    // No worker died, so every task ran exactly once: one ledger line per effect.
    let (twice, ran) = cluster::ledger_repeats(&ledger);
    assert!(
        twice.is_empty(),
        "tasks ran more than once: {twice:?}\n{}",
        cluster.log_lines_naming(&twice)
    );
    assert_eq!(ran, 100, "20 runs × 5 tasks, each once");
}

async fn wait_for_file(path: &Path, cluster: &Cluster) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !path.try_exists().unwrap_or(false) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} never appeared:\n{}",
            path.display(),
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The overall health status of the server at `addr` (`host:port`), or `None` when it does not
/// answer within two seconds.
async fn health(addr: &str) -> Option<i32> {
    cluster::health_of(addr, "").await
}

/// Waits (guard: 60 s) until the server at `addr` reports `status`.
async fn health_becomes(addr: &str, status: ServingStatus, cluster: &Cluster) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while health(addr).await != Some(status as i32) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{addr} never reported {status:?}:\n{}",
            cluster.logs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn health_is_not_serving_while_the_store_hangs_and_serving_once_it_is_back() {
    use rustix::process::{Pid, Signal, kill_process};
    let cluster = Cluster::start().await;
    let journal = cluster.journal.ready.clone();
    let orchestrator = format!("127.0.0.1:{}", cluster.orchestrator_port);
    health_becomes(&journal, ServingStatus::Serving, &cluster).await;
    health_becomes(&orchestrator, ServingStatus::Serving, &cluster).await;

    // SeaweedFS stops answering (stopped, not gone: requests hang, as in a real outage).
    let weed = Pid::from_raw(cluster._weed.pid() as i32).expect("seaweedfs pid");
    kill_process(weed, Signal::STOP).expect("SIGSTOP seaweedfs");
    health_becomes(&journal, ServingStatus::NotServing, &cluster).await;
    health_becomes(&orchestrator, ServingStatus::NotServing, &cluster).await;
    assert!(
        cluster.journal.log_tail(50).contains("unreachable"),
        "the journal logged nothing about the outage:\n{}",
        cluster.logs()
    );

    kill_process(weed, Signal::CONT).expect("SIGCONT seaweedfs");
    health_becomes(&journal, ServingStatus::Serving, &cluster).await;
    health_becomes(&orchestrator, ServingStatus::Serving, &cluster).await;
    assert!(cluster.journal.log_tail(50).contains("reachable again"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_roles_and_namespaces_across_processes() {
    let mut cluster = Cluster::start_with(true).await;
    cluster.start_worker("w1");
    // No token, a wrong token: Unauthenticated, on the orchestrator and on the journal.
    for token in [None, Some("not-a-token-at-all")] {
        let e = cluster
            .client_as(token)
            .list_runs(pb::ListRunsRequest::default())
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated, "{token:?}");
    }
    let mut bare_journal: JournalServiceClient<AuthedChannel> = babysitter_common::client::client(
        &format!("http://{}", cluster.journal.ready),
        None,
        &ClientOptions::default(),
    )
    .unwrap();
    let e = bare_journal
        .get_head(jpb::GetHeadRequest { run_id: "x".into() })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated);

    let mut alice = cluster.client_as(Some(CLIENT_A));
    let run_id = alice
        .create_run(pb::CreateRunRequest {
            namespace: "a".into(),
            process: Some(pb::ProcessBundle::single_file("main.mjs", FANOUT)),
            inputs_json: Some(b"{\"items\":[1]}".to_vec().into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap()
        .run_id;
    // The worker (worker token) runs it through the authenticated journal.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let r = alice
            .get_run(pb::GetRunRequest {
                namespace: "a".into(),
                run_id: run_id.clone(),
                include_run_files: false,
            })
            .await
            .unwrap()
            .into_inner()
            .run
            .unwrap();
        if r.status == pb::RunStatus::Completed as i32 {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{}", cluster.logs());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Bob sees nothing of namespace a, by name or by listing.
    let mut bob = cluster.client_as(Some(CLIENT_B));
    for ns in ["a", "b"] {
        let e = bob
            .get_run(pb::GetRunRequest {
                namespace: ns.into(),
                run_id: run_id.clone(),
                include_run_files: false,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), tonic::Code::NotFound, "namespace {ns}");
    }
    let e = bob
        .list_runs(pb::ListRunsRequest {
            namespace: "a".into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::NotFound);
    assert!(
        bob.list_runs(pb::ListRunsRequest {
            namespace: "b".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .runs
        .is_empty()
    );
    // A worker token cannot create runs.
    let e = cluster
        .client_as(Some(WORKER_TOKEN))
        .create_run(pb::CreateRunRequest {
            process: Some(pb::ProcessBundle::single_file("main.mjs", FANOUT)),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied);
}
