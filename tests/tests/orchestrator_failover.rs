//! Several orchestrators on one journal, as separate OS processes on 127.0.0.1 over SeaweedFS:
//! exactly one is active (it holds the journal's leadership lease), the others stand by and
//! forward callers to it. The active one is killed (`kill -9`) or paused (`SIGSTOP` past its
//! lease): another takes over, the paused one is fenced and steps down, and no task runs twice —
//! every task appends its idempotency key to a ledger, so a second execution shows even where
//! the journal looks right.

#[path = "support/cluster.rs"]
mod cluster;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use babysitter_common::client::AuthedChannel;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use babysitter_tests::{SeaweedFs, ServiceProcess, free_port, test_prefix};
use serde_json::{Value, json};
use tokio::time::Instant;

struct Ha {
    dir: tempfile::TempDir,
    journal: ServiceProcess,
    ports: Vec<u16>,
    orchestrators: Vec<Option<ServiceProcess>>,
    workers: Vec<ServiceProcess>,
    _weed: SeaweedFs,
}

impl Ha {
    /// SeaweedFS, the journal on it, and `n` orchestrators started one after the other (so the
    /// first is the active one).
    async fn start(n: usize) -> Ha {
        let weed = SeaweedFs::start().await.expect("seaweedfs");
        let dir = tempfile::tempdir().unwrap();
        let envs: Vec<(String, String)> = weed
            .s3()
            .env_vars()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let journal = cluster::start_journal(
            &weed.s3_url(&test_prefix("failover")),
            &[],
            &envs,
            dir.path().join("journal.log"),
        );
        let mut ha = Ha {
            dir,
            journal,
            ports: (0..n).map(|_| free_port().unwrap()).collect(),
            orchestrators: (0..n).map(|_| None).collect(),
            workers: Vec::new(),
            _weed: weed,
        };
        for i in 0..n {
            ha.start_orchestrator(i);
        }
        ha
    }

