//! The warm server: `babysitter warm serve` keeps the engine's JS sessions and the journal's run
//! indexes in memory between CLI calls. A plugin drives a run with one short-lived `babysitter`
//! process per `run:iterate` / `task:list` / `task:post`; each local call opens the run anew and
//! a cold `run:iterate` replays every effect of the process, so a call's cost grows with the run.
//! Through the server an iteration continues the run's live JS session instead.
//!
//! It is on by default, as a compiler's or a build tool's daemon is: the run and task commands
//! in [`FORWARDED`] go to the per-user server of this very build (its socket's name carries the
//! build, see [`build_id`]); when none answers, the client starts one and waits for it to listen
//! ([`STARTUP_WAIT`] at most, else it runs the command locally); `run:create` starts one ahead
//! of the loop ([`prestart`]). An auto-started server exits after [`AUTO_IDLE`] without a
//! command; what it reports goes to a log file beside its socket ([`server_log`]).
//! `BABYSITTER_WARM=0` turns it off; `BABYSITTER_WARM_SOCKET=<path>` names a server started by
//! hand (`babysitter warm serve --socket <path>`) and starts none. The request carries argv,
//! environment and working directory; the server runs the command with exactly the code a local
//! call runs ([`super::execute`]), with the client's environment and per-user files, and the
//! client replays its stdout, stderr (logs included, at the client's `BABYSITTER_LOG_LEVEL`;
//! `debug` and `info` keep the call local) and exit code. A server that is busy, of another
//! build or stopping answers "not run" and the client runs the command itself: the server is an
//! accelerator, never a dependency, and never a queue (see [`server`]).
//!
//! Correctness:
//! - commands run one at a time, each under the run's locks as a local call would be: a
//!   reference CLI or a local `babysitter` on the same run is excluded the usual way, and the
//!   server never holds a lock between commands;
//! - other writers are expected: the journal view catches up with the store's head on every use,
//!   and an event file changed after it was read (replaced or rewritten) is re-read and
//!   re-verified, so damage reaches the client exactly as a one-shot command reports it
//!   (the journal's `fs/seen.rs`),
//!   and the engine's warm session continues only over new results (a new effect from another
//!   writer sends it back to a cold replay, see the engine's `drive`);
//! - a journal replaced wholesale by another process (`run:repair-journal`) shows as a new
//!   `journal/` directory: the runs root's state is dropped and rebuilt cold;
//! - only the user who runs the server may use it: the socket is 0600 in a 0700 directory the
//!   user owns, and each connection's peer uid is checked; the client's environment crosses
//!   only that socket and is never logged.

use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use babysitter_common::EnvMap;
use babysitter_journal::fs::FsRuntime;
use tracing_subscriber::filter::LevelFilter;

use super::output;

pub(in crate::compat) mod context;
mod server;
mod wire;

use wire::{Request, Response};

/// The commands a client sends to the server: the run loop's commands, none of which reads
/// stdin (a `-` argument keeps the call local). Their processes use the system allocator (see
/// `babysitter_cli_alloc`).
pub const FORWARDED: &[&str] = babysitter_cli_alloc::THIN_CLIENT_COMMANDS;

/// Idle time after which an auto-started server exits.
const AUTO_IDLE: Duration = Duration::from_secs(600);

/// This binary's build: a hash of the running executable's device, inode, size and
/// modification time (and the version). A rebuilt or upgraded binary is another build, so it
/// never hands its commands to a server running older code.
fn build_id() -> Option<String> {
    use std::hash::{Hash as _, Hasher as _};
    // The running file itself, even if it was replaced or deleted since it started.
    let m = std::fs::metadata("/proc/self/exe")
        .or_else(|_| std::fs::metadata(std::env::current_exe()?))
        .ok()?;
    let mut h = std::hash::DefaultHasher::new();
    (
        env!("CARGO_PKG_VERSION"),
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime(),
        m.mtime_nsec(),
    )
        .hash(&mut h);
    Some(format!("{:016x}", h.finish()))
}

/// The socket a client uses and whether to start a server there when none answers:
/// `BABYSITTER_WARM_SOCKET` (never started), else this build's per-user socket unless
/// `BABYSITTER_WARM` turns the server off; `None`: commands run locally.
fn client_socket(env: &EnvMap, build: &str) -> Option<(PathBuf, bool)> {
    if let Some(p) = env.get_non_empty("BABYSITTER_WARM_SOCKET") {
        return Some((PathBuf::from(p), false));
    }
    let off = env
        .get_non_empty("BABYSITTER_WARM")
        .map(|v| v.trim().to_ascii_lowercase())
        .is_some_and(|v| matches!(v.as_str(), "0" | "false" | "off" | "no"));
    if off {
        return None;
    }
    Some((default_socket(env, build), true))
}

