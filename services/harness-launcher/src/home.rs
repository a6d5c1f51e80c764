//! The worker's home: the directory one worker owns while it runs, and what a worker that dies
//! leaves there for the next one.
//!
//! Why: a worker that dies mid-task leaves two things behind that must not be lost or
//! repeated — processes still running (which would overlap the task's next attempt) and
//! finished results the orchestrator never acknowledged (whose tasks would run again). Both are
//! kept under a home the next worker started on the same machine takes over:
//! - homes are slots, `<work_dir>/slots/<n>`, each owned through an exclusive `flock` on its
//!   `lock` file, held as long as the worker lives: several workers may share a `work_dir`
//!   (each takes a free slot), and a slot whose lock is free belongs to nobody alive;
//! - **reaper**: every task's processes carry `BABYSITTER_WORKER_HOME=<slot>` in their
//!   environment ([`Home::marker`]); taking a slot kills whatever still runs with its marker;
//! - **spool**: a finished result is written to `<slot>/spool/` (atomically renamed into place)
//!   before it is reported, and removed once the orchestrator answers it; taking a slot hands
//!   over what its previous owner spooled, to be delivered again under the same lease ids;
//! - task working directories live under `<slot>/tasks/`.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use babysitter_proto::orchestrator::v1 as pb;
use prost::Message as _;
use rustix::fs::FlockOperation;
use rustix::process::{Pid, Signal};

/// The environment variable that marks a task's processes as this home's.
pub const HOME_ENV: &str = "BABYSITTER_WORKER_HOME";

/// Slots tried before giving up (more workers than that on one `work_dir` is a mistake).
const MAX_SLOTS: usize = 256;

/// Why a home could not be taken.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HomeError {
    #[error("cannot use {path} as the worker's home: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("every one of the {MAX_SLOTS} worker slots under {0} is held by a live worker")]
    Full(PathBuf),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HomeError + '_ {
    move |source| HomeError::Io {
        path: path.to_owned(),
        source,
    }
}

/// A worker home this process owns until it is dropped.
#[derive(Debug)]
pub struct Home {
    dir: PathBuf,
    marker: String,
    /// Holds the slot's `flock`.
    _lock: File,
}

/// What taking a home found left behind.
#[derive(Debug, Default)]
pub struct Inherited {
    /// Processes of a previous owner that were still running and are now killed.
    pub reaped: Vec<i32>,
    /// Completions a previous owner spooled and never saw answered.
    pub spooled: Vec<Spooled>,
}

/// A completion waiting in the spool.
#[derive(Debug, Clone)]
pub struct Spooled {
    pub path: PathBuf,
    pub request: pb::CompleteTaskRequest,
}

