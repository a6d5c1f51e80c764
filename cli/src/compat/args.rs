//! babysitter's argument grammar (spec §5.1), kept by hand rather than with clap: every flag is
//! global (the same table for every command), value flags consume the next token even when it
//! starts with `-`, `--session-id` takes its value only when the next token is not a flag, and
//! positionals are assigned per command after the scan. clap cannot express "unknown flags are
//! tolerated" nor the per-command positional layout without diverging from the reference.
//!
//! Fixes kept here: `--flag=value` is accepted as well as `--flag value` (B22), and unknown
//! `--flags` are dropped (with a note under `--verbose`) instead of being taken as positionals,
//! where they would shift `<runDir>` / `<effectId>` (F16: callers pass flags such as
//! `--plugin-root` that 6.0.0 no longer defines).

use std::collections::BTreeMap;

/// How a value flag's raw text is checked at parse time (as the reference does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Check {
    /// Any non-empty text.
    Text,
    /// `Number(raw)` finite and > 0, floored.
    PositiveInt,
    /// `ok` | `error`, case-insensitive.
    TaskStatus,
    /// `completed` | `failed`, case-insensitive.
    FinalStatus,
    /// Consumed only when the next token does not start with `-`.
    Optional,
}

/// Every value flag of the reference's table (`argFlagParsers.ts`), so their values are never
/// mistaken for positionals, plus `--plugin-root` (0.0.187's `run:create` help lists it).
const VALUE_FLAGS: &[(&str, Check)] = &[
    ("--runs-dir", Check::Text),
    ("--kind", Check::Text),
    ("--limit", Check::PositiveInt),
    ("--iteration", Check::PositiveInt),
    ("--filter-type", Check::Text),
    ("--patch-effect", Check::Text),
    ("--final-status", Check::FinalStatus),
    ("--status", Check::TaskStatus),
    ("--value", Check::Text),
    ("--value-inline", Check::Text),
    ("--error", Check::Text),
    ("--stdout-ref", Check::Text),
    ("--stderr-ref", Check::Text),
    ("--stdout-file", Check::Text),
    ("--stderr-file", Check::Text),
    ("--started-at", Check::Text),
    ("--finished-at", Check::Text),
    ("--metadata", Check::Text),
    ("--invocation-key", Check::Text),
    ("--process-id", Check::Text),
    ("--entry", Check::Text),
    ("--inputs", Check::Text),
    ("--run-id", Check::Text),
    ("--process-revision", Check::Text),
    ("--request", Check::Text),
    ("--session-id", Check::Optional),
    ("--state-dir", Check::Text),
    ("--max-iterations", Check::PositiveInt),
    ("--prompt", Check::Text),
    ("--workspace", Check::Text),
    ("--tag", Check::Text),
    ("--daemon-dir", Check::Text),
    ("--config", Check::Text),
    ("--config-path", Check::Text),
    ("--grace-period-ms", Check::Text),
    ("--transport", Check::Text),
    ("--port", Check::Text),
    ("--host", Check::Text),
    ("--auth-token", Check::Text),
    ("--ws-ping-interval", Check::Text),
    ("--ws-grace-period", Check::Text),
    ("--ws-max-mps", Check::Text),
    ("--model", Check::Text),
    ("--last-iteration-at", Check::Text),
    ("--iteration-times", Check::Text),
    ("--timeout", Check::PositiveInt),
    ("--transcript-path", Check::Text),
    ("--hook-type", Check::Text),
    ("--harness", Check::Text),
    // babysitter-rs: a run's budget (`babysitter run`'s form).
    ("--budget", Check::Text),
    ("--log-file", Check::Text),
    ("--cache-ttl", Check::PositiveInt),
    ("--source-type", Check::Text),
    ("--url", Check::Text),
    ("--repo", Check::Text),
    ("--ref", Check::Text),
    ("--process", Check::Text),
    ("--process-path", Check::Text),
    ("--input", Check::Text),
    ("--dir", Check::Text),
    ("--plugin-name", Check::Text),
    ("--plugin-version", Check::Text),
    ("--marketplace-name", Check::Text),
    ("--marketplace-url", Check::Text),
    ("--marketplace-path", Check::Text),
    ("--marketplace-branch", Check::Text),
    ("--type", Check::Text),
    ("--message", Check::Text),
    ("--label", Check::Text),
    ("--level", Check::Text),
    ("--source", Check::Text),
    ("--keep-days", Check::PositiveInt),
    ("--effect-id", Check::Text),
    ("--reason", Check::Text),
    ("--action", Check::Text),
    ("--note", Check::Text),
    ("--tags", Check::Text),
    ("--expert", Check::Text),
    ("--breakpoint-id", Check::Text),
    ("--verbosity", Check::Text),
    ("--plugin-root", Check::Text),
    // babysitter-rs: hooks:invoke and plugin:generate.
    ("--phase", Check::Text),
    ("--timeout-ms", Check::Text),
    ("--out", Check::Text),
    ("--prefix", Check::Text),
    ("--handler", Check::Text),
];

