//! Where runs' JS executes, and the warm sessions kept between iterations.
//!
//! A warm iteration is cheap (tens of microseconds of JS), so the thread hop that used to
//! carry every iteration to a run's pinned JS thread (a channel send, a wake-up of that thread,
//! a wake-up of the async caller on the way back) cost more than the JS itself. Sessions are
//! `Send` (rquickjs `parallel`, the host keeps no thread-bound state), so they are kept here, in
//! one LRU cache, and an iteration takes its run's session out, drives it and puts it back.
//!
//! Which thread drives a session is [`JsPlacement`]'s choice:
//! - **Inline warm continuations** (the default, for the orchestrator service): a warm
//!   continuation runs on the calling thread — a runtime worker — under a short time slice
//!   instead of the run's CPU limit. A continuation that outruns the slice is aborted (QuickJS's
//!   interrupt), its session dropped, and the iteration replays the run cold on a JS thread with
//!   the full limit; the run is marked heavy and its later continuations go to a JS thread too,
//!   as do those of a run whose last drive took more than a quarter of the slice. So a process
//!   that loops for its whole CPU limit holds a runtime worker for one slice at most, and other
//!   runs' RPCs keep being served. Aborting is safe because a cold replay is always equivalent
//!   (the property the warm/cold tests check): nothing a drive does is journaled until it has
//!   ended, and the effect ids the aborted drive drew are handed to the replay, which requests
//!   the same effects in the same order.
//! - **Cold starts and replays** (a run's first iteration, after eviction or restart) run on the
//!   JS threads: replaying a long run takes milliseconds of JS and must not hold a runtime
//!   worker. Their threads have 16 MiB stacks (deep process code).
//! - **`JsPlacement::CallingThread`**: everything on the calling thread with the full CPU limit
//!   and no JS thread at all — for a process that drives one run and has nothing else to keep
//!   responsive (the CLI).
//!
//! Why not the alternatives: `tokio::task::block_in_place` hands the runtime worker's core to
//! another thread on every call (a wake-up per iteration again), is banned in this workspace and
//! panics on a current-thread runtime; making the hop cheaper means spinning, which burns a core
//! per waiting side on a small machine.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::EngineError;
use crate::session::Session;
use crate::views::EffectView;

type Job = Box<dyn FnOnce() + Send>;

/// Where runs' JS executes (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum JsPlacement {
    /// Warm continuations on the calling thread, cut off after `slice`; cold starts, replays and
    /// heavy runs on the JS threads.
    InlineWarm { slice: Duration },
    /// Everything on the JS threads (one round trip per iteration).
    Threads,
    /// Everything on the calling thread with the full CPU limit; no JS thread is started.
    CallingThread,
}

impl Default for JsPlacement {
    fn default() -> Self {
        Self::InlineWarm {
            slice: Duration::from_millis(20),
        }
    }
}

/// A run's warm session and the journal head it has consumed.
#[derive(Debug)]
pub struct Warm {
    pub session: Session,
    pub consumed: u64,
    /// How long its last drive took.
    pub last_js: Duration,
}

/// A resolution committed through this engine since the run's session last ran, with the view
/// the session will be handed (so the iteration reads neither the journal tail nor the result
/// file it was just given).
#[derive(Debug)]
pub struct Arrived {
    /// Sequence number of the event.
    pub seq: u64,
    /// The view of the effect it resolved, by invocation key (`None`: an event committed with
    /// the resolution that changes nothing the process sees, e.g. `COST_TRACKED`).
    pub update: Option<(String, EffectView)>,
}

/// Resolutions kept per run before the next iteration; past that the iteration reads the tail.
const MAX_ARRIVED: usize = 4096;

#[derive(Debug, Default)]
struct Entry {
    warm: Option<Warm>,
    arrived: Vec<Arrived>,
    /// Its continuations outgrew the inline slice: they run on a JS thread.
    heavy: bool,
    tick: u64,
}

#[derive(Debug, Default)]
struct Cache {
    entries: HashMap<String, Entry>,
    tick: u64,
}

#[derive(Debug)]
pub struct Pool {
    senders: Vec<mpsc::Sender<Job>>,
    placement: JsPlacement,
    capacity: usize,
    cache: Mutex<Cache>,
}

