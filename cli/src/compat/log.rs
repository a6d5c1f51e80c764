//! `log` and `hook:log`: babysitter's structured logs under `~/.a5c/logs` (`BABYSITTER_LOG_DIR`).
//! Harness plugins call them from their hook scripts (the Codex plugin pipes every hook payload to
//! `hook:log`), so they must exist, print and exit as the reference's do — a plugin treats a
//! non-zero exit as a failed hook.
//!
//! `log` appends one JSON line (`{ts, level, type?, label?, msg, runId?, processId?, source?}`,
//! in that key order, [`process_log::record`]) to `<logDir>[/<runId>]/{process,hooks,cli}.log`;
//! the engine writes `ctx.log` lines in the same shape.
//! `hook:log` reads a hook payload on stdin and appends the reference's text line
//! `[<ts>] [<LABEL>] hook=<type> k=v …` to `--log-file`.
//!
//! Fixed here (see `docs/compatibility.md`): a `--run-id` is a path segment, so one that is not a
//! valid run id (`../x`) is refused instead of writing outside the log directory; a payload value
//! holding a line break is written escaped, so a payload cannot forge further log lines.

use std::io::Read as _;
use std::path::PathBuf;

use babysitter_engine::process_log;
use babysitter_journal::node_json;
use serde_json::{Map, Value, json};

use super::cli::Cli;
use super::output::{self, compact, pretty};
use super::paths::UserFiles;

/// A failure the reference reports as `{error, message}` (pretty JSON with `--json`, else
/// `Error: <text>`), exit code 1.
struct Refusal {
    code: &'static str,
    message: String,
    /// The non-JSON text, when it differs from `message`.
    text: Option<String>,
}

impl Refusal {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            code,
            message: message.into(),
            text: None,
        }
    }

    fn text(mut self, text: impl Into<String>) -> Self {
        self.text = Some(text.into());
        self
    }

    fn report(self, json: bool) -> u8 {
        if json {
            let v = json!({"error": self.code, "message": self.message});
            errln!("{}", pretty(&v));
        } else {
            errln!("Error: {}", self.text.unwrap_or(self.message));
        }
        1
    }
}

/// `babysitter log --type process|hook|cli --message <m> [--run-id] [--process-id] [--label]
/// [--level] [--source] [--json]`.
pub async fn log(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let json = cli.args.json();
    Ok(match log_entry(cli) {
        Ok((path, line)) => match process_log::append(&path, &line) {
            Ok(()) => {
                if json {
                    let out = json!({"ok": true, "logPath": path.display().to_string()});
                    output::line(&compact(&out));
                }
                0
            }
            Err(e) => Refusal::new(
                "LOG_WRITE_FAILED",
                output::io_message("append to", &path, &e),
            )
            .text(format!(
                "Failed to write log: {}",
                output::io_message("append to", &path, &e)
            ))
            .report(json),
        },
        Err(r) => r.report(json),
    })
}

/// The file and the JSON line of a `log` call, or why there is none.
fn log_entry(cli: &Cli<'_>) -> Result<(PathBuf, String), Refusal> {
    let a = &cli.args;
    let kind = a.value("--type").unwrap_or("");
    if kind.is_empty() {
        return Err(Refusal::new(
            "MISSING_LOG_TYPE",
            "--type is required (process, hook, cli)",
        ));
    }
    let file = match kind {
        "process" => "process.log",
        "hook" => "hooks.log",
        "cli" => "cli.log",
        other => {
            return Err(Refusal::new(
                "INVALID_LOG_TYPE",
                format!("Invalid log type: \"{other}\". Must be one of: process, hook, cli"),
            ));
        }
    };
    let message = a.value("--message").unwrap_or("");
    if message.is_empty() {
        return Err(Refusal::new("MISSING_MESSAGE", "--message is required"));
    }
    let level = a.value("--level").unwrap_or("info");
    if !["debug", "info", "warn", "error"].contains(&level) {
        return Err(Refusal::new(
            "INVALID_LOG_LEVEL",
            format!("Invalid log level: \"{level}\". Must be one of: debug, info, warn, error"),
        ));
    }
    let run_id = a.value("--run-id").filter(|r| !r.is_empty());
    let mut path = UserFiles::of(cli.env, &cli.cwd).logs.ok_or_else(|| {
        Refusal::new(
            "LOG_WRITE_FAILED",
            "no log directory: HOME is not set and this user has no home directory; set BABYSITTER_LOG_DIR",
        )
    })?;
    if let Some(r) = run_id {
        // The reference joins it into the path unchecked; `../x` would escape the log directory.
        babysitter_journal::validate_id("run id", r)
            .map_err(|e| Refusal::new("INVALID_RUN_ID", e.to_string()))?;
        path.push(r);
    }
    path.push(file);
    let line = process_log::record(&[
        ("ts", Some(&babysitter_journal::journal::now_iso())),
        ("level", Some(level)),
        ("type", Some(kind)),
        ("label", a.value("--label")),
        ("msg", Some(message)),
        ("runId", run_id),
        ("processId", a.value("--process-id")),
        ("source", a.value("--source")),
    ]);
    Ok((path, line))
}

