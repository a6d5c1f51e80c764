//! The orchestrator's port as a standby and as the active one (`service::leader::Seat` over
//! `babysitter_common::server::standby`), in one process: standing by with no holder known it
//! answers `UNAVAILABLE`; with one it forwards every call, unchanged, to it; active, it serves
//! locally only while its term is fresh, and a call still running when the term ends is
//! answered `UNAVAILABLE` (retryable) instead of hanging on a manager that is gone.

#[path = "support/service.rs"]
mod support;

use std::time::Duration;

use babysitter_common::auth::AuthConfig;
use babysitter_common::client::{AuthedChannel, ClientOptions};
use babysitter_common::error::{ErrorKind, error_kind, retryable};
use babysitter_common::server::ServerConfig;
use babysitter_journal::leadership::{Term, WriterTerm};
use babysitter_orchestrator::service::grpc::Services;
use babysitter_orchestrator::service::queue::QueueConfig;
use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use babysitter_proto::orchestrator::v1::worker_service_client::WorkerServiceClient;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const ECHO: &str = r#"
export async function process(inputs, ctx) {
  return { echoed: inputs.n };
}
"#;

fn unavailable(s: &tonic::Status, says: &str) {
    assert_eq!(s.code(), tonic::Code::Unavailable, "{s:?}");
    assert_eq!(error_kind(s), Some(ErrorKind::Unavailable), "{s:?}");
    assert!(retryable(s), "{s:?}");
    assert!(s.message().contains(says), "{s:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_forwards_and_an_active_port_serves_only_while_its_term_is_fresh() {
    // The active orchestrator elsewhere (a plain server), with a long poll wait.
    let queue = QueueConfig {
        max_poll_wait: Duration::from_secs(30),
        ..support::fast_queue()
    };
    let active = support::start(queue, AuthConfig::default()).await;

    // This port: switched services, standing by.
    let term = WriterTerm::new();
    let config = ServerConfig::default();
    let (server, seat) = Services::switched_server(&config, term.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let stop = CancellationToken::new();
    tokio::spawn(server.serve_with_listener(listener, stop.clone()));
    let mut c: RunServiceClient<AuthedChannel> =
        babysitter_common::client::client(&url, None, &ClientOptions::default()).unwrap();
    let list = pb::ListRunsRequest::default();

    let e = c
        .list_runs(list.clone())
        .await
        .expect_err("nobody to forward to");
    unavailable(&e, "no active instance is known");

    // Forwarding: a run created here is the active one's.
    seat.stand_by(Some(&active.url));
    let run_id = support::create(&mut c, "", ECHO, json!({"n": 7}))
        .await
        .run_id;
    let mut direct = support::client(&active, None);
    let got = direct
        .get_run(pb::GetRunRequest {
            run_id: run_id.clone(),
            ..Default::default()
        })
        .await
        .expect("the active one has it")
        .into_inner()
        .run
        .unwrap();
    assert_eq!(got.run_id, run_id);

    // Active, but the term is not fresh (never granted here): nothing is served locally.
    let ended = CancellationToken::new();
    seat.activate(
        Services::new(active.manager.clone(), stop.clone()),
        ended.clone(),
    );
    let e = c.list_runs(list.clone()).await.expect_err("no fresh term");
    unavailable(&e, "overdue for renewal");

    // A fresh term: served locally.
    let granted = Term {
        group: "orchestrator".into(),
        holder: "me".into(),
        address: url.clone(),
        epoch: 1,
        ttl: Duration::from_secs(60),
    };
    term.set(Some((granted, tokio::time::Instant::now())));
    let runs = c
        .list_runs(list.clone())
        .await
        .expect("served")
        .into_inner()
        .runs;
    assert!(runs.iter().any(|r| r.run_id == run_id));

    // A long poll is running when the term ends: it is answered, retryable.
    let mut w: WorkerServiceClient<AuthedChannel> =
        babysitter_common::client::client(&url, None, &ClientOptions::default()).unwrap();
    w.register_worker(pb::RegisterWorkerRequest {
        worker_id: "w".into(),
        capabilities: Some(cpb::WorkerCapabilities {
            task_kinds: vec!["nothing-queues-this".into()],
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .unwrap();
    let poll = tokio::spawn(async move {
        w.poll_tasks(pb::PollTasksRequest {
            worker_id: "w".into(),
            max_tasks: 1,
            wait: Some(prost_types::Duration {
                seconds: 30,
                nanos: 0,
            }),
        })
        .await
    });
    // The poll is in the server before the term ends (a guard, not a timing assertion: were it
    // not yet, it would be refused as "stands by" below, failing the assertion on the message).
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!poll.is_finished(), "nothing to hand out: the poll waits");
    seat.stand_by(None);
    ended.cancel();
    let e = poll.await.unwrap().expect_err("the term ended");
    unavailable(&e, "stepped down while handling the call");
    stop.cancel();
}
