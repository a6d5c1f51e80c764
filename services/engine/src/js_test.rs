//! Test helpers for the host code that reads JS values: a bare QuickJS context, and the message
//! of the exception a host function left pending.

use rquickjs::{Context, Ctx, Runtime};

/// Runs `f` in a fresh QuickJS context.
pub(crate) fn with_context(f: impl for<'js> FnOnce(Ctx<'js>)) {
    let rt = Runtime::new().unwrap();
    let context = Context::full(&rt).unwrap();
    context.with(f);
}

/// The `message` of the exception pending in `ctx` (empty when there is none).
pub(crate) fn thrown_message(ctx: &Ctx<'_>) -> String {
    ctx.catch()
        .as_object()
        .and_then(|o| o.get("message").ok())
        .unwrap_or_default()
}
