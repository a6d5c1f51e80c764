//! Executes the task kinds a worker runs itself: shell commands, node scripts, hooks. Shared by
//! the worker loop and `babysitter run` (which executes locally).
//!
//! Each command runs in its own process group ([`crate::group`]), killed as a whole on timeout,
//! cancellation or the worker's death; output is captured (bounded, [`MAX_OUTPUT`] per stream) and handed back with the result, the way `task:post` would post
//! it. A command that fails is a task error (a value for the process), not an [`ExecError`]:
//! those are for tasks that could not be started at all.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::process::Command;

use babysitter_common::telemetry::W3cContext;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::group;

/// Largest output kept per stream (the rest is read and dropped, and the text says so). A
/// result carries stdout and stderr twice (as the task's output and in its value), so 1 MiB
/// each keeps a completion well inside the default 16 MiB message limit.
pub const MAX_OUTPUT: usize = 1024 * 1024;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// A task that could not be executed at all.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    #[error("this worker cannot execute tasks of kind `{0}`")]
    Unsupported(String),
    #[error("invalid {kind} task: {reason}")]
    BadTask { kind: &'static str, reason: String },
    #[error("cannot start `{what}`: {source}")]
    Spawn {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("waiting for `{what}` failed: {source}")]
    Wait {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

type Result<T> = std::result::Result<T, ExecError>;

/// The task kinds [`execute`] handles (node only when a `node` binary is installed).
pub fn supported_kinds(node_installed: bool) -> Vec<String> {
    let mut k = vec!["shell".to_owned(), "hook".to_owned()];
    if node_installed {
        k.push("node".to_owned());
    }
    k
}

/// What to execute: the effect's kind and its task definition (`task.json`).
#[derive(Debug, Clone, Copy)]
pub struct Task<'a> {
    pub effect_id: &'a str,
    pub kind: &'a str,
    pub def: &'a Value,
    /// The task's own directory: `BABYSITTER_RUN_DIR`, where `io.outputJsonPath` is resolved,
    /// and, for a worker's attempt, its working directory unless the task names one.
    pub work_dir: &'a Path,
    /// Set by a worker: which attempt this is (in the command's environment) — and the command
    /// then runs in `work_dir`. `None` for `babysitter run`, whose commands run where it was
    /// started, as babysitter's do.
    pub attempt: Option<Attempt<'a>>,
}

/// One attempt at a task on a worker: what its commands are told about themselves, so a task
/// with outside side effects can deduplicate them (attempts are at least once, never
/// overlapping; exactly one result is journaled).
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    pub run_id: &'a str,
    pub effect_id: &'a str,
    /// 1 for the first attempt.
    pub number: u32,
    /// The worker home's marker ([`crate::home::HOME_ENV`]), for its reaper.
    pub home_marker: &'a str,
}

impl Attempt<'_> {
    /// The attempt's environment: `BABYSITTER_RUN_ID`, `BABYSITTER_EFFECT_ID`,
    /// `BABYSITTER_ATTEMPT`, `BABYSITTER_IDEMPOTENCY_KEY` (the same for every attempt of one
    /// effect: `<run id>/<effect id>`) and the home marker.
    pub fn env(&self) -> [(&'static str, String); 5] {
        [
            ("BABYSITTER_RUN_ID", self.run_id.to_owned()),
            ("BABYSITTER_EFFECT_ID", self.effect_id.to_owned()),
            ("BABYSITTER_ATTEMPT", self.number.to_string()),
            (
                "BABYSITTER_IDEMPOTENCY_KEY",
                format!("{}/{}", self.run_id, self.effect_id),
            ),
            (crate::home::HOME_ENV, self.home_marker.to_owned()),
        ]
    }
}

/// What an executed effect produced.
#[derive(Debug)]
pub struct Done {
    pub outcome: std::result::Result<Value, Value>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
}

