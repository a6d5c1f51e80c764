//! `run:repair-journal <runDir> [--dry-run] [--json]` (spec §2.10, §5.3.6): makes a journal that
//! no longer loads — typically two writers that committed the same sequence number, or the same
//! effect requested twice — loadable again. It keeps every event in order except corrupt files,
//! an `EFFECT_REQUESTED` whose invocation key was already requested (and the resolution of such a
//! dropped effect), and renumbers the rest into a new journal; the old one stays beside it as
//! `journal.bak.<ms>/`.
//!
//! Differences from the reference (spec §11.2 B8; `docs/compatibility.md`): the swap holds every
//! writer lock of the run and only renames once the new journal is complete and fsynced; a second
//! resolution or cancellation of an effect that is already settled is dropped as well (counted in
//! `droppedResolved`), since it too makes the journal unloadable; files whose name is not
//! `<seq>.<ULID>.json` count as corrupt; the state cache is rebuilt from the repaired journal
//! (`journal_mismatch`, what the next replay would do anyway), and a journal that still does not
//! load is reported.

use std::collections::HashSet;

use serde_json::json;

use super::rewrite::{self, RawEvent, RawJournal};
use crate::compat::cli::Cli;
use crate::compat::output;
use crate::compat::run_dir::Run;

const CMD: &str = "run:repair-journal";

/// What the repair keeps and drops.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub kept: Vec<usize>,
    pub dropped_requested: usize,
    pub dropped_resolved: usize,
}

/// Decides which events stay (indices into `events`, in order).
pub fn plan(events: &[RawEvent]) -> Plan {
    let mut seen_keys = HashSet::new();
    let mut kept_effects = HashSet::new();
    let mut dropped_effects = HashSet::new();
    let mut settled = HashSet::new();
    let mut out = Plan::default();
    for (i, ev) in events.iter().enumerate() {
        let effect = ev.data_str("effectId");
        match ev.kind.as_str() {
            "EFFECT_REQUESTED" => {
                let key = ev.data_str("invocationKey");
                if let Some(k) = key
                    && !seen_keys.insert(k.to_owned())
                {
                    out.dropped_requested += 1;
                    if let Some(e) = effect {
                        dropped_effects.insert(e.to_owned());
                    }
                    continue;
                }
                if let Some(e) = effect {
                    kept_effects.insert(e.to_owned());
                }
            }
            "EFFECT_RESOLVED" | "EFFECT_CANCELLED" => {
                if let Some(e) = effect {
                    let orphan = dropped_effects.contains(e) && !kept_effects.contains(e);
                    if orphan || (kept_effects.contains(e) && !settled.insert(e.to_owned())) {
                        out.dropped_resolved += 1;
                        continue;
                    }
                }
            }
            _ => {}
        }
        out.kept.push(i);
    }
    out
}

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let a = &cli.args;
    let run = match super::open_run_arg(cli, CMD, &[]) {
        Ok((r, _)) => r,
        Err(code) => return Ok(code),
    };
    let dir = run.dir.display().to_string();
    let fail = |m: String| {
        errln!("[{CMD}] {m}");
        Ok(1)
    };
    if a.dry_run() {
        let raw = match rewrite::read_raw(&run.dir) {
            Ok(r) => r,
            Err(m) => return fail(m),
        };
        let p = plan(&raw.events);
        report(cli, &dir, &raw, &p, None);
        return Ok(0);
    }
    let _guard = match rewrite::lock_for_swap(cli, &run.dir).await {
        Ok(g) => g,
        Err(e) => return fail(format!("{e:#}")),
    };
    // Read under the lock: what is rewritten is exactly what is backed up.
    let raw = match rewrite::read_raw(&run.dir) {
        Ok(r) => r,
        Err(m) => return fail(m),
    };
    for name in &raw.corrupt {
        errln!("[{CMD}] dropping unreadable journal file journal/{name}");
    }
    for (name, why) in &raw.unverified {
        errln!(
            "[{CMD}] journal/{name} did not load as written ({why}); it is kept with a fresh checksum"
        );
    }
    let p = plan(&raw.events);
    let kept: Vec<RawEvent> = p.kept.iter().map(|&i| raw.events[i].clone()).collect();
    let backup =
        match rewrite::swap_journal(&run.dir, kept, "journal.repaired", "journal.bak").await {
            Ok(b) => b,
            Err(e) => return fail(format!("{e:#} (the original journal is unchanged)")),
        };
    // A fresh handle reads the repaired journal from disk; rebuilding the state cache from it
    // proves it loads (effect index included) and replaces a cache whose head no longer exists.
    let check = match Run::open(&run.dir) {
        Ok(r) => r.write_state_cache("journal_mismatch").await.map(|_| ()),
        Err(m) => Err(anyhow::anyhow!(m)),
    };
    if let Err(e) = check {
        errln!(
            "[{CMD}] warning: the repaired journal still does not load ({e:#}); the original is kept in {}",
            backup.display()
        );
    }
    report(cli, &dir, &raw, &p, Some(&backup.display().to_string()));
    Ok(0)
}

