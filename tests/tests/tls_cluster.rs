//! TLS and mTLS between the services, each an OS process as in production: the journal, the
//! orchestrator and a shell worker, configured the way `deploy/` configures them (TOML files
//! with `[server.tls]`, `[journal.tls]`, `[orchestrator.tls]` and bearer tokens), certificates
//! from `babysitter tls:generate`'s generator.
//!
//! What must hold: a run completes over TLS everywhere, its task's command ran once; a worker
//! without a client certificate is refused (`Unauthenticated`, naming the certificate) and never
//! runs anything; a client that does not trust the CA is refused; `--health-check` answers
//! `SERVING` over TLS for every service binary; and bearer tokens still decide roles.

#[path = "support/cluster.rs"]
mod cluster;

use std::path::{Path, PathBuf};
use std::time::Duration;

use babysitter_common::auth::Secret;
use babysitter_common::client::{AuthedChannel, ClientOptions, client_tls};
use babysitter_common::tls::ClientTlsConfig;
use babysitter_common::tls::generate::{Leaf, generate};
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;
use babysitter_tests::{ServiceProcess, workspace_bin};
use serde_json::json;

const CLIENT_TOKEN: &str = "client-token-0123456789";
const WORKER_TOKEN: &str = "worker-token-0123456789";
const SERVICE_TOKEN: &str = "service-token-0123456789";

const ONE: &str = r#"
import { defineTask } from '@a5c-ai/babysitter-sdk';
const sh = defineTask('t.sh', (a) => ({ kind: 'shell', title: 'once', shell: { command: a.cmd } }));
export async function process(inputs, ctx) {
  const r = await ctx.task(sh, { cmd: inputs.cmd });
  return { out: r.stdout.trim() };
}
"#;

struct Files {
    dir: PathBuf,
}

impl Files {
    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    fn write(&self, name: &str, text: &str) -> String {
        std::fs::write(self.dir.join(name), text).unwrap();
        self.path(name)
    }

    /// `[server.tls]` of `who`, with mTLS.
    fn server_tls(&self, who: &str) -> String {
        format!(
            "[server.tls]\ncert-file = \"{}\"\nkey-file = \"{}\"\nclient-ca-file = \"{}\"\n",
            self.path(&format!("tls/{who}.crt")),
            self.path(&format!("tls/{who}.key")),
            self.path("tls/ca.crt"),
        )
    }

    /// A client `tls` table as `who`.
    fn client_tls(&self, table: &str, who: &str) -> String {
        format!(
            "[{table}]\nca-file = \"{}\"\ncert-file = \"{}\"\nkey-file = \"{}\"\n",
            self.path("tls/ca.crt"),
            self.path(&format!("tls/{who}.crt")),
            self.path(&format!("tls/{who}.key")),
        )
    }
}

fn client_as(url: &str, token: &str, tls: &ClientTlsConfig) -> RunServiceClient<AuthedChannel> {
    client_tls(
        url,
        Some(&Secret::new(token)),
        &ClientOptions::default(),
        tls,
    )
    .unwrap()
}

