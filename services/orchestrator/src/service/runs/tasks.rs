//! What an operator asks about a run's tasks and the workers (`ListTasks`, `GetTask`,
//! `ListWorkers`): the journal's effect index says what was requested and how it resolved; the
//! queue says, for what is unresolved, whether it waits for a worker or which worker holds it.

use std::time::SystemTime;

use babysitter_journal::JournalError;
use babysitter_journal::index::{EffectRecord, EffectStatus};
use babysitter_journal::store::RunFile;
use bytes::Bytes;
use serde_json::Value;

use super::RunManager;
use crate::service::queue::{QueuedTask, WorkerView};
use crate::service::{Result, ServiceError};

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskState {
    /// Unresolved and not in the queue (a breakpoint, a sleep, a client-driven run's task).
    Requested,
    Queued,
    Leased,
    Succeeded,
    Failed,
    Cancelled,
}

/// One task of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskInfo {
    pub run_id: String,
    pub effect_id: String,
    pub task_id: String,
    pub kind: String,
    pub label: String,
    pub state: TaskState,
    /// 0 when not in the queue.
    pub attempt: u32,
    pub worker_id: String,
    pub lease_expires_at: Option<SystemTime>,
    pub requested_at: Option<String>,
    pub resolved_at: Option<String>,
    pub error: Option<Value>,
}

/// The first bytes of a task's log.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LogHead {
    pub head: String,
    /// The whole log's size as stored (a log spilled to a blob counts whole).
    pub bytes: u64,
    pub truncated: bool,
}

/// One task with its files.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskDetail {
    pub info: TaskInfo,
    pub task_json: Option<Bytes>,
    pub result_json: Option<Bytes>,
    pub stdout: LogHead,
    pub stderr: LogHead,
}

fn info_of(run_id: &str, r: &EffectRecord, queued: Option<&QueuedTask>) -> TaskInfo {
    let state = match (r.status, queued) {
        (EffectStatus::ResolvedOk, _) => TaskState::Succeeded,
        (EffectStatus::ResolvedError, _) => TaskState::Failed,
        (EffectStatus::Cancelled, _) => TaskState::Cancelled,
        (EffectStatus::Requested, Some(q)) if q.lease.is_some() => TaskState::Leased,
        (EffectStatus::Requested, Some(_)) => TaskState::Queued,
        (EffectStatus::Requested, None) => TaskState::Requested,
    };
    let lease = queued.and_then(|q| q.lease.as_ref());
    TaskInfo {
        run_id: run_id.to_owned(),
        effect_id: r.effect_id.clone(),
        task_id: r.task_id.clone(),
        kind: r.kind.clone().unwrap_or_default(),
        label: r.label.clone().unwrap_or_default(),
        state,
        attempt: queued.map_or(0, |q| q.attempt),
        worker_id: lease.map(|l| l.worker_id.clone()).unwrap_or_default(),
        lease_expires_at: lease.and_then(|l| l.expires_at),
        requested_at: r.requested_at.clone(),
        resolved_at: r.resolved_at.clone(),
        error: r.error.clone(),
    }
}

/// The first `max` bytes of `text`, cut back to a character boundary (a log's head, as
/// `GetTask` answers it and as a spilled log keeps it).
pub(super) fn head_of(text: &str, max: usize) -> &str {
    let mut cut = max.min(text.len());
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

impl RunManager {
    /// A page of the run's tasks in request order, after effect `after`; the next page's token.
    pub async fn tasks(
        &self,
        namespace: &str,
        run_id: &str,
        page_size: usize,
        after: Option<&str>,
    ) -> Result<(Vec<TaskInfo>, Option<String>)> {
        self.get(namespace, run_id).await?;
        let (_, index) = self.journal().index(run_id).await?;
        let start = match after {
            None => 0,
            Some(effect) => {
                index.effects.get_index_of(effect).ok_or_else(|| {
                    ServiceError::invalid(
                        "page_token",
                        format!("effect {effect} is not a task of run {run_id}"),
                    )
                })? + 1
            }
        };
        let queued = self.inner.queue.tasks_of(run_id);
        let size = page_size.clamp(1, 1000);
        let page: Vec<TaskInfo> = index
            .effects
            .values()
            .skip(start)
            .take(size)
            .map(|r| info_of(run_id, r, queued.get(&r.effect_id)))
            .collect();
        let next = (start + page.len() < index.effects.len())
            .then(|| page.last().map(|t| t.effect_id.clone()))
            .flatten();
        Ok((page, next))
    }

    /// One task with its definition, result and the first `log_head` bytes of its logs.
    pub async fn task(
        &self,
        namespace: &str,
        run_id: &str,
        effect_id: &str,
        log_head: usize,
    ) -> Result<TaskDetail> {
        self.get(namespace, run_id).await?;
        let (_, index) = self.journal().index(run_id).await?;
        let record = index
            .effects
            .get(effect_id)
            .ok_or_else(|| ServiceError::NotFound(format!("task {effect_id} of run {run_id}")))?;
        let queued = self.inner.queue.tasks_of(run_id);
        let info = info_of(run_id, record, queued.get(effect_id));
        let task_json = self.optional_file(run_id, effect_id, "task.json").await?;
        let result_json = self.optional_file(run_id, effect_id, "result.json").await?;
        let metadata = result_json
            .as_ref()
            .and_then(|b| serde_json::from_slice::<Value>(b).ok())
            .and_then(|v| v.get("metadata").cloned())
            .unwrap_or_default();
        let mut logs = Vec::with_capacity(2);
        for name in ["stdout", "stderr"] {
            let text = self
                .optional_file(run_id, effect_id, &format!("{name}.log"))
                .await?
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            // A log spilled to a blob keeps only its head in the file; its size is recorded.
            let bytes = metadata
                .get(format!("{name}Bytes"))
                .and_then(Value::as_u64)
                .unwrap_or(text.len() as u64);
            let head = head_of(&text, log_head).to_owned();
            logs.push(LogHead {
                truncated: (head.len() as u64) < bytes,
                head,
                bytes,
            });
        }
        let stderr = logs.pop().unwrap_or_default();
        let stdout = logs.pop().unwrap_or_default();
        Ok(TaskDetail {
            info,
            task_json,
            result_json,
            stdout,
            stderr,
        })
    }

    /// The workers serving any of `namespaces` (`None`: every worker).
    pub fn workers(&self, namespaces: Option<&[String]>) -> Vec<WorkerView> {
        let mut all = self.inner.queue.workers();
        if let Some(allowed) = namespaces {
            all.retain(|w| {
                w.namespaces.is_empty() || w.namespaces.iter().any(|n| allowed.contains(n))
            });
        }
        all
    }

    async fn optional_file(
        &self,
        run_id: &str,
        effect_id: &str,
        name: &str,
    ) -> Result<Option<Bytes>> {
        match self
            .journal()
            .get_run_file(run_id, &RunFile::task(effect_id, name)?)
            .await
        {
            Ok(b) => Ok(Some(b)),
            Err(JournalError::RunFileNotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::head_of;

    #[test]
    fn a_log_head_is_cut_at_a_character_boundary() {
        assert_eq!(head_of("héllo", 2), "h");
        assert_eq!(head_of("héllo", 3), "hé");
        assert_eq!(head_of("abc", 10), "abc");
    }
}
