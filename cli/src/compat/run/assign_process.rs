//! `run:assign-process <runDir> --entry <path#export> [--process-id] [--process-revision]
//! [--force] [--json] [--dry-run]` (spec §5.3.2): attaches a process to a bare run (one created
//! without `--entry`, e.g. by the unified session-start hook), or replaces a run's process with
//! `--force`. `run.json` gets the absolute entry path (F9), the new `processId`,
//! `processCodeHash` and optional `processRevision`; the journal records `PROCESS_ASSIGNED`.
//!
//! The entry is checked the way `run:create` checks it (the file exists and exports a process
//! function) before anything is written. The bare-run check is repeated under the run's lock, so
//! two concurrent assignments cannot both win.

use babysitter_journal::{EventType, jsjson};
use serde_json::{Map, Value, json};

use super::create::{check_entry, parse_entry};
use crate::compat::runs::{self, Run};
use crate::compat::{Cli, lock, output, paths, usage};

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
    let inputs = match std::fs::read(run.dir.join("inputs.json")) {
        Ok(b) => serde_json::from_slice::<Value>(&b).ok(),
        Err(_) => None,
    };
    if let Err(m) = check_entry(
        cli,
        &abs,
        entry.export_name.as_deref(),
        &process_id,
        inputs.as_ref(),
    )
    .await
    {
        errln!("{m}");
        return Ok(1);
    }
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

    let _guard = lock::acquire(&run.dir, cli.lock_timeout()).await?;
    // Under the lock: another assignment may have won meanwhile.
    let mut current = match run.metadata() {
        Ok(m) => m,
        Err(m) => {
            errln!("[{CMD}] {m}");
            return Ok(1);
        }
    };
    if !is_bare(&current) && !force {
        return Ok(already_assigned(cli, &current));
    }
    let previous = current.get("entrypoint").cloned().unwrap_or(Value::Null);
    let mut entrypoint = Map::new();
    entrypoint.insert("importPath".into(), json!(abs.display().to_string()));
    if let Some(x) = &entry.export_name {
        entrypoint.insert("exportName".into(), json!(x));
    }
    let code_hash = runs::hash_file(&abs);
    if let Some(m) = current.as_object_mut() {
        m.insert("entrypoint".into(), Value::Object(entrypoint.clone()));
        m.insert("processPath".into(), json!(abs.display().to_string()));
        m.insert("processId".into(), json!(process_id));
        match &code_hash {
            Some(h) => m.insert("processCodeHash".into(), json!(h)),
            None => m.remove("processCodeHash"),
        };
        if let Some(r) = a.value("--process-revision") {
            m.insert("processRevision".into(), json!(r));
        }
    }
    let path = run.dir.join("run.json");
    babysitter_journal::fs::write_atomic(&path, jsjson::to_file_string(&current).as_bytes())?;
    let mut data = Map::new();
    data.insert("processId".into(), json!(process_id));
    data.insert("entrypoint".into(), Value::Object(entrypoint));
    data.insert("previousEntrypoint".into(), previous.clone());
    data.insert("force".into(), json!(force));
    if let Some(h) = &code_hash {
        data.insert("processCodeHash".into(), json!(h));
    }
    run.append(EventType::ProcessAssigned, data, &current, cli.env)
        .await?;
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
