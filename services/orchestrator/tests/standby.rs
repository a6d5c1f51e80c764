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
        let mut child = Command::new(env!("CARGO_BIN_EXE_orchestrator"))
            .args(["--store", store, "--listen", "127.0.0.1:0"])
            .args(["--set", "leadership.ttl-ms=1000"])
            .args(["--set", &format!("engine.runs-dir={}", runs_dir.display())])
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
    let run = c
        .create_run(pb::CreateRunRequest {
            process: Some(pb::ProcessBundle::single_file(
                "main.mjs",
                ECHO.as_bytes().to_vec(),
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
        if run.status == pb::RunStatus::Completed as i32 {
            return serde_json::from_slice(&run.output_json).expect("output");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("run {run_id} did not complete");
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
