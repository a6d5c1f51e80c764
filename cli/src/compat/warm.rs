//! The warm server: `babysitter warm serve` keeps the engine's JS sessions and the journal's run
//! indexes in memory between CLI calls. A plugin drives a run with one short-lived `babysitter`
//! process per `run:iterate` / `task:list` / `task:post`; each local call opens the run anew and
//! a cold `run:iterate` replays every effect of the process, so a call's cost grows with the run.
//! Through the server an iteration continues the run's live JS session instead.
//!
//! Clients are the same binary. With `BABYSITTER_WARM_SOCKET=<path>` (or `BABYSITTER_WARM=1`,
//! which uses the per-user default socket and starts a server on first use) the run and task
//! commands in [`FORWARDED`] are sent over a Unix socket — argv, environment, working directory
//! — and the server runs them with exactly the code a local call runs ([`super::execute`]),
//! capturing stdout, stderr and the exit code, which the client replays. No server answering:
//! the command runs locally. The server is an accelerator, never a dependency.
//!
//! Correctness:
//! - commands run one at a time, in the order clients connect, each under the run's locks as a
//!   local call would be: a reference CLI or a local `babysitter` on the same run is excluded
//!   the usual way, and the server never holds a lock between commands;
//! - other writers are expected: the journal view catches up with the store's head on every use,
//!   and the engine's warm session continues only over new results (a new effect from another
//!   writer sends it back to a cold replay, see the engine's `drive`);
//! - a journal replaced wholesale by another process (`run:repair-journal`) shows as a new
//!   `journal/` directory: the runs root's state is dropped and rebuilt cold;
//! - only the user who runs the server may use it: the socket is 0600 in a 0700 directory the
//!   user owns, and each connection's peer uid is checked; the client's environment crosses
//!   only that socket and is never logged.

use std::collections::HashMap;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use babysitter_common::EnvMap;
use babysitter_journal::Journal;
use babysitter_journal::fs::FsStore;
use babysitter_orchestrator::engine::{Engine, EngineOptions};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use super::output;

/// The commands a client sends to the server: the run loop's commands, none of which reads
/// stdin (a `-` argument keeps the call local).
pub const FORWARDED: &[&str] = &[
    "run:iterate",
    "run:status",
    "run:events",
    "task:list",
    "task:show",
    "task:post",
];

/// Largest request the server accepts (argv and environment).
const MAX_FRAME: usize = 64 << 20;
/// Distinct runs one runs root may hold before its state is rebuilt (bounds the server's memory).
const MAX_RUNS_PER_ROOT: usize = 256;
/// Runs roots kept at once (each holds a journal and an engine); the least recently used goes.
const MAX_ROOTS: usize = 8;
/// Default idle time after which an auto-started server exits.
const AUTO_IDLE: Duration = Duration::from_secs(600);

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
enum Request {
    Run {
        argv: Vec<String>,
        env: Vec<(String, String)>,
        cwd: PathBuf,
    },
    Ping,
    Stop,
}

