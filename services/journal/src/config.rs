//! Journal configuration and the store URL → backend mapping.
//!
//! `store.url` picks the backend: `file:///path` (babysitter's run-directory layout),
//! `s3://bucket/prefix` (any S3-compatible store; endpoint, region and credentials from this
//! config or the standard `AWS_*` variables), `object+file:///path` (the object layout on a local
//! directory, through `object_store`'s LocalFileSystem) and `memory://` (in-memory, for
//! development only). Object stores are probed at open: one that ignores create-only writes is
//! refused.

use std::sync::Arc;
use std::time::Duration;

use babysitter_common::EnvMap;
use babysitter_common::server::ServerConfig;
use babysitter_common::telemetry::TelemetryConfig;
use object_store::aws::AmazonS3Builder;
use object_store::{BackoffConfig, ClientOptions, ObjectStore, RetryConfig};
use serde::{Deserialize, Serialize};

use crate::error::{JournalError, Result};
use crate::fs::{FsRuntime, FsStore};
use crate::journal::JournalOptions;
use crate::object::{ObjectJournal, probe_conditional_create};
use crate::store::JournalStore;

/// The whole configuration of the `journal` binary (env prefix `BABYSITTER_JOURNAL`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct JournalServiceConfig {
    /// Config format version. Since v0.1.
    pub version: u32,
    /// Listener, limits, auth. Since v0.1.
    pub server: ServerConfig,
    /// Log filter and format. Since v0.1.
    pub telemetry: TelemetryConfig,
    /// Where runs are stored. Since v0.1.
    pub store: StoreConfig,
    /// Journal limits. Since v0.1.
    pub limits: LimitsConfig,
}

impl Default for JournalServiceConfig {
    fn default() -> Self {
        Self {
            version: 1,
            server: ServerConfig::with_listen_addr(std::net::SocketAddr::from((
                [127, 0, 0, 1],
                50051,
            ))),
            telemetry: TelemetryConfig::default(),
            store: StoreConfig::default(),
            limits: LimitsConfig::default(),
        }
    }
}

/// Where and how runs are stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct StoreConfig {
    /// Store URL: `file:///abs/path`, `s3://bucket/prefix`, `object+file:///abs/path`, `memory://`.
    /// Since v0.1.
    pub url: String,
    /// S3 endpoint, e.g. `http://127.0.0.1:8333` (default: `AWS_ENDPOINT_URL`, else AWS).
    /// Since v0.1.
    pub endpoint: Option<String>,
    /// S3 region (default: `AWS_REGION`, `AWS_DEFAULT_REGION`, else `us-east-1`). Since v0.1.
    pub region: Option<String>,
    /// Access key id (default: `AWS_ACCESS_KEY_ID`). Since v0.1.
    pub access_key_id: Option<String>,
    /// Secret access key (default: `AWS_SECRET_ACCESS_KEY`). Never logged. Since v0.1.
    pub secret_access_key: Option<String>,
    /// Allow plain-http endpoints (default: true when the endpoint starts with `http://`).
    /// Since v0.1.
    pub allow_http: Option<bool>,
    /// Per-request timeout of object-store calls, in seconds. Since v0.1.
    pub request_timeout_secs: u64,
    /// Retries of a failed object-store request before giving up. Since v0.1.
    pub max_retries: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            url: "file://./.a5c/runs".into(),
            endpoint: None,
            region: None,
            access_key_id: None,
            secret_access_key: None,
            allow_http: None,
            request_timeout_secs: 30,
            max_retries: 3,
        }
    }
}

/// Limits and tunables of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct LimitsConfig {
    /// Largest event accepted, in bytes of its JSON form. Over gRPC an append is one message, so
    /// `server.max-decoding-message-size` (64 MiB by default) bounds a batch
    /// first. Since v0.1.
    pub max_event_bytes: usize,
    /// Most events in one append. Since v0.1.
    pub max_batch_events: usize,
    /// Event data larger than this goes to a content-addressed blob (object layout). Since v0.1.
    pub blob_threshold_bytes: usize,
    /// Automatic snapshot after this many events (0 = off). Since v0.1.
    pub snapshot_every: u64,
    /// How often watchers poll the store for other writers' events, in milliseconds. Since v0.1.
    pub watch_poll_interval_ms: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let o = JournalOptions::default();
        Self {
            max_event_bytes: o.max_event_bytes,
            max_batch_events: o.max_batch_events,
            blob_threshold_bytes: 1024 * 1024,
            snapshot_every: o.snapshot_every,
            watch_poll_interval_ms: o.watch_poll_interval.as_millis() as u64,
        }
    }
}

