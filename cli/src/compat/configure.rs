//! `configure [show|validate|paths] [--defaults-only] [--json]`: the SDK settings as the
//! reference's `configure.ts` reports them — each setting's effective value and whether an
//! environment variable set it (`show`), the reference's range checks (`validate`, exit 1 on an
//! error), and the project paths it uses (`paths`). The values are the reference's `getConfig()`
//! (its defaults, overridden by `BABYSITTER_*` variables that parse), which are the settings
//! this implementation reads too where it has them (runs directory, log level, secret logs).

use serde_json::{Map, Value, json};

use crate::compat::cli::Cli;
use crate::compat::output::{self, Style, locale_number};
use crate::compat::paths;

const DOC_BASE_URL: &str = "https://docs.a5c.ai/sdk/config";
const LOG_LEVELS: &[&str] = &["debug", "info", "warn", "error", "silent"];

/// How a setting's variable is read.
#[derive(Clone, Copy)]
enum Parse {
    /// `parseInt` > 0, else the default.
    PositiveInt,
    /// One of [`LOG_LEVELS`] (any case), else the default.
    LogLevel,
    /// `1` / `true` (any case); anything else is `false`.
    Bool,
    /// Not settable from the environment.
    Fixed,
    /// The runs directory (scope, `BABYSITTER_RUNS_DIR`).
    RunsDir,
}

/// (key, variable, how it parses, default, description), in the reference's order.
const SETTINGS: &[(&str, Option<&str>, Parse, &str)] = &[
    (
        "runsDir",
        Some("BABYSITTER_RUNS_DIR"),
        Parse::RunsDir,
        "Directory where run state is stored",
    ),
    (
        "maxIterations",
        Some("BABYSITTER_MAX_ITERATIONS"),
        Parse::PositiveInt,
        "Maximum iterations before run terminates",
    ),
    (
        "qualityThreshold",
        Some("BABYSITTER_QUALITY_THRESHOLD"),
        Parse::PositiveInt,
        "Quality threshold percentage (0-100)",
    ),
    (
        "timeout",
        Some("BABYSITTER_TIMEOUT"),
        Parse::PositiveInt,
        "Default task timeout in milliseconds",
    ),
    (
        "logLevel",
        Some("BABYSITTER_LOG_LEVEL"),
        Parse::LogLevel,
        "Minimum log level for output",
    ),
    (
        "allowSecretLogs",
        Some("BABYSITTER_ALLOW_SECRET_LOGS"),
        Parse::Bool,
        "Allow logging of sensitive values",
    ),
    (
        "hookTimeout",
        Some("BABYSITTER_HOOK_TIMEOUT"),
        Parse::PositiveInt,
        "Hook execution timeout in milliseconds",
    ),
    (
        "nodeTaskTimeout",
        Some("BABYSITTER_NODE_TASK_TIMEOUT"),
        Parse::PositiveInt,
        "Node task execution timeout in milliseconds",
    ),
    (
        "clockStepMs",
        None,
        Parse::Fixed,
        "Clock step interval for testing (ms)",
    ),
    (
        "clockStartMs",
        None,
        Parse::Fixed,
        "Clock start epoch for testing (ms)",
    ),
    (
        "layoutVersion",
        None,
        Parse::Fixed,
        "Storage layout version identifier",
    ),
    (
        "largeResultPreviewLimit",
        None,
        Parse::Fixed,
        "Max size for inline result preview (bytes)",
    ),
];

/// The reference's `DEFAULTS` (the runs directory: the global one).
fn default(cli: &Cli<'_>, key: &str) -> Value {
    match key {
        "runsDir" => json!(
            paths::global_state_root(cli.env, &cli.cwd)
                .join("runs")
                .display()
                .to_string()
        ),
        "maxIterations" => json!(65_000),
        "qualityThreshold" => json!(80),
        "timeout" => json!(120_000),
        "logLevel" => json!("info"),
        "allowSecretLogs" => json!(false),
        "hookTimeout" => json!(30_000),
        "nodeTaskTimeout" => json!(15 * 60 * 1000),
        "clockStepMs" => json!(1000),
        // Date.UTC(2025, 0, 1)
        "clockStartMs" => json!(1_735_689_600_000_u64),
        "layoutVersion" => json!("2026.01-storage-preview"),
        _ => json!(1024 * 1024),
    }
}

