//! TLS on the proxy's HTTP ports, the binary as deployed: the front (`[tls]`) and `/metrics`
//! (`telemetry.metrics-tls`), with certificates from the deployment generator. A client that
//! trusts the CA gets its answer over HTTPS, plaintext and untrusted clients are refused, and
//! with a client CA (mTLS) a client without a certificate fails the handshake.

#[path = "support/clients.rs"]
mod clients;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use babysitter_common::tls::generate::{Leaf, generate};
use babysitter_transport_proxy::protocol::Protocol;
use babysitter_transport_proxy::scripted::ScriptedServer;
use clients::{first_turn, path};
use serde_json::Value;

struct Proxy {
    child: Child,
    url: String,
    metrics: String,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts the binary (the env contract, one route to `upstream`) with `sets`; its front URL
/// from the ready line and its metrics address from stderr.
fn start(upstream: &str, sets: &[String]) -> Proxy {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_babysitter-transport-proxy"));
    cmd.env_clear()
        .env("AGENT_MUX_PROXY_TARGET_PROVIDER", "openai")
        .env("AGENT_MUX_PROXY_TARGET_MODEL", "openai/fake-gpt")
        .env("AGENT_MUX_PROXY_EXPOSED_TRANSPORT", "anthropic")
        .env("AGENT_MUX_PROXY_API_BASE", upstream)
        .env("OPENAI_API_KEY", "sk-upstream")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for s in sets {
        cmd.args(["--set", s]);
    }
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn: {e}"));
    let stderr = child.stderr.take().unwrap_or_else(|| panic!("stderr"));
    let mut metrics = String::new();
    let mut lines = BufReader::new(stderr).lines();
    for line in lines.by_ref() {
        let line = line.unwrap_or_default();
        if let Some(addr) = line.strip_prefix("metrics listening on ") {
            metrics = addr.trim().to_owned();
            break;
        }
    }
    // Keep reading: a closed stderr would fail the proxy's next log line.
    std::thread::spawn(move || lines.for_each(drop));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("stdout"));
    let mut line = String::new();
    BufReader::new(stdout)
        .read_line(&mut line)
        .unwrap_or_else(|e| panic!("{e}"));
    let ready: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
    Proxy {
        child,
        url: ready["url"].as_str().unwrap_or_default().to_owned(),
        metrics,
    }
}

fn http(ca: Option<&Path>, identity: Option<(&Path, &Path)>) -> reqwest::Client {
    let mut b = reqwest::Client::builder();
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).unwrap_or_else(|e| panic!("{e}"));
        b = b.tls_certs_only([
            reqwest::Certificate::from_pem(&pem).unwrap_or_else(|e| panic!("{e}"))
        ]);
    }
    if let Some((cert, key)) = identity {
        let mut pem = std::fs::read(cert).unwrap_or_else(|e| panic!("{e}"));
        pem.extend(std::fs::read(key).unwrap_or_else(|e| panic!("{e}")));
        b = b.identity(reqwest::Identity::from_pem(&pem).unwrap_or_else(|e| panic!("{e}")));
    }
    b.build().unwrap_or_else(|e| panic!("{e}"))
}

fn sets(dir: &Path, mtls: bool) -> Vec<String> {
    let p = |f: &str| dir.join(f).display().to_string();
    let mut s = vec![
        format!("tls.cert-file=\"{}\"", p("proxy.crt")),
        format!("tls.key-file=\"{}\"", p("proxy.key")),
        "telemetry.metrics-listen-addr=\"127.0.0.1:0\"".to_owned(),
        format!("telemetry.metrics-tls.cert-file=\"{}\"", p("proxy.crt")),
        format!("telemetry.metrics-tls.key-file=\"{}\"", p("proxy.key")),
    ];
    if mtls {
        s.push(format!("tls.client-ca-file=\"{}\"", p("ca.crt")));
    }
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_front_and_metrics_speak_tls_and_refuse_what_they_must() {
    let upstream = ScriptedServer::start(([127, 0, 0, 1], 0).into(), None, None)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let other = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let leaves = [Leaf::for_host("proxy", &[]), Leaf::for_host("client", &[])];
    generate(dir.path(), &leaves).unwrap_or_else(|e| panic!("{e}"));
    generate(other.path(), &leaves).unwrap_or_else(|e| panic!("{e}"));
    let ca = dir.path().join("ca.crt");

    let proxy = start(&upstream.url(), &sets(dir.path(), false));
    assert!(proxy.url.starts_with("https://127.0.0.1:"), "{}", proxy.url);
    assert!(!proxy.metrics.is_empty(), "the metrics address is printed");
    let body = first_turn(Protocol::Anthropic, false);
    let endpoint = format!("{}{}", proxy.url, path(Protocol::Anthropic, false));
    // The env contract's generated client token is not needed to see TLS work: a 401 is an
    // answer over TLS, and the route does not matter to the handshake.
    let over_tls = http(Some(&ca), None)
        .post(&endpoint)
        .json(&body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("over TLS: {e:?}"));
    assert_eq!(over_tls.status().as_u16(), 401);
    let untrusted = http(Some(&other.path().join("ca.crt")), None)
        .post(&endpoint)
        .json(&body)
        .send()
        .await;
    assert!(
        untrusted.is_err(),
        "a client trusting another CA: {untrusted:?}"
    );
    let plaintext = reqwest::Client::new()
        .post(endpoint.replace("https://", "http://"))
        .json(&body)
        .send()
        .await;
    assert!(
        plaintext.is_err() || plaintext.as_ref().is_ok_and(|r| !r.status().is_success()),
        "plaintext to the TLS front: {plaintext:?}"
    );
    let metrics = http(Some(&ca), None)
        .get(format!("https://{}/metrics", proxy.metrics))
        .send()
        .await
        .unwrap_or_else(|e| panic!("metrics over TLS: {e:?}"));
    assert_eq!(metrics.status().as_u16(), 200);
    drop(proxy);

    let strict = start(&upstream.url(), &sets(dir.path(), true));
    let endpoint = format!("{}{}", strict.url, path(Protocol::Anthropic, false));
    let without = http(Some(&ca), None)
        .post(&endpoint)
        .json(&body)
        .send()
        .await;
    assert!(
        without.is_err(),
        "mTLS without a client certificate: {without:?}"
    );
    let with = http(
        Some(&ca),
        Some((
            &dir.path().join("client.crt"),
            &dir.path().join("client.key"),
        )),
    )
    .post(&endpoint)
    .json(&body)
    .send()
    .await
    .unwrap_or_else(|e| panic!("mTLS with a certificate: {e:?}"));
    assert_eq!(with.status().as_u16(), 401);
    upstream.stop().await;
}
