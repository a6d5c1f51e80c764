//! What a command run by the warm server sees of it: the per-runs-root state the server keeps
//! between commands (a journal and a warm engine per runs root and client's user files), and the
//! task-local [`Scope`] through which a command reaches it ([`shared`], [`defer`], [`serving`]).
//!
//! It sits below the commands (the run-directory handle opens its journal here) and below the
//! server that runs them, so neither reaches the other through it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use babysitter_engine::{Engine, EngineOptions};
use babysitter_journal::Journal;
use babysitter_journal::fs::FsRuntime;

use crate::compat::paths::UserFiles;

/// Distinct runs one runs root may hold before its state is rebuilt (bounds the server's memory).
const MAX_RUNS_PER_ROOT: usize = 256;
/// Runs roots kept at once (each holds a journal and an engine); the least recently used goes.
const MAX_ROOTS: usize = 8;
/// Work a command leaves for after its answer (see [`defer`]).
pub type Deferred = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// What a command run by the server sees of it.
#[derive(Clone)]
pub(super) struct Scope {
    pub(super) ctx: Arc<Context>,
    /// The client's per-user files.
    pub(super) user: UserFiles,
}

tokio::task_local! {
    pub(super) static WARM: Scope;
}

/// Whether this command is being run by the warm server for a client.
pub fn serving() -> bool {
    WARM.try_with(|_| ()).is_ok()
}

/// The shared journal and warm engine for a run under `root`, when this command runs inside the
/// warm server; `None` for a local call.
pub fn shared(root: &Path, run_id: &str, run_dir: &Path) -> Option<(Journal, Engine)> {
    WARM.try_with(|s| s.ctx.root(root, &s.user, run_id, run_dir))
        .ok()?
}

