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

use babysitter_engine::lifecycle::Entrypoint;
use babysitter_orchestrator::service::budget::{BUDGET_KEY, Budget};
use serde_json::{Map, Value, json};

use super::assign_process::{Adoption, Assign, assign};
use super::create_session::Plan;
use super::entry::{check_entry, parse_entry};
use super::new_run::new_run;
use crate::compat::cli::Cli;
use crate::compat::output::{self, Category, CliError, io_message};
use crate::compat::run_dir::{Run, hash_file};
use crate::compat::session::binding::Bound;
use crate::compat::{client, paths, usage};

fn js_bool(b: bool) -> String {
    if b { "true" } else { "false" }.to_owned()
}

/// `run:create`: the arguments and inputs are checked ([`Request::parse`]), the process entry
/// is loaded ([`Request::code_hash`]), then the session's bare run is adopted ([`adopt`]) or a
/// run is created ([`create`]), and the session bound and the answer printed ([`finish`]).
pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let req = match Request::parse(cli) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    if cli.args.dry_run() {
        return Ok(dry_run(
            cli,
            &req.runs_dir,
            &req.resolved_entry,
            req.inputs_path.as_deref(),
        ));
    }
    let code_hash = match req.code_hash().await {
        Ok(h) => h,
        Err(code) => return Ok(code),
    };
    let plan = match Plan::new(cli) {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let Some((run_id, run_dir)) = plan.adoptable(cli, &req.runs_dir, req.bare).await else {
        return create(cli, &plan, &req, code_hash).await;
    };
    // The session's bare run takes the process instead of a new run being created.
    let (Some(abs), Some(pid)) = (&req.abs_import, req.process_id) else {
        anyhow::bail!("a run with a process has an entry and a process id");
    };
    adopt(
        cli,
        &plan,
        Adopt {
            run_id,
            run_dir,
            runs_dir: &req.runs_dir,
            abs,
            export_name: req.export_name.as_deref(),
            process_id: pid,
            inputs: req.inputs.as_ref(),
            code_hash,
        },
    )
    .await
}

/// `run:create`'s checked arguments and inputs.
struct Request<'a> {
    /// No `--entry`: a run without a process.
    bare: bool,
    process_id: Option<&'a str>,
    runs_dir: PathBuf,
    /// The entry file, absolute.
    abs_import: Option<PathBuf>,
    export_name: Option<String>,
    /// `<abs>[#<export>]`, or `bare-run`.
    resolved_entry: String,
    inputs_path: Option<PathBuf>,
    inputs: Option<Value>,
    /// `--budget` (babysitter-rs): kept in run.json, checked before each `run:iterate`.
    budget: Option<Budget>,
}

/// `--budget`'s value; a budget that asks to be raised is refused (a run its client drives has
/// no one to ask: at a limit it fails).
fn parse_budget(spec: &str) -> Result<Budget, String> {
    let b: Budget = spec.parse().map_err(|e| format!("--budget {spec}: {e}"))?;
    if b.asks() {
        return Err(format!(
            "--budget {spec}: on-exceed=ask is for runs babysitter run or a server drives; a run \
             driven by run:iterate fails at its limit (on-exceed=fail)"
        ));
    }
    Ok(b)
}

