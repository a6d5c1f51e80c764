//! What the commands print: JSON exactly as Node's `JSON.stringify` writes it (2-space pretty
//! or single-line, per command, F13), and errors in the reference's two forms — the structured
//! JSON object with `--json`, the `Error: …` block otherwise (spec §5.1). Data goes to stdout,
//! diagnostics to stderr.

use std::fmt;
use std::io::Write as _;

use babysitter_journal::node_json;
use serde_json::Value;

/// `JSON.stringify(value, null, 2)`.
pub fn pretty(value: &Value) -> String {
    node_json::to_string_pretty(value)
}

/// `JSON.stringify(value)`: single line, Node's number/string formatting and key order.
pub fn compact(value: &Value) -> String {
    let mut out = String::with_capacity(256);
    write_compact(&mut out, value);
    out
}

fn write_compact(out: &mut String, value: &Value) {
    match value {
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_compact(out, item);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in node_json::js_key_order(map).into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&node_json::to_string_pretty(&Value::String(k.clone())));
                out.push(':');
                write_compact(out, v);
            }
            out.push('}');
        }
        // Scalars print the same pretty or not.
        scalar => out.push_str(&node_json::to_string_pretty(scalar)),
    }
}

/// JavaScript truthiness of a JSON value (`if (value)`).
pub fn js_truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// The text a template literal makes of a value (`${value}`): strings raw, `undefined` for a
/// missing one, arrays joined by `,`, objects `[object Object]`, numbers as Node prints them.
pub fn js_template(v: Option<&Value>) -> String {
    match v {
        None => "undefined".into(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| match x {
                Value::Null => String::new(),
                other => js_template(Some(other)),
            })
            .collect::<Vec<_>>()
            .join(","),
        Some(Value::Object(_)) => "[object Object]".into(),
        Some(other) => compact(other),
    }
}

