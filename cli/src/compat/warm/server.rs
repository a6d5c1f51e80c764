//! The server half of `babysitter warm serve`: the accept loop, one command at a time, and where
//! a command's logs go. The per-runs-root state it keeps between commands is [`super::context`].
//!
//! One command runs at a time. A client that arrives while one runs is told so at once and
//! runs its command itself: the server never queues behind a command, so a slow one (a hook
//! near its time limit, a wait for a run lock) never holds up another run's calls, and since
//! the server holds no lock between commands a local run is exactly as safe as a served one.
//! The deferred work of a command (its state cache) runs after its answer and before the next
//! command; a client that arrives meanwhile waits for it (it is short, and the calls of a
//! plugin's loop follow each other that closely).
//!
//! Shutting down (idle, a signal, `warm stop`) first removes the socket, so no new client can
//! connect; clients already queued in the listen backlog are answered "not run" and run
//! locally; a command in progress finishes and is answered. Only a crash leaves a client not
//! knowing whether its command ran.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use babysitter_common::EnvMap;
use babysitter_journal::fs::FsRuntime;
use tracing_subscriber::filter::LevelFilter;

use super::super::output;
use super::super::paths::UserFiles;
use super::context::{Context, Scope, WARM};
use super::wire::{Request, Response, read_request, write_response};

/// Connections handled at once (a client writes its request as soon as it connects).
const MAX_CONNECTIONS: usize = 64;
/// How long a connection may take to send its request.
const REQUEST_WAIT: Duration = Duration::from_secs(30);

/// Where the server's logs go: a command's into its client's stderr (at the client's
/// `BABYSITTER_LOG_LEVEL`), everything else onto the server's own stderr. One command runs at
/// a time, so the command being run is one slot — which also catches what the engine's JS
/// thread logs for it (a process's `console.warn`), outside the command's task.
pub mod logs {
    use super::*;

    static CURRENT: Mutex<Option<(LevelFilter, Vec<u8>)>> = Mutex::new(None);

