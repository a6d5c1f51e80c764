//! Two `orchestrator` processes on one in-process filesystem store (no journal service: each
//! runs its own arbiter over the store's lease): the second started stands by and forwards, and
//! takes over when the first is killed; a SIGTERM releases the lease.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use babysitter_common::client::{ClientOptions, client};
use babysitter_proto::orchestrator::v1 as pb;
use babysitter_proto::orchestrator::v1::run_service_client::RunServiceClient;

const WAITS: &str = r#"
export async function process(inputs, ctx) {
  await ctx.breakpoint({ question: "go on?" });
  return { went: true };
}
"#;

const ECHO: &str = r#"
export async function process(inputs, ctx) {
  return { echoed: inputs.n };
}
"#;

struct Orchestrator {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: String,
}

impl Orchestrator {
    fn start(store: &str, runs_dir: &std::path::Path) -> Self {
        Self::start_with(store, runs_dir, &[])
    }

    /// With `extra` settings (`key=value`, each passed as `--set`).
    fn start_with(store: &str, runs_dir: &std::path::Path, extra: &[String]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
            .args(["--store", store, "--listen", "127.0.0.1:0"])
            .args(["--set", "leadership.ttl-ms=1000"])
            .args(["--set", &format!("engine.runs-dir={}", runs_dir.display())])
            .args(extra.iter().flat_map(|kv| ["--set", kv.as_str()]))
            .env_remove("BABYSITTER_ORCHESTRATOR_CONFIG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the orchestrator");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: String::new(),
        }
    }

    /// Reads stderr until a line starts with `prefix`; returns the rest of it.
    fn wait_for(&mut self, prefix: &str) -> String {
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(line) => {
                    self.seen.push_str(&line);
                    self.seen.push('\n');
                    if let Some(rest) = line.strip_prefix(prefix) {
                        return rest.trim().to_owned();
                    }
                }
                Err(e) => panic!("no `{prefix}` line ({e}):\n{}", self.seen),
            }
        }
    }
}

impl Drop for Orchestrator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn run_client(addr: &str) -> RunServiceClient<babysitter_common::client::AuthedChannel> {
    client(&format!("http://{addr}"), None, &ClientOptions::default()).expect("client")
}

async fn echo(
    c: &mut RunServiceClient<babysitter_common::client::AuthedChannel>,
    n: u32,
) -> String {
    create(c, ECHO, n).await
}

async fn create(
    c: &mut RunServiceClient<babysitter_common::client::AuthedChannel>,
    source: &str,
    n: u32,
) -> String {
    let run = c
        .create_run(pb::CreateRunRequest {
            process: Some(pb::ProcessBundle::single_file(
                "main.mjs",
                source.as_bytes().to_vec(),
            )),
            inputs_json: Some(format!("{{\"n\":{n}}}").into_bytes().into()),
            ..Default::default()
        })
        .await
        .expect("create run")
        .into_inner()
        .run
        .expect("run");
    run.run_id
}

async fn completed_output(
    c: &mut RunServiceClient<babysitter_common::client::AuthedChannel>,
    run_id: &str,
) -> serde_json::Value {
    let run = wait_status(c, run_id, pb::RunStatus::Completed).await;
    serde_json::from_slice(&run.output_json).expect("output")
}

