//! Client-driven runs: babysitter's own loop against this server. A harness plugin drives a
//! babysitter run by calling `run:iterate`, executing what it is told, and posting each result
//! with `task:post`; `babysitter … --server URL` does the same with the run kept here. Such a run
//! (`CreateRunRequest.client_driven`, `"driver": "client"` in its `run.json`, so a restart keeps
//! it so) is iterated only when its client asks ([`RunManager::iterate_for_client`]), and none of
//! its effects is dispatched to workers or timers; everything else — its journal, lock, summary,
//! watchers, results, halts — is any run's.
//!
//! A budget given at creation is checked after each iteration, before its client gets what it
//! requested, by the manager's rules (`runs/spend.rs`): past a limit the run fails (the new
//! requests cancelled) and the iteration reports it. Such a run never
//! waits for a raise: nobody would see the wait (`on-exceed=ask` is refused at creation).
//!
//! It iterates on an engine of its own ([`RunManager::client_engine`]): the same options, but
//! building babysitter's `nextActions` for the client to print, which runs the manager drives do
//! not pay for. The two engines share the journal, and a run is only ever iterated by one of them.

use babysitter_journal::{EventType, NewEvent};
use serde_json::Value;
use tracing::Instrument as _;

use super::{RunManager, RunSummary, lock};
use crate::engine::{Engine, Iteration, lifecycle};
use crate::service::{Result, ServiceError};

/// The `run.json` key naming who iterates a run, and its value for a client-driven run.
pub(super) const DRIVER_KEY: &str = "driver";
pub(super) const CLIENT_DRIVER: &str = "client";

/// Whether a `run.json` marks its run client-driven.
pub(super) fn is_client_driven(run_json: &Value) -> bool {
    run_json.get(DRIVER_KEY).and_then(Value::as_str) == Some(CLIENT_DRIVER)
}

impl RunManager {
    /// The engine client-driven runs iterate on (made on first use).
    fn client_engine(&self) -> Result<&Engine> {
        if let Some(e) = self.inner.client_engine.get() {
            return Ok(e);
        }
        let mut options = self.inner.engine.options().clone();
        options.next_actions = true;
        let engine = Engine::new(self.journal().clone(), options)?;
        Ok(self.inner.client_engine.get_or_init(|| engine))
    }

    /// One iteration of a client-driven run of `namespace`, journaling `marker` (the data of a
    /// `RUN_ITERATION` event) in the same append; returns what it did and the run's summary
    /// after it. A run the manager drives is refused: two drivers would race its iterations.
    pub async fn iterate_for_client(
        &self,
        namespace: &str,
        run_id: &str,
        marker: Option<serde_json::Map<String, Value>>,
    ) -> Result<(Iteration, RunSummary)> {
        let summary = self.get(namespace, run_id).await?;
        if !summary.client_driven {
            return Err(ServiceError::Conflict(format!(
                "run {run_id} is driven by the orchestrator, not by its client: watch it \
                 (WatchRun) instead of iterating it"
            )));
        }
        let engine = self.client_engine()?;
        let marker = marker.map(|data| {
            let mut e = NewEvent::new(EventType::RunIteration, Value::Object(data));
            e.recorded_at = Some(crate::engine::iso(engine.options().clock.as_ref()()));
            e
        });
        let Some(run_lock) = self.run_lock(run_id) else {
            // It has ended: the iteration reports its terminal state and writes nothing.
            let it = engine.iterate_with(run_id, None).await?;
            return Ok((it, summary));
        };
        // In the run's trace like the manager's iterations, linked to the client's request.
        let span = super::trace::iteration_span(run_id, summary.trace.as_ref());
        babysitter_common::telemetry::link_to(&span, &tracing::Span::current());
        let it = async {
            let _guard = run_lock.lock().await;
            self.ensure_materialized(run_id).await?;
            let it = engine.iterate_with(run_id, marker).await?;
            // Its budget, before the client gets anything: past a limit the run ends (what
            // this iteration requested is cancelled) and the iteration reports the failure.
            if it.status == crate::engine::IterationStatus::Waiting
                && self.enforce_budget(run_id).await?
            {
                return Ok(engine.iterate_with(run_id, None).await?);
            }
            let runtime_error = self
                .journal()
                .inspect(run_id, |_, idx| {
                    idx.last_lifecycle
                        .as_ref()
                        .is_some_and(|m| m.event_type == "PROCESS_RUNTIME_ERROR")
                })
                .await?;
            let reason = lifecycle::iteration_cache_reason(it.status, runtime_error);
            self.after_iteration(run_id, it.clone(), false, false)
                .await?;
            self.settle_state(run_id, reason).await;
            Ok::<_, ServiceError>(it)
        }
        .instrument(span)
        .await?;
        Ok((it, self.get(namespace, run_id).await?))
    }

    /// Whether `run_id` is a live client-driven run.
    pub(super) fn is_live_client_driven(&self, run_id: &str) -> bool {
        lock(&self.inner.runs)
            .live(run_id)
            .is_some_and(|r| r.summary.borrow().client_driven)
    }

    /// Keeps a client-driven run's state cache (`state/state.json`) the way babysitter's CLI
    /// keeps it after each command that changed the run: rebuilt naming `reason`, or, with none,
    /// only brought up to date. Its client's tools read it; the manager's own runs need none.
    /// A failure is a warning, never the command's failure (the cache is checked by every
    /// reader against the journal head).
    pub(super) async fn settle_state(&self, run_id: &str, reason: Option<&str>) {
        let done = match reason {
            Some(r) => self
                .journal()
                .rebuild_state_cache(run_id, r)
                .await
                .map(drop),
            None => self.journal().state(run_id).await.map(drop),
        };
        if let Err(e) = done {
            tracing::warn!(run_id, error = %e, "state cache not updated");
        }
    }
}
