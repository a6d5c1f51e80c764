//! The journal settings of CLI processes, shared by the compat commands, `babysitter run` and
//! the warm server. A leaf module of its own so that the modes reach it without depending on the
//! crate root, which dispatches to every one of them.

/// Journal settings for CLI processes: every command opens the run anew, so snapshots come
/// often (an open reads the latest snapshot plus at most this many events).
pub(crate) fn for_cli() -> babysitter_journal::JournalOptions {
    babysitter_journal::JournalOptions {
        snapshot_every: 64,
        // The process exits right after the command: store the snapshot before it does.
        background_snapshots: false,
        ..Default::default()
    }
}
