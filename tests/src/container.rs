//! `weed mini` in the local FROM-scratch image, through testcontainers (toolchain.md §6.2, §6.3).

use std::time::Duration;

use anyhow::Context as _;
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};

use crate::s3::{Liveness, NotReady, S3Target, wait_ready};
use crate::weed::WeedPorts;
use crate::{IT_DOCKER_ENV, tail};

const READY_TIMEOUT: Duration = Duration::from_secs(30);
const START_ATTEMPTS: usize = 3;
const LOG_TAIL_LINES: usize = 40;

/// A `weed mini` container from the local image `local/seaweedfs-mini:4.48`.
///
/// Host network: weed binds `127.0.0.1` itself, on free ports chosen like [`crate::SeaweedFs`]
/// does (CMD overridden), so no bridge address is ever used. The container handle is kept for
/// the fixture's lifetime; dropping the fixture removes the container (from inside a tokio
/// runtime: use the multi-thread flavor, testcontainers blocks on the removal there).
#[derive(Debug)]
pub struct SeaweedContainer {
    target: S3Target,
    ready_after: Duration,
    container: ContainerAsync<GenericImage>,
}

impl SeaweedContainer {
    /// Image name of the local SeaweedFS image.
    pub const IMAGE_NAME: &'static str = "local/seaweedfs-mini";
    /// Pinned tag of the local SeaweedFS image.
    pub const IMAGE_TAG: &'static str = crate::SEAWEEDFS_VERSION;

    /// Whether container tests are switched on (`BABYSITTER_IT_DOCKER=1`).
    pub fn enabled() -> bool {
        std::env::var(IT_DOCKER_ENV).as_deref() == Ok("1")
    }

    /// Starts the container and returns once a real signed PUT succeeded.
    ///
    /// Unless `BABYSITTER_IT_DOCKER=1`, records the calling test as skipped ([`crate::skip`]:
    /// it panics under `BABYSITTER_REQUIRE_ALL=1`) and returns `Ok(None)`, and the test returns
    /// at once. When enabled, a missing image is an error (nothing is ever pulled), as is a
    /// container that exits or accepts no PUT within 30 s; the error quotes the tail of the
    /// container's log.
    pub async fn start() -> anyhow::Result<Option<Self>> {
        if !Self::enabled() {
            crate::skip::skip::<()>(format!(
                "needs dockerd and the image {}:{}: set {IT_DOCKER_ENV}=1 with a running dockerd \
                 and the image built by deploy/seaweedfs/build-image.sh (`.ci/run` does both)",
                Self::IMAGE_NAME,
                Self::IMAGE_TAG
            ));
            return Ok(None);
        }
        ensure_image().await?;
        for attempt in 1..=START_ATTEMPTS {
            if let Some(c) = Self::start_once().await? {
                tracing::info!(
                    id = c.id(),
                    endpoint = c.endpoint(),
                    ready_after_ms = c.ready_after.as_millis() as u64,
                    "weed mini container ready"
                );
                return Ok(Some(c));
            }
            tracing::warn!(attempt, "weed mini container found a port taken; retrying");
        }
        anyhow::bail!(
            "weed mini container found one of its ports taken in {START_ATTEMPTS} starts in a row"
        )
    }

    async fn start_once() -> anyhow::Result<Option<Self>> {
        let ports = WeedPorts::pick()?;
        let started = tokio::time::Instant::now();
        let container = GenericImage::new(Self::IMAGE_NAME, Self::IMAGE_TAG)
            .with_network("host")
            .with_env_var("GOMEMLIMIT", "100MiB")
            .with_cmd(ports.mini_args("/data", "/etc/seaweedfs/s3.json"))
            .start()
            .await
            .with_context(|| {
                format!(
                    "starting a container from {}:{}",
                    Self::IMAGE_NAME,
                    Self::IMAGE_TAG
                )
            })?;
        let target = S3Target::loopback(ports.s3);
        let result = wait_ready(&target, READY_TIMEOUT, || container_liveness(&container)).await;
        let fixture = |ready_after| Self {
            target: target.clone(),
            ready_after,
            container,
        };
        match result {
            Ok(_) => Ok(Some(fixture(started.elapsed()))),
            Err(NotReady::PortClash) => Ok(None),
            Err(NotReady::Exited(how)) => {
                let c = fixture(Duration::ZERO);
                Err(anyhow::anyhow!(
                    "container {} {how} before it was ready; log tail:\n{}",
                    c.id(),
                    c.log_tail().await
                ))
            }
            Err(NotReady::Timeout(last)) => {
                let c = fixture(Duration::ZERO);
                Err(anyhow::anyhow!(
                    "container {} did not accept a signed PUT on {} within {}s (last error: \
                     {last}); log tail:\n{}",
                    c.id(),
                    c.endpoint(),
                    READY_TIMEOUT.as_secs(),
                    c.log_tail().await
                ))
            }
            Err(NotReady::Failed(e)) => {
                let c = fixture(Duration::ZERO);
                let log = c.log_tail().await;
                Err(e.context(format!(
                    "waiting for container {}; log tail:\n{log}",
                    c.id()
                )))
            }
        }
    }

    /// The container id.
    pub fn id(&self) -> &str {
        self.container.id()
    }

    /// Time from `start()` of the container to the first successful signed PUT.
    pub fn ready_after(&self) -> Duration {
        self.ready_after
    }

    /// The testcontainers handle, for anything the accessors do not cover.
    pub fn container(&self) -> &ContainerAsync<GenericImage> {
        &self.container
    }

    /// The last lines of the container's stdout and stderr.
    pub async fn log_tail(&self) -> String {
        let mut log = self.container.stdout_to_vec().await.unwrap_or_default();
        log.extend(self.container.stderr_to_vec().await.unwrap_or_default());
        tail(&log, LOG_TAIL_LINES)
    }

    crate::delegate_s3_accessors!();
}

async fn container_liveness(container: &ContainerAsync<GenericImage>) -> anyhow::Result<Liveness> {
    if container
        .is_running()
        .await
        .context("asking dockerd about the container")?
    {
        // weed keeps running with one component dead when its port is taken: look at the log.
        let log = container.stderr_to_vec().await.unwrap_or_default();
        if String::from_utf8_lossy(&log).contains("address already in use") {
            return Ok(Liveness::PortClash);
        }
        return Ok(Liveness::Alive);
    }
    let log = container.stderr_to_vec().await.unwrap_or_default();
    if String::from_utf8_lossy(&log).contains("address already in use") {
        return Ok(Liveness::PortClash);
    }
    let code = container.exit_code().await.ok().flatten();
    Ok(Liveness::Exited(match code {
        Some(code) => format!("exited with code {code}"),
        None => "stopped".to_owned(),
    }))
}

/// The image must be there already: a missing image would make testcontainers try to pull it.
async fn ensure_image() -> anyhow::Result<()> {
    let image = format!(
        "{}:{}",
        SeaweedContainer::IMAGE_NAME,
        SeaweedContainer::IMAGE_TAG
    );
    let out = tokio::process::Command::new("docker")
        .args(["image", "inspect", "--format", "{{.Id}}", &image])
        .output()
        .await
        .context("running `docker image inspect` (is the docker CLI installed?)")?;
    anyhow::ensure!(
        out.status.success(),
        "image {image} is missing ({}); build it with deploy/seaweedfs/build-image.sh \
         (`.ci/run` does)",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}
