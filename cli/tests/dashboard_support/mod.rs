//! What the dashboard's process tests share: this build's `babysitter` started as a server and
//! stopped by its PID, and the browser prerequisites (skipped without them, see
//! `tests/src/skip.rs`).

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A server process, killed by its PID when dropped.
pub struct Server(pub Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts this build's `babysitter` with `args` and waits for a stderr line starting with each
/// of `wanted`: the first word after each (an address). Stderr is drained from then on.
pub fn start(args: &[String], wanted: &[&str]) -> (Server, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_babysitter"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let server = Server(child);
    let mut found: Vec<Option<String>> = vec![None; wanted.len()];
    let mut seen = String::new();
    while found.iter().any(Option::is_none) {
        let Some(Ok(line)) = lines.next() else {
            panic!("the server exited:\n{seen}");
        };
        seen.push_str(&line);
        seen.push('\n');
        for (i, w) in wanted.iter().enumerate() {
            if let Some(rest) = line.strip_prefix(w) {
                found[i] = Some(rest.split_whitespace().next().unwrap_or("").to_owned());
            }
        }
    }
    std::thread::spawn(move || for _ in lines {});
    (server, found.into_iter().map(Option::unwrap).collect())
}

/// `babysitter up` on `data` with a client `token` (principal `name`), a worker token and its
/// dashboard, all on loopback ports, `extra` appended to its TOML config: the server, the
/// dashboard's and the orchestrator's addresses.
pub fn start_up(
    dir: &Path,
    data: &Path,
    token: &str,
    name: &str,
    extra: &str,
) -> (Server, String, String) {
    let config = dir.join("up.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[orchestrator.server.auth]
tokens = [{{ token = "{token}", role = "client", name = "{name}" }}, {{ token = "worker-token", role = "worker" }}]
[orchestrator.dashboard]
listen-addr = "127.0.0.1:0"
{extra}"#
        ),
    )
    .unwrap();
    let s = |v: &str| v.to_owned();
    let (server, mut addrs) = start(
        &[
            s("up"),
            s("--config"),
            config.display().to_string(),
            s("--data-dir"),
            data.display().to_string(),
            s("--set"),
            s("journal.server.listen-addr=127.0.0.1:0"),
            s("--set"),
            s("orchestrator.server.listen-addr=127.0.0.1:0"),
        ],
        &[
            "dashboard listening on ",
            "babysitter up: orchestrator listening on ",
        ],
    );
    let grpc = addrs.pop().unwrap();
    (server, addrs.pop().unwrap(), grpc)
}

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The Playwright venv's python when it and the system Chromium are installed.
pub fn browser() -> Result<PathBuf, String> {
    let python = repo().join(".ci-work/venv-playwright/bin/python");
    if Path::new("/usr/bin/chromium").is_file() && python.is_file() {
        Ok(python)
    } else {
        Err("needs /usr/bin/chromium and Playwright for Python in .ci-work/venv-playwright: run scripts/ensure-playwright.sh".into())
    }
}

/// One HTTP/1.1 request to `addr` (`Connection: close`): the status and the body.
pub async fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

/// A bearer token on every call (none: no header, for servers without auth).
#[derive(Clone)]
pub struct Bearer(Option<String>);

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(t) = &self.0 {
            req.metadata_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        Ok(req)
    }
}

pub type Client = babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient<
    tonic::service::interceptor::InterceptedService<tonic::transport::Channel, Bearer>,
>;

/// `RunService` at `addr` (`host:port`), with `token` when given.
pub async fn connect(addr: &str, token: Option<&str>) -> Client {
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient::with_interceptor(
        channel,
        Bearer(token.map(str::to_owned)),
    )
}

/// Creates a run of the one-file process `code` with `inputs`: its id.
pub async fn create(c: &mut Client, code: &str, inputs: Option<serde_json::Value>) -> String {
    use babysitter_proto::orchestrator::v1 as pb;
    let run = c
        .create_run(pb::CreateRunRequest {
            process: Some(pb::ProcessBundle::single_file(
                "main.mjs",
                code.as_bytes().to_vec(),
            )),
            inputs_json: inputs.map(|i| i.to_string().into_bytes().into()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
        .run
        .unwrap();
    run.run_id
}

/// Waits (up to 120 s) until the run has `status`; a run that ends otherwise fails the test.
pub async fn wait_status(
    c: &mut Client,
    run_id: &str,
    status: babysitter_proto::orchestrator::v1::RunStatus,
) {
    use babysitter_proto::orchestrator::v1 as pb;
    for _ in 0..1200 {
        let run = c
            .get_run(pb::GetRunRequest {
                run_id: run_id.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .run
            .unwrap();
        if run.status == status as i32 {
            return;
        }
        let ended = [
            pb::RunStatus::Completed,
            pb::RunStatus::Failed,
            pb::RunStatus::Cancelled,
        ]
        .iter()
        .any(|s| *s as i32 == run.status);
        assert!(
            !ended,
            "run {run_id} ended {:?}, not {status:?}",
            run.status
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("run {run_id} did not reach {status:?} within 120 s");
}

/// A process that waits on one breakpoint, then returns whether it was approved.
pub const GATED: &str = r#"
export async function process(inputs, ctx) {
  const ok = await ctx.breakpoint({ question: 'ship it?' }, { label: 'gate' });
  return { approved: ok.approved };
}
"#;

/// The effect id of the breakpoint `run_id` waits on (up to 60 s).
pub async fn breakpoint_of(c: &mut Client, run_id: &str) -> String {
    for _ in 0..600 {
        let found = c
            .list_breakpoints(babysitter_proto::orchestrator::v1::ListBreakpointsRequest {
                run_id: run_id.into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner()
            .breakpoints;
        if let Some(b) = found.first() {
            return b.effect_id.clone();
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("run {run_id} never waited on a breakpoint");
}