/// `{[dryRun], runDir, journal: {…}, [backupDir, repaired]}` or the text line.
fn report(cli: &Cli<'_>, dir: &str, raw: &RawJournal, p: &Plan, backup: Option<&str>) {
    let journal = json!({
        "originalFiles": raw.files,
        "keptEvents": p.kept.len(),
        "droppedCorrupt": raw.corrupt.len(),
        "droppedRequested": p.dropped_requested,
        "droppedResolved": p.dropped_resolved,
    });
    let counts = format!(
        "originalFiles={} keptEvents={} droppedCorrupt={} droppedRequested={} droppedResolved={}",
        raw.files,
        p.kept.len(),
        raw.corrupt.len(),
        p.dropped_requested,
        p.dropped_resolved
    );
    match backup {
        None if cli.args.json() => output::line(&output::pretty(
            &json!({"dryRun": true, "runDir": dir, "journal": journal}),
        )),
        None => output::line(&format!("[{CMD}] dry-run {counts}")),
        Some(b) if cli.args.json() => output::line(&output::pretty(&json!({
            "runDir": dir, "journal": journal, "backupDir": b, "repaired": true,
        }))),
        Some(b) => output::line(&format!("[{CMD}] repaired {counts} backupDir={b}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Map, Value};

    fn ev(kind: &str, data: Value) -> RawEvent {
        RawEvent {
            kind: kind.into(),
            recorded_at: None,
            data: data.as_object().cloned().unwrap_or_else(Map::new),
        }
    }

    fn req(effect: &str, key: &str) -> RawEvent {
        ev(
            "EFFECT_REQUESTED",
            json!({"effectId": effect, "invocationKey": key}),
        )
    }

    #[test]
    fn drops_duplicate_requests_their_resolutions_and_double_resolutions() {
        let events = vec![
            ev("RUN_CREATED", json!({})),
            req("E1", "k1"),
            req("E2", "k1"),
            ev("EFFECT_RESOLVED", json!({"effectId": "E2"})),
            ev("EFFECT_RESOLVED", json!({"effectId": "E1"})),
            ev("EFFECT_RESOLVED", json!({"effectId": "E1"})),
            ev("RUN_COMPLETED", json!({})),
        ];
        let p = plan(&events);
        assert_eq!(p.kept, vec![0, 1, 4, 6]);
        assert_eq!(p.dropped_requested, 1);
        assert_eq!(p.dropped_resolved, 2);
    }

    #[test]
    fn a_clean_journal_is_kept_whole() {
        let events = vec![
            ev("RUN_CREATED", json!({})),
            req("E1", "k1"),
            ev("EFFECT_RESOLVED", json!({"effectId": "E1"})),
        ];
        assert_eq!(plan(&events).kept, vec![0, 1, 2]);
    }
}