/// Work a command leaves for after its answer (see [`defer`]).
pub type Deferred = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// Per-runs-root state shared by the commands the server runs.
#[derive(Default)]
pub struct Context {
    roots: Mutex<HashMap<PathBuf, Root>>,
    deferred: Mutex<Vec<Deferred>>,
    tick: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Root {
    journal: Journal,
    engine: Engine,
    /// `journal/` directory inode per run seen (a new inode: the journal was replaced).
    journals: HashMap<String, Option<u64>>,
    /// When a command last used this root (for [`MAX_ROOTS`]).
    used: u64,
}

tokio::task_local! {
    static WARM: Arc<Context>;
}

/// The shared journal and warm engine for a run under `root`, when this command runs inside the
/// warm server; `None` for a local call.
pub fn shared(root: &Path, run_id: &str, run_dir: &Path) -> Option<(Journal, Engine)> {
    WARM.try_with(|ctx| ctx.root(root, run_id, run_dir)).ok()?
}

/// Inside the warm server: queues `work` to run after the client has its answer and before the
/// next command; a local call gets it back to run now.
pub fn defer(work: Deferred) -> Result<(), Deferred> {
    match WARM.try_with(Arc::clone) {
        Ok(ctx) => {
            ctx.deferred
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(work);
            Ok(())
        }
        Err(_) => Err(work),
    }
}

impl Context {
    fn root(&self, root: &Path, run_id: &str, run_dir: &Path) -> Option<(Journal, Engine)> {
        let inode = std::fs::metadata(run_dir.join("journal"))
            .ok()
            .map(|m| m.ino());
        let mut roots = self.roots.lock().unwrap_or_else(|p| p.into_inner());
        let stale = roots.get(root).is_some_and(|r| {
            r.journals.len() >= MAX_RUNS_PER_ROOT && !r.journals.contains_key(run_id)
                || r.journals.get(run_id).is_some_and(|seen| *seen != inode)
        });
        if stale {
            roots.remove(root);
        }
        if !roots.contains_key(root) {
            if roots.len() >= MAX_ROOTS
                && let Some(oldest) = roots
                    .iter()
                    .min_by_key(|(_, r)| r.used)
                    .map(|(k, _)| k.clone())
            {
                roots.remove(&oldest);
            }
            let journal = Journal::new(
                Arc::new(FsStore::new(root).inline_io()),
                crate::cli_journal_options(),
            );
            let mut opts = EngineOptions::new(root);
            opts.js_threads = 1;
            opts.cached_runs = 64;
            opts.warm = true;
            // The server's user files (its user is the clients'): `ctx.log` lines go to its
            // log directory, breakpoint advice comes from its rules.
            if let Ok(cwd) = std::env::current_dir() {
                super::paths::UserFiles::of(&EnvMap::from_process(), &cwd).apply_to(&mut opts);
            }
            let engine = Engine::new(journal.clone(), opts).ok()?;
            roots.insert(
                root.to_path_buf(),
                Root {
                    journal,
                    engine,
                    journals: HashMap::new(),
                    used: 0,
                },
            );
        }
        let r = roots.get_mut(root)?;
        r.used = self.tick.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        r.journals.insert(run_id.to_owned(), inode);
        Some((r.journal.clone(), r.engine.clone()))
    }
}

/// The socket a client uses: `BABYSITTER_WARM_SOCKET`, or the per-user default when
/// `BABYSITTER_WARM` is on; `None`: commands run locally.
fn client_socket(env: &EnvMap) -> Option<(PathBuf, bool)> {
    if let Some(p) = env.get_non_empty("BABYSITTER_WARM_SOCKET") {
        return Some((PathBuf::from(p), false));
    }
    let on = env
        .get_non_empty("BABYSITTER_WARM")
        .map(|v| v.trim().to_ascii_lowercase())
        .is_some_and(|v| matches!(v.as_str(), "1" | "true" | "on" | "auto"));
    on.then(|| (default_socket(env), true))
}

/// `$XDG_RUNTIME_DIR/babysitter/warm.sock`, else `/tmp/babysitter-<uid>/warm.sock`.
fn default_socket(env: &EnvMap) -> PathBuf {
    match env.get_non_empty("XDG_RUNTIME_DIR") {
        Some(d) => Path::new(d).join("babysitter").join("warm.sock"),
        None => std::env::temp_dir()
            .join(format!("babysitter-{}", rustix::process::getuid().as_raw()))
            .join("warm.sock"),
    }
}

/// Sends the command to the warm server and replays its output; `None` when it must run
/// locally (not a forwarded command, no server configured or answering).
pub fn forward(argv: &[String], env: &EnvMap) -> Option<ExitCode> {
    let command = argv.first()?;
    if !FORWARDED.contains(&command.as_str()) || argv.iter().any(|a| a == "-") {
        return None;
    }
    let (socket, auto) = client_socket(env)?;
    let cwd = std::env::current_dir().ok()?;
    let mut stream = match UnixStream::connect(&socket) {
        Ok(s) => s,
        Err(_) => {
            if auto {
                start_in_background(&socket);
            }
            return None;
        }
    };
    let request = Request::Run {
        argv: argv.to_vec(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        cwd,
    };
    let body = serde_json::to_vec(&request).ok()?;
    // Nothing was run yet if the request did not go out whole: run locally.
    write_frame(&mut stream, &body).ok()?;
    match read_response(&mut stream) {
        Ok((code, out, err)) => {
            let _ = std::io::stdout().lock().write_all(&out);
            let _ = std::io::stderr().lock().write_all(&err);
            Some(ExitCode::from(code))
        }
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

fn start_in_background(socket: &Path) {
    use std::os::unix::process::CommandExt as _;
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let _ = std::process::Command::new(exe)
        .args(["warm", "serve", "--socket"])
        .arg(socket)
        .args(["--idle-timeout", &AUTO_IDLE.as_secs().to_string()])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .process_group(0)
        .spawn();
}

fn write_frame(w: &mut impl std::io::Write, body: &[u8]) -> std::io::Result<()> {
    let len =
        u32::try_from(body.len()).map_err(|_| std::io::Error::other("frame larger than 4 GiB"))?;
    w.write_all(&len.to_be_bytes())?;
    w.write_all(body)?;
    w.flush()
}

/// One length-prefixed blob of a response. No limit but the prefix's (a command's output can be
/// large: `run:events` of a long run); read as it arrives, so a bad length costs no allocation.
fn read_blob(r: &mut impl std::io::Read) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len)?;
    let len = u64::from(u32::from_be_bytes(len));
    let mut buf = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(r.by_ref(), len), &mut buf)?;
    if buf.len() as u64 != len {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("response cut short: {} of {len} bytes", buf.len()),
        ));
    }
    Ok(buf)
}

