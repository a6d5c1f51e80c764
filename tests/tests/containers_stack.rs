//! The service images as a stack of containers (`babysitter_tests::stack`: the settings of
//! `deploy/compose/`, one container per service, SeaweedFS in another, a bridge network of the
//! test's own), driven from the host through the orchestrator's published 127.0.0.1 port. Tasks
//! are shell commands that append to a ledger on a host directory the workers mount, so a side
//! effect that happened twice shows even where the journal looks right. Crashes are container
//! kills (every process of the container dies with it) and a partition is `docker network
//! disconnect`. Needs `BABYSITTER_IT_DOCKER=1` and the images (`.ci/run` builds them).

#[path = "support/cluster.rs"]
mod cluster;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, UNIX_EPOCH};

use babysitter_common::client::AuthedChannel;
use babysitter_proto::journal::v1 as jpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use babysitter_tests::stack::{ContainerStack, SHORT_LEASES, TOKENS};
use cluster::assert_exactly_once;
use serde_json::{Value, json};

/// Shell tasks that write `<key> <attempt> <host> start|end <ns>` around their work: one task,
/// a fan-out of three, one more.
const LEDGER_STEPS: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const line = (what) => `echo "$BABYSITTER_IDEMPOTENCY_KEY $BABYSITTER_ATTEMPT $(cat /etc/hostname) ${what} $(date +%s%N)" >> /ledger/ledger`;
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: a.t,
  shell: { command: `${line('start')}; sleep ${a.work}; ${line('end')}; echo ${a.t}` } }));
export async function process(inputs, ctx) {
  const w = inputs.work;
  const a = await ctx.task(sh, { t: 'a', work: w });
  const fan = await ctx.parallel.map([1, 2, 3], (i) => ctx.task(sh, { t: `f${i}`, work: w }, { label: `f${i}` }));
  const b = await ctx.task(sh, { t: 'b', work: w });
  return { n: inputs.n, a: a.stdout.trim(), fan: fan.map((f) => f.stdout.trim()), b: b.stdout.trim() };
}
"#;

fn token(name: &str) -> &'static str {
    TOKENS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
        .unwrap()
}

fn client(stack: &ContainerStack) -> RunServiceClient<AuthedChannel> {
    cluster::run_client(&stack.url(), Some(token("client")))
}

async fn journal_events(stack: &ContainerStack, run_id: &str) -> Vec<jpb::Event> {
    cluster::journal_events(&stack.journal.addr(), Some(token("journal")), run_id).await
}

/// Creates a run, retrying while the orchestrator is (re)starting. Every try carries one
/// idempotency key: a call the orchestrator took before it stepped down (or whose answer was
/// lost) must not make a second run when it is retried.
async fn create(stack: &ContainerStack, src: &str, inputs: Value) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let key = ulid::Ulid::generate().to_string();
    loop {
        let r = client(stack)
            .create_run(pb::CreateRunRequest {
                process: Some(pb::ProcessBundle::single_file(
                    "main.mjs",
                    src.as_bytes().to_vec(),
                )),
                inputs_json: Some(serde_json::to_vec(&inputs).unwrap().into()),
                idempotency_key: key.clone(),
                ..Default::default()
            })
            .await;
        match r {
            Ok(r) => return r.into_inner().run.unwrap().run_id,
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("create run: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(e) => panic!("create run: {e}\n{}", stack.logs().await),
        }
    }
}

