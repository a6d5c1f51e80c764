//! Benchmark (prints figures, asserts nothing): latency the proxy adds over calling the
//! scripted upstream directly, side by side with LiteLLM 1.106.12 on the same upstream
//! (toolchain.md §8), plus the proxy's memory. Issue 5 §4 targets: median added latency ≤ 1/10
//! of LiteLLM's, p99 added ≤ 1 ms at 1,000 requests/s, ≤ 30 MB RSS idle.
//!
//! Run: `cargo bench -p babysitter-transport-proxy --bench proxy`. Processes: the
//! `scripted-model-server` (upstream, OpenAI Chat), the `babysitter-transport-proxy` binary
//! (Anthropic `/v1/messages` → Chat), and LiteLLM when `scripts/ensure-litellm.sh` installed it
//! (else its rows are skipped, saying why). All on 127.0.0.1, all stopped by PID at the end.
//! Environment knobs: `BENCH_N` (sequential requests, default 200), `BENCH_RATE` (open-loop
//! rate, default 1,000/s), `BENCH_RATE_SECS` (measured seconds per path of the open-loop run,
//! default 10), `BENCH_WARM_SECS` (its unmeasured warm-up, default 2), `BENCH_SOAK_ROUNDS`
//! (memory soak rounds, default 5), `BENCH_ONLY=rate` (only the open-loop run, no LiteLLM),
//! `BENCH_PROXY_WORKERS` (the proxy's tokio worker threads; default one per core).
#![allow(clippy::print_stdout)] // a bench binary: its figures are its output

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::time::Instant;

struct Proc {
    name: &'static str,
    child: Child,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("stopped {} (pid {})", self.name, self.child.id());
    }
}

/// Spawns a binary that prints a `{"event":"ready",…,"url":…}` line; returns it and the url.
fn spawn_ready(name: &'static str, mut cmd: Command) -> anyhow::Result<(Proc, String)> {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("spawning {name}"))?;
    let stdout = child.stdout.take().context("stdout")?;
    let proc = Proc { name, child };
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let v: Value =
        serde_json::from_str(&line).with_context(|| format!("{name} ready line: {line}"))?;
    let url = v["url"].as_str().context("url")?.to_owned();
    Ok((proc, url))
}

fn rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| {
                l.split_whitespace()
                    .nth(1)
                    .and_then(|k| k.parse::<f64>().ok())
            })
        })
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// CPU time (user + system) a process has used, in ms (clock ticks of 10 ms on Linux).
fn cpu_ms(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            // Fields after the `(comm)`: state is 3rd, utime 14th, stime 15th.
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
            Some(ticks * 10.0)
        })
        .unwrap_or(f64::NAN)
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[derive(Clone, Copy)]
struct Stats {
    n: usize,
    median: f64,
    p99: f64,
    p999: f64,
    max: f64,
}

fn stats(mut d: Vec<Duration>) -> Stats {
    d.sort();
    Stats {
        n: d.len(),
        median: pct(&d, 0.5),
        p99: pct(&d, 0.99),
        p999: pct(&d, 0.999),
        max: pct(&d, 1.0),
    }
}