impl LimitsConfig {
    pub fn journal_options(&self) -> JournalOptions {
        JournalOptions {
            max_event_bytes: self.max_event_bytes,
            max_batch_events: self.max_batch_events,
            snapshot_every: self.snapshot_every,
            background_snapshots: true,
            watch_poll_interval: Duration::from_millis(self.watch_poll_interval_ms),
            redactor: None,
            ulids: None,
        }
    }
}

/// Opens the backend `cfg.url` names. `env` supplies the standard `AWS_*` variables. A
/// filesystem store gets a runtime of its own; a binary builds one first thing in `main` and
/// uses [`open_store_on`].
pub async fn open_store(
    cfg: &StoreConfig,
    limits: &LimitsConfig,
    env: &EnvMap,
) -> Result<Arc<dyn JournalStore>> {
    open(cfg, limits, env, None).await
}

/// [`open_store`], a filesystem store on `fs`: the runtime this process's filesystem stores
/// share (see [`FsRuntime`]).
pub async fn open_store_on(
    fs: &FsRuntime,
    cfg: &StoreConfig,
    limits: &LimitsConfig,
    env: &EnvMap,
) -> Result<Arc<dyn JournalStore>> {
    open(cfg, limits, env, Some(fs)).await
}

/// Environment variables of credential sources other than keys and the instance metadata
/// endpoint (web identity, ECS container credentials).
const AMBIENT_CREDENTIALS: [&str; 3] = [
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
];

async fn open(
    cfg: &StoreConfig,
    limits: &LimitsConfig,
    env: &EnvMap,
    fs: Option<&FsRuntime>,
) -> Result<Arc<dyn JournalStore>> {
    let url = cfg.url.trim();
    if let Some(path) = url.strip_prefix("file://") {
        return Ok(Arc::new(match fs {
            Some(fs) => FsStore::with_runtime(path, fs.clone()),
            None => FsStore::new(path),
        }));
    }
    if let Some(path) = url.strip_prefix("object+file://") {
        std::fs::create_dir_all(path).map_err(|e| JournalError::io(path, e))?;
        let local = object_store::local::LocalFileSystem::new_with_prefix(path).map_err(|e| {
            JournalError::UnsafeStore {
                reason: format!("cannot open {path}: {e}"),
            }
        })?;
        probe_conditional_create(&local, "").await?;
        // LocalFileSystem has no compare-and-swap on update: control documents take the
        // filesystem store's own (flock) path under the same directory.
        return Ok(Arc::new(
            ObjectJournal::new(Arc::new(local), "", url, limits.blob_threshold_bytes)
                .with_local_control(path),
        ));
    }
    if url == "memory://" || url == "memory:" {
        return object_journal(
            Arc::new(object_store::memory::InMemory::new()),
            "",
            url,
            limits,
        )
        .await;
    }
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(JournalError::invalid(
                "store.url",
                format!("`{url}` names no bucket"),
            ));
        }
        let pick = |v: &Option<String>, keys: &[&str]| -> Option<String> {
            v.clone().or_else(|| {
                keys.iter()
                    .find_map(|k| env.get_non_empty(k).map(str::to_owned))
            })
        };
        let endpoint = pick(
            &cfg.endpoint,
            &["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_ENDPOINT"],
        );
        let region = pick(&cfg.region, &["AWS_REGION", "AWS_DEFAULT_REGION"])
            .unwrap_or_else(|| "us-east-1".into());
        let mut b = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(region);
        let key = pick(&cfg.access_key_id, &["AWS_ACCESS_KEY_ID"]);
        let secret = pick(&cfg.secret_access_key, &["AWS_SECRET_ACCESS_KEY"]);
        let ambient = AMBIENT_CREDENTIALS
            .iter()
            .any(|k| env.get_non_empty(k).is_some());
        let asks_metadata = match (key, secret) {
            (Some(key), Some(secret)) => {
                b = b.with_access_key_id(key).with_secret_access_key(secret);
                false
            }
            (Some(_), None) => {
                return Err(JournalError::invalid(
                    "store.secret-access-key",
                    format!(
                        "{url}: an access key id is set but no secret access key: set store.secret-access-key or AWS_SECRET_ACCESS_KEY"
                    ),
                ));
            }
            (None, Some(_)) => {
                return Err(JournalError::invalid(
                    "store.access-key-id",
                    format!(
                        "{url}: a secret access key is set but no access key id: set store.access-key-id or AWS_ACCESS_KEY_ID"
                    ),
                ));
            }
            // A store other than AWS has no instance role to ask for credentials.
            (None, None) if endpoint.is_some() && !ambient => {
                return Err(JournalError::invalid(
                    "store.access-key-id",
                    format!(
                        "{url} at {}: no S3 credentials: set store.access-key-id and store.secret-access-key, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY",
                        endpoint.as_deref().unwrap_or_default()
                    ),
                ));
            }
            (None, None) => !ambient,
        };
        if let Some(token) = env.get_non_empty("AWS_SESSION_TOKEN") {
            b = b.with_token(token);
        }
        // Client options first: `with_client_options` replaces them whole, allow-http included.
        let timeout = Duration::from_secs(cfg.request_timeout_secs.max(1));
        b = b
            .with_client_options(
                ClientOptions::new()
                    .with_timeout(timeout)
                    .with_connect_timeout(Duration::from_secs(5)),
            )
            .with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: cfg.max_retries,
                retry_timeout: timeout,
            });
        if let Some(ep) = &endpoint {
            let env_allow = env
                .get_non_empty("AWS_ALLOW_HTTP")
                .map(|v| v.eq_ignore_ascii_case("true"));
            b = b.with_endpoint(ep).with_allow_http(
                cfg.allow_http
                    .or(env_allow)
                    .unwrap_or(ep.starts_with("http://")),
            );
        }
        let s3 = b.build().map_err(|e| JournalError::UnsafeStore {
            reason: format!("cannot configure {url}: {e}"),
        })?;
        let described = match &endpoint {
            Some(ep) => format!("{url} at {ep}"),
            None => url.to_owned(),
        };
        return object_journal(Arc::new(s3), prefix, &described, limits)
            .await
            .map_err(|e| {
                if asks_metadata {
                    JournalError::UnsafeStore {
                        reason: format!(
                            "{e} (no S3 credentials are configured, so they were asked of the EC2 instance metadata endpoint: set store.access-key-id and store.secret-access-key, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run with an instance or web-identity role)"
                        ),
                    }
                } else {
                    e
                }
            });
    }
    Err(JournalError::invalid(
        "store.url",
        format!(
            "`{url}`: expected file:///path, s3://bucket/prefix, object+file:///path or memory://"
        ),
    ))
}