/// Waits (guard: `secs`) until every run in `ids` completed, tolerating an orchestrator that is
/// down or standing by; their outputs.
async fn all_completed(stack: &ContainerStack, ids: &[String], secs: u64) -> Vec<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    let mut last = String::new();
    loop {
        let mut outputs = Vec::new();
        let mut c = client(stack);
        for id in ids {
            let r = c
                .get_run(pb::GetRunRequest {
                    run_id: id.clone(),
                    ..Default::default()
                })
                .await;
            match r.map(|r| r.into_inner().run) {
                Ok(Some(run)) if run.status == pb::RunStatus::Completed as i32 => {
                    outputs.push(serde_json::from_slice(&run.output_json).unwrap());
                }
                Ok(Some(run)) => {
                    last = format!("{id}: status {} {}", run.status, run.status_reason);
                    // A run that ended otherwise never completes: say so now, with the logs.
                    assert!(
                        run.status < pb::RunStatus::Completed as i32,
                        "{last}\n{}",
                        stack.logs().await
                    );
                    break;
                }
                Ok(None) => last = format!("{id}: no run"),
                Err(e) => {
                    last = format!("{id}: {e}");
                    break;
                }
            }
        }
        if outputs.len() == ids.len() {
            return outputs;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "runs not completed within {secs} s (last: {last})\n{}",
            stack.logs().await
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn now_ns() -> u128 {
    std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Creates `n` runs of [`LEDGER_STEPS`] whose tasks work `work` seconds each; their ids.
async fn ledger_runs(stack: &ContainerStack, n: usize, work: f64) -> Vec<String> {
    let mut ids = Vec::new();
    for n in 0..n {
        ids.push(create(stack, LEDGER_STEPS, json!({"n": n, "work": work})).await);
    }
    ids
}

/// Waits for the [`ledger_runs`] `ids` to complete; checks their outputs and that the journal
/// resolved each of their effects exactly once.
async fn completed_once(stack: &ContainerStack, ids: &[String], secs: u64) {
    let outputs = all_completed(stack, ids, secs).await;
    for (n, out) in outputs.iter().enumerate() {
        assert_eq!(
            *out,
            json!({"n": n, "a": "a", "fan": ["f1", "f2", "f3"], "b": "b"})
        );
    }
    for id in ids {
        assert_exactly_once(id, &journal_events(stack, id).await);
    }
}

/// Waits (guard: 30 s; a registration may lag) until the orchestrator lists `n` workers.
async fn workers_become(c: &mut RunServiceClient<AuthedChannel>, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let workers = c
            .list_workers(pb::ListWorkersRequest {})
            .await
            .map(|r| r.into_inner().workers)
            .unwrap_or_default();
        if workers.len() == n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{n} workers expected: {workers:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One attempt of one task, from the ledger.
#[derive(Debug, Clone)]
struct Attempt {
    key: String,
    host: String,
    start: u128,
    end: Option<u128>,
}

fn read_ledger(stack: &ContainerStack) -> Vec<Attempt> {
    let text = std::fs::read_to_string(stack.ledger()).unwrap_or_default();
    let mut by: HashMap<(String, String, String), Attempt> = HashMap::new();
    for l in text.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        let [key, attempt, host, what, ns] = f[..] else {
            panic!("ledger line {l:?}")
        };
        let ns: u128 = ns.parse().unwrap();
        let a = by
            .entry((key.into(), attempt.into(), host.into()))
            .or_insert(Attempt {
                key: key.into(),
                host: host.into(),
                start: ns,
                end: None,
            });
        match what {
            "start" => a.start = ns,
            _ => a.end = Some(ns),
        }
    }
    by.into_values().collect()
}

/// No two attempts of one task ran at the same time. An attempt without an end line ran on a
/// worker that was killed (`kills`: container hostname → when) and ended then, or was stopped
/// by its worker for a lost lease (no end known: only its start order is checked).
fn assert_no_overlap(ledger: &[Attempt], kills: &HashMap<String, u128>) -> usize {
    let mut per_key: HashMap<&str, Vec<&Attempt>> = HashMap::new();
    for a in ledger {
        per_key.entry(&a.key).or_default().push(a);
    }
    let mut repeated = 0;
    for (key, mut attempts) in per_key {
        attempts.sort_by_key(|a| a.start);
        repeated += attempts.len() - 1;
        for pair in attempts.windows(2) {
            let ended = pair[0].end.or_else(|| kills.get(&pair[0].host).copied());
            if let Some(ended) = ended {
                assert!(
                    pair[1].start >= ended,
                    "task {key}: attempt on {} started before the one on {} ended: {attempts:?}",
                    pair[1].host,
                    pair[0].host
                );
            }
        }
    }
    repeated
}

async fn wait_ledger_lines(stack: &ContainerStack, n: usize) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let lines = std::fs::read_to_string(stack.ledger())
            .map(|t| t.lines().count())
            .unwrap_or(0);
        if lines >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{lines}/{n} ledger lines\n{}",
            stack.logs().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn runs_complete_on_the_container_stack() {
    let Some(stack) = ContainerStack::start(2, &SHORT_LEASES).await.unwrap() else {
        return;
    };
    let ids = ledger_runs(&stack, 5, 0.1).await;
    completed_once(&stack, &ids, 120).await;
    let ledger = read_ledger(&stack);
    assert_eq!(ledger.len(), 25, "5 runs × 5 tasks, each once: {ledger:?}");
    assert_eq!(assert_no_overlap(&ledger, &HashMap::new()), 0);
    // Both worker containers are known to the orchestrator.
    workers_become(&mut client(&stack), 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_journal_the_orchestrator_and_a_worker_killed_mid_run_lose_and_overlap_nothing() {
    let Some(stack) = ContainerStack::start(2, &SHORT_LEASES).await.unwrap() else {
        return;
    };
    let ids = ledger_runs(&stack, 8, 0.5).await;
    let mut kills: HashMap<String, u128> = HashMap::new();
    // The journal: SIGKILL while tasks run and results come in, then back.
    wait_ledger_lines(&stack, 6).await;
    stack.journal.kill().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.journal.restart().await.unwrap();
    // The orchestrator: SIGKILL (its lease on the journal lapses), then back.
    wait_ledger_lines(&stack, 20).await;
    stack.orchestrator.kill().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stack.orchestrator.restart().await.unwrap();
    // A worker: SIGKILL with its tasks in it, then back (same container, same hostname).
    wait_ledger_lines(&stack, 36).await;
    let w = &stack.workers[0];
    let killed = w.kill().await.unwrap();
    kills.insert(
        w.id()[..12].to_owned(),
        killed.duration_since(UNIX_EPOCH).unwrap().as_nanos(),
    );
    w.restart().await.unwrap();

    completed_once(&stack, &ids, 240).await;
    let ledger = read_ledger(&stack);
    let keys: HashSet<&str> = ledger.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(keys.len(), 40, "8 runs × 5 tasks ran");
    let repeated = assert_no_overlap(&ledger, &kills);
    eprintln!("{repeated} task(s) ran again after a crash, none overlapping");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partitioned_worker_loses_its_lease_and_its_late_result_is_refused() {
    let Some(mut stack) = ContainerStack::start(1, &SHORT_LEASES).await.unwrap() else {
        return;
    };
    // The first attempt marks itself and works for 6 s; any later one answers at once.
    let cmd = "h=$(cat /etc/hostname); echo \"$BABYSITTER_IDEMPOTENCY_KEY $BABYSITTER_ATTEMPT $h start $(date +%s%N)\" >> /ledger/ledger; \
               if [ -e /ledger/started ]; then echo second; else touch /ledger/started; sleep 6; echo first; fi; \
               echo \"$BABYSITTER_IDEMPOTENCY_KEY $BABYSITTER_ATTEMPT $h end $(date +%s%N)\" >> /ledger/ledger";
    let run_id = create(&stack, cluster::ONE_SHELL_TASK, json!({"cmd": cmd})).await;
    wait_ledger_lines(&stack, 1).await;
    stack.disconnect(&stack.workers[0]).await.unwrap();
    let cut = now_ns();
    // Only now a second worker: the task can reach it only after the first one's lease lapsed.
    stack.add_worker().await.unwrap();
    let out = all_completed(&stack, std::slice::from_ref(&run_id), 120).await;
    assert_eq!(
        out[0]["out"], "second",
        "the task ran again on the other worker"
    );

    // Back on the network, the cut-off worker learns its lease is gone: its result is dropped
    // (refused on completion, or stopped on the first renewal that failed).
    stack.reconnect(&stack.workers[0]).await.unwrap();
    let back = now_ns();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let log = stack.workers[0].stderr().await;
        if log.contains("lease lost") || log.contains("completion refused") {
            for l in log
                .lines()
                .filter(|l| l.contains("lease") || l.contains("refused"))
            {
                eprintln!("partitioned worker: {l}");
            }
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the partitioned worker never reported its lost lease:\n{}",
            stack.logs().await
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let events = journal_events(&stack, &run_id).await;
    assert_exactly_once(&run_id, &events);
    let resolved: Vec<_> = events
        .iter()
        .filter(|e| e.r#type == "EFFECT_RESOLVED")
        .collect();
    assert_eq!(resolved.len(), 1, "one result in the journal");
    let ledger = read_ledger(&stack);
    eprintln!("ledger (disconnected at {cut} ns, reconnected at {back} ns): {ledger:?}");
    // The cut-off worker stopped its attempt when the lease reached its fence (no renewal got
    // through), before the lease lapsed and the other worker began: no overlap.
    assert_no_overlap(&ledger, &HashMap::new());
    let hosts: HashSet<String> = ledger.into_iter().map(|a| a.host).collect();
    assert_eq!(hosts.len(), 2, "both workers started an attempt: {hosts:?}");
}

/// `deploy/compose/up.sh down -v` for the test's project when dropped (also on failure).
struct ComposeDown(Vec<(&'static str, String)>);

impl Drop for ComposeDown {
    fn drop(&mut self) {
        let up = babysitter_tests::stack::compose_dir().join("up.sh");
        let out = std::process::Command::new(up)
            .args(["down", "-v"])
            .envs(self.0.iter().map(|(k, v)| (*k, v.as_str())))
            .output();
        if let Ok(out) = out
            && !out.status.success()
        {
            eprintln!("up.sh down: {}", String::from_utf8_lossy(&out.stderr));
        }
    }
}

/// The stack as the README starts it: `deploy/compose/up.sh` (its own project, ports and secrets
/// dir here; TLS everywhere, mTLS on the journal and the orchestrator), a run through the
/// orchestrator's published port with the token and client certificate up.sh made, on the two
/// workers compose scaled; `up.sh down -v` afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn compose_up_runs_a_process_on_its_two_workers() {
    if !babysitter_tests::stack::images_ready().await {
        return;
    }
    let has_compose = |cmd: &[&str]| {
        std::process::Command::new(cmd[0])
            .args(&cmd[1..])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !has_compose(&["docker-compose", "version"])
        && !has_compose(&["docker", "compose", "version"])
    {
        return babysitter_tests::skip::skip(
            "needs docker-compose: apt-get install -y docker-compose (`.ci/run` does)",
        );
    }
    let secrets = tempfile::tempdir().unwrap();
    let port = babysitter_tests::free_port().unwrap();
    let dashboard_port = babysitter_tests::free_port().unwrap();
    let env = vec![
        (
            "BABYSITTER_PROJECT",
            babysitter_tests::test_prefix("bs")
                .to_ascii_lowercase()
                .replace('-', ""),
        ),
        ("BABYSITTER_SECRETS", secrets.path().display().to_string()),
        ("BABYSITTER_PORT", port.to_string()),
        (
            "BABYSITTER_PROXY_PORT",
            babysitter_tests::free_port().unwrap().to_string(),
        ),
        ("BABYSITTER_WORKERS", "2".to_owned()),
        ("BABYSITTER_DASHBOARD_PORT", dashboard_port.to_string()),
    ];
    let _down = ComposeDown(env.clone());
    let out = tokio::process::Command::new(babysitter_tests::stack::compose_dir().join("up.sh"))
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "up.sh failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The CLI's environment up.sh prints: the client token, and mTLS with the client certificate.
    let token = std::fs::read_to_string(secrets.path().join("client.token")).unwrap();
    let tls_file = |f: &str| Some(secrets.path().join("tls").join(f));
    let tls = babysitter_common::tls::ClientTlsConfig {
        ca_file: tls_file("ca.crt"),
        cert_file: tls_file("client.crt"),
        key_file: tls_file("client.key"),
        server_name: None,
    };
    let mut c: RunServiceClient<AuthedChannel> = babysitter_common::client::client_tls(
        &format!("https://127.0.0.1:{port}"),
        Some(&babysitter_common::auth::Secret::new(token.trim())),
        &babysitter_common::client::ClientOptions::default(),
        &tls,
    )
    .unwrap();
    const FAN: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: a.t, shell: { command: `echo ${a.t} $(cat /etc/hostname)` } }));
export async function process(inputs, ctx) {
  const out = await ctx.parallel.map([1, 2, 3, 4, 5, 6], (i) => ctx.task(sh, { t: `t${i}` }, { label: `t${i}` }));
  return { out: out.map((o) => o.stdout.trim()) };
}
"#;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let key = ulid::Ulid::generate().to_string();
    let run_id = loop {
        let r = c
            .create_run(pb::CreateRunRequest {
                process: Some(pb::ProcessBundle::single_file(
                    "main.mjs",
                    FAN.as_bytes().to_vec(),
                )),
                idempotency_key: key.clone(),
                ..Default::default()
            })
            .await;
        match r {
            Ok(r) => break r.into_inner().run.unwrap().run_id,
            Err(e) => {
                assert!(tokio::time::Instant::now() < deadline, "create run: {e}");
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        }
    };
    let run = loop {
        let r = cluster::get_run(&mut c, &run_id).await;
        if r.status == pb::RunStatus::Completed as i32 {
            break r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "run not completed: {} {}",
            r.status,
            r.status_reason
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let out: Value = serde_json::from_slice(&run.output_json).unwrap();
    let lines = out["out"].as_array().unwrap();
    assert_eq!(lines.len(), 6, "{out}");
    // compose scaled the workers to two
    workers_become(&mut c, 2).await;

    // The dashboard up.sh announces: HTTPS signed by the stack's CA, no client certificate
    // asked; without a token the login answer, with the client token the run.
    let ca =
        reqwest::Certificate::from_pem(&std::fs::read(secrets.path().join("tls/ca.crt")).unwrap())
            .unwrap();
    let http = reqwest::Client::builder()
        .add_root_certificate(ca)
        .build()
        .unwrap();
    let dash = format!("https://127.0.0.1:{dashboard_port}");
    let anonymous = http.get(format!("{dash}/api/runs")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let mut listed = String::new();
    for _ in 0..100 {
        let r = http
            .get(format!("{dash}/api/runs/{run_id}"))
            .bearer_auth(token.trim())
            .send()
            .await
            .unwrap();
        let status = r.status();
        listed = r.text().await.unwrap();
        if status == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        listed.contains(&run_id) && listed.contains("completed"),
        "the dashboard does not show the run: {listed}"
    );

    // What TLS must refuse on the deployed stack. A client that does not trust the CA:
    let other = tempfile::tempdir().unwrap();
    babysitter_common::tls::generate::generate(
        other.path(),
        &[babysitter_common::tls::generate::Leaf::for_host(
            "client",
            &[],
        )],
    )
    .unwrap();
    let read_as = |tls: babysitter_common::tls::ClientTlsConfig| {
        let mut c: RunServiceClient<AuthedChannel> = babysitter_common::client::client_tls(
            &format!("https://127.0.0.1:{port}"),
            Some(&babysitter_common::auth::Secret::new(token.trim())),
            &babysitter_common::client::ClientOptions::default(),
            &tls,
        )
        .unwrap();
        let run_id = run_id.clone();
        async move {
            c.get_run(pb::GetRunRequest {
                run_id,
                ..Default::default()
            })
            .await
        }
    };
    let untrusted = read_as(babysitter_common::tls::ClientTlsConfig {
        ca_file: Some(other.path().join("ca.crt")),
        ..tls.clone()
    })
    .await
    .unwrap_err();
    assert_eq!(untrusted.code(), tonic::Code::Unavailable, "{untrusted:?}");
    // A client with the CA and the token but no certificate, under mTLS:
    let uncertified = read_as(babysitter_common::tls::ClientTlsConfig {
        cert_file: None,
        key_file: None,
        ..tls.clone()
    })
    .await
    .unwrap_err();
    assert_eq!(
        uncertified.code(),
        tonic::Code::Unauthenticated,
        "{uncertified:?}"
    );
    assert!(
        uncertified.message().contains("client certificate"),
        "{uncertified:?}"
    );
    // A worker container with the worker token and the CA but no client certificate, on the
    // stack's network: refused, told why.
    let project = &env[0].1;
    let name = format!("{project}-uncertified-worker");
    let _rm = RemoveContainer(name.clone());
    let svc = secrets.path().join("svc");
    let version = std::env::var("BABYSITTER_VERSION").unwrap_or_else(|_| "0.1.0".into());
    let args: Vec<String> = [
        "run",
        "-d",
        "--name",
        &name,
        "--network",
        &format!("{project}_babysitter"),
        "--read-only",
        "--tmpfs",
        "/tmp:exec",
        "--tmpfs",
        "/data:uid=65532,gid=65532,mode=0700",
        "--tmpfs",
        "/home/nonroot:uid=65532,gid=65532,mode=0700",
        "-v",
        &format!(
            "{}:/run/secrets/worker.token:ro",
            svc.join("worker.token").display()
        ),
        "-v",
        &format!(
            "{}:/run/secrets/ca.crt:ro",
            svc.join("tls/ca.crt").display()
        ),
        "-e",
        "BABYSITTER_LAUNCHER__ORCHESTRATOR__URL=https://orchestrator:50052",
        "-e",
        "BABYSITTER_LAUNCHER__ORCHESTRATOR__TOKEN_FILE=/run/secrets/worker.token",
        "-e",
        "BABYSITTER_LAUNCHER__ORCHESTRATOR__TLS__CA_FILE=/run/secrets/ca.crt",
        "-e",
        "BABYSITTER_LAUNCHER__WORKER__WORK_DIR=/data/work",
        &format!("babysitter/harness-launcher:{version}"),
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let started = tokio::process::Command::new("docker")
        .args(&args)
        .output()
        .await
        .unwrap();
    assert!(
        started.status.success(),
        "docker run: {}",
        String::from_utf8_lossy(&started.stderr)
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    loop {
        let logs = tokio::process::Command::new("docker")
            .args(["logs", &name])
            .output()
            .await
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&logs.stdout),
            String::from_utf8_lossy(&logs.stderr)
        );
        if text.contains("client certificate is required") {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the uncertified worker was not refused for its certificate:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Still two workers: the refused one never registered.
    workers_become(&mut c, 2).await;
}

/// Removes a container started with `docker run` when dropped (also when the test fails).
struct RemoveContainer(String);

impl Drop for RemoveContainer {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker")
            .args(["rm", "-f", &self.0])
            .output();
    }
}
