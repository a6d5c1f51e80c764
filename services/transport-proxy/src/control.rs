//! The control core: list, upsert and delete routes, read per-route stats.
//!
//! Why compare-and-set on a revision: several operators (or a launcher and an operator) may
//! change routes at once; an update made against a stale view must fail rather than silently
//! undo another's change. The table is replaced as a whole, so requests in flight finish on the
//! route they began with. With `routes-state-file` configured every change is written there
//! before it is installed ([`crate::routes_state`]); the methods then block on file IO, so
//! async callers run them with `spawn_blocking`. The gRPC adapter ([`crate::grpc`]) only
//! converts and maps errors.

use std::sync::Arc;

use crate::config::Route;
use crate::forward::Proxy;
use crate::metrics::RouteStats;

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    #[error("invalid route: {0}")]
    Invalid(String),
    #[error("no route named {0}")]
    NotFound(String),
    #[error("routes are at revision {actual}, not the expected {expected}")]
    Conflict { expected: u64, actual: u64 },
    #[error("cannot build the route's http client: {0}")]
    Client(#[from] reqwest::Error),
    /// The routes state file could not be written; the change was not applied.
    #[error("cannot persist the routes: {0}")]
    Persist(#[from] std::io::Error),
}

fn check_revision(expected: u64, actual: u64) -> Result<(), ControlError> {
    if expected != 0 && expected != actual {
        return Err(ControlError::Conflict { expected, actual });
    }
    Ok(())
}

impl Proxy {
    /// Every route, in selection order, with the current revision.
    pub fn list_routes(&self) -> (Vec<Route>, u64) {
        let t = self.table();
        (
            t.routes.iter().map(|r| r.route.clone()).collect(),
            t.revision,
        )
    }

    /// Creates or replaces the route named `route.name` (a new route goes last, so it loses
    /// priority ties to older ones). `expected_revision` 0 = unconditional. Returns the new
    /// revision and whether the route was created.
    pub fn upsert_route(
        &self,
        route: Route,
        expected_revision: u64,
    ) -> Result<(u64, bool), ControlError> {
        if route.name.is_empty()
            || !route
                .name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        {
            return Err(ControlError::Invalid("name must match [a-z0-9-]+".into()));
        }
        if url::Url::parse(&route.upstream.base_url).is_err() {
            return Err(ControlError::Invalid(format!(
                "invalid upstream base url {}",
                route.upstream.base_url
            )));
        }
        let runtime = Arc::new(self.runtime(route)?);
        let mut created = false;
        let revision = self.replace_table(|t| {
            check_revision(expected_revision, t.revision - 1)?;
            match t
                .routes
                .iter()
                .position(|r| r.route.name == runtime.route.name)
            {
                Some(i) => t.routes[i] = runtime.clone(),
                None => {
                    created = true;
                    t.routes.push(runtime.clone());
                }
            }
            Ok::<(), ControlError>(())
        })?;
        tracing::info!(route = %runtime.route.name, revision, created, "route upserted");
        Ok((revision, created))
    }

    /// Deletes the route `name`; returns the new revision.
    pub fn delete_route(&self, name: &str, expected_revision: u64) -> Result<u64, ControlError> {
        let revision = self.replace_table(|t| {
            check_revision(expected_revision, t.revision - 1)?;
            let before = t.routes.len();
            t.routes.retain(|r| r.route.name != name);
            if t.routes.len() == before {
                return Err(ControlError::NotFound(name.to_owned()));
            }
            Ok(())
        })?;
        tracing::info!(route = %name, revision, "route deleted");
        Ok(revision)
    }

    /// Stats of the named routes (every route ever configured when `names` is empty).
    pub fn route_stats(
        &self,
        names: &[String],
    ) -> Result<Vec<(String, Arc<RouteStats>)>, ControlError> {
        let all = self.stats_by_name();
        if names.is_empty() {
            return Ok(all);
        }
        names
            .iter()
            .map(|n| {
                all.iter()
                    .find(|(name, _)| name == n)
                    .cloned()
                    .ok_or_else(|| ControlError::NotFound(n.clone()))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Provider, ProxyConfig, Upstream};

    fn route(name: &str, model: &str) -> Route {
        let mut up = Upstream::new(Provider::Openai, "http://127.0.0.1:9/v1");
        up.model = Some(model.into());
        Route::new(name, up)
    }

    #[test]
    fn upsert_and_delete_are_compare_and_set_on_the_revision() {
        let proxy = Proxy::new(ProxyConfig::with_routes(vec![route("a", "m1")]))
            .unwrap_or_else(|e| panic!("{e}"));
        let (routes, rev) = proxy.list_routes();
        assert_eq!((routes.len(), rev), (1, 1));
        assert_eq!(
            proxy.upsert_route(route("b", "m2"), 1).ok(),
            Some((2, true))
        );
        assert!(matches!(
            proxy.upsert_route(route("b", "m3"), 1),
            Err(ControlError::Conflict {
                expected: 1,
                actual: 2
            })
        ));
        assert_eq!(
            proxy.upsert_route(route("b", "m3"), 0).ok(),
            Some((3, false))
        );
        let (routes, _) = proxy.list_routes();
        assert_eq!(routes[1].upstream.model.as_deref(), Some("m3"));
        assert!(matches!(
            proxy.upsert_route(route("Bad", "m"), 0),
            Err(ControlError::Invalid(_))
        ));
        assert!(matches!(
            proxy.delete_route("zz", 0),
            Err(ControlError::NotFound(_))
        ));
        assert_eq!(proxy.delete_route("a", 3).ok(), Some(4));
        assert_eq!(proxy.list_routes().0.len(), 1);
        assert_eq!(
            proxy.route_stats(&[]).map(|s| s.len()).ok(),
            Some(2),
            "stats kept by name"
        );
    }
}
