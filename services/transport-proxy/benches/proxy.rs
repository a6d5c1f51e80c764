//! Benchmark (prints figures, asserts nothing): latency the proxy adds over calling the
//! scripted upstream directly, side by side with LiteLLM 1.106.12 on the same upstream
//! (toolchain.md §8), plus the proxy's memory. Issue 5 §4 targets: median added latency ≤ 1/10
//! of LiteLLM's, p99 added ≤ 1 ms at 1,000 requests/s, ≤ 30 MB RSS idle.
//!
//! Run: `cargo bench -p babysitter-transport-proxy --bench proxy`. Processes: the
//! `scripted-model-server` (upstream, OpenAI Chat), the `babysitter-transport-proxy` binary
//! (Anthropic `/v1/messages` → Chat), and LiteLLM when `scripts/ensure-litellm.sh` installed it
//! (else its rows are skipped, saying why). All on 127.0.0.1, all stopped by PID at the end.
//! Environment knobs: `BENCH_N` (sequential requests, default 200), `BENCH_RATE_SECS` (length
//! of the 1,000 req/s run, default 3), `BENCH_SOAK_ROUNDS` (memory soak rounds, default 5).
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

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[derive(Clone, Copy)]
struct Stats {
    median: f64,
    p99: f64,
    max: f64,
}

fn stats(mut d: Vec<Duration>) -> Stats {
    d.sort();
    Stats {
        median: pct(&d, 0.5),
        p99: pct(&d, 0.99),
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
    let mut body = t.body.clone();
    body["stream"] = json!(stream);
    let mut rb = http.post(&t.url).json(&body);
    for (k, v) in &t.headers {
        rb = rb.header(*k, v);
    }
    let start = Instant::now();
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

/// Open-loop load at `rate` requests/s for `secs`: latency of each request.
async fn paced(http: &reqwest::Client, t: &Target, rate: u64, secs: u64) -> anyhow::Result<Stats> {
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate));
    let mut tasks = Vec::new();
    for _ in 0..rate * secs {
        tick.tick().await;
        let (http, t) = (http.clone(), t.clone());
        tasks.push(tokio::spawn(async move {
            once(&http, &t, false).await.map(|r| r.1)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.push(task.await??);
    }
    Ok(stats(all))
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
    let rate_secs: u64 = std::env::var("BENCH_RATE_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
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
    let (_upstream, upstream) = spawn_ready("scripted-model-server", cmd)?;

    let cfg = dir.path().join("proxy.toml");
    std::fs::write(
        &cfg,
        format!(
            "version = 1\nlisten = \"127.0.0.1:0\"\n[[routes]]\nname = \"bench\"\nfront = \"anthropic\"\n[routes.upstream]\nprovider = \"openai\"\nbase-url = \"{upstream}/v1\"\nmodel = \"fake-gpt\"\n"
        ),
    )?;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_babysitter-transport-proxy"));
    cmd.arg("--config").arg(&cfg);
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
    if std::fs::metadata(&litellm_bin).is_ok_and(|m| m.is_file()) {
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
    println!("\n{n} sequential requests after 10 warm-up, one keep-alive client; times in ms\n");
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
    let (c_d, rps_d) = concurrent(&http, &direct, false, 64, n / 4).await?;
    row(&format!("direct, non-streaming ({rps_d:.0} req/s)"), c_d);
    let (c_p, rps_p) = concurrent(&http, &via_proxy, false, 64, n / 4).await?;
    row(&format!("proxy, non-streaming ({rps_p:.0} req/s)"), c_p);
    let (c_ps, rps_ps) = concurrent(&http, &via_proxy, true, 64, n / 4).await?;
    row(&format!("proxy, streaming ({rps_ps:.0} req/s)"), c_ps);
    let rss_load = rss_mb(proxy_pid);
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

    println!("\nopen loop at 1,000 requests/s for {rate_secs} s, non-streaming; times in ms\n");
    let r_d = paced(&http, &direct, 1000, rate_secs).await?;
    row("direct", r_d);
    let r_p = paced(&http, &via_proxy, 1000, rate_secs).await?;
    row("proxy", r_p);
    println!(
        "added p99 at 1,000 req/s: {:.3} ms (target ≤ 1 ms)",
        r_p.p99 - r_d.p99
    );
    println!(
        "\nproxy RSS: idle {rss_idle:.1} MB (target ≤ 30 MB), after load {rss_load:.1} MB, at end {:.1} MB",
        rss_mb(proxy_pid)
    );
    if let Some((proc, _)) = &litellm {
        println!("LiteLLM RSS at end: {:.1} MB", rss_mb(proc.child.id()));
    }
    Ok(())
}
