//! Per-route counters and latency histograms, rendered for Prometheus (`GET /metrics`) and as
//! the reference's JSON summary (`GET /metrics` with `accept: application/json`, spec §2.1).
//!
//! Why plain atomics: the hot path only increments a handful of counters per request, the set of
//! routes is fixed when the proxy starts, and rendering is rare, so a metrics registry crate would
//! add dependencies without buying anything (spec T33: accounting stays off the hot path).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::canonical::Usage;

/// Upper bounds of the latency buckets, seconds.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

#[derive(Debug, Default)]
pub struct RouteStats {
    pub requests: AtomicU64,
    pub streaming_requests: AtomicU64,
    pub errors: AtomicU64,
    pub retries: AtomicU64,
    pub input_tokens: AtomicU64,
    pub output_tokens: AtomicU64,
    pub cache_read_tokens: AtomicU64,
    pub cache_write_tokens: AtomicU64,
    buckets: [AtomicU64; BUCKETS.len()],
    latency_micros_sum: AtomicU64,
    latency_count: AtomicU64,
    first_byte: [AtomicU64; BUCKETS.len()],
    first_byte_micros_sum: AtomicU64,
    first_byte_count: AtomicU64,
    errors_by_class: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>,
}

impl RouteStats {
    /// Records a failed request of error class `class` (with the usage it still reported).
    pub fn fail(&self, class: &'static str, usage: &Usage, elapsed: std::time::Duration) {
        if let Ok(mut m) = self.errors_by_class.lock() {
            *m.entry(class).or_default() += 1;
        }
        self.finish(usage, true, elapsed);
    }

    /// Errors by class so far.
    pub fn errors_by_class(&self) -> Vec<(&'static str, u64)> {
        self.errors_by_class
            .lock()
            .map(|m| m.iter().map(|(k, v)| (*k, *v)).collect())
            .unwrap_or_default()
    }

    /// Records the time to the upstream's first response byte of a streaming request.
    pub fn first_byte(&self, elapsed: std::time::Duration) {
        observe(
            &self.first_byte,
            &self.first_byte_micros_sum,
            &self.first_byte_count,
            elapsed,
        );
    }

    /// Records one finished request: its usage (canonical quantities, cache counted once), whether
    /// it failed, and its duration.
    pub fn finish(&self, usage: &Usage, failed: bool, elapsed: std::time::Duration) {
        let add = |c: &AtomicU64, v: Option<u64>| {
            c.fetch_add(v.unwrap_or(0), Ordering::Relaxed);
        };
        add(&self.input_tokens, usage.input);
        add(&self.output_tokens, usage.output);
        add(&self.cache_read_tokens, usage.cache_read);
        add(&self.cache_write_tokens, usage.cache_write);
        if failed {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        observe(
            &self.buckets,
            &self.latency_micros_sum,
            &self.latency_count,
            elapsed,
        );
    }
}

fn observe(
    buckets: &[AtomicU64; BUCKETS.len()],
    sum: &AtomicU64,
    count: &AtomicU64,
    elapsed: std::time::Duration,
) {
    let secs = elapsed.as_secs_f64();
    for (b, le) in buckets.iter().zip(BUCKETS) {
        if secs <= le {
            b.fetch_add(1, Ordering::Relaxed);
        }
    }
    sum.fetch_add(
        u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
        Ordering::Relaxed,
    );
    count.fetch_add(1, Ordering::Relaxed);
}

impl RouteStats {
    /// `(le_seconds, cumulative count)` per bucket, the total count and the sum in seconds.
    pub fn histogram(&self) -> (Vec<(f64, u64)>, u64, f64) {
        snapshot(&self.buckets, &self.latency_micros_sum, &self.latency_count)
    }

