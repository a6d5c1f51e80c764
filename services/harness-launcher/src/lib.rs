//! babysitter-harness-launcher: the worker. It registers with the orchestrator's
//! `WorkerService`, takes tasks under leases, executes them and completes them ([`worker`]).
//! Today it executes shell, node and hook tasks ([`exec`], shared with `babysitter run`); the
//! coding-agent harness adapters (Claude Code, Codex, Gemini CLI, Pi, OpenCode) come next and plug
//! into the same loop.

#![forbid(unsafe_code)]

pub mod config;
pub mod exec;
pub mod worker;
