//! `[dashboard.tls]`: the dashboard's port over TLS like every other port — a client trusting
//! the CA gets the login answer and, with a token, data; a plain-HTTP client gets nothing; the
//! login cookie is marked `Secure`.

use std::sync::Arc;

use babysitter_common::auth::{AuthConfig, Authenticator, Role, Secret, TokenEntry};
use babysitter_common::tls::ServerTlsConfig;
use babysitter_common::tls::generate::{Leaf, generate};
use babysitter_dashboard::local::LocalSource;
use babysitter_dashboard::{DashboardConfig, Source, serve};
use tokio_util::sync::CancellationToken;

/// A private CA and a `dashboard` certificate (valid for localhost) in a temporary directory,
/// and the port's TLS settings with it.
fn certificates() -> (tempfile::TempDir, ServerTlsConfig) {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path(), &[Leaf::for_host("dashboard", &[])]).unwrap();
    let tls = ServerTlsConfig::with_files(
        dir.path().join("dashboard.crt"),
        dir.path().join("dashboard.key"),
    );
    (dir, tls)
}

/// One client token, alice's.
fn alice() -> Authenticator {
    Authenticator::from_config(&AuthConfig {
        tokens: vec![TokenEntry {
            token: Some(Secret::new("alice-token")),
            token_file: None,
            role: Role::Client,
            name: Some("alice".into()),
            namespaces: Vec::new(),
        }],
        public_services: Vec::new(),
    })
    .unwrap()
}

/// A client trusting the CA in `dir`, following no redirects.
fn trusting(dir: &std::path::Path) -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&std::fs::read(dir.join("ca.crt")).unwrap()).unwrap();
    reqwest::Client::builder()
        .add_root_certificate(ca)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_serves_over_tls() {
    let (dir, tls) = certificates();
    let config = DashboardConfig {
        tls,
        ..DashboardConfig::default()
    };
    let auth = alice();
    let source: Arc<dyn Source> = Arc::new(LocalSource::new(Vec::new(), None).unwrap());
    let running = serve(
        "127.0.0.1:0".parse().unwrap(),
        &config,
        source,
        auth,
        "observe",
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let port = running.addr.port();
    let client = trusting(dir.path());
    let base = format!("https://localhost:{port}");
    let page = client.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(page.status(), 401);
    assert!(page.text().await.unwrap().contains("name=\"token\""));
    let runs = client
        .get(format!("{base}/api/runs"))
        .bearer_auth("alice-token")
        .send()
        .await
        .unwrap();
    assert_eq!(runs.status(), 200);
    let login = client
        .post(format!("{base}/login"))
        .form(&[("token", "alice-token")])
        .send()
        .await
        .unwrap();
    let cookie = login.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(
        cookie.contains("Secure") && cookie.contains("HttpOnly"),
        "{cookie}"
    );
    // Plain HTTP on the TLS port gets no answer.
    let plain = reqwest::Client::new()
        .get(format!("http://127.0.0.1:{port}/api/runs"))
        .send()
        .await;
    assert!(plain.is_err() || !plain.unwrap().status().is_success());
    running.stop().await;
}

/// A standby's forwarding port over TLS in front of the active dashboard over TLS: the
/// forwarder dials with the CA (`ClientTls`, HTTP/1.1), a client trusting the CA gets the
/// active dashboard's answers through it (401 without a token, data and a `Secure` login cookie
/// with one); with no active dashboard known it answers 503 saying so; stopping it frees the
/// port.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarding_port_over_tls_reaches_the_active_dashboard_over_tls() {
    use babysitter_common::tls::{ClientTls, ClientTlsConfig};
    use babysitter_dashboard::forward::{Target, serve_forwarding};

    let (dir, tls) = certificates();
    let config = DashboardConfig {
        tls: tls.clone(),
        ..DashboardConfig::default()
    };
    let auth = alice();
    let source: Arc<dyn Source> = Arc::new(LocalSource::new(Vec::new(), None).unwrap());
    let active = serve(
        "127.0.0.1:0".parse().unwrap(),
        &config,
        source,
        auth,
        "orchestrator",
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let known = Arc::new(std::sync::Mutex::new(Some(format!(
        "https://localhost:{}",
        active.addr.port()
    ))));
    let target: Target = {
        let known = known.clone();
        Arc::new(move || known.lock().unwrap().clone())
    };
    let client_tls = ClientTls::load(&ClientTlsConfig {
        ca_file: Some(dir.path().join("ca.crt")),
        ..ClientTlsConfig::default()
    })
    .unwrap();
    let forwarding = serve_forwarding(
        "127.0.0.1:0".parse().unwrap(),
        &tls,
        target,
        Some(client_tls),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let client = trusting(dir.path());
    let base = format!("https://localhost:{}", forwarding.addr.port());
    let page = client.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(page.status(), 401);
    let session = client
        .get(format!("{base}/api/session"))
        .bearer_auth("alice-token")
        .send()
        .await
        .unwrap();
    assert_eq!(session.status(), 200);
    let session: serde_json::Value = session.json().await.unwrap();
    assert_eq!(session["principal"], "alice", "{session}");
    assert_eq!(session["mode"], "orchestrator", "{session}");
    let login = client
        .post(format!("{base}/login"))
        .form(&[("token", "alice-token")])
        .send()
        .await
        .unwrap();
    let cookie = login.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.contains("Secure"), "{cookie}");

    // Nobody active: 503, saying why.
    *known.lock().unwrap() = None;
    let none = client.get(format!("{base}/api/runs")).send().await.unwrap();
    assert_eq!(none.status(), 503);
    assert!(
        none.text()
            .await
            .unwrap()
            .contains("no active orchestrator"),
        "the 503 does not say why"
    );
    // An active address that does not answer: 503 naming it.
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    *known.lock().unwrap() = Some(format!("https://localhost:{dead}"));
    let gone = client.get(format!("{base}/api/runs")).send().await.unwrap();
    assert_eq!(gone.status(), 503);
    assert!(gone.text().await.unwrap().contains(&dead.to_string()));

    let port = forwarding.addr.port();
    forwarding.stop().await;
    tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("the stopped forwarder freed its port");
    active.stop().await;
}

/// Stopping the dashboard while a page holds its board stream open ends the stream and the
/// server: an orchestrator stepping down (or draining on SIGTERM) must not wait on a browser.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_dashboard_ends_its_open_streams() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let source: Arc<dyn Source> = Arc::new(LocalSource::new(Vec::new(), None).unwrap());
    let auth = Authenticator::from_config(&AuthConfig::default()).unwrap();
    let running = serve(
        "127.0.0.1:0".parse().unwrap(),
        &DashboardConfig::default(),
        source,
        auth,
        "up",
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let mut tcp = tokio::net::TcpStream::connect(running.addr).await.unwrap();
    tcp.write_all(b"GET /api/stream HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
        .await
        .unwrap();
    let mut head = [0u8; 256];
    let n = tcp.read(&mut head).await.unwrap();
    assert!(
        String::from_utf8_lossy(&head[..n]).contains("text/event-stream"),
        "{}",
        String::from_utf8_lossy(&head[..n])
    );
    // Paused time is not used here: the server runs on real sockets. 30 s is far beyond a
    // clean stop (milliseconds) and short of hanging CI.
    tokio::time::timeout(std::time::Duration::from_secs(30), running.stop())
        .await
        .expect("the dashboard did not stop while a stream was open");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(30),
        tcp.read_to_end(&mut rest),
    )
    .await
    .expect("the open stream was not ended");
    assert!(read.is_ok());
}
