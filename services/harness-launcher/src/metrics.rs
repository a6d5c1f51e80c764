//! The worker's Prometheus metrics (served by `babysitter_common::metrics`): tasks by kind,
//! harness and outcome, their durations, and the tasks running now. `harness` is `none` for a
//! task that is not an agent task.

use std::sync::LazyLock;
use std::time::Duration;

use babysitter_common::metrics::{self, Counter, Family, Gauge, Histogram};

type TaskLabels = [(&'static str, String); 2];

struct Static {
    tasks: Family<[(&'static str, String); 3], Counter>,
    task_seconds: Family<TaskLabels, Histogram>,
    running: Gauge,
}

static METRICS: LazyLock<Static> = LazyLock::new(|| {
    let m = Static {
        tasks: Family::default(),
        task_seconds: Family::new_with_constructor(metrics::duration_histogram),
        running: Gauge::default(),
    };
    metrics::register(
        "launcher_tasks",
        "Tasks this worker finished, by kind, harness and outcome (succeeded, failed, cancelled, lease_lost)",
        m.tasks.clone(),
    );
    metrics::register(
        "launcher_task_seconds",
        "Time a task ran on this worker, by kind and harness",
        m.task_seconds.clone(),
    );
    metrics::register(
        "launcher_running_tasks",
        "Tasks running on this worker now",
        m.running.clone(),
    );
    m
});

/// A task started.
pub(crate) fn started() {
    METRICS.running.inc();
}

/// A task that [`started`] ended with `outcome` after `took`.
pub(crate) fn finished(kind: &str, harness: Option<&str>, outcome: &'static str, took: Duration) {
    METRICS.running.dec();
    let harness = harness.unwrap_or("none").to_owned();
    METRICS
        .tasks
        .get_or_create(&[
            ("kind", kind.to_owned()),
            ("harness", harness.clone()),
            ("outcome", outcome.to_owned()),
        ])
        .inc();
    METRICS
        .task_seconds
        .get_or_create(&[("kind", kind.to_owned()), ("harness", harness)])
        .observe(took.as_secs_f64());
}