/// Response: exit code byte, then stdout and stderr as length-prefixed blobs.
fn read_response(r: &mut impl std::io::Read) -> std::io::Result<(u8, Vec<u8>, Vec<u8>)> {
    let mut code = [0u8; 1];
    r.read_exact(&mut code)?;
    let out = read_blob(r)?;
    let err = read_blob(r)?;
    Ok((code[0], out, err))
}

/// `babysitter warm serve [--socket PATH] [--idle-timeout SECS] [--verbose]` | `warm status` |
/// `warm stop`.
pub fn main(args: &[String], env: &EnvMap) -> ExitCode {
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
    let socket = socket
        .or_else(|| client_socket(env).map(|(p, _)| p))
        .unwrap_or_else(|| default_socket(env));
    match args.first().map(String::as_str) {
        Some("serve") => serve(&socket, idle, verbose),
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
                 Clients: BABYSITTER_WARM_SOCKET=PATH, or BABYSITTER_WARM=1 for the default socket ({})",
                default_socket(env).display()
            );
            ExitCode::from(2)
        }
    }
}

/// Sends a control request; returns the server's stdout for it.
fn control(socket: &Path, request: &Request) -> std::io::Result<Vec<u8>> {
    let mut s = UnixStream::connect(socket)?;
    let body = serde_json::to_vec(request).map_err(std::io::Error::other)?;
    write_frame(&mut s, &body)?;
    read_response(&mut s).map(|(_, out, _)| out)
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

fn serve(socket: &Path, idle: Option<Duration>, verbose: bool) -> ExitCode {
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
        let code = accept_loop(&listener, idle, verbose).await;
        let _ = std::fs::remove_file(socket);
        code
    });
    let _ = std::fs::remove_file(socket.with_extension("pid"));
    drop(lock);
    ExitCode::from(code)
}

async fn accept_loop(
    listener: &tokio::net::UnixListener,
    idle: Option<Duration>,
    verbose: bool,
) -> u8 {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        eprintln!("babysitter warm: cannot install signal handlers");
        return 1;
    };
    let ctx = Arc::new(Context::default());
    let me = rustix::process::getuid().as_raw();
    let mut served: u64 = 0;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            _ = term.recv() => return 0,
            _ = int.recv() => return 0,
            () = sleep_or_forever(idle) => {
                eprintln!("babysitter warm: idle, exiting");
                return 0;
            }
        };
        let mut stream = match accepted {
            Ok((s, _)) => s,
            Err(e) => {
                eprintln!("babysitter warm: accept failed: {e}");
                continue;
            }
        };
        if !stream.peer_cred().is_ok_and(|c| c.uid() == me) {
            continue; // not the server's user: closed without a word
        }
        let request =
            match tokio::time::timeout(Duration::from_secs(30), read_request(&mut stream)).await {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => {
                    eprintln!("babysitter warm: bad request: {e}");
                    continue;
                }
                Err(_) => {
                    eprintln!("babysitter warm: a client sent nothing for 30 s");
                    continue;
                }
            };
        let (code, out, err, stop) = match request {
            Request::Ping => (
                0,
                format!("served: {served} commands\n").into_bytes(),
                Vec::new(),
                false,
            ),
            Request::Stop => (0, Vec::new(), Vec::new(), true),
            Request::Run { argv, env, cwd } => {
                served += 1;
                let started = tokio::time::Instant::now();
                let name = argv.first().cloned().unwrap_or_default();
                let env: EnvMap = env.into_iter().collect();
                let task = tokio::spawn(output::captured(WARM.scope(ctx.clone(), async move {
                    super::execute(&argv, &env, cwd).await
                })));
                let done = task.await;
                if verbose {
                    eprintln!(
                        "babysitter warm: {name} {:.2} ms",
                        started.elapsed().as_secs_f64() * 1000.0
                    );
                }
                match done {
                    Ok((code, cap)) => (code, cap.stdout, cap.stderr, false),
                    Err(e) => {
                        // A panic mid-command: whatever it held in memory is suspect.
                        if let Ok(mut roots) = ctx.roots.lock() {
                            roots.clear();
                        }
                        let msg = format!("[babysitter] internal error in the warm server: {e}\n");
                        (1, Vec::new(), msg.into_bytes(), false)
                    }
                }
            }
        };
        let _ = write_response(&mut stream, code, &out, &err).await;
        drop(stream);
        // The commands' deferred work (state caches), before the next command.
        let deferred = std::mem::take(&mut *ctx.deferred.lock().unwrap_or_else(|p| p.into_inner()));
        for work in deferred {
            work.await;
        }
        if stop {
            return 0;
        }
    }
}

