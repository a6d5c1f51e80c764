//! `ctx.subprocess`: a pending effect of kind `subprocess` becomes a child run of the same
//! namespace, created from the parent's process bundle (its `processPath` another entry of it),
//! with the invocation's inputs, babysitter's `nested` link in its run.json, the label
//! `parent-run`, and the parent's budget. Its end resolves the effect: completed →
//! `{runId, runDir, output}` (babysitter's `SubprocessResult`), failed or cancelled → an error
//! naming the child and why. A parent that ends first takes its live children with it.
//!
//! Why the child's run id is the effect's id: the effect id is a ULID of its own, unique and
//! fixed in the journal, so starting the child is idempotent by construction. A parent
//! re-iterated after a restart (or twice) finds the child it already made, live or ended,
//! instead of creating a second run whose tasks would execute again; no extra record of the
//! link is needed beyond the child's run.json.

use babysitter_journal::index::EffectRecord;
use bytes::Bytes;
use serde_json::{Value, json};

use super::{NewRun, Parent, RunManager, RunSummary, TaskOutcome, lock};
use crate::service::bundle;
use crate::service::{Result, ServiceError};

/// The label every subprocess run carries: its parent's run id (`ListRuns` filters on it).
pub const PARENT_LABEL: &str = "parent-run";

/// Who posts a subprocess's result into its parent (the journal's `principal`, never a client).
const PRINCIPAL: &str = "orchestrator:subprocess";

impl RunManager {
    /// Starts (or finds) the child run of `parent`'s pending subprocess effect `r`; its end
    /// resolves the effect. Runs on its own task: the parent's iteration does not wait.
    pub(super) fn start_subprocess(
        &self,
        namespace: &str,
        parent: &str,
        r: &EffectRecord,
        task_json: Bytes,
    ) {
        let this = self.clone();
        let namespace = namespace.to_owned();
        let parent = parent.to_owned();
        let effect_id = r.effect_id.clone();
        let invocation_key = r.invocation_key.clone();
        self.inner.tracker.spawn(async move {
            let link = Link {
                namespace,
                parent,
                effect_id,
                invocation_key,
            };
            if let Err(e) = this.subprocess_now(&link, &task_json).await {
                // A transient failure (store, shutdown): the parent's next iteration tries
                // again; nothing was created twice (the child's id is fixed).
                tracing::warn!(run_id = %link.parent, effect_id = %link.effect_id, error = %e, "a subprocess could not be started yet");
            }
        });
    }

