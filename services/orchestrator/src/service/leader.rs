//! One active orchestrator per journal: the term loop.
//!
//! Why: the run manager's queue, leases and timers are caches of the journal that assume one
//! writer; two orchestrators driving the same runs ran every task twice. So an orchestrator
//! serves its port from the start but acts only while it holds the journal's leadership lease
//! (`babysitter_journal::leadership`):
//!
//! 1. **Standing by**, it asks for the lease every poll interval and forwards every `RunService`
//!    and `WorkerService` call to the holder's advertised address ([`Switched`] services), so
//!    clients and workers may talk to any replica; its dashboard port (when configured) forwards
//!    every request to the holder's dashboard (`babysitter_dashboard::forward`) for the same
//!    reason: a load balancer may send a browser to any replica.
//! 2. **Granted** a term (a new epoch), it builds a fresh journal view and run manager from the
//!    store — recovery re-queues every pending effect before the first local call is served —
//!    then serves locally, writing under its epoch.
//! 3. **Holding**, it renews every third of the ttl. It steps down when a renewal or any write
//!    comes back fenced (another epoch took over: it was paused or cut off past its ttl), or
//!    when renewals kept failing for a whole ttl: local calls stop, the manager shuts down (its
//!    writes are already refused), and it stands by again.
//! 4. **Stopping** (SIGTERM), once the server drained, it shuts the manager down and releases
//!    the lease, so a standby takes over at once instead of after the ttl.
//!
//! The health entry [`LEADER_HEALTH`] is `SERVING` exactly while this process is active.

use std::sync::Arc;
use std::time::Duration;

use babysitter_common::server::ServerConfig;
use babysitter_common::server::standby::{Forward, Fresh, Switch, Switched};
use babysitter_journal::leadership::{Acquired, Candidate, LeaseKeeper, Term, WriterTerm};
use babysitter_journal::{Journal, JournalError, JournalOptions};
use babysitter_proto::orchestrator::v1::run_service_server::RunServiceServer;
use babysitter_proto::orchestrator::v1::worker_service_server::WorkerServiceServer;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use super::config::{FencedJournal, OrchestratorConfig};
use super::grpc::{RunApi, Services, WorkerApi};

/// Health service name that is `SERVING` while this orchestrator holds the lease.
pub const LEADER_HEALTH: &str = "babysitter.orchestrator.v1.Leader";

/// The port's two switched services and where standbys forward to.
#[derive(Debug, Clone)]
pub struct Seat {
    forward: Forward,
    runs: Switch<RunServiceServer<RunApi>>,
    workers: Switch<WorkerServiceServer<WorkerApi>>,
    config: ServerConfig,
}

impl Services {
    /// Both services on the shared server builder, switched: they forward until the [`Seat`]
    /// activates local ones.
    pub fn switched_server(
        config: &ServerConfig,
        term: Arc<WriterTerm>,
    ) -> (babysitter_common::server::ServerBuilder, Seat) {
        let forward = Forward::new();
        let fresh: Fresh = Arc::new(move || term.is_fresh());
        let (runs, runs_switch) = Switched::new(forward.clone(), fresh.clone());
        let (workers, workers_switch) = Switched::new(forward.clone(), fresh);
        let builder = babysitter_common::server::ServerBuilder::new("orchestrator", config)
            .add_service(runs, babysitter_proto::FILE_DESCRIPTOR_SET)
            .add_service(workers, babysitter_proto::FILE_DESCRIPTOR_SET);
        let seat = Seat {
            forward,
            runs: runs_switch,
            workers: workers_switch,
            config: config.clone(),
        };
        (builder, seat)
    }
}

impl Seat {
    /// Standing by, dial the active instance's `https://` address with `tls`.
    pub fn forward_over_tls(&self, tls: babysitter_common::tls::ClientTls) {
        self.forward.use_tls(tls);
    }

    /// Serve calls locally with `services` (while the term is fresh) until `ended`.
    pub fn activate(&self, services: Services, ended: CancellationToken) {
        self.forward.set(None);
        self.runs.set(Some((
            services.runs.into_service(&self.config),
            ended.clone(),
        )));
        self.workers
            .set(Some((services.workers.into_service(&self.config), ended)));
    }

    /// Stop serving locally; forward calls to `leader` (or answer `UNAVAILABLE`).
    pub fn stand_by(&self, leader: Option<&str>) {
        self.runs.set(None);
        self.workers.set(None);
        self.forward.set(leader);
    }
}

