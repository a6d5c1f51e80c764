//! Wire forms of what `ListTasks`, `GetTask` and `ListWorkers` answer (the handlers are in
//! `run_api.rs`; the answers come from `runs::tasks`).

use babysitter_proto::common::v1 as cpb;
use babysitter_proto::orchestrator::v1 as pb;

use super::{system_time_to_pb, timestamp_of};
use crate::service::budget::{Budget, Crossed};
use crate::service::queue::WorkerView;
use crate::service::runs::{RunCost, TaskDetail, TaskInfo, TaskState};

/// The bytes of a log head returned when the request names none; the most returned.
pub(super) const DEFAULT_LOG_HEAD: usize = 4096;
pub(super) const MAX_LOG_HEAD: usize = 1 << 20;

fn state_pb(s: TaskState) -> pb::TaskState {
    match s {
        TaskState::Requested => pb::TaskState::Requested,
        TaskState::Queued => pb::TaskState::Queued,
        TaskState::Leased => pb::TaskState::Leased,
        TaskState::Succeeded => pb::TaskState::Succeeded,
        TaskState::Failed => pb::TaskState::Failed,
        TaskState::Cancelled => pb::TaskState::Cancelled,
    }
}

pub(super) fn task_pb(t: TaskInfo) -> pb::Task {
    pb::Task {
        state: state_pb(t.state) as i32,
        error: t.error.as_ref().map(super::run_api::task_error_pb),
        lease_expires_at: t.lease_expires_at.map(system_time_to_pb),
        requested_at: timestamp_of(t.requested_at.as_deref()),
        resolved_at: timestamp_of(t.resolved_at.as_deref()),
        run_id: t.run_id,
        effect_id: t.effect_id,
        task_id: t.task_id,
        kind: t.kind,
        label: t.label,
        attempt: t.attempt,
        worker_id: t.worker_id,
    }
}

pub(super) fn task_detail_pb(d: TaskDetail) -> pb::GetTaskResponse {
    pb::GetTaskResponse {
        task: Some(task_pb(d.info)),
        task_json: d.task_json.unwrap_or_default(),
        result_json: d.result_json.unwrap_or_default(),
        stdout_bytes: d.stdout.bytes,
        stderr_bytes: d.stderr.bytes,
        stdout_truncated: d.stdout.truncated,
        stderr_truncated: d.stderr.truncated,
        stdout_head: d.stdout.head,
        stderr_head: d.stderr.head,
    }
}

pub(super) fn worker_pb(w: WorkerView) -> pb::Worker {
    pb::Worker {
        worker_id: w.worker_id,
        namespaces: w.namespaces,
        capabilities: Some(cpb::WorkerCapabilities {
            task_kinds: w.capabilities.task_kinds,
            harnesses: w
                .capabilities
                .harnesses
                .into_iter()
                .map(|name| cpb::HarnessInfo {
                    name,
                    ..Default::default()
                })
                .collect(),
            labels: w.capabilities.labels.into_iter().collect(),
            max_concurrency: w.capabilities.max_concurrency,
        }),
        leases: w.leases as u32,
        last_seen: Some(system_time_to_pb(w.last_seen)),
        live: w.live,
    }
}

pub(super) fn budget_of(b: pb::RunBudget) -> Budget {
    Budget {
        max_tokens: b.max_tokens,
        max_cost_usd: b.max_cost_usd,
        max_wall_time: b.max_wall_time.map(super::duration_of),
        max_tasks: b.max_tasks,
        max_agent_tasks: b.max_agent_tasks,
        warn_at: b.warn_at,
        on_exceed: b.ask_to_raise.map(|ask| {
            if ask {
                crate::service::budget::OnExceed::Ask
            } else {
                crate::service::budget::OnExceed::Fail
            }
        }),
    }
}

/// A budget as `CreateRunRequest.budget` carries it (the CLI sends it too).
pub fn budget_pb(b: Budget) -> pb::RunBudget {
    pb::RunBudget {
        max_tokens: b.max_tokens,
        max_cost_usd: b.max_cost_usd,
        max_wall_time: b.max_wall_time.map(super::duration_pb),
        max_tasks: b.max_tasks,
        max_agent_tasks: b.max_agent_tasks,
        warn_at: b.warn_at,
        ask_to_raise: b
            .on_exceed
            .map(|o| o == crate::service::budget::OnExceed::Ask),
    }
}

pub(super) fn cost_pb(c: RunCost) -> pb::GetRunCostResponse {
    pb::GetRunCostResponse {
        budget: c.budget.map(budget_pb),
        tokens: c.spent.tokens,
        cost_usd: c.spent.cost_usd,
        tasks: c.spent.tasks,
        agent_tasks: c.spent.agent_tasks,
        wall_time_seconds: c.spent.wall_time.as_secs_f64(),
        task_costs: c
            .tasks
            .into_iter()
            .map(|t| pb::TaskCost {
                effect_id: t.effect_id,
                kind: t.kind,
                label: t.label,
                model: t.model,
                input_tokens: t.input_tokens,
                output_tokens: t.output_tokens,
                cache_read_tokens: t.cache_read_tokens,
                cache_write_tokens: t.cache_write_tokens,
                cost_usd: t.cost_usd,
            })
            .collect(),
        warnings: c.warnings.iter().map(Crossed::figures).collect(),
        exceeded: c.exceeded.map(|e| e.reason()).unwrap_or_default(),
    }
}
