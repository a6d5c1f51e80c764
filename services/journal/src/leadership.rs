//! Leadership: one active writer (orchestrator) per journal, several standing by.
//!
//! Why: two orchestrators on one journal both drive its runs, so each task runs twice and their
//! views never converge. So writers take a **lease**, a control document in the store
//! (`leader-<group>`, [`LeaseRecord`]) written only by compare-and-swap
//! ([`JournalStore::write_control`]). Every grant bumps the **epoch**; every write a writer
//! makes carries the epoch it was granted and is refused ([`JournalError::Fenced`]) unless that
//! epoch still holds the lease — so a deposed writer (paused, partitioned, slow) cannot write
//! after another took over.
//!
//! The [`Arbiter`] decides, on its own clock only (never comparing clocks of two machines):
//! - a lease is free when absent, released, held by the same candidate, or **unchanged for its
//!   whole ttl** since this arbiter first saw that version (its holder stopped renewing);
//! - a holder's writes are admitted while its last renewal (timed from *before* that write was
//!   sent) is younger than the ttl less a margin, so it stops writing before any other arbiter
//!   could see the lease lapse;
//! - admission is a read lock held for the whole write and a takeover takes the write lock, so
//!   where one arbiter serves every writer (the journal service: orchestrators with
//!   `journal.remote`) the fence is exact: a takeover waits for the old term's writes in flight,
//!   and every later write of that term is refused.
//!
//! An orchestrator over an in-process store runs its own arbiter ([`FencedStore`]); between two
//! such processes exclusion rests on the lease timing above (the margin covers clock-rate drift,
//! not a process paused between its check and its write — the journal service's fence has no
//! such gap, so it is the deployment for several orchestrators over one object store).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::sync::{OwnedRwLockReadGuard, RwLock, watch};
use tokio::time::Instant;

use crate::error::{JournalError, Result};
use crate::store::JournalStore;

mod fenced;
pub use fenced::FencedStore;

/// The lease record's `format`.
pub const LEASE_FORMAT: &str = "babysitter-rs/leadership/v1";
/// The lease group orchestrators use unless configured otherwise.
pub const DEFAULT_GROUP: &str = "orchestrator";
/// Shortest and longest ttl a candidate may ask for.
pub const MIN_TTL: Duration = Duration::from_millis(500);
pub const MAX_TTL: Duration = Duration::from_secs(600);

/// The stored lease (`control/leader-<group>.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LeaseRecord {
    pub format: String,
    pub group: String,
    /// Empty once released.
    pub holder: String,
    pub address: String,
    pub epoch: u64,
    pub ttl_ms: u64,
    /// Bumped by every renewal, so every write changes the version.
    pub renewals: u64,
}

/// A lease as a candidate or holder sees it: its group, holder, address and epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Term {
    pub group: String,
    /// Empty when nobody holds the lease.
    pub holder: String,
    /// Where the holder serves (`http://host:port`), for standbys to forward to.
    pub address: String,
    pub epoch: u64,
    pub ttl: Duration,
}

/// Who asks for the lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub group: String,
    /// Unique per process lifetime.
    pub holder: String,
    pub address: String,
    pub ttl: Duration,
}

impl Candidate {
    pub fn validate(&self) -> Result<()> {
        crate::validate_id("leadership group", &self.group)?;
        crate::validate_id("leadership holder", &self.holder)?;
        if self.address.len() > 1024 {
            return Err(JournalError::invalid(
                "leadership address",
                "longer than 1024 bytes",
            ));
        }
        if !(MIN_TTL..=MAX_TTL).contains(&self.ttl) {
            return Err(JournalError::invalid(
                "leadership ttl",
                format!(
                    "{} ms is outside {}..={} ms",
                    self.ttl.as_millis(),
                    MIN_TTL.as_millis(),
                    MAX_TTL.as_millis()
                ),
            ));
        }
        Ok(())
    }
}

/// The answer to [`LeaseKeeper::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The candidate holds the lease: its new term.
    Granted(Term),
    /// Someone else holds it (or nobody, and it was not free yet): stand by.
    Held(Term),
}

