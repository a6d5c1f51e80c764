//! `task:post` (spec §5.4): commits a pending effect's result through the engine
//! (`result.json` in the reference's format, stdout/stderr logs, one `EFFECT_RESOLVED`), under
//! the run's lock, then rebuilds the state cache (`post_effect_resolution`).
//!
//! - Relative `--value` / `--error` / `--metadata` / `--stdout-file` / `--stderr-file` paths
//!   resolve against the run directory, except `.a5c/…` (against the cwd) and `-` (stdin) (F14).
//! - A shell effect posted with `--status error` is committed as `ok` with
//!   `{success:false, exitCode, stdout, stderr, error}` (F15), built here exactly as the
//!   reference's CLI builds it.
//! - B7 fixed: exit 0 whenever the commit succeeded, also for an `error` result (the status is
//!   in the output).
//!
//! One post runs in four steps: the arguments are checked ([`Request::parse`]), the effect is
//! found pending and the result's parts are read ([`pending_effect`], [`Parts::read`]), what is
//! committed is decided ([`Post::decide`], which also answers `--dry-run`), then the result is
//! committed ([`commit`]) and reported ([`print`]).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use babysitter_engine::commit::Commit;
use babysitter_journal::index::EffectRecord;
use serde_json::{Map, Value, json};

use crate::compat::cli::Cli;
use crate::compat::output::{self, Category, CliError, io_message};
use crate::compat::run_dir::Run;
use crate::compat::{client, paths, usage};

/// `resolveMaybeRunRelative`.
fn resolve_arg(run_dir: &Path, candidate: &str) -> PathBuf {
    if candidate == "-" || Path::new(candidate).is_absolute() {
        return PathBuf::from(candidate);
    }
    if candidate.starts_with(".a5c/") || candidate.starts_with(".a5c\\") {
        return PathBuf::from(candidate);
    }
    paths::collapse_doubled(&paths::normalize(&run_dir.join(candidate)))
}

fn read_text(run_dir: &Path, cwd: &Path, name: &str) -> anyhow::Result<String> {
    let path = resolve_arg(run_dir, name);
    if path.as_os_str() == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| CliError::plain("Error", format!("cannot read stdin: {e}")))?;
        return Ok(s);
    }
    let abs = paths::resolve(cwd, &path);
    std::fs::read_to_string(&abs)
        .map_err(|e| CliError::plain("Error", io_message("open", &abs, &e)).into())
}

fn parse_json(text: &str, what: &str) -> anyhow::Result<Option<Value>> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(None);
    }
    serde_json::from_str(t).map(Some).map_err(|e| {
        CliError::plain("SyntaxError", format!("{what} is not valid JSON: {e}")).into()
    })
}

fn run_failed(message: String) -> CliError {
    CliError::new("RunFailedError", message, Category::Runtime)
}

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let req = match Request::parse(cli) {
        Ok(r) => r,
        Err(code) => return Ok(code),
    };
    let a = &cli.args;
    let effect_id = &req.effect_id;
    let not_found = |dir: &Path| {
        errln!(
            "[task:post] effect {effect_id} not found at {}",
            dir.display()
        );
        Ok(1)
    };
    let home = client::current();
    let opened = home.open(&req.run_dir).await;
    let Ok(run) = opened.and_then(|r| r.metadata().map(|_| r)) else {
        return not_found(&req.run_dir);
    };
    // The whole check-and-commit holds the run: two posts for one effect cannot both pass.
    let _guard = if a.dry_run() {
        None
    } else {
        home.hold(&run, cli.lock_timeout())
            .await
            .map_err(|e| CliError::plain("Error", e.to_string()))?
    };
    let Some(record) = pending_effect(&run, effect_id).await else {
        return not_found(&run.dir);
    };
    if record.status.as_str() != "requested" {
        errln!(
            "[task:post] effect {effect_id} is not requested (status={})",
            record.status.as_str()
        );
        return Ok(1);
    }
    let now = babysitter_journal::journal::now_iso();
    let parts = Parts::read(cli, &run.dir, &req.status)?;
    let post = Post::decide(&req.status, &record, parts);
    if a.dry_run() {
        print_plan(cli, effect_id, &post);
        return Ok(0);
    }
    let started_at = a.value("--started-at").unwrap_or(&now).to_owned();
    let finished_at = a.value("--finished-at").unwrap_or(&now).to_owned();
    commit(
        cli,
        &run,
        effect_id,
        &record,
        &post,
        (&started_at, &finished_at),
    )
    .await?;
    print(cli, effect_id, &post, &started_at, &finished_at);
    Ok(0)
}

