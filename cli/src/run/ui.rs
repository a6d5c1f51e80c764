//! What `babysitter run` shows: one line per effect as it starts and ends (with its duration),
//! a final tree of the run; or, with `--json`, NDJSON events on stdout for machines.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::Result;
use babysitter_orchestrator::engine::Engine;
use serde_json::{Value, json};
use tokio::time::{Duration, Instant};

pub struct Ui {
    json: bool,
    color: bool,
}

fn label(a: &Value) -> String {
    let l = a["label"]
        .as_str()
        .or(a["taskDef"]["title"].as_str())
        .unwrap_or("");
    format!("{} {}", a["kind"].as_str().unwrap_or("task"), l)
}

impl Ui {
    pub fn new(json: bool, color: bool) -> Self {
        Self { json, color }
    }

    fn event(&self, v: Value) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{v}");
        let _ = out.flush();
    }

    fn line(&self, mark: &str, text: &str) {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{mark} {text}");
    }

    fn paint(&self, code: &str, s: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{s}\x1b[0m")
        } else {
            s.to_owned()
        }
    }

    pub fn run_started(&self, run_id: &str, dir: &Path) {
        if self.json {
            self.event(json!({"event": "run.started", "runId": run_id, "runDir": dir.display().to_string()}));
        } else {
            self.line(
                &self.paint("1", "▶"),
                &format!("run {run_id} ({})", dir.display()),
            );
        }
    }

    pub fn effect_started(&self, a: &Value) {
        if self.json {
            self.event(json!({"event": "effect.started", "effectId": a["effectId"], "kind": a["kind"], "label": a["label"]}));
        } else {
            self.line(&self.paint("36", "…"), &label(a));
        }
    }

    pub fn effect_done(&self, a: &Value, ok: bool, elapsed: Option<Duration>) {
        let ms = elapsed.map(|d| d.as_millis() as u64);
        if self.json {
            self.event(json!({"event": "effect.completed", "effectId": a["effectId"], "kind": a["kind"], "ok": ok, "durationMs": ms}));
        } else {
            let mark = if ok {
                self.paint("32", "✓")
            } else {
                self.paint("31", "✗")
            };
            let took = ms
                .map(|m| format!(" ({:.1}s)", m as f64 / 1000.0))
                .unwrap_or_default();
            self.line(&mark, &format!("{}{took}", label(a)));
        }
    }

    pub fn sleeping(&self, effect_id: &str, until_ms: i64) {
        let iso = chrono::DateTime::from_timestamp_millis(until_ms)
            .map(|d| d.to_rfc3339())
            .unwrap_or_default();
        if self.json {
            self.event(json!({"event": "effect.sleeping", "effectId": effect_id, "until": iso}));
        } else {
            self.line(&self.paint("33", "⏾"), &format!("sleeping until {iso}"));
        }
    }

    pub fn blocked(&self, a: &Value, kind: &str) {
        if self.json {
            self.event(json!({"event": "effect.blocked", "effectId": a["effectId"], "kind": kind, "reason": "needs a harness"}));
        }
    }

    pub fn warn(&self, msg: &str) {
        if self.json {
            self.event(json!({"event": "warning", "message": msg}));
        } else {
            self.line(&self.paint("33", "!"), msg);
        }
    }

    pub fn error(&self, msg: &str) {
        if self.json {
            self.event(json!({"event": "error", "message": msg}));
        }
        eprintln!("babysitter run: {msg}");
    }

    /// The end of the run: its status, output and the tree of its effects.
    pub async fn finished(
        &self,
        run_id: &str,
        status: &str,
        output: Option<&Value>,
        error: Option<&Value>,
        engine: &Engine,
        started: &HashMap<String, Instant>,
    ) {
        let effects = engine
            .journal()
            .inspect(run_id, |_, idx| {
                idx.effects.values().cloned().collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
        if self.json {
            self.event(json!({"event": "run.finished", "runId": run_id, "status": status, "output": output, "error": error,
                              "effects": effects.len()}));
            return;
        }
        let mark = if status == "completed" {
            self.paint("32", "■")
        } else {
            self.paint("31", "■")
        };
        self.line(
            &mark,
            &format!("run {run_id} {status} ({} effects)", effects.len()),
        );
        let n = effects.len();
        for (i, r) in effects.iter().enumerate() {
            let branch = if i + 1 == n { "└─" } else { "├─" };
            let state = match r.status.as_str() {
                "resolved_ok" => self.paint("32", "✓"),
                "requested" => self.paint("33", "…"),
                _ => self.paint("31", "✗"),
            };
            let _ = started;
            self.line(
                &format!("  {branch}"),
                &format!(
                    "{state} {} {} [{}]",
                    r.kind.as_deref().unwrap_or("task"),
                    r.label.as_deref().unwrap_or(&r.task_id),
                    r.step_id
                ),
            );
        }
        if let Some(o) = output {
            let mut out = std::io::stdout().lock();
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(o).unwrap_or_default()
            );
        }
        if let Some(e) = error.filter(|e| !e.is_null()) {
            self.line(&self.paint("31", "error:"), &e.to_string());
        }
    }
}

/// Asks for a breakpoint's answer: `--yes` approves; a terminal prompts; otherwise `None`.
pub fn ask_breakpoint(a: &Value, yes: bool, interactive: bool) -> Result<Option<Value>> {
    if yes {
        return Ok(Some(
            json!({"approved": true, "response": "approved with --yes"}),
        ));
    }
    if !interactive {
        return Ok(None);
    }
    let payload = &a["taskDef"]["metadata"]["payload"];
    let title = a["taskDef"]["title"].as_str().unwrap_or("breakpoint");
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "? {title}");
    if !payload.is_null() {
        let _ = writeln!(
            err,
            "  {}",
            serde_json::to_string_pretty(payload)
                .unwrap_or_default()
                .replace('\n', "\n  ")
        );
    }
    let _ = write!(err, "  approve? [y/n] ");
    let _ = err.flush();
    drop(err);
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    let approved = matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes");
    Ok(Some(json!({"approved": approved, "response": line.trim()})))
}
