//! `task:*` commands.

pub mod cancel;
pub mod list;
pub mod post;
pub mod show;
