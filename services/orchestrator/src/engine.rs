//! The process engine.
//!
//! - [`identity`]: babysitter's effect identity — ICU root collation (`localeCompare`), argument
//!   shapes, step ids, invocation keys and hashes, parallel group ids, key-sorted clones.
//! - [`host`]: the embedded QuickJS host — runtime limits, the ES module loader confined to the
//!   process folder, the built-in `@a5c-ai/babysitter-sdk` module and Node built-in shims.