impl Home {
    /// Takes the first free slot under `work_dir`, kills what its previous owner left running
    /// and reads what it spooled.
    pub fn take(work_dir: &Path) -> Result<(Self, Inherited), HomeError> {
        let slots = work_dir.join("slots");
        std::fs::create_dir_all(&slots).map_err(io(&slots))?;
        let slots = slots.canonicalize().map_err(io(&slots))?;
        for n in 0..MAX_SLOTS {
            let dir = slots.join(n.to_string());
            std::fs::create_dir_all(&dir).map_err(io(&dir))?;
            let lock_path = dir.join("lock");
            let lock = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)
                .map_err(io(&lock_path))?;
            match rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(rustix::io::Errno::WOULDBLOCK) => continue,
                Err(e) => return Err(io(&lock_path)(e.into())),
            }
            let marker = dir.display().to_string();
            let home = Self {
                dir,
                marker,
                _lock: lock,
            };
            for sub in ["spool", "tasks"] {
                let p = home.dir.join(sub);
                std::fs::create_dir_all(&p).map_err(io(&p))?;
            }
            let reaped = reap(home.marker());
            let spooled = home.spooled()?;
            return Ok((home, Inherited { reaped, spooled }));
        }
        Err(HomeError::Full(slots))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The value of [`HOME_ENV`] in every task's environment.
    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// Where one attempt of a task works.
    pub fn task_dir(&self, run_id: &str, effect_id: &str, attempt: u32) -> PathBuf {
        self.dir
            .join("tasks")
            .join(file_safe(run_id))
            .join(format!("{}-{attempt}", file_safe(effect_id)))
    }

    fn spool_path(&self, lease_id: &str) -> PathBuf {
        self.dir
            .join("spool")
            .join(format!("{}.pb", file_safe(lease_id)))
    }

    /// Writes a completion before it is reported: written aside, renamed into place. Not
    /// fsynced, on purpose: the spool outlives the worker *process* (the page cache survives a
    /// `kill -9` or an OOM kill), which is what it is for; a machine that loses power loses its
    /// running attempts too, and their tasks run again after the lease (at least once). An fsync
    /// per completion cost 10-20 % of a worker's task throughput (the service bench).
    pub fn spool(&self, req: &pb::CompleteTaskRequest) -> std::io::Result<PathBuf> {
        let path = self.spool_path(&req.lease_id);
        let tmp = path.with_extension("tmp");
        let mut f = File::create(&tmp)?;
        f.write_all(&req.encode_to_vec())?;
        std::fs::rename(&tmp, &path)?;
        Ok(path)
    }

    /// The completions waiting in the spool (a torn or unreadable file — after a power loss —
    /// is logged and removed: its task runs again).
    fn spooled(&self) -> Result<Vec<Spooled>, HomeError> {
        let dir = self.dir.join("spool");
        let mut out = Vec::new();
        for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
            let path = entry.map_err(io(&dir))?.path();
            if path.extension().is_some_and(|e| e == "tmp") {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            match std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| {
                    pb::CompleteTaskRequest::decode(b.as_slice()).map_err(|e| e.to_string())
                }) {
                Ok(request) => out.push(Spooled { path, request }),
                Err(e) => {
                    tracing::error!(path = %path.display(), error = %e, "an unreadable spooled completion is dropped");
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }
}

/// Removes a delivered completion from the spool.
pub fn unspool(path: &Path) {
    if let Err(e) = std::fs::remove_file(path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!(path = %path.display(), error = %e, "cannot remove a delivered completion from the spool");
    }
}

/// A path component from an id: ids are ULIDs and effect ids, but nothing from outside reaches
/// the filesystem unchecked.
fn file_safe(id: &str) -> String {
    let s: String = id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() { "_".into() } else { s }
}

/// Kills every process (and its process group) whose environment carries `marker` as
/// [`HOME_ENV`]; returns their pids. Processes of other users are not readable and not ours.
fn reap(marker: &str) -> Vec<i32> {
    let needle = format!("{HOME_ENV}={marker}\0");
    let me = std::process::id() as i32;
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut reaped = Vec::new();
    for entry in procs.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let found = env
            .split_inclusive(|b| *b == 0)
            .any(|var| var == needle.as_bytes());
        if !found {
            continue;
        }
        if let Some(p) = Pid::from_raw(pid) {
            if let Ok(g) = rustix::process::getpgid(Some(p))
                && g != rustix::process::getpgrp()
            {
                let _ = rustix::process::kill_process_group(g, Signal::KILL);
            }
            let _ = rustix::process::kill_process(p, Signal::KILL);
            reaped.push(pid);
        }
    }
    if !reaped.is_empty() {
        tracing::warn!(pids = ?reaped, home = marker, "killed processes a previous worker left running in this home");
    }
    reaped
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::processes::{alive, gone, wait_for_pid};
    use std::os::unix::process::CommandExt as _;

    #[test]
    fn two_workers_on_one_work_dir_take_two_slots_and_a_freed_slot_is_taken_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (a, _) = Home::take(dir.path()).expect("first");
        let (b, _) = Home::take(dir.path()).expect("second");
        assert_ne!(a.dir(), b.dir());
        let a_dir = a.dir().to_owned();
        drop(a);
        let (c, _) = Home::take(dir.path()).expect("third");
        assert_eq!(c.dir(), a_dir);
    }

    #[test]
    fn a_spooled_completion_is_handed_to_the_next_owner_until_unspooled() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (home, found) = Home::take(dir.path()).expect("take");
        assert!(found.spooled.is_empty());
        let req = pb::CompleteTaskRequest {
            worker_id: "w1".into(),
            lease_id: "inc:run/../x:ef:1:n".into(),
            effect_id: "ef".into(),
            ..Default::default()
        };
        let path = home.spool(&req).expect("spool");
        assert!(path.starts_with(home.dir().join("spool")), "{path:?}");
        std::fs::write(home.dir().join("spool/garbage.pb"), b"\xff\xff\xff").expect("write");
        drop(home);
        let (home, found) = Home::take(dir.path()).expect("take again");
        assert_eq!(found.spooled.len(), 1, "{:?}", found.spooled);
        assert_eq!(found.spooled[0].request, req);
        unspool(&found.spooled[0].path);
        drop(home);
        let (_home, found) = Home::take(dir.path()).expect("take a third time");
        assert!(found.spooled.is_empty());
    }

    #[tokio::test]
    async fn taking_a_home_kills_what_its_previous_owner_left_running() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (home, _) = Home::take(dir.path()).expect("take");
        let pidfile = dir.path().join("pid");
        // Started outside any guard, as if its guard had been killed too: only the marker
        // says whose it is.
        let mut orphan = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("sleep 300 & echo $! > {}; wait", pidfile.display()))
            .env(HOME_ENV, home.marker())
            .process_group(0)
            .spawn()
            .expect("spawn");
        let mut other = std::process::Command::new("sleep")
            .arg("300")
            .env(HOME_ENV, format!("{}-other", home.marker()))
            .spawn()
            .expect("spawn");
        let pid = wait_for_pid(&pidfile).await;
        let marker = home.marker().to_owned();
        drop(home);
        // The freed slot is taken again (a moment's retry: a child forked elsewhere in this
        // process may still hold the lock's descriptor until it execs).
        let mut tries = 0;
        let (home, found) = loop {
            let (home, found) = Home::take(dir.path()).expect("take again");
            if home.marker() == marker || tries == 50 {
                break (home, found);
            }
            drop(home);
            tries += 1;
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        assert_eq!(home.marker(), marker);
        assert!(
            found.reaped.contains(&(orphan.id() as i32)),
            "{:?} lacks the orphaned shell",
            found.reaped
        );
        assert!(gone(pid).await, "the orphan survived the reaper");
        let _ = orphan.wait();
        assert!(
            alive(other.id() as i32),
            "another home's process was killed"
        );
        let _ = other.kill();
        let _ = other.wait();
    }
}