/// Acquires, renews and releases leases: an [`Arbiter`] over a store, or a journal service.
#[async_trait]
pub trait LeaseKeeper: Send + Sync + fmt::Debug {
    async fn acquire(&self, candidate: &Candidate) -> Result<Acquired>;
    /// [`JournalError::Fenced`] once another epoch holds the lease.
    async fn renew(&self, term: &Term) -> Result<()>;
    async fn release(&self, term: &Term) -> Result<()>;
}

/// The lease as this arbiter last saw or wrote it.
#[derive(Debug, Clone)]
struct Observed {
    record: LeaseRecord,
    version: String,
    /// When this version was first seen — or, if this arbiter wrote it, when the write was sent.
    since: Instant,
    /// Written by this arbiter (its holder's writes are admitted only then).
    mine: bool,
}

impl Observed {
    fn term(&self) -> Term {
        Term {
            group: self.record.group.clone(),
            holder: self.record.holder.clone(),
            address: self.record.address.clone(),
            epoch: self.record.epoch,
            ttl: Duration::from_millis(self.record.ttl_ms),
        }
    }
}

/// One lease's arbitration state.
#[derive(Debug, Default)]
struct Group {
    /// Admitted writes hold it shared; a change of holder (takeover, release) exclusively.
    gate: Arc<RwLock<()>>,
    /// Serializes this arbiter's acquisitions (each reads the store, then may write it).
    acquiring: tokio::sync::Mutex<()>,
    observed: StdMutex<Option<Observed>>,
}