    fn url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.ports[i])
    }

    fn log(&self, i: usize) -> PathBuf {
        self.dir.path().join(format!("orchestrator-{i}.log"))
    }

    /// Starts orchestrator `i` on its port; returns once it answers calls (active, or standing
    /// by behind a live holder).
    fn start_orchestrator(&mut self, i: usize) {
        let runs = self.dir.path().join(format!("orchestrator-runs-{i}"));
        let mut args = cluster::orchestrator_args(
            &format!("http://{}", self.journal.ready),
            &format!("127.0.0.1:{}", self.ports[i]),
            &runs,
        );
        // Task leases well over a fail-over (the 2 s lease ttl, a poll, recovery, a restart):
        // a worker cut off from every orchestrator keeps its running task and its result that
        // long, and a task the new holder recovers waits that long for its worker to adopt it.
        // (With task leases as short as the ttl — the orchestrator warns about it — a fail-over
        // may outlast them, and tasks then run again.)
        args.extend([
            "--set".to_owned(),
            "queue.lease-duration-ms=6000".to_owned(),
        ]);
        self.orchestrators[i] = Some(cluster::start_orchestrator(&args, self.log(i)));
    }

    fn start_worker(&mut self, id: &str, orchestrator: usize) {
        let worker = cluster::start_shell_worker(&self.url(orchestrator), id, self.dir.path(), &[]);
        self.workers.push(worker);
    }

    fn client(&self, i: usize) -> RunServiceClient<AuthedChannel> {
        cluster::run_client(&self.url(i), None)
    }

    /// Which orchestrators say they are active (a stopped or paused one says nothing).
    async fn active(&self) -> Vec<usize> {
        let mut active = Vec::new();
        for (i, o) in self.orchestrators.iter().enumerate() {
            if o.is_some() && cluster::is_leader(self.ports[i]).await == Some(true) {
                active.push(i);
            }
        }
        active
    }

    /// Waits until exactly one orchestrator (other than `except`) is active; returns it.
    ///
    /// The health entry is a report: a holder deposed while starved of CPU may still say
    /// `SERVING` for a moment after another took over, though its writes are already refused and
    /// it answers no call (the ledger and journal checks hold the guarantee). So two reports at
    /// once are waited out, and only a state that never settles fails.
    async fn wait_for_one_active(&self, except: Option<usize>) -> usize {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let active = self.active().await;
            if let [one] = active.as_slice()
                && Some(*one) != except
            {
                return *one;
            }
            assert!(
                Instant::now() < deadline,
                "no single orchestrator took over (active: {active:?}):\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for every run to complete, asking through orchestrator `via` (retrying while it
    /// is restarted or stands by without a holder).
    async fn wait_completed(&self, via: usize, runs: &[String]) {
        let deadline = Instant::now() + Duration::from_secs(180);
        loop {
            let listed = self
                .client(via)
                .list_runs(pb::ListRunsRequest {
                    page_size: 1000,
                    ..Default::default()
                })
                .await
                .map(|r| r.into_inner().runs);
            if let Ok(listed) = &listed {
                let done = listed
                    .iter()
                    .filter(|r| r.status == pb::RunStatus::Completed as i32)
                    .count();
                if done == runs.len() {
                    return;
                }
            }
            assert!(
                Instant::now() < deadline,
                "runs did not complete: {:?}\n{}",
                listed.map(|l| l.iter().map(|r| r.status).collect::<Vec<_>>()),
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Stops the active orchestrator (starting with `active`) `rounds` times at random moments
    /// (a pause below `max_gap_ms` first), with SIGTERM every `graceful_every`-th round (0:
    /// never) and `kill -9` otherwise; each time another takes over and the stopped one comes
    /// back on its port as a standby. Returns the active one at the end.
    async fn stop_the_active(
        &mut self,
        mut active: usize,
        rounds: usize,
        graceful_every: usize,
        max_gap_ms: u64,
    ) -> usize {
        let mut schedule = cluster::Schedule::from_clock();
        for round in 0..rounds {
            tokio::time::sleep(Duration::from_millis(100 + schedule.below(max_gap_ms))).await;
            let graceful = graceful_every > 0 && round % graceful_every == graceful_every - 1;
            eprintln!("round {round}: stop the active orchestrator {active} (SIGTERM: {graceful})");
            if let Some(mut o) = self.orchestrators[active].take() {
                if graceful {
                    let status = o.terminate();
                    assert!(status.is_some_and(|s| s.success()), "SIGTERM: {status:?}");
                } else {
                    o.kill9();
                }
            }
            let next = self.wait_for_one_active(Some(active)).await;
            eprintln!("round {round}: orchestrator {next} took over");
            // The stopped one comes back on its port, as a standby. (Under load the active one
            // may lose its lease to a late renewal and another take over: the invariant is one
            // active at a time, not which.)
            self.start_orchestrator(active);
            active = self.wait_for_one_active(None).await;
        }
        active
    }

    fn logs(&self) -> String {
        let mut s = String::new();
        for i in 0..self.ports.len() {
            let log = std::fs::read(self.log(i)).unwrap_or_default();
            s.push_str(&format!(
                "--- orchestrator {i}\n{}\n",
                babysitter_tests::tail(&log, 30)
            ));
        }
        for w in &self.workers {
            s.push_str(&format!("--- {}\n{}\n", w.name(), w.log_tail(15)));
        }
        s.push_str(&format!("--- journal\n{}\n", self.journal.log_tail(15)));
        s
    }
}

/// Creates a run through `c` as a careful client does: each call under its own deadline, and
/// retried under the same idempotency key while the orchestrator it reaches is not answering
/// (standing by, failing over) or the call's outcome is unknown (its deadline passed). A retry
/// never makes a second run: the ledger checks below would see its tasks run twice.
async fn create(ha: &Ha, c: &mut RunServiceClient<AuthedChannel>, inputs: Value) -> String {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let mut req = tonic::Request::new(pb::CreateRunRequest {
            process: Some(pb::ProcessBundle::single_file(
                "main.mjs",
                cluster::LEDGER_STEPS.as_bytes().to_vec(),
            )),
            inputs_json: Some(serde_json::to_vec(&inputs).unwrap().into()),
            idempotency_key: format!("n-{}", inputs["n"]),
            ..Default::default()
        });
        req.set_timeout(Duration::from_secs(20));
        let r = c.create_run(req).await;
        let retryable = |code| {
            matches!(
                code,
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
            )
        };
        match r {
            Ok(r) => return r.into_inner().run.expect("the created run").run_id,
            Err(s) if retryable(s.code()) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(s) => panic!("create run: {s:?}\n{}", ha.logs()),
        }
    }
}

/// Every run's journal has each effect requested and resolved once, and every task's ledger line
/// appears exactly once (no worker died, so no task had a second attempt).
async fn assert_ran_once(ha: &Ha, runs: &[String], ledger: &Path, per_run: usize) {
    for run_id in runs {
        let events = cluster::journal_events(&ha.journal.ready, None, run_id).await;
        let mut resolved: HashMap<String, usize> = HashMap::new();
        let mut requested = 0;
        for e in &events {
            match e.r#type.as_str() {
                "EFFECT_REQUESTED" => requested += 1,
                "EFFECT_RESOLVED" => {
                    *resolved
                        .entry(cluster::data(e)["effectId"].to_string())
                        .or_default() += 1;
                }
                _ => {}
            }
        }
        assert_eq!(requested, per_run, "run {run_id}");
        assert_eq!(resolved.len(), per_run, "run {run_id}: {resolved:?}");
        assert!(
            resolved.values().all(|n| *n == 1),
            "run {run_id}: {resolved:?}"
        );
        let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
        assert_eq!(
            events.last().map(|e| e.r#type.as_str()),
            Some("RUN_COMPLETED")
        );
    }
    let (twice, ran) = cluster::ledger_repeats(ledger);
    assert!(
        twice.is_empty(),
        "tasks ran more than once: {twice:?}\n{}",
        ha.logs()
    );
    assert_eq!(ran, runs.len() * per_run, "every task ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_orchestrators_one_active_kills_fail_over_and_no_task_runs_twice() {
    let mut ha = Ha::start(3).await;
    assert_eq!(
        ha.wait_for_one_active(None).await,
        0,
        "the first started is the only active one"
    );
    for i in [1, 2] {
        let log = std::fs::read_to_string(ha.log(i)).unwrap();
        assert!(log.contains("orchestrator standing by"), "{log}");
    }
    // Workers and the client talk to standbys: their calls are forwarded to the active one.
    ha.start_worker("w1", 1);
    ha.start_worker("w2", 2);
    let ledger = ha.dir.path().join("ledger");
    let mut runs = Vec::new();
    let mut c = ha.client(1);
    for n in 0..12 {
        runs.push(create(&ha, &mut c, json!({"n": n, "ledger": ledger})).await);
    }

    let first = ha.wait_for_one_active(None).await;
    let active = ha.stop_the_active(first, 3, 0, 600).await;
    let via = (active + 1) % 3;
    ha.wait_completed(via, &runs).await;
    assert_ran_once(&ha, &runs, &ledger, 5).await;
    ha.wait_for_one_active(None).await;

    // Through a standby, a run's summary and output read as on the active one.
    let r = ha
        .client(via)
        .get_run(pb::GetRunRequest {
            run_id: runs[3].clone(),
            ..Default::default()
        })
        .await
        .expect("get run through a standby")
        .into_inner()
        .run
        .unwrap();
    let output: Value = serde_json::from_slice(&r.output_json).unwrap();
    assert_eq!(
        output,
        json!({"n": 3, "a": "a", "fan": ["f1", "f2", "f3"], "b": "b"})
    );

    // SIGTERM: every process drains and exits cleanly; the active one releases the lease.
    for w in &mut ha.workers {
        assert!(w.terminate().expect("worker exits").success());
    }
    for (i, o) in ha.orchestrators.iter_mut().enumerate() {
        let status = o.as_mut().and_then(ServiceProcess::terminate);
        assert!(
            status.is_some_and(|s| s.success()),
            "orchestrator {i}: {status:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_active_orchestrator_is_fenced_steps_down_and_no_task_runs_twice() {
    use rustix::process::{Pid, Signal, kill_process};
    let mut ha = Ha::start(2).await;
    assert_eq!(ha.wait_for_one_active(None).await, 0);
    let log1 = std::fs::read_to_string(ha.log(1)).unwrap();
    assert!(log1.contains("orchestrator standing by"), "{log1}");
    ha.start_worker("w1", 1);
    let ledger = ha.dir.path().join("ledger");
    let mut c = ha.client(1);
    let mut runs = Vec::new();
    for n in 0..8 {
        runs.push(create(&ha, &mut c, json!({"n": n, "ledger": ledger})).await);
    }
    tokio::time::sleep(Duration::from_millis(400)).await;

    // Pause the active one past its lease: the other takes over. (Which one is active is read
    // now: under load a late renewal may already have moved the lease.)
    let paused = ha.wait_for_one_active(None).await;
    let other = 1 - paused;
    const STEPPED_DOWN: &str = "orchestrator stepped down from epoch";
    let stepped_down = || {
        std::fs::read_to_string(ha.log(paused))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with(STEPPED_DOWN))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let before = stepped_down().len();
    let pid = ha.orchestrators[paused]
        .as_ref()
        .and_then(ServiceProcess::pid)
        .unwrap();
    let pid = Pid::from_raw(pid as i32).unwrap();
    kill_process(pid, Signal::STOP).expect("SIGSTOP");
    let deadline = Instant::now() + Duration::from_secs(30);
    while cluster::is_leader(ha.ports[other]).await != Some(true) {
        assert!(
            Instant::now() < deadline,
            "the standby never took over:\n{}",
            ha.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    kill_process(pid, Signal::CONT).expect("SIGCONT");

    // Resumed, it learns it was deposed (its renewal or its next write is fenced) and stands by.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lines = stepped_down();
        if lines.len() > before {
            assert!(lines[before].contains("fenced"), "{lines:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "it never stepped down:\n{}",
            ha.logs()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    ha.wait_for_one_active(None).await;
    ha.wait_completed(0, &runs).await;
    assert_ran_once(&ha, &runs, &ledger, 5).await;
}

/// The full scale: 100 runs × 10 shell tasks, the active one of three orchestrators
/// stopped 30 times at random moments (20 `kill -9`, 10 SIGTERM): every run completes, and every
/// task's ledger line appears exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hundred_runs_of_ten_tasks_through_thirty_stops_of_the_active_orchestrator() {
    let mut ha = Ha::start(3).await;
    ha.start_worker("w1", 1);
    ha.start_worker("w2", 2);
    let ledger = ha.dir.path().join("ledger");
    let mut c = ha.client(1);
    let mut runs = Vec::new();
    for n in 0..100 {
        let inputs =
            json!({"n": n, "ledger": ledger, "fan": (1..=8).collect::<Vec<_>>(), "work": 0.4});
        runs.push(create(&ha, &mut c, inputs).await);
    }
    // Every third stop is a SIGTERM: 20 kill -9 and 10 SIGTERM.
    let first = ha.wait_for_one_active(None).await;
    let active = ha.stop_the_active(first, 30, 3, 500).await;
    ha.wait_completed((active + 1) % 3, &runs).await;
    assert_ran_once(&ha, &runs, &ledger, 10).await;
}
