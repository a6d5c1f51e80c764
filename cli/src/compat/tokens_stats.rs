//! `tokens:stats [<runId>] [--all] [--json] [--runs-dir <dir>]`: token-compression statistics
//! from the runs' journals, as the reference's `tokensStats.ts` computes them — the
//! `COMPRESSION_APPLIED` events (`data.originalTokens`, `data.compressedTokens`, `data.layer`),
//! summed per run and per layer. (Cost and token *usage* from `COST_TRACKED` is the reference's
//! `cost:stats`, which moved to the harness CLI.)
//!
//! Addition (babysitter-rs): `tokens:stats <runId> --usage [--json]` answers a run's model
//! usage instead, per run and per task, from its `COST_TRACKED` events as the effect index adds
//! them up (the rule `GetRunCost` uses), with the run's budget when it has one.
//!
//! Difference: the journal is read through the journal (sequence order, checksums verified)
//! instead of parsing each file and skipping what does not parse: a damaged run is an error
//! naming it for `<runId>`, and left out with a note on stderr for `--all`.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Map, Value, json};

use crate::compat::cli::Cli;
use crate::compat::output::{self, Style, locale_number};
use crate::compat::paths;
use crate::compat::run_dir::Run;
use babysitter_orchestrator::service::budget::BUDGET_KEY;
use babysitter_orchestrator::service::runs::{TaskCost, task_costs};

#[derive(Default, Clone, Copy)]
struct Totals {
    events: u64,
    original: f64,
    compressed: f64,
}

impl Totals {
    fn add(&mut self, original: f64, compressed: f64) {
        self.events += 1;
        self.original += original;
        self.compressed += compressed;
    }

    fn saved(&self) -> f64 {
        self.original - self.compressed
    }

    fn reduction_pct(&self) -> f64 {
        if self.original > 0.0 {
            self.saved() / self.original * 100.0
        } else {
            0.0
        }
    }
}

/// One run's statistics (`RunCompressionStats`).
struct RunStats {
    run_id: String,
    date: String,
    totals: Totals,
    by_layer: BTreeMap<String, Totals>,
}

impl RunStats {
    fn to_json(&self) -> Value {
        let mut layers = Map::new();
        for (name, l) in &self.by_layer {
            layers.insert(
                name.clone(),
                json!({"eventCount": l.events, "originalTokens": l.original,
                       "compressedTokens": l.compressed, "tokensSaved": l.saved()}),
            );
        }
        json!({
            "runId": self.run_id, "date": self.date, "eventCount": self.totals.events,
            "originalTokens": self.totals.original, "compressedTokens": self.totals.compressed,
            "tokensSaved": self.totals.saved(), "reductionPct": self.totals.reduction_pct(),
            "byLayer": layers,
        })
    }
}