impl Group {
    fn observed(&self) -> std::sync::MutexGuard<'_, Option<Observed>> {
        self.observed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// A write admitted under a term: held for the whole write, so a takeover waits for it.
#[derive(Debug)]
pub struct Pass(#[allow(dead_code)] OwnedRwLockReadGuard<()>);

/// Arbitrates leases over one store (see the module doc).
#[derive(Debug)]
pub struct Arbiter {
    store: Arc<dyn JournalStore>,
    groups: StdMutex<HashMap<String, Arc<Group>>>,
}

fn control_name(group: &str) -> String {
    format!("leader-{group}")
}

/// A holder stops writing this long before its ttl runs out on its own clock.
fn margin(ttl: Duration) -> Duration {
    ttl / 5
}

fn fenced(group: &str, epoch: u64, reason: impl Into<String>) -> JournalError {
    JournalError::Fenced {
        group: group.to_owned(),
        epoch,
        reason: reason.into(),
    }
}

impl Arbiter {
    pub fn new(store: Arc<dyn JournalStore>) -> Self {
        Self {
            store,
            groups: StdMutex::new(HashMap::new()),
        }
    }

    fn group(&self, name: &str) -> Arc<Group> {
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// Reads the stored lease and folds it into `group` (a new version starts its clock now).
    async fn observe(&self, name: &str, group: &Group) -> Result<Option<Observed>> {
        let read_at = Instant::now();
        let Some(stored) = self.store.read_control(&control_name(name)).await? else {
            *group.observed() = None;
            return Ok(None);
        };
        if let Some(o) = group.observed().as_ref()
            && o.version == stored.version
        {
            return Ok(Some(o.clone()));
        }
        let record: LeaseRecord = serde_json::from_slice(&stored.content).map_err(|e| {
            JournalError::invalid(
                "leadership lease",
                format!("{} is not a lease record: {e}", control_name(name)),
            )
        })?;
        if record.format != LEASE_FORMAT || record.group != name {
            return Err(JournalError::invalid(
                "leadership lease",
                format!(
                    "{} has format `{}` for group `{}`, expected `{LEASE_FORMAT}` for `{name}`",
                    control_name(name),
                    record.format,
                    record.group
                ),
            ));
        }
        let o = Observed {
            record,
            version: stored.version,
            since: read_at,
            mine: false,
        };
        *group.observed() = Some(o.clone());
        Ok(Some(o))
    }

    /// Admits one write under `epoch` of `group`; keep the [`Pass`] until the write is done.
    pub async fn admit(&self, group: &str, epoch: u64) -> Result<Pass> {
        let cell = self.group(group);
        let pass = cell.gate.clone().read_owned().await;
        let observed = cell.observed().clone();
        match observed {
            Some(o) if o.mine && o.record.epoch == epoch && !o.record.holder.is_empty() => {
                let ttl = Duration::from_millis(o.record.ttl_ms);
                let age = o.since.elapsed();
                if age + margin(ttl) >= ttl {
                    return Err(fenced(
                        group,
                        epoch,
                        format!(
                            "the lease was last renewed {} ms ago, its ttl is {} ms",
                            age.as_millis(),
                            ttl.as_millis()
                        ),
                    ));
                }
                Ok(Pass(pass))
            }
            Some(o) if o.record.holder.is_empty() => Err(fenced(
                group,
                epoch,
                format!("epoch {} released the lease", o.record.epoch),
            )),
            Some(o) => Err(fenced(
                group,
                epoch,
                format!(
                    "epoch {} of {} holds the lease",
                    o.record.epoch, o.record.holder
                ),
            )),
            None => Err(fenced(group, epoch, "nobody holds the lease")),
        }
    }

    async fn write(&self, record: &LeaseRecord, expected: Option<&str>) -> Result<String> {
        let bytes = serde_json::to_vec(record)
            .map_err(|e| JournalError::invalid("leadership lease", e.to_string()))?;
        self.store
            .write_control(&control_name(&record.group), Bytes::from(bytes), expected)
            .await
    }

    /// Writes `record` over `expected` and records it as this arbiter's, holding the gate
    /// exclusively: writes of the previous term in flight finish first, none start after.
    async fn change_holder(
        &self,
        group: &Group,
        record: LeaseRecord,
        expected: Option<String>,
        mine: bool,
    ) -> Result<Observed> {
        let _gate = group.gate.write().await;
        let sent = Instant::now();
        match self.write(&record, expected.as_deref()).await {
            Ok(version) => {
                let o = Observed {
                    record,
                    version,
                    since: sent,
                    mine,
                };
                *group.observed() = Some(o.clone());
                Ok(o)
            }
            Err(e) => {
                *group.observed() = None; // lost or unknown outcome: read it again next time
                Err(e)
            }
        }
    }
}

#[async_trait]
impl LeaseKeeper for Arbiter {
    async fn acquire(&self, c: &Candidate) -> Result<Acquired> {
        c.validate()?;
        let cell = self.group(&c.group);
        let _one_at_a_time = cell.acquiring.lock().await;
        let (epoch, expected, renewals) = match self.observe(&c.group, &cell).await? {
            None => (1, None, 0),
            Some(o) => {
                let lapsed = o.since.elapsed() >= Duration::from_millis(o.record.ttl_ms);
                let free = o.record.holder.is_empty() || o.record.holder == c.holder || lapsed;
                if !free {
                    return Ok(Acquired::Held(o.term()));
                }
                (o.record.epoch + 1, Some(o.version), o.record.renewals + 1)
            }
        };
        let record = LeaseRecord {
            format: LEASE_FORMAT.to_owned(),
            group: c.group.clone(),
            holder: c.holder.clone(),
            address: c.address.clone(),
            epoch,
            ttl_ms: c.ttl.as_millis() as u64,
            renewals,
        };
        match self.change_holder(&cell, record, expected, true).await {
            Ok(o) => {
                tracing::info!(group = %c.group, holder = %c.holder, epoch, "leadership granted");
                Ok(Acquired::Granted(o.term()))
            }
            // Another arbiter (or this one's holder, renewing) wrote first.
            Err(JournalError::ControlConflict { .. }) => {
                match self.observe(&c.group, &cell).await? {
                    Some(o) => Ok(Acquired::Held(o.term())),
                    None => Err(JournalError::ControlConflict {
                        name: control_name(&c.group),
                    }),
                }
            }
            Err(e) => Err(e),
        }
    }

    async fn renew(&self, term: &Term) -> Result<()> {
        let cell = self.group(&term.group);
        let holds = |o: &Observed| {
            o.record.epoch == term.epoch
                && o.record.holder == term.holder
                && !o.record.holder.is_empty()
        };
        let current = cell.observed().clone();
        let o = match current {
            Some(o) if o.mine && holds(&o) => o,
            // Not this arbiter's grant (it restarted, or the holder moved to another journal
            // service): the stored lease decides, and the compare-and-swap below keeps it exact.
            _ => match self.observe(&term.group, &cell).await? {
                Some(o) if holds(&o) => o,
                _ => {
                    return Err(fenced(
                        &term.group,
                        term.epoch,
                        "another term holds the lease",
                    ));
                }
            },
        };
        let next = LeaseRecord {
            renewals: o.record.renewals + 1,
            ..o.record.clone()
        };
        let sent = Instant::now();
        match self.write(&next, Some(&o.version)).await {
            Ok(version) => {
                let mut observed = cell.observed();
                if observed.as_ref().is_some_and(|c| c.version == o.version) {
                    *observed = Some(Observed {
                        record: next,
                        version,
                        since: sent,
                        mine: true,
                    });
                }
                Ok(())
            }
            Err(JournalError::ControlConflict { .. }) => {
                *cell.observed() = None;
                Err(fenced(&term.group, term.epoch, "the lease was taken over"))
            }
            Err(e) => Err(e),
        }
    }

    async fn release(&self, term: &Term) -> Result<()> {
        let cell = self.group(&term.group);
        let current = cell.observed().clone();
        let Some(o) = current else {
            return Ok(());
        };
        if !(o.mine && o.record.epoch == term.epoch && o.record.holder == term.holder) {
            return Ok(());
        }
        let released = LeaseRecord {
            holder: String::new(),
            address: String::new(),
            renewals: o.record.renewals + 1,
            ..o.record
        };
        match self
            .change_holder(&cell, released, Some(o.version), false)
            .await
        {
            Ok(_) => {
                tracing::info!(group = %term.group, epoch = term.epoch, "leadership released");
                Ok(())
            }
            Err(JournalError::ControlConflict { .. }) => Ok(()),
            Err(e) => Err(e),
        }
    }
}

/// The term a writer process writes under, shared by its store and its leadership loop:
/// nothing while it stands by; [`WriterTerm::depose`] when a write comes back fenced, so the
/// loop steps down at once instead of at its next renewal.
#[derive(Debug)]
pub struct WriterTerm {
    /// The term and when its lease was last renewed (timed from before the renewal was sent).
    current: StdMutex<Option<(Term, Instant)>>,
    deposed: watch::Sender<u64>,
}

impl Default for WriterTerm {
    fn default() -> Self {
        Self {
            current: StdMutex::new(None),
            deposed: watch::channel(0).0,
        }
    }
}

impl WriterTerm {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Starts (`Some`: granted at `granted_at`, timed from before the grant was asked for) or
    /// ends (`None`) a term.
    pub fn set(&self, term: Option<(Term, Instant)>) {
        *self.lock() = term;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(Term, Instant)>> {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn get(&self) -> Option<Term> {
        self.lock().as_ref().map(|(t, _)| t.clone())
    }

    /// The lease was renewed by a write sent at `at`.
    pub fn renewed(&self, epoch: u64, at: Instant) {
        if let Some((t, renewed)) = self.lock().as_mut()
            && t.epoch == epoch
        {
            *renewed = at;
        }
    }

    /// Whether this process may act as the holder now: it has a term whose last renewal is
    /// younger than the ttl less the margin — on its own clock, so a process that was paused
    /// past its lease stops acting (handing out tasks) before it hears it was deposed.
    pub fn is_fresh(&self) -> bool {
        self.lock()
            .as_ref()
            .is_some_and(|(t, renewed)| renewed.elapsed() + margin(t.ttl) < t.ttl)
    }

    /// The term to write under, or why not.
    pub fn require(&self, group_hint: &str) -> Result<Term> {
        self.get()
            .ok_or_else(|| fenced(group_hint, 0, "this writer holds no term (it stands by)"))
    }

    /// A write under `epoch` was fenced: the term is over.
    pub fn depose(&self, epoch: u64) {
        self.deposed.send_replace(epoch);
    }

    /// Notified with the epoch of each deposed term.
    pub fn deposed(&self) -> watch::Receiver<u64> {
        self.deposed.subscribe()
    }
}

#[cfg(test)]
mod tests;