/// The run once it has `status` (30 s at most).
async fn wait_status(
    c: &mut RunServiceClient<babysitter_common::client::AuthedChannel>,
    run_id: &str,
    status: pb::RunStatus,
) -> pb::Run {
    for _ in 0..600 {
        let run = c
            .get_run(pb::GetRunRequest {
                run_id: run_id.to_owned(),
                ..Default::default()
            })
            .await
            .expect("get run")
            .into_inner()
            .run
            .expect("run");
        if run.status == status as i32 {
            return run;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("run {run_id} is not {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_orchestrator_on_the_same_store_stands_by_forwards_and_takes_over() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("file://{}", dir.path().join("runs").display());
    let mut a = Orchestrator::start(&store, &dir.path().join("a"));
    assert_eq!(
        a.wait_for("orchestrator active: epoch "),
        "1, 0 runs resumed"
    );
    let a_addr = a.wait_for("orchestrator listening on ");
    let mut b = Orchestrator::start(&store, &dir.path().join("b"));
    let standing = b.wait_for("orchestrator standing by: ");
    assert!(
        standing.contains(&format!("at http://{a_addr}")),
        "{standing}"
    );
    let b_addr = b.wait_for("orchestrator listening on ");

    // Through the standby: forwarded to the active one, which runs it.
    let mut via_b = run_client(&b_addr).await;
    let first = echo(&mut via_b, 1).await;
    assert_eq!(completed_output(&mut via_b, &first).await["echoed"], 1);
    let mut via_a = run_client(&a_addr).await;
    assert_eq!(completed_output(&mut via_a, &first).await["echoed"], 1);

    // The active one dies: the standby takes over once the lease lapses, with a new epoch, and
    // serves what the first one wrote.
    let _ = a.child.kill();
    let _ = a.child.wait();
    let active = b.wait_for("orchestrator active: epoch ");
    assert!(active.starts_with("2,"), "{active}");
    assert_eq!(completed_output(&mut via_b, &first).await["echoed"], 1);
    let second = echo(&mut via_b, 2).await;
    assert_eq!(completed_output(&mut via_b, &second).await["echoed"], 2);

    // SIGTERM: it drains, exits cleanly and releases the lease (no holder left).
    let pid = rustix::process::Pid::from_raw(b.child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).expect("SIGTERM");
    let status = b.child.wait().expect("wait");
    assert!(status.success(), "{status}");
    let lease = std::fs::read_to_string(
        dir.path()
            .join("runs/.babysitter-rs/control/leader-orchestrator.json"),
    )
    .expect("the lease");
    let lease: serde_json::Value = serde_json::from_str(&lease).expect("lease json");
    assert_eq!(lease["holder"], "", "{lease}");
    assert_eq!(lease["epoch"], 2, "{lease}");
}

/// One HTTP/1.1 request on a fresh connection: status and body (the first `limit` bytes of a
/// stream that does not end).
async fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    limit: usize,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let mut request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    tcp.write_all(request.as_bytes()).await.expect("write");
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while got.len() < limit {
        let read = tokio::time::timeout(Duration::from_secs(30), tcp.read(&mut buf))
            .await
            .expect("an answer within 30 s")
            .expect("read");
        if read == 0 {
            break;
        }
        got.extend_from_slice(&buf[..read]);
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text}"));
    let body = text
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_owned();
    (status, body)
}

/// The dashboard of a standby is the active orchestrator's, forwarded: the board, a run's
/// detail, a stream, and an action with its CSRF token, all through the standby's port; once
/// the standby takes over, the same port serves its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standbys_dashboard_port_forwards_to_the_active_orchestrators() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("file://{}", dir.path().join("runs").display());
    let (pa, pb) = (free_port(), free_port());
    let dash = |port: u16| format!("dashboard.listen-addr=127.0.0.1:{port}");
    let mut a = Orchestrator::start_with(&store, &dir.path().join("a"), &[dash(pa)]);
    a.wait_for("orchestrator active: epoch ");
    let a_dash = a.wait_for("dashboard listening on ");
    assert!(a_dash.starts_with(&format!("127.0.0.1:{pa} ")), "{a_dash}");
    // Two replicas on one host cannot share the dashboard's port: B is told A's.
    let mut b = Orchestrator::start_with(
        &store,
        &dir.path().join("b"),
        &[dash(pb), format!("dashboard.active-port={pa}")],
    );
    // The port forwards from before the first ask for the lease.
    let b_dash = b.wait_for("dashboard forwarding to the active orchestrator on ");
    b.wait_for("orchestrator standing by: ");
    assert_eq!(b_dash, format!("127.0.0.1:{pb}"));
    let b_addr = b.wait_for("orchestrator listening on ");
    let mut via_b = run_client(&b_addr).await;
    let done = echo(&mut via_b, 7).await;
    assert_eq!(completed_output(&mut via_b, &done).await["echoed"], 7);
    let waiting = create(&mut via_b, WAITS, 0).await;

    // The board through B is A's: both runs, the one waiting in "needs you".
    let mut board = String::new();
    for _ in 0..200 {
        let (status, body) = http(&b_dash, "GET", "/api/board", &[], "", usize::MAX).await;
        assert_eq!(status, 200, "{body}");
        board = body;
        if board.contains(&done) && board.contains(&waiting) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(board.contains(&done) && board.contains(&waiting), "{board}");
    let (status, detail) = http(
        &b_dash,
        "GET",
        &format!("/api/runs/{done}"),
        &[],
        "",
        usize::MAX,
    )
    .await;
    assert_eq!(status, 200, "{detail}");
    assert!(
        detail.contains("\"echoed\":7") || detail.contains("completed"),
        "{detail}"
    );
    // A stream: its first event arrives through B.
    let (status, stream) = http(
        &b_dash,
        "GET",
        "/api/stream",
        &[("Accept", "text/event-stream")],
        "",
        64,
    )
    .await;
    assert_eq!(status, 200, "{stream}");

    // An action: the CSRF token is A's (the session was A's), the POST and its body reach A.
    let (_, session) = http(&b_dash, "GET", "/api/session", &[], "", usize::MAX).await;
    let session: serde_json::Value = serde_json::from_str(&session).expect("session json");
    assert_eq!(session["mode"], "orchestrator", "{session}");
    let csrf = session["csrf"].as_str().expect("csrf").to_owned();
    let (status, body) = http(
        &b_dash,
        "POST",
        &format!("/api/runs/{waiting}/cancel"),
        &[
            ("Content-Type", "application/json"),
            ("x-babysitter-csrf", &csrf),
        ],
        r#"{"reason":"through the standby"}"#,
        usize::MAX,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    // The run cancelled through B's dashboard is cancelled.
    wait_status(&mut via_b, &waiting, pb::RunStatus::Cancelled).await;

    // A dies: B takes over and its port serves B's own dashboard, with the runs A wrote.
    let _ = a.child.kill();
    let _ = a.child.wait();
    b.wait_for("orchestrator active: epoch ");
    let own = b.wait_for("dashboard listening on ");
    assert!(own.starts_with(&format!("127.0.0.1:{pb} ")), "{own}");
    let mut board = String::new();
    for _ in 0..200 {
        let (status, body) = http(&b_dash, "GET", "/api/board", &[], "", usize::MAX).await;
        board = body;
        if status == 200 && board.contains(&done) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(board.contains(&done), "{board}");
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// An active orchestrator deposed while a page holds its dashboard's board stream open steps
/// down all the way: it stops its dashboard (the stream ends), stands by, and its port forwards
/// to the new active one. Frozen past its lease (SIGSTOP) so the other takes over; thawed, its
/// next renewal is fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_orchestrator_with_a_page_open_steps_down_and_forwards() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!("file://{}", dir.path().join("runs").display());
    let (pa, pb) = (free_port(), free_port());
    let dash = |port: u16, other: u16| {
        [
            format!("dashboard.listen-addr=127.0.0.1:{port}"),
            format!("dashboard.active-port={other}"),
        ]
    };
    let mut a = Orchestrator::start_with(&store, &dir.path().join("a"), &dash(pa, pb));
    a.wait_for("orchestrator active: epoch ");
    let a_dash = a.wait_for("dashboard listening on ");
    let a_dash = a_dash.split(' ').next().expect("address").to_owned();
    let mut b = Orchestrator::start_with(&store, &dir.path().join("b"), &dash(pb, pa));
    b.wait_for("orchestrator standing by: ");

    // A page's board stream on the active one.
    let mut page = tokio::net::TcpStream::connect(&a_dash)
        .await
        .expect("connect");
    page.write_all(b"GET /api/stream HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\n\r\n")
        .await
        .expect("write");
    let mut head = [0u8; 512];
    let n = page.read(&mut head).await.expect("read");
    assert!(
        String::from_utf8_lossy(&head[..n]).contains("text/event-stream"),
        "{}",
        String::from_utf8_lossy(&head[..n])
    );

    // Freeze A past its lease: B takes over.
    let pid = rustix::process::Pid::from_raw(a.child.id() as i32).expect("pid");
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).expect("SIGSTOP");
    b.wait_for("orchestrator active: epoch ");
    b.wait_for("dashboard listening on ");
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).expect("SIGCONT");

    // A steps down: its dashboard stops (the page's stream ends), its port forwards to B's.
    a.wait_for("orchestrator stepped down from epoch ");
    let forwarding = a.wait_for("dashboard forwarding to the active orchestrator on ");
    assert_eq!(forwarding, format!("127.0.0.1:{pa}"));
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), page.read_to_end(&mut rest))
        .await
        .expect("the page's stream was not ended")
        .expect("read");
    let (status, session) = http(&forwarding, "GET", "/api/session", &[], "", usize::MAX).await;
    assert_eq!(status, 200, "{session}");
}