/// Inside the warm server: queues `work` to run after the client has its answer and before the
/// next command; a local call gets it back to run now.
pub fn defer(work: Deferred) -> Result<(), Deferred> {
    match WARM.try_with(|s| s.ctx.clone()) {
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

/// Per-runs-root state shared by the commands the server runs.
pub struct Context {
    /// The filesystem journal runtime of every root's store and every command's run holds
    /// (one per process: a command's appends go ahead under its own hold).
    pub(in crate::compat::warm) fs: FsRuntime,
    roots: Mutex<HashMap<(PathBuf, UserFiles), Root>>,
    pub(in crate::compat::warm) deferred: Mutex<Vec<Deferred>>,
    tick: AtomicU64,
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

impl Context {
    pub(in crate::compat::warm) fn new(fs: FsRuntime) -> Context {
        Context {
            fs,
            roots: Mutex::default(),
            deferred: Mutex::default(),
            tick: AtomicU64::default(),
        }
    }

    /// Waits for the journals' background writes (snapshots) to end, then settles the commit
    /// logs they committed to.
    pub(in crate::compat::warm) async fn flush(&self) {
        let journals: Vec<Journal> = {
            let roots = self.roots.lock().unwrap_or_else(|p| p.into_inner());
            roots.values().map(|r| r.journal.clone()).collect()
        };
        for journal in journals {
            journal.flush().await;
        }
        self.fs.settle().await;
    }

    /// The journal and warm engine for `run_id` under `root`, for a client whose per-user files
    /// are `user` (its `ctx.log` directory and breakpoint rules: two clients with different
    /// homes never share an engine).
    fn root(
        &self,
        root: &Path,
        user: &UserFiles,
        run_id: &str,
        run_dir: &Path,
    ) -> Option<(Journal, Engine)> {
        use std::os::unix::fs::MetadataExt as _;
        let inode = std::fs::metadata(run_dir.join("journal"))
            .ok()
            .map(|m| m.ino());
        let key = (root.to_path_buf(), user.clone());
        let mut roots = self.roots.lock().unwrap_or_else(|p| p.into_inner());
        let stale = roots.get(&key).is_some_and(|r| {
            r.journals.len() >= MAX_RUNS_PER_ROOT && !r.journals.contains_key(run_id)
                || r.journals.get(run_id).is_some_and(|seen| *seen != inode)
        });
        if stale {
            roots.remove(&key);
        }
        if !roots.contains_key(&key) {
            if roots.len() >= MAX_ROOTS
                && let Some(oldest) = roots
                    .iter()
                    .min_by_key(|(_, r)| r.used)
                    .map(|(k, _)| k.clone())
            {
                roots.remove(&oldest);
            }
            let journal = Journal::new(
                // A long-lived process: a fan-out's events commit through the run's commit
                // log (one durable write; settled in the background, waited for at exit).
                Arc::new(self.fs.store(root).inline_io().commit_log()),
                babysitter_journal::JournalOptions {
                    // A long-lived process: snapshots are written after the command has
                    // answered, not while its client waits (flushed before the server exits).
                    background_snapshots: true,
                    ..crate::journal_options::for_cli()
                },
            );
            let mut opts = EngineOptions::new(root);
            opts.js_threads = 1;
            opts.cached_runs = 64;
            opts.warm = true;
            user.clone().apply_to(&mut opts);
            let engine = Engine::new(journal.clone(), opts).ok()?;
            roots.insert(
                key.clone(),
                Root {
                    journal,
                    engine,
                    journals: HashMap::new(),
                    used: 0,
                },
            );
        }
        let r = roots.get_mut(&key)?;
        r.used = self.tick.fetch_add(1, Ordering::Relaxed);
        r.journals.insert(run_id.to_owned(), inode);
        Some((r.journal.clone(), r.engine.clone()))
    }

    /// Forgets every root (after a panic mid-command, what they hold is suspect).
    pub(in crate::compat::warm) fn clear(&self) {
        self.roots.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

#[cfg(test)]
mod tests {
    use babysitter_common::EnvMap;

    use super::*;

    #[tokio::test]
    async fn roots_are_bounded_and_a_replaced_journal_drops_its_root() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = Context::new(FsRuntime::new());
        let user = UserFiles::default();
        let run_in = |i: usize| {
            let root = tmp.path().join(format!("root{i}"));
            let dir = root.join("r1");
            std::fs::create_dir_all(dir.join("journal")).unwrap();
            (root, dir)
        };
        for i in 0..=MAX_ROOTS {
            let (root, dir) = run_in(i);
            assert!(ctx.root(&root, &user, "r1", &dir).is_some());
        }
        let key = |root: PathBuf| (root, user.clone());
        let roots = ctx.roots.lock().unwrap();
        assert_eq!(roots.len(), MAX_ROOTS);
        assert!(
            !roots.contains_key(&key(tmp.path().join("root0"))),
            "the least recently used root went"
        );
        drop(roots);
        // Another process swaps the run's journal directory (run:repair-journal).
        let (root, dir) = run_in(MAX_ROOTS);
        let (root2, dir2) = (root.clone(), root.join("r2"));
        std::fs::create_dir_all(dir2.join("journal")).unwrap();
        ctx.root(&root2, &user, "r2", &dir2).unwrap();
        std::fs::rename(dir.join("journal"), dir.join("journal.old")).unwrap();
        std::fs::create_dir(dir.join("journal")).unwrap();
        ctx.root(&root, &user, "r1", &dir).unwrap();
        let roots = ctx.roots.lock().unwrap();
        let seen: Vec<&String> = roots[&key(root)].journals.keys().collect();
        assert_eq!(
            seen,
            vec!["r1"],
            "the root was rebuilt: r2's view went with it"
        );
    }

    #[test]
    fn clients_with_other_homes_get_engines_of_their_own() {
        let tmp = tempfile::tempdir().unwrap();
        let ctx = Context::new(FsRuntime::new());
        let root = tmp.path().join("runs");
        let dir = root.join("r1");
        std::fs::create_dir_all(dir.join("journal")).unwrap();
        let user_of = |home: &str| {
            UserFiles::of(
                &EnvMap::new().with("HOME", tmp.path().join(home).display().to_string()),
                tmp.path(),
            )
        };
        let (a, b) = (user_of("a"), user_of("b"));
        assert_ne!(a, b);
        ctx.root(&root, &a, "r1", &dir).unwrap();
        ctx.root(&root, &b, "r1", &dir).unwrap();
        ctx.root(&root, &a, "r1", &dir).unwrap();
        assert_eq!(ctx.roots.lock().unwrap().len(), 2);
    }
}