/// The checked arguments of a post.
struct Request {
    run_dir: PathBuf,
    effect_id: String,
    /// `--status`: `ok` or `error`.
    status: String,
}

impl Request {
    /// The request, or the exit code of a refused one (its message already printed).
    fn parse(cli: &Cli<'_>) -> Result<Request, u8> {
        let a = &cli.args;
        let (Some(run_dir), Some(effect_id)) = (cli.run_dir(), a.effect_id.clone()) else {
            errln!("{}", usage::USAGE);
            return Err(1);
        };
        let Some(status) = a.value("--status") else {
            errln!("[task:post] missing required --status <ok|error>");
            return Err(1);
        };
        let given = |flag| a.value(flag).is_some();
        let check = [
            (
                given("--stdout-ref") && given("--stdout-file"),
                "[task:post] cannot combine --stdout-ref with --stdout-file",
            ),
            (
                given("--stderr-ref") && given("--stderr-file"),
                "[task:post] cannot combine --stderr-ref with --stderr-file",
            ),
            (
                given("--value") && given("--value-inline"),
                "[task:post] cannot combine --value with --value-inline",
            ),
            (
                status == "error" && given("--value-inline"),
                "[task:post] --value-inline is only supported with --status ok",
            ),
            (
                status == "ok" && !given("--value") && !given("--value-inline"),
                "[task:post] ok results require --value or --value-inline",
            ),
        ];
        if let Some((_, msg)) = check.iter().find(|(bad, _)| *bad) {
            errln!("{msg}");
            return Err(1);
        }
        cli.verbose(
            "task:post",
            &[
                ("runDir", Some(run_dir.display().to_string())),
                ("effectId", Some(effect_id.clone())),
                ("status", Some(status.to_owned())),
                ("dryRun", Some(a.dry_run().to_string())),
                ("json", Some(a.json().to_string())),
                (
                    "secretLogsAllowed",
                    Some(cli.secret_logs_allowed().to_string()),
                ),
            ],
        );
        Ok(Request {
            run_dir,
            effect_id,
            status: status.to_owned(),
        })
    }
}

/// The effect's record when the journal has it.
async fn pending_effect(run: &Run, effect_id: &str) -> Option<Arc<EffectRecord>> {
    run.inspect(|_, idx| idx.effects.get(effect_id).cloned())
        .await
        .ok()
        .flatten()
}

/// The result's parts as the flags give them, read in the reference's order.
struct Parts {
    metadata: Option<Value>,
    stdout: Option<String>,
    stderr: Option<String>,
    /// The error of an `error` result (`{name, message}` when no `--error` says otherwise).
    error: Option<Value>,
    /// The value of an `ok` result.
    value: Option<Value>,
}

