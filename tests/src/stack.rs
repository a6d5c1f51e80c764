//! The compose stack (`deploy/compose/`) as testcontainers: SeaweedFS, the journal, the
//! orchestrator and N workers, each in its own container from the images `deploy/images/build.sh`
//! builds, on a user-defined bridge network of their own.
//!
//! Why not `docker-compose up`: a test has to kill, restart and cut off single containers, and
//! every container it starts must go when it ends, failed or not (testcontainers removes each on
//! drop, and the network with the last one). What users run must still be what is tested, so
//! the services' settings are read from the same files compose.yaml uses — `env/<service>.env`
//! and `config/<service>.toml` under `deploy/compose/` — and the changes a test makes are
//! explicit: container names get a per-test prefix (the compose service names, `journal`,
//! `orchestrator`, `seaweedfs`, are rewritten in the env values: tests run in parallel), the
//! token files are the test's, ports are published on 127.0.0.1 (the journal's too, so a test can
//! read the journal directly), and a test may add settings (short leases).
//!
//! Gated like [`crate::SeaweedContainer`]: `BABYSITTER_IT_DOCKER=1` and the images present, else
//! [`crate::skip`] (a failure under `BABYSITTER_REQUIRE_ALL=1`).

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use testcontainers::core::{IntoContainerPort, Mount, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use crate::s3::{Liveness, NotReady, S3Target, wait_ready};
use crate::{IT_DOCKER_ENV, SeaweedContainer, free_port, tail};

/// The images' tag: the workspace version (`deploy/images/build.sh` tags it).
pub const IMAGE_TAG: &str = env!("CARGO_PKG_VERSION");
/// The service images the stack runs.
pub const IMAGES: [&str; 4] = [
    "babysitter/journal",
    "babysitter/orchestrator",
    "babysitter/harness-launcher",
    "babysitter/transport-proxy",
];
/// Tokens the stack's configs name (`/run/secrets/<name>.token`), with the test's values.
pub const TOKENS: [(&str, &str); 5] = [
    ("journal", "journal-token-0123456789abcdef"),
    ("client", "client-token-0123456789abcdef"),
    ("worker", "worker-token-0123456789abcdef"),
    ("proxy-admin", "proxy-admin-token-0123456789"),
    ("launcher-admin", "launcher-admin-token-01234567"),
];
/// Short leases, heartbeats and sweeps (the process suites' `cluster::orchestrator_args`), as
/// orchestrator env: a crash or a partition is noticed within seconds.
pub const SHORT_LEASES: [(&str, &str); 6] = [
    ("BABYSITTER_ORCHESTRATOR__QUEUE__LEASE_DURATION_MS", "2000"),
    (
        "BABYSITTER_ORCHESTRATOR__QUEUE__HEARTBEAT_INTERVAL_MS",
        "300",
    ),
    ("BABYSITTER_ORCHESTRATOR__QUEUE__MAX_POLL_WAIT_MS", "2000"),
    ("BABYSITTER_ORCHESTRATOR__QUEUE__RETRY_BACKOFF_MS", "100"),
    ("BABYSITTER_ORCHESTRATOR__RUNS__SWEEP_INTERVAL_MS", "100"),
    ("BABYSITTER_ORCHESTRATOR__LEADERSHIP__TTL_MS", "2000"),
];
/// Where the workers see the test's ledger directory.
pub const LEDGER_MOUNT: &str = "/ledger";

/// `deploy/compose/`.
pub fn compose_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/compose")
}

/// `KEY=VALUE` lines of `deploy/compose/env/<service>.env` (comments and blank lines skipped).
pub fn compose_env(service: &str) -> anyhow::Result<Vec<(String, String)>> {
    let path = compose_dir().join("env").join(format!("{service}.env"));
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect())
}

/// Whether container tests may run: `BABYSITTER_IT_DOCKER=1` and every image of [`IMAGES`]
/// present. Otherwise records the skip ([`crate::skip`]: a failure under
/// `BABYSITTER_REQUIRE_ALL=1`) and returns false.
pub async fn images_ready() -> bool {
    if !SeaweedContainer::enabled() {
        crate::skip::skip::<()>(format!(
            "needs dockerd and the images: set {IT_DOCKER_ENV}=1 with a running dockerd, after \
                 deploy/images/build.sh and deploy/seaweedfs/build-image.sh (`.ci/run` does all)"
        ));
        return false;
    }
    let mut missing = Vec::new();
    for image in IMAGES {
        let tagged = format!("{image}:{IMAGE_TAG}");
        if docker(&["image", "inspect", "--format", "{{.Id}}", &tagged])
            .await
            .is_err()
        {
            missing.push(tagged);
        }
    }
    let seaweed = format!(
        "{}:{}",
        SeaweedContainer::IMAGE_NAME,
        SeaweedContainer::IMAGE_TAG
    );
    if docker(&["image", "inspect", "--format", "{{.Id}}", &seaweed])
        .await
        .is_err()
    {
        missing.push(seaweed);
    }
    if !missing.is_empty() {
        crate::skip::skip::<()>(format!(
            "needs the images {missing:?}: cargo build --release --bins && \
                 deploy/images/build.sh (`.ci/run` does)"
        ));
        return false;
    }
    true
}