/// `$XDG_RUNTIME_DIR/babysitter/warm-<build>.sock`, else
/// `$TMPDIR/babysitter-<uid>/warm-<build>.sock` (`/tmp` without `TMPDIR`).
fn default_socket(env: &EnvMap, build: &str) -> PathBuf {
    let dir = match env.get_non_empty("XDG_RUNTIME_DIR") {
        Some(d) => Path::new(d).join("babysitter"),
        None => Path::new(env.get_non_empty("TMPDIR").unwrap_or("/tmp"))
            .join(format!("babysitter-{}", rustix::process::getuid().as_raw())),
    };
    dir.join(format!("warm-{build}.sock"))
}

/// Sends the command to the warm server and replays its output; `None` when it must run
/// locally (not a forwarded command, the server off, not answering or not running it).
pub fn forward(argv: &[String], env: &EnvMap) -> Option<ExitCode> {
    let command = argv.first()?;
    if !FORWARDED.contains(&command.as_str()) || argv.iter().any(|a| a == "-") {
        return None;
    }
    // The server captures its commands' logs at `warn` and above; more is asked for locally.
    let level = babysitter_common::telemetry::command_log_level(env.get("BABYSITTER_LOG_LEVEL"));
    if level > LevelFilter::WARN {
        return None;
    }
    let build = build_id()?;
    let (socket, auto) = client_socket(env, &build)?;
    let cwd = std::env::current_dir().ok()?;
    let mut stream = match UnixStream::connect(&socket) {
        Ok(s) => s,
        // None answers: start one and wait for it (it listens within milliseconds; running
        // this call locally would cost a cold start of its own, and the server's run state
        // would start from the next call).
        Err(_) if auto => started(&socket)?,
        Err(_) => return None,
    };
    let request = Request::Run {
        build,
        argv: argv.to_vec(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        cwd,
    };
    // Nothing was run yet if the request did not go out whole: run locally.
    wire::write_request(&mut stream, &request).ok()?;
    match wire::read_response(&mut std::io::BufReader::with_capacity(64 << 10, &stream)) {
        Ok(Response::Ran { code, out, err }) => {
            use std::io::Write as _;
            let _ = std::io::stdout().lock().write_all(&out);
            let _ = std::io::stderr().lock().write_all(&err);
            Some(ExitCode::from(code))
        }
        Ok(Response::NotRun(_)) => None,
        Err(e) => {
            // The command may or may not have run: running it again could apply it twice.
            eprintln!(
                "[babysitter] the warm server at {} stopped answering ({e}); the command's outcome is unknown — check the run (run:status) before retrying",
                socket.display()
            );
            Some(ExitCode::from(1))
        }
    }
}

/// How long a client waits for a server that is starting before it runs its command itself.
const STARTUP_WAIT: Duration = Duration::from_millis(250);

/// `run:create` begins a run loop: it starts this build's server, when none runs, for the loop's
/// commands to come (without waiting for it; the first of them does if it must).
pub fn prestart(env: &EnvMap) {
    if let Some(build) = build_id()
        && let Some((socket, true)) = client_socket(env, &build)
    {
        let _ = start_in_background(&socket);
    }
}

/// Starts a server on `socket` (see [`start_in_background`]) and connects to it once it
/// listens; `None` (run locally) when no server comes within [`STARTUP_WAIT`], or none is
/// coming: the one started exited (another took the socket's lock first and is not listening,
/// or it failed) and no other holds the lock.
fn started(socket: &Path) -> Option<UnixStream> {
    let mut child = start_in_background(socket)?;
    let deadline = tokio::time::Instant::now() + STARTUP_WAIT;
    loop {
        if let Ok(stream) = UnixStream::connect(socket) {
            return Some(stream);
        }
        let exited = match &mut child {
            Some(c) => !matches!(c.try_wait(), Ok(None)),
            None => true,
        };
        if tokio::time::Instant::now() >= deadline || (exited && !lock_held(socket)) {
            return None;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Whether a server holds `socket`'s lock (it is running, starting or stopping).
fn lock_held(socket: &Path) -> bool {
    std::fs::File::open(socket.with_extension("lock")).is_ok_and(|lock| {
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockShared).is_err()
    })
}

/// Starts `warm serve` on `socket`, detached: `Some(Some(child))`; `Some(None)` when a server
/// holds the socket's lock already (one is starting, running or stopping); `None` when the
/// directory cannot be the server's or the program cannot be started.
fn start_in_background(socket: &Path) -> Option<Option<std::process::Child>> {
    use std::os::unix::process::CommandExt as _;
    private_dir(socket.parent()?).ok()?;
    if lock_held(socket) {
        return Some(None);
    }
    let exe = std::env::current_exe().ok()?;
    std::process::Command::new(exe)
        .args(["warm", "serve", "--socket"])
        .arg(socket)
        .args(["--idle-timeout", &AUTO_IDLE.as_secs().to_string()])
        // Holds no directory of the client's (a temporary one, a mount).
        .current_dir("/")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(server_log(socket))
        .process_group(0)
        .spawn()
        .ok()
        .map(Some)
}

/// Where an auto-started server's stderr goes: `warm-<build>.log` beside its socket (in the
/// user's private directory, 0600), begun anew by each server started, so that what it reports
/// (a bad request, a failed accept, a panic) can be read after the fact; nowhere if it cannot
/// be opened. It holds no command's output or environment: those go to the client. Opened for
/// appending: two clients that start a server at once (one of them exits at once, finding the
/// other's lock) never write over each other's lines.
fn server_log(socket: &Path) -> std::process::Stdio {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(socket.with_extension("log"))
        .and_then(|f| f.set_len(0).map(|()| f))
        .map_or_else(|_| std::process::Stdio::null(), std::process::Stdio::from)
}

/// `babysitter warm serve [--socket PATH] [--idle-timeout SECS] [--verbose]` | `warm status` |
/// `warm stop`.
pub fn main(args: &[String], env: &EnvMap, fs: FsRuntime) -> ExitCode {
    let mut socket = None;
    let mut idle = None;
    let mut verbose = false;
    let mut it = args.iter().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--socket" => socket = it.next().map(PathBuf::from),
            // Each command's name and time on stderr (never its arguments or environment).
            "--verbose" => verbose = true,
            "--idle-timeout" => match it.next().and_then(|v| v.parse::<u64>().ok()) {
                Some(s) if s > 0 => idle = Some(Duration::from_secs(s)),
                _ => {
                    eprintln!("babysitter warm: --idle-timeout needs a positive number of seconds");
                    return ExitCode::from(2);
                }
            },
            other => {
                eprintln!("babysitter warm: unknown argument {other}");
                return ExitCode::from(2);
            }
        }
    }
    let Some(build) = build_id() else {
        eprintln!("babysitter warm: cannot read this program's own file (/proc/self/exe)");
        return ExitCode::from(1);
    };
    let socket = socket
        .or_else(|| {
            env.get_non_empty("BABYSITTER_WARM_SOCKET")
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| default_socket(env, &build));
    match args.first().map(String::as_str) {
        Some("serve") => serve(&socket, build, idle, verbose, env, fs),
        Some("status") => match control(&socket, &Request::Ping) {
            Ok(report) => {
                output::line(&format!(
                    "warm server on {}: {}",
                    socket.display(),
                    String::from_utf8_lossy(&report).trim()
                ));
                ExitCode::SUCCESS
            }
            Err(e) => {
                output::line(&format!("no warm server on {} ({e})", socket.display()));
                ExitCode::from(1)
            }
        },
        Some("stop") => match control(&socket, &Request::Stop) {
            Ok(_) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("no warm server on {} ({e})", socket.display());
                ExitCode::from(1)
            }
        },
        _ => {
            eprintln!(
                "usage: babysitter warm serve [--socket PATH] [--idle-timeout SECS] [--verbose] | warm status | warm stop\n\
                 On by default: the run and task commands use this build's server ({}), started on first use;\n\
                 BABYSITTER_WARM=0 runs every command locally, BABYSITTER_WARM_SOCKET=PATH uses a server started by hand",
                default_socket(env, &build).display()
            );
            ExitCode::from(2)
        }
    }
}

/// Sends a control request; returns the server's stdout for it.
fn control(socket: &Path, request: &Request) -> std::io::Result<Vec<u8>> {
    let mut s = UnixStream::connect(socket)?;
    wire::write_request(&mut s, request)?;
    match wire::read_response(&mut s)? {
        Response::Ran { out, .. } => Ok(out),
        Response::NotRun(why) => Err(std::io::Error::other(why)),
    }
}

/// The socket's directory: created 0700, and refused unless it is the user's own and closed
/// to others (the socket carries the clients' environments).
fn private_dir(dir: &Path) -> Result<(), String> {
    if let Err(e) = std::fs::create_dir_all(dir) {
        return Err(format!("cannot create {}: {e}", dir.display()));
    }
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot stat {}: {e}", dir.display()))?;
    if meta.uid() != rustix::process::getuid().as_raw() {
        return Err(format!("{} belongs to another user", dir.display()));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("cannot make {} private: {e}", dir.display()))?;
    }
    Ok(())
}

