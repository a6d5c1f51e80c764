//! babysitter-harness-launcher: the worker. It registers with the orchestrator's
//! `WorkerService`, takes tasks under leases, executes them and completes them ([`worker`]).
//!
//! Agent tasks run a real coding-agent CLI headless: [`harness`] finds Claude Code, Codex,
//! Gemini CLI, Pi and OpenCode on the machine and knows the args, env and config files each
//! needs; [`provider`] points it at a model server, through an in-process transport proxy when
//! the harness and the provider speak different protocols; [`agent`] runs it, feeding its
//! native output through [`parse`] into the universal event stream ([`events`]) and turning
//! the end of the run into the task's value, usage and cost ([`outcome`]), in a project
//! directory of the task's own ([`workspace`]: empty, in place, a copy or a git worktree). Shell, node and hook
//! tasks run through [`exec`], shared with `babysitter run`.
//!
//! The admin API (`HarnessLauncherService`: status, installed harnesses, running tasks, cancel,
//! drain) is [`admin`] over the worker's own state, served by [`grpc`] when configured.

pub mod admin;
pub mod agent;
mod agent_spec;
pub mod config;
pub mod events;
pub mod exec;
pub mod group;
pub mod grpc;
pub mod harness;
pub mod home;
pub mod hooks;
mod metrics;
pub mod outcome;
pub mod parse;
pub mod provider;
pub mod quota;
pub mod session;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod worker;
pub mod workspace;
