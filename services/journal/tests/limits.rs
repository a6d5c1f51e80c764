//! Transport limits through a real `JournalService` on 127.0.0.1, built the way the `journal`
//! binary builds it: the `[server]` message sizes of its config are what the service enforces
//! (not a constant of its own), an over-limit request is answered with the project's error-kind
//! metadata, and a client made by `babysitter_proto::client` takes answers larger than tonic's
//! own 4 MiB client default.

use std::sync::Arc;

use babysitter_common::config::ConfigLoader;
use babysitter_common::error::{ERROR_KIND_KEY, ErrorKind, error_kind, retryable};
use babysitter_common::server::ServerBuilder;
use babysitter_journal::config::JournalServiceConfig;
use babysitter_journal::fs::FsStore;
use babysitter_journal::grpc::JournalGrpcServer;
use babysitter_journal::{Journal, JournalOptions};
use babysitter_proto::client::ClientOptions;
use babysitter_proto::journal::v1 as pb;
use babysitter_proto::journal::v1::journal_service_client::JournalServiceClient;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// A journal server on 127.0.0.1 with the journal binary's config plus `overrides`.
struct Server {
    url: String,
    stop: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start(overrides: &[&str]) -> Self {
        let config: JournalServiceConfig = ConfigLoader::new("BABYSITTER_JOURNAL_TEST")
            .overrides(overrides.iter().copied())
            .overrides(["server.listen-addr=127.0.0.1:0"])
            .load()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::new(
            Arc::new(FsStore::new(dir.path().join("runs"))),
            JournalOptions::default(),
        );
        let stop = CancellationToken::new();
        // As `journal`'s main does it: one `[server]` section for the builder and the service.
        let server = ServerBuilder::new("journal", &config.server).add_service(
            JournalGrpcServer::new(journal)
                .with_shutdown(stop.clone())
                .into_service(&config.server),
            babysitter_proto::FILE_DESCRIPTOR_SET,
        );
        let listener = tokio::net::TcpListener::bind(config.server.listen_addr)
            .await
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let token = stop.clone();
        let task = tokio::spawn(async move {
            server.serve_with_listener(listener, token).await.unwrap();
        });
        Self {
            url,
            stop,
            task: Some(task),
            _dir: dir,
        }
    }

    /// Stops the server and waits until it has drained.
    async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.await.unwrap();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // A failed assertion skips `stop()`; the server still goes down.
        self.stop.cancel();
    }
}

/// `len` bytes that no compressor shrinks much (xorshift), so sizes on the wire are real.
fn noise(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

async fn create_run(client: &mut JournalServiceClient<Channel>, run_id: &str) {
    let run_json = serde_json::json!({"runId": run_id, "processId": "p"});
    client
        .create_run(pb::CreateRunRequest {
            fence: None,
            run_id: run_id.into(),
            run_json: serde_json::to_vec(&run_json).unwrap().into(),
            inputs_json: None,
        })
        .await
        .unwrap();
}

fn put_blob(content: Vec<u8>) -> pb::PutBlobRequest {
    pb::PutBlobRequest {
        run_id: "r1".into(),
        content: content.into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_one_mib_request_limit_is_what_the_service_enforces() {
    let server = Server::start(&["server.max-decoding-message-size=1048576"]).await;
    let options = ClientOptions::default();
    let mut client: JournalServiceClient<Channel> = options.connect_lazy(&server.url).unwrap();
    create_run(&mut client, "r1").await;

    let half = noise(512 * KIB);
    let put = client
        .put_blob(put_blob(half.clone()))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(put.size, half.len() as u64);

    // 2 MiB: under the old fixed 64 MiB service limit, over the configured 1 MiB.
    let refused = client.put_blob(put_blob(noise(2 * MIB))).await.unwrap_err();
    assert_eq!(refused.code(), Code::OutOfRange, "{refused:?}");
    assert!(
        refused.message().contains("the limit is: 1048576 bytes"),
        "{refused:?}"
    );
    assert_eq!(
        refused
            .metadata()
            .get(ERROR_KIND_KEY)
            .and_then(|v| v.to_str().ok()),
        Some("invalid"),
        "over-limit answers carry the error kind like every other error"
    );
    assert_eq!(error_kind(&refused), Some(ErrorKind::InvalidArgument));
    assert!(!retryable(&refused));

    // Compressed on the wire, the limit still counts the decompressed message.
    let mut zstd: JournalServiceClient<Channel> = ClientOptions {
        send_compressed: Some(CompressionEncoding::Zstd),
        ..ClientOptions::default()
    }
    .connect_lazy(&server.url)
    .unwrap();
    let squeezed = zstd
        .put_blob(put_blob(vec![b'x'; 2 * MIB]))
        .await
        .unwrap_err();
    assert_eq!(squeezed.code(), Code::ResourceExhausted, "{squeezed:?}");
    assert_eq!(error_kind(&squeezed), Some(ErrorKind::InvalidArgument));
    assert!(!retryable(&squeezed));
    zstd.put_blob(put_blob(vec![b'y'; 512 * KIB]))
        .await
        .unwrap();

    // The refusals did not break the connection or the service.
    let got = client
        .get_blob(pb::GetBlobRequest {
            run_id: "r1".into(),
            blob_ref: put.blob_ref,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.content.len(), half.len());
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proto_client_receives_a_six_mib_answer() {
    // The default config: 64 MiB each way on the server.
    let server = Server::start(&[]).await;
    let options = ClientOptions::default();
    let mut client: JournalServiceClient<Channel> = options.connect_lazy(&server.url).unwrap();
    create_run(&mut client, "r1").await;
    let six = noise(6 * MIB);
    let put = client
        .put_blob(put_blob(six.clone()))
        .await
        .unwrap()
        .into_inner();
    let get = pb::GetBlobRequest {
        run_id: "r1".into(),
        blob_ref: put.blob_ref,
    };

    let got = client.get_blob(get.clone()).await.unwrap().into_inner();
    assert!(got.content == six, "the whole blob came back");

    // Compressed on the wire when the client asks for it.
    let mut zstd: JournalServiceClient<Channel> = ClientOptions {
        accept_compressed: vec![CompressionEncoding::Zstd, CompressionEncoding::Gzip],
        ..ClientOptions::default()
    }
    .connect_lazy(&server.url)
    .unwrap();
    let got = zstd.get_blob(get.clone()).await.unwrap();
    assert_eq!(
        got.metadata()
            .get("grpc-encoding")
            .and_then(|v| v.to_str().ok()),
        Some("zstd")
    );
    assert!(got.into_inner().content == six);

    // What a hand-built client gets: tonic's 4 MiB default refuses the same answer.
    let mut bare = JournalServiceClient::new(options.channel_lazy(&server.url).unwrap());
    let refused = bare.get_blob(get).await.unwrap_err();
    assert_eq!(refused.code(), Code::OutOfRange, "{refused:?}");
    server.stop().await;
}