/// `parseInt(value, 10)`: optional sign, then the leading digits.
fn parse_int(raw: &str) -> Option<i64> {
    let t = raw.trim();
    let (sign, digits) = match t.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, t.strip_prefix('+').unwrap_or(t)),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse::<i64>().ok().map(|n| sign * n)
}

/// The effective value (`getConfig()`), or the default with `--defaults-only`.
fn value(cli: &Cli<'_>, key: &str, var: Option<&str>, parse: Parse, defaults_only: bool) -> Value {
    let fallback = default(cli, key);
    let raw = match (defaults_only, var) {
        (false, Some(v)) => cli.env.get(v).filter(|s| !s.is_empty()),
        _ => None,
    };
    match (parse, raw) {
        (Parse::RunsDir, _) if !defaults_only => {
            json!(
                paths::resolve_runs_dir(cli.env, &cli.cwd, None)
                    .display()
                    .to_string()
            )
        }
        (Parse::PositiveInt, Some(r)) => parse_int(r)
            .filter(|n| *n > 0)
            .map_or(fallback, |n| json!(n)),
        (Parse::LogLevel, Some(r)) => {
            let l = r.trim().to_lowercase();
            if LOG_LEVELS.contains(&l.as_str()) {
                json!(l)
            } else {
                fallback
            }
        }
        (Parse::Bool, r) if !defaults_only => {
            json!(r.is_some_and(|r| matches!(r.trim().to_lowercase().as_str(), "1" | "true")))
        }
        _ => fallback,
    }
}

/// `show`'s `values`: `{key, value, source, envVar?, docLink, description}`.
fn values(cli: &Cli<'_>, defaults_only: bool) -> Vec<Map<String, Value>> {
    SETTINGS
        .iter()
        .map(|&(key, var, parse, description)| {
            let from_env = !defaults_only && var.is_some_and(|v| cli.env.get(v).is_some());
            let mut m = Map::new();
            m.insert("key".into(), json!(key));
            m.insert("value".into(), value(cli, key, var, parse, defaults_only));
            m.insert(
                "source".into(),
                json!(if from_env { "env" } else { "default" }),
            );
            if let Some(v) = var {
                m.insert("envVar".into(), json!(v));
            }
            let anchor: String = key
                .chars()
                .flat_map(|c| {
                    if c.is_ascii_uppercase() {
                        vec!['-', c.to_ascii_lowercase()]
                    } else {
                        vec![c]
                    }
                })
                .collect();
            m.insert("docLink".into(), json!(format!("{DOC_BASE_URL}#{anchor}")));
            m.insert("description".into(), json!(description));
            m
        })
        .collect()
}

/// `validateConfig` over the effective values: (errors, warnings).
fn validate(vals: &[Map<String, Value>]) -> (Vec<String>, Vec<String>) {
    let get = |k: &str| {
        vals.iter()
            .find(|m| m["key"] == k)
            .map(|m| m["value"].clone())
            .unwrap_or(Value::Null)
    };
    let num = |k: &str| get(k).as_f64().unwrap_or(f64::NAN);
    let (mut errors, mut warnings) = (Vec::new(), Vec::new());
    if get("runsDir").as_str().is_none_or(str::is_empty) {
        errors.push("runsDir must be a non-empty string".to_owned());
    }
    let max = num("maxIterations");
    if !(max.is_finite() && max > 0.0) {
        errors.push("maxIterations must be a positive finite number".into());
    } else if max > 10_000.0 {
        warnings.push(
            "maxIterations is unusually high (>10000), this may cause performance issues".into(),
        );
    }
    let q = num("qualityThreshold");
    if !(q.is_finite() && (0.0..=100.0).contains(&q)) {
        errors.push("qualityThreshold must be a number between 0 and 100".into());
    }
    let t = num("timeout");
    if !(t.is_finite() && t > 0.0) {
        errors.push("timeout must be a positive finite number".into());
    } else if t < 1000.0 {
        warnings.push("timeout is very short (<1s), tasks may fail prematurely".into());
    }
    if get("allowSecretLogs") == json!(true) {
        warnings.push("allowSecretLogs is enabled - sensitive data may be exposed in logs".into());
    }
    for k in [
        "hookTimeout",
        "nodeTaskTimeout",
        "clockStepMs",
        "largeResultPreviewLimit",
    ] {
        let n = num(k);
        if !(n.is_finite() && n > 0.0) {
            errors.push(format!("{k} must be a positive finite number"));
        }
    }
    (errors, warnings)
}

