//! The babysitter plugin for coding agents: one source (`plugins/babysitter/`, embedded at build
//! time) rendered into each harness's native bundle, and installed where that harness looks for
//! it. The hook side — what a bundle's hooks call — is `hooks:invoke` (`compat::hooks_adapter`).
//!
//! - [`harness`]: the harnesses, their native hook events and the canonical phases; the one
//!   table the generator and the hooks adapter share.
//! - [`source`]: the embedded source and its manifest; templating.
//! - [`bundle`]: one harness's bundle (checked in under `plugins/dist/<harness>/`).
//! - [`install`]: writing a bundle into a project or the user's home, recording what was
//!   written, removing exactly that.

pub mod bundle;
pub mod harness;
pub mod install;
pub mod source;
