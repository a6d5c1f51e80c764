//! `run:create` (spec §5.3.1): validates the inputs file and the process entry (the file exists,
//! loads, and exports a process function), then writes the run directory — `run.json` in the
//! 6.0.0 form of §1.3, `inputs.json`, the layout — and appends `RUN_CREATED`.
//!
//! Differences from the reference: no `node_modules/@a5c-ai/babysitter-sdk` symlink is created
//! next to the process (B17: the embedded engine provides the SDK module); an existing run is
//! never overwritten; run ids follow the workspace id rule (`[A-Za-z0-9._-]`, ≤ 128 chars).
//! The session part — binding, adopting the session's bare run, Claude Code's first iteration —
//! is `create_session`'s.

use std::path::{Path, PathBuf};

use babysitter_engine::host::HostError;
use babysitter_engine::{EngineError, lifecycle};
use babysitter_journal::store::RunFiles;
use babysitter_journal::{EventType, JournalError};
use serde_json::{Map, Value, json};

use super::assign_process::{Adoption, Assign, assign};
use super::create_session::Plan;
use crate::compat::output::{self, Category, CliError, io_message};
use crate::compat::runs::{self, Run};
use crate::compat::session::binding::Bound;
use crate::compat::{Cli, paths, usage};

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

    // The code hash covers the import closure the check loaded (B9); the entry file's own hash
    // when the check could not run.
    let mut code_hash = None;
    if let (Some(abs), Some(_)) = (&abs_import, process_id) {
        match check_entry(cli, abs, export_name.as_deref()).await {
            Ok(digest) => code_hash = digest,
            Err(msg) => {
                errln!("{msg}");
                return Ok(1);
            }
        }
    }
    let code_hash = code_hash.or_else(|| abs_import.as_deref().and_then(runs::hash_file));

    let plan = match Plan::new(cli) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    if let Some((run_id, run_dir)) = plan.adoptable(cli, &runs_dir, bare).await {
        // The session's bare run takes the process instead of a new run being created.
        let (Some(abs), Some(pid)) = (&abs_import, process_id) else {
            anyhow::bail!("a run with a process has an entry and a process id");
        };
        return adopt(
            cli,
            &plan,
            Adopt {
                run_id,
                run_dir,
                runs_dir: &runs_dir,
                abs,
                export_name: export_name.as_deref(),
                process_id: pid,
                inputs: inputs.as_ref(),
                code_hash: code_hash.clone(),
            },
        )
        .await;
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
    let new = NewRun {
        run_id: run_id.clone(),
        process_id,
        entrypoint: entrypoint.clone(),
        request,
        harness,
        process_revision: a.value("--process-revision"),
        prompt: a.value("--prompt"),
        non_interactive: a.interactive == Some(false),
        code_hash: code_hash.clone(),
        inputs: inputs.clone(),
    };
    write_run(cli, &run, &runs_dir, &new).await?;

    let entry_out = entry_text(&entrypoint);
    run_started(
        cli,
        &run_dir,
        &run_id,
        process_id,
        &entry_out,
        inputs.as_ref(),
    )
    .await;
    finish(
        cli, &plan, &run_id, &run_dir, &runs_dir, &entry_out, bare, false,
    )
    .await
}

/// `<importPath>[#<exportName>]` of an entrypoint, as `run:create` prints it.
fn entry_text(entrypoint: &Map<String, Value>) -> String {
    let path = entrypoint
        .get("importPath")
        .and_then(Value::as_str)
        .unwrap_or("");
    match entrypoint.get("exportName").and_then(Value::as_str) {
        Some(x) => format!("{path}#{x}"),
        None => path.to_owned(),
    }
}

/// The `on-run-start` runtime hook of a run created or adopted.
async fn run_started(
    cli: &Cli<'_>,
    run_dir: &Path,
    run_id: &str,
    process_id: &str,
    entry: &str,
    inputs: Option<&Value>,
) {
    let hooks = crate::compat::runtime_hooks::for_run(cli, run_dir);
    crate::compat::runtime_hooks::fire(cli, &hooks, "on-run-start", || {
        let mut p = json!({"runId": run_id, "processId": process_id, "entry": entry});
        if let Some(i) = inputs {
            p["inputs"] = i.clone();
        }
        p
    })
    .await;
}

