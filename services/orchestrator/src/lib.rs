//! babysitter-orchestrator: the orchestrator service ([`service`]) — run manager, task queue with
//! leases, and the gRPC `RunService` / `WorkerService` — over the run lifecycle of
//! `babysitter-engine` (re-exported as [`engine`]), which runs babysitter processes unchanged in
//! embedded QuickJS and replays them deterministically against the journal.

#![forbid(unsafe_code)]

pub use babysitter_engine as engine;
pub mod service;