async fn sleep_or_forever(idle: Option<Duration>) {
    match idle {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

async fn read_request(stream: &mut tokio::net::UnixStream) -> std::io::Result<Request> {
    let len = stream.read_u32().await? as usize;
    if len > MAX_FRAME {
        return Err(std::io::Error::other(format!(
            "request of {len} bytes exceeds the {MAX_FRAME}-byte limit"
        )));
    }
    let mut buf = vec![0u8; len];
    stream.read_exact(&mut buf).await?;
    serde_json::from_slice(&buf).map_err(|e| std::io::Error::other(format!("not a request: {e}")))
}

async fn write_response(
    stream: &mut tokio::net::UnixStream,
    code: u8,
    out: &[u8],
    err: &[u8],
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(9 + out.len() + err.len());
    buf.push(code);
    for blob in [out, err] {
        let len =
            u32::try_from(blob.len()).map_err(|_| std::io::Error::other("output too large"))?;
        buf.extend_from_slice(&len.to_be_bytes());
        buf.extend_from_slice(blob);
    }
    stream.write_all(&buf).await?;
    stream.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_run_loop_commands_are_forwarded_and_never_stdin() {
        let env = EnvMap::new().with("BABYSITTER_WARM_SOCKET", "/nonexistent/warm.sock");
        // No server there: every command runs locally.
        assert!(forward(&["run:iterate".into(), "x".into()], &env).is_none());
        let env = EnvMap::new();
        assert!(client_socket(&env).is_none());
        let on = EnvMap::new()
            .with("BABYSITTER_WARM", "1")
            .with("XDG_RUNTIME_DIR", "/run/user/7");
        assert_eq!(
            client_socket(&on),
            Some((PathBuf::from("/run/user/7/babysitter/warm.sock"), true))
        );
        assert!(!FORWARDED.contains(&"run:create"));
        assert!(!FORWARDED.contains(&"hook:run"));
    }

    #[test]
    fn frames_round_trip_and_a_cut_response_is_an_error() {
        let mut buf = Vec::new();
        write_frame(&mut buf, b"hello").unwrap();
        assert_eq!(read_blob(&mut buf.as_slice()).unwrap(), b"hello");
        // A length far beyond what follows: an error, not a 4 GiB allocation.
        let mut cut = u32::MAX.to_be_bytes().to_vec();
        cut.extend_from_slice(b"abc");
        let err = read_blob(&mut cut.as_slice()).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
    }

    #[tokio::test]
    async fn roots_are_bounded_and_a_replaced_journal_drops_its_root() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = Context::default();
        let run_in = |i: usize| {
            let root = tmp.path().join(format!("root{i}"));
            let dir = root.join("r1");
            std::fs::create_dir_all(dir.join("journal")).unwrap();
            (root, dir)
        };
        for i in 0..=MAX_ROOTS {
            let (root, dir) = run_in(i);
            assert!(ctx.root(&root, "r1", &dir).is_some());
        }
        let roots = ctx.roots.lock().unwrap();
        assert_eq!(roots.len(), MAX_ROOTS);
        assert!(
            !roots.contains_key(&tmp.path().join("root0")),
            "the least recently used root went"
        );
        drop(roots);
        // Another process swaps the run's journal directory (run:repair-journal).
        let (root, dir) = run_in(MAX_ROOTS);
        let (root2, dir2) = (root.clone(), root.join("r2"));
        std::fs::create_dir_all(dir2.join("journal")).unwrap();
        ctx.root(&root2, "r2", &dir2).unwrap();
        std::fs::rename(dir.join("journal"), dir.join("journal.old")).unwrap();
        std::fs::create_dir(dir.join("journal")).unwrap();
        ctx.root(&root, "r1", &dir).unwrap();
        let roots = ctx.roots.lock().unwrap();
        let seen: Vec<&String> = roots[&root].journals.keys().collect();
        assert_eq!(
            seen,
            vec!["r1"],
            "the root was rebuilt: r2's view went with it"
        );
    }
}
