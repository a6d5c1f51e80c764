//! Task process groups that die with the worker.
//!
//! Why: a task's command may deploy or push. When a worker dies (`kill -9`, the OOM killer, a
//! node going away) the orchestrator hands its task to another attempt once the lease lapses;
//! if the first attempt's processes were still running, the two would overlap. So every command
//! a worker starts (shell, node, hook, harness CLI) runs in a process group of its own, led by a
//! small guard shell, and three things end that group:
//! - **the worker's death**: the process holds the write end of a pipe (close-on-exec, so only
//!   it holds it) whose read end every guard inherits; a watcher the guard forks blocks reading
//!   it, gets end-of-file when the worker is gone — however it died — and kills the whole group
//!   with `SIGKILL`;
//! - **the worker letting go**: a [`GroupChild`] kills its group when stopped, timed out or
//!   dropped (a cancelled future), so nothing outlives the task that started it;
//! - **a reaper at start** ([`crate::home`]): what a guard could not cover (the guard itself
//!   killed, a process that left the group) carries the worker home's marker in its
//!   environment and is killed when the next worker takes that home.
//!
//! Why a pipe and not `PR_SET_PDEATHSIG`: setting a death signal needs a `pre_exec` hook, which
//! makes the standard library fork the whole worker instead of using `posix_spawn` — measured,
//! it halved a worker's task throughput in a process as large as `babysitter up`. The pipe
//! needs nothing in the child, follows the process (not the spawning thread), and works where
//! there is no `prctl`.
//!
//! The guard is `/bin/sh`, not a helper binary, so `babysitter run`, `babysitter up` and the
//! `harness-launcher` share it with nothing to install. It runs the command in the background
//! (its stdin handed over explicitly), waits, and exits as the command did: with
//! its status, or re-raising the signal that killed it, so "killed by a signal" stays visible.
//!
//! Limits (documented in the launcher's OVERVIEW): a process that calls `setsid()` leaves the
//! group, and one that also clears its environment escapes the reaper; cgroups would close that
//! gap and are not used yet.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::process::ExitStatus;
use std::sync::OnceLock;

use rustix::process::{Pid, Signal};
use tokio::process::{Child, Command};

/// The environment variable naming the read end of the worker-alive pipe (the guard's only).
const ALIVE_FD_ENV: &str = "BABYSITTER_ALIVE_FD";

/// The guard. With the pipe: a watcher (reopening it by `/dev/fd`, as `dash` redirects only
/// descriptors 0-9 and the pipe's is any number) waits for its end-of-file and kills the group;
/// a watcher that cannot open it kills nothing. The command inherits the read end (holding a
/// read end changes nothing: end-of-file follows the write end alone), not the variable.
/// The watcher holds none of the command's output pipes (a reader waiting for their end must
/// not wait for it) and is ended with `SIGKILL` (a `SIGTERM` arriving before the forked shell
/// resets the guard's trap would be lost). `3<&0`: an asynchronous command's stdin would be
/// `/dev/null` without an explicit redirection.
const GUARD: &str = r#"trap 'kill -KILL 0' TERM HUP
if [ -n "$BABYSITTER_ALIVE_FD" ]; then
  ( exec < "/dev/fd/$BABYSITTER_ALIVE_FD" || exit 0
    while read -r _; do :; done; kill -KILL 0 ) >/dev/null 2>&1 &
  watcher=$!
  unset BABYSITTER_ALIVE_FD
fi
exec 3<&0
"$@" <&3 3<&- &
exec 3<&-
wait $!
st=$?
[ -n "$watcher" ] && kill -KILL "$watcher" 2>/dev/null
if [ "$st" -gt 128 ] && [ "$st" -lt 192 ]; then
  trap - TERM HUP
  kill -$((st - 128)) $$
fi
exit "$st"
"#;

/// The read end of this process's worker-alive pipe (not close-on-exec, so guards inherit it);
/// the write end is kept open, close-on-exec, for the life of the process. `None` if the pipe
/// could not be made: then only the other two ways end a group.
fn alive_fd() -> Option<RawFd> {
    static ALIVE: OnceLock<Option<(OwnedFd, OwnedFd)>> = OnceLock::new();
    ALIVE
        .get_or_init(|| {
            let (read, write) = std::io::pipe().ok()?;
            let read = OwnedFd::from(read);
            rustix::io::fcntl_setfd(&read, rustix::io::FdFlags::empty()).ok()?;
            Some((read, OwnedFd::from(write)))
        })
        .as_ref()
        .map(|(read, _)| read.as_raw_fd())
}