    fn current() -> std::sync::MutexGuard<'static, Option<(LevelFilter, Vec<u8>)>> {
        CURRENT.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The server's subscriber: commands' logs to their clients (at `warn` at least, which a
    /// client's level narrows), the server's own at `own`.
    pub fn install(own: LevelFilter) {
        babysitter_common::telemetry::init_command_logging_to(
            LevelFilter::WARN.max(own),
            Router { own },
        );
    }

    /// From now until [`end`], logs go to the command's client, at `level`.
    pub fn begin(level: LevelFilter) {
        *current() = Some((level, Vec::new()));
    }

    /// What the command logged.
    pub fn end() -> Vec<u8> {
        current().take().map(|(_, buf)| buf).unwrap_or_default()
    }

    /// The server's `MakeWriter` (see [`babysitter_common::telemetry::init_command_logging_to`]).
    #[derive(Debug, Clone, Copy)]
    pub struct Router {
        /// The server's own level, for what is logged outside any command.
        pub own: LevelFilter,
    }

    pub enum Writer {
        Command,
        Stderr,
        Sink,
    }

    impl std::io::Write for Writer {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            match self {
                Writer::Command => {
                    if let Some((_, out)) = current().as_mut() {
                        out.extend_from_slice(buf);
                        return Ok(buf.len());
                    }
                    std::io::stderr().write(buf)
                }
                Writer::Stderr => std::io::stderr().write(buf),
                Writer::Sink => Ok(buf.len()),
            }
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Router {
        type Writer = Writer;

        fn make_writer(&'a self) -> Writer {
            Writer::Stderr
        }

        fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> Writer {
            match current().as_ref() {
                Some((level, _)) if *level >= *meta.level() => Writer::Command,
                Some(_) => Writer::Sink,
                None if self.own >= *meta.level() => Writer::Stderr,
                None => Writer::Sink,
            }
        }
    }
}

/// The running server.
pub(super) struct Server {
    pub ctx: Arc<Context>,
    /// This binary's build (see `warm::build_id`).
    pub build: String,
    pub verbose: bool,
    served: AtomicU64,
    /// Held while a command runs, and its deferred work after it.
    busy: tokio::sync::Mutex<()>,
    /// Set while the holder of `busy` does deferred work (short: a client waits for it).
    deferring: std::sync::atomic::AtomicBool,
    /// Woken each time `busy` is released.
    released: tokio::sync::Notify,
    /// Clients waiting for their turn (see [`Server::take_turn`]).
    waiting: AtomicUsize,
    stop: tokio::sync::Notify,
}

impl Server {
    /// A server whose commands' stores and run holds are on `fs`.
    pub fn new(build: String, verbose: bool, fs: FsRuntime) -> Server {
        Server {
            ctx: Arc::new(Context::new(fs)),
            build,
            verbose,
            served: AtomicU64::new(0),
            busy: tokio::sync::Mutex::new(()),
            deferring: std::sync::atomic::AtomicBool::new(false),
            released: tokio::sync::Notify::new(),
            waiting: AtomicUsize::new(0),
            stop: tokio::sync::Notify::new(),
        }
    }

    /// Serves until idle for `idle` (when set), a signal or a `Stop` request; then drains.
    pub async fn run(
        self: Arc<Self>,
        listener: &tokio::net::UnixListener,
        socket: &Path,
        idle: Option<Duration>,
    ) -> u8 {
        use tokio::signal::unix::{SignalKind, signal};
        let (Ok(mut term), Ok(mut int)) = (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) else {
            eprintln!("babysitter warm: cannot install signal handlers");
            return 1;
        };
        let me = rustix::process::getuid().as_raw();
        let limit = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
        let mut handlers = tokio::task::JoinSet::new();
        let mut last = tokio::time::Instant::now();
        loop {
            let idle_at = idle.map(|d| last + d);
            let accepted = tokio::select! {
                r = listener.accept() => r,
                _ = term.recv() => break,
                _ = int.recv() => break,
                () = self.stop.notified() => break,
                () = sleep_until(idle_at) => {
                    // No connection in hand (its permit is dropped even if its task panics).
                    if limit.available_permits() == MAX_CONNECTIONS {
                        eprintln!("babysitter warm: idle, exiting");
                        break;
                    }
                    last = tokio::time::Instant::now();
                    continue;
                }
            };
            last = tokio::time::Instant::now();
            while handlers.try_join_next().is_some() {}
            let stream = match accepted {
                Ok((s, _)) => s,
                Err(e) => {
                    eprintln!("babysitter warm: accept failed: {e}");
                    continue;
                }
            };
            if !stream.peer_cred().is_ok_and(|c| c.uid() == me) {
                continue; // not the server's user: closed without a word
            }
            let Ok(permit) = limit.clone().try_acquire_owned() else {
                handlers.spawn(refuse(stream, "too many clients at once"));
                continue;
            };
            let server = self.clone();
            handlers.spawn(async move {
                server.handle(stream).await;
                drop(permit);
            });
        }
        // No new client can connect once the socket is gone; those already in the backlog are
        // told to run their commands themselves; commands in progress finish.
        let _ = std::fs::remove_file(socket);
        while let Ok(Ok((stream, _))) =
            tokio::time::timeout(Duration::from_millis(20), listener.accept()).await
        {
            handlers.spawn(refuse(stream, "the warm server is stopping"));
        }
        while handlers.join_next().await.is_some() {}
        self.ctx.flush().await;
        0
    }

    async fn handle(&self, mut stream: tokio::net::UnixStream) {
        let request = match tokio::time::timeout(REQUEST_WAIT, read_request(&mut stream)).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                eprintln!("babysitter warm: bad request: {e}");
                return;
            }
            Err(_) => {
                eprintln!("babysitter warm: a client sent nothing for {REQUEST_WAIT:?}");
                return;
            }
        };
        match request {
            Request::Ping => {
                let out = format!("served: {} commands\n", self.served.load(Ordering::Acquire));
                let _ = write_response(&mut stream, &ran(0, out.into_bytes(), Vec::new())).await;
            }
            Request::Stop => {
                let _ = write_response(&mut stream, &ran(0, Vec::new(), Vec::new())).await;
                self.stop.notify_one();
            }
            Request::Run { build, .. } if build != self.build => {
                let why = "the warm server is another build of babysitter";
                let _ = write_response(&mut stream, &Response::NotRun(why.into())).await;
            }
            Request::Run { argv, env, cwd, .. } => {
                let Some(turn) = self.take_turn().await else {
                    let why = "the warm server is busy with another command";
                    let _ = write_response(&mut stream, &Response::NotRun(why.into())).await;
                    return;
                };
                let response = self.execute(argv, env.into_iter().collect(), cwd).await;
                // From here on a client that arrives waits its turn instead of going local.
                turn.deferring();
                let _ = write_response(&mut stream, &response).await;
                drop(stream);
                // The command's deferred work (state caches), before the next command.
                let deferred = std::mem::take(
                    &mut *self.ctx.deferred.lock().unwrap_or_else(|p| p.into_inner()),
                );
                let started = tokio::time::Instant::now();
                let works = deferred.len();
                for work in deferred {
                    work.await;
                }
                if self.verbose && works > 0 {
                    eprintln!(
                        "babysitter warm: deferred work {:.2} ms",
                        started.elapsed().as_secs_f64() * 1000.0
                    );
                }
                drop(turn);
            }
        }
    }

