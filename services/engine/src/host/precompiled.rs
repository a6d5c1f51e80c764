//! The engine's own JS — the prelude, the engine runtime, the SDK module and the Node shims —
//! compiled to QuickJS bytecode when this crate is built (rquickjs's `embed!`), so that a
//! session start skips parsing about 45 KB of source. Every `babysitter run:iterate` is a new
//! process and every cold replay a new session, so that parse was paid on each of them.
//!
//! Bytecode is only used for the exact source it was compiled from: a module is looked up by
//! name *and* source (a host configured with other builtins parses them as before), and a
//! bytecode load that fails (e.g. an engine built with a different QuickJS) falls back to
//! parsing, so precompilation can change speed but never behaviour.

use rquickjs::loader::{Bundle, Loader};
use rquickjs::module::{Declared, Evaluated};
use rquickjs::{Ctx, Module, embed};

/// Module name of the prelude, which installs the globals (`shims/prelude.js`).
pub(crate) const PRELUDE_MODULE: &str = "babysitter:prelude";
/// Module name of the engine runtime, the ctx API (`engine/js/runtime.js`).
pub(crate) const RUNTIME_MODULE: &str = "babysitter:runtime";
/// Module name of the embedded SDK, what processes import.
pub const SDK_MODULE: &str = "@a5c-ai/babysitter-sdk";

pub(crate) const PRELUDE_JS: &str = include_str!("shims/prelude.js");
pub(crate) const RUNTIME_JS: &str = include_str!("../js/runtime.js");
pub(crate) const SDK_JS: &str = include_str!("../js/sdk.js");

/// Paths are relative to the crate's manifest.
static BUNDLE: Bundle = embed! {
    "babysitter:prelude": "src/host/shims/prelude.js",
    "babysitter:runtime": "src/js/runtime.js",
    "@a5c-ai/babysitter-sdk": "src/js/sdk.js",
    "node:path": "src/host/shims/path.js",
    "node:url": "src/host/shims/url.js",
    "node:crypto": "src/host/shims/crypto.js",
    "node:fs": "src/host/shims/fs.js",
    "node:fs/promises": "src/host/shims/fs_promises.js",
};

/// The sources the bundle was compiled from. Besides the source check, these `include_str!`s
/// make Cargo rebuild the crate — and so recompile the bundle — when one of the files changes
/// (`embed!` reads the files itself, which Cargo does not track).
const SOURCES: &[(&str, &str)] = &[
    (PRELUDE_MODULE, PRELUDE_JS),
    (RUNTIME_MODULE, RUNTIME_JS),
    (SDK_MODULE, SDK_JS),
    ("node:path", include_str!("shims/path.js")),
    ("node:url", include_str!("shims/url.js")),
    ("node:crypto", include_str!("shims/crypto.js")),
    ("node:fs", include_str!("shims/fs.js")),
    ("node:fs/promises", include_str!("shims/fs_promises.js")),
];

/// The source of a precompiled module (the shims are looked up here by name).
pub(crate) fn source_of(name: &str) -> Option<&'static str> {
    SOURCES.iter().find(|(n, _)| *n == name).map(|(_, s)| *s)
}

/// Declares module `name` with `source`: from bytecode when that is what was precompiled under
/// this name, else by parsing `source`.
pub(crate) fn declare<'js>(
    ctx: &Ctx<'js>,
    name: &str,
    source: &str,
) -> rquickjs::Result<Module<'js, Declared>> {
    if source_of(name) == Some(source) {
        let mut bundle = BUNDLE;
        match bundle.load(ctx, name, None) {
            Ok(module) => return Ok(module),
            Err(e) => {
                // Whatever the failed load left pending is not the process's business.
                let _ = ctx.catch();
                tracing::warn!(module = name, error = %e, "precompiled module did not load; parsing its source");
            }
        }
    }
    Module::declare(ctx.clone(), name, source)
}

/// Declares and evaluates one of the engine's own modules (prelude, runtime), driving the job
/// queue until its evaluation settles.
pub(crate) fn evaluate<'js>(
    ctx: &Ctx<'js>,
    name: &str,
    source: &str,
) -> rquickjs::Result<Module<'js, Evaluated>> {
    let (module, done) = declare(ctx, name, source)?.eval()?;
    done.finish::<()>()?;
    Ok(module)
}

#[cfg(test)]
mod tests {
    use rquickjs::{Context, Runtime};

    use super::*;

    #[test]
    fn every_precompiled_module_loads_from_bytecode() {
        let rt = Runtime::new().unwrap();
        let ctx = Context::full(&rt).unwrap();
        ctx.with(|ctx| {
            for (name, _) in SOURCES {
                let mut bundle = BUNDLE;
                let loaded = bundle.load(&ctx, name, None);
                assert!(loaded.is_ok(), "{name}: {loaded:?}");
            }
        });
        assert_eq!(BUNDLE.0.len(), SOURCES.len());
    }

    #[test]
    fn other_sources_under_a_precompiled_name_are_parsed() {
        let rt = Runtime::new().unwrap();
        let ctx = Context::full(&rt).unwrap();
        ctx.with(|ctx| {
            let module = evaluate(&ctx, "node:url", "export const marker = 42;").unwrap();
            assert_eq!(module.get::<_, i32>("marker").unwrap(), 42);
        });
    }
}
