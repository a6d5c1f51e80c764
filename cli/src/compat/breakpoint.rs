//! `breakpoint:*`: babysitter's breakpoint auto-approval rules (`~/.a5c/breakpoint-approvals/
//! rules.json`), which `run:iterate` turns into each breakpoint's advisory `autoApproval`
//! ([`babysitter_engine::breakpoints`]); the reference's breakpoint-handling
//! instructions tell agents to call `breakpoint:should-auto-approve`.
//!
//! Outputs, file format and exit codes are the reference's (6.0.0 source: the published 0.0.187
//! CLI has no such commands). Fixed: a rule whose pattern does not parse, or whose `--action` is
//! neither `auto-approve` nor `never-auto-approve` (the reference silently made any other value an
//! `auto-approve` rule), is refused; edits are serialised by a lock. `breakpoint:history` reads
//! the `breakpointId` 6.0.0 writes into a breakpoint's `EFFECT_RESOLVED`, and for resolutions
//! without it (0.0.187's) finds the breakpoint by its request and `task.json`.

use std::path::{Path, PathBuf};

use babysitter_engine::breakpoints::{self, BreakpointFacts, Pattern};
use babysitter_journal::EventType;
use babysitter_journal::store::RunFile;
use serde_json::{Map, Value, json};

use super::cli::Cli;
use super::output::{self, compact};
use super::paths::{self, UserFiles};
use super::run_dir::Run;

fn rules_path(cli: &Cli<'_>) -> anyhow::Result<PathBuf> {
    UserFiles::of(cli.env, &cli.cwd).breakpoint_rules.ok_or_else(|| {
        anyhow::anyhow!(
            "no home directory (HOME is not set and this user has none): nowhere to keep breakpoint rules"
        )
    })
}

fn usage(msg: &str) -> u8 {
    errln!("{msg}");
    1
}

/// `breakpoint:approve-rule <pattern> [--action auto-approve|never-auto-approve] [--source s]
/// [--note n] [--json]`.
pub async fn approve_rule(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let Some(pattern) = cli.args.positionals.first() else {
        return Ok(usage("breakpoint:approve-rule requires a pattern argument"));
    };
    if let Err(e) = Pattern::parse(pattern) {
        return Ok(usage(&format!("breakpoint:approve-rule: {e}")));
    }
    let action = match cli.args.value("--action") {
        None | Some("auto-approve") => "auto-approve",
        Some("never-auto-approve") => "never-auto-approve",
        Some(other) => {
            return Ok(usage(&format!(
                "breakpoint:approve-rule: --action must be auto-approve or never-auto-approve, not \"{other}\""
            )));
        }
    };
    let source = cli.args.value("--source");
    let mut rule = Map::new();
    let random = ulid::Ulid::generate().random();
    rule.insert("id".into(), format!("rule-{:08x}", random as u32).into());
    rule.insert("pattern".into(), pattern.as_str().into());
    rule.insert("action".into(), action.into());
    rule.insert(
        "createdAt".into(),
        babysitter_journal::journal::now_iso().into(),
    );
    rule.insert("createdBy".into(), source.unwrap_or("cli").into());
    if let Some(s) = source {
        rule.insert("source".into(), s.into());
    }
    if let Some(n) = cli.args.value("--note") {
        rule.insert("note".into(), n.into());
    }
    let added = rule.clone();
    let id = added["id"].as_str().unwrap_or_default().to_owned();
    let total = breakpoints::update_rules(&rules_path(cli)?, move |rules| {
        rules.retain(|r| r.get("id").and_then(Value::as_str) != Some(id.as_str()));
        rules.push(rule);
        Ok(rules.len())
    })?;
    if cli.args.json() {
        output::line(&compact(
            &json!({"success": true, "rule": added, "totalRules": total}),
        ));
    } else {
        output::line(&format!(
            "Added rule {}: {action} for pattern \"{pattern}\"",
            added["id"].as_str().unwrap_or_default()
        ));
    }
    Ok(0)
}

/// `breakpoint:remove-rule <ruleId> [--json]` (exit 0 whether or not it was there).
pub async fn remove_rule(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let Some(id) = cli.args.positionals.first().cloned() else {
        return Ok(usage("breakpoint:remove-rule requires a rule-id argument"));
    };
    let wanted = id.clone();
    let (removed, total) = breakpoints::update_rules(&rules_path(cli)?, move |rules| {
        let before = rules.len();
        rules.retain(|r| r.get("id").and_then(Value::as_str) != Some(wanted.as_str()));
        Ok((rules.len() < before, rules.len()))
    })?;
    if cli.args.json() {
        output::line(&compact(
            &json!({"success": removed, "ruleId": id, "totalRules": total}),
        ));
    } else if removed {
        output::line(&format!("Removed rule {id}"));
    } else {
        output::line(&format!("Rule {id} not found"));
    }
    Ok(0)
}

/// `breakpoint:list-rules [--json]`.
pub async fn list_rules(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let rules = breakpoints::read_rules(&rules_path(cli)?)?;
    if cli.args.json() {
        let n = rules.len();
        let list: Vec<Value> = rules.into_iter().map(Value::Object).collect();
        output::line(&compact(&json!({"rules": list, "count": n})));
        return Ok(0);
    }
    if rules.is_empty() {
        output::line("No breakpoint approval rules configured.");
        return Ok(0);
    }
    let text = |r: &Map<String, Value>, k: &str| {
        r.get(k)
            .and_then(Value::as_str)
            .unwrap_or("undefined")
            .to_owned()
    };
    for r in &rules {
        let note = r
            .get("note")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .map(|n| format!("  ({n})"))
            .unwrap_or_default();
        output::line(&format!(
            "  {}  {:<20}  {}{note}",
            text(r, "id"),
            text(r, "action"),
            text(r, "pattern")
        ));
    }
    output::line(&format!("\n{} rule(s) total.", rules.len()));
    Ok(0)
}

