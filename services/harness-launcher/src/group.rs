//! Task process groups that die with the worker.
//!
//! Why: a task's command may deploy or push. When a worker dies (`kill -9`, the OOM killer, a
//! node going away) the orchestrator hands its task to another attempt once the lease lapses;
//! if the first attempt's processes were still running, the two would overlap. So every command
//! a worker starts (shell, node, hook, harness CLI) runs in a process group of its own, led by a
//! small guard shell, and three things end that group:
//! - **the worker's death**: the guard asks the kernel for `SIGTERM` when its parent dies
//!   (`PR_SET_PDEATHSIG`, checked against a parent that died before the call), and its trap
//!   kills the whole group with `SIGKILL` — within milliseconds of the worker's death;
//! - **the worker letting go**: a [`GroupChild`] kills its group when stopped, timed out or
//!   dropped (a cancelled future), so nothing outlives the task that started it;
//! - **a reaper at start** ([`crate::home`]): what a guard could not cover (the guard itself
//!   killed, a process that left the group) carries the worker home's marker in its
//!   environment and is killed when the next worker takes that home.
//!
//! The guard is `/bin/sh`, not a helper binary, so `babysitter run`, `babysitter up` and the
//! `harness-launcher` share it with nothing to install. It runs the command in the background
//! (its stdin handed over explicitly), waits, and exits as the command did: with its status,
//! or re-raising the signal that killed it, so "killed by a signal" stays visible.
//!
//! The death signal follows the thread that spawned the guard: commands are spawned from the
//! runtime's worker threads (which live as long as the runtime) or from a thread that waits for
//! the command, never from a short-lived thread that could exit first.
//!
//! Limits (documented in the launcher's OVERVIEW): a process that calls `setsid()` leaves the
//! group, and one that also clears its environment escapes the reaper; cgroups would close that
//! gap and are not used yet.

use std::ffi::OsStr;
use std::process::ExitStatus;

use rustix::process::{Pid, Signal};
use tokio::process::{Child, Command};

/// The guard: kills its group when told the worker died; otherwise runs `"$@"` and exits as it
/// did. `3<&0`: an asynchronous command's stdin would be `/dev/null` without an explicit
/// redirection.
const GUARD: &str = r#"trap 'kill -KILL 0' TERM HUP
exec 3<&0
"$@" <&3 3<&- &
exec 3<&-
wait $!
st=$?
if [ "$st" -gt 128 ] && [ "$st" -lt 192 ]; then
  trap - TERM HUP
  kill -$((st - 128)) $$
fi
exit "$st"
"#;

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
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec and makes only two raw system
    // calls (prctl, getppid): async-signal-safe, no allocation, no locks.
    #[allow(unsafe_code)]
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(Signal::TERM))?;
            // The worker died between fork and prctl: the signal will never come, so stop now.
            if rustix::process::getppid() != Some(parent) {
                return Err(std::io::Error::other(
                    "the worker exited while starting a task",
                ));
            }
            Ok(())
        });
    }
    cmd
}

/// Starts a command built by [`command`].
pub fn spawn(cmd: &mut Command) -> std::io::Result<GroupChild> {
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
