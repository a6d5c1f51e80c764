//! Which task kinds a coding-agent harness executes. One rule for every place that routes or
//! counts them: the worker advertises and runs these through its harness launcher, `babysitter
//! run` through the same launcher code, and a budget's `agent-tasks` limit counts them.
//!
//! Why three kinds: babysitter hands `agent`, `skill` (a named skill of the harness) and
//! `orchestrator_task` (work for the orchestrating agent itself, its payload describing it) to
//! an AI agent; babysitter-rs has no agent in the loop of its own, so each is one headless
//! harness session on a worker.

/// Task kinds executed by a coding-agent harness.
pub const HARNESS_KINDS: [&str; 3] = ["agent", "skill", "orchestrator_task"];

/// Whether tasks of `kind` are executed by a coding-agent harness.
pub fn runs_on_a_harness(kind: &str) -> bool {
    HARNESS_KINDS.contains(&kind)
}