    /// As [`RouteStats::histogram`], for the time to the first byte of streaming requests.
    pub fn first_byte_histogram(&self) -> (Vec<(f64, u64)>, u64, f64) {
        snapshot(
            &self.first_byte,
            &self.first_byte_micros_sum,
            &self.first_byte_count,
        )
    }
}

fn snapshot(
    buckets: &[AtomicU64; BUCKETS.len()],
    sum: &AtomicU64,
    count: &AtomicU64,
) -> (Vec<(f64, u64)>, u64, f64) {
    (
        buckets
            .iter()
            .zip(BUCKETS)
            .map(|(b, le)| (le, get(b)))
            .collect(),
        get(count),
        get(sum) as f64 / 1e6,
    )
}

/// A counter's value.
pub fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// Prometheus text exposition of every route's stats.
pub fn prometheus(routes: &[(&str, &RouteStats)], uptime_secs: f64) -> String {
    let mut s = String::new();
    let counter = |s: &mut String, name: &str, help: &str, f: &dyn Fn(&RouteStats) -> u64| {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
        for (route, st) in routes {
            let _ = writeln!(s, "{name}{{route=\"{route}\"}} {}", f(st));
        }
    };
    counter(
        &mut s,
        "babysitter_proxy_requests_total",
        "requests taken by the route",
        &|st| get(&st.requests),
    );
    counter(
        &mut s,
        "babysitter_proxy_errors_total",
        "requests that ended in an error",
        &|st| get(&st.errors),
    );
    counter(
        &mut s,
        "babysitter_proxy_upstream_retries_total",
        "upstream attempts retried before the first byte",
        &|st| get(&st.retries),
    );
    let _ = writeln!(
        s,
        "# HELP babysitter_proxy_errors_by_class_total errors by class\n# TYPE babysitter_proxy_errors_by_class_total counter"
    );
    for (route, st) in routes {
        for (class, n) in st.errors_by_class() {
            let _ = writeln!(
                s,
                "babysitter_proxy_errors_by_class_total{{route=\"{route}\",class=\"{class}\"}} {n}"
            );
        }
    }
    let _ = writeln!(
        s,
        "# HELP babysitter_proxy_tokens_total tokens by kind (input excludes cache)\n# TYPE babysitter_proxy_tokens_total counter"
    );
    for (route, st) in routes {
        for (kind, c) in [
            ("input", &st.input_tokens),
            ("output", &st.output_tokens),
            ("cache_read", &st.cache_read_tokens),
            ("cache_write", &st.cache_write_tokens),
        ] {
            let _ = writeln!(
                s,
                "babysitter_proxy_tokens_total{{route=\"{route}\",kind=\"{kind}\"}} {}",
                get(c)
            );
        }
    }
    let name = "babysitter_proxy_request_duration_seconds";
    let _ = writeln!(
        s,
        "# HELP {name} request duration until the last byte\n# TYPE {name} histogram"
    );
    for (route, st) in routes {
        for (b, le) in st.buckets.iter().zip(BUCKETS) {
            let _ = writeln!(
                s,
                "{name}_bucket{{route=\"{route}\",le=\"{le}\"}} {}",
                get(b)
            );
        }
        let count = get(&st.latency_count);
        let _ = writeln!(s, "{name}_bucket{{route=\"{route}\",le=\"+Inf\"}} {count}");
        let sum = get(&st.latency_micros_sum) as f64 / 1e6;
        let _ = writeln!(s, "{name}_sum{{route=\"{route}\"}} {sum}");
        let _ = writeln!(s, "{name}_count{{route=\"{route}\"}} {count}");
    }
    let _ = writeln!(
        s,
        "# HELP babysitter_proxy_uptime_seconds seconds since start\n# TYPE babysitter_proxy_uptime_seconds gauge\nbabysitter_proxy_uptime_seconds {uptime_secs}"
    );
    s
}

/// The reference's JSON summary (field names kept for compatibility, spec §17 P3).
pub fn json_summary(routes: &[(&str, &RouteStats)], uptime_secs: f64) -> Value {
    let sum = |f: &dyn Fn(&RouteStats) -> u64| routes.iter().map(|(_, st)| f(st)).sum::<u64>();
    let input =
        sum(&|st| get(&st.input_tokens) + get(&st.cache_read_tokens) + get(&st.cache_write_tokens));
    let output = sum(&|st| get(&st.output_tokens));
    let requests = sum(&|st| get(&st.requests));
    json!({
        "total_input_tokens": input,
        "total_output_tokens": output,
        "total_requests": requests,
        "total_errors": sum(&|st| get(&st.errors)),
        "uptime_seconds": uptime_secs,
        "avg_tokens_per_request": if requests == 0 { 0.0 } else { (input + output) as f64 / requests as f64 },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finished_requests_show_in_both_renderings() {
        let st = RouteStats::default();
        st.requests.fetch_add(2, Ordering::Relaxed);
        let u = Usage {
            input: Some(10),
            cache_read: Some(5),
            output: Some(7),
            ..Usage::default()
        };
        st.finish(&u, false, std::time::Duration::from_millis(3));
        st.finish(&Usage::default(), true, std::time::Duration::from_secs(2));
        let text = prometheus(&[("r1", &st)], 1.5);
        assert!(
            text.contains("babysitter_proxy_requests_total{route=\"r1\"} 2"),
            "{text}"
        );
        assert!(text.contains("babysitter_proxy_errors_total{route=\"r1\"} 1"));
        assert!(text.contains("babysitter_proxy_tokens_total{route=\"r1\",kind=\"cache_read\"} 5"));
        assert!(text.contains("_bucket{route=\"r1\",le=\"0.005\"} 1"));
        assert!(text.contains("_bucket{route=\"r1\",le=\"+Inf\"} 2"));
        let j = json_summary(&[("r1", &st)], 1.5);
        assert_eq!(j["total_input_tokens"], 15);
        assert_eq!(j["total_output_tokens"], 7);
        assert_eq!(j["total_errors"], 1);
    }
}
