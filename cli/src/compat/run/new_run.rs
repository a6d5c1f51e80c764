//! A new run as a CLI call describes it: the engine's [`lifecycle::NewRun`] stamped now, for
//! `run:create` and for the bare run the unified session-start hook binds. The command's home
//! writes it ([`crate::compat::client::RunClient::create_run`]).

use babysitter_engine::lifecycle;

/// A run of `process_id` at `entrypoint`, created now.
pub(crate) fn new_run(
    run_id: &str,
    process_id: &str,
    entrypoint: lifecycle::Entrypoint,
) -> lifecycle::NewRun {
    lifecycle::NewRun::new(
        run_id,
        process_id,
        entrypoint,
        babysitter_journal::journal::now_iso(),
    )
}