/// `run:create` adopting the session's bare run.
struct Adopt<'a> {
    run_id: String,
    run_dir: PathBuf,
    runs_dir: &'a Path,
    abs: &'a Path,
    export_name: Option<&'a str>,
    process_id: &'a str,
    inputs: Option<&'a Value>,
    code_hash: Option<String>,
}

async fn adopt(cli: &Cli<'_>, plan: &Plan, ad: Adopt<'_>) -> anyhow::Result<u8> {
    let a = &cli.args;
    let run = Run::open(&ad.run_dir).map_err(anyhow::Error::msg)?;
    let spec = Assign {
        abs: ad.abs,
        export_name: ad.export_name,
        process_id: ad.process_id,
        process_revision: a.value("--process-revision"),
        code_hash: ad.code_hash.clone(),
        force: false,
        adopt: Some(Adoption {
            request: a.value("--request").unwrap_or(ad.process_id),
            prompt: a.value("--prompt"),
            inputs: ad.inputs,
            non_interactive: a.interactive == Some(false),
        }),
    };
    let run_json = match assign(cli, &run, &spec).await? {
        Ok((_, current)) => current,
        Err(_) => {
            let message = format!(
                "Session run {} changed while it was being adopted. Retry run:create.",
                ad.run_id
            );
            if a.json() {
                output::line(&output::compact(&json!({
                    "error": "SESSION_RUN_CHANGED", "message": message, "runId": ad.run_id,
                })));
            } else {
                errln!("[run:create] {message}");
            }
            return Ok(1);
        }
    };
    let entry = run_json
        .get("entrypoint")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let entry_out = entry_text(&entry);
    run_started(
        cli,
        &run.dir,
        &ad.run_id,
        ad.process_id,
        &entry_out,
        ad.inputs,
    )
    .await;
    finish(
        cli,
        plan,
        &ad.run_id,
        &ad.run_dir,
        ad.runs_dir,
        &entry_out,
        false,
        true,
    )
    .await
}

/// Binds the session, seeds Claude Code's first iteration and prints the answer; a fatal
/// binding error is exit 1.
#[allow(clippy::too_many_arguments)]
async fn finish(
    cli: &Cli<'_>,
    plan: &Plan,
    run_id: &str,
    run_dir: &Path,
    runs_dir: &Path,
    entry_out: &str,
    bare: bool,
    adopted: bool,
) -> anyhow::Result<u8> {
    let bound = plan.bind(cli, run_id, run_dir, runs_dir).await;
    let mut initial = None;
    if plan.seeds_first_iteration(bound.as_ref(), bare) && fresh(run_dir, adopted).await {
        match super::iterate::iterate(cli, run_dir, Some(1)).await {
            Ok(done) => initial = Some(done),
            Err(m) => errln!("[run:create] initial iteration failed: {m}"),
        }
    }
    if cli.args.json() {
        let mut out = Map::new();
        out.insert("runId".into(), json!(run_id));
        out.insert("runDir".into(), json!(run_dir.display().to_string()));
        out.insert("entry".into(), json!(entry_out));
        if let Some(b) = &bound {
            out.insert("session".into(), plan.session_json(b));
        }
        if let Some(it) = &initial {
            out.insert("initialIteration".into(), it.json.clone());
        }
        output::line(&output::pretty(&Value::Object(out)));
    } else {
        output::line(&format!(
            "[run:create] runId={run_id} runDir={} entry={entry_out}",
            run_dir.display()
        ));
        match &bound {
            Some(Bound { error: Some(e), .. }) => {
                errln!("[run:create] Session binding error: {e}")
            }
            Some(b) => output::line(&format!(
                "[run:create] session={} bound via {} stateFile={}",
                b.session_id,
                b.harness,
                b.state_file
                    .as_ref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default()
            )),
            None => {}
        }
        if let Some(it) = &initial {
            output::line(&format!(
                "[run:create] initialIteration status={} reason={}",
                it.json["status"].as_str().unwrap_or(""),
                it.json["reason"].as_str().unwrap_or("")
            ));
        }
    }
    Ok(if bound.is_some_and(|b| b.fatal) { 1 } else { 0 })
}

