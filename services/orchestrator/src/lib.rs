//! babysitter-orchestrator: the process engine (this crate's [`engine`]), which runs babysitter
//! processes unchanged in embedded QuickJS and turns each `ctx` call into an effect with
//! babysitter's exact identity, replaying deterministically against the journal. The
//! orchestrator service (run manager, task queue, worker protocol) will live here too.

#![forbid(unsafe_code)]

pub mod engine;