pub async fn execute(task: Task<'_>, stop: &CancellationToken) -> Result<Done> {
    let def = task.def;
    let run_dir = task.work_dir;
    match task.kind {
        "shell" => {
            let command = required(def, "shell", "command")?;
            let timeout = def["shell"]["timeout"]
                .as_u64()
                .map(Duration::from_millis)
                .unwrap_or(DEFAULT_TIMEOUT);
            let expected = def["shell"]["expectedExitCode"].as_i64().unwrap_or(0);
            let mut cmd = group::command("sh");
            cmd.arg("-c").arg(command);
            set_env(&mut cmd, &def["shell"]["env"]);
            if let Some(cwd) = def["shell"]["cwd"].as_str() {
                cmd.current_dir(cwd);
            }
            let r = run(cmd, command, task, timeout, stop).await?;
            Ok(finish(r, expected, command))
        }
        "node" => {
            let entry = required(def, "node", "entry")?;
            let timeout = def["node"]["timeoutMs"]
                .as_u64()
                .map(Duration::from_millis)
                .unwrap_or(DEFAULT_TIMEOUT);
            let mut cmd = group::command("node");
            cmd.arg(entry);
            if let Some(args) = def["node"]["args"].as_array() {
                cmd.args(args.iter().map(|a| {
                    a.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| a.to_string())
                }));
            }
            set_env(&mut cmd, &def["node"]["env"]);
            if let Some(cwd) = def["node"]["cwd"].as_str() {
                cmd.current_dir(cwd);
            }
            let what = format!("node {entry}");
            let r = run(cmd, &what, task, timeout, stop).await?;
            let mut done = finish(r, 0, &what);
            // A node task's value: its outputJsonPath file, else JSON on stdout, else the output.
            if done.outcome.is_ok() {
                let from_file = def["io"]["outputJsonPath"]
                    .as_str()
                    .and_then(|p| std::fs::read(run_dir.join(p)).ok())
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok());
                let from_stdout = done
                    .stdout
                    .as_deref()
                    .and_then(|s| serde_json::from_str::<Value>(s.trim()).ok());
                if let Some(v) = from_file.or(from_stdout) {
                    done.outcome = Ok(v);
                }
            }
            Ok(done)
        }
        // `ctx.hook`: the user's hooks of that type ([`crate::hooks`]), run from the run's
        // project directory; the result is the reference's `HookResult`, a failure included.
        "hook" => {
            let hook_type = required(def, "hook", "hookType")?;
            let mut payload = def["hook"]["payload"].clone();
            if let (Value::Object(m), Some(run_id)) =
                (&mut payload, run_dir.file_name().and_then(|n| n.to_str()))
            {
                m.entry("runId").or_insert_with(|| run_id.into());
            }
            let mut hooks = crate::hooks::Hooks::for_run_dir(run_dir, |k| std::env::var(k).ok());
            if let Some(ms) = def["hook"]["timeout"].as_u64().filter(|ms| *ms > 0) {
                hooks = hooks.with_timeout(Duration::from_millis(ms));
            }
            let result = hooks.call(hook_type, payload).await;
            Ok(Done {
                outcome: Ok(result.to_json()),
                stdout: None,
                stderr: None,
            })
        }
        other => Err(ExecError::Unsupported(other.to_owned())),
    }
}

/// The string at `def.<kind>.<key>`, which the task must have.
fn required<'a>(def: &'a Value, kind: &'static str, key: &str) -> Result<&'a str> {
    def[kind][key].as_str().ok_or_else(|| ExecError::BadTask {
        kind,
        reason: format!("{kind}.{key} is missing or not a string"),
    })
}

/// `env` of a shell or node task: strings as they are, other JSON values as JSON text.
fn set_env(cmd: &mut Command, env: &Value) {
    if let Some(env) = env.as_object() {
        for (k, v) in env {
            cmd.env(
                k,
                v.as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| v.to_string()),
            );
        }
    }
}

pub(crate) struct Ran {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) timed_out: bool,
}

fn finish(r: Ran, expected: i64, what: &str) -> Done {
    let code = r.code.map(i64::from);
    let ok = !r.timed_out && code == Some(expected);
    let outcome = if ok {
        Ok(json!({"success": true, "exitCode": code, "stdout": r.stdout, "stderr": r.stderr}))
    } else {
        let message = if r.timed_out {
            format!("`{what}` timed out")
        } else {
            match code {
                Some(c) => format!("`{what}` exited with code {c}"),
                None => format!("`{what}` was killed by a signal"),
            }
        };
        Err(json!({"name": "CommandError", "message": message,
                   "data": {"exitCode": code.unwrap_or(-1), "stdout": r.stdout, "stderr": r.stderr, "error": message}}))
    };
    Done {
        outcome,
        stdout: Some(r.stdout),
        stderr: Some(r.stderr),
    }
}