/// The run has not iterated: its journal is its `RUN_CREATED` (and, adopted, the
/// `PROCESS_ASSIGNED` of the adoption).
async fn fresh(run_dir: &Path, adopted: bool) -> bool {
    let Ok(run) = Run::open(run_dir) else {
        return false;
    };
    let Ok(events) = run.events().await else {
        return false;
    };
    let kinds: Vec<&str> = events.iter().map(|e| e.body.kind.as_str()).collect();
    kinds == ["RUN_CREATED"] || (adopted && kinds == ["RUN_CREATED", "PROCESS_ASSIGNED"])
}

/// A run to write ([`write_run`]).
pub(crate) struct NewRun<'a> {
    pub run_id: String,
    /// `"bare-run"` for a run without a process.
    pub process_id: &'a str,
    /// `{importPath, exportName?}`, the import path relative to the run directory or `"bare-run"`.
    pub entrypoint: Map<String, Value>,
    pub request: String,
    pub harness: Option<&'a str>,
    pub process_revision: Option<&'a str>,
    pub prompt: Option<&'a str>,
    pub non_interactive: bool,
    pub code_hash: Option<String>,
    pub inputs: Option<Value>,
}

/// Writes a new run — `run.json` in the 6.0.0 form of §1.3, `inputs.json` — and journals its
/// `RUN_CREATED`; returns `run.json`. An existing run is never overwritten.
pub(crate) async fn write_run(
    cli: &Cli<'_>,
    run: &Run,
    runs_dir: &Path,
    new: &NewRun<'_>,
) -> Result<Value, CliError> {
    let run_id = &new.run_id;
    let proof = lifecycle::new_completion_proof().map_err(|e| {
        CliError::plain(
            "Error",
            format!("cannot read random bytes for the completion proof: {e}"),
        )
    })?;
    let entrypoint = lifecycle::Entrypoint {
        import_path: new
            .entrypoint
            .get("importPath")
            .and_then(Value::as_str)
            .unwrap_or("bare-run")
            .to_owned(),
        export_name: new
            .entrypoint
            .get("exportName")
            .and_then(Value::as_str)
            .map(str::to_owned),
    };
    let mut spec = lifecycle::NewRun::new(
        run_id,
        new.process_id,
        entrypoint,
        babysitter_journal::journal::now_iso(),
    );
    spec.request = new.request.clone();
    spec.harness = new.harness.map(str::to_owned);
    spec.process_revision = new.process_revision.map(str::to_owned);
    spec.cwd = Some(cli.cwd.display().to_string());
    spec.prompt = new.prompt.map(str::to_owned);
    spec.non_interactive = new.non_interactive;
    spec.code_hash = new.code_hash.clone();
    spec.completion_proof = Some(proof);
    spec.has_inputs = new.inputs.is_some();
    let run_json = spec.run_json();

    let files = RunFiles {
        run_json: run_json.clone(),
        inputs_json: new.inputs.clone(),
    };
    match run.journal.create_run(run_id, files).await {
        Ok(_) => {}
        Err(JournalError::RunAlreadyExists { .. }) => {
            return Err(CliError::new(
                "RunAlreadyExistsError",
                format!("run {run_id} already exists at {}", run.dir.display()),
                Category::Validation,
            )
            .next_steps(vec![
                "Pick another --run-id, or continue the existing run with run:iterate".into(),
            ]));
        }
        Err(e) => {
            return Err(CliError::plain(
                "Error",
                format!(
                    "cannot create run {run_id} under {}: {e}",
                    runs_dir.display()
                ),
            ));
        }
    }

    let data = spec.created_data();
    run.append(EventType::RunCreated, data, &run_json, cli.env)
        .await
        .map_err(|e| CliError::plain("Error", format!("{e:#}")))?;
    Ok(run_json)
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
/// Checks that the entry file exists, loads as an ES module in the embedded engine and exports
/// a process function (`mod[export] ?? mod.process ?? mod.default`), as the reference does by
/// importing it (the engine's entry check: nothing is written, the process is not called).
/// Answers the code hash of the import closure it loaded.
pub(crate) async fn check_entry(
    _cli: &Cli<'_>,
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
