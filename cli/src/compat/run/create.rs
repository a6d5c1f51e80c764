//! `run:create` (spec §5.3.1): validates the inputs file and the process entry (the file exists,
//! loads, and exports a process function), then writes the run directory — `run.json` in the
//! 6.0.0 form of §1.3, `inputs.json`, the layout — and appends `RUN_CREATED`.
//!
//! Differences from the reference: no `node_modules/@a5c-ai/babysitter-sdk` symlink is created
//! next to the process (B17: the embedded engine provides the SDK module); an existing run is
//! never overwritten; run ids follow the workspace id rule (`[A-Za-z0-9._-]`, ≤ 128 chars);
//! session binding is not performed yet (a `session` object reports that, non-fatally).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use babysitter_journal::fs::FsStore;
use babysitter_journal::store::RunFiles;
use babysitter_journal::{EventType, Journal, JournalError, JournalOptions};
use babysitter_orchestrator::engine::host::HostError;
use babysitter_orchestrator::engine::{Engine, EngineError};
use serde_json::{Map, Value, json};

use crate::compat::output::{self, Category, CliError, io_message};
use crate::compat::runs::{self, Run};
use crate::compat::{Cli, SDK_VERSION, paths, usage};

const LAYOUT_VERSION: &str = "2026.01-storage-preview";

/// `<path>[#<export>]`, split at the last `#`.
pub(crate) struct EntrySpec {
    pub import_path: String,
    pub export_name: Option<String>,
}

pub(crate) fn parse_entry(spec: &str) -> Result<EntrySpec, String> {
    match spec.rfind('#') {
        Some(0) => Err("Entrypoint must include a module path before '#'".into()),
        Some(i) => Ok(EntrySpec {
            import_path: spec[..i].to_owned(),
            export_name: Some(spec[i + 1..].to_owned()).filter(|e| !e.is_empty()),
        }),
        None => Ok(EntrySpec {
            import_path: spec.to_owned(),
            export_name: None,
        }),
    }
}

