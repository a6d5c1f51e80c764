//! `run:rebuild-state` (spec §5.3.6): rebuilds `state/state.json` from the journal
//! (`cli_manual`); pretty JSON `{runDir, metadata}`, or the dry-run plan.

use serde_json::json;

use crate::compat::output;
use crate::compat::runs::{self, Run};
use crate::compat::{Cli, lock, usage};

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let Some(run_dir) = cli.run_dir() else {
        eprintln!("{}", usage::USAGE);
        return Ok(1);
    };
    let a = &cli.args;
    cli.verbose(
        "run:rebuild-state",
        &[
            ("runDir", Some(run_dir.display().to_string())),
            ("dryRun", Some(a.dry_run().to_string())),
            ("json", Some(a.json().to_string())),
        ],
    );
    let run = match Run::open(&run_dir).and_then(|r| r.metadata().map(|_| r)) {
        Ok(r) => r,
        Err(m) => {
            eprintln!(
                "[run:rebuild-state] unable to read run metadata at {}: {m}",
                run_dir.display()
            );
            return Ok(1);
        }
    };
    let dir = run.dir.display().to_string();
    if a.dry_run() {
        if a.json() {
            output::line(&output::pretty(&json!({
                "dryRun": true, "runDir": dir, "plan": "rebuild_state_cache", "reason": "cli_manual",
            })));
        } else {
            output::line(&format!(
                "[run:rebuild-state] dry-run runDir={dir} plan=rebuild_state_cache reason=cli_manual"
            ));
        }
        return Ok(0);
    }
    let _guard = lock::acquire(&run.dir, cli.lock_timeout()).await?;
    let doc = run.write_state_cache("cli_manual").await?;
    let metadata = runs::rebuilt_metadata(&doc);
    if a.json() {
        output::line(&output::pretty(
            &json!({"runDir": dir, "metadata": metadata}),
        ));
    } else {
        let parts = runs::metadata_text(Some(&metadata));
        output::line(&format!(
            "[run:rebuild-state] runDir={dir}{}",
            if parts.is_empty() {
                String::new()
            } else {
                format!(" {}", parts.join(" "))
            }
        ));
    }
    Ok(0)
}
