//! The journal's Prometheus metrics (served by `babysitter_common::metrics`): append latency
//! and appended events by backend, store failures by backend and operation. The backend label
//! is the store's kind (`file`, `s3`, `object+file`, `memory`, `remote`), never its path.

use std::sync::LazyLock;
use std::time::Duration;

use babysitter_common::metrics::{self, Counter, Family, Histogram};

type Backend = [(&'static str, &'static str); 1];

struct Static {
    append_seconds: Family<Backend, Histogram>,
    appended_events: Family<Backend, Counter>,
    store_errors: Family<[(&'static str, &'static str); 2], Counter>,
}

static METRICS: LazyLock<Static> = LazyLock::new(|| {
    let m = Static {
        append_seconds: Family::new_with_constructor(metrics::latency_histogram),
        appended_events: Family::default(),
        store_errors: Family::default(),
    };
    metrics::register(
        "journal_append_seconds",
        "Time to commit one append batch (sealing, index, store write)",
        m.append_seconds.clone(),
    );
    metrics::register(
        "journal_appended_events",
        "Events committed",
        m.appended_events.clone(),
    );
    metrics::register(
        "journal_store_errors",
        "Store failures (i/o, object store, remote journal) by backend and operation",
        m.store_errors.clone(),
    );
    m
});

/// The backend label of a store described as `description` (`Journal::store().describe()`).
pub(crate) fn backend_of(description: &str) -> &'static str {
    if description.starts_with("journal service") {
        return "remote";
    }
    match description.split_once("://").map(|(scheme, _)| scheme) {
        Some("file") => "file",
        Some("s3") => "s3",
        Some("object+file") => "object+file",
        Some("memory") => "memory",
        _ => "other",
    }
}

pub(crate) fn appended(backend: &'static str, events: usize, took: Duration) {
    let labels = [("backend", backend)];
    METRICS
        .append_seconds
        .get_or_create(&labels)
        .observe(took.as_secs_f64());
    METRICS
        .appended_events
        .get_or_create(&labels)
        .inc_by(events as u64);
}

/// Counts `error` when it is a store failure of `op` (`append`, `read`).
pub(crate) fn failed(backend: &'static str, op: &'static str, error: &crate::JournalError) {
    if error.is_store_failure() {
        METRICS
            .store_errors
            .get_or_create(&[("backend", backend), ("op", op)])
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::backend_of;

    #[test]
    fn backends_are_kinds_not_paths() {
        assert_eq!(backend_of("file:///var/lib/runs"), "file");
        assert_eq!(backend_of("s3://bucket/prefix"), "s3");
        assert_eq!(
            backend_of("journal service at http://127.0.0.1:1"),
            "remote"
        );
        assert_eq!(backend_of("something else"), "other");
    }
}
