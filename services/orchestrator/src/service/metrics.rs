//! The orchestrator's Prometheus metrics (served by `babysitter_common::metrics`).
//!
//! Counters and the dispatch histogram are updated where the event happens (the queue grants,
//! expires or gives a lease up; a run ends). Queue depth, live runs by state and live workers
//! are read from the live queues and run tables at scrape time ([`Live`]): a view computed when
//! asked cannot drift from the state it describes. A process may hold several queues (a
//! standby that became active builds a new one per term; tests run many): each registers a
//! weak reference, and a dropped one stops counting.
//!
//! Labels are bounded: task kind and namespace, run state, outcome. Never a run or effect id.

use std::collections::BTreeMap;
use std::sync::{LazyLock, Mutex, Weak};
use std::time::Duration;

use babysitter_common::metrics::{
    self, Collector, ConstGauge, Counter, DescriptorEncoder, EncodeMetric, Family, Histogram,
};

type KindLabels = [(&'static str, String); 2];

fn kind_labels(kind: &str, namespace: &str) -> KindLabels {
    [
        ("kind", kind.to_owned()),
        ("namespace", namespace.to_owned()),
    ]
}

struct Static {
    leases_granted: Family<KindLabels, Counter>,
    leases_expired: Family<KindLabels, Counter>,
    tasks_given_up: Family<KindLabels, Counter>,
    dispatch_latency: Family<KindLabels, Histogram>,
    runs_finished: Family<[(&'static str, String); 1], Counter>,
    budget_exceeded: Family<[(&'static str, &'static str); 1], Counter>,
    budget_warnings: Family<[(&'static str, &'static str); 1], Counter>,
}

static METRICS: LazyLock<Static> = LazyLock::new(|| {
    let m = Static {
        leases_granted: Family::default(),
        leases_expired: Family::default(),
        tasks_given_up: Family::default(),
        dispatch_latency: Family::new_with_constructor(metrics::latency_histogram),
        runs_finished: Family::default(),
        budget_exceeded: Family::default(),
        budget_warnings: Family::default(),
    };
    metrics::register(
        "orchestrator_leases_granted",
        "Task leases granted to workers",
        m.leases_granted.clone(),
    );
    metrics::register(
        "orchestrator_leases_expired",
        "Task leases that expired unrenewed (the task went back to the queue or gave up)",
        m.leases_expired.clone(),
    );
    metrics::register(
        "orchestrator_tasks_given_up",
        "Tasks failed because their attempts ran out",
        m.tasks_given_up.clone(),
    );
    metrics::register(
        "orchestrator_dispatch_latency_seconds",
        "Time from a task being ready to its lease being granted",
        m.dispatch_latency.clone(),
    );
    metrics::register(
        "orchestrator_runs_finished",
        "Runs that reached a terminal state, by status",
        m.runs_finished.clone(),
    );
    metrics::register(
        "orchestrator_budget_exceeded",
        "Runs stopped because they crossed a budget limit, by limit",
        m.budget_exceeded.clone(),
    );
    metrics::register(
        "orchestrator_budget_warnings",
        "Budget limits a run passed the warning fraction of, by limit",
        m.budget_warnings.clone(),
    );
    metrics::register_collector(LiveCollector);
    m
});

/// A lease was granted `waited` after its task became ready.
pub(crate) fn lease_granted(kind: &str, namespace: &str, waited: Duration) {
    let labels = kind_labels(kind, namespace);
    METRICS.leases_granted.get_or_create(&labels).inc();
    METRICS
        .dispatch_latency
        .get_or_create(&labels)
        .observe(waited.as_secs_f64());
}

pub(crate) fn lease_expired(kind: &str, namespace: &str) {
    METRICS
        .leases_expired
        .get_or_create(&kind_labels(kind, namespace))
        .inc();
}

pub(crate) fn task_given_up(kind: &str, namespace: &str) {
    METRICS
        .tasks_given_up
        .get_or_create(&kind_labels(kind, namespace))
        .inc();
}

/// A run ended with `status` (`completed`, `failed`, `cancelled`, `halted`).
pub(crate) fn run_finished(status: &str) {
    METRICS
        .runs_finished
        .get_or_create(&[("status", status.to_owned())])
        .inc();
}

/// A run crossed its `limit` and was stopped.
pub(crate) fn budget_exceeded(limit: &'static str) {
    METRICS
        .budget_exceeded
        .get_or_create(&[("limit", limit)])
        .inc();
}

/// A run passed the warning fraction of its `limit`.
pub(crate) fn budget_warning(limit: &'static str) {
    METRICS
        .budget_warnings
        .get_or_create(&[("limit", limit)])
        .inc();
}

/// Live state a scrape reads: what a queue or run table reports of itself.
pub(crate) trait Live: Send + Sync {
    /// Adds this source's figures to `into`.
    fn report(&self, into: &mut Snapshot);
}

/// The live figures of one scrape.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// Tasks by (kind, namespace, state `queued` | `leased`).
    pub tasks: BTreeMap<(String, String, &'static str), i64>,
    /// Live runs by state.
    pub runs: BTreeMap<&'static str, i64>,
    /// Workers seen within two lease durations.
    pub workers: i64,
}

static SOURCES: Mutex<Vec<Weak<dyn Live>>> = Mutex::new(Vec::new());

/// Counts `source` in every scrape while it lives.
pub(crate) fn track(source: Weak<dyn Live>) {
    LazyLock::force(&METRICS);
    let mut sources = SOURCES.lock().unwrap_or_else(|p| p.into_inner());
    sources.retain(|s| s.strong_count() > 0);
    sources.push(source);
}

#[derive(Debug)]
struct LiveCollector;

impl Collector for LiveCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let live: Vec<_> = SOURCES
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let mut snap = Snapshot::default();
        for source in live {
            source.report(&mut snap);
        }
        let g = ConstGauge::new(0i64);
        let mut family = encoder.encode_descriptor(
            "orchestrator_queue_tasks",
            "Tasks in the queue by kind, namespace and state (queued: waiting for a worker)",
            None,
            g.metric_type(),
        )?;
        for ((kind, namespace, state), n) in &snap.tasks {
            let labels = [
                ("kind", kind.as_str()),
                ("namespace", namespace.as_str()),
                ("state", state),
            ];
            ConstGauge::new(*n).encode(family.encode_family(&labels)?)?;
        }
        let mut family = encoder.encode_descriptor(
            "orchestrator_runs",
            "Live runs by state",
            None,
            g.metric_type(),
        )?;
        for (state, n) in &snap.runs {
            ConstGauge::new(*n).encode(family.encode_family(&[("state", *state)])?)?;
        }
        let workers = encoder.encode_descriptor(
            "orchestrator_workers",
            "Workers seen within two lease durations",
            None,
            g.metric_type(),
        )?;
        ConstGauge::new(snap.workers).encode(workers)?;
        Ok(())
    }
}
