//! The run manager as the dashboard's [`Source`]: the same core calls `RunService`'s handlers
//! make (`get`, `tasks`' queue view, `cost`, `watch`, `resolve_breakpoint`, `cancel`, `halt`),
//! so the dashboard is a second front door, not a second implementation. The board follows the
//! run table's change feed (`RunManager::subscribe_changes`), which every summary writer
//! already goes through; nothing polls.
//!
//! Access is the caller's: the dashboard lets only client and admin tokens in (the roles
//! `RunService` requires), shows only runs of their namespaces, and the principal's name is
//! journaled with a breakpoint decision, as `ResolveBreakpoint` does.

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use babysitter_common::auth::Principal;
use babysitter_dashboard::model::{Digest, millis_of};
use babysitter_dashboard::source::{Action, Capabilities, LiveTask, Result, Source, SourceError};
use babysitter_journal::Journal;
use futures::StreamExt;
use futures::stream::BoxStream;
use serde_json::{Value, json};
use tokio::sync::broadcast;

use super::ServiceError;
use super::runs::{Decision, RunManager, RunSummary};

/// The orchestrator's runs for the dashboard.
#[derive(Debug, Clone)]
pub struct RunsSource {
    manager: RunManager,
}

impl RunsSource {
    pub fn new(manager: RunManager) -> Arc<Self> {
        Arc::new(Self { manager })
    }
}

fn source_error(e: ServiceError) -> SourceError {
    match e {
        ServiceError::NotFound(m) => SourceError::NotFound(m),
        ServiceError::Invalid { what, reason } => SourceError::Invalid(format!("{what}: {reason}")),
        ServiceError::AlreadyExists(m) | ServiceError::Conflict(m) => SourceError::Conflict(m),
        ServiceError::ShuttingDown => {
            SourceError::Unavailable("the orchestrator is shutting down".into())
        }
        other => SourceError::Internal(other.to_string()),
    }
}

/// A run summary as a card shows it.
pub fn digest_of(s: &RunSummary) -> Digest {
    let activity = s.updated_at.as_deref().or(s.created_at.as_deref());
    Digest {
        run_id: s.run_id.clone(),
        namespace: s.namespace.clone(),
        project: s
            .labels
            .get("project")
            .cloned()
            .unwrap_or_else(|| s.namespace.clone()),
        process_id: s.process_id.clone(),
        labels: s.labels.clone(),
        status: s.status.as_str().to_owned(),
        status_reason: s.status_reason.clone(),
        pending: s.pending_by_kind.clone(),
        created_at: s.created_at.clone(),
        last_activity_ms: activity.and_then(millis_of),
        head_seq: s.head_seq,
        corrupt: false,
        bucket: None,
    }
}

#[async_trait]
impl Source for RunsSource {
    async fn runs(&self) -> Result<Vec<Digest>> {
        // Every run, so none is cached by this listing (see `RunManager::summary_uncached`).
        let ids = self.manager.journal_run_ids().await.map_err(source_error)?;
        let reads = futures::stream::iter(ids)
            .map(|id| async move { (self.manager.summary_uncached(&id).await, id) })
            .buffer_unordered(16);
        Ok(reads
            .filter_map(|(read, run_id)| async move {
                match read {
                    Ok(s) => s.map(|s| digest_of(&s)),
                    Err(e) => {
                        tracing::warn!(%run_id, error = %e, "dashboard: a run could not be read");
                        None
                    }
                }
            })
            .collect()
            .await)
    }

    async fn run(&self, run_id: &str) -> Result<Option<Digest>> {
        let s = self
            .manager
            .summary_of(run_id)
            .await
            .map_err(source_error)?;
        Ok(s.as_ref().map(digest_of))
    }

    fn changes(&self) -> broadcast::Receiver<Arc<str>> {
        self.manager.subscribe_changes()
    }

    async fn journal(&self, _run_id: &str) -> Result<Journal> {
        Ok(self.manager.journal().clone())
    }

    fn live_tasks(&self, run_id: &str) -> HashMap<String, LiveTask> {
        self.manager
            .queue()
            .tasks_of(run_id)
            .into_iter()
            .map(|(effect, q)| {
                let task = LiveTask {
                    state: if q.lease.is_some() {
                        "leased"
                    } else {
                        "queued"
                    },
                    attempt: q.attempt,
                    worker: q.lease.map(|l| l.worker_id).unwrap_or_default(),
                };
                (effect, task)
            })
            .collect()
    }