/// `toLocaleString("en-US")`: thousands separators, at most three decimals.
pub fn locale_number(n: f64) -> String {
    let rounded = (n * 1000.0).round() / 1000.0;
    let text = format!("{:.3}", rounded.abs());
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let frac = frac.trim_end_matches('0');
    let sign = if rounded < 0.0 { "-" } else { "" };
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

/// ANSI styling where the reference colours its tables: `NO_COLOR` unset, and `FORCE_COLOR`
/// set or stdout a terminal.
pub struct Style(pub bool);

impl Style {
    pub fn for_stdout(env: &babysitter_common::EnvMap) -> Style {
        use std::io::IsTerminal as _;
        Style(
            env.get("NO_COLOR").is_none()
                && (env.get("FORCE_COLOR").is_some() || std::io::stdout().is_terminal()),
        )
    }

    /// `text` in the SGR `code` (`1` bold, `2` dim, `32` green, …), reset after.
    pub fn paint(&self, text: &str, code: &str) -> String {
        if self.0 {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }
}

/// Writes one line to stdout (a closed pipe is not an error worth reporting).
pub fn line(text: &str) {
    write_out(format_args!("{text}\n"));
}

/// A command's stdout and stderr, when the warm server runs it for a client
/// (`crate::compat::warm`) instead of the process's own streams.
#[derive(Debug, Default)]
pub struct Captured {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

tokio::task_local! {
    static CAPTURE: std::cell::RefCell<Captured>;
}

/// Runs `f` with everything it prints through [`line`] / [`errln!`] captured.
pub async fn captured<F: std::future::Future>(f: F) -> (F::Output, Captured) {
    CAPTURE
        .scope(std::cell::RefCell::new(Captured::default()), async move {
            let out = f.await;
            let cap = CAPTURE.with(|c| std::mem::take(&mut *c.borrow_mut()));
            (out, cap)
        })
        .await
}

/// stdout for the commands (see [`line`]); a closed pipe is not an error worth reporting.
pub fn write_out(args: fmt::Arguments<'_>) {
    let captured = CAPTURE.try_with(|c| {
        let _ = c.borrow_mut().stdout.write_fmt(args);
    });
    if captured.is_err() {
        let _ = std::io::stdout().lock().write_fmt(args);
    }
}

/// stderr for the commands (see [`errln!`]).
pub fn write_err(args: fmt::Arguments<'_>) {
    let captured = CAPTURE.try_with(|c| {
        let _ = c.borrow_mut().stderr.write_fmt(args);
    });
    if captured.is_err() {
        let _ = std::io::stderr().lock().write_fmt(args);
    }
}

/// `eprintln!` for the commands: to stderr, or to the warm server's client.
macro_rules! errln {
    () => {
        $crate::compat::output::write_err(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::compat::output::write_err(format_args!("{}\n", format_args!($($arg)*)))
    };
}

/// Error categories of the reference's structured errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Configuration,
    Validation,
    Runtime,
    Internal,
}

impl Category {
    fn code(self) -> &'static str {
        match self {
            Self::Configuration => "CONFIGURATION",
            Self::Validation => "VALIDATION",
            Self::Runtime => "RUNTIME",
            Self::Internal => "INTERNAL",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Self::Configuration => "Configuration or setup issue",
            Self::Validation => "Input validation failure",
            Self::Runtime => "Runtime execution error",
            Self::Internal => "Internal error (please report as a bug)",
        }
    }
}

/// An error with the reference's structured fields (`BabysitterRuntimeError`). Plain errors
/// (anything else reaching the top) are reported as `Error` / `INTERNAL`, as Node's are.
#[derive(Debug, Clone)]
pub struct CliError {
    pub name: String,
    pub message: String,
    pub category: Category,
    pub suggestions: Vec<String>,
    pub next_steps: Vec<String>,
    pub details: Option<Value>,
    /// A plain JS `Error` (not a babysitter error): text output adds the bug-report hint.
    plain: bool,
}

impl CliError {
    pub fn new(name: &str, message: impl Into<String>, category: Category) -> Self {
        Self {
            name: name.to_owned(),
            message: message.into(),
            category,
            suggestions: Vec::new(),
            next_steps: Vec::new(),
            details: None,
            plain: false,
        }
    }

    /// A plain `Error` (what Node throws for I/O and parse failures).
    pub fn plain(name: &str, message: impl Into<String>) -> Self {
        let mut e = Self::new(name, message, Category::Internal);
        e.plain = true;
        e
    }

    pub fn details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    pub fn next_steps(mut self, steps: Vec<String>) -> Self {
        self.next_steps = steps;
        self
    }

    pub fn suggestions(mut self, s: Vec<String>) -> Self {
        self.suggestions = s;
        self
    }

    /// `toStructuredError`: `{name, message, category, categoryDescription, suggestions,
    /// nextSteps, details?}`.
    pub fn structured(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("name".into(), Value::String(self.name.clone()));
        m.insert("message".into(), Value::String(self.message.clone()));
        m.insert("category".into(), self.category.code().into());
        m.insert(
            "categoryDescription".into(),
            self.category.description().into(),
        );
        m.insert("suggestions".into(), self.suggestions.clone().into());
        m.insert("nextSteps".into(), self.next_steps.clone().into());
        if let Some(d) = &self.details {
            m.insert("details".into(), d.clone());
        }
        Value::Object(m)
    }

    /// `formatErrorWithContext` without colours.
    pub fn text(&self) -> String {
        let next_steps = if self.plain {
            vec!["If this error persists, please report it as a bug".to_owned()]
        } else {
            self.next_steps.clone()
        };
        let mut lines = vec![
            format!("Error: {}", self.message),
            format!("[{}] Category: {}", self.name, self.category.description()),
        ];
        if !self.suggestions.is_empty() {
            lines.push(String::new());
            lines.push("Did you mean?".into());
            lines.extend(self.suggestions.iter().map(|s| format!("  - {s}")));
        }
        if !next_steps.is_empty() {
            lines.push(String::new());
            lines.push("Next Steps:".into());
            lines.extend(next_steps.iter().map(|s| format!("  - {s}")));
        }
        lines.join("\n")
    }

    /// Prints the error the way the reference's top-level handler does.
    pub fn report(&self, json: bool) {
        if json {
            errln!("{}", compact(&self.structured()));
        } else {
            errln!("{}", self.text());
        }
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CliError {}

/// Turns any error reaching the top into the structured form: a [`CliError`] as it is,
/// anything else as a plain `Error` with its full cause chain as the message.
pub fn to_cli_error(e: &anyhow::Error) -> CliError {
    match e.downcast_ref::<CliError>() {
        Some(c) => c.clone(),
        None => CliError::plain("Error", format!("{e:#}")),
    }
}

/// An engine error as the reference words it: an invalid run's reason, a held lock's owner.
pub fn engine_message(e: &babysitter_engine::EngineError) -> String {
    use babysitter_engine::EngineError;
    match e {
        EngineError::InvalidRun { reason, .. } => reason.clone(),
        EngineError::Journal(j) => journal_message(j),
        other => other.to_string(),
    }
}

/// A journal error as the reference words it (`run.lock already held by pid …`).
pub fn journal_message(e: &babysitter_journal::JournalError) -> String {
    match e {
        babysitter_journal::JournalError::Locked { pid, owner, .. } => {
            format!("run.lock already held by pid {pid} ({owner})")
        }
        other => other.to_string(),
    }
}

/// Node's message for a failed file operation (`ENOENT: no such file or directory, open
/// '<path>'`), which agents and tests match on.
pub fn io_message(op: &str, path: &std::path::Path, e: &std::io::Error) -> String {
    let code = match e.kind() {
        std::io::ErrorKind::NotFound => Some("ENOENT: no such file or directory"),
        std::io::ErrorKind::PermissionDenied => Some("EACCES: permission denied"),
        std::io::ErrorKind::IsADirectory => Some("EISDIR: illegal operation on a directory"),
        std::io::ErrorKind::AlreadyExists => Some("EEXIST: file already exists"),
        _ => None,
    };
    match code {
        Some(c) => format!("{c}, {op} '{}'", path.display()),
        None => format!("{e}, {op} '{}'", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compact_matches_json_stringify() {
        let v: Value =
            serde_json::from_str(r#"{"b":1.0,"a":[1,"x/é\u0001",null,true],"2":{},"1":[]}"#)
                .unwrap();
        assert_eq!(
            compact(&v),
            "{\"1\":[],\"2\":{},\"b\":1,\"a\":[1,\"x/é\\u0001\",null,true]}"
        );
        assert_eq!(compact(&json!(1e21)), "1e+21");
    }

    #[test]
    fn numbers_format_as_en_us() {
        assert_eq!(locale_number(0.0), "0");
        assert_eq!(locale_number(999.0), "999");
        assert_eq!(locale_number(1234.0), "1,234");
        assert_eq!(locale_number(1234567.5), "1,234,567.5");
        assert_eq!(locale_number(-1200.0), "-1,200");
        assert_eq!(locale_number(1.23456), "1.235");
    }

    #[test]
    fn structured_error_shape() {
        let e = CliError::plain("Error", "boom");
        assert_eq!(
            compact(&e.structured()),
            r#"{"name":"Error","message":"boom","category":"INTERNAL","categoryDescription":"Internal error (please report as a bug)","suggestions":[],"nextSteps":[]}"#
        );
        assert_eq!(
            e.text(),
            "Error: boom\n[Error] Category: Internal error (please report as a bug)\n\nNext Steps:\n  - If this error persists, please report it as a bug"
        );
    }
}
