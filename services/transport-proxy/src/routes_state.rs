//! Durable route changes: the route table the control API changed, kept in
//! `routes-state-file` and reloaded at start.
//!
//! Why durable, and why opt-in: an operator who re-routes traffic through the control API
//! (an upstream outage, a model switch) expects the change to survive a restart or a crash; a
//! change that silently reverts is worse than none. Yet the proxy is also run stateless — many
//! replicas from one config (Helm values), or in-process by the harness launcher for one task
//! — where the config file is the source of truth and per-replica files would let replicas
//! drift apart. So changes are persisted only when the file is configured, and then the file is
//! the source of truth: at start its routes and revision replace `[[routes]]` (logged), until
//! it is deleted.
//!
//! How: the whole table is written on every change to a temporary file in the same directory,
//! flushed to disk, renamed over the file and the directory flushed, so a crash leaves either
//! the old or the new table, never a torn one. The change is installed only after the write
//! succeeded (the control API answers `Unavailable` otherwise). The file holds where each key
//! comes from (env var name or key file), never a key. Timeouts are kept in milliseconds.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{ConfigError, Policy, Route, UpstreamFile, check_route_name};
use crate::protocol::Protocol;

const VERSION: u32 = 1;

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct StateFile {
    version: u32,
    /// The control API's routes revision after the last change.
    revision: u64,
    routes: Vec<StoredRoute>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct StoredRoute {
    name: String,
    front: Option<Protocol>,
    models: Vec<String>,
    priority: i32,
    upstream: UpstreamFile,
    policy: StoredPolicy,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct StoredPolicy {
    connect_timeout_ms: u64,
    first_byte_timeout_ms: u64,
    idle_timeout_ms: u64,
    max_retries: u32,
    retry_backoff_ms: u64,
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl From<&Route> for StoredRoute {
    fn from(r: &Route) -> Self {
        let p = &r.policy;
        Self {
            name: r.name.clone(),
            front: r.front,
            models: r.models.clone(),
            priority: r.priority,
            upstream: UpstreamFile::from(&r.upstream),
            policy: StoredPolicy {
                connect_timeout_ms: ms(p.connect_timeout),
                first_byte_timeout_ms: ms(p.first_byte_timeout),
                idle_timeout_ms: ms(p.idle_timeout),
                max_retries: p.max_retries,
                retry_backoff_ms: ms(p.retry_backoff),
            },
        }
    }
}

/// The saved revision and routes (keys read through `env`); `None` when the file does not
/// exist yet.
pub fn load(
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<(u64, Vec<Route>)>, ConfigError> {
    let bad = |message: String| ConfigError::RoutesState {
        path: path.to_owned(),
        message,
    };
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(bad(format!("unreadable: {e}"))),
    };
    let file: StateFile = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if file.version != VERSION {
        return Err(bad(format!("unsupported version {}", file.version)));
    }
    let mut routes = Vec::with_capacity(file.routes.len());
    for r in file.routes {
        check_route_name(&r.name)?;
        let p = &r.policy;
        routes.push(Route {
            upstream: r.upstream.resolve(&r.name, env)?,
            policy: Policy {
                connect_timeout: Duration::from_millis(p.connect_timeout_ms),
                first_byte_timeout: Duration::from_millis(p.first_byte_timeout_ms),
                idle_timeout: Duration::from_millis(p.idle_timeout_ms),
                max_retries: p.max_retries,
                retry_backoff: Duration::from_millis(p.retry_backoff_ms),
            },
            name: r.name,
            front: r.front,
            models: r.models,
            priority: r.priority,
        });
    }
    Ok(Some((file.revision, routes)))
}

/// Replaces the file with `routes` at `revision`, atomically and durably (blocking IO: call
/// it off the async runtime's worker threads).
pub fn save<'a>(
    path: &Path,
    revision: u64,
    routes: impl Iterator<Item = &'a Route>,
) -> std::io::Result<()> {
    let with_path =
        |e: std::io::Error| std::io::Error::new(e.kind(), format!("{}: {e}", path.display()));
    let file = StateFile {
        version: VERSION,
        revision,
        routes: routes.map(StoredRoute::from).collect(),
    };
    let mut text = serde_json::to_vec_pretty(&file).map_err(std::io::Error::other)?;
    text.push(b'\n');
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .map_or_else(|| "routes".into(), |n| n.to_string_lossy().into_owned());
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(&dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        with_path(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Provider, Upstream};

    #[test]
    fn saved_routes_load_back_equal_without_keys_in_the_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = dir.path().join("routes.json");
        assert!(matches!(load(&path, &|_| None), Ok(None)), "no file yet");
        let mut up = Upstream::new(Provider::AzureOpenai, "https://example.openai.azure.com");
        up.api_key_env = Some("AZ_KEY".into());
        up.api_key = Some(crate::config::Secret::new("sk-secret"));
        up.azure_api_version = Some("2025-04-01-preview".into());
        up.extra_headers = vec![("x-team".into(), "a".into())];
        let mut route = Route::new("r-1", up);
        route.front = Some(Protocol::Anthropic);
        route.models = vec!["claude-*".into()];
        route.policy.connect_timeout = Duration::from_millis(1500);
        save(&path, 7, [&route].into_iter()).unwrap_or_else(|e| panic!("{e}"));
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(!text.contains("sk-secret"), "{text}");
        let env = |k: &str| (k == "AZ_KEY").then(|| "sk-secret".to_owned());
        let (revision, routes) = load(&path, &env)
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_default();
        assert_eq!(revision, 7);
        let back = &routes[0];
        assert_eq!(format!("{back:?}"), format!("{route:?}"));
        assert_eq!(back.upstream.api_key, route.upstream.api_key);
        let leftovers = std::fs::read_dir(dir.path()).map(Iterator::count).ok();
        assert_eq!(leftovers, Some(1), "no temporary file left");
        std::fs::write(&path, "{").unwrap_or_else(|e| panic!("{e}"));
        assert!(matches!(
            load(&path, &env),
            Err(ConfigError::RoutesState { .. })
        ));
    }
}
