//! What the metrics cost on the hot path: the updates one dispatched task makes (a labelled
//! counter and a labelled histogram, as the queue does at a lease grant), timed per update, and
//! one scrape's rendering with a populated registry. Prints its figures
//! (`cargo bench -p babysitter-common --bench metrics`).

#![allow(clippy::print_stdout)]

use tokio::time::Instant;

use babysitter_common::metrics::{self, Counter, Family, Histogram};

type Labels = [(&'static str, String); 2];

fn main() {
    let granted: Family<Labels, Counter> = Family::default();
    let latency: Family<Labels, Histogram> =
        Family::new_with_constructor(metrics::latency_histogram);
    metrics::register("bench_granted", "bench", granted.clone());
    metrics::register("bench_latency_seconds", "bench", latency.clone());
    let kinds = ["shell", "agent", "node", "breakpoint"];
    let namespaces = ["default", "team-a", "team-b"];
    let n = 2_000_000u32;
    for round in 0..3 {
        let started = Instant::now();
        for i in 0..n {
            let labels = [
                ("kind", kinds[i as usize % kinds.len()].to_owned()),
                (
                    "namespace",
                    namespaces[i as usize % namespaces.len()].to_owned(),
                ),
            ];
            granted.get_or_create(&labels).inc();
            latency
                .get_or_create(&labels)
                .observe(f64::from(i % 1000) / 1e4);
        }
        let per = started.elapsed().as_nanos() as f64 / f64::from(n);
        println!(
            "round {round}: one lease grant's metrics (counter + histogram, 2 labels): {per:.0} ns"
        );
    }
    let started = Instant::now();
    let mut bytes = 0;
    for _ in 0..100 {
        bytes = metrics::render().len();
    }
    println!(
        "one scrape rendered ({bytes} bytes): {:.1} µs",
        started.elapsed().as_secs_f64() * 1e6 / 100.0
    );
}
