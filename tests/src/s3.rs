//! Where an S3-compatible test server is and how to talk to it.

use std::sync::Arc;
use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ClientOptions, ObjectStore, ObjectStoreExt, PutPayload, RetryConfig};
use tokio::time::Instant;

use crate::{ACCESS_KEY, BUCKET, REGION, SECRET_KEY};

/// Endpoint, bucket and credentials of a running S3-compatible server, plus constructors for
/// `object_store` clients against it. Both SeaweedFS fixtures hand one out; it is `Clone` and
/// `Send`, so a test can pass it to a conformance suite or a spawned service.
#[derive(Clone, Debug)]
pub struct S3Target {
    endpoint: String,
    bucket: String,
    access_key: String,
    secret_key: String,
    region: String,
}

impl S3Target {
    /// A target with the fixtures' bucket and credentials at `http://127.0.0.1:{port}`.
    pub fn loopback(port: u16) -> Self {
        Self::new(
            format!("http://127.0.0.1:{port}"),
            BUCKET,
            ACCESS_KEY,
            SECRET_KEY,
            REGION,
        )
    }

    /// A target from its parts.
    pub fn new(
        endpoint: impl Into<String>,
        bucket: impl Into<String>,
        access_key: impl Into<String>,
        secret_key: impl Into<String>,
        region: impl Into<String>,
    ) -> Self {
        Self {
            endpoint: endpoint.into(),
            bucket: bucket.into(),
            access_key: access_key.into(),
            secret_key: secret_key.into(),
            region: region.into(),
        }
    }

    /// The same server with another secret key: for tests that signatures are enforced.
    pub fn with_secret_key(&self, secret_key: impl Into<String>) -> Self {
        Self {
            secret_key: secret_key.into(),
            ..self.clone()
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The bucket, `journal`.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The access key id.
    pub fn access_key(&self) -> &str {
        &self.access_key
    }

    /// The secret access key.
    pub fn secret_key(&self) -> &str {
        &self.secret_key
    }

    /// The signing region, `us-east-1`.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// `s3://{bucket}/{prefix}` (`s3://{bucket}` for an empty prefix): the store URL a journal
    /// binary takes, together with [`S3Target::env_vars`] for endpoint and credentials.
    pub fn s3_url(&self, prefix: &str) -> String {
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{prefix}", self.bucket)
        }
    }

    /// The standard AWS variables `object_store` reads (`AmazonS3Builder::from_env`), for
    /// starting a service process against this server.
    pub fn env_vars(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ENDPOINT", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".to_owned()),
            ("AWS_REGION", self.region.clone()),
            ("AWS_ACCESS_KEY_ID", self.access_key.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret_key.clone()),
            ("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false".to_owned()),
        ]
    }

    /// A builder with endpoint, bucket, region, credentials, plain http, path-style requests and
    /// a test-sized retry policy (3 retries within 20 s, so a broken server fails a test quickly
    /// instead of after object_store's default 3 minutes). Adjust it before `build()`.
    pub fn builder(&self) -> AmazonS3Builder {
        AmazonS3Builder::new()
            .with_endpoint(&self.endpoint)
            .with_bucket_name(&self.bucket)
            .with_region(&self.region)
            .with_access_key_id(&self.access_key)
            .with_secret_access_key(&self.secret_key)
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .with_retry(RetryConfig {
                max_retries: 3,
                retry_timeout: Duration::from_secs(20),
                ..RetryConfig::default()
            })
    }

    /// The S3 store over the whole bucket.
    pub fn s3_store(&self) -> anyhow::Result<Arc<AmazonS3>> {
        let store = self
            .builder()
            .build()
            .map_err(|e| anyhow::anyhow!("building the S3 client for {}: {e}", self.endpoint))?;
        Ok(Arc::new(store))
    }

    /// An S3 store confined to `prefix` (a [`PrefixStore`]): keys the test uses are relative to
    /// it, so tests sharing a bucket never see each other's objects. Pair with
    /// [`crate::test_prefix`].
    pub fn object_store(&self, prefix: &str) -> anyhow::Result<Arc<dyn ObjectStore>> {
        let store = self.s3_store()?;
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            return Ok(store);
        }
        Ok(Arc::new(PrefixStore::new(store, prefix)))
    }

    /// One signed PUT with no retries and short timeouts: the readiness probe.
    pub(crate) fn probe_store(&self) -> anyhow::Result<AmazonS3> {
        self.builder()
            .with_retry(RetryConfig {
                max_retries: 0,
                retry_timeout: Duration::from_secs(2),
                ..RetryConfig::default()
            })
            .with_client_options(
                ClientOptions::new()
                    .with_allow_http(true)
                    .with_connect_timeout(Duration::from_secs(1))
                    .with_timeout(Duration::from_secs(3)),
            )
            .build()
            .map_err(|e| anyhow::anyhow!("building the S3 probe client for {}: {e}", self.endpoint))
    }
}

/// Why a readiness wait stopped without success.
pub(crate) enum NotReady {
    /// The server reported a port already taken: retry on fresh ports.
    PortClash,
    /// The server process or container is gone; the string says how it ended.
    Exited(String),
    /// The deadline passed; the last probe error.
    Timeout(String),
    /// The probe itself could not run (client construction, liveness check).
    Failed(anyhow::Error),
}

/// What a readiness wait asks the fixture between probes.
pub(crate) enum Liveness {
    Alive,
    PortClash,
    Exited(String),
}

/// Retries a real signed PUT (`.probe/<ulid>` at the bucket root) until it succeeds, the
/// server dies, reports a port clash, or `timeout` passes.
pub(crate) async fn wait_ready<F, Fut>(
    target: &S3Target,
    timeout: Duration,
    mut alive: F,
) -> Result<Duration, NotReady>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Liveness>>,
{
    let started = Instant::now();
    let deadline = started + timeout;
    let store = target.probe_store().map_err(NotReady::Failed)?;
    let key = Path::from(format!(".probe/{}", ulid::Ulid::generate()));
    loop {
        match alive().await.map_err(NotReady::Failed)? {
            Liveness::Alive => {}
            Liveness::PortClash => return Err(NotReady::PortClash),
            Liveness::Exited(how) => return Err(NotReady::Exited(how)),
        }
        let error = match store.put(&key, PutPayload::from_static(b"probe")).await {
            Ok(_) => return Ok(started.elapsed()),
            Err(e) => e.to_string(),
        };
        if Instant::now() >= deadline {
            return Err(NotReady::Timeout(error));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_env() {
        let t = S3Target::loopback(1234);
        assert_eq!(t.endpoint(), "http://127.0.0.1:1234");
        assert_eq!(t.s3_url(""), "s3://journal");
        assert_eq!(t.s3_url("/a/b/"), "s3://journal/a/b");
        assert!(
            t.env_vars()
                .contains(&("AWS_SECRET_ACCESS_KEY", "testsecret".to_owned()))
        );
        assert_eq!(t.with_secret_key("x").secret_key(), "x");
        t.object_store("p").unwrap();
    }
}