fn serve(
    socket: &Path,
    build: String,
    idle: Option<Duration>,
    verbose: bool,
    env: &EnvMap,
    fs: FsRuntime,
) -> ExitCode {
    let dir = socket.parent().unwrap_or_else(|| Path::new("."));
    if let Err(e) = private_dir(dir) {
        eprintln!("babysitter warm: {e}");
        return ExitCode::from(1);
    }
    // One server per socket: the lock is held for the server's life (the kernel drops it if
    // the server dies), so a stale socket file is safe to replace.
    let lock_path = socket.with_extension("lock");
    let lock = match std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
    {
        Ok(f) => f,
        Err(e) => {
            eprintln!("babysitter warm: cannot open {}: {e}", lock_path.display());
            return ExitCode::from(1);
        }
    };
    if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        eprintln!(
            "babysitter warm: a server already serves {}",
            socket.display()
        );
        return ExitCode::SUCCESS;
    }
    server::logs::install(babysitter_common::telemetry::command_log_level(
        env.get("BABYSITTER_LOG_LEVEL"),
    ));
    let _ = std::fs::write(
        socket.with_extension("pid"),
        format!("{}\n", std::process::id()),
    );
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("babysitter warm: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let code = runtime.block_on(async {
        let _ = std::fs::remove_file(socket);
        let listener = match tokio::net::UnixListener::bind(socket) {
            Ok(l) => l,
            Err(e) => {
                eprintln!(
                    "babysitter warm: cannot listen on {}: {e}",
                    socket.display()
                );
                return 1;
            }
        };
        let _ = std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600));
        eprintln!("babysitter warm: listening on {}", socket.display());
        let server = Arc::new(server::Server::new(build, verbose, fs));
        let code = server.run(&listener, socket, idle).await;
        let _ = std::fs::remove_file(socket);
        code
    });
    let _ = std::fs::remove_file(socket.with_extension("pid"));
    drop(lock);
    ExitCode::from(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_by_default_per_build_off_with_babysitter_warm_0() {
        let env = EnvMap::new().with("BABYSITTER_WARM_SOCKET", "/nonexistent/warm.sock");
        // No server there: every command runs locally, and a named socket starts nothing.
        assert!(forward(&["run:iterate".into(), "x".into()], &env).is_none());
        let build = build_id().unwrap();
        assert_eq!(
            client_socket(&env, &build),
            Some((PathBuf::from("/nonexistent/warm.sock"), false))
        );
        let xdg = EnvMap::new().with("XDG_RUNTIME_DIR", "/run/user/7");
        assert_eq!(
            client_socket(&xdg, &build),
            Some((
                PathBuf::from(format!("/run/user/7/babysitter/warm-{build}.sock")),
                true
            ))
        );
        for on in ["1", "true", "auto", "yes"] {
            let env = xdg.clone().with("BABYSITTER_WARM", on);
            assert!(
                client_socket(&env, &build).is_some_and(|(_, auto)| auto),
                "{on}"
            );
        }
        for off in ["0", "false", "OFF", "no"] {
            let env = xdg.clone().with("BABYSITTER_WARM", off);
            assert!(client_socket(&env, &build).is_none(), "{off}");
        }
        let tmp = EnvMap::new().with("TMPDIR", "/var/tmp");
        let uid = rustix::process::getuid().as_raw();
        assert_eq!(
            client_socket(&tmp, &build).map(|(p, _)| p),
            Some(PathBuf::from(format!(
                "/var/tmp/babysitter-{uid}/warm-{build}.sock"
            )))
        );
        assert_eq!(build_id(), Some(build), "stable for one binary");
        assert!(!FORWARDED.contains(&"run:create"));
        assert!(!FORWARDED.contains(&"hook:run"));
    }

    #[test]
    fn verbose_logging_and_stdin_keep_a_command_local() {
        let tmp = tempfile::tempdir().unwrap();
        // A socket that would answer if asked: nothing may connect to it.
        let socket = tmp.path().join("warm.sock");
        let listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        listener.set_nonblocking(true).unwrap();
        let env = EnvMap::new().with("BABYSITTER_WARM_SOCKET", socket.display().to_string());
        let debug = env.clone().with("BABYSITTER_LOG_LEVEL", "debug");
        assert!(forward(&["task:list".into(), "x".into()], &debug).is_none());
        let stdin = ["task:post", "x", "e", "--value", "-"].map(String::from);
        assert!(forward(&stdin, &env).is_none());
        assert!(forward(&["run:create".into()], &env).is_none());
        assert!(listener.accept().is_err(), "nobody connected");
    }
}