/// `program args…` under the guard, in a process group of its own that dies with this process.
/// Callers add the environment, working directory and stdio, then [`spawn`] it.
pub fn command(program: impl AsRef<OsStr>) -> Command {
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(GUARD)
        .arg("babysitter-task-guard")
        .arg(program)
        .process_group(0)
        .kill_on_drop(true);
    cmd
}

/// Starts a command built by [`command`] (the pipe's variable is set here, after whatever
/// environment the caller set or cleared).
pub fn spawn(cmd: &mut Command) -> std::io::Result<GroupChild> {
    match alive_fd() {
        Some(fd) => cmd.env(ALIVE_FD_ENV, fd.to_string()),
        None => {
            tracing::warn!(
                "no worker-alive pipe: a task outlives a worker killed with -9 until the next worker starts"
            );
            cmd.env_remove(ALIVE_FD_ENV)
        }
    };
    let child = cmd.spawn()?;
    let group = child.id().and_then(|p| Pid::from_raw(p as i32));
    Ok(GroupChild { child, group })
}

/// A running task's process group: killed as a whole when stopped or dropped.
#[derive(Debug)]
pub struct GroupChild {
    child: Child,
    group: Option<Pid>,
}

impl GroupChild {
    /// The guard process (stdio pipes are taken from it).
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Waits for the command to exit (the group may live on: call [`GroupChild::kill`]).
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Kills every process of the group (the command and all it started) with `SIGKILL`.
    pub fn kill(&self) {
        if let Some(g) = self.group {
            // ESRCH: the group is already gone.
            let _ = rustix::process::kill_process_group(g, Signal::KILL);
        }
    }

    /// After the command exited: leaves what it started in the background running (dropping
    /// this no longer kills the group).
    pub fn disarm(&mut self) {
        self.group = None;
    }

    /// Kills the group and reaps the guard.
    pub async fn kill_and_wait(&mut self) -> std::io::Result<ExitStatus> {
        self.kill();
        self.child.wait().await
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::processes::{alive, gone, wait_for_pid};
    use std::process::Stdio;
    use tokio::io::AsyncReadExt;

    async fn output(mut cmd: Command) -> (ExitStatus, String) {
        cmd.stdout(Stdio::piped()).stdin(Stdio::piped());
        let mut g = spawn(&mut cmd).expect("spawn");
        let mut stdin = g.child().stdin.take().expect("stdin");
        tokio::io::AsyncWriteExt::write_all(&mut stdin, b"from stdin")
            .await
            .expect("write");
        drop(stdin);
        let mut out = String::new();
        let mut stdout = g.child().stdout.take().expect("stdout");
        stdout.read_to_string(&mut out).await.expect("read");
        (g.wait().await.expect("wait"), out)
    }

    #[tokio::test]
    async fn the_guard_passes_arguments_stdin_and_the_exit_status_through() {
        let mut cmd = command("sh");
        cmd.args(["-c", "cat; echo \" $1|$2\"; exit 7", "x", "a b", "*"]);
        let (status, out) = output(cmd).await;
        assert_eq!(out, "from stdin a b|*\n");
        assert_eq!(status.code(), Some(7));
    }

    #[tokio::test]
    async fn a_command_killed_by_a_signal_is_reported_killed_by_it() {
        use std::os::unix::process::ExitStatusExt;
        let mut cmd = command("sh");
        cmd.args(["-c", "kill -USR1 $$"]);
        let (status, _) = output(cmd).await;
        assert_eq!(status.code(), None);
        assert_eq!(status.signal(), Some(Signal::USR1.as_raw()));
    }

    #[tokio::test]
    async fn dropping_the_child_kills_everything_the_command_started() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pidfile = dir.path().join("pid");
        let mut cmd = command("sh");
        cmd.arg("-c")
            .arg(format!("sleep 300 & echo $! > {}; wait", pidfile.display()));
        let g = spawn(&mut cmd).expect("spawn");
        let pid = wait_for_pid(&pidfile).await;
        assert!(alive(pid), "the grandchild runs");
        drop(g);
        assert!(gone(pid).await, "the grandchild outlived the dropped group");
    }
}
