//! The journal's conformance suite and concurrency race against a real SeaweedFS: as a native
//! process (always), and in the FROM-scratch container through testcontainers (when
//! `BABYSITTER_IT_DOCKER=1`).

use std::sync::Arc;

use babysitter_journal::config::{LimitsConfig, object_journal};
use babysitter_journal::object::ObjectJournal;
use babysitter_journal::store::JournalStore;
use babysitter_journal::testsuite::{self, Factory};
use babysitter_tests::{S3Target, SeaweedContainer, SeaweedFs, test_prefix};

fn factory(s3: &S3Target, name: &str) -> Factory {
    let store = s3.object_store(&test_prefix(name)).expect("s3 store");
    let described = s3.s3_url(name);
    Arc::new(move || {
        Arc::new(ObjectJournal::new(
            store.clone(),
            "",
            described.clone(),
            1024 * 1024,
        )) as Arc<dyn JournalStore>
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_on_seaweedfs_process() {
    let weed = SeaweedFs::start().await.expect("seaweedfs");
    let store = weed.object_store(&test_prefix("probe")).unwrap();
    object_journal(store, "", "seaweedfs", &LimitsConfig::default())
        .await
        .expect("SeaweedFS honours create-only writes");
    testsuite::run_all(factory(weed.s3(), "suite")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_writers_1000_appends_on_seaweedfs() {
    let weed = SeaweedFs::start().await.expect("seaweedfs");
    testsuite::concurrent_writers(factory(weed.s3(), "race"), 8, 1000).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn suite_on_seaweedfs_container() {
    let Some(c) = SeaweedContainer::start().await.expect("container start") else {
        return; // skipped: start() recorded why
    };
    testsuite::run_all(factory(c.s3(), "suite-container")).await;
    testsuite::concurrent_writers(factory(c.s3(), "race-container"), 8, 200).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn journal_binary_on_seaweedfs_via_aws_env() {
    use std::io::{BufRead, BufReader};
    let weed = SeaweedFs::start().await.expect("seaweedfs");
    let prefix = test_prefix("bin");
    // The workspace's `journal` binary sits next to this test's `deps/` directory.
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(|d| d.parent())
        .unwrap()
        .join("journal");
    assert!(
        bin.is_file(),
        "build the journal binary first (cargo build -p babysitter-journal): {}",
        bin.display()
    );
    let mut cmd = std::process::Command::new(bin);
    cmd.args(["--store", &weed.s3_url(&prefix), "--listen", "127.0.0.1:0"]);
    for (k, v) in weed.s3().env_vars() {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stderr(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut log = String::new();
    let addr = loop {
        let Some(Ok(line)) = lines.next() else {
            let _ = child.kill();
            panic!("journal exited: {log}");
        };
        log.push_str(&line);
        if let Some(a) = line.strip_prefix("journal listening on ") {
            break a.trim().to_owned();
        }
    };
    let mut client =
        babysitter_proto::journal::v1::journal_service_client::JournalServiceClient::connect(
            format!("http://{addr}"),
        )
        .await
        .unwrap();
    use babysitter_proto::journal::v1 as pb;
    client
        .create_run(pb::CreateRunRequest {
            fence: None,
            run_id: "r".into(),
            run_json: b"{\"runId\":\"r\"}".to_vec().into(),
            inputs_json: None,
        })
        .await
        .unwrap();
    let ev = pb::NewEvent {
        r#type: "RUN_CREATED".into(),
        recorded_at: String::new(),
        data_json: b"{}".to_vec().into(),
        sdk_version: None,
        ulid: None,
    };
    let r = client
        .append(pb::AppendRequest {
            fence: None,
            run_id: "r".into(),
            expected_next_seq: 1,
            events: vec![ev.clone(), ev],
        })
        .await
        .unwrap();
    assert_eq!(r.into_inner().head.unwrap().seq, 2);
    let _ = child.kill();
    let _ = child.wait();
    // The batch landed in SeaweedFS as one object under the configured prefix.
    use futures::TryStreamExt;
    let raw = weed.object_store(&prefix).unwrap();
    let keys: Vec<_> = raw
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    assert!(
        keys.iter()
            .any(|k| k == "runs/r/journal/00000000000000000001.json"),
        "{keys:?}"
    );
}