fn js_bool(b: bool) -> String {
    if b { "true" } else { "false" }.to_owned()
}

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let a = &cli.args;
    let entry_spec = a.value("--entry");
    let bare = entry_spec.is_none();
    let process_id = a.value("--process-id");
    if !bare && process_id.is_none() {
        errln!(
            "--process-id is required for run:create (unless creating a bare run without --entry)"
        );
        errln!("{}", usage::USAGE);
        return Ok(1);
    }
    let entry = match entry_spec.map(parse_entry).transpose() {
        Ok(e) => e,
        Err(msg) => {
            errln!("{msg}");
            return Ok(1);
        }
    };
    let runs_dir = cli.runs_dir();
    let abs_import = entry
        .as_ref()
        .map(|e| paths::resolve(&cli.cwd, &e.import_path));
    let export_name = entry.as_ref().and_then(|e| e.export_name.clone());
    let resolved_entry = match &abs_import {
        Some(p) => match &export_name {
            Some(x) => format!("{}#{x}", p.display()),
            None => p.display().to_string(),
        },
        None => "bare-run".to_owned(),
    };
    let inputs_path = a
        .value("--inputs")
        .map(|p| paths::resolve_input_path(p, &cli.cwd));
    cli.verbose(
        "run:create",
        &[
            ("runsDir", Some(runs_dir.display().to_string())),
            ("processId", process_id.map(str::to_owned)),
            ("entry", Some(resolved_entry.clone())),
            ("dryRun", Some(js_bool(a.dry_run()))),
            ("json", Some(js_bool(a.json()))),
            ("request", a.value("--request").map(str::to_owned)),
            ("prompt", a.value("--prompt").map(str::to_owned)),
            (
                "processRevision",
                a.value("--process-revision").map(str::to_owned),
            ),
            ("runId", a.value("--run-id").map(str::to_owned)),
            (
                "inputsPath",
                inputs_path.as_ref().map(|p| p.display().to_string()),
            ),
        ],
    );

    let inputs = match &inputs_path {
        Some(p) => match read_inputs(p) {
            Ok(v) => Some(v),
            Err(msg) => {
                errln!("{msg}");
                return Ok(1);
            }
        },
        None => None,
    };

    if a.dry_run() {
        return Ok(dry_run(
            cli,
            &runs_dir,
            &resolved_entry,
            inputs_path.as_deref(),
        ));
    }

    if let (Some(abs), Some(pid)) = (&abs_import, process_id)
        && let Err(msg) = check_entry(cli, abs, export_name.as_deref(), pid, inputs.as_ref()).await
    {
        errln!("{msg}");
        return Ok(1);
    }

    let run_id = a
        .value("--run-id")
        .map(str::to_owned)
        .unwrap_or_else(|| ulid::Ulid::generate().to_string());
    let invalid_id = |m: String| {
        CliError::new("InvalidRunIdError", m, Category::Validation).next_steps(vec![
            "Use a run id made of A-Z a-z 0-9 . _ - (at most 128 characters)".into(),
        ])
    };
    babysitter_journal::validate_id("run id", &run_id).map_err(|e| invalid_id(e.to_string()))?;
    let run_dir = runs_dir.join(&run_id);
    let run = Run::open(&run_dir).map_err(invalid_id)?;

    let entrypoint = match &abs_import {
        Some(abs) => {
            let rel = paths::relative_posix(&run_dir, abs);
            if rel.is_empty() || rel == "." {
                errln!("Entrypoint import path must reference a file");
                return Ok(1);
            }
            let mut e = Map::new();
            e.insert("importPath".into(), json!(rel));
            if let Some(x) = &export_name {
                e.insert("exportName".into(), json!(x));
            }
            e
        }
        None => {
            let mut e = Map::new();
            e.insert("importPath".into(), json!("bare-run"));
            e
        }
    };
    let process_id = if bare {
        "bare-run"
    } else {
        process_id.unwrap_or("bare-run")
    };
    let request = a.value("--request").map(str::to_owned).unwrap_or_else(|| {
        if bare {
            run_id.clone()
        } else {
            process_id.to_owned()
        }
    });
    let harness = a.value("--harness");
    let code_hash = abs_import.as_deref().and_then(runs::hash_file);
    let proof = completion_proof_bytes()?;

    let mut meta = Map::new();
    meta.insert("runId".into(), json!(run_id));
    meta.insert("request".into(), json!(request));
    meta.insert("processId".into(), json!(process_id));
    if let Some(h) = harness {
        meta.insert("harness".into(), json!(h));
    }
    meta.insert("entrypoint".into(), Value::Object(entrypoint.clone()));
    meta.insert("processPath".into(), entrypoint["importPath"].clone());
    if let Some(r) = a.value("--process-revision") {
        meta.insert("processRevision".into(), json!(r));
    }
    meta.insert("layoutVersion".into(), json!(LAYOUT_VERSION));
    meta.insert(
        "createdAt".into(),
        json!(babysitter_journal::journal::now_iso()),
    );
    meta.insert("cwd".into(), json!(cli.cwd.display().to_string()));
    if let Some(p) = a.value("--prompt") {
        meta.insert("prompt".into(), json!(p));
    }
    if a.interactive == Some(false) {
        meta.insert("nonInteractive".into(), json!(true));
    }
    if let Some(h) = &code_hash {
        meta.insert("processCodeHash".into(), json!(h));
    }
    meta.insert("completionProof".into(), json!(proof));
    meta.insert("sdkVersion".into(), json!(SDK_VERSION));
    let run_json = Value::Object(meta);

    match run
        .journal
        .create_run(
            &run_id,
            RunFiles {
                run_json: run_json.clone(),
                inputs_json: inputs.clone(),
            },
        )
        .await
    {
        Ok(_) => {}
        Err(JournalError::RunAlreadyExists { .. }) => {
            return Err(CliError::new(
                "RunAlreadyExistsError",
                format!("run {run_id} already exists at {}", run_dir.display()),
                Category::Validation,
            )
            .next_steps(vec![
                "Pick another --run-id, or continue the existing run with run:iterate".into(),
            ])
            .into());
        }
        Err(e) => {
            return Err(CliError::plain(
                "Error",
                format!(
                    "cannot create run {run_id} under {}: {e}",
                    runs_dir.display()
                ),
            )
            .into());
        }
    }

    let mut data = Map::new();
    data.insert("runId".into(), json!(run_id));
    data.insert("processId".into(), json!(process_id));
    data.insert("entrypoint".into(), Value::Object(entrypoint.clone()));
    if let Some(h) = harness {
        data.insert("harness".into(), json!(h));
    }
    if let Some(r) = a.value("--process-revision") {
        data.insert("processRevision".into(), json!(r));
    }
    if let Some(h) = &code_hash {
        data.insert("processCodeHash".into(), json!(h));
    }
    if inputs.is_some() {
        data.insert("inputsRef".into(), json!("inputs.json"));
    }
    if let Some(p) = a.value("--prompt") {
        data.insert("prompt".into(), json!(p));
    }
    run.append(EventType::RunCreated, data, &run_json, cli.env)
        .await?;

    let entry_out = match entrypoint.get("exportName").and_then(Value::as_str) {
        Some(x) => format!("{}#{x}", entrypoint["importPath"].as_str().unwrap_or("")),
        None => entrypoint["importPath"].as_str().unwrap_or("").to_owned(),
    };
    let hooks = crate::compat::runtime_hooks::for_run(cli, &run_dir);
    crate::compat::runtime_hooks::fire(cli, &hooks, "on-run-start", || {
        let mut p = json!({"runId": run_id, "processId": process_id, "entry": entry_out});
        if let Some(i) = &inputs {
            p["inputs"] = i.clone();
        }
        p
    })
    .await;
    // Session binding (session files, stop-hook state) is not implemented yet: report it the
    // way the reference reports a non-fatal binding error.
    let session = (harness.is_some() || a.value("--session-id").is_some() || a.session_id_flag)
        .then(|| {
            json!({
                "harness": harness.unwrap_or("custom"),
                "sessionId": a.value("--session-id").or(cli.env.get_non_empty("AGENT_SESSION_ID")).unwrap_or(""),
                "error": "session binding is not supported by this babysitter build yet (no session file was written)",
            })
        });
    if a.json() {
        let mut out = Map::new();
        out.insert("runId".into(), json!(run_id));
        out.insert("runDir".into(), json!(run_dir.display().to_string()));
        out.insert("entry".into(), json!(entry_out));
        if let Some(s) = &session {
            out.insert("session".into(), s.clone());
        }
        output::line(&output::pretty(&Value::Object(out)));
    } else {
        output::line(&format!(
            "[run:create] runId={run_id} runDir={} entry={entry_out}",
            run_dir.display()
        ));
        if let Some(s) = &session {
            errln!(
                "[run:create] Session binding error: {}",
                s["error"].as_str().unwrap_or("")
            );
        }
    }
    Ok(0)
}