#[derive(Clone)]
struct Target {
    url: String,
    headers: Vec<(&'static str, String)>,
    body: Value,
}

async fn once(
    http: &reqwest::Client,
    t: &Target,
    stream: bool,
) -> anyhow::Result<(Duration, Duration)> {
    once_from(http, t, stream, Instant::now()).await
}

/// One request; first-byte and last-byte times counted from `start` (its due time in the
/// open-loop run, so a late send counts as latency).
async fn once_from(
    http: &reqwest::Client,
    t: &Target,
    stream: bool,
    start: Instant,
) -> anyhow::Result<(Duration, Duration)> {
    let mut body = t.body.clone();
    body["stream"] = json!(stream);
    let mut rb = http.post(&t.url).json(&body);
    for (k, v) in &t.headers {
        rb = rb.header(*k, v);
    }
    let resp = rb.send().await?;
    if !resp.status().is_success() {
        bail!(
            "{} answered {}: {}",
            t.url,
            resp.status(),
            resp.text().await.unwrap_or_default()
        );
    }
    let mut s = resp.bytes_stream();
    let mut first = None;
    while let Some(chunk) = s.next().await {
        chunk?;
        first.get_or_insert_with(|| start.elapsed());
    }
    let total = start.elapsed();
    Ok((first.unwrap_or(total), total))
}

async fn sequential(
    http: &reqwest::Client,
    t: &Target,
    stream: bool,
    n: usize,
) -> anyhow::Result<(Stats, Stats)> {
    for _ in 0..10 {
        once(http, t, stream).await?;
    }
    let mut first = Vec::with_capacity(n);
    let mut total = Vec::with_capacity(n);
    for _ in 0..n {
        let (f, a) = once(http, t, stream).await?;
        first.push(f);
        total.push(a);
    }
    Ok((stats(first), stats(total)))
}

async fn concurrent(
    http: &reqwest::Client,
    t: &Target,
    stream: bool,
    workers: usize,
    per: usize,
) -> anyhow::Result<(Stats, f64)> {
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..workers {
        let (http, t) = (http.clone(), t.clone());
        tasks.push(tokio::spawn(async move {
            let mut v = Vec::with_capacity(per);
            for _ in 0..per {
                v.push(once(&http, &t, stream).await?.1);
            }
            anyhow::Ok(v)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await??);
    }
    let rps = all.len() as f64 / start.elapsed().as_secs_f64();
    Ok((stats(all), rps))
}

/// Open loop, two targets alternating: request `i` is due at `start + i / rate` and goes to
/// target `a` or `b` by 200 ms blocks, so each is loaded at `rate` while measured and slow
/// changes in background load (other jobs on the machine) hit both alike. A pacing thread sleeps
/// to each due time and spawns the request on the client runtime; latency counts from the due
/// time, so a stall anywhere (client, proxy, upstream) shows up instead of delaying the next
/// sends (no coordinated omission). The first `warm_secs` are not measured.
async fn paced_pair(
    http: &reqwest::Client,
    a: &Target,
    b: &Target,
    rate: u64,
    secs: u64,
    warm_secs: u64,
) -> anyhow::Result<(Stats, Stats)> {
    const BLOCK: Duration = Duration::from_millis(200);
    let period = Duration::from_nanos(1_000_000_000 / rate);
    let total = rate * (2 * secs + warm_secs);
    let warm = rate * warm_secs;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let handle = tokio::runtime::Handle::current();
    let (http, a, b) = (http.clone(), a.clone(), b.clone());
    let pacer = std::thread::spawn(move || {
        let start = Instant::now() + Duration::from_millis(10);
        for i in 0..total {
            let due = start + period * u32::try_from(i).unwrap_or(u32::MAX);
            let now = Instant::now();
            if due > now {
                std::thread::sleep(due - now);
            }
            let to_b =
                (period * u32::try_from(i).unwrap_or(0)).as_nanos() / BLOCK.as_nanos() % 2 == 1;
            let t = if to_b { b.clone() } else { a.clone() };
            let (http, tx) = (http.clone(), tx.clone());
            handle.spawn(async move {
                let r = once_from(&http, &t, false, due).await.map(|r| r.1);
                let _ = tx.send((i >= warm, to_b, r));
            });
        }
    });
    let (mut da, mut db) = (Vec::new(), Vec::new());
    for _ in 0..total {
        let Some((measured, to_b, r)) = rx.recv().await else {
            bail!("pacing stopped early");
        };
        let d = r?;
        if measured {
            if to_b { db.push(d) } else { da.push(d) }
        }
    }
    pacer
        .join()
        .map_err(|_| anyhow::anyhow!("pacing thread panicked"))?;
    Ok((stats(da), stats(db)))
}

fn table_header() {
    println!(
        "| {:<46} | {:>8} | {:>8} | {:>8} |",
        "path", "median", "p99", "max"
    );
    println!(
        "|{}|{}|{}|{}|",
        "-".repeat(48),
        "-".repeat(10),
        "-".repeat(10),
        "-".repeat(10)
    );
}

fn row(label: &str, s: Stats) {
    println!(
        "| {label:<46} | {:>8.3} | {:>8.3} | {:>8.3} |",
        s.median, s.p99, s.max
    );
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::var("BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let knob = |name: &str, default: u64| -> u64 {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let rate = knob("BENCH_RATE", 1000).max(1);
    let rate_secs = knob("BENCH_RATE_SECS", 10);
    let warm_secs = knob("BENCH_WARM_SECS", 2);
    let only_rate = std::env::var("BENCH_ONLY").is_ok_and(|v| v == "rate");
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        json!({"turns": [{"when": {}, "reply": {"tool_calls": [{"id": "call_fake_1", "name": "get_weather", "arguments": {"city": "Paris"}}],
            "usage": {"input": 11, "output": 7}}}]})
        .to_string(),
    )?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_scripted-model-server"));
    cmd.args(["--port", "0", "--script"]).arg(&script);
    let (upstream_proc, upstream) = spawn_ready("scripted-model-server", cmd)?;
    let upstream_pid = upstream_proc.child.id();

    let cfg = dir.path().join("proxy.toml");
    std::fs::write(
        &cfg,
        format!(
            "version = 1\nlisten = \"127.0.0.1:0\"\n[[routes]]\nname = \"bench\"\nfront = \"anthropic\"\n[routes.upstream]\nprovider = \"openai\"\nbase-url = \"{upstream}/v1\"\nmodel = \"fake-gpt\"\n"
        ),
    )?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_babysitter-transport-proxy"));
    cmd.arg("--config").arg(&cfg);
    if let Ok(w) = std::env::var("BENCH_PROXY_WORKERS") {
        // The proxy's runtime size alone (tokio reads it; the bench and the upstream keep theirs).
        cmd.env("TOKIO_WORKER_THREADS", w);
    }
    let (proxy_proc, proxy) = spawn_ready("babysitter-transport-proxy", cmd)?;
    let proxy_pid = proxy_proc.child.id();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_idle = rss_mb(proxy_pid);

    let tools = json!([{"name":"get_weather","description":"Get weather","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}]);
    let anth = json!({"model":"claude-fake","max_tokens":256,"tools":tools,"messages":[{"role":"user","content":"weather in Paris?"}]});
    let chat = json!({"model":"fake-gpt","max_tokens":256,"stream_options":{"include_usage":true},
        "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}}],
        "messages":[{"role":"user","content":"weather in Paris?"}]});
    let direct = Target {
        url: format!("{upstream}/v1/chat/completions"),
        headers: vec![],
        body: chat,
    };
    let via_proxy = Target {
        url: format!("{proxy}/v1/messages"),
        headers: vec![
            ("anthropic-version", "2023-06-01".into()),
            ("x-api-key", "k".into()),
        ],
        body: anth.clone(),
    };

    // LiteLLM, when installed.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let litellm_bin = root.join("../../.ci-work/venv-litellm/bin/litellm");
    let mut litellm: Option<(Proc, Target)> = None;
    if only_rate {
        println!("BENCH_ONLY=rate: only the open-loop run, LiteLLM not started");
    } else if std::fs::metadata(&litellm_bin).is_ok_and(|m| m.is_file()) {
        let port = free_port()?;
        let yaml = dir.path().join("litellm.yaml");
        std::fs::write(
            &yaml,
            format!(
                "model_list:\n  - model_name: claude-fake\n    litellm_params:\n      model: openai/fake-gpt\n      api_base: {upstream}/v1\n      api_key: sk-fake-upstream\nlitellm_settings:\n  drop_params: true\n  telemetry: false\n  use_chat_completions_url_for_anthropic_messages: true\ngeneral_settings:\n  master_key: sk-litellm-test\n"
            ),
        )?;
        let child = Command::new(&litellm_bin)
            .args(["--config"])
            .arg(&yaml)
            .args([
                "--host",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--num_workers",
                "1",
            ])
            .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            .env("LITELLM_LOG", "ERROR")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let proc = Proc {
            name: "litellm",
            child,
        };
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(180);
        let mut ready = false;
        while Instant::now() < deadline {
            if http
                .get(format!("{base}/health/liveliness"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success())
            {
                ready = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        if ready {
            let t = Target {
                url: format!("{base}/v1/messages"),
                headers: vec![
                    ("anthropic-version", "2023-06-01".into()),
                    ("x-api-key", "sk-litellm-test".into()),
                ],
                body: anth,
            };
            once(&http, &t, false)
                .await
                .context("litellm warm-up request")?;
            litellm = Some((proc, t));
        } else {
            println!("LiteLLM did not become ready within 180 s: its rows are skipped");
        }
    } else {
        println!(
            "LiteLLM not installed ({}): run scripts/ensure-litellm.sh; its rows are skipped",
            litellm_bin.display()
        );
    }

    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(128)
        .build()?;
    let mut rss_load = f64::NAN;
    if !only_rate {
        println!(
            "\n{n} sequential requests after 10 warm-up, one keep-alive client; times in ms\n"
        );
        table_header();
        let (_, d_ns) = sequential(&http, &direct, false, n).await?;
        row("direct upstream, non-streaming", d_ns);
        let (_, p_ns) = sequential(&http, &via_proxy, false, n).await?;
        row("proxy /v1/messages→chat, non-streaming", p_ns);
        let (d_fb, d_st) = sequential(&http, &direct, true, n).await?;
        row("direct upstream, streaming (last byte)", d_st);
        row("direct upstream, streaming (first byte)", d_fb);
        let (p_fb, p_st) = sequential(&http, &via_proxy, true, n).await?;
        row("proxy, streaming (last byte)", p_st);
        row("proxy, streaming (first byte)", p_fb);
        let mut l_rows = None;
        if let Some((_, t)) = &litellm {
            let (_, l_ns) = sequential(&http, t, false, n).await?;
            row("LiteLLM /v1/messages→chat, non-streaming", l_ns);
            let (l_fb, l_st) = sequential(&http, t, true, n).await?;
            row("LiteLLM, streaming (last byte)", l_st);
            row("LiteLLM, streaming (first byte)", l_fb);
            l_rows = Some((l_ns, l_st));
        }
        println!(
            "\nadded median latency (proxy − direct): non-streaming {:.3} ms, streaming {:.3} ms",
            p_ns.median - d_ns.median,
            p_st.median - d_st.median
        );
        if let Some((l_ns, l_st)) = l_rows {
            let (ln, ls) = (l_ns.median - d_ns.median, l_st.median - d_st.median);
            println!(
                "added median latency (LiteLLM − direct): non-streaming {ln:.3} ms, streaming {ls:.3} ms"
            );
            println!(
                "ratio proxy/LiteLLM added latency: non-streaming {:.4}, streaming {:.4} (target ≤ 0.1)",
                (p_ns.median - d_ns.median) / ln,
                (p_st.median - d_st.median) / ls
            );
        }

        println!(
            "\n64 concurrent clients × {} requests each; times in ms\n",
            n / 4
        );
        table_header();
        let (c_d, rps_d) = concurrent(&http, &direct, false, 64, n / 4).await?;
        row(&format!("direct, non-streaming ({rps_d:.0} req/s)"), c_d);
        let (c_p, rps_p) = concurrent(&http, &via_proxy, false, 64, n / 4).await?;
        row(&format!("proxy, non-streaming ({rps_p:.0} req/s)"), c_p);
        let (c_ps, rps_ps) = concurrent(&http, &via_proxy, true, 64, n / 4).await?;
        row(&format!("proxy, streaming ({rps_ps:.0} req/s)"), c_ps);
        rss_load = rss_mb(proxy_pid);
        if let Some((_, t)) = &litellm {
            let (c_l, rps_l) = concurrent(&http, t, false, 64, n / 8).await?;
            row(&format!("LiteLLM, non-streaming ({rps_l:.0} req/s)"), c_l);
            let (c_ls, rps_ls) = concurrent(&http, t, true, 64, n / 8).await?;
            row(&format!("LiteLLM, streaming ({rps_ls:.0} req/s)"), c_ls);
        }

        let rounds: usize = std::env::var("BENCH_SOAK_ROUNDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5);
        print!(
            "\nsoak (T31): {rounds} rounds × 2,048 streaming requests, 64 concurrent; proxy RSS MB after each:"
        );
        for _ in 0..rounds {
            concurrent(&http, &via_proxy, true, 64, 32).await?;
            print!(" {:.1}", rss_mb(proxy_pid));
        }
        println!();
    }

    println!(
        "\nopen loop at {rate} requests/s, proxy and direct alternating in 200 ms blocks, {rate_secs} s each after {warm_secs} s warm-up, non-streaming; latency from each request's due time; times in ms\n"
    );
    println!(
        "| {:<10} | {:>6} | {:>8} | {:>8} | {:>8} | {:>8} |",
        "path", "n", "median", "p99", "p99.9", "max"
    );
    println!(
        "|{}|{}|{}|{}|{}|{}|",
        "-".repeat(12),
        "-".repeat(8),
        "-".repeat(10),
        "-".repeat(10),
        "-".repeat(10),
        "-".repeat(10)
    );
    let (cpu_proxy, cpu_up) = (cpu_ms(proxy_pid), cpu_ms(upstream_pid));
    let (r_p, r_d) = paced_pair(&http, &via_proxy, &direct, rate, rate_secs, warm_secs).await?;
    let per = |before: f64, pid: u32, n: f64| (cpu_ms(pid) - before) * 1000.0 / n;
    let all = (rate * (2 * rate_secs + warm_secs)) as f64;
    for (label, s) in [("direct", r_d), ("proxy", r_p)] {
        println!(
            "| {label:<10} | {:>6} | {:>8.3} | {:>8.3} | {:>8.3} | {:>8.3} |",
            s.n, s.median, s.p99, s.p999, s.max
        );
    }
    println!(
        "added at {rate} req/s: median {:.3} ms, p99 {:.3} ms (target ≤ 1 ms), p99.9 {:.3} ms",
        r_p.median - r_d.median,
        r_p.p99 - r_d.p99,
        r_p.p999 - r_d.p999
    );
    println!(
        "cpu per request: proxy {:.0} µs (over its {} requests), upstream {:.0} µs (over all {})",
        per(cpu_proxy, proxy_pid, all / 2.0),
        all / 2.0,
        per(cpu_up, upstream_pid, all),
        all
    );
    if let Ok(load) = std::fs::read_to_string("/proc/loadavg") {
        println!("load average at the end: {}", load.trim());
    }
    println!(
        "\nproxy RSS: idle {rss_idle:.1} MB (target ≤ 30 MB), after load {rss_load:.1} MB, at end {:.1} MB",
        rss_mb(proxy_pid)
    );
    if let Some((proc, _)) = &litellm {
        println!("LiteLLM RSS at end: {:.1} MB", rss_mb(proc.child.id()));
    }
    Ok(())
}
