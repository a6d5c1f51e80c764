//! What `babysitter run` shows: one line per effect as it starts and ends (with its duration),
//! a final tree of the run; or, with `--json`, NDJSON events on stdout for machines.

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::Path;

use anyhow::Result;
use babysitter_engine::Engine;
use serde_json::{Value, json};
use tokio::time::{Duration, Instant};

pub struct Ui {
    json: bool,
    color: bool,
    /// Effects running now and whether the spinner line is on screen (shared with the ticker).
    spin: std::sync::Arc<std::sync::Mutex<Spin>>,
}

#[derive(Default)]
struct Spin {
    /// Label by effect id.
    running: std::collections::BTreeMap<String, String>,
    shown: bool,
}

const SPINNER: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];

fn label(a: &Value) -> String {
    let l = a["label"]
        .as_str()
        .or(a["taskDef"]["title"].as_str())
        .unwrap_or("");
    format!("{} {}", a["kind"].as_str().unwrap_or("task"), l)
}

impl Ui {
    pub fn new(json: bool, color: bool) -> Self {
        Self {
            json,
            color,
            spin: Default::default(),
        }
    }

    /// On a terminal, redraws a spinner line naming the running effects until the returned
    /// handle is dropped (aborted).
    pub fn spinner(&self) -> Option<tokio::task::JoinHandle<()>> {
        if self.json || !self.color {
            return None;
        }
        let spin = self.spin.clone();
        Some(tokio::spawn(async move {
            let started = Instant::now();
            let mut tick = 0usize;
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                tick += 1;
                let Ok(mut st) = spin.lock() else { return };
                let mut err = std::io::stderr().lock();
                if st.running.is_empty() {
                    // Clear once, then leave the line alone (a breakpoint prompt may be on it).
                    if st.shown {
                        let _ = write!(err, "\r\x1b[2K");
                        st.shown = false;
                    }
                } else {
                    let names: Vec<&str> = st.running.values().map(String::as_str).collect();
                    let _ = write!(
                        err,
                        "\r\x1b[2K\x1b[36m{}\x1b[0m {} running ({:.0}s): {}",
                        SPINNER[tick % SPINNER.len()],
                        names.len(),
                        started.elapsed().as_secs_f64(),
                        names.join(", ")
                    );
                    st.shown = true;
                }
                let _ = err.flush();
            }
        }))
    }

    fn event(&self, v: Value) {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{v}");
        let _ = out.flush();
    }

    fn line(&self, mark: &str, text: &str) {
        // Holding the spinner state keeps the ticker from drawing mid-line.
        let mut st = self.spin.lock().ok();
        let mut err = std::io::stderr().lock();
        // Clear a spinner line first so permanent lines stay clean.
        let clear = if st.as_ref().is_some_and(|s| s.shown) {
            "\r\x1b[2K"
        } else {
            ""
        };
        let _ = writeln!(err, "{clear}{mark} {text}");
        if let Some(st) = st.as_mut() {
            st.shown = false;
        }
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
        if let Ok(mut st) = self.spin.lock() {
            st.running.insert(
                a["effectId"].as_str().unwrap_or_default().to_owned(),
                label(a),
            );
        }
        if self.json {
            self.event(json!({"event": "effect.started", "effectId": a["effectId"], "kind": a["kind"], "label": a["label"]}));
        } else {
            self.line(&self.paint("36", "…"), &label(a));
        }
    }

    pub fn effect_done(&self, a: &Value, ok: bool, elapsed: Option<Duration>) {
        if let Ok(mut st) = self.spin.lock() {
            st.running
                .remove(a["effectId"].as_str().unwrap_or_default());
        }
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

    pub fn note(&self, msg: &str) {
        if self.json {
            self.event(json!({"event": "note", "message": msg}));
        } else {
            self.line(&self.paint("36", "i"), msg);
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
