//! `task:list` (spec §5.4): effect records sorted by effect id (`localeCompare`), optionally
//! only pending ones and only one kind (case-insensitive); pretty JSON `{tasks}` or one line per
//! task.

use babysitter_engine::identity::locale_compare;
use babysitter_journal::index::EffectRecord;
use serde_json::{Value, json};

use crate::compat::cli::Cli;
use crate::compat::client;
use crate::compat::output;
use crate::compat::run_dir::task_entry;
use crate::compat::usage;

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let Some(run_dir) = cli.run_dir() else {
        errln!("{}", usage::USAGE);
        return Ok(1);
    };
    let a = &cli.args;
    let pending_only = a.flag("--pending");
    let kind = a.value("--kind").map(str::to_lowercase);
    cli.verbose(
        "task:list",
        &[
            ("runDir", Some(run_dir.display().to_string())),
            ("json", Some(a.json().to_string())),
            ("pending", Some(pending_only.to_string())),
            ("kind", a.value("--kind").map(str::to_owned)),
        ],
    );
    let records = match load(&run_dir, pending_only).await {
        Ok(r) => r,
        Err(m) => {
            errln!(
                "[task:list] unable to read run at {}: {m}",
                run_dir.display()
            );
            return Ok(1);
        }
    };
    let mut records: Vec<EffectRecord> = records
        .into_iter()
        .filter(|r| {
            kind.as_deref()
                .is_none_or(|k| r.kind.as_deref().map(str::to_lowercase).as_deref() == Some(k))
        })
        .collect();
    records.sort_by(|x, y| locale_compare(&x.effect_id, &y.effect_id));
    let dir = crate::compat::paths::normalize(&run_dir);
    if a.json() {
        let tasks: Vec<Value> = records.iter().map(|r| task_entry(r, &dir)).collect();
        output::line(&output::pretty(&json!({"tasks": tasks})));
        return Ok(0);
    }
    output::line(&format!(
        "[task:list] {}={}",
        if pending_only { "pending" } else { "total" },
        records.len()
    ));
    for r in &records {
        let label = r
            .label
            .as_deref()
            .map(|l| format!(" {l}"))
            .unwrap_or_default();
        let progress = r
            .progress_percent
            .map(|p| {
                format!(
                    " [{}%{}]",
                    p.round(),
                    r.current_step
                        .as_deref()
                        .map(|s| format!(" {s}"))
                        .unwrap_or_default()
                )
            })
            .unwrap_or_default();
        let cost = r.cost_usd.map(|c| format!(" ${c:.4}")).unwrap_or_default();
        output::line(&format!(
            "- {} [{} {}]{label}{progress}{cost} (taskId={})",
            r.effect_id,
            r.kind.as_deref().unwrap_or("unknown"),
            r.status.as_str(),
            r.task_id
        ));
    }
    Ok(0)
}

async fn load(run_dir: &std::path::Path, pending_only: bool) -> Result<Vec<EffectRecord>, String> {
    let run = client::open(run_dir).await?;
    run.metadata()?;
    run.inspect(|_, idx| {
        if pending_only {
            idx.pending().cloned().collect()
        } else {
            idx.effects.values().map(|r| (**r).clone()).collect()
        }
    })
    .await
    .map_err(|e| format!("{e:#}"))
}
