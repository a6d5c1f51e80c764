//! Executes the effects `babysitter run` handles itself: shell commands, node scripts, hooks.
//!
//! Each command runs in its own process group, killed as a whole on timeout or Ctrl-C; output
//! is captured (bounded) and handed back with the result, the way `task:post` would post it.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio_util::sync::CancellationToken;

/// Largest output kept per stream.
const MAX_OUTPUT: usize = 1024 * 1024;
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// What an executed effect produced.
#[derive(Debug)]
pub struct Done {
    pub outcome: Result<Value, Value>,
    pub stdout: Option<String>,
    pub stderr: Option<String>,
}

pub async fn execute(action: &Value, run_dir: &Path, stop: &CancellationToken) -> Result<Done> {
    let def = &action["taskDef"];
    match action["kind"].as_str().unwrap_or_default() {
        "shell" => {
            let command = def["shell"]["command"]
                .as_str()
                .context("shell task without shell.command")?;
            let timeout = def["shell"]["timeout"]
                .as_u64()
                .map(Duration::from_millis)
                .unwrap_or(DEFAULT_TIMEOUT);
            let expected = def["shell"]["expectedExitCode"].as_i64().unwrap_or(0);
            let mut cmd = Command::new("sh");
            cmd.arg("-c").arg(command);
            if let Some(cwd) = def["shell"]["cwd"].as_str() {
                cmd.current_dir(cwd);
            }
            let r = run(cmd, action, run_dir, timeout, stop).await?;
            Ok(finish(r, expected, command))
        }
        "node" => {
            let entry = def["node"]["entry"]
                .as_str()
                .context("node task without node.entry")?;
            let timeout = def["node"]["timeoutMs"]
                .as_u64()
                .map(Duration::from_millis)
                .unwrap_or(DEFAULT_TIMEOUT);
            let mut cmd = Command::new("node");
            cmd.arg(entry);
            if let Some(args) = def["node"]["args"].as_array() {
                cmd.args(args.iter().map(|a| {
                    a.as_str()
                        .map(str::to_owned)
                        .unwrap_or_else(|| a.to_string())
                }));
            }
            if let Some(env) = def["node"]["env"].as_object() {
                for (k, v) in env {
                    cmd.env(
                        k,
                        v.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| v.to_string()),
                    );
                }
            }
            if let Some(cwd) = def["node"]["cwd"].as_str() {
                cmd.current_dir(cwd);
            }
            let r = run(cmd, action, run_dir, timeout, stop).await?;
            let mut done = finish(r, 0, &format!("node {entry}"));
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
        // No hook dispatcher is configured in a local run: the hook ran nothing.
        "hook" => Ok(Done {
            outcome: Ok(
                json!({"hookType": def["hook"]["hookType"], "success": true, "executedHooks": []}),
            ),
            stdout: None,
            stderr: None,
        }),
        other => anyhow::bail!("babysitter run cannot execute tasks of kind `{other}`"),
    }
}

struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    timed_out: bool,
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

async fn read_capped(mut r: impl tokio::io::AsyncRead + Unpin) -> String {
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
    action: &Value,
    run_dir: &Path,
    timeout: Duration,
    stop: &CancellationToken,
) -> Result<Ran> {
    cmd.env("BABYSITTER_RUN_DIR", run_dir)
        .env(
            "BABYSITTER_EFFECT_ID",
            action["effectId"].as_str().unwrap_or_default(),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    let mut child = cmd.spawn().context("cannot start the command")?;
    let pid = child.id();
    let out = child.stdout.take().map(|s| tokio::spawn(read_capped(s)));
    let err = child.stderr.take().map(|s| tokio::spawn(read_capped(s)));
    let mut timed_out = false;
    let status = tokio::select! {
        s = child.wait() => Some(s.context("waiting for the command")?),
        _ = tokio::time::sleep(timeout) => { timed_out = true; None }
        _ = stop.cancelled() => None,
    };
    let status = match status {
        Some(s) => s,
        None => {
            // The whole process group: the shell and everything it started.
            if let Some(pid) = pid.and_then(|p| rustix::process::Pid::from_raw(p as i32)) {
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
            child
                .wait()
                .await
                .context("waiting for the killed command")?
        }
    };
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
