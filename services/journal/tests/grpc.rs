//! JournalService through real tonic servers on 127.0.0.1: in-process with the shared server
//! builder, and the `journal` binary as its own OS process.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;

use babysitter_common::server::{ServerBuilder, ServerConfig};
use babysitter_journal::fs::FsStore;
use babysitter_journal::grpc::{HEAD_SEQ_KEY, JournalGrpcServer};
use babysitter_journal::{Journal, JournalOptions};
use babysitter_proto::client::ClientOptions;
use babysitter_proto::journal::v1 as pb;
use babysitter_proto::journal::v1::journal_service_client::JournalServiceClient;
use futures::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::transport::Channel;

async fn in_process(
    root: &std::path::Path,
) -> (
    JournalServiceClient<Channel>,
    CancellationToken,
    tokio::task::JoinHandle<()>,
) {
    let journal = Journal::new(Arc::new(FsStore::new(root)), JournalOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let config = ServerConfig::default();
    let server = ServerBuilder::new("journal", &config).add_service(
        JournalGrpcServer::new(journal)
            .with_shutdown(shutdown.clone())
            .into_service(&config),
        babysitter_proto::FILE_DESCRIPTOR_SET,
    );
    let token = shutdown.clone();
    let handle =
        tokio::spawn(async move { server.serve_with_listener(listener, token).await.unwrap() });
    let client = ClientOptions::default()
        .connect_lazy(&format!("http://{addr}"))
        .unwrap();
    (client, shutdown, handle)
}

fn new_event(ty: &str, data: serde_json::Value) -> pb::NewEvent {
    pb::NewEvent {
        r#type: ty.into(),
        recorded_at: String::new(),
        data_json: serde_json::to_vec(&data).unwrap().into(),
        sdk_version: Some("6.0.0".into()),
        ulid: None,
    }
}

async fn exercise(client: &mut JournalServiceClient<Channel>) {
    let run_json =
        serde_json::to_vec(&serde_json::json!({"runId": "r1", "processId": "p"})).unwrap();
    client
        .create_run(pb::CreateRunRequest {
            fence: None,
            run_id: "r1".into(),
            run_json: run_json.clone().into(),
            inputs_json: None,
        })
        .await
        .unwrap();
    let dup = client
        .create_run(pb::CreateRunRequest {
            fence: None,
            run_id: "r1".into(),
            run_json: run_json.into(),
            inputs_json: None,
        })
        .await
        .unwrap_err();
    assert_eq!(dup.code(), Code::AlreadyExists);

    let mut watch = client
        .watch(pb::WatchRequest {
            run_id: "r1".into(),
            from_seq: 1,
        })
        .await
        .unwrap()
        .into_inner();

    let events: Vec<_> = (0..300)
        .map(|i| new_event("STEP", serde_json::json!({"i": i})))
        .collect();
    let r = client
        .append(pb::AppendRequest {
            fence: None,
            run_id: "r1".into(),
            expected_next_seq: 1,
            events,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.head.unwrap().seq, 300);

    let conflict = client
        .append(pb::AppendRequest {
            fence: None,
            run_id: "r1".into(),
            expected_next_seq: 7,
            events: vec![new_event("X", serde_json::json!({}))],
        })
        .await
        .unwrap_err();
    assert_eq!(conflict.code(), Code::FailedPrecondition);
    assert_eq!(
        conflict
            .metadata()
            .get(HEAD_SEQ_KEY)
            .unwrap()
            .to_str()
            .unwrap(),
        "300"
    );
    assert!(babysitter_common::error::retryable(&conflict));

    let bad = client
        .append(pb::AppendRequest {
            fence: None,
            run_id: "../etc".into(),
            expected_next_seq: 1,
            events: vec![new_event("X", serde_json::json!({}))],
        })
        .await
        .unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().contains("run id"), "{}", bad.message());
    let bad_json = client
        .append(pb::AppendRequest {
            fence: None,
            run_id: "r1".into(),
            expected_next_seq: 301,
            events: vec![pb::NewEvent {
                r#type: "X".into(),
                recorded_at: String::new(),
                data_json: b"{nope".to_vec().into(),
                sdk_version: None,
                ulid: None,
            }],
        })
        .await
        .unwrap_err();
    assert_eq!(bad_json.code(), Code::InvalidArgument);
    assert!(
        bad_json.message().contains("events[0].data_json"),
        "{}",
        bad_json.message()
    );

    // Read streams in chunks; every event arrives once, in order, checksummed.
    let mut read = client
        .read(pb::ReadRequest {
            run_id: "r1".into(),
            from_seq: 0,
            to_seq: 0,
        })
        .await
        .unwrap()
        .into_inner();
    let mut seqs = Vec::new();
    let mut messages = 0;
    while let Some(msg) = read.next().await {
        messages += 1;
        seqs.extend(msg.unwrap().events.into_iter().map(|e| e.seq));
    }
    assert_eq!(seqs, (1..=300).collect::<Vec<_>>());
    assert!(messages >= 2, "chunked over several messages");

    let mut watched = Vec::new();
    while watched.len() < 300 {
        let msg = watch.next().await.unwrap().unwrap();
        watched.extend(msg.events.into_iter().map(|e| e.seq));
    }
    assert_eq!(watched, (1..=300).collect::<Vec<_>>());

    let head = client
        .get_head(pb::GetHeadRequest {
            run_id: "r1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(head.head.unwrap().seq, 300);
    let state = client
        .get_state(pb::GetStateRequest {
            run_id: "r1".into(),
        })
        .await
        .unwrap()
        .into_inner();
    let doc: serde_json::Value = serde_json::from_slice(&state.state_json).unwrap();
    assert_eq!(doc["stateVersion"], 300);
    let missing = client
        .get_head(pb::GetHeadRequest {
            run_id: "nope".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(missing.code(), Code::NotFound);
    let runs = client
        .list_runs(pb::ListRunsRequest {
            prefix: String::new(),
            page_size: 0,
            page_token: String::new(),
        })
        .await
        .unwrap();
    assert_eq!(runs.into_inner().run_ids, vec!["r1".to_owned()]);
    let blob = client
        .put_blob(pb::PutBlobRequest {
            run_id: "r1".into(),
            content: b"hello".to_vec().into(),
        })
        .await
        .unwrap()
        .into_inner();
    let got = client
        .get_blob(pb::GetBlobRequest {
            run_id: "r1".into(),
            blob_ref: blob.blob_ref,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(&got.content[..], b"hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_service_over_tonic_in_process() {
    let dir = tempfile::tempdir().unwrap();
    let (mut client, shutdown, handle) = in_process(&dir.path().join("runs")).await;
    exercise(&mut client).await;
    // An open watch ends when the server shuts down, and the server finishes draining.
    let mut watch = client
        .watch(pb::WatchRequest {
            run_id: "r1".into(),
            from_seq: 301,
        })
        .await
        .unwrap()
        .into_inner();
    shutdown.cancel();
    let ended = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        while watch.next().await.is_some() {}
    })
    .await;
    assert!(
        ended.is_ok(),
        "the watch stream ends on shutdown instead of holding up the drain"
    );
    handle.await.unwrap();
}

/// The `journal` binary, stopped by its PID on drop.
struct JournalProcess(Child);

impl Drop for JournalProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_journal(args: &[&str]) -> (JournalProcess, Option<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_journal"))
        .args(args)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut addr = None;
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if let Some(a) = line.strip_prefix("journal listening on ") {
            addr = Some(a.trim().to_owned());
            break;
        }
    }
    if addr.is_none() {
        let _ = child.wait();
        return (JournalProcess(child), Some(seen));
    }
    std::thread::spawn(move || for _ in lines {});
    (JournalProcess(child), addr.map(|a| format!("ADDR:{a}")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_binary_serves_health_and_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}", dir.path().join("runs").display());
    let (_proc, out) = spawn_journal(&["--store", &url, "--listen", "127.0.0.1:0"]);
    let out = out.unwrap();
    let addr = out
        .strip_prefix("ADDR:")
        .unwrap_or_else(|| panic!("journal did not start: {out}"));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let h = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        h.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
    exercise(&mut ClientOptions::default().client(channel)).await;
    // Written in babysitter's layout.
    let files = std::fs::read_dir(dir.path().join("runs/r1/journal"))
        .unwrap()
        .count();
    assert_eq!(files, 300);
}

#[test]
fn journal_binary_exits_with_a_clear_message_when_the_store_is_unreachable() {
    let (mut proc, out) = spawn_journal(&[
        "--store",
        "s3://journal/x",
        "--set",
        "store.endpoint=\"http://127.0.0.1:9\"",
        "--set",
        "store.max-retries=0",
        "--set",
        "store.access-key-id=\"k\"",
        "--set",
        "store.secret-access-key=\"s3cr3t-value\"",
        "--listen",
        "127.0.0.1:0",
    ]);
    let out = out.unwrap();
    assert!(
        !out.starts_with("ADDR:"),
        "must not serve on an unreachable store"
    );
    assert!(out.contains("cannot use store s3://journal/x"), "{out}");
    assert!(
        !out.contains("s3cr3t-value"),
        "secrets never reach errors: {out}"
    );
    let status = proc.0.wait().unwrap();
    assert!(!status.success());
}

#[test]
fn journal_binary_rejects_unknown_config_keys() {
    let (mut proc, out) = spawn_journal(&["--set", "store.nonsense=1"]);
    let out = out.unwrap();
    assert!(out.contains("nonsense"), "{out}");
    assert!(!proc.0.wait().unwrap().success());
}