fn dry_run(cli: &Cli<'_>, runs_dir: &Path, entry: &str, inputs: Option<&Path>) -> u8 {
    let a = &cli.args;
    let opt = |v: Option<&str>| v.map_or(Value::Null, |s| json!(s));
    if a.json() {
        let mut m = Map::new();
        m.insert("dryRun".into(), json!(true));
        m.insert("runsDir".into(), json!(runs_dir.display().to_string()));
        if let Some(p) = a.value("--process-id") {
            m.insert("processId".into(), json!(p));
        }
        m.insert("entry".into(), json!(entry));
        m.insert("runId".into(), opt(a.value("--run-id")));
        m.insert("request".into(), opt(a.value("--request")));
        m.insert("processRevision".into(), opt(a.value("--process-revision")));
        m.insert(
            "inputsPath".into(),
            inputs.map_or(Value::Null, |p| json!(p.display().to_string())),
        );
        output::line(&output::pretty(&Value::Object(m)));
    } else {
        let mut parts = vec![
            "[run:create] dry-run".to_owned(),
            format!("runsDir={}", runs_dir.display()),
            format!(
                "processId={}",
                a.value("--process-id").unwrap_or("undefined")
            ),
            format!("entry={entry}"),
            format!("runId={}", a.value("--run-id").unwrap_or("auto")),
        ];
        if let Some(r) = a.value("--request") {
            parts.push(format!("request={r}"));
        }
        if let Some(r) = a.value("--process-revision") {
            parts.push(format!("processRevision={r}"));
        }
        if let Some(p) = inputs {
            parts.push(format!("inputs={}", p.display()));
        }
        output::line(&parts.join(" "));
    }
    0
}