/// The reference's boolean flags (`argFlags.ts`).
const BOOLEAN_FLAGS: &[&str] = &[
    "--json",
    "--dry-run",
    "--verbose",
    "--pending",
    "--reverse",
    "--show-config",
    "--show-strata",
    "--defaults-only",
    "--tree",
    "--rich",
    "--foreground",
    "--interactive",
    "--no-interactive",
    "--non-interactive",
    "--include-remote",
    "--summary-only",
    "--user",
    "--project",
    "--force",
    "--global",
    "--all",
    "--tui",
    // babysitter-rs: `tokens:stats <runId> --usage`.
    "--usage",
];

/// A parse error: the reference throws a plain `Error` with this message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgError(pub String);

impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ArgError {}

/// The parsed command line.
#[derive(Debug, Clone, Default)]
pub struct Parsed {
    /// `argv[0]`; `None` with `--help` or no arguments.
    pub command: Option<String>,
    pub help: bool,
    /// Boolean flags that were given (`--json`, …).
    flags: Vec<&'static str>,
    /// Value flags by name; the last occurrence wins (`--run-id` also keeps all in `run_ids`).
    values: BTreeMap<&'static str, String>,
    pub run_ids: Vec<String>,
    /// Every `--handler` (`hooks:invoke`'s extra handlers), in order.
    pub handlers: Vec<String>,
    /// `--session-id` given without a value.
    pub session_id_flag: bool,
    /// `--interactive` → `Some(true)`, `--no-interactive` / `--non-interactive` → `Some(false)`.
    pub interactive: Option<bool>,
    pub run_dir_arg: Option<String>,
    pub effect_id: Option<String>,
    pub positionals: Vec<String>,
    /// Unknown `--flags` that were dropped.
    pub ignored_flags: Vec<String>,
}

impl Parsed {
    pub fn flag(&self, name: &str) -> bool {
        self.flags.contains(&name)
    }

    pub fn json(&self) -> bool {
        self.flag("--json")
    }

    pub fn verbose(&self) -> bool {
        self.flag("--verbose")
    }

    pub fn dry_run(&self) -> bool {
        self.flag("--dry-run")
    }

    /// The text of a value flag.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(String::as_str)
    }

    /// A positive-integer flag (validated at parse time).
    pub fn number(&self, name: &str) -> Option<u64> {
        self.value(name).and_then(|v| positive_int(v).ok())
    }
}

fn positive_int(raw: &str) -> Result<u64, ()> {
    // JS `Number(raw)`: surrounding whitespace is ignored, the empty string is 0.
    let n: f64 = raw.trim().parse().map_err(|_| ())?;
    if n.is_finite() && n > 0.0 {
        Ok(n.floor() as u64)
    } else {
        Err(())
    }
}

fn value_flag(name: &str) -> Option<(&'static str, Check)> {
    VALUE_FLAGS.iter().find(|(n, _)| *n == name).copied()
}

fn boolean_flag(name: &str) -> Option<&'static str> {
    BOOLEAN_FLAGS.iter().find(|n| **n == name).copied()
}

