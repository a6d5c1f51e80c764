//! `task:cancel` (spec §5.4): cancels a pending effect (`result.json` with status `cancelled`,
//! `EFFECT_CANCELLED`; the process sees an `EffectCancelledError`), under the run's lock, then
//! rebuilds the state cache (`post_effect_cancellation`). Single-line JSON.

use serde_json::json;

use crate::compat::cli::Cli;
use crate::compat::output::{self, Category, CliError};
use crate::compat::run_dir::Run;
use crate::compat::{lock, usage};

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let a = &cli.args;
    let (Some(run_dir), Some(effect_id)) = (cli.run_dir(), a.effect_id.clone()) else {
        errln!("{}", usage::USAGE);
        return Ok(1);
    };
    let run = match Run::open(&run_dir).and_then(|r| r.metadata().map(|_| r)) {
        Ok(r) => r,
        Err(_) => {
            errln!(
                "[task:cancel] effect {effect_id} not found at {}",
                run_dir.display()
            );
            return Ok(1);
        }
    };
    let _guard = lock::acquire(&run.dir, cli.lock_timeout())
        .await
        .map_err(|e| CliError::plain("Error", e.to_string()))?;
    let record = run
        .inspect(|_, idx| idx.effects.get(&effect_id).cloned())
        .await
        .ok()
        .flatten();
    let Some(record) = record else {
        errln!(
            "[task:cancel] effect {effect_id} not found at {}",
            run.dir.display()
        );
        return Ok(1);
    };
    if record.status.as_str() != "requested" {
        errln!(
            "[task:cancel] effect {effect_id} is already {}",
            record.status.as_str()
        );
        return Ok(1);
    }
    let engine = run.engine(None)?;
    if let Err(e) = engine
        .cancel_effect(&run.id, &effect_id, a.value("--reason"))
        .await
    {
        let msg = output::engine_message(&e);
        return Err(CliError::new("RunFailedError", msg, Category::Runtime).into());
    }
    run.settle_state_cache("task:cancel", Some("post_effect_cancellation"))
        .await;
    let result_ref = format!("tasks/{effect_id}/result.json");
    if a.json() {
        output::line(&output::compact(
            &json!({"effectId": effect_id, "status": "cancelled", "resultRef": result_ref}),
        ));
    } else {
        output::line(&format!(
            "[task:cancel] effectId={effect_id} status=cancelled resultRef={result_ref}"
        ));
    }
    Ok(0)
}