fn read_inputs(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        format!(
            "Failed to read inputs file {}: {}",
            path.display(),
            io_message("open", path, &e)
        )
    })?;
    serde_json::from_str(&text).map_err(|e| {
        format!(
            "Failed to parse inputs file {} as JSON: {e}",
            path.display()
        )
    })
}

/// 32 lowercase hex characters from 16 random bytes of the OS (spec §5.6).
fn completion_proof_bytes() -> anyhow::Result<String> {
    use std::io::Read as _;
    let mut buf = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(|e| anyhow::anyhow!("cannot read random bytes for the completion proof: {e}"))?;
    Ok(hex::encode(buf))
}

/// Checks that the entry file exists, loads as an ES module in the embedded engine and exports
/// a process function (`mod[export] ?? mod.process ?? mod.default`), as the reference does by
/// importing it. The check replays the process once over an empty journal in a scratch runs
/// root (nothing is written to the real one); a process that throws or waits is fine here.
pub(crate) async fn check_entry(
    cli: &Cli<'_>,
    abs: &Path,
    export: Option<&str>,
    process_id: &str,
    inputs: Option<&Value>,
) -> Result<(), String> {
    let is_file = std::fs::metadata(abs).map(|m| m.is_file()).unwrap_or(false);
    if !is_file {
        return Err(format!(
            "Process entry file not found: {}. Ensure the path is correct and points to a valid JS/TS module.",
            abs.display()
        ));
    }
    let tmp = cli.env.get_non_empty("TMPDIR").unwrap_or("/tmp");
    let scratch = PathBuf::from(tmp).join(format!(
        "babysitter-entry-check-{}-{}",
        std::process::id(),
        ulid::Ulid::generate()
    ));
    let result = check_in(&scratch, abs, export, process_id, inputs).await;
    let _ = std::fs::remove_dir_all(&scratch);
    match result {
        Ok(r) => r,
        Err(e) => {
            // The check itself could not run (e.g. no writable temp dir): the first iterate
            // will report any problem with the module.
            cli.verbose("run:create", &[("entryCheckSkipped", Some(e.to_string()))]);
            Ok(())
        }
    }
}

async fn check_in(
    scratch: &Path,
    abs: &Path,
    export: Option<&str>,
    process_id: &str,
    inputs: Option<&Value>,
) -> anyhow::Result<Result<(), String>> {
    const ID: &str = "entry-check";
    let root = scratch.join("runs");
    let journal = Journal::new(Arc::new(FsStore::new(&root)), JournalOptions::default());
    let mut entrypoint = Map::new();
    entrypoint.insert("importPath".into(), json!(abs.display().to_string()));
    if let Some(x) = export {
        entrypoint.insert("exportName".into(), json!(x));
    }
    journal
        .create_run(
            ID,
            RunFiles {
                run_json: json!({
                    "runId": ID, "request": process_id, "processId": process_id,
                    "entrypoint": entrypoint, "processPath": abs.display().to_string(),
                    "layoutVersion": LAYOUT_VERSION, "createdAt": babysitter_journal::journal::now_iso(),
                }),
                inputs_json: inputs.cloned(),
            },
        )
        .await?;
    let mut opts = crate::compat::runs::one_shot_engine(&root);
    opts.cpu_limit = std::time::Duration::from_secs(10);
    let engine = Engine::new(journal, opts)?;
    let export = export.unwrap_or("process");
    Ok(match engine.replay_dry(ID).await {
        Ok(_) => Ok(()),
        Err(EngineError::Host(HostError::NotAFunction { .. })) => Err(format!(
            "Process module {} does not export a valid process function. Expected '{export}' (function) or default export.",
            abs.display()
        )),
        Err(EngineError::Host(e)) => Err(format!(
            "Failed to load process module at {}: {e}",
            abs.display()
        )),
        Err(e) => Err(format!(
            "Failed to load process module at {}: {e}",
            abs.display()
        )),
    })
}
