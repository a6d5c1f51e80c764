//! Smoke tests of the SeaweedFS fixtures: the server they start enforces create-only writes,
//! resolves concurrent creates to one winner, and checks signatures — the properties the journal's
//! object-store backend relies on. Each runs against the process fixture, and against the
//! container fixture when `BABYSITTER_IT_DOCKER=1` (otherwise the container tests are skipped,
//! see `babysitter_tests::skip`).

use std::sync::Arc;

use babysitter_tests::{S3Target, SeaweedContainer, SeaweedFs, test_prefix};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

/// Fixture and object_store logs (weed start, retries) in the test's captured output.
fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_test_writer()
        .try_init();
}

fn create() -> PutOptions {
    PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    }
}

/// A second create-only PUT on one key is `AlreadyExists` and leaves the first content.
async fn create_twice(store: Arc<dyn ObjectStore>) -> anyhow::Result<()> {
    let key = Path::from("journal/000001.evt");
    store
        .put_opts(&key, PutPayload::from_static(b"first"), create())
        .await?;
    let second = store
        .put_opts(&key, PutPayload::from_static(b"second"), create())
        .await;
    assert!(
        matches!(second, Err(object_store::Error::AlreadyExists { .. })),
        "second create must be AlreadyExists, got {second:?}"
    );
    let body = store.get(&key).await?.bytes().await?;
    assert_eq!(&body[..], b"first", "content changed by a rejected create");
    Ok(())
}

/// 16 concurrent create-only PUTs of one key: exactly one wins, 15 get `AlreadyExists`, and the
/// stored content is the winner's.
///
/// SeaweedFS 4.48 serialises conditional writes on one key with a lock it retries once a
/// second: losers of a race are answered with 412 after 0, 1, 2, … s, so this takes from a few
/// milliseconds up to ~7 s depending on how the requests interleave.
async fn concurrent_creates(store: Arc<dyn ObjectStore>) -> anyhow::Result<()> {
    let key = Path::from("race/head");
    let tasks: Vec<_> = (0..16)
        .map(|i| {
            let store = Arc::clone(&store);
            let key = key.clone();
            tokio::spawn(async move {
                let payload = PutPayload::from(format!("writer-{i}").into_bytes());
                (i, store.put_opts(&key, payload, create()).await)
            })
        })
        .collect();
    let started = tokio::time::Instant::now();
    let mut winners = Vec::new();
    let mut losers = 0;
    for task in tasks {
        let (i, result) = task.await?;
        match result {
            Ok(_) => winners.push(i),
            Err(object_store::Error::AlreadyExists { .. }) => losers += 1,
            Err(e) => anyhow::bail!("writer {i}: unexpected error {e}"),
        }
    }
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "16 creates done"
    );
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    assert_eq!(losers, 15);
    let body = store.get(&key).await?.bytes().await?;
    assert_eq!(body, format!("writer-{}", winners[0]).into_bytes());
    Ok(())
}

/// A wrong secret is refused (SeaweedFS verifies signatures) and writes nothing.
async fn wrong_secret(target: &S3Target) -> anyhow::Result<()> {
    let prefix = test_prefix("auth");
    let bad = target
        .with_secret_key("not-the-secret")
        .object_store(&prefix)?;
    let key = Path::from("x");
    let result = bad.put(&key, PutPayload::from_static(b"x")).await;
    let err = match result {
        Ok(_) => anyhow::bail!("a PUT signed with a wrong secret succeeded"),
        Err(e) => e.to_string(),
    };
    assert!(
        err.contains("403") || err.contains("SignatureDoesNotMatch") || err.contains("denied"),
        "unexpected error for a wrong secret: {err}"
    );
    let good = target.object_store(&prefix)?;
    assert!(
        matches!(
            good.head(&key).await,
            Err(object_store::Error::NotFound { .. })
        ),
        "the refused PUT left an object behind"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_create_only_put_twice() -> anyhow::Result<()> {
    init_tracing();
    let weed = SeaweedFs::start().await?;
    create_twice(weed.object_store(&test_prefix("create-twice"))?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_concurrent_creates_one_winner() -> anyhow::Result<()> {
    init_tracing();
    let weed = SeaweedFs::start().await?;
    concurrent_creates(weed.object_store(&test_prefix("race"))?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_wrong_secret_is_refused() -> anyhow::Result<()> {
    init_tracing();
    let weed = SeaweedFs::start().await?;
    wrong_secret(weed.s3()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_prefixes_isolate_tests() -> anyhow::Result<()> {
    init_tracing();
    let weed = SeaweedFs::start().await?;
    let a = weed.object_store(&test_prefix("iso"))?;
    let b = weed.object_store(&test_prefix("iso"))?;
    a.put(&Path::from("k"), PutPayload::from_static(b"a"))
        .await?;
    assert!(matches!(
        b.head(&Path::from("k")).await,
        Err(object_store::Error::NotFound { .. })
    ));
    // The same server, seen through the whole bucket, holds the key under a's prefix.
    let whole = weed.object_store("")?;
    let listed: Vec<_> = futures::TryStreamExt::try_collect::<Vec<_>>(whole.list(None)).await?;
    assert!(listed.iter().any(|m| m.location.as_ref().ends_with("/k")));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_create_only_put_twice() -> anyhow::Result<()> {
    init_tracing();
    let Some(weed) = SeaweedContainer::start().await? else {
        return Ok(()); // skipped: start() recorded why
    };
    create_twice(weed.object_store(&test_prefix("create-twice"))?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_concurrent_creates_one_winner() -> anyhow::Result<()> {
    init_tracing();
    let Some(weed) = SeaweedContainer::start().await? else {
        return Ok(()); // skipped: start() recorded why
    };
    concurrent_creates(weed.object_store(&test_prefix("race"))?).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn container_wrong_secret_is_refused() -> anyhow::Result<()> {
    init_tracing();
    let Some(weed) = SeaweedContainer::start().await? else {
        return Ok(()); // skipped: start() recorded why
    };
    wrong_secret(weed.s3()).await
}
