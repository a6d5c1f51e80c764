//! The workspace's service binaries as child processes of a test: started with their flags,
//! ready once they print their "listening" line, their stderr kept in a log file, and stopped
//! by PID (SIGTERM, then SIGKILL) when dropped — or killed with SIGKILL on purpose
//! ([`ServiceProcess::kill9`]) to test crashes.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail};

/// A workspace binary (`journal`, `orchestrator`, `harness-launcher`) from this build's target
/// directory: the directory above the test executable's `deps/`.
pub fn workspace_bin(name: &str) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .context("test executable has no parent directory")?;
    let bin = dir.join(name);
    if !bin.is_file() {
        bail!(
            "{} is missing: build the workspace binaries first (`cargo build --workspace --bins`)",
            bin.display()
        );
    }
    Ok(bin)
}

/// One running service process.
#[derive(Debug)]
pub struct ServiceProcess {
    name: String,
    child: Option<Child>,
    /// What followed `ready_prefix` on the ready line (the address, for servers).
    pub ready: String,
    log: PathBuf,
}

impl ServiceProcess {
    /// Starts `bin` with `args` and `envs`, waits (up to 60 s) for a stderr line starting with
    /// `ready_prefix`, then copies the rest of stderr to `log`.
    pub fn start(
        bin: &Path,
        args: &[String],
        envs: &[(String, String)],
        ready_prefix: &str,
        log: PathBuf,
    ) -> anyhow::Result<Self> {
        let name = bin
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut cmd = Command::new(bin);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", bin.display()))?;
        let stderr = child.stderr.take().context("no stderr")?;
        let (tx, rx) = std::sync::mpsc::channel::<Result<String, String>>();
        let prefix = ready_prefix.to_owned();
        let log_path = log.clone();
        std::thread::spawn(move || {
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_path)
                .ok();
            let mut sent = false;
            let mut seen = String::new();
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(f) = file.as_mut() {
                    let _ = writeln!(f, "{line}");
                }
                if !sent {
                    seen.push_str(&line);
                    seen.push('\n');
                    if let Some(rest) = line.strip_prefix(&prefix) {
                        let _ = tx.send(Ok(rest.trim().to_owned()));
                        sent = true;
                    }
                }
            }
            if !sent {
                let _ = tx.send(Err(seen));
            }
        });
        let ready = match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(Ok(rest)) => rest,
            Ok(Err(output)) => {
                let _ = child.wait();
                bail!("{name} exited before it was ready:\n{output}");
            }
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("{name} did not become ready within 60 s");
            }
        };
        Ok(Self {
            name,
            child: Some(child),
            ready,
            log,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL, no cleanup: a crash.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM and wait (up to 30 s) for a graceful exit; the exit status, `None` if it had to be
    /// killed.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        for _ in 0..600 {
            if let Ok(Some(status)) = child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
        None
    }

    /// The last `lines` lines of its stderr log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::tail(&std::fs::read(&self.log).unwrap_or_default(), lines)
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for ServiceProcess {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        for _ in 0..100 {
            if matches!(child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// A free 127.0.0.1 port outside the ephemeral range, for a server that is restarted on the
/// same address (see `ports`).
pub fn free_port() -> anyhow::Result<u16> {
    crate::ports::pick_free_port()
}