/// Everything a term needs to start a run manager.
pub struct Leadership {
    pub config: OrchestratorConfig,
    pub journal: FencedJournal,
    pub journal_options: JournalOptions,
    pub runs_dir: std::path::PathBuf,
    pub secrets: Arc<babysitter_journal::redact::Redactor>,
    pub seat: Seat,
    pub health: HealthReporter,
    /// This process's candidacy (a fresh holder id per process).
    pub candidate: Candidate,
    /// The server's shutdown: open watches end when it drains.
    pub shutdown: CancellationToken,
    /// Told once calls can be answered: this process is active, or stands by behind a holder.
    pub settled: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

/// How a term ended.
#[derive(Debug)]
pub enum End {
    Stop,
    SteppedDown(String),
}

impl Leadership {
    /// Runs terms until `stop` (cancelled after the server drained); releases the lease held then.
    pub async fn run(self, stop: CancellationToken) -> anyhow::Result<()> {
        self.health
            .set_service_status(LEADER_HEALTH, ServingStatus::NotServing)
            .await;
        let keeper = self.journal.keeper.clone();
        let mut last_holder = None::<(String, u64)>;
        loop {
            let forwarding = self.forward_dashboard(&stop).await;
            let granted = self
                .stand_by(keeper.as_ref(), &stop, &mut last_holder)
                .await;
            // The port is freed before a term binds the real dashboard on it.
            if let Some(f) = forwarding {
                f.stop().await;
            }
            let Some((term, asked)) = granted else {
                return Ok(());
            };
            last_holder = None;
            match self.hold(keeper.as_ref(), &term, asked, &stop).await {
                Ok(End::Stop) => {
                    if let Err(e) = keeper.release(&term).await {
                        tracing::warn!(error = %e, "cannot release the leadership lease: a standby takes over once it lapses");
                    }
                    return Ok(());
                }
                Ok(End::SteppedDown(why)) => {
                    tracing::warn!(epoch = term.epoch, reason = %why, "stepped down: standing by");
                    eprintln!("orchestrator stepped down from epoch {}: {why}", term.epoch);
                }
                Err(e) => {
                    // The term could not start (recovery failed): give the lease back, retry.
                    tracing::error!(epoch = term.epoch, error = %e, "cannot take over: releasing the lease");
                    let _ = keeper.release(&term).await;
                    tokio::select! {
                        _ = stop.cancelled() => return Ok(()),
                        _ = tokio::time::sleep(self.config.leadership.ttl()) => {}
                    }
                }
            }
        }
    }

    /// While standing by, the dashboard's port (when configured) forwards to the active
    /// orchestrator's (`babysitter_dashboard::forward`), as the gRPC port does.
    async fn forward_dashboard(
        &self,
        stop: &CancellationToken,
    ) -> Option<babysitter_dashboard::Port> {
        let dashboard = &self.config.dashboard;
        let addr = dashboard.listen_addr?;
        let https = dashboard.tls.enabled();
        let port = dashboard.active_port.unwrap_or(addr.port());
        let forward = self.seat.forward.clone();
        let target: babysitter_dashboard::forward::Target = Arc::new(move || {
            babysitter_dashboard::forward::on_host_of(&forward.address()?, https, port)
        });
        let served = babysitter_dashboard::forward::serve_forwarding(
            addr,
            &dashboard.tls,
            target,
            self.seat.forward.tls(),
            stop.child_token(),
        )
        .await;
        match served {
            Ok(f) => Some(f),
            Err(e) => {
                tracing::error!(error = %e, "the dashboard's port cannot forward while standing by");
                None
            }
        }
    }