    /// The turn to run a command: at once when the server is free, after the deferred work of
    /// the previous command when it is doing that; `None` while another command runs.
    async fn take_turn(&self) -> Option<Turn<'_>> {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            // Registered before the check: a release between the two is not missed.
            released.as_mut().enable();
            if let Ok(lock) = self.busy.try_lock() {
                return Some(Turn {
                    server: self,
                    lock: Some(lock),
                });
            }
            if !self.deferring.load(Ordering::Acquire) {
                return None;
            }
            self.waiting.fetch_add(1, Ordering::AcqRel);
            released.await;
            self.waiting.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Runs one client command as a local call would, its output and logs captured.
    async fn execute(&self, argv: Vec<String>, env: EnvMap, cwd: PathBuf) -> Response {
        self.served.fetch_add(1, Ordering::AcqRel);
        let started = tokio::time::Instant::now();
        let name = argv.first().cloned().unwrap_or_default();
        let fs = self.ctx.fs.clone();
        let scope = Scope {
            ctx: self.ctx.clone(),
            user: UserFiles::of(&env, &cwd),
        };
        logs::begin(babysitter_common::telemetry::command_log_level(
            env.get("BABYSITTER_LOG_LEVEL"),
        ));
        // Awaited here, not spawned: a spawned task's end wakes this handler behind whatever
        // else the command left ready (a journal's background snapshot), before its answer.
        let task = output::captured(WARM.scope(scope, async move {
            let home = std::sync::Arc::new(crate::compat::client::OnDisk::Warm);
            crate::compat::execute(&argv, &env, cwd, fs, home).await
        }));
        let done =
            futures::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(Box::pin(task))).await;
        let mut logged = logs::end();
        if self.verbose {
            eprintln!(
                "babysitter warm: {name} {:.2} ms",
                started.elapsed().as_secs_f64() * 1000.0
            );
        }
        match done {
            Ok((code, cap)) => {
                logged.extend_from_slice(&cap.stderr);
                ran(code, cap.stdout, logged)
            }
            Err(panic) => {
                self.ctx.clear();
                let e = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a command panicked".to_owned());
                let msg = format!("[babysitter] internal error in the warm server: {e}\n");
                ran(1, Vec::new(), msg.into_bytes())
            }
        }
    }
}

/// A command's turn: while it is held no other command runs. Given back when dropped, also
/// when the command's deferred work panics.
struct Turn<'a> {
    server: &'a Server,
    lock: Option<tokio::sync::MutexGuard<'a, ()>>,
}

impl Turn<'_> {
    /// The command is done; what is left is its answer and deferred work.
    fn deferring(&self) {
        self.server.deferring.store(true, Ordering::Release);
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        self.server.deferring.store(false, Ordering::Release);
        self.lock.take();
        self.server.released.notify_waiters();
    }
}

fn ran(code: u8, out: Vec<u8>, err: Vec<u8>) -> Response {
    Response::Ran { code, out, err }
}

