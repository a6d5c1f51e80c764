//! `run:*` commands.

pub mod create;
pub mod events;
pub mod halt;
pub mod iterate;
pub mod rebuild_state;
pub mod status;