    /// Asks for the lease until granted (`None`: stopped first), forwarding meanwhile.
    async fn stand_by(
        &self,
        keeper: &dyn LeaseKeeper,
        stop: &CancellationToken,
        last_holder: &mut Option<(String, u64)>,
    ) -> Option<(Term, Instant)> {
        let poll = self.config.leadership.poll_interval();
        loop {
            if stop.is_cancelled() {
                return None;
            }
            let asked = Instant::now();
            match keeper.acquire(&self.candidate).await {
                Ok(Acquired::Granted(term)) => return Some((term, asked)),
                Ok(Acquired::Held(term)) => {
                    // Never to itself: a holder at this very address is a previous incarnation.
                    let target = (!term.holder.is_empty()
                        && !term.address.is_empty()
                        && term.address != self.candidate.address)
                        .then_some(term.address.as_str());
                    self.seat.stand_by(target);
                    let now = (term.holder.clone(), term.epoch);
                    if last_holder.as_ref() != Some(&now) {
                        tracing::info!(holder = %term.holder, address = %term.address, epoch = term.epoch, "standing by");
                        eprintln!(
                            "orchestrator standing by: epoch {} is held by {} at {}",
                            term.epoch, term.holder, term.address
                        );
                        *last_holder = Some(now);
                    }
                    if target.is_some() {
                        self.settle();
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot ask for the leadership lease"),
            }
            tokio::select! {
                _ = stop.cancelled() => return None,
                _ = tokio::time::sleep(poll) => {}
            }
        }
    }

    fn settle(&self) {
        let settled = self
            .settled
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(settled) = settled {
            let _ = settled.send(());
        }
    }

    /// One term: take over, serve, renew until it ends.
    async fn hold(
        &self,
        keeper: &dyn LeaseKeeper,
        term: &Term,
        asked: Instant,
        stop: &CancellationToken,
    ) -> anyhow::Result<End> {
        let writer: Arc<WriterTerm> = self.journal.term.clone();
        let mut deposed = writer.deposed();
        writer.set(Some((term.clone(), asked)));
        let started = Instant::now();
        let journal = Journal::new(self.journal.store.clone(), self.journal_options.clone());
        // Renewals start now and run through recovery: recovering many runs may take longer
        // than the ttl, and a lease that lapsed meanwhile would hand the journal to a standby
        // that then has to recover them too.
        let renewing =
            renew_until_over(keeper, &self.journal.term, term, asked, stop, &mut deposed);
        tokio::pin!(renewing);
        let starting =
            self.config
                .start_manager(journal.clone(), self.runs_dir.clone(), self.secrets.clone());
        tokio::pin!(starting);
        let (manager, resumed) = tokio::select! {
            started = &mut starting => match started {
                Ok(m) => m,
                Err(e) => {
                    writer.set(None);
                    return Err(e);
                }
            },
            end = &mut renewing => {
                // The term ended during recovery (its writes are refused by now): let the
                // recovery finish, then stop what it started.
                if let Ok((manager, _)) = starting.await {
                    manager.shutdown().await;
                }
                journal.flush().await;
                writer.set(None);
                return Ok(end);
            }
        };
        // Watches end when the server drains or the term ends; calls still running when the
        // term ends (not when the server drains: those finish) are answered for retry.
        let term_shutdown = self.shutdown.child_token();
        let ended = CancellationToken::new();
        self.seat.activate(
            Services::new(manager.clone(), term_shutdown.clone()),
            ended.clone(),
        );
        self.health
            .set_service_status(LEADER_HEALTH, ServingStatus::Serving)
            .await;
        tracing::info!(
            epoch = term.epoch,
            resumed,
            took_ms = started.elapsed().as_millis() as u64,
            "active: unfinished runs resumed"
        );
        eprintln!(
            "orchestrator active: epoch {}, {resumed} runs resumed",
            term.epoch
        );
        self.settle();
        // The dashboard is the active orchestrator's: a standby's port forwards here.
        let dashboard = match super::dashboard::start(
            &self.config,
            &manager,
            "orchestrator",
            term_shutdown.child_token(),
        )
        .await
        {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "the dashboard could not start");
                None
            }
        };

        let end = renewing.await;
        if let Some(d) = dashboard {
            d.stop().await;
        }

        // Local calls stop first, then the term's work; its writes are fenced already if deposed.
        self.seat.stand_by(None);
        self.health
            .set_service_status(LEADER_HEALTH, ServingStatus::NotServing)
            .await;
        term_shutdown.cancel();
        ended.cancel();
        manager.shutdown().await;
        journal.flush().await;
        writer.set(None);
        Ok(end)
    }
}

/// Renews `term` every third of its ttl until `stop` (→ [`End::Stop`]), or until the term is
/// over (→ [`End::SteppedDown`] with why): a renewal or a write (`deposed`) came back fenced, or
/// no renewal succeeded for a whole ttl. Each success is recorded in `writer`.
pub async fn renew_until_over(
    keeper: &dyn LeaseKeeper,
    writer: &WriterTerm,
    term: &Term,
    granted: Instant,
    stop: &CancellationToken,
    deposed: &mut tokio::sync::watch::Receiver<u64>,
) -> End {
    let ttl = term.ttl;
    let mut renewed = granted;
    let mut wait = ttl / 3;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return End::Stop,
            changed = deposed.changed() => {
                if changed.is_ok() && *deposed.borrow_and_update() == term.epoch {
                    return End::SteppedDown("a write was fenced: another epoch holds the lease".into());
                }
                continue;
            }
            _ = tokio::time::sleep(wait) => {}
        }
        let sent = Instant::now();
        match keeper.renew(term).await {
            Ok(()) => {
                writer.renewed(term.epoch, sent);
                renewed = sent;
                wait = ttl / 3;
            }
            Err(e @ JournalError::Fenced { .. }) => return End::SteppedDown(e.to_string()),
            Err(e) => {
                if renewed.elapsed() >= ttl {
                    return End::SteppedDown(format!(
                        "no renewal for the whole ttl ({} ms): {e}",
                        ttl.as_millis()
                    ));
                }
                tracing::warn!(error = %e, "cannot renew the leadership lease; retrying");
                wait = (ttl / 10).max(Duration::from_millis(10));
            }
        }
    }
}