    async fn cost(&self, run: &Digest) -> Result<Option<Value>> {
        let c = self
            .manager
            .cost(&run.namespace, &run.run_id)
            .await
            .map_err(source_error)?;
        let crossed = |x: &super::budget::Crossed| json!({"limit": format!("{:?}", x.limit), "max": x.max, "spent": x.spent});
        Ok(Some(json!({
            "budget": c.budget.as_ref().map(|b| json!({
                "maxTokens": b.max_tokens,
                "maxCostUsd": b.max_cost_usd,
                "maxTasks": b.max_tasks,
                "maxAgentTasks": b.max_agent_tasks,
                "maxWallTimeMs": b.max_wall_time.map(|d| d.as_millis() as u64),
            })),
            "spent": {
                "tokens": c.spent.tokens,
                "costUsd": c.spent.cost_usd,
                "tasks": c.spent.tasks,
                "agentTasks": c.spent.agent_tasks,
                "wallTimeMs": c.spent.wall_time.as_millis() as u64,
            },
            "warnings": c.warnings.iter().map(crossed).collect::<Vec<_>>(),
            "exceeded": c.exceeded.as_ref().map(crossed),
        })))
    }

    async fn agent_events(&self, run: &Digest) -> Option<BoxStream<'static, Value>> {
        let from = run.head_seq + 1;
        let watch = self
            .manager
            .watch(&run.namespace, &run.run_id, from, true)
            .await
            .ok()?;
        let events = futures::stream::unfold(watch, |mut w| async move {
            let update = w.next().await?.ok()?;
            let batch: Vec<Value> = update
                .agent_events
                .iter()
                .flat_map(|b| {
                    b.events.iter().map(|e| {
                        json!({
                            "effectId": b.effect_id,
                            "kind": e.kind,
                            "sequence": e.sequence,
                            "data": serde_json::from_slice::<Value>(&e.data_json).unwrap_or(Value::Null),
                        })
                    })
                })
                .collect();
            Some((futures::stream::iter(batch), w))
        })
        .flatten();
        Some(events.boxed())
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            resolve: true,
            cancel: true,
            halt: true,
        }
    }

    async fn act(&self, who: &Principal, run: &Digest, action: Action) -> Result<Value> {
        let (ns, id) = (run.namespace.as_str(), run.run_id.as_str());
        let m = &self.manager;
        match action {
            Action::Resolve {
                effect_id,
                approved,
                comment,
            } => {
                let decision = Decision {
                    approved,
                    feedback: Some(comment).filter(|c| !c.is_empty()),
                    principal: who.name.clone(),
                    ..Decision::default()
                };
                let (seq, already) = m
                    .resolve_breakpoint(ns, id, &effect_id, decision)
                    .await
                    .map_err(source_error)?;
                Ok(json!({"resolvedSeq": seq, "alreadyResolved": already}))
            }
            Action::Cancel { reason } => {
                let s = m.cancel(ns, id, &reason).await.map_err(source_error)?;
                Ok(json!({"status": s.status.as_str()}))
            }
            Action::Halt { reason } => {
                let (s, already) = m
                    .halt(ns, id, &reason, false, false)
                    .await
                    .map_err(source_error)?;
                Ok(json!({"status": s.status.as_str(), "alreadyTerminal": already}))
            }
        }
    }
}

/// Serves the dashboard over `manager` when `[dashboard] listen-addr` is set, with the tokens of
/// `[server.auth]`, until `stop`.
pub async fn start(
    config: &super::config::OrchestratorConfig,
    manager: &RunManager,
    mode: &'static str,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<Option<babysitter_dashboard::Running>> {
    let Some(addr) = config.dashboard.listen_addr else {
        return Ok(None);
    };
    let auth = babysitter_common::auth::Authenticator::from_config(&config.server.auth)?;
    let source: Arc<dyn Source> = RunsSource::new(manager.clone());
    let running =
        babysitter_dashboard::serve(addr, &config.dashboard, source, auth, mode, stop).await?;
    Ok(Some(running))
}