/// Wraps an object store as a journal backend after proving it honours create-only writes.
pub async fn object_journal(
    store: Arc<dyn ObjectStore>,
    prefix: &str,
    description: &str,
    limits: &LimitsConfig,
) -> Result<Arc<dyn JournalStore>> {
    probe_conditional_create(store.as_ref(), prefix).await?;
    Ok(Arc::new(ObjectJournal::new(
        store,
        prefix,
        description,
        limits.blob_threshold_bytes,
    )))
}

impl babysitter_common::main_support::HealthPort for JournalServiceConfig {
    fn health_port(&self) -> Option<&babysitter_common::server::ServerConfig> {
        Some(&self.server)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn refused(url: &str, env: &[(&str, &str)]) -> String {
        let mut e = EnvMap::new();
        for (k, v) in env {
            e = e.with(*k, *v);
        }
        let cfg = StoreConfig {
            url: url.into(),
            ..StoreConfig::default()
        };
        match open(&cfg, &LimitsConfig::default(), &e, None).await {
            Ok(_) => panic!("{url} with {env:?} opened"),
            Err(e) => e.to_string(),
        }
    }

    #[tokio::test]
    async fn missing_s3_credentials_are_named_not_blamed_on_the_metadata_endpoint() {
        let endpoint = ("AWS_ENDPOINT_URL", "http://127.0.0.1:9");
        let none = refused("s3://b/p", &[endpoint]).await;
        assert!(none.contains("no S3 credentials"), "{none}");
        assert!(none.contains("AWS_ACCESS_KEY_ID"), "{none}");
        assert!(!none.to_lowercase().contains("metadata"), "{none}");
        let half = refused("s3://b/p", &[endpoint, ("AWS_ACCESS_KEY_ID", "AKIA")]).await;
        assert!(half.contains("no secret access key"), "{half}");
        assert!(!half.contains("AKIA"), "the key id is not echoed: {half}");
        let other = refused("s3://b/p", &[endpoint, ("AWS_SECRET_ACCESS_KEY", "s3cret")]).await;
        assert!(other.contains("no access key id"), "{other}");
        assert!(
            !other.contains("s3cret"),
            "the secret is not echoed: {other}"
        );
    }
}