impl Pool {
    pub fn new(
        threads: usize,
        cached_runs: usize,
        placement: JsPlacement,
    ) -> Result<Self, EngineError> {
        let threads = if placement == JsPlacement::CallingThread {
            0
        } else {
            threads.max(1)
        };
        let mut senders = Vec::with_capacity(threads);
        for i in 0..threads {
            let (tx, rx) = mpsc::channel::<Job>();
            std::thread::Builder::new()
                .name(format!("babysitter-js-{i}"))
                // QuickJS recursion and deep process code want more than the 2 MiB default.
                .stack_size(16 * 1024 * 1024)
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        job();
                    }
                })
                .map_err(|e| {
                    EngineError::Engine(format!("cannot start a JS worker thread: {e}"))
                })?;
            senders.push(tx);
        }
        Ok(Self {
            senders,
            placement,
            capacity: cached_runs.max(1),
            cache: Mutex::new(Cache::default()),
        })
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the run's warm session out of the cache (the caller puts it back with
    /// [`Pool::put`]), and whether the run is heavy.
    pub fn take(&self, run_id: &str) -> (Option<Warm>, bool) {
        let mut cache = self.cache();
        match cache.entries.get_mut(run_id) {
            Some(e) => (e.warm.take(), e.heavy),
            None => (None, false),
        }
    }

    /// Keeps the run's session warm (a poisoned one is dropped), evicting the least recently
    /// used one beyond the capacity.
    pub fn put(&self, run_id: &str, warm: Warm) {
        if warm.session.is_poisoned() {
            return;
        }
        let dropped = {
            let mut cache = self.cache();
            cache.tick += 1;
            let tick = cache.tick;
            let entry = cache.entries.entry(run_id.to_owned()).or_default();
            entry.warm = Some(warm);
            entry.tick = tick;
            let mut dropped = Vec::new();
            while cache.entries.len() > self.capacity {
                let oldest = cache
                    .entries
                    .iter()
                    .min_by_key(|(_, e)| e.tick)
                    .map(|(k, _)| k.clone());
                match oldest.and_then(|k| cache.entries.remove(&k)) {
                    Some(e) => dropped.push(e),
                    None => break,
                }
            }
            dropped
        };
        // Sessions are freed outside the lock.
        drop(dropped);
    }

    /// Marks the run heavy: its continuations run on a JS thread from now on.
    pub fn mark_heavy(&self, run_id: &str) {
        let mut cache = self.cache();
        cache.tick += 1;
        let tick = cache.tick;
        let entry = cache.entries.entry(run_id.to_owned()).or_default();
        entry.heavy = true;
        entry.tick = tick;
    }

    /// Keeps a resolution for the run's next iteration, if the run has a cache entry (a warm
    /// session, or one being driven).
    pub fn stash(&self, run_id: &str, arrived: Arrived) {
        let mut cache = self.cache();
        if let Some(e) = cache.entries.get_mut(run_id) {
            if e.arrived.len() >= MAX_ARRIVED {
                e.arrived.clear();
            }
            e.arrived.push(arrived);
        }
    }

    /// The resolutions stashed for the run, in journal order.
    pub fn take_arrived(&self, run_id: &str) -> Vec<Arrived> {
        let mut arrived = self
            .cache()
            .entries
            .get_mut(run_id)
            .map(|e| std::mem::take(&mut e.arrived))
            .unwrap_or_default();
        arrived.sort_by_key(|a| a.seq);
        arrived
    }

    /// Drops the run's warm session, if any.
    pub fn evict(&self, run_id: &str) {
        let removed = self.cache().entries.remove(run_id);
        drop(removed);
    }

    /// Runs `f` on a JS thread (on the calling thread with [`JsPlacement::CallingThread`]).
    pub async fn on_thread<T: Send + 'static>(
        &self,
        run_id: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, EngineError> {
        if self.senders.is_empty() {
            return Ok(f());
        }
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
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

    fn pick(&self, run_id: &str) -> &mpsc::Sender<Job> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        run_id.hash(&mut h);
        &self.senders[(h.finish() as usize) % self.senders.len()]
    }

    /// The time slice a warm continuation of a run gets on the calling thread; `None`: it runs
    /// on a JS thread. `last_js` is how long the session's previous drive took.
    pub fn inline_slice(&self, heavy: bool, last_js: Duration) -> Option<Duration> {
        match self.placement {
            JsPlacement::CallingThread => Some(Duration::MAX),
            JsPlacement::Threads => None,
            JsPlacement::InlineWarm { slice } => (!heavy && last_js < slice / 4).then_some(slice),
        }
    }

    /// Warm sessions held and the JS heap bytes they hold.
    pub fn stats(&self) -> (usize, usize) {
        let cache = self.cache();
        cache
            .entries
            .values()
            .filter_map(|e| e.warm.as_ref())
            .fold((0, 0), |(n, m), w| (n + 1, m + w.session.memory_usage()))
    }
}
