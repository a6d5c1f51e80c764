//! `run:assign-process <runDir> --entry <path#export> [--process-id] [--process-revision]
//! [--force] [--json] [--dry-run]` (spec §5.3.2): attaches a process to a bare run (one created
//! without `--entry`, e.g. by the unified session-start hook), or replaces a run's process with
//! `--force`. `run.json` gets the absolute entry path (F9), the new `processId`,
//! `processCodeHash` and optional `processRevision`; the journal records `PROCESS_ASSIGNED`.
//!
//! The entry is checked the way `run:create` checks it (the file exists and exports a process
//! function) before anything is written. The bare-run check is repeated under the run's lock, so
//! two concurrent assignments cannot both win.

use std::path::Path;

use babysitter_journal::{EventType, node_json};
use serde_json::{Map, Value, json};

use super::entry::{check_entry, parse_entry};
use crate::compat::cli::Cli;
use crate::compat::run_dir::{Run, hash_file};
use crate::compat::{lock, output, paths, usage};

const CMD: &str = "run:assign-process";

fn is_bare(run_json: &Value) -> bool {
    run_json
        .pointer("/entrypoint/importPath")
        .and_then(Value::as_str)
        == Some("bare-run")
}

/// The `PROCESS_ALREADY_ASSIGNED` refusal (single-line JSON on stdout, as the reference prints).
fn already_assigned(cli: &Cli<'_>, run_json: &Value) -> u8 {
    let current = run_json.get("entrypoint").cloned().unwrap_or(Value::Null);
    let message = format!(
        "Run already has a process assigned (entrypoint: {}). Use --force to override.",
        current
            .get("importPath")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
    );
    if cli.args.json() {
        output::line(&output::compact(&json!({
            "error": "PROCESS_ALREADY_ASSIGNED", "message": message, "currentEntrypoint": current,
        })));
    } else {
        errln!("{message}");
    }
    1
}

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let a = &cli.args;
    let Some(run_dir) = cli.run_dir() else {
        errln!("{CMD} requires a <runDir> positional argument");
        errln!("{}", usage::USAGE);
        return Ok(1);
    };
    let Some(spec) = a.value("--entry") else {
        errln!("--entry is required for {CMD}");
        errln!("{}", usage::USAGE);
        return Ok(1);
    };
    let entry = match parse_entry(spec) {
        Ok(e) => e,
        Err(m) => {
            errln!("{m}");
            return Ok(1);
        }
    };
    let abs = paths::resolve(&cli.cwd, &entry.import_path);
    let resolved_entry = match &entry.export_name {
        Some(x) => format!("{}#{x}", abs.display()),
        None => abs.display().to_string(),
    };
    let force = a.flag("--force");
    cli.verbose(
        CMD,
        &[
            ("runDir", Some(run_dir.display().to_string())),
            ("entry", Some(resolved_entry.clone())),
            ("processId", a.value("--process-id").map(str::to_owned)),
            ("force", Some(force.to_string())),
            ("dryRun", Some(a.dry_run().to_string())),
            ("json", Some(a.json().to_string())),
        ],
    );
    let dir = run_dir.display().to_string();
    let opened = Run::open(&run_dir).and_then(|r| r.metadata().map(|m| (r, m)));
    let (run, run_json) = match opened {
        Ok(x) => x,
        Err(m) => {
            let message = if run_dir.join("run.json").try_exists().unwrap_or(false) {
                format!("Run metadata at {dir} is unreadable: {m}")
            } else {
                format!("Run directory not found: {dir}")
            };
            if a.json() {
                output::line(&output::compact(
                    &json!({"error": "RUN_NOT_FOUND", "message": message}),
                ));
            } else {
                errln!("{message}");
            }
            return Ok(1);
        }
    };
    if !is_bare(&run_json) && !force {
        return Ok(already_assigned(cli, &run_json));
    }
    let process_id = a
        .value("--process-id")
        .or_else(|| run_json.get("processId").and_then(Value::as_str))
        .unwrap_or("bare-run")
        .to_owned();
    let code_hash = match check_entry(&abs, entry.export_name.as_deref()).await {
        Ok(digest) => digest,
        Err(m) => {
            errln!("{m}");
            return Ok(1);
        }
    };
    let previous = run_json.get("entrypoint").cloned().unwrap_or(Value::Null);
    let run_id = run_json
        .get("runId")
        .and_then(Value::as_str)
        .unwrap_or(&run.id)
        .to_owned();
    if a.dry_run() {
        if a.json() {
            output::line(&output::pretty(&json!({
                "dryRun": true, "runDir": dir, "runId": run_id, "entry": resolved_entry,
                "processId": process_id, "previousEntrypoint": previous, "force": force,
            })));
        } else {
            output::line(&format!(
                "[{CMD}] dry-run runDir={dir} entry={resolved_entry} processId={process_id}"
            ));
        }
        return Ok(0);
    }

    let spec = Assign {
        abs: &abs,
        export_name: entry.export_name.as_deref(),
        process_id: &process_id,
        process_revision: a.value("--process-revision"),
        code_hash,
        force,
        adopt: None,
    };
    let previous = match assign(cli, &run, &spec).await? {
        Ok((previous, _)) => previous,
        Err(current) => return Ok(already_assigned(cli, &current)),
    };
    if a.json() {
        output::line(&output::pretty(&json!({
            "runId": run_id, "runDir": dir, "entry": resolved_entry, "processId": process_id,
            "previousEntrypoint": previous, "assigned": true,
        })));
    } else {
        output::line(&format!(
            "[{CMD}] runId={run_id} runDir={dir} entry={resolved_entry} processId={process_id}"
        ));
    }
    Ok(0)
}

