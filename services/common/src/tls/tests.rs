//! TLS on a real loopback port: certificates from [`super::generate`], the shared server
//! builder, the shared client. What must hold: a client that trusts the CA gets through, one
//! that does not is refused, plaintext is refused, mTLS refuses calls without a client
//! certificate (health excepted), a certificate of another CA fails the handshake, and changed
//! files are served without a restart.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;

use super::generate::{Generated, Leaf, generate};
use super::*;
use crate::client::{ClientOptions, connect_lazy_tls};
use crate::server::{ServerBuilder, ServerConfig};

fn certs(dir: &Path) -> PathBuf {
    let leaves = [Leaf::for_host("server", &[]), Leaf::for_host("worker", &[])];
    assert!(matches!(
        generate(dir, &leaves).unwrap(),
        Generated::Wrote(_)
    ));
    dir.to_owned()
}

struct Running {
    url: String,
    stop: CancellationToken,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn serve(config: ServerConfig) -> Running {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let server = ServerBuilder::new("tls-test", &config);
    tokio::spawn(server.serve_with_listener(listener, stop.clone()));
    Running {
        url: format!("https://{addr}"),
        stop,
    }
}

fn server_config(dir: &Path) -> ServerConfig {
    ServerConfig {
        tls: ServerTlsConfig::with_files(dir.join("server.crt"), dir.join("server.key")),
        ..ServerConfig::default()
    }
}

fn trusting(dir: &Path) -> ClientTlsConfig {
    ClientTlsConfig {
        ca_file: Some(dir.join("ca.crt")),
        server_name: Some("server".into()),
        ..ClientTlsConfig::default()
    }
}

/// One health call on a new connection: the status's name, or the error.
async fn health(url: &str, tls: &ClientTlsConfig) -> Result<i32, tonic::Status> {
    let channel = connect_lazy_tls(url, None, &ClientOptions::default(), tls).unwrap();
    let mut request = tonic::Request::new(HealthCheckRequest {
        service: String::new(),
    });
    request.set_timeout(Duration::from_secs(5));
    HealthClient::new(channel)
        .check(request)
        .await
        .map(|r| r.into_inner().status)
}

/// Waits for the server's health to answer over `tls` (the server task starts asynchronously).
async fn ready(url: &str, tls: &ClientTlsConfig) -> i32 {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        match health(url, tls).await {
            Ok(s) => return s,
            Err(e) if tokio::time::Instant::now() > deadline => panic!("never ready: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

const SERVING: i32 = 1;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_clients_that_trust_the_ca_get_through() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let (a, b) = (certs(a.path()), certs(b.path()));
    let server = serve(server_config(&a)).await;
    assert_eq!(ready(&server.url, &trusting(&a)).await, SERVING);

    let other_ca = health(&server.url, &trusting(&b)).await.unwrap_err();
    assert!(
        other_ca.message().contains("certificate")
            || format!("{other_ca:?}").contains("certificate"),
        "a client trusting another CA is refused for the certificate: {other_ca:?}"
    );
    let plaintext = health(
        &server.url.replace("https://", "http://"),
        &ClientTlsConfig::default(),
    )
    .await;
    assert!(plaintext.is_err(), "plaintext to a TLS port: {plaintext:?}");
    // The container probe answers over TLS without trusting anything.
    let probed = ServerConfig {
        listen_addr: server.url.trim_start_matches("https://").parse().unwrap(),
        ..server_config(&a)
    };
    assert_eq!(
        crate::main_support::check_health(&probed).await.unwrap(),
        "SERVING"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_refuses_calls_without_a_client_certificate_but_not_health() {
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let (a, b) = (certs(a.path()), certs(b.path()));
    let mut config = server_config(&a);
    config.tls.client_ca_file = Some(a.join("ca.crt"));
    // Health made non-public here so a refused call can be shown on the one service the
    // builder always serves; the next server keeps the defaults.
    config.auth.public_services = Vec::new();
    let strict = serve(config.clone()).await;
    let with_cert = ClientTlsConfig {
        cert_file: Some(a.join("worker.crt")),
        key_file: Some(a.join("worker.key")),
        ..trusting(&a)
    };
    assert_eq!(ready(&strict.url, &with_cert).await, SERVING);
    let refused = health(&strict.url, &trusting(&a)).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    assert!(
        refused.message().contains("client certificate"),
        "{refused:?}"
    );
    let foreign = ClientTlsConfig {
        cert_file: Some(b.join("worker.crt")),
        key_file: Some(b.join("worker.key")),
        ..trusting(&a)
    };
    let foreign = health(&strict.url, &foreign).await;
    assert!(
        foreign.is_err(),
        "a client certificate of another CA fails the handshake: {foreign:?}"
    );

    config.auth = crate::auth::AuthConfig::default();
    let default = serve(config).await;
    assert_eq!(
        ready(&default.url, &trusting(&a)).await,
        SERVING,
        "health stays public under mTLS, for probes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changed_certificates_are_served_without_a_restart() {
    let served = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    let (a, b) = (certs(a.path()), certs(b.path()));
    for f in ["server.crt", "server.key"] {
        std::fs::copy(a.join(f), served.path().join(f)).unwrap();
    }
    let mut config = server_config(served.path());
    config.tls.reload_interval = Some(Duration::from_millis(100));
    let server = serve(config).await;
    assert_eq!(ready(&server.url, &trusting(&a)).await, SERVING);
    assert!(health(&server.url, &trusting(&b)).await.is_err());

    // A broken key first: the old material keeps serving.
    std::fs::write(served.path().join("server.key"), "not a key").unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(health(&server.url, &trusting(&a)).await.unwrap(), SERVING);

    for f in ["server.crt", "server.key"] {
        std::fs::copy(b.join(f), served.path().join(f)).unwrap();
    }
    assert_eq!(ready(&server.url, &trusting(&b)).await, SERVING);
    assert!(
        health(&server.url, &trusting(&a)).await.is_err(),
        "new connections get the new certificate"
    );
}

#[test]
fn bad_material_is_refused_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = certs(dir.path());
    let only_cert = ServerTlsConfig {
        key_file: None,
        ..ServerTlsConfig::with_files(d.join("server.crt"), d.join("server.key"))
    };
    let e = ServerTls::load(&only_cert, Protocol::Grpc).unwrap_err();
    assert!(e.to_string().contains("key-file"), "{e}");

    let missing = ServerTlsConfig::with_files(d.join("nope.crt"), d.join("server.key"));
    let e = ServerTls::load(&missing, Protocol::Grpc).unwrap_err();
    assert!(e.to_string().contains("nope.crt"), "{e}");

    std::fs::write(d.join("junk.key"), "-----BEGIN NOTHING-----\n").unwrap();
    let junk = ServerTlsConfig::with_files(d.join("server.crt"), d.join("junk.key"));
    let e = ServerTls::load(&junk, Protocol::Grpc).unwrap_err();
    assert!(e.to_string().contains("junk.key"), "{e}");

    let mismatched = ServerTlsConfig::with_files(d.join("server.crt"), d.join("worker.key"));
    let e = ServerTls::load(&mismatched, Protocol::Grpc).unwrap_err();
    assert!(e.to_string().contains("worker.key"), "{e}");

    let half_client = ClientTlsConfig {
        cert_file: Some(d.join("worker.crt")),
        ..ClientTlsConfig::default()
    };
    assert!(ClientTls::load(&half_client).is_err());
    assert!(
        ServerTls::load(&ServerTlsConfig::default(), Protocol::Grpc)
            .unwrap()
            .is_none()
    );
    // TLS settings for a plaintext URL are refused rather than ignored.
    let e = connect_lazy_tls(
        "http://127.0.0.1:1",
        None,
        &ClientOptions::default(),
        &trusting(&d),
    )
    .unwrap_err();
    assert!(e.to_string().contains("https://"), "{e}");
}

#[test]
fn generation_is_idempotent_and_refuses_a_partial_directory() {
    let dir = tempfile::tempdir().unwrap();
    let d = certs(dir.path());
    let again = [Leaf::for_host("server", &[]), Leaf::for_host("worker", &[])];
    assert_eq!(generate(&d, &again).unwrap(), Generated::AlreadyThere);
    let more = [Leaf::for_host("journal", &[])];
    let e = generate(&d, &more).unwrap_err();
    assert!(e.to_string().contains("journal.crt"), "{e}");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join("ca.key"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "keys are private: {mode:o}");
    }
    let leaf = Leaf::for_host("orchestrator", &["orchestrator.ns.svc".into()]);
    assert_eq!(
        leaf.names,
        [
            "orchestrator",
            "orchestrator.ns.svc",
            "localhost",
            "127.0.0.1",
            "::1"
        ]
    );
}