/// The statistics of the run at `dir` (an error when its journal cannot be read).
async fn run_stats(run_id: &str, dir: &Path) -> Result<RunStats, String> {
    let run = Run::open(dir)?;
    let events = run.events().await.map_err(|e| format!("{e:#}"))?;
    let mut stats = RunStats {
        run_id: run_id.to_owned(),
        date: String::new(),
        totals: Totals::default(),
        by_layer: BTreeMap::new(),
    };
    for e in events
        .iter()
        .filter(|e| e.body.kind.as_str() == "COMPRESSION_APPLIED" && e.body.data.is_object())
    {
        if stats.totals.events == 0 {
            stats.date = e.body.recorded_at.clone();
        }
        let d = &e.body.data;
        let num = |k: &str| d.get(k).and_then(Value::as_f64).unwrap_or(0.0);
        let (original, compressed) = (num("originalTokens"), num("compressedTokens"));
        stats.totals.add(original, compressed);
        // `data.layer ?? "unknown"`, as a JavaScript object key.
        let layer = match d.get("layer") {
            None | Some(Value::Null) => "unknown".to_owned(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => output::compact(other),
        };
        stats
            .by_layer
            .entry(layer)
            .or_default()
            .add(original, compressed);
    }
    Ok(stats)
}

fn fmt_pct(n: f64) -> String {
    format!("{n:.1}%")
}

const BOLD: &str = "1";
const DIM: &str = "2";
const CYAN: &str = "36";
const GREEN: &str = "32";
const YELLOW: &str = "33";

/// A table's dim header line and its rule.
fn head(out: &mut Vec<String>, hdr: &str, st: &Style) {
    out.push(st.paint(&format!("  {hdr}"), DIM));
    out.push(st.paint(&format!("  {}", "-".repeat(hdr.chars().count())), DIM));
}

fn single_table(s: &RunStats, st: &Style) -> String {
    let mut out = vec![
        String::new(),
        st.paint(&format!("Run: {}", s.run_id), BOLD),
        st.paint(&format!("Date: {}", s.date), DIM),
        String::new(),
    ];
    if s.totals.events == 0 {
        out.push(st.paint("  No COMPRESSION_APPLIED events found in this run.", YELLOW));
        out.push(String::new());
        return out.join("\n");
    }
    let t = &s.totals;
    out.push(st.paint("  Summary", CYAN));
    out.push(format!(
        "  Events:            {}",
        st.paint(&locale_number(t.events as f64), BOLD)
    ));
    out.push(format!(
        "  Original tokens:   {}",
        st.paint(&locale_number(t.original), BOLD)
    ));
    out.push(format!(
        "  Compressed tokens: {}",
        st.paint(&locale_number(t.compressed), BOLD)
    ));
    out.push(format!(
        "  Tokens saved:      {}",
        st.paint(&locale_number(t.saved()), GREEN)
    ));
    out.push(format!(
        "  Reduction:         {}",
        st.paint(&fmt_pct(t.reduction_pct()), GREEN)
    ));
    out.push(String::new());
    out.push(st.paint("  By Layer", CYAN));
    let hdr = format!(
        "{:<8}  {:>8}  {:>12}  {:>12}  {:>12}  {:>10}",
        "Layer", "Events", "Original", "Compressed", "Saved", "Reduction"
    );
    head(&mut out, &hdr, st);
    for (name, l) in &s.by_layer {
        out.push(format!(
            "  {:<8}  {:>8}  {:>12}  {:>12}  {:>12}  {:>10}",
            format!("Layer {name}"),
            locale_number(l.events as f64),
            locale_number(l.original),
            locale_number(l.compressed),
            locale_number(l.saved()),
            fmt_pct(l.reduction_pct()),
        ));
    }
    out.push(String::new());
    out.join("\n")
}

fn aggregate_table(runs: &[RunStats], all: &Totals, st: &Style) -> String {
    let mut out = vec![
        String::new(),
        st.paint("Token Compression Stats — All Runs", BOLD),
        String::new(),
    ];
    if runs.is_empty() {
        out.push(st.paint("  No runs with COMPRESSION_APPLIED events found.", YELLOW));
        out.push(String::new());
        return out.join("\n");
    }
    let n = |v: f64| st.paint(&locale_number(v), BOLD);
    out.push(format!(
        "  Total runs with compression: {}",
        n(runs.len() as f64)
    ));
    out.push(format!(
        "  Total events:                {}",
        n(all.events as f64)
    ));
    out.push(format!(
        "  Total original tokens:       {}",
        n(all.original)
    ));
    out.push(format!(
        "  Total compressed tokens:     {}",
        n(all.compressed)
    ));
    out.push(format!(
        "  Total tokens saved:          {}",
        st.paint(&locale_number(all.saved()), GREEN)
    ));
    out.push(format!(
        "  Overall reduction:           {}",
        st.paint(&fmt_pct(all.reduction_pct()), GREEN)
    ));
    out.push(String::new());
    out.push(st.paint("  Per-Run Breakdown", CYAN));
    let hdr = format!(
        "{:<28}  {:<24}  {:>8}  {:>12}  {:>12}  {:>10}",
        "Run ID", "Date", "Events", "Original", "Compressed", "Reduction"
    );
    head(&mut out, &hdr, st);
    let mut sorted: Vec<&RunStats> = runs.iter().collect();
    // Most saved first; a stable sort keeps the listing order among equals, as the reference.
    sorted.sort_by(|a, b| b.totals.saved().total_cmp(&a.totals.saved()));
    for r in sorted {
        out.push(format!(
            "  {:<28}  {:<24}  {:>8}  {:>12}  {:>12}  {:>10}",
            r.run_id,
            r.date.chars().take(24).collect::<String>(),
            locale_number(r.totals.events as f64),
            locale_number(r.totals.original),
            locale_number(r.totals.compressed),
            fmt_pct(r.totals.reduction_pct()),
        ));
    }
    out.push(String::new());
    out.join("\n")
}

/// `tokens:stats <runId> --usage`: the run's model usage, per run and per task.
async fn usage(run_id: &str, dir: &Path) -> Result<Value, String> {
    let run = Run::open(dir)?;
    let budget = run
        .metadata()
        .ok()
        .and_then(|m| m.get(BUDGET_KEY).cloned())
        .unwrap_or(Value::Null);
    let tasks = run
        .inspect(|_, idx| task_costs(idx))
        .await
        .map_err(|e| format!("{e:#}"))?;
    let sum = |f: fn(&TaskCost) -> u64| tasks.iter().map(f).sum::<u64>();
    let cost: f64 = tasks.iter().map(|t| t.cost_usd).sum();
    Ok(json!({
        "runId": run_id,
        "inputTokens": sum(|t| t.input_tokens),
        "outputTokens": sum(|t| t.output_tokens),
        "cacheReadTokens": sum(|t| t.cache_read_tokens),
        "cacheWriteTokens": sum(|t| t.cache_write_tokens),
        "costUsd": cost,
        "budget": budget,
        "tasks": tasks.iter().map(|t| json!({
            "effectId": t.effect_id, "kind": t.kind, "label": t.label, "model": t.model,
            "inputTokens": t.input_tokens, "outputTokens": t.output_tokens,
            "cacheReadTokens": t.cache_read_tokens, "cacheWriteTokens": t.cache_write_tokens,
            "costUsd": t.cost_usd,
        })).collect::<Vec<_>>(),
    }))
}

fn usage_table(v: &Value) -> String {
    let n = |x: &Value| locale_number(x.as_f64().unwrap_or(0.0));
    let mut out = vec![
        format!("Run: {}", v["runId"].as_str().unwrap_or_default()),
        format!(
            "  Tokens: {} in, {} out, {} cache read, {} cache write; cost ${:.4}",
            n(&v["inputTokens"]),
            n(&v["outputTokens"]),
            n(&v["cacheReadTokens"]),
            n(&v["cacheWriteTokens"]),
            v["costUsd"].as_f64().unwrap_or(0.0)
        ),
    ];
    for t in v["tasks"].as_array().into_iter().flatten() {
        out.push(format!(
            "  {} {} {}: {} in, {} out, ${:.4}",
            t["effectId"].as_str().unwrap_or_default(),
            t["kind"].as_str().unwrap_or_default(),
            t["model"].as_str().unwrap_or_default(),
            n(&t["inputTokens"]),
            n(&t["outputTokens"]),
            t["costUsd"].as_f64().unwrap_or(0.0)
        ));
    }
    out.push(String::new());
    out.join("\n")
}

/// `tokens:stats`.
pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let a = &cli.args;
    let runs_dir = cli.runs_dir();
    let readable = paths::readable_runs_dirs(&runs_dir, &cli.cwd);
    let style = Style::for_stdout(cli.env);
    if a.flag("--all") {
        let mut runs = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for root in &readable {
            let mut names: Vec<String> = std::fs::read_dir(root)
                .map(|r| {
                    r.filter_map(Result::ok)
                        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                        .filter_map(|e| e.file_name().into_string().ok())
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            for name in names {
                let dir = paths::normalize(&root.join(&name));
                if !seen.insert(dir.clone()) || !dir.join("journal").is_dir() {
                    continue;
                }
                match run_stats(&name, &dir).await {
                    Ok(s) if s.totals.events > 0 => runs.push(s),
                    Ok(_) => {}
                    Err(e) => errln!("[tokens:stats] skipping {}: {e}", dir.display()),
                }
            }
        }
        let mut all = Totals::default();
        for r in &runs {
            all.events += r.totals.events;
            all.original += r.totals.original;
            all.compressed += r.totals.compressed;
        }
        if a.json() {
            output::line(&output::pretty(&json!({
                "totalRuns": runs.len(), "totalEvents": all.events,
                "totalOriginalTokens": all.original, "totalCompressedTokens": all.compressed,
                "totalTokensSaved": all.saved(), "overallReductionPct": all.reduction_pct(),
                "runs": runs.iter().map(RunStats::to_json).collect::<Vec<_>>(),
            })));
        } else {
            output::line(&aggregate_table(&runs, &all, &style));
        }
        return Ok(0);
    }
    let Some(run_id) = a.positionals.first() else {
        errln!("Usage: babysitter tokens:stats [runId] [--all] [--json] [--runs-dir <dir>]");
        errln!("  runId    Show compression stats for a specific run");
        errln!("  --all    Aggregate stats across all runs");
        errln!("  --json   Output JSON instead of table");
        return Ok(1);
    };
    let dir = paths::resolve_existing_run_dir(run_id, &runs_dir, &cli.cwd);
    let report = |msg: String| {
        if a.json() {
            errln!("{}", output::compact(&json!({"error": msg})));
        } else {
            errln!("{msg}");
        }
        1
    };
    if !dir.is_dir() {
        let looked: Vec<String> = readable.iter().map(|d| d.display().to_string()).collect();
        return Ok(report(format!(
            "Run not found: {run_id} (looked in {})",
            looked.join(", ")
        )));
    }
    if a.flag("--usage") {
        return Ok(match usage(run_id, &dir).await {
            Ok(v) if a.json() => {
                output::line(&output::pretty(&v));
                0
            }
            Ok(v) => {
                output::line(&usage_table(&v));
                0
            }
            Err(e) => report(format!("cannot read run {run_id}: {e}")),
        });
    }
    // A run directory without a journal has no events (as the reference).
    let stats = if dir.join("journal").is_dir() {
        match run_stats(run_id, &dir).await {
            Ok(s) => s,
            Err(e) => return Ok(report(format!("cannot read run {run_id}: {e}"))),
        }
    } else {
        RunStats {
            run_id: run_id.clone(),
            date: String::new(),
            totals: Totals::default(),
            by_layer: BTreeMap::new(),
        }
    };
    if a.json() {
        output::line(&output::pretty(&stats.to_json()));
    } else {
        output::line(&single_table(&stats, &style));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_format_as_en_us() {
        assert_eq!(fmt_pct(33.333), "33.3%");
    }
}