/// Parses `argv` (without the program name).
pub fn parse(argv: &[String]) -> Result<Parsed, ArgError> {
    let mut parsed = Parsed::default();
    let mut rest = argv;
    if let Some((first, tail)) = argv.split_first() {
        rest = tail;
        match first.as_str() {
            "--help" | "-h" | "--help-human" => parsed.help = true,
            "--version" | "-v" => parsed.command = Some("version".into()),
            other => parsed.command = Some(other.to_owned()),
        }
    }
    let mut positionals = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let arg = rest[i].as_str();
        i += 1;
        match arg {
            "--help" | "-h" | "--help-human" => parsed.help = true,
            "--version" | "-v" => parsed.command = Some("version".into()),
            _ => {
                if let Some(name) = boolean_flag(arg) {
                    parsed.set_flag(name);
                } else if let Some((name, check, inline)) = split_value_flag(arg) {
                    let raw = take_value(check, inline, rest, &mut i);
                    match raw.filter(|v| !v.is_empty()) {
                        Some(raw) => parsed.set_value(name, checked(name, check, raw)?),
                        None if check == Check::Optional => parsed.session_id_flag = true,
                        None => return Err(ArgError(format!("{name} requires a value"))),
                    }
                } else if arg.starts_with("--") && arg.len() > 2 {
                    parsed.ignored_flags.push(arg.to_owned());
                } else {
                    positionals.push(arg.to_owned());
                }
            }
        }
    }
    parsed.effect_id = parsed.value("--effect-id").map(str::to_owned);
    parsed.place_positionals(positionals);
    Ok(parsed)
}

impl Parsed {
    fn set_flag(&mut self, name: &'static str) {
        match name {
            "--interactive" => self.interactive = Some(true),
            "--no-interactive" | "--non-interactive" => self.interactive = Some(false),
            _ => {}
        }
        if !self.flags.contains(&name) {
            self.flags.push(name);
        }
    }

    fn set_value(&mut self, name: &'static str, value: String) {
        if name == "--run-id" {
            self.run_ids.push(value.clone());
        }
        if name == "--handler" {
            self.handlers.push(value.clone());
        }
        self.values.insert(name, value);
    }

    /// The run directory (and, for the task commands, the effect id) given as positionals.
    fn place_positionals(&mut self, positionals: Vec<String>) {
        match self.command.as_deref() {
            Some("task:post" | "task:cancel" | "task:show") => {
                let mut it = positionals.iter().cloned();
                self.run_dir_arg = it.next();
                if self.effect_id.is_none() {
                    self.effect_id = it.next();
                }
            }
            Some(
                "task:list"
                | "run:assign-process"
                | "run:status"
                | "run:iterate"
                | "run:events"
                | "run:rebuild-state"
                | "run:repair-journal"
                | "run:recover-process-error"
                | "run:halt",
            ) => self.run_dir_arg = positionals.first().cloned(),
            _ => {}
        }
        self.positionals = positionals;
    }
}

/// A value flag as `--flag` or (B22) `--flag=value`: its name, check and inline value.
fn split_value_flag(arg: &str) -> Option<(&'static str, Check, Option<&str>)> {
    let (name, inline) = match arg.split_once('=') {
        Some((n, v)) if n.starts_with("--") && value_flag(n).is_some() => (n, Some(v)),
        _ => (arg, None),
    };
    value_flag(name).map(|(name, check)| (name, check, inline))
}

/// The flag's raw value: inline, or the next argument (`rest[*i]`, consumed). An optional
/// value is only taken from a next argument that does not look like a flag.
fn take_value(
    check: Check,
    inline: Option<&str>,
    rest: &[String],
    i: &mut usize,
) -> Option<String> {
    if let Some(v) = inline {
        return Some(v.to_owned());
    }
    let next = rest.get(*i)?;
    if check == Check::Optional && (next.is_empty() || next.starts_with('-')) {
        return None;
    }
    *i += 1;
    Some(next.clone())
}