/// The reference's label for each hook type it knows.
const HOOK_LABELS: &[(&str, &str)] = &[
    ("on-run-start", "RUN_START"),
    ("on-run-complete", "RUN_COMPLETE"),
    ("on-run-fail", "RUN_FAIL"),
    ("on-task-start", "TASK_START"),
    ("on-task-complete", "TASK_COMPLETE"),
    ("on-step-dispatch", "STEP_DISPATCH"),
    ("on-iteration-start", "ITERATION_START"),
    ("on-iteration-end", "ITERATION_END"),
    ("on-breakpoint", "BREAKPOINT"),
    ("pre-commit", "PRE_COMMIT"),
    ("pre-branch", "PRE_BRANCH"),
    ("post-planning", "POST_PLANNING"),
    ("on-score", "SCORE"),
];

/// The payload fields each known hook type logs, in order (all others log `runId`).
fn hook_fields(hook: &str) -> &'static [&'static str] {
    match hook {
        "on-run-start" => &["runId", "processId", "entry"],
        "on-run-complete" => &["runId", "status", "duration"],
        "on-run-fail" => &["runId", "error", "duration"],
        "on-task-start" => &["runId", "effectId", "taskId", "kind"],
        "on-task-complete" => &["runId", "effectId", "taskId", "status", "duration"],
        "on-step-dispatch" => &["runId", "stepId", "action"],
        "on-iteration-start" => &["runId", "iteration"],
        "on-iteration-end" => &["runId", "iteration", "status"],
        "on-breakpoint" => &["runId", "question", "reason"],
        "pre-commit" => &["runId", "files", "message"],
        "pre-branch" => &["runId", "branch", "base"],
        "post-planning" => &["runId", "planFile"],
        "on-score" => &["runId", "target", "score"],
        _ => &["runId"],
    }
}

/// A payload field as the reference prints it: strings as they are, numbers and booleans as
/// JavaScript's `String()` writes them, anything else the fallback.
fn field_text(v: Option<&Value>, fallback: &str) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(n @ (Value::Number(_) | Value::Bool(_))) => node_json::to_string_pretty(n),
        _ => fallback.to_owned(),
    }
}

