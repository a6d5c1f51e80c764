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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_serves_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path(), &[Leaf::for_host("dashboard", &[])]).unwrap();
    let config = DashboardConfig {
        tls: ServerTlsConfig::with_files(
            dir.path().join("dashboard.crt"),
            dir.path().join("dashboard.key"),
        ),
        ..DashboardConfig::default()
    };
    let auth = Authenticator::from_config(&AuthConfig {
        tokens: vec![TokenEntry {
            token: Some(Secret::new("alice-token")),
            token_file: None,
            role: Role::Client,
            name: Some("alice".into()),
            namespaces: Vec::new(),
        }],
        public_services: Vec::new(),
    })
    .unwrap();
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
    let ca =
        reqwest::Certificate::from_pem(&std::fs::read(dir.path().join("ca.crt")).unwrap()).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(ca)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
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
