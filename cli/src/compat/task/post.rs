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

use std::io::Read as _;
use std::path::{Path, PathBuf};

use babysitter_engine::EngineError;
use babysitter_engine::commit::Commit;
use serde_json::{Map, Value, json};

use crate::compat::output::{self, Category, CliError, io_message};
use crate::compat::run::iterate::journal_message;
use crate::compat::runs::Run;
use crate::compat::{Cli, lock, paths, usage};

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
    let a = &cli.args;
    let (Some(run_dir), Some(effect_id)) = (cli.run_dir(), a.effect_id.clone()) else {
        errln!("{}", usage::USAGE);
        return Ok(1);
    };
    let Some(status) = a.value("--status") else {
        errln!("[task:post] missing required --status <ok|error>");
        return Ok(1);
    };
    let check = [
        (
            a.value("--stdout-ref").is_some() && a.value("--stdout-file").is_some(),
            "[task:post] cannot combine --stdout-ref with --stdout-file",
        ),
        (
            a.value("--stderr-ref").is_some() && a.value("--stderr-file").is_some(),
            "[task:post] cannot combine --stderr-ref with --stderr-file",
        ),
        (
            a.value("--value").is_some() && a.value("--value-inline").is_some(),
            "[task:post] cannot combine --value with --value-inline",
        ),
        (
            status == "error" && a.value("--value-inline").is_some(),
            "[task:post] --value-inline is only supported with --status ok",
        ),
        (
            status == "ok" && a.value("--value").is_none() && a.value("--value-inline").is_none(),
            "[task:post] ok results require --value or --value-inline",
        ),
    ];
    if let Some((_, msg)) = check.iter().find(|(bad, _)| *bad) {
        errln!("{msg}");
        return Ok(1);
    }
    let secrets = cli.secret_logs_allowed();
    cli.verbose(
        "task:post",
        &[
            ("runDir", Some(run_dir.display().to_string())),
            ("effectId", Some(effect_id.clone())),
            ("status", Some(status.to_owned())),
            ("dryRun", Some(a.dry_run().to_string())),
            ("json", Some(a.json().to_string())),
            ("secretLogsAllowed", Some(secrets.to_string())),
        ],
    );
    let run = match Run::open(&run_dir).and_then(|r| r.metadata().map(|_| r)) {
        Ok(r) => r,
        Err(_) => {
            errln!(
                "[task:post] effect {effect_id} not found at {}",
                run_dir.display()
            );
            return Ok(1);
        }
    };
    // The whole check-and-commit holds the run: two posts for one effect cannot both pass.
    let _guard = if a.dry_run() {
        None
    } else {
        Some(
            lock::acquire(&run.dir, cli.lock_timeout())
                .await
                .map_err(|e| CliError::plain("Error", e.to_string()))?,
        )
    };
    let record = run
        .inspect(|_, idx| idx.effects.get(&effect_id).cloned())
        .await
        .ok()
        .flatten();
    let Some(record) = record else {
        errln!(
            "[task:post] effect {effect_id} not found at {}",
            run.dir.display()
        );
        return Ok(1);
    };
    if record.status.as_str() != "requested" {
        errln!(
            "[task:post] effect {effect_id} is not requested (status={})",
            record.status.as_str()
        );
        return Ok(1);
    }

    let dir = run.dir.clone();
    let cwd = &cli.cwd;
    let now = babysitter_journal::journal::now_iso();
    let metadata = match a.value("--metadata") {
        Some(f) => parse_json(&read_text(&dir, cwd, f)?, f)?,
        None => None,
    };
    let stdout = a
        .value("--stdout-file")
        .map(|f| read_text(&dir, cwd, f))
        .transpose()?;
    let stderr = a
        .value("--stderr-file")
        .map(|f| read_text(&dir, cwd, f))
        .transpose()?;
    let error_payload = if status == "error" {
        let parsed = match a.value("--error") {
            Some(f) => {
                let text = read_text(&dir, cwd, f)?;
                let t = text.trim();
                if t.is_empty() {
                    None
                } else {
                    // A plain-text error file becomes `{name, message}` (minus a leading
                    // `Error: `), as the reference does since its #936.
                    Some(serde_json::from_str::<Value>(t).unwrap_or_else(|_| {
                        let msg = t.strip_prefix("Error:").map(str::trim_start).unwrap_or(t);
                        json!({"name": "Error", "message": msg})
                    }))
                }
            }
            None => None,
        };
        Some(parsed.unwrap_or_else(|| json!({"name": "Error", "message": "Task reported failure"})))
    } else {
        None
    };
    let value = if status == "ok" {
        match (a.value("--value-inline"), a.value("--value")) {
            (Some(inline), _) => parse_json(inline, "--value-inline")?,
            (None, Some(f)) => parse_json(&read_text(&dir, cwd, f)?, f)?,
            (None, None) => None,
        }
    } else {
        None
    };
    let normalized_shell = status == "error" && record.kind.as_deref() == Some("shell");
    let committed_status = if normalized_shell { "ok" } else { status };

    if a.dry_run() {
        let plan = json!({
            "runDir": "", "effectId": effect_id, "status": committed_status,
            "normalizedShellFailure": normalized_shell,
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
        return Ok(0);
    }

    if let Some(k) = a.value("--invocation-key")
        && k != record.invocation_key
    {
        return Err(
            run_failed(format!("Invocation key mismatch for effect {effect_id}"))
                .details(json!({"effectId": effect_id, "expectedInvocationKey": record.invocation_key, "providedInvocationKey": k}))
                .into(),
        );
    }
    let outcome = match committed_status {
        "ok" if normalized_shell => Ok(babysitter_engine::lifecycle::shell_failure(
            error_payload.as_ref().unwrap_or(&Value::Null),
            stdout.as_deref(),
            stderr.as_deref(),
        )),
        "ok" => Ok(value
            .ok_or_else(|| run_failed("Missing result payload for result status 'ok'".into()))?),
        _ => Err(error_payload.unwrap_or(Value::Null)),
    };
    // `task.completed` runs before anything is written; a hook's denial refuses the post.
    let hooks = crate::compat::runtime_hooks::for_run(cli, &run.dir);
    let hooked = crate::compat::runtime_hooks::fire(cli, &hooks, "task.completed", || {
        let result = match &outcome {
            Ok(v) | Err(v) => v.clone(),
        };
        json!({"runId": run.id, "task_id": effect_id, "task_kind": record.kind,
               "task_status": committed_status, "task_result": result,
               "taskId": record.task_id, "effectId": effect_id, "kind": record.kind,
               "status": committed_status, "result": result})
    })
    .await;
    if let Some(why) = hooked.as_ref().and_then(|r| r.blocked()) {
        return Err(run_failed(why)
            .details(json!({"hookType": "task.completed", "effectId": effect_id}))
            .into());
    }
    let started_at = a.value("--started-at").unwrap_or(&now).to_owned();
    let finished_at = a.value("--finished-at").unwrap_or(&now).to_owned();
    let engine = run.engine(None)?;
    let commit = Commit {
        effect_id: effect_id.clone(),
        outcome,
        stdout: stdout.clone(),
        stderr: stderr.clone(),
        started_at: Some(started_at.clone()),
        finished_at: Some(finished_at.clone()),
        metadata: metadata.clone(),
        stdout_ref: a.value("--stdout-ref").map(str::to_owned),
        stderr_ref: a.value("--stderr-ref").map(str::to_owned),
    };
    if let Err(e) = engine.commit_result(&run.id, commit).await {
        let msg = match &e {
            EngineError::InvalidRun { reason, .. } => reason.clone(),
            EngineError::Journal(j) => journal_message(j),
            other => other.to_string(),
        };
        return Err(run_failed(msg).into());
    }
    run.settle_state_cache("task:post", Some("post_effect_resolution"))
        .await;

    let result_ref = format!("tasks/{effect_id}/result.json");
    let stdout_ref = stdout
        .as_ref()
        .map(|_| format!("tasks/{effect_id}/stdout.log"))
        .or_else(|| a.value("--stdout-ref").map(str::to_owned));
    let stderr_ref = stderr
        .as_ref()
        .map(|_| format!("tasks/{effect_id}/stderr.log"))
        .or_else(|| a.value("--stderr-ref").map(str::to_owned));
    if a.json() {
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
            "status": committed_status,
            "normalizedShellFailure": normalized_shell,
            "committed": committed,
            "stdoutRef": stdout_ref,
            "stderrRef": stderr_ref,
            "resultRef": result_ref,
        })));
    } else {
        let mut parts = vec![format!("[task:post] status={committed_status}")];
        if normalized_shell {
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
    Ok(0)
}