/// A process to attach to a run ([`assign`]).
pub(crate) struct Assign<'a> {
    pub abs: &'a Path,
    pub export_name: Option<&'a str>,
    pub process_id: &'a str,
    pub process_revision: Option<&'a str>,
    /// The import closure's code hash from the entry check; `None`: the entry file's hash.
    pub code_hash: Option<String>,
    pub force: bool,
    /// `run:create` adopting the session's bare run: the run also takes these.
    pub adopt: Option<Adoption<'a>>,
}

/// What an adopted run takes from the `run:create` that adopts it.
pub(crate) struct Adoption<'a> {
    pub request: &'a str,
    pub prompt: Option<&'a str>,
    pub inputs: Option<&'a Value>,
    pub non_interactive: bool,
}

/// Attaches the process under the run's lock: `run.json` gets the absolute entry (F9), the
/// process id, code hash and revision, and the journal `PROCESS_ASSIGNED`. Returns the previous
/// entrypoint and the new `run.json`, or `Err(run.json)` untouched when the run has a process
/// already and `force` is off (checked under the lock: two assignments cannot both win).
pub(crate) async fn assign(
    cli: &Cli<'_>,
    run: &Run,
    spec: &Assign<'_>,
) -> anyhow::Result<Result<(Value, Value), Value>> {
    let _guard = lock::acquire(&run.dir, cli.lock_timeout()).await?;
    let mut current = run.metadata().map_err(|m| anyhow::anyhow!("[{CMD}] {m}"))?;
    if !is_bare(&current) && !spec.force {
        return Ok(Err(current));
    }
    let previous = current.get("entrypoint").cloned().unwrap_or(Value::Null);
    let abs = spec.abs.display().to_string();
    let mut entrypoint = Map::new();
    entrypoint.insert("importPath".into(), json!(abs));
    if let Some(x) = spec.export_name {
        entrypoint.insert("exportName".into(), json!(x));
    }
    let code_hash = spec.code_hash.clone().or_else(|| hash_file(spec.abs));
    if let Some(m) = current.as_object_mut() {
        m.insert("entrypoint".into(), Value::Object(entrypoint.clone()));
        m.insert("processPath".into(), json!(abs));
        m.insert("processId".into(), json!(spec.process_id));
        match &code_hash {
            Some(h) => m.insert("processCodeHash".into(), json!(h)),
            None => m.remove("processCodeHash"),
        };
        if let Some(r) = spec.process_revision {
            m.insert("processRevision".into(), json!(r));
        }
        if let Some(adopt) = &spec.adopt {
            m.insert("request".into(), json!(adopt.request));
            if let Some(p) = adopt.prompt {
                m.insert("prompt".into(), json!(p));
            }
            if adopt.non_interactive {
                m.insert("nonInteractive".into(), json!(true));
            }
        }
    }
    let path = run.dir.join("run.json");
    babysitter_journal::fs::write_atomic(&path, node_json::to_file_string(&current).as_bytes())?;
    let adopt = spec.adopt.as_ref();
    if let Some(inputs) = adopt.and_then(|a| a.inputs) {
        let path = run.dir.join("inputs.json");
        babysitter_journal::fs::write_atomic(&path, node_json::to_file_string(inputs).as_bytes())?;
    }
    let mut data = Map::new();
    data.insert("processId".into(), json!(spec.process_id));
    data.insert("entrypoint".into(), Value::Object(entrypoint));
    data.insert("previousEntrypoint".into(), previous.clone());
    data.insert("force".into(), json!(spec.force));
    if let Some(p) = adopt.and_then(|a| a.prompt) {
        data.insert("prompt".into(), json!(p));
    }
    if adopt.is_some_and(|a| a.inputs.is_some()) {
        data.insert("inputsRef".into(), json!("inputs.json"));
    }
    if let Some(h) = &code_hash {
        data.insert("processCodeHash".into(), json!(h));
    }
    run.append(EventType::ProcessAssigned, data, &current, cli.env)
        .await?;
    Ok(Ok((previous, current)))
}