impl Parts {
    fn read(cli: &Cli<'_>, dir: &Path, status: &str) -> anyhow::Result<Parts> {
        let (a, cwd) = (&cli.args, &cli.cwd);
        let metadata = match a.value("--metadata") {
            Some(f) => parse_json(&read_text(dir, cwd, f)?, f)?,
            None => None,
        };
        let text_of = |flag| a.value(flag).map(|f| read_text(dir, cwd, f)).transpose();
        let stdout = text_of("--stdout-file")?;
        let stderr = text_of("--stderr-file")?;
        let error =
            if status == "error" {
                let parsed = match a.value("--error") {
                    Some(f) => error_value(&read_text(dir, cwd, f)?),
                    None => None,
                };
                Some(parsed.unwrap_or_else(
                    || json!({"name": "Error", "message": "Task reported failure"}),
                ))
            } else {
                None
            };
        let value = if status == "ok" {
            match (a.value("--value-inline"), a.value("--value")) {
                (Some(inline), _) => parse_json(inline, "--value-inline")?,
                (None, Some(f)) => parse_json(&read_text(dir, cwd, f)?, f)?,
                (None, None) => None,
            }
        } else {
            None
        };
        Ok(Parts {
            metadata,
            stdout,
            stderr,
            error,
            value,
        })
    }
}

/// An `--error` file's error: its JSON, or for plain text `{name, message}` (minus a leading
/// `Error: `), as the reference does since its #936; `None` when empty.
fn error_value(text: &str) -> Option<Value> {
    let t = text.trim();
    if t.is_empty() {
        return None;
    }
    Some(serde_json::from_str::<Value>(t).unwrap_or_else(|_| {
        let msg = t.strip_prefix("Error:").map(str::trim_start).unwrap_or(t);
        json!({"name": "Error", "message": msg})
    }))
}

/// What a post commits.
struct Post {
    /// The status committed: `ok` for a shell failure (F15), else `--status`.
    status: String,
    normalized_shell: bool,
    parts: Parts,
}

impl Post {
    fn decide(status: &str, record: &EffectRecord, parts: Parts) -> Post {
        let normalized_shell = status == "error" && record.kind.as_deref() == Some("shell");
        Post {
            status: if normalized_shell { "ok" } else { status }.to_owned(),
            normalized_shell,
            parts,
        }
    }

    /// The outcome the engine commits: a value (`Ok`) or an error (`Err`).
    fn outcome(&self) -> anyhow::Result<Result<Value, Value>> {
        let p = &self.parts;
        Ok(match self.status.as_str() {
            "ok" if self.normalized_shell => Ok(babysitter_engine::lifecycle::shell_failure(
                p.error.as_ref().unwrap_or(&Value::Null),
                p.stdout.as_deref(),
                p.stderr.as_deref(),
            )),
            "ok" => Ok(p.value.clone().ok_or_else(|| {
                run_failed("Missing result payload for result status 'ok'".into())
            })?),
            _ => Err(p.error.clone().unwrap_or(Value::Null)),
        })
    }

    /// `tasks/<id>/…` for the logs written, else the refs given.
    fn log_refs(&self, cli: &Cli<'_>, effect_id: &str) -> (Option<String>, Option<String>) {
        let a = &cli.args;
        let stdout_ref = self
            .parts
            .stdout
            .as_ref()
            .map(|_| format!("tasks/{effect_id}/stdout.log"))
            .or_else(|| a.value("--stdout-ref").map(str::to_owned));
        let stderr_ref = self
            .parts
            .stderr
            .as_ref()
            .map(|_| format!("tasks/{effect_id}/stderr.log"))
            .or_else(|| a.value("--stderr-ref").map(str::to_owned));
        (stdout_ref, stderr_ref)
    }
}

/// `--dry-run`: what would be committed.
fn print_plan(cli: &Cli<'_>, effect_id: &str, post: &Post) {
    let a = &cli.args;
    let plan = json!({
        "runDir": "", "effectId": effect_id, "status": post.status,
        "normalizedShellFailure": post.normalized_shell,
        "valueProvided": a.value("--value").is_some() || a.value("--value-inline").is_some(),
        "errorProvided": a.value("--error").is_some(),
        "stdoutRef": a.value("--stdout-ref"), "stderrRef": a.value("--stderr-ref"),
        "stdoutFile": a.value("--stdout-file"), "stderrFile": a.value("--stderr-file"),
    });
    if a.json() {
        output::line(&output::pretty(
            &json!({"status": "skipped", "dryRun": true, "plan": plan}),
        ));
    } else {
        output::line("[task:post] status=skipped");
        errln!("[task:post] dry-run plan {}", output::compact(&plan));
    }
}