fn health_check(bin: &str, config: &str, listen: &str) -> (bool, String) {
    let out = std::process::Command::new(workspace_bin(bin).unwrap())
        .args([
            "--config",
            config,
            "--set",
            &format!("server.listen-addr=\"{listen}\""),
            "--health-check",
        ])
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn wait_for_log(path: &Path, needle: &str) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        if std::fs::read_to_string(path).is_ok_and(|l| l.contains(needle)) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_completes_over_mtls_and_peers_without_certificates_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let f = Files {
        dir: tmp.path().to_owned(),
    };
    let leaves: Vec<Leaf> = ["journal", "orchestrator", "worker", "client"]
        .iter()
        .map(|n| Leaf::for_host(n, &[]))
        .collect();
    generate(&tmp.path().join("tls"), &leaves).unwrap();
    let other = tempfile::tempdir().unwrap();
    generate(other.path(), &[Leaf::for_host("worker", &[])]).unwrap();

    let service_tok = f.write("service.token", SERVICE_TOKEN);
    let client_tok = f.write("client.token", CLIENT_TOKEN);
    let worker_tok = f.write("worker.token", WORKER_TOKEN);

    // The journal: mTLS; the orchestrator calls it with an `admin` token.
    let journal_config = f.write(
        "journal.toml",
        &format!(
            "{}\n[[server.auth.tokens]]\ntoken-file = \"{service_tok}\"\nrole = \"admin\"\n",
            f.server_tls("journal")
        ),
    );
    let journal = cluster::start_journal(
        &format!("file://{}", f.path("runs")),
        &["--config".into(), journal_config.clone()],
        &[],
        tmp.path().join("journal.log"),
    );
    let journal_url = format!("https://{}", journal.ready);

    // The orchestrator: mTLS; the journal over TLS with its own client certificate.
    let orchestrator_config = f.write(
        "orchestrator.toml",
        &format!(
            "{}\n[journal]\ntoken-file = \"{service_tok}\"\n\n{}\n\
             [[server.auth.tokens]]\ntoken-file = \"{client_tok}\"\nrole = \"client\"\n\n\
             [[server.auth.tokens]]\ntoken-file = \"{worker_tok}\"\nrole = \"worker\"\n",
            f.server_tls("orchestrator"),
            f.client_tls("journal.tls", "orchestrator"),
        ),
    );
    let mut args =
        cluster::orchestrator_args(&journal_url, "127.0.0.1:0", &tmp.path().join("orch-runs"));
    args.extend(["--config".into(), orchestrator_config.clone()]);
    let orchestrator = cluster::start_orchestrator(&args, tmp.path().join("orchestrator.log"));
    let url = format!("https://{}", orchestrator.ready);
    // A standby on the same journal forwards its callers to the active one over mTLS
    // (`[leadership.tls]`: the CA, the standby's own certificate).
    let standby_config = f.write(
        "standby.toml",
        &format!(
            "{}\n{}",
            std::fs::read_to_string(&orchestrator_config).unwrap(),
            f.client_tls("leadership.tls", "orchestrator")
        ),
    );
    let mut args = cluster::orchestrator_args(
        &journal_url,
        "127.0.0.1:0",
        &tmp.path().join("standby-runs"),
    );
    args.extend(["--config".into(), standby_config]);
    let standby = cluster::start_orchestrator(&args, tmp.path().join("standby.log"));

    // Every service binary's probe answers over TLS (no client certificate: health is public).
    for (bin, config, listen) in [
        ("journal", &journal_config, &journal.ready),
        ("orchestrator", &orchestrator_config, &orchestrator.ready),
    ] {
        let (ok, said) = health_check(bin, config, listen);
        assert!(
            ok && said.contains("SERVING"),
            "{bin} --health-check: {said}"
        );
    }

    // A worker with the CA but no client certificate: refused, so it runs nothing.
    let uncertified_config = f.write(
        "uncertified.toml",
        &format!(
            "[orchestrator]\ntoken-file = \"{worker_tok}\"\n\n[orchestrator.tls]\nca-file = \"{}\"\n",
            f.path("tls/ca.crt")
        ),
    );
    let uncertified = cluster::start_shell_worker(
        &url,
        "uncertified",
        tmp.path(),
        &["--config".into(), uncertified_config],
    );
    assert!(
        wait_for_log(
            &tmp.path().join("uncertified.log"),
            "client certificate is required"
        )
        .await,
        "the uncertified worker is told why it is refused"
    );

    let tls = ClientTlsConfig {
        ca_file: Some(tmp.path().join("tls/ca.crt")),
        cert_file: Some(tmp.path().join("tls/client.crt")),
        key_file: Some(tmp.path().join("tls/client.key")),
        server_name: None,
    };
    let ledger = tmp.path().join("ledger");
    let cmd = format!("echo ran >> {}; echo ok", ledger.display());
    let mut c = client_as(&url, CLIENT_TOKEN, &tls);
    let run_id = cluster::create(&mut c, ONE, json!({"cmd": cmd})).await;

    // The certified worker takes it.
    let worker_config = f.write(
        "worker.toml",
        &format!(
            "[orchestrator]\ntoken-file = \"{worker_tok}\"\n\n{}",
            f.client_tls("orchestrator.tls", "worker")
        ),
    );
    let _worker = cluster::start_shell_worker(
        &url,
        "certified",
        tmp.path(),
        &["--config".into(), worker_config],
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let run = loop {
        let r = cluster::get_run(&mut c, &run_id).await;
        if r.status == pb::RunStatus::Completed as i32 || r.status == pb::RunStatus::Failed as i32 {
            break r;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the run did not finish: {r:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(run.status, pb::RunStatus::Completed as i32, "{run:?}");
    let through_standby = cluster::get_run(
        &mut client_as(&format!("https://{}", standby.ready), CLIENT_TOKEN, &tls),
        &run_id,
    )
    .await;
    assert_eq!(
        through_standby.status,
        pb::RunStatus::Completed as i32,
        "the standby forwarded over TLS"
    );
    assert_eq!(
        std::fs::read_to_string(&ledger).unwrap(),
        "ran\n",
        "the task's command ran once, on the certified worker"
    );
    drop(uncertified);

    // A client that trusts another CA is refused before anything is sent.
    let foreign = ClientTlsConfig {
        ca_file: Some(other.path().join("ca.crt")),
        ..tls.clone()
    };
    let refused = client_as(&url, CLIENT_TOKEN, &foreign)
        .get_run(pb::GetRunRequest {
            run_id: run_id.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    // A client certificate of another CA fails the handshake.
    let wrong_cert = ClientTlsConfig {
        cert_file: Some(other.path().join("worker.crt")),
        key_file: Some(other.path().join("worker.key")),
        ..tls.clone()
    };
    assert!(
        client_as(&url, CLIENT_TOKEN, &wrong_cert)
            .get_run(pb::GetRunRequest {
                run_id: run_id.clone(),
                ..Default::default()
            })
            .await
            .is_err()
    );
    // Certificates authenticate the machine; tokens still decide the role: the worker's token
    // with a valid certificate may not read runs.
    let as_worker = client_as(&url, WORKER_TOKEN, &tls)
        .get_run(pb::GetRunRequest {
            run_id,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        as_worker.code(),
        tonic::Code::PermissionDenied,
        "{as_worker:?}"
    );
    let _ = (journal, orchestrator, standby) as (ServiceProcess, ServiceProcess, ServiceProcess);
}
