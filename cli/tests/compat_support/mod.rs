//! Shared helpers for the black-box compatibility tests: a sandbox project in a temp dir (repo
//! scope, a private HOME and TMPDIR, no ambient harness variables) and the real `babysitter`
//! binary run inside it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

/// The workspace's one skip policy (`babysitter_tests::skip`), included by path: this crate does
/// not depend on the testcontainers-heavy `babysitter-tests`.
#[path = "../../../tests/src/skip.rs"]
pub mod skip;

pub fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/babysitter-v6")
}

pub const GOLDEN_RUN: &str = "01JGOLDENRUN0000000000000";

/// Copies a directory tree; copies are writable (the fixture files are read-only).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::write(&target, std::fs::read(entry.path()).unwrap()).unwrap();
        }
    }
}

/// Every file under `dir` with the SHA-256 of its bytes, sorted (to prove a command changed
/// nothing).
pub fn snapshot(dir: &Path) -> Vec<(String, String)> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let p = entry.path();
            if entry.file_type().unwrap().is_dir() {
                walk(base, &p, out);
            } else {
                use sha2::Digest as _;
                out.push((
                    p.strip_prefix(base).unwrap().display().to_string(),
                    hex::encode(sha2::Sha256::digest(std::fs::read(&p).unwrap())),
                ));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[derive(Debug)]
pub struct Out {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not JSON ({e}):\n{}\nstderr:\n{}",
                self.stdout, self.stderr
            )
        })
    }

    #[track_caller]
    pub fn ok(self) -> Self {
        assert_eq!(
            self.code, 0,
            "expected exit 0\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }

    #[track_caller]
    pub fn fails(self) -> Self {
        assert_eq!(
            self.code, 1,
            "expected exit 1\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

/// A project directory (`.git` marks the repo root) with runs in `<project>/.a5c/runs`.
pub struct Sandbox {
    pub tmp: tempfile::TempDir,
    pub project: PathBuf,
    pub env: Vec<(String, String)>,
    /// `babysitter warm serve` for this sandbox (see [`Sandbox::warm`]); stopped on drop.
    pub warm: Option<std::process::Child>,
    /// `babysitter up` serving this sandbox's runs (see [`Sandbox::remote`]); stopped on drop.
    pub server: Option<std::process::Child>,
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        for mut child in [self.warm.take(), self.server.take()].into_iter().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Sandbox {
    pub fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let project = tmp.path().join("project");
        std::fs::create_dir_all(project.join(".git")).unwrap();
        std::fs::create_dir_all(tmp.path().join("home")).unwrap();
        std::fs::create_dir_all(tmp.path().join("tmp")).unwrap();
        let env = vec![
            ("HOME".into(), tmp.path().join("home").display().to_string()),
            (
                "TMPDIR".into(),
                tmp.path().join("tmp").display().to_string(),
            ),
            ("BABYSITTER_RUNS_SCOPE".into(), "repo".into()),
            // No auto-started warm server (it would outlive the test); `warm()` names one.
            ("BABYSITTER_WARM".into(), "0".into()),
        ];
        Sandbox {
            tmp,
            project,
            env,
            warm: None,
            server: None,
        }
    }

    /// Starts `babysitter up --no-worker` with its filesystem journal on this sandbox's runs
    /// directory (data dir `<project>/.a5c`, so its runs are `<project>/.a5c/runs`) on a loopback
    /// port, and sends every command of this sandbox that has a remote form to it
    /// (`BABYSITTER_SERVER`): the runs live on the orchestrator, in the same layout.
    pub fn remote(self) -> Self {
        let data = self.project.join(".a5c");
        self.remote_at(data)
    }

    /// [`Sandbox::remote`] with the server's data directory at `data`.
    pub fn remote_at(mut self, data: PathBuf) -> Self {
        use std::io::BufRead as _;
        std::fs::create_dir_all(&data).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_babysitter"))
            .args(["up", "--no-worker", "--data-dir"])
            .arg(&data)
            .args([
                "--set",
                "journal.server.listen-addr=127.0.0.1:0",
                "--set",
                "orchestrator.server.listen-addr=127.0.0.1:0",
            ])
            .env_clear()
            .envs(self.env.iter().filter(|(k, _)| k == "HOME").cloned())
            .current_dir(&self.project)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = String::new();
        let addr = loop {
            let Some(Ok(line)) = lines.next() else {
                let _ = child.kill();
                let _ = child.wait();
                panic!("babysitter up exited:\n{seen}");
            };
            seen.push_str(&line);
            seen.push('\n');
            if let Some(rest) = line.strip_prefix("babysitter up: orchestrator listening on ") {
                break rest.split_whitespace().next().unwrap().to_owned();
            }
        };
        // Keep draining its stderr so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        self.server = Some(child);
        self.env
            .push(("BABYSITTER_SERVER".into(), format!("http://{addr}")));
        self
    }

    /// Whether this sandbox's runs live on an orchestrator ([`Sandbox::remote`]).
    pub fn is_remote(&self) -> bool {
        self.server.is_some()
    }

    /// The warm server's socket in this sandbox.
    pub fn warm_socket(&self) -> PathBuf {
        self.tmp.path().join("warm").join("warm.sock")
    }

    /// Starts `babysitter warm serve` on [`Sandbox::warm_socket`] and sends every forwarded
    /// command of this sandbox through it (`BABYSITTER_WARM_SOCKET`).
    pub fn warm(mut self) -> Self {
        let socket = self.warm_socket();
        let child = Command::new(env!("CARGO_BIN_EXE_babysitter"))
            .args(["warm", "serve", "--socket"])
            .arg(&socket)
            .env_clear()
            // The sandbox's home: the server writes `ctx.log` lines under `~/.a5c/logs`.
            .envs(self.env.iter().filter(|(k, _)| k == "HOME").cloned())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.warm = Some(child);
        wait_until("the warm server to listen", || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
        self.env.push((
            "BABYSITTER_WARM_SOCKET".into(),
            socket.display().to_string(),
        ));
        self
    }

    /// Commands the warm server has run (from `babysitter warm status`).
    pub fn warm_served(&self) -> u64 {
        let out = self.cmd(&["warm", "status"]);
        assert_eq!(out.code, 0, "warm status: {}{}", out.stdout, out.stderr);
        out.stdout
            .split_whitespace()
            .skip_while(|w| *w != "served:")
            .nth(1)
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count in {:?}", out.stdout))
    }

    /// A sandbox with the fixture's `processes/demo.mjs` and an inputs file.
    pub fn with_demo() -> Self {
        let s = Self::new();
        copy_dir(&fixture().join("processes"), &s.project.join("processes"));
        std::fs::copy(
            fixture().join("runs").join(GOLDEN_RUN).join("inputs.json"),
            s.project.join("inputs.json"),
        )
        .unwrap();
        s
    }

    pub fn runs(&self) -> PathBuf {
        self.project.join(".a5c").join("runs")
    }

    pub fn run_dir(&self, id: &str) -> PathBuf {
        self.runs().join(id)
    }

    pub fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.project.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        p
    }

    pub fn cmd_env(&self, args: &[&str], extra: &[(&str, &str)]) -> Out {
        self.exec(Path::new(env!("CARGO_BIN_EXE_babysitter")), args, extra)
    }

    /// The reference CLI (see [`reference_cli`]) in this sandbox, with `PATH` so it finds node.
    pub fn cmd_ref(&self, reference: &Path, args: &[&str]) -> Out {
        let path = std::env::var("PATH").unwrap_or_default();
        self.exec(reference, args, &[("PATH", &path)])
    }

    pub fn exec(&self, program: &Path, args: &[&str], extra: &[(&str, &str)]) -> Out {
        self.exec_input(program, args, extra, None)
    }

    /// Our CLI with `input` on its stdin.
    pub fn cmd_input(&self, args: &[&str], input: &str) -> Out {
        self.cmd_input_env(args, input, &[])
    }

    /// Our CLI with `input` on its stdin and `extra` variables.
    pub fn cmd_input_env(&self, args: &[&str], input: &str, extra: &[(&str, &str)]) -> Out {
        let ours = Path::new(env!("CARGO_BIN_EXE_babysitter"));
        self.exec_input(ours, args, extra, Some(input))
    }

    /// The reference CLI with `input` on its stdin.
    pub fn cmd_ref_input(&self, reference: &Path, args: &[&str], input: &str) -> Out {
        let path = std::env::var("PATH").unwrap_or_default();
        self.exec_input(reference, args, &[("PATH", &path)], Some(input))
    }

    fn exec_input(
        &self,
        program: &Path,
        args: &[&str],
        extra: &[(&str, &str)],
        input: Option<&str>,
    ) -> Out {
        use std::io::Write as _;
        let mut c = Command::new(program);
        c.args(args)
            .current_dir(&self.project)
            .env_clear()
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        for (k, v) in extra {
            c.env(k, v);
        }
        let mut child = c.spawn().unwrap();
        if let Some(text) = input {
            let mut stdin = child.stdin.take().unwrap();
            // A command that refuses its arguments exits without reading: a broken pipe here
            // is its answer, not a test failure.
            let _ = stdin.write_all(text.as_bytes());
        }
        let o = child.wait_with_output().unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    pub fn cmd(&self, args: &[&str]) -> Out {
        self.cmd_env(args, &[])
    }

    /// The session state dir of this sandbox's stop-hook tests (`<tmp>/state`).
    pub fn state_dir(&self) -> PathBuf {
        self.tmp.path().join("state")
    }

    /// The variables of the stop-hook tests: [`Sandbox::state_dir`] as `BABYSITTER_STATE_DIR`,
    /// and a per-effect back-off of 10 ms × 3^k.
    pub fn session_env(&self) -> Vec<(String, String)> {
        vec![
            (
                "BABYSITTER_STATE_DIR".into(),
                self.state_dir().display().to_string(),
            ),
            ("BABYSITTER_HOOK_BACKOFF_BASE".into(), "0.01".into()),
        ]
    }

    /// `run:create` of `processes/<file>` with the fixture inputs; returns the run id.
    pub fn create(&self, id: &str, entry: &str) -> String {
        self.create_env(id, entry, &[])
    }

    /// [`Sandbox::create`] with `extra` added to the environment.
    pub fn create_env(&self, id: &str, entry: &str, extra: &[(&str, &str)]) -> String {
        let out = self
            .cmd_env(
                &[
                    "run:create",
                    "--process-id",
                    "golden/demo",
                    "--entry",
                    entry,
                    "--inputs",
                    "inputs.json",
                    "--run-id",
                    id,
                    "--prompt",
                    "golden sample",
                    "--json",
                ],
                extra,
            )
            .ok();
        assert_eq!(out.json()["runId"], id);
        id.to_owned()
    }

    pub fn iterate(&self, id: &str) -> Value {
        self.cmd(&["run:iterate", id, "--json"]).ok().json()
    }

    pub fn pending(&self, id: &str) -> Vec<Value> {
        let v = self
            .cmd(&["task:list", id, "--pending", "--json"])
            .ok()
            .json();
        v["tasks"].as_array().unwrap().clone()
    }

    pub fn post_inline(&self, id: &str, effect: &str, value: &str) -> Out {
        self.cmd(&[
            "task:post",
            id,
            effect,
            "--status",
            "ok",
            "--value-inline",
            value,
            "--json",
        ])
    }

    /// The journal's event types, in order.
    pub fn event_types(&self, id: &str) -> Vec<String> {
        let v = self.cmd(&["run:events", id, "--json"]).ok().json();
        v["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect()
    }

    pub fn journal_len(&self, id: &str) -> usize {
        std::fs::read_dir(self.run_dir(id).join("journal"))
            .unwrap()
            .count()
    }
}

/// Polls `done` every 10 ms; panics naming `what` after 30 s.
#[track_caller]
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    while !done() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Keys of a JSON object, in order.
pub fn keys(v: &Value) -> Vec<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}

pub fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap()
}

/// The reference CLI (npm `@a5c-ai/babysitter-sdk`, pinned) that `scripts/ensure-reference-cli.sh`
/// installs into `<repo>/.ci-work/ref-cli` (`.ci/run` does), when it is there and node runs.
/// Otherwise the calling test skips its comparison with the reference — the whole test when it
/// only compares, the reference part when it checks ours as well — saying why (`skip`: a failure
/// under `BABYSITTER_REQUIRE_ALL=1`, as in CI).
pub fn reference_cli() -> Option<PathBuf> {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../.ci-work/ref-cli/node_modules/.bin/babysitter");
    let node_ok = Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let bin = skip::tidy(&bin);
    let reason = match skip::installed(&bin) {
        Some(bin) if node_ok => return Some(bin),
        Some(_) => format!(
            "needs node on PATH to run the reference CLI ({}) it compares with",
            bin.display()
        ),
        None => format!(
            "needs the reference CLI it compares with at {}: run scripts/ensure-reference-cli.sh",
            bin.display()
        ),
    };
    skip::skip::<()>(reason);
    None
}

/// Appends a checksummed event to a run's journal directly (as another writer would).
pub fn append_event(
    run_dir: &std::path::Path,
    kind: &str,
    recorded_at: &str,
    data: serde_json::Value,
) {
    use sha2::Digest as _;
    let journal = run_dir.join("journal");
    let last = std::fs::read_dir(&journal)
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter_map(|n| n.split('.').next()?.parse::<u64>().ok())
        .max()
        .unwrap_or(0);
    let seq = last + 1;
    let mut body = serde_json::json!({"type": kind, "recordedAt": recorded_at, "data": data, "sdkVersion": "6.0.0"});
    let payload = serde_json::to_string_pretty(&body).unwrap() + "\n";
    body["checksum"] = serde_json::json!(hex::encode(sha2::Sha256::digest(payload.as_bytes())));
    // A ULID after every real one (the journal checks their order).
    let name = format!("{seq:06}.7ZTEST{seq:020}.json");
    std::fs::write(
        journal.join(name),
        serde_json::to_string_pretty(&body).unwrap() + "\n",
    )
    .unwrap();
}