/// Checks the invocation key, fires `task.completed` (a hook's denial refuses the post, before
/// anything is written), commits through the engine and rebuilds the state cache.
async fn commit(
    cli: &Cli<'_>,
    run: &Run,
    effect_id: &str,
    record: &EffectRecord,
    post: &Post,
    (started_at, finished_at): (&str, &str),
) -> anyhow::Result<()> {
    let a = &cli.args;
    if let Some(k) = a.value("--invocation-key")
        && k != record.invocation_key
    {
        return Err(
            run_failed(format!("Invocation key mismatch for effect {effect_id}"))
                .details(json!({"effectId": effect_id, "expectedInvocationKey": record.invocation_key, "providedInvocationKey": k}))
                .into(),
        );
    }
    let outcome = post.outcome()?;
    let status = &post.status;
    let hooks = crate::compat::runtime_hooks::for_run(cli, &run.dir);
    let hooked = crate::compat::runtime_hooks::fire(cli, &hooks, "task.completed", || {
        let result = match &outcome {
            Ok(v) | Err(v) => v.clone(),
        };
        json!({"runId": run.id, "task_id": effect_id, "task_kind": record.kind,
               "task_status": status, "task_result": result,
               "taskId": record.task_id, "effectId": effect_id, "kind": record.kind,
               "status": status, "result": result})
    })
    .await;
    if let Some(why) = hooked.as_ref().and_then(|r| r.blocked()) {
        return Err(run_failed(why)
            .details(json!({"hookType": "task.completed", "effectId": effect_id}))
            .into());
    }
    let p = &post.parts;
    let commit = Commit {
        effect_id: effect_id.to_owned(),
        outcome,
        stdout: p.stdout.clone(),
        stderr: p.stderr.clone(),
        started_at: Some(started_at.to_owned()),
        finished_at: Some(finished_at.to_owned()),
        metadata: p.metadata.clone(),
        stdout_ref: a.value("--stdout-ref").map(str::to_owned),
        stderr_ref: a.value("--stderr-ref").map(str::to_owned),
    };
    if let Err(message) = client::current().commit_result(run, commit).await {
        return Err(run_failed(message).into());
    }
    Ok(())
}

/// The committed result: single-line JSON, or `[task:post] status=… resultRef=…`.
fn print(cli: &Cli<'_>, effect_id: &str, post: &Post, started_at: &str, finished_at: &str) {
    let result_ref = format!("tasks/{effect_id}/result.json");
    let (stdout_ref, stderr_ref) = post.log_refs(cli, effect_id);
    let status = &post.status;
    if cli.args.json() {
        let mut committed = Map::new();
        committed.insert("resultRef".into(), json!(result_ref));
        if let Some(r) = &stdout_ref {
            committed.insert("stdoutRef".into(), json!(r));
        }
        if let Some(r) = &stderr_ref {
            committed.insert("stderrRef".into(), json!(r));
        }
        committed.insert("startedAt".into(), json!(started_at));
        committed.insert("finishedAt".into(), json!(finished_at));
        output::line(&output::compact(&json!({
            "status": status,
            "normalizedShellFailure": post.normalized_shell,
            "committed": committed,
            "stdoutRef": stdout_ref,
            "stderrRef": stderr_ref,
            "resultRef": result_ref,
        })));
    } else {
        let mut parts = vec![format!("[task:post] status={status}")];
        if post.normalized_shell {
            parts.push("normalizedShellFailure=true".into());
        }
        if let Some(r) = &stdout_ref {
            parts.push(format!("stdoutRef={r}"));
        }
        if let Some(r) = &stderr_ref {
            parts.push(format!("stderrRef={r}"));
        }
        parts.push(format!("resultRef={result_ref}"));
        output::line(&parts.join(" "));
    }
}
