//! The JS worker threads. QuickJS values cannot cross threads, so every run's session lives on
//! one thread for its whole life: runs are pinned to a thread by a hash of their id, and the
//! async engine sends closures to run against the run's session slot.
//!
//! Each thread keeps at most `per_thread` warm sessions and evicts the least recently used one;
//! an evicted run replays cold on its next iteration.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::mpsc;

use tokio::sync::oneshot;

use crate::engine::EngineError;
use crate::engine::session::Session;

type Job = Box<dyn FnOnce(&mut Slots) + Send>;

/// The sessions of one worker thread.
#[derive(Debug, Default)]
pub struct Slots {
    sessions: HashMap<String, (u64, Session)>,
    tick: u64,
    per_thread: usize,
}

impl Slots {
    /// The run's slot: `None` when it has no warm session.
    fn take(&mut self, run_id: &str) -> Option<Session> {
        self.sessions.remove(run_id).map(|(_, s)| s)
    }

    fn put(&mut self, run_id: String, session: Session) {
        self.tick += 1;
        self.sessions.insert(run_id, (self.tick, session));
        while self.sessions.len() > self.per_thread.max(1) {
            let oldest = self
                .sessions
                .iter()
                .min_by_key(|(_, (t, _))| *t)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.sessions.remove(&k);
                }
                None => break,
            }
        }
    }

    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }
}

#[derive(Debug)]
pub struct Pool {
    senders: Vec<mpsc::Sender<Job>>,
}

impl Pool {
    pub fn new(threads: usize, cached_runs: usize) -> Result<Self, EngineError> {
        let threads = threads.max(1);
        let per_thread = cached_runs.div_ceil(threads);
        let mut senders = Vec::with_capacity(threads);
        for i in 0..threads {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name(format!("babysitter-js-{i}"))
                // QuickJS recursion and deep process code want more than the 2 MiB default.
                .stack_size(16 * 1024 * 1024)
                .spawn(move || {
                    let mut slots = Slots {
                        per_thread,
                        ..Default::default()
                    };
                    while let Ok(job) = rx.recv() {
                        job(&mut slots);
                    }
                })
                .map_err(|e| {
                    EngineError::Engine(format!("cannot start a JS worker thread: {e}"))
                })?;
            senders.push(tx);
        }
        Ok(Self { senders })
    }

    fn pick(&self, run_id: &str) -> &mpsc::Sender<Job> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        run_id.hash(&mut h);
        &self.senders[(h.finish() as usize) % self.senders.len()]
    }

    /// Runs `f` on the run's thread with its warm session (if any); `f` returns the session to
    /// keep (or `None` to drop it) and a value.
    pub async fn with_session<T: Send + 'static>(
        &self,
        run_id: &str,
        f: impl FnOnce(Option<Session>) -> (Option<Session>, T) + Send + 'static,
    ) -> Result<T, EngineError> {
        let (tx, rx) = oneshot::channel();
        let id = run_id.to_owned();
        let job: Job = Box::new(move |slots: &mut Slots| {
            let current = slots.take(&id);
            let (keep, out) = f(current);
            if let Some(s) = keep
                && !s.is_poisoned()
            {
                slots.put(id, s);
            }
            let _ = tx.send(out);
        });
        self.pick(run_id)
            .send(job)
            .map_err(|_| EngineError::Engine("the JS worker thread is gone".into()))?;
        rx.await.map_err(|_| {
            EngineError::Engine(
                "the JS worker thread dropped the job (a panic in the engine)".into(),
            )
        })
    }

    /// Drops the run's warm session, if any.
    pub async fn evict(&self, run_id: &str) -> Result<(), EngineError> {
        self.with_session(run_id, |_| (None, ())).await
    }

    /// Warm sessions and the JS heap bytes they hold, over all threads.
    pub async fn stats(&self) -> Result<(usize, usize), EngineError> {
        let mut total = (0, 0);
        for s in &self.senders {
            let (tx, rx) = oneshot::channel();
            let job: Job = Box::new(move |slots: &mut Slots| {
                let mem: usize = slots.sessions.values().map(|(_, s)| s.memory_usage()).sum();
                let _ = tx.send((slots.len(), mem));
            });
            s.send(job)
                .map_err(|_| EngineError::Engine("the JS worker thread is gone".into()))?;
            let (n, m) = rx
                .await
                .map_err(|_| EngineError::Engine("the JS worker thread dropped the job".into()))?;
            total.0 += n;
            total.1 += m;
        }
        Ok(total)
    }
}