/// Answers a client "not run" (it runs its command itself).
async fn refuse(mut stream: tokio::net::UnixStream, why: &'static str) {
    if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), read_request(&mut stream)).await
    {
        let _ = write_response(&mut stream, &Response::NotRun(why.into())).await;
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_gets_the_logs_at_its_level_and_the_server_the_rest() {
        use tracing_subscriber::Layer as _;
        use tracing_subscriber::layer::SubscriberExt as _;
        let layer = tracing_subscriber::fmt::layer()
            .without_time()
            .with_ansi(false)
            .with_writer(logs::Router {
                own: LevelFilter::OFF,
            })
            .with_filter(LevelFilter::WARN);
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            logs::begin(LevelFilter::WARN);
            tracing::warn!("first warning");
            tracing::info!("below the server's level");
            let got = String::from_utf8(logs::end()).unwrap();
            assert!(
                got.contains("WARN") && got.contains("first warning"),
                "{got}"
            );
            assert!(!got.contains("below"), "{got}");
            // A client at `error` sees its command's errors, not its warnings.
            logs::begin(LevelFilter::ERROR);
            tracing::warn!("second warning");
            tracing::error!("an error");
            let got = String::from_utf8(logs::end()).unwrap();
            assert!(got.contains("an error") && !got.contains("second"), "{got}");
            // Outside a command nothing is kept for a client.
            tracing::error!("between commands");
            assert!(logs::end().is_empty());
        });
    }

    /// A client's request to the server at `socket`, answered.
    async fn ask(socket: &Path, request: Request) -> Response {
        let socket = socket.to_path_buf();
        tokio::task::spawn_blocking(move || {
            let mut s = std::os::unix::net::UnixStream::connect(&socket).unwrap();
            super::super::wire::write_request(&mut s, &request).unwrap();
            super::super::wire::read_response(&mut s).unwrap()
        })
        .await
        .unwrap()
    }

    fn list(build: &str, cwd: &Path) -> Request {
        Request::Run {
            build: build.into(),
            argv: vec!["task:list".into(), "no-such-run".into(), "--json".into()],
            env: vec![("BABYSITTER_RUNS_DIR".into(), cwd.display().to_string())],
            cwd: cwd.to_path_buf(),
        }
    }

    #[tokio::test]
    async fn another_build_or_a_busy_server_runs_nothing_and_stop_drains() {
        let tmp = tempfile::tempdir().unwrap();
        let socket = tmp.path().join("warm.sock");
        let listener = tokio::net::UnixListener::bind(&socket).unwrap();
        let server = Arc::new(Server::new("this-build".into(), false, FsRuntime::new()));
        let serving = {
            let (server, socket) = (server.clone(), socket.clone());
            tokio::spawn(async move { server.run(&listener, &socket, None).await })
        };
        let other = ask(&socket, list("another-build", tmp.path())).await;
        assert!(
            matches!(&other, Response::NotRun(why) if why.contains("another build")),
            "{other:?}"
        );
        let busy = server.busy.lock().await;
        let queued = ask(&socket, list("this-build", tmp.path())).await;
        assert!(
            matches!(&queued, Response::NotRun(why) if why.contains("busy")),
            "{queued:?}"
        );
        drop(busy);
        assert_eq!(server.served.load(Ordering::Acquire), 0, "neither ran");
        // Deferred work of the previous command: the client waits for it, then runs.
        let turn = server.busy.lock().await;
        server.deferring.store(true, Ordering::Release);
        let waiter = {
            let (socket, cwd) = (socket.clone(), tmp.path().to_path_buf());
            tokio::spawn(async move { ask(&socket, list("this-build", &cwd)).await })
        };
        while server.waiting.load(Ordering::Acquire) == 0 {
            tokio::task::yield_now().await;
        }
        server.deferring.store(false, Ordering::Release);
        drop(turn);
        server.released.notify_waiters();
        let after = waiter.await.unwrap();
        assert!(matches!(after, Response::Ran { code: 1, .. }), "{after:?}");
        assert_eq!(server.served.load(Ordering::Acquire), 1);
        // Now it runs: the missing run is the command's own error, on the client's stderr.
        match ask(&socket, list("this-build", tmp.path())).await {
            Response::Ran { code, err, .. } => {
                assert_eq!(code, 1);
                assert!(
                    String::from_utf8_lossy(&err).contains("no-such-run"),
                    "{err:?}"
                );
            }
            r => panic!("{r:?}"),
        }
        assert_eq!(server.served.load(Ordering::Acquire), 2);
        assert_eq!(
            ask(&socket, Request::Stop).await,
            Response::Ran {
                code: 0,
                out: Vec::new(),
                err: Vec::new()
            }
        );
        assert_eq!(serving.await.unwrap(), 0);
        assert!(
            !socket.try_exists().unwrap(),
            "no client can connect to a stopped server"
        );
    }
}
