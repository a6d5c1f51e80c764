//! Is the store there? The one check both the journal service and the orchestrator use: for
//! readiness while serving (health `NOT_SERVING` during an outage, via the server builder's
//! [`Probe`]) and before saying "ready" at start.
//!
//! Listing at most one run answers for every backend (filesystem, object store, a remote
//! journal service, which lists from its own store), reads nothing big, and needs no run.

use std::sync::Arc;
use std::time::Duration;

use babysitter_common::server::Probe;

use crate::store::JournalStore;

/// How often a serving process checks its store.
pub const PROBE_EVERY: Duration = Duration::from_secs(2);

/// One check: `Err` says what failed.
pub async fn check(store: &dyn JournalStore) -> Result<(), String> {
    store
        .list_runs("", None, 1)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The server builder's probe over `store`; `what` names it in the logs (`store`, `journal`).
pub fn probe(store: Arc<dyn JournalStore>, what: &'static str) -> Probe {
    Probe {
        what,
        every: PROBE_EVERY,
        check: Arc::new(move || {
            let store = store.clone();
            Box::pin(async move { check(store.as_ref()).await })
        }),
    }
}

/// Waits until `store` answers, retrying with backoff for up to `within`, logging each miss;
/// the last error after that.
pub async fn wait_reachable(
    store: &dyn JournalStore,
    what: &str,
    within: Duration,
) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + within;
    let mut backoff = Duration::from_millis(100);
    loop {
        let e = match check(store).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        if tokio::time::Instant::now() + backoff > deadline {
            return Err(format!(
                "{what} {} is not reachable after {within:?}: {e}",
                store.describe()
            ));
        }
        tracing::warn!(%what, error = %e, "not reachable yet; retrying");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(Duration::from_secs(2));
    }
}