/// `breakpoint:should-auto-approve <breakpointId> [--tags a,b] [--expert e] [--json]`.
pub async fn should_auto_approve(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let Some(id) = cli.args.positionals.first() else {
        return Ok(usage(
            "breakpoint:should-auto-approve requires a breakpoint-id argument",
        ));
    };
    let rules = breakpoints::read_rules(&rules_path(cli)?)?;
    let tags: Option<Vec<Value>> = cli
        .args
        .value("--tags")
        .map(|t| t.split(',').map(|s| Value::from(s.trim())).collect());
    let facts = BreakpointFacts {
        id,
        tags: tags.as_deref(),
        expert: cli.args.value("--expert"),
        auto_approve_after_n: -1,
    };
    let result = breakpoints::evaluate(&facts, &rules)?;
    if cli.args.json() {
        output::line(&compact(&Value::Object(result)));
        return Ok(0);
    }
    let recommended = result["recommended"] == true;
    output::line(&format!("Breakpoint: {id}"));
    output::line(&format!(
        "Recommended: {}",
        if recommended {
            "auto-approve"
        } else {
            "prompt"
        }
    ));
    output::line(&format!(
        "Reason: {}",
        result["reason"].as_str().unwrap_or_default()
    ));
    if let Some(r) = result.get("matchedRule").and_then(Value::as_str) {
        output::line(&format!("Matched rule: {r}"));
    }
    Ok(0)
}

/// One resolved breakpoint of `breakpoint:history`.
struct Entry {
    run_id: String,
    breakpoint_id: Option<String>,
    effect_id: String,
    status: String,
    resolved_at: String,
}

/// The resolved breakpoints of one run, in journal order (`breakpoint` filters by id).
async fn run_history(dir: &Path, breakpoint: Option<&str>) -> anyhow::Result<Vec<Entry>> {
    let run = Run::open(dir).map_err(anyhow::Error::msg)?;
    let mut requested: std::collections::HashMap<String, Option<String>> = Default::default();
    let mut out = Vec::new();
    for e in run.events().await? {
        let data = &e.body.data;
        let effect = data.get("effectId").and_then(Value::as_str).unwrap_or("");
        match e.body.kind {
            EventType::EffectRequested
                if data.get("kind").and_then(Value::as_str) == Some("breakpoint") =>
            {
                // Through the journal: the effect id is checked to be one path segment.
                let task = match RunFile::task(effect, "task.json") {
                    Ok(f) => match run.journal() {
                        Ok(j) => j.get_run_file(&run.id, &f).await.ok(),
                        Err(_) => None,
                    },
                    Err(_) => None,
                };
                let id = task
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
                    .and_then(|t| {
                        t.pointer("/metadata/breakpointId")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    });
                requested.insert(effect.to_owned(), id);
            }
            EventType::EffectResolved => {
                let id = match data.get("breakpointId").and_then(Value::as_str) {
                    Some(b) if !b.is_empty() => Some(b.to_owned()),
                    _ => match requested.get(effect) {
                        Some(id) => id.clone(),
                        None => continue,
                    },
                };
                if breakpoint.is_some_and(|b| id.as_deref() != Some(b)) {
                    continue;
                }
                out.push(Entry {
                    run_id: run.id.clone(),
                    breakpoint_id: id,
                    effect_id: effect.to_owned(),
                    status: data
                        .get("status")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned(),
                    resolved_at: e.body.recorded_at.clone(),
                });
            }
            _ => {}
        }
    }
    Ok(out)
}

/// `breakpoint:history [--breakpoint-id id] [--runs-dir d] [--limit n] [--json]`: resolved
/// breakpoints across the readable runs directories, the last `limit` (50) of them.
pub async fn history(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let limit = cli.args.number("--limit").unwrap_or(50) as usize;
    let wanted = cli.args.value("--breakpoint-id");
    let mut entries = Vec::new();
    for dir in paths::all_run_dirs(&cli.runs_dir(), &cli.cwd) {
        match run_history(&dir, wanted).await {
            Ok(found) => entries.extend(found),
            Err(e) if cli.args.verbose() => {
                errln!("[breakpoint:history] skipping {}: {e:#}", dir.display());
            }
            Err(_) => {}
        }
    }
    let start = entries.len().saturating_sub(limit);
    let entries = &entries[start..];
    if cli.args.json() {
        let list: Vec<Value> = entries
            .iter()
            .map(|e| {
                let mut m = Map::new();
                m.insert("runId".into(), e.run_id.clone().into());
                if let Some(b) = &e.breakpoint_id {
                    m.insert("breakpointId".into(), b.clone().into());
                }
                m.insert("effectId".into(), e.effect_id.clone().into());
                m.insert("status".into(), e.status.clone().into());
                m.insert("resolvedAt".into(), e.resolved_at.clone().into());
                Value::Object(m)
            })
            .collect();
        let n = list.len();
        output::line(&compact(&json!({"entries": list, "count": n})));
        return Ok(0);
    }
    if entries.is_empty() {
        output::line("No breakpoint history found.");
        return Ok(0);
    }
    for e in entries {
        let run: String = e.run_id.chars().take(12).collect();
        output::line(&format!(
            "  {}  {}  {}  run:{run}",
            e.resolved_at,
            e.breakpoint_id.as_deref().unwrap_or("unknown"),
            e.status
        ));
    }
    output::line(&format!("\n{} entries.", entries.len()));
    Ok(0)
}