/// `raw` validated (and normalised) as `name`'s value.
fn checked(name: &str, check: Check, raw: String) -> Result<String, ArgError> {
    Ok(match check {
        Check::Text | Check::Optional => raw,
        Check::PositiveInt => positive_int(&raw)
            .map(|n| n.to_string())
            .map_err(|()| ArgError(format!("{name} must be a positive integer")))?,
        Check::TaskStatus => {
            let v = raw.to_lowercase();
            if v != "ok" && v != "error" {
                return Err(ArgError(format!(
                    "--status must be \"ok\" or \"error\" (received: {raw})"
                )));
            }
            v
        }
        Check::FinalStatus => {
            let v = raw.to_lowercase();
            if v != "completed" && v != "failed" {
                return Err(ArgError(format!(
                    "--final-status must be \"completed\" or \"failed\" (received: {v})"
                )));
            }
            v
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Parsed, ArgError> {
        parse(&args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn positionals_per_command() {
        let a = p(&["task:post", "run1", "eff1", "--status", "OK", "--json"]).unwrap();
        assert_eq!(a.run_dir_arg.as_deref(), Some("run1"));
        assert_eq!(a.effect_id.as_deref(), Some("eff1"));
        assert_eq!(a.value("--status"), Some("ok"));
        assert!(a.json());
        let a = p(&["task:show", "--effect-id", "e", "run1"]).unwrap();
        assert_eq!(a.run_dir_arg.as_deref(), Some("run1"));
        assert_eq!(a.effect_id.as_deref(), Some("e"));
        let a = p(&["run:create", "stray", "--process-id", "x"]).unwrap();
        assert_eq!(a.run_dir_arg, None);
    }

    #[test]
    fn value_flags_take_the_next_token_even_a_flag() {
        let a = p(&["run:create", "--prompt", "--json"]).unwrap();
        assert_eq!(a.value("--prompt"), Some("--json"));
        assert!(!a.json());
    }

    #[test]
    fn equals_form_is_accepted() {
        let a = p(&["run:events", "r", "--limit=3", "--filter-type=run_created"]).unwrap();
        assert_eq!(a.number("--limit"), Some(3));
        assert_eq!(a.value("--filter-type"), Some("run_created"));
    }

    #[test]
    fn errors_match_the_reference() {
        assert_eq!(
            p(&["run:events", "r", "--limit"]).unwrap_err().0,
            "--limit requires a value"
        );
        assert_eq!(
            p(&["run:events", "r", "--limit", "0"]).unwrap_err().0,
            "--limit must be a positive integer"
        );
        assert_eq!(
            p(&["task:post", "r", "e", "--status", "maybe"])
                .unwrap_err()
                .0,
            "--status must be \"ok\" or \"error\" (received: maybe)"
        );
        assert_eq!(
            p(&["run:iterate", "r", "--iteration", "2.7"])
                .unwrap()
                .number("--iteration"),
            Some(2)
        );
    }

    #[test]
    fn unknown_flags_are_dropped_and_session_id_is_optional() {
        let a = p(&[
            "task:list",
            "--frobnicate",
            "run1",
            "--session-id",
            "--json",
        ])
        .unwrap();
        assert_eq!(a.run_dir_arg.as_deref(), Some("run1"));
        assert_eq!(a.ignored_flags, vec!["--frobnicate"]);
        assert!(a.session_id_flag);
        assert_eq!(a.value("--session-id"), None);
        assert!(a.json());
        let a = p(&["task:list", "--plugin-root", "/x", "run1"]).unwrap();
        assert_eq!(a.run_dir_arg.as_deref(), Some("run1"));
    }

    #[test]
    fn help_and_version_anywhere() {
        assert!(p(&["--help"]).unwrap().help);
        assert!(p(&["run:status", "-h"]).unwrap().help);
        assert_eq!(
            p(&["run:status", "--version"]).unwrap().command.as_deref(),
            Some("version")
        );
        let a = p(&["run:create", "--no-interactive"]).unwrap();
        assert_eq!(a.interactive, Some(false));
    }
}
