//! `task:show` (spec §5.4): one effect's list entry, and — only when
//! `BABYSITTER_ALLOW_SECRET_LOGS` is `1`/`true` and both `--json` and `--verbose` are given —
//! its `task.json` and `result.json` (F18: payloads may hold secrets). Results over 1 MiB are
//! never inlined (`largeResult` names the ref). Single-line JSON.

use babysitter_journal::index::EffectRecord;
use serde_json::{Value, json};

use crate::compat::cli::Cli;
use crate::compat::output;
use crate::compat::run_dir::{Run, task_entry};
use crate::compat::{paths, usage};

const LARGE_RESULT_LIMIT: u64 = 1024 * 1024;

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let (Some(run_dir), Some(effect_id)) = (cli.run_dir(), cli.args.effect_id.clone()) else {
        errln!("{}", usage::USAGE);
        return Ok(1);
    };
    let secrets = cli.secret_logs_allowed();
    cli.verbose(
        "task:show",
        &[
            ("runDir", Some(run_dir.display().to_string())),
            ("effectId", Some(effect_id.clone())),
            ("json", Some(cli.args.json().to_string())),
            ("secretLogsAllowed", Some(secrets.to_string())),
        ],
    );
    let record = find(&run_dir, &effect_id).await;
    let Some(record) = record else {
        errln!(
            "[task:show] effect {effect_id} not found in {}",
            run_dir.display()
        );
        return Ok(1);
    };
    let dir = paths::normalize(&run_dir);
    let task_path = dir.join("tasks").join(&effect_id).join("task.json");
    let task_def: Option<Value> = std::fs::read(&task_path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok());
    let Some(task_def) = task_def else {
        errln!("[task:show] task definition missing for effect {effect_id}");
        return Ok(1);
    };
    let entry = task_entry(&record, &dir);
    let result_ref = record
        .result_ref
        .clone()
        .unwrap_or_else(|| format!("tasks/{effect_id}/result.json"));
    let result_path = paths::resolve(&dir, &result_ref);
    let (result, large) = match std::fs::metadata(&result_path) {
        Ok(m) if m.len() > LARGE_RESULT_LIMIT => (None, true),
        Ok(_) => (
            std::fs::read(&result_path)
                .ok()
                .and_then(|b| serde_json::from_slice::<Value>(&b).ok()),
            false,
        ),
        Err(_) => (None, false),
    };
    let large_ref = large.then(|| {
        entry
            .get("resultRef")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| format!("tasks/{effect_id}/result.json"))
    });
    if cli.args.json() {
        output::line(&output::compact(&json!({
            "effect": entry,
            "task": if secrets { task_def } else { Value::Null },
            "result": if secrets { result.unwrap_or(Value::Null) } else { Value::Null },
            "largeResult": large_ref.map_or(Value::Null, Value::String),
        })));
        return Ok(0);
    }
    let s = |k: &str| {
        entry
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("n/a")
            .to_owned()
    };
    output::line(&format!(
        "[task:show] {effect_id} [{} {}] {} (taskId={})",
        record.kind.as_deref().unwrap_or("unknown"),
        record.status.as_str(),
        record.label.as_deref().unwrap_or("(no label)"),
        record.task_id
    ));
    output::line(&format!(
        "  stepId={} requestedAt={} resolvedAt={}",
        record.step_id,
        s("requestedAt"),
        s("resolvedAt")
    ));
    for k in [
        "taskDefRef",
        "inputsRef",
        "resultRef",
        "stdoutRef",
        "stderrRef",
    ] {
        output::line(&format!("  {k}={}", s(k)));
    }
    // Text mode never shows payloads (they need --json --verbose as well).
    output::line(
        "  payloads: redacted (set BABYSITTER_ALLOW_SECRET_LOGS=true and rerun with --json --verbose to view task/result blobs)",
    );
    output::line(if result.is_none() && !large {
        "  result: (not yet written)"
    } else {
        ""
    });
    Ok(0)
}

async fn find(run_dir: &std::path::Path, effect_id: &str) -> Option<EffectRecord> {
    let run = Run::open(run_dir).ok()?;
    run.metadata().ok()?;
    run.inspect(|_, idx| idx.effects.get(effect_id).map(|r| (**r).clone()))
        .await
        .ok()
        .flatten()
}