    async fn subprocess_now(&self, link: &Link, task_json: &Bytes) -> Result<()> {
        let child_id = &link.effect_id;
        match self.get(&link.namespace, child_id).await {
            Ok(child) => return self.child_found(link, child).await,
            Err(ServiceError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        let new = match self.child_run(link, task_json).await {
            Ok(new) => new,
            // The invocation cannot make a run: the process gets the error.
            Err(e @ (ServiceError::Invalid { .. } | ServiceError::Conflict(_))) => {
                return self.invalid(link, &e.to_string()).await;
            }
            Err(e) => return Err(e),
        };
        match self.create(new).await {
            Ok(child) => self.child_found(link, child).await,
            Err(ServiceError::AlreadyExists(_)) => {
                // Made meanwhile by another iteration of the parent.
                let child = self.get(&link.namespace, child_id).await?;
                self.child_found(link, child).await
            }
            Err(e @ (ServiceError::Invalid { .. } | ServiceError::Conflict(_))) => {
                self.invalid(link, &e.to_string()).await
            }
            Err(e) => Err(e),
        }
    }

    /// The child exists: an ended one resolves the effect now; a live one is linked to its
    /// parent, so it is cancelled if the parent ends first (its own end resolves the effect).
    async fn child_found(&self, link: &Link, child: RunSummary) -> Result<()> {
        if child.status.is_terminal() {
            return self.child_ended(&child).await;
        }
        let mut runs = lock(&self.inner.runs);
        match runs.live_mut(&link.parent) {
            Some(parent) => {
                parent.children.insert(child.run_id.clone());
            }
            None => {
                // The parent ended while its child was being made.
                drop(runs);
                self.cancel_children([child.run_id].into_iter(), &link.namespace);
            }
        }
        Ok(())
    }

    /// The child run babysitter's invocation (`task.json` `subprocess`) describes.
    async fn child_run(&self, link: &Link, task_json: &Bytes) -> Result<NewRun> {
        let def: Value = serde_json::from_slice(task_json).map_err(|e| {
            ServiceError::Conflict(format!(
                "tasks/{}/task.json is not JSON: {e}",
                link.effect_id
            ))
        })?;
        let inv = &def["subprocess"];
        let bad = |why: String| ServiceError::invalid("subprocess", why);
        let process_path = inv["processPath"]
            .as_str()
            .ok_or_else(|| bad("processPath is missing".into()))?;
        let text = |k: &str| inv[k].as_str().filter(|s| !s.is_empty()).map(str::to_owned);
        let (run_json, _) = self.run_files(&link.namespace, &link.parent).await?;
        let manifest = run_json.get("processBundle").ok_or_else(|| {
            bad("the parent run has no process bundle (it was not created on this server)".into())
        })?;
        let parent_entry = manifest
            .get("entryPath")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let entry = bundle::resolve_entry(manifest, parent_entry, process_path).map_err(bad)?;
        let bundle = bundle::load(
            self.journal(),
            &link.parent,
            manifest,
            entry,
            text("exportName"),
        )
        .await?;
        let parent = self.get(&link.namespace, &link.parent).await?;
        let mut labels = parent.labels;
        labels.insert(PARENT_LABEL.to_owned(), link.parent.clone());
        let nested = crate::engine::subprocess::nested(
            &link.parent,
            &link.effect_id,
            &link.invocation_key,
            inv,
        );
        Ok(NewRun {
            namespace: link.namespace.clone(),
            bundle,
            inputs: Some(inv["inputs"].clone()).filter(|v| !v.is_null()),
            labels,
            run_id: Some(link.effect_id.clone()),
            process_id: text("processId"),
            request: None,
            prompt: text("prompt"),
            idempotency_key: None,
            client_driven: false,
            budget: parent.budget,
            nested: Some(nested),
        })
    }

    /// A subprocess run has ended: its parent's effect is resolved with what it came to.
    pub(super) async fn child_ended(&self, child: &RunSummary) -> Result<()> {
        let Some(Parent { run_id, effect_id }) = &child.parent else {
            return Ok(());
        };
        let link = Link {
            namespace: child.namespace.clone(),
            parent: run_id.clone(),
            effect_id: effect_id.clone(),
            invocation_key: String::new(),
        };
        if child.status == super::RunStatus::Completed {
            let run_dir = self.inner.engine.options().runs_root.join(&child.run_id);
            let value = crate::engine::subprocess::result(
                &child.run_id,
                &run_dir.display().to_string(),
                child.output.clone(),
            );
            return self.settle_effect(&link, Ok(value)).await;
        }
        // A status reason stands in for an error the summary does not carry.
        let error = child.error.clone().or_else(|| {
            (!child.status_reason.is_empty()).then(|| json!({"message": child.status_reason}))
        });
        let error = crate::engine::subprocess::failed(&child.run_id, child.status.as_str(), error);
        self.settle_effect(&link, Err(error)).await
    }

    /// The invocation cannot make a run: the parent's process gets `why` as its error.
    async fn invalid(&self, link: &Link, why: &str) -> Result<()> {
        self.settle_effect(link, Err(crate::engine::subprocess::invalid(why)))
            .await
    }

    /// Posts the outcome into the parent; a parent that has ended, or an effect already
    /// resolved the same way, is no error (the child outlived the question).
    async fn settle_effect(
        &self,
        link: &Link,
        outcome: std::result::Result<Value, Value>,
    ) -> Result<()> {
        let o = TaskOutcome {
            outcome: Some(outcome),
            finished_at: Some(crate::engine::iso(self
                .inner
                .engine
                .options()
                .clock
                .as_ref()())),
            ..TaskOutcome::default()
        };
        match self
            .post_result(&link.namespace, &link.parent, &link.effect_id, o, PRINCIPAL)
            .await
        {
            Ok(_) | Err(ServiceError::Conflict(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Cancels these live subprocess runs (their parent has ended); each on its own task.
    pub(super) fn cancel_children(&self, children: impl Iterator<Item = String>, namespace: &str) {
        for child in children {
            let this = self.clone();
            let namespace = namespace.to_owned();
            self.inner.tracker.spawn(async move {
                if let Err(e) = this.cancel(&namespace, &child, "its parent run ended").await {
                    tracing::warn!(run_id = %child, error = %e, "a subprocess run could not be cancelled with its parent");
                }
            });
        }
    }

    /// A run has ended: a subprocess resolves its parent's effect, a parent takes its live
    /// children with it. Both on tasks of their own (the caller may hold the run's lock).
    pub(super) fn link_ended(
        &self,
        ended: RunSummary,
        children: std::collections::HashSet<String>,
    ) {
        self.cancel_children(children.into_iter(), &ended.namespace);
        if ended.parent.is_some() {
            let this = self.clone();
            self.inner.tracker.spawn(async move {
                if let Err(e) = this.child_ended(&ended).await {
                    tracing::warn!(run_id = %ended.run_id, error = %e, "a subprocess's end could not be posted to its parent; its next iteration will");
                }
            });
        }
    }

    /// After recovery: each live subprocess run is linked to its live parent again.
    pub(super) fn relink_children(&self) {
        let mut runs = lock(&self.inner.runs);
        let links: Vec<(String, String)> = runs
            .lives()
            .filter_map(|r| {
                let s = r.summary.borrow();
                s.parent
                    .as_ref()
                    .map(|p| (p.run_id.clone(), s.run_id.clone()))
            })
            .collect();
        for (parent, child) in links {
            if let Some(p) = runs.live_mut(&parent) {
                p.children.insert(child);
            }
        }
    }
}

/// A parent's subprocess effect.
struct Link {
    namespace: String,
    parent: String,
    effect_id: String,
    invocation_key: String,
}
