//! `run:rebuild-state` (spec §5.3.6): rebuilds `state/state.json` from the journal
//! (`cli_manual`); pretty JSON `{runDir, metadata}`, or the dry-run plan.

use serde_json::json;

use crate::compat::cli::Cli;
use crate::compat::lock;
use crate::compat::output;
use crate::compat::run_dir::{metadata_text, rebuilt_metadata};

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let a = &cli.args;
    let run = match super::open_run_arg(cli, "run:rebuild-state", &[]) {
        Ok((r, _)) => r,
        Err(code) => return Ok(code),
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
    let metadata = rebuilt_metadata(&doc);
    if a.json() {
        output::line(&output::pretty(
            &json!({"runDir": dir, "metadata": metadata}),
        ));
    } else {
        let parts = metadata_text(Some(&metadata));
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