/// One service container and its published 127.0.0.1 port.
#[derive(Debug)]
pub struct Service {
    /// Container name (`<prefix>-<service>`).
    pub name: String,
    /// The host port its gRPC port is published on (0: not published).
    pub port: u16,
    container: ContainerAsync<GenericImage>,
}

impl Service {
    /// The container id.
    pub fn id(&self) -> &str {
        self.container.id()
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// SIGKILL to the container (its every process dies); when it happened.
    pub async fn kill(&self) -> anyhow::Result<SystemTime> {
        docker(&["kill", self.id()]).await?;
        Ok(SystemTime::now())
    }

    /// Starts the stopped container again (same name, ports, mounts; fresh tmpfs).
    pub async fn restart(&self) -> anyhow::Result<()> {
        self.container
            .start()
            .await
            .with_context(|| format!("restarting {}", self.name))
    }

    /// The last `lines` lines of its stdout and stderr.
    pub async fn log_tail(&self, lines: usize) -> String {
        let mut log = self.container.stdout_to_vec().await.unwrap_or_default();
        log.extend(self.container.stderr_to_vec().await.unwrap_or_default());
        tail(&log, lines)
    }

    /// Its whole stderr (the services log there).
    pub async fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.container.stderr_to_vec().await.unwrap_or_default())
            .into_owned()
    }
}

/// The running stack; dropping it removes every container and the network.
#[derive(Debug)]
pub struct ContainerStack {
    /// The per-test prefix of container names, also the network's name.
    pub prefix: String,
    /// Workers, in start order (dropped first).
    pub workers: Vec<Service>,
    /// The orchestrator (its port is what clients use).
    pub orchestrator: Service,
    /// The journal (published too, for reading the journal directly).
    pub journal: Service,
    /// SeaweedFS.
    pub seaweed: Service,
    /// The transport proxy, when started ([`Self::add_proxy`]; its control API's port).
    pub proxy: Option<Service>,
    /// Token files, configs and the ledger directory.
    pub dir: tempfile::TempDir,
}

impl ContainerStack {
    /// Starts SeaweedFS, the journal, the orchestrator (with `orchestrator_env` added to its
    /// compose env) and `workers` workers; returns once the orchestrator is active (it holds the
    /// journal's lease) and each worker printed its start line. `Ok(None)`: skipped (not enabled, or the images are missing; a failure under
    /// `BABYSITTER_REQUIRE_ALL=1`).
    pub async fn start(
        workers: usize,
        orchestrator_env: &[(&str, &str)],
    ) -> anyhow::Result<Option<Self>> {
        if !images_ready().await {
            return Ok(None);
        }
        let prefix = format!("bs-{}", crate::test_prefix("").get(14..).unwrap_or("x"));
        let dir = tempfile::tempdir()?;
        for (name, value) in TOKENS {
            let p = dir.path().join(format!("{name}.token"));
            std::fs::write(&p, format!("{value}\n"))?;
            set_mode(&p, 0o644)?;
        }
        let ledger = dir.path().join("ledger");
        std::fs::create_dir(&ledger)?;
        set_mode(&ledger, 0o777)?;
        set_mode(dir.path(), 0o755)?;

        let seaweed = start_seaweed(&prefix).await?;
        let journal = start_service(
            &prefix,
            dir.path(),
            ServiceSpec::new("journal", 50051).config("journal.toml"),
            &[],
        )
        .await?;
        let orchestrator = start_service(
            &prefix,
            dir.path(),
            ServiceSpec::new("orchestrator", 50052).config("orchestrator.toml"),
            orchestrator_env,
        )
        .await?;
        let mut stack = Self {
            prefix,
            workers: Vec::new(),
            orchestrator,
            journal,
            seaweed,
            proxy: None,
            dir,
        };
        for _ in 0..workers {
            stack.add_worker().await?;
        }
        Ok(Some(stack))
    }

