//! `run:halt` (spec §5.3.6): seals a run with a synthetic `RUN_COMPLETED` (default) or
//! `RUN_FAILED` carrying `manual_seal_reason` and the completion proof, then rebuilds the state
//! cache (`manual_halt`).
//!
//! B18 fixed: on a run that already ended (`RUN_COMPLETED`, `RUN_FAILED` or `RUN_HALTED` last)
//! nothing is appended — the answer says `halted: false` and names the terminal event — unless
//! `--force` asks for the reference's unconditional seal.

use babysitter_journal::EventType;
use serde_json::{Value, json};

use crate::compat::cli::Cli;
use crate::compat::output;
use crate::compat::run_dir::{Run, merged_metadata, metadata_text, rebuilt_metadata};
use crate::compat::{client, usage};

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let Some(run_dir) = cli.run_dir() else {
        errln!("{}", usage::USAGE);
        return Ok(1);
    };
    let a = &cli.args;
    let reason = a.value("--reason").unwrap_or("manual_halt").to_owned();
    let final_status = a.value("--final-status").unwrap_or("completed").to_owned();
    let event_type = if final_status == "completed" {
        EventType::RunCompleted
    } else {
        EventType::RunFailed
    };
    cli.verbose(
        "run:halt",
        &[
            ("runDir", Some(run_dir.display().to_string())),
            ("reason", Some(reason.clone())),
            ("finalStatus", Some(final_status.clone())),
            ("dryRun", Some(a.dry_run().to_string())),
            ("json", Some(a.json().to_string())),
        ],
    );
    let opened = client::open(&run_dir).await;
    let opened = opened.and_then(|r| r.metadata().map(|m| (r, m)));
    let (run, run_json) = match opened {
        Ok(x) => x,
        Err(m) => {
            errln!(
                "[run:halt] unable to read run metadata at {}: {m}",
                run_dir.display()
            );
            return Ok(1);
        }
    };
    let proof = run_json
        .get("completionProof")
        .and_then(Value::as_str)
        .map_or(Value::Null, |p| json!(p));

    match seal(
        cli,
        &run,
        &run_json,
        &event_type,
        &reason,
        &final_status,
        &proof,
    )
    .await
    {
        Ok(code) => Ok(code),
        Err(e) => {
            let message = format!("{e:#}");
            errln!("[run:halt] {message}");
            if a.json() {
                output::line(&output::pretty(
                    &json!({"error": "HALT_FAILED", "message": message}),
                ));
            }
            Ok(1)
        }
    }
}

async fn last_terminal(run: &Run) -> Option<String> {
    let events = run.events().await.ok()?;
    events
        .iter()
        .rev()
        .find(|e| {
            matches!(
                e.body.kind,
                EventType::RunCompleted | EventType::RunFailed | EventType::RunHalted
            )
        })
        .map(|e| e.body.kind.as_str().to_owned())
}

async fn seal(
    cli: &Cli<'_>,
    run: &Run,
    run_json: &Value,
    event_type: &EventType,
    reason: &str,
    final_status: &str,
    proof: &Value,
) -> anyhow::Result<u8> {
    let a = &cli.args;
    let run_dir = run.dir.display().to_string();
    let already = last_terminal(run).await;
    let already_v = already.as_ref().map_or(Value::Null, |t| json!(t));
    if a.dry_run() {
        if a.json() {
            output::line(&output::pretty(&json!({
                "dryRun": true, "runDir": run_dir, "plan": "halt_run", "eventType": event_type.as_str(),
                "finalStatus": final_status, "reason": reason, "completionProof": proof,
                "alreadyTerminal": already_v,
            })));
        } else {
            let suffix = already
                .as_ref()
                .map(|t| format!(" (already {t})"))
                .unwrap_or_default();
            output::line(&format!(
                "[run:halt] dry-run runDir={run_dir} eventType={} reason={reason}{suffix}",
                event_type.as_str()
            ));
        }
        return Ok(0);
    }
    let home = client::current();
    let _guard = home.hold(run, cli.lock_timeout()).await?;
    // Re-check under the lock: another writer may have sealed it meanwhile.
    let already = last_terminal(run).await;
    if let Some(t) = &already
        && !a.flag("--force")
    {
        let metadata = run
            .read_state_cache()
            .ok()
            .flatten()
            .and_then(|s| merged_metadata(Some(&s), None));
        if a.json() {
            output::line(&output::pretty(&json!({
                "runDir": run_dir, "halted": false, "finalStatus": final_status, "reason": reason,
                "completionProof": proof, "alreadyTerminal": t, "event": null,
                "metadata": metadata.unwrap_or(Value::Null),
            })));
        } else {
            output::line(&format!(
                "[run:halt] already terminal ({t}) runDir={run_dir}: nothing appended (pass --force to seal it again)"
            ));
        }
        return Ok(0);
    }
    let failed = final_status == "failed";
    let seal = client::Seal {
        run_json,
        reason,
        failed,
        force: a.flag("--force"),
        env: cli.env,
    };
    let sealed = home.seal(run, seal).await?;
    let (ev, metadata) = (sealed.event, rebuilt_metadata(&sealed.state));
    if a.json() {
        output::line(&output::pretty(&json!({
            "runDir": run_dir, "halted": true, "finalStatus": final_status, "reason": reason,
            "completionProof": proof, "alreadyTerminal": already.map_or(Value::Null, |t| json!(t)),
            "event": {"seq": ev.seq, "ulid": ev.ulid, "type": ev.body.kind.as_str(), "recordedAt": ev.body.recorded_at},
            "metadata": metadata,
        })));
    } else {
        let parts = metadata_text(Some(&metadata));
        let suffix = if parts.is_empty() {
            String::new()
        } else {
            format!(" {}", parts.join(" "))
        };
        output::line(&format!(
            "[run:halt] halted runDir={run_dir} finalStatus={final_status} seq={} reason={reason}{suffix}",
            ev.seq
        ));
    }
    Ok(0)
}
