//! A run's process entry, as `run:create` and `run:assign-process` take it: `--entry
//! <path>[#<export>]` split ([`parse_entry`]), and the module checked before anything is written
//! ([`check_entry`]).

use std::path::Path;

use babysitter_engine::EngineError;
use babysitter_engine::HostError;
use babysitter_engine::lifecycle::Entrypoint;

/// `<path>[#<export>]`, split at the last `#` (the import path as given, not yet relative to the
/// run directory).
pub(crate) fn parse_entry(spec: &str) -> Result<Entrypoint, String> {
    match spec.rfind('#') {
        Some(0) => Err("Entrypoint must include a module path before '#'".into()),
        Some(i) => Ok(Entrypoint {
            import_path: spec[..i].to_owned(),
            export_name: Some(spec[i + 1..].to_owned()).filter(|e| !e.is_empty()),
        }),
        None => Ok(Entrypoint {
            import_path: spec.to_owned(),
            export_name: None,
        }),
    }
}

/// Checks that the entry file exists, loads as an ES module in the embedded engine and exports
/// a process function (`mod[export] ?? mod.process ?? mod.default`), as the reference does by
/// importing it (the engine's entry check: nothing is written, the process is not called).
/// Answers the code hash of the import closure it loaded.
pub(crate) async fn check_entry(
    abs: &Path,
    export: Option<&str>,
) -> Result<Option<String>, String> {
    let is_file = std::fs::metadata(abs).map(|m| m.is_file()).unwrap_or(false);
    if !is_file {
        return Err(format!(
            "Process entry file not found: {}. Ensure the path is correct and points to a valid JS/TS module.",
            abs.display()
        ));
    }
    let export = export.unwrap_or("process");
    match babysitter_engine::check_entry(abs, Some(export), None).await {
        Ok(check) => Ok(Some(check.code_hash)),
        Err(EngineError::Host(HostError::NotAFunction { .. })) => Err(format!(
            "Process module {} does not export a valid process function. Expected '{export}' (function) or default export.",
            abs.display()
        )),
        Err(e) => Err(format!(
            "Failed to load process module at {}: {e}",
            abs.display()
        )),
    }
}