/// Reads a stream to its end, keeping the first [`MAX_OUTPUT`] bytes (marked when cut).
pub(crate) async fn read_capped(mut r: impl tokio::io::AsyncRead + Unpin) -> String {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut truncated = false;
    loop {
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if buf.len() < MAX_OUTPUT {
                    let take = n.min(MAX_OUTPUT - buf.len());
                    buf.extend_from_slice(&chunk[..take]);
                    truncated |= take < n;
                } else {
                    truncated = true;
                }
            }
        }
    }
    let mut s = String::from_utf8_lossy(&buf).into_owned();
    if truncated {
        s.push_str("\n[output truncated]\n");
    }
    s
}

async fn run(
    mut cmd: Command,
    what: &str,
    task: Task<'_>,
    timeout: Duration,
    stop: &CancellationToken,
) -> Result<Ran> {
    cmd.env("BABYSITTER_RUN_DIR", task.work_dir)
        .env("BABYSITTER_EFFECT_ID", task.effect_id);
    if let Some(attempt) = task.attempt {
        cmd.envs(attempt.env());
        // A cwd the task names was set by the caller and wins.
        if cmd.as_std().get_current_dir().is_none() {
            cmd.current_dir(task.work_dir);
        }
    }
    // On a worker, the task's processes end with it; `babysitter run` leaves what a command
    // started in the background alone, as babysitter does.
    let leftovers = if task.attempt.is_some() {
        Leftovers::Kill
    } else {
        Leftovers::Keep
    };
    // The command's span (a child of the task's); the command learns it from `TRACEPARENT`, so
    // what it runs (an OTel-instrumented tool, a curl with the header) can join the trace.
    let span =
        tracing::info_span!("task.process", kind = %task.kind, exit_code = tracing::field::Empty);
    // A `TRACEPARENT` the task's own `env` sets wins: it names a trace of the task's choosing.
    let set_by_task = cmd
        .as_std()
        .get_envs()
        .any(|(k, _)| k == babysitter_common::telemetry::TRACEPARENT_ENV);
    if let Some(trace) = W3cContext::of_span(&span).filter(|_| !set_by_task) {
        cmd.envs(trace.env());
    }
    let ran = run_command(cmd, what, None, timeout, stop, leftovers)
        .instrument(span.clone())
        .await;
    if let Ok(r) = &ran {
        span.record("exit_code", r.code);
    }
    ran
}

/// What happens to processes a command leaves running in its group when it exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leftovers {
    Kill,
    Keep,
}

/// Runs `cmd` (built by [`group::command`]) with `input` on its stdin (else none), its output
/// captured (bounded); the group is killed at `timeout`, on `stop`, or if this is dropped.
pub(crate) async fn run_command(
    mut cmd: Command,
    what: &str,
    input: Option<Vec<u8>>,
    timeout: Duration,
    stop: &CancellationToken,
    leftovers: Leftovers,
) -> Result<Ran> {
    cmd.stdin(if input.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    })
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    let mut group = group::spawn(&mut cmd).map_err(|source| ExecError::Spawn {
        what: what.to_owned(),
        source,
    })?;
    let child = group.child();
    if let (Some(bytes), Some(mut stdin)) = (input, child.stdin.take()) {
        // A command that never reads its input must not hold us: written aside, and a closed
        // pipe is its business.
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt as _;
            let _ = stdin.write_all(&bytes).await;
        });
    }
    let out = child.stdout.take().map(|s| tokio::spawn(read_capped(s)));
    let err = child.stderr.take().map(|s| tokio::spawn(read_capped(s)));
    let mut timed_out = false;
    let waited = tokio::select! {
        s = group.wait() => Some(s),
        _ = tokio::time::sleep(timeout) => { timed_out = true; None }
        _ = stop.cancelled() => None,
    };
    // The whole process group: the command and everything it started.
    let status = match waited {
        Some(s) => {
            if leftovers == Leftovers::Kill {
                group.kill();
            } else {
                group.disarm();
            }
            s
        }
        None => group.kill_and_wait().await,
    }
    .map_err(|source| ExecError::Wait {
        what: what.to_owned(),
        source,
    })?;
    let stdout = match out {
        Some(h) => h.await.unwrap_or_default(),
        None => String::new(),
    };
    let stderr = match err {
        Some(h) => h.await.unwrap_or_default(),
        None => String::new(),
    };
    Ok(Ran {
        code: status.code(),
        stdout,
        stderr,
        timed_out,
    })
}