/// Line breaks and other control characters written as escapes: one payload, one log line.
fn one_line(s: &str) -> String {
    if !s.chars().any(char::is_control) {
        return s.to_owned();
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}

/// The `k=v` pairs of a hook payload.
fn hook_pairs(hook: &str, p: &Map<String, Value>) -> Vec<(&'static str, String)> {
    hook_fields(hook)
        .iter()
        .map(|&k| {
            let text = match (hook, k) {
                // `.runId // .context.runId // "unknown"`, strings only.
                ("on-breakpoint", "runId") => match p.get("runId") {
                    Some(Value::String(s)) => s.clone(),
                    _ => match p.get("context").and_then(|c| c.get("runId")) {
                        Some(Value::String(s)) => s.clone(),
                        _ => "unknown".into(),
                    },
                },
                ("on-breakpoint", "question" | "reason") => field_text(p.get(k), "N/A"),
                ("pre-commit", "files") => match p.get("files") {
                    Some(Value::Array(a)) => a.len().to_string(),
                    _ => "unknown".into(),
                },
                _ => field_text(p.get(k), "unknown"),
            };
            (k, one_line(&text))
        })
        .collect()
}

/// `babysitter hook:log --hook-type <type> --log-file <path> [--json]`, the payload on stdin.
pub async fn hook_log(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let json = cli.args.json();
    let hook = cli.args.value("--hook-type").unwrap_or("");
    if hook.is_empty() {
        return Ok(Refusal::new("MISSING_HOOK_TYPE", "--hook-type is required")
            .text("--hook-type is required for hook:log")
            .report(json));
    }
    let log_file = cli.args.value("--log-file").unwrap_or("");
    if log_file.is_empty() {
        return Ok(Refusal::new("MISSING_LOG_FILE", "--log-file is required")
            .text("--log-file is required for hook:log")
            .report(json));
    }
    let mut raw = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut raw) {
        return Ok(Refusal::new("STDIN_READ_ERROR", e.to_string())
            .text(format!("Failed to read stdin: {e}"))
            .report(json));
    }
    let trimmed = raw.trim();
    let payload =
        match serde_json::from_str::<Value>(if trimmed.is_empty() { "{}" } else { trimmed }) {
            Ok(Value::Object(m)) => m,
            Ok(_) => {
                return Ok(invalid_payload("Payload must be a JSON object").report(json));
            }
            Err(e) => {
                return Ok(invalid_payload(&format!("stdin is not valid JSON: {e}")).report(json));
            }
        };
    let label = HOOK_LABELS.iter().find(|(h, _)| *h == hook).map_or_else(
        || hook.to_uppercase().replace('-', "_"),
        |(_, l)| (*l).to_owned(),
    );
    let pairs: Vec<String> = hook_pairs(hook, &payload)
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    let line = format!(
        "[{}] [{label}] hook={} {}",
        babysitter_journal::journal::now_iso(),
        one_line(hook),
        pairs.join(" ")
    );
    let path = match super::paths::resolve_input_path(log_file, &cli.cwd) {
        p if p.is_absolute() => p,
        p => cli.cwd.join(p),
    };
    if let Err(e) = process_log::append(&path, &format!("{line}\n")) {
        let msg = output::io_message("append to", &path, &e);
        return Ok(Refusal::new("LOG_WRITE_ERROR", msg.clone())
            .text(format!("Failed to write to log file: {msg}"))
            .report(json));
    }
    if json {
        let out = json!({
            "hookType": hook,
            "eventLabel": label,
            "logFile": path.display().to_string(),
            "logLine": line,
        });
        output::line(&compact(&out));
    } else {
        output::line(&line);
    }
    Ok(0)
}

fn invalid_payload(msg: &str) -> Refusal {
    Refusal::new("INVALID_PAYLOAD", msg).text(format!("Failed to parse JSON payload: {msg}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hook_fields_follow_the_reference() {
        let p: Map<String, Value> = serde_json::from_str(
            r#"{"runId": 7, "effectId": "e1", "status": true, "duration": 1.5, "taskId": null,
                "files": [1, 2, 3], "message": "a\nb", "context": {"runId": "ctx"}}"#,
        )
        .unwrap();
        let show = |hook: &str| {
            hook_pairs(hook, &p)
                .into_iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            show("on-task-complete"),
            "runId=7 effectId=e1 taskId=unknown status=true duration=1.5"
        );
        // A number is not a string: the breakpoint's runId falls back to the context's.
        assert_eq!(show("on-breakpoint"), "runId=ctx question=N/A reason=N/A");
        assert_eq!(show("pre-commit"), "runId=7 files=3 message=a\\nb");
        assert_eq!(show("something-else"), "runId=7");
    }

    #[test]
    fn control_characters_are_escaped() {
        assert_eq!(one_line("plain"), "plain");
        assert_eq!(one_line("a\r\nb\tc\u{1}"), "a\\r\\nb\\tc\\u0001");
    }
}