    /// Starts one more worker; its index in [`Self::workers`].
    pub async fn add_worker(&mut self) -> anyhow::Result<usize> {
        let n = self.workers.len();
        let spec = ServiceSpec::new("harness-launcher", 0)
            .config("harness-launcher.toml")
            .named(&format!("w{n}"));
        let w = start_service(&self.prefix, self.dir.path(), spec, &[]).await?;
        self.workers.push(w);
        Ok(n)
    }

    /// Starts the transport proxy (compose settings; a placeholder upstream key, no requests are
    /// sent upstream); its published port is its control API's (gRPC, with health).
    pub async fn add_proxy(&mut self) -> anyhow::Result<&Service> {
        let spec = ServiceSpec::new("transport-proxy", 50054).config("transport-proxy.toml");
        let env = [("ANTHROPIC_API_KEY", "sk-placeholder")];
        let p = start_service(&self.prefix, self.dir.path(), spec, &env).await?;
        Ok(self.proxy.insert(p))
    }

    /// `http://127.0.0.1:<port>` of the orchestrator.
    pub fn url(&self) -> String {
        format!("http://{}", self.orchestrator.addr())
    }

    /// The ledger file on the host (`/ledger/ledger` in the workers).
    pub fn ledger(&self) -> PathBuf {
        self.dir.path().join("ledger").join("ledger")
    }

    /// Cuts `service` off the stack's network (a partition: it keeps running).
    pub async fn disconnect(&self, service: &Service) -> anyhow::Result<()> {
        docker(&["network", "disconnect", &self.prefix, service.id()]).await
    }

    /// Puts `service` back on the stack's network.
    pub async fn reconnect(&self, service: &Service) -> anyhow::Result<()> {
        docker(&["network", "connect", &self.prefix, service.id()]).await
    }

    /// The tails of every container's log, for a failure message.
    pub async fn logs(&self) -> String {
        let mut s = String::new();
        for svc in [&self.orchestrator, &self.journal]
            .into_iter()
            .chain(&self.workers)
        {
            s.push_str(&format!("--- {}\n{}\n", svc.name, svc.log_tail(30).await));
        }
        s
    }
}

/// What differs between the babysitter services' containers.
struct ServiceSpec<'a> {
    service: &'a str,
    name: String,
    grpc_port: u16,
    config: Option<&'a str>,
}

impl<'a> ServiceSpec<'a> {
    fn new(service: &'a str, grpc_port: u16) -> Self {
        Self {
            service,
            name: service.to_owned(),
            grpc_port,
            config: None,
        }
    }

    fn config(mut self, file: &'a str) -> Self {
        self.config = Some(file);
        self
    }

    fn named(mut self, name: &str) -> Self {
        self.name = name.to_owned();
        self
    }
}

async fn start_service(
    prefix: &str,
    dir: &Path,
    spec: ServiceSpec<'_>,
    extra_env: &[(&str, &str)],
) -> anyhow::Result<Service> {
    let name = format!("{prefix}-{}", spec.name);
    let ready = match spec.service {
        "harness-launcher" => "harness-launcher ".to_owned(),
        // Listening is not enough: until it holds the journal's lease it stands by and
        // refuses runs (and a worker registering then is not known to the active one).
        "orchestrator" => "orchestrator active: ".to_owned(),
        s => format!("{s} listening on "),
    };
    let mut req = GenericImage::new(format!("babysitter/{}", spec.service), IMAGE_TAG.to_owned())
        .with_wait_for(WaitFor::message_on_stderr(ready))
        .with_network(prefix)
        .with_container_name(&name)
        .with_readonly_rootfs(true)
        .with_startup_timeout(Duration::from_secs(60));
    // tmpfs as compose.yaml mounts them (`HostConfig.Tmpfs`, like `--tmpfs`): dockerd 20.10
    // leaves a `Mounts` tmpfs root-owned 0755 whatever its mode, which uid 65532 cannot write.
    let mut tmpfs = vec![
        ("/tmp", "mode=1777"),
        ("/data", "uid=65532,gid=65532,mode=0700"),
    ];
    if spec.service == "harness-launcher" {
        tmpfs.push(("/home/nonroot", "uid=65532,gid=65532,mode=0700"));
    }
    let tmpfs: std::collections::HashMap<String, String> = tmpfs
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    req = req.with_host_config_modifier(move |hc| {
        loopback_ports(hc);
        hc.tmpfs = Some(tmpfs.clone());
    });
    for (k, v) in compose_env(spec.service)? {
        req = req.with_env_var(k, rename_hosts(prefix, &v));
    }
    for (k, v) in extra_env {
        req = req.with_env_var(*k, *v);
    }
    for (token, _) in TOKENS {
        let host = dir.join(format!("{token}.token"));
        req = req.with_mount(
            Mount::bind_mount(
                host.display().to_string(),
                format!("/run/secrets/{token}.token"),
            )
            .with_access_mode(testcontainers::core::AccessMode::ReadOnly),
        );
    }
    if let Some(config) = spec.config {
        let host = compose_dir().join("config").join(config);
        let host = host
            .canonicalize()
            .with_context(|| host.display().to_string())?;
        req = req.with_mount(
            Mount::bind_mount(
                host.display().to_string(),
                format!("/etc/babysitter/{config}"),
            )
            .with_access_mode(testcontainers::core::AccessMode::ReadOnly),
        );
    }
    if spec.service == "harness-launcher" {
        req = req.with_mount(Mount::bind_mount(
            dir.join("ledger").display().to_string(),
            LEDGER_MOUNT,
        ));
    }
    let port = if spec.grpc_port > 0 {
        let p = free_port()?;
        req = req.with_mapped_port(p, spec.grpc_port.tcp());
        p
    } else {
        0
    };
    let container = req
        .start()
        .await
        .with_context(|| format!("starting {name} from babysitter/{}", spec.service))?;
    Ok(Service {
        name,
        port,
        container,
    })
}

