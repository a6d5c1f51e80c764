//! babysitter-orchestrator: the process engine ([`engine`]), which runs babysitter processes
//! unchanged in embedded QuickJS and turns each `ctx` call into an effect with babysitter's exact
//! identity, replaying deterministically against the journal; and the orchestrator service
//! ([`service`]): run manager, task queue with leases, and the gRPC `RunService` /
//! `WorkerService` over them.

#![forbid(unsafe_code)]

pub mod engine;
pub mod service;