impl<'a> Request<'a> {
    /// The request, or the exit code of a refused one (its message already printed).
    fn parse(cli: &'a Cli<'_>) -> Result<Request<'a>, u8> {
        let a = &cli.args;
        let entry_spec = a.value("--entry");
        let bare = entry_spec.is_none();
        let process_id = a.value("--process-id");
        if !bare && process_id.is_none() {
            errln!(
                "--process-id is required for run:create (unless creating a bare run without --entry)"
            );
            errln!("{}", usage::USAGE);
            return Err(1);
        }
        let entry = entry_spec.map(parse_entry).transpose().map_err(|msg| {
            errln!("{msg}");
            1u8
        })?;
        let runs_dir = cli.runs_dir();
        let abs_import = entry
            .as_ref()
            .map(|e| paths::resolve(&cli.cwd, &e.import_path));
        let export_name = entry.and_then(|e| e.export_name);
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
        let inputs = inputs_path
            .as_deref()
            .map(read_inputs)
            .transpose()
            .map_err(|msg| {
                errln!("{msg}");
                1u8
            })?;
        let budget = a
            .value("--budget")
            .map(parse_budget)
            .transpose()
            .map_err(|msg| {
                errln!("{msg}");
                1u8
            })?;
        Ok(Request {
            budget,
            bare,
            process_id,
            runs_dir,
            abs_import,
            export_name,
            resolved_entry,
            inputs_path,
            inputs,
        })
    }

    /// Loads the entry (exit code 1 when it cannot be run); its code hash covers the import
    /// closure the check loaded (B9), the entry file's own hash when the check could not run.
    async fn code_hash(&self) -> Result<Option<String>, u8> {
        let mut code_hash = None;
        if let (Some(abs), Some(_)) = (&self.abs_import, self.process_id) {
            match check_entry(abs, self.export_name.as_deref()).await {
                Ok(digest) => code_hash = digest,
                Err(msg) => {
                    errln!("{msg}");
                    return Err(1);
                }
            }
        }
        Ok(code_hash.or_else(|| self.abs_import.as_deref().and_then(hash_file)))
    }
}

/// A new run: its id checked, its directory written, `on-run-start` fired, the session bound.
async fn create(
    cli: &Cli<'_>,
    plan: &Plan,
    req: &Request<'_>,
    code_hash: Option<String>,
) -> anyhow::Result<u8> {
    let a = &cli.args;
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
    let run_dir = req.runs_dir.join(&run_id);

    let entrypoint = match &req.abs_import {
        Some(abs) => {
            let rel = paths::relative_posix(&run_dir, abs);
            if rel.is_empty() || rel == "." {
                errln!("Entrypoint import path must reference a file");
                return Ok(1);
            }
            Entrypoint {
                import_path: rel,
                export_name: req.export_name.clone(),
            }
        }
        None => Entrypoint::bare(),
    };
    let process_id = if req.bare {
        "bare-run"
    } else {
        req.process_id.unwrap_or("bare-run")
    };
    let mut spec = new_run(&run_id, process_id, entrypoint.clone());
    spec.request = a.value("--request").map(str::to_owned).unwrap_or_else(|| {
        if req.bare {
            run_id.clone()
        } else {
            process_id.to_owned()
        }
    });
    spec.harness = a.value("--harness").map(str::to_owned);
    spec.process_revision = a.value("--process-revision").map(str::to_owned);
    spec.prompt = a.value("--prompt").map(str::to_owned);
    spec.non_interactive = a.interactive == Some(false);
    spec.code_hash = code_hash;
    if let Some(b) = &req.budget {
        spec.extra
            .insert(BUDGET_KEY.into(), serde_json::to_value(b)?);
    }
    let run_json = client::current()
        .create_run(
            cli,
            &run_dir,
            spec,
            req.inputs.clone(),
            req.abs_import.as_deref(),
        )
        .await?;

    let entry_out = entry_text(&run_json["entrypoint"]);
    run_started(
        cli,
        &run_dir,
        &run_id,
        process_id,
        &entry_out,
        req.inputs.as_ref(),
    )
    .await;
    finish(
        cli,
        plan,
        &run_id,
        &run_dir,
        &req.runs_dir,
        &entry_out,
        req.bare,
        false,
    )
    .await
}

/// `<importPath>[#<exportName>]` of an entrypoint (`run.json`'s), as `run:create` prints it.
fn entry_text(entrypoint: &Value) -> String {
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
    let entry_out = entry_text(&run_json["entrypoint"]);
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
    let Ok(run) = client::open(run_dir).await else {
        return false;
    };
    let Ok(events) = run.events().await else {
        return false;
    };
    let kinds: Vec<&str> = events.iter().map(|e| e.body.kind.as_str()).collect();
    kinds == ["RUN_CREATED"] || (adopted && kinds == ["RUN_CREATED", "PROCESS_ASSIGNED"])
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