/// `formatValue`: strings quoted, numbers with separators.
fn format_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("\"{s}\""),
        Value::Number(n) => locale_number(n.as_f64().unwrap_or(0.0)),
        other => output::js_template(Some(other)),
    }
}

fn show_table(vals: &[Map<String, Value>], st: &Style) -> String {
    let rows: Vec<[String; 3]> = vals
        .iter()
        .map(|m| {
            let source = m["source"].as_str().unwrap_or_default().to_owned();
            [
                output::js_template(m.get("key")),
                format_value(&m["value"]),
                source,
            ]
        })
        .collect();
    let headers = ["Setting", "Value", "Source"];
    let widths: Vec<usize> = (0..3)
        .map(|i| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([headers[i].len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let pad = |s: &str, painted: String, w: usize| {
        format!(
            "{painted}{}",
            " ".repeat(w.saturating_sub(s.chars().count()))
        )
    };
    let mut out = vec![
        String::new(),
        st.paint("Babysitter SDK Configuration", "1;36"),
        String::new(),
    ];
    let header: Vec<String> = (0..3)
        .map(|i| pad(headers[i], st.paint(headers[i], "1"), widths[i]))
        .collect();
    out.push(format!("  {}", header.join("  ")));
    let sep: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push(format!("  {}", st.paint(&sep.join("  "), "2")));
    for r in &rows {
        let source = if r[2] == "env" {
            st.paint("env", "32")
        } else {
            st.paint("default", "2")
        };
        out.push(format!(
            "  {}  {}  {}",
            pad(&r[0], r[0].clone(), widths[0]),
            pad(&r[1], r[1].clone(), widths[1]),
            pad(&r[2], source, widths[2])
        ));
    }
    out.push(String::new());
    let overridden: Vec<&Map<String, Value>> =
        vals.iter().filter(|m| m["source"] == "env").collect();
    if !overridden.is_empty() {
        out.push(st.paint("Environment Overrides:", "36"));
        for m in overridden {
            out.push(format!(
                "  {} = {}",
                output::js_template(m.get("envVar")),
                format_value(&m["value"])
            ));
        }
        out.push(String::new());
    }
    out.push(st.paint(&format!("Documentation: {DOC_BASE_URL}"), "2"));
    out.push(String::new());
    out.join("\n")
}

fn validate_text(errors: &[String], warnings: &[String], st: &Style) -> String {
    let valid = errors.is_empty();
    let icon = match (valid, st.0) {
        (true, true) => st.paint("\u{2713}", "32"),
        (true, false) => "[PASS]".into(),
        (false, true) => st.paint("\u{2717}", "31"),
        (false, false) => "[FAIL]".into(),
    };
    let text = if valid {
        "Configuration is valid"
    } else {
        "Configuration has errors"
    };
    let mut out = vec![
        String::new(),
        st.paint(&format!("{icon} {text}"), "1"),
        String::new(),
    ];
    for (items, title, color) in [(errors, "Errors:", "31"), (warnings, "Warnings:", "33")] {
        if items.is_empty() {
            continue;
        }
        out.push(st.paint(title, &format!("{color};1")));
        let bullet = if st.0 {
            st.paint("\u{2022}", color)
        } else {
            "-".into()
        };
        out.extend(items.iter().map(|e| format!("  {bullet} {e}")));
        out.push(String::new());
    }
    if valid && warnings.is_empty() {
        out.push(st.paint("All configuration values are within valid ranges.", "2"));
        out.push(String::new());
    }
    out.join("\n")
}

/// `configure`.
pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let a = &cli.args;
    let defaults_only = a.flag("--defaults-only");
    let json = a.json();
    let style = Style(!json && Style::for_stdout(cli.env).0);
    let timestamp = babysitter_journal::journal::now_iso();
    let sub = a.positionals.first().map_or("show", String::as_str);
    match sub {
        "show" => {
            let vals = values(cli, defaults_only);
            if json {
                let values: Vec<Value> = vals.into_iter().map(Value::Object).collect();
                output::line(&output::pretty(
                    &json!({"values": values, "timestamp": timestamp}),
                ));
            } else {
                output::line(&show_table(&vals, &style));
            }
            Ok(0)
        }
        "validate" => {
            let (errors, warnings) = validate(&values(cli, defaults_only));
            let valid = errors.is_empty();
            if json {
                output::line(&output::pretty(&json!({
                    "valid": valid, "errors": errors, "warnings": warnings, "timestamp": timestamp,
                })));
            } else {
                output::line(&validate_text(&errors, &warnings, &style));
            }
            Ok(if valid { 0 } else { 1 })
        }
        "paths" => {
            let runs = value(cli, "runsDir", None, Parse::RunsDir, defaults_only);
            let runs = runs.as_str().unwrap_or_default().to_owned();
            let list = [
                (
                    "runsDir",
                    runs.as_str(),
                    "Directory where run state and journals are stored",
                ),
                ("a5cDir", ".a5c", "Root directory for babysitter data"),
                (
                    "hooksDir",
                    ".a5c/hooks",
                    "Directory for runtime hook scripts",
                ),
                (
                    "processesDir",
                    ".a5c/processes",
                    "Directory for process definitions",
                ),
            ];
            let infos: Vec<Value> = list
                .iter()
                .map(|(name, rel, description)| {
                    let p = paths::resolve(&cli.cwd, rel);
                    json!({"name": name, "path": p.display().to_string(),
                           "exists": p.try_exists().unwrap_or(false), "description": description})
                })
                .collect();
            if json {
                output::line(&output::pretty(
                    &json!({"paths": infos, "timestamp": timestamp}),
                ));
            } else {
                let mut out = vec![
                    String::new(),
                    style.paint("Babysitter SDK Paths", "1;36"),
                    String::new(),
                ];
                for i in &infos {
                    let exists = i["exists"] == json!(true);
                    let icon = match (exists, style.0) {
                        (true, true) => style.paint("\u{2713}", "32"),
                        (true, false) => "[EXISTS]".into(),
                        (false, true) => style.paint("\u{2717}", "33"),
                        (false, false) => "[MISSING]".into(),
                    };
                    out.push(format!(
                        "  {icon} {}",
                        style.paint(i["name"].as_str().unwrap_or_default(), "1")
                    ));
                    out.push(format!(
                        "      Path: {}",
                        i["path"].as_str().unwrap_or_default()
                    ));
                    out.push(format!(
                        "      {}",
                        style.paint(i["description"].as_str().unwrap_or_default(), "2")
                    ));
                    out.push(String::new());
                }
                output::line(&out.join("\n"));
            }
            Ok(0)
        }
        other => {
            let msg = format!("Unknown subcommand: {other}");
            if json {
                output::line(&output::pretty(&json!({"error": msg})));
            } else {
                errln!(
                    "Error: {msg}\n\nAvailable subcommands:\n  show      Display current effective configuration\n  validate  Validate current configuration\n  paths     Show important paths\n\nOptions:\n  --json          Output in JSON format\n  --defaults-only Show only default values (ignore env overrides)"
                );
            }
            Ok(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_int_takes_leading_digits() {
        assert_eq!(parse_int(" 42abc"), Some(42));
        assert_eq!(parse_int("-3"), Some(-3));
        assert_eq!(parse_int("abc"), None);
    }
}
