//! `run:events` (spec §5.3.5): the journal's events, filtered by type (case-insensitive),
//! reversed, then limited; single-line JSON `{events, metadata}` or a header plus one line per
//! event.

use serde_json::{Value, json};

use crate::compat::cli::Cli;
use crate::compat::client;
use crate::compat::output;
use crate::compat::run_dir::{merged_metadata, metadata_text, serialize_event};
use crate::compat::usage;

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let Some(run_dir) = cli.run_dir() else {
        errln!("{}", usage::USAGE);
        return Ok(1);
    };
    let a = &cli.args;
    let limit = a.number("--limit");
    let filter = a.value("--filter-type").map(str::to_uppercase);
    cli.verbose(
        "run:events",
        &[
            ("runDir", Some(run_dir.display().to_string())),
            ("json", Some(a.json().to_string())),
            ("limit", limit.map(|l| l.to_string())),
            ("reverse", Some(a.flag("--reverse").to_string())),
            ("filterType", a.value("--filter-type").map(str::to_owned)),
        ],
    );
    let opened = client::open(&run_dir).await;
    let run = match opened.and_then(|r| r.metadata().map(|_| r)) {
        Ok(r) => r,
        Err(m) => {
            errln!(
                "[run:events] unable to read run metadata at {}: {m}",
                run_dir.display()
            );
            return Ok(1);
        }
    };
    let events = match run.events().await {
        Ok(e) => e,
        Err(e) => {
            errln!(
                "[run:events] unable to read journal at {}: {e:#}",
                run.dir.display()
            );
            return Ok(1);
        }
    };
    let total = events.len();
    let mut matching: Vec<_> = events
        .iter()
        .filter(|e| {
            filter
                .as_deref()
                .is_none_or(|f| e.body.kind.as_str().to_uppercase() == f)
        })
        .collect();
    let matching_count = matching.len();
    if a.flag("--reverse") {
        matching.reverse();
    }
    if let Some(l) = limit {
        matching.truncate(usize::try_from(l).unwrap_or(usize::MAX));
    }
    let snapshot = match run.read_state_cache() {
        Ok(Some(s)) => Some(s),
        Ok(None) => {
            errln!(
                "[run:events] state cache snapshot missing at {} (continuing without metadata)",
                run.dir.display()
            );
            None
        }
        Err(m) => {
            errln!(
                "[run:events] unable to read state cache at {}: {m} (continuing without metadata)",
                run.dir.display()
            );
            None
        }
    };
    let metadata = merged_metadata(snapshot.as_ref(), None);
    if a.json() {
        let list: Vec<Value> = matching.iter().map(|e| serialize_event(e)).collect();
        output::line(&output::compact(
            &json!({"events": list, "metadata": metadata.unwrap_or(Value::Null)}),
        ));
        return Ok(0);
    }
    let mut header = vec![
        format!("total={total}"),
        format!("matching={matching_count}"),
        format!("showing={}", matching.len()),
    ];
    if let Some(f) = &filter {
        header.push(format!("filter={f}"));
    }
    if let Some(l) = limit {
        header.push(format!("limit={l}"));
    }
    if a.flag("--reverse") {
        header.push("order=desc".into());
    }
    header.extend(metadata_text(metadata.as_ref()));
    output::line(&format!("[run:events] {}", header.join(" ")));
    for e in matching {
        output::line(&format!(
            "- #{:06} {} {}",
            e.seq,
            e.body.kind.as_str(),
            e.body.recorded_at
        ));
    }
    Ok(0)
}