/// SeaweedFS under the name the journal's env expects, ready once a signed PUT succeeded.
async fn start_seaweed(prefix: &str) -> anyhow::Result<Service> {
    let name = format!("{prefix}-seaweedfs");
    let port = free_port()?;
    let container = GenericImage::new(SeaweedContainer::IMAGE_NAME, SeaweedContainer::IMAGE_TAG)
        .with_network(prefix)
        .with_container_name(&name)
        .with_mapped_port(port, 8333.tcp())
        .with_host_config_modifier(loopback_ports)
        .start()
        .await
        .context("starting SeaweedFS")?;
    let target = S3Target::loopback(port);
    let alive = || async { Ok(Liveness::Alive) };
    if let Err(e) = wait_ready(&target, Duration::from_secs(60), alive).await {
        let why = match e {
            NotReady::Timeout(last) => format!("no signed PUT within 60 s ({last})"),
            NotReady::Failed(e) => format!("{e:#}"),
            NotReady::Exited(how) => how,
            NotReady::PortClash => "a port clash".to_owned(),
        };
        let mut log = container.stderr_to_vec().await.unwrap_or_default();
        log.extend(container.stdout_to_vec().await.unwrap_or_default());
        anyhow::bail!("SeaweedFS not ready: {why}\n{}", tail(&log, 30));
    }
    Ok(Service {
        name,
        port,
        container,
    })
}

/// `http://journal:…` → `http://<prefix>-journal:…`, likewise `orchestrator` and `seaweedfs`.
fn rename_hosts(prefix: &str, value: &str) -> String {
    let mut v = value.to_owned();
    for host in ["seaweedfs", "journal", "orchestrator"] {
        v = v.replace(&format!("//{host}:"), &format!("//{prefix}-{host}:"));
    }
    v
}

/// Published ports bind 127.0.0.1 whatever dockerd's default is.
fn loopback_ports(hc: &mut testcontainers::bollard::models::HostConfig) {
    if let Some(bindings) = hc.port_bindings.as_mut() {
        for b in bindings.values_mut().flatten().flatten() {
            b.host_ip = Some("127.0.0.1".to_owned());
        }
    }
}

fn set_mode(path: &Path, mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("chmod {}", path.display()))
}

/// Runs the docker CLI; its stderr in the error.
pub async fn docker(args: &[&str]) -> anyhow::Result<()> {
    let out = tokio::process::Command::new("docker")
        .args(args)
        .output()
        .await
        .context("running the docker CLI")?;
    anyhow::ensure!(
        out.status.success(),
        "docker {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compose_env_files_parse_and_hosts_are_renamed() {
        let env = compose_env("orchestrator").unwrap();
        let remote = env
            .iter()
            .find(|(k, _)| k == "BABYSITTER_ORCHESTRATOR__JOURNAL__REMOTE")
            .map(|(_, v)| rename_hosts("bs-x", v));
        assert_eq!(remote.as_deref(), Some("http://bs-x-journal:50051"));
        for s in ["journal", "harness-launcher", "transport-proxy"] {
            assert!(!compose_env(s).unwrap().is_empty(), "{s}");
        }
    }
}
