//! Requests a client gets wrong are said to be wrong (issue 25 item 8), instead of being answered
//! as something else: a page token this server never issued, and an idempotency key reused for
//! a different request.

#[path = "support/service.rs"]
mod service_support;

use babysitter_common::auth::AuthConfig;
use babysitter_proto::orchestrator::v1 as pb;
use serde_json::json;
use tonic::Code;

use service_support::*;

const WAIT: &str = r#"
export async function process(inputs, ctx) {
  return await ctx.breakpoint({ question: 'go?' }, { label: 'gate' });
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_page_token_this_server_never_issued_is_refused() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let first = create(&mut c, "", WAIT, json!({})).await;
    let second = create(&mut c, "", WAIT, json!({})).await;
    let list = |page_token: &str| pb::ListRunsRequest {
        page_size: 1,
        page_token: page_token.into(),
        ..Default::default()
    };
    // Paging with what the server issued walks both runs, newest first.
    let page = c.list_runs(list("")).await.expect("page 1").into_inner();
    assert_eq!(page.runs[0].run_id, second.run_id);
    let next = page.next_page_token;
    let page = c.list_runs(list(&next)).await.expect("page 2").into_inner();
    assert_eq!(page.runs[0].run_id, first.run_id);

    for garbage in ["zzz/../x", "a/b", "..", "not a token"] {
        let e = c
            .list_runs(list(garbage))
            .await
            .expect_err("a garbage token is refused");
        assert_eq!(e.code(), Code::InvalidArgument, "{garbage}: {e:?}");
        assert!(e.message().contains("page_token"), "{}", e.message());
    }
    let e = c
        .list_breakpoints(pb::ListBreakpointsRequest {
            page_token: first.run_id.clone(),
            ..Default::default()
        })
        .await
        .expect_err("a breakpoint token is run/effect");
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_idempotency_key_reused_for_another_request_is_refused_naming_the_difference() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let request = |inputs: serde_json::Value, src: &str| pb::CreateRunRequest {
        process: Some(pb::ProcessBundle::single_file(
            "main.mjs",
            src.as_bytes().to_vec(),
        )),
        inputs_json: Some(serde_json::to_vec(&inputs).expect("json").into()),
        idempotency_key: "deploy-42".into(),
        ..Default::default()
    };
    let run = c
        .create_run(request(json!({"n": 1}), WAIT))
        .await
        .expect("created")
        .into_inner()
        .run
        .expect("a run");
    let again = c
        .create_run(request(json!({"n": 1}), WAIT))
        .await
        .expect("the same request again")
        .into_inner()
        .run
        .expect("a run");
    assert_eq!(
        again.run_id, run.run_id,
        "the same request gets the same run"
    );

    let e = c
        .create_run(request(json!({"n": 2}), WAIT))
        .await
        .expect_err("other inputs under the same key");
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    assert!(e.message().contains("deploy-42"), "{}", e.message());
    assert!(e.message().contains("inputs"), "{}", e.message());
    assert!(!e.message().contains("process"), "{}", e.message());

    let other = WAIT.replace("go?", "really go?");
    let e = c
        .create_run(request(json!({"n": 1}), &other))
        .await
        .expect_err("another process under the same key");
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    assert!(e.message().contains("process"), "{}", e.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lowercase_copy_of_a_ulid_run_id_is_the_same_run() {
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    let id = "01JTESTRN00000000000000000";
    let request = |run_id: &str| pb::CreateRunRequest {
        process: Some(pb::ProcessBundle::single_file(
            "main.mjs",
            WAIT.as_bytes().to_vec(),
        )),
        run_id: run_id.into(),
        ..Default::default()
    };
    let run = c
        .create_run(request(&id.to_lowercase()))
        .await
        .expect("created")
        .into_inner()
        .run
        .expect("a run");
    assert_eq!(run.run_id, id, "a ULID is kept in its canonical spelling");
    let e = c
        .create_run(request(id))
        .await
        .expect_err("the same id in another case is the same run");
    assert_eq!(e.code(), Code::AlreadyExists, "{e:?}");
    // An id that is not a ULID is kept as given.
    let named = c
        .create_run(request("nightly-build"))
        .await
        .expect("created")
        .into_inner()
        .run
        .expect("a run");
    assert_eq!(named.run_id, "nightly-build");
}

const BIG: &str = r#"
export async function process(inputs) {
  return { big: 'x'.repeat(inputs.n) };
}
"#;

/// A client with tonic's own defaults (4 MiB per message received), as a user's would be.
async fn default_client(
    s: &Service,
) -> pb::run_service_client::RunServiceClient<tonic::transport::Channel> {
    pb::run_service_client::RunServiceClient::connect(s.url.clone())
        .await
        .expect("connect")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn large_outputs_travel_by_reference_so_runs_stay_readable_and_listable() {
    use sha2::Digest as _;
    let s = start(fast_queue(), AuthConfig::default()).await;
    let mut c = client(&s, None);
    // Four 6 MB outputs: each alone over a default client's 4 MiB, together over any page.
    let n = 6_000_000;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(create(&mut c, "", BIG, json!({ "n": n })).await.run_id);
    }
    let mut plain = default_client(&s).await;
    for id in &ids {
        let run = loop {
            let r = plain
                .get_run(pb::GetRunRequest {
                    run_id: id.clone(),
                    ..Default::default()
                })
                .await
                .expect("GetRun of a run with a large output")
                .into_inner()
                .run
                .unwrap();
            if r.status == pb::RunStatus::Completed as i32 {
                break r;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        };
        assert!(run.output_json.is_empty(), "a 6 MB output is not inline");
        let mut stream = plain
            .read_run_output(pb::ReadRunOutputRequest {
                namespace: String::new(),
                run_id: id.clone(),
            })
            .await
            .expect("ReadRunOutput")
            .into_inner();
        let mut bytes = Vec::new();
        while let Some(part) = stream.message().await.expect("a chunk") {
            assert!(part.chunk.len() <= 1024 * 1024);
            bytes.extend_from_slice(&part.chunk);
        }
        assert_eq!(run.output_size_bytes, bytes.len() as u64);
        assert_eq!(run.output_sha256, hex::encode(sha2::Sha256::digest(&bytes)));
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["big"].as_str().map(str::len), Some(n));
    }
    let listed = plain
        .list_runs(pb::ListRunsRequest::default())
        .await
        .expect("the default page lists runs with large outputs")
        .into_inner()
        .runs;
    assert_eq!(listed.len(), 4);
    assert!(
        listed
            .iter()
            .all(|r| r.output_json.is_empty() && r.output_size_bytes > 0)
    );

    // A small output still comes inline, with its digest.
    let small = create(&mut c, "", BIG, json!({ "n": 3 })).await.run_id;
    let (_, last) = watch_all(&mut c, "", &small).await;
    assert_eq!(
        serde_json::from_slice::<serde_json::Value>(&last.output_json).unwrap(),
        json!({"big": "xxx"})
    );
    assert_eq!(
        last.output_sha256,
        hex::encode(sha2::Sha256::digest(&last.output_json))
    );
}
