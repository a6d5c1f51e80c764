//! `profile:read|write|merge|render --user|--project [--input <file>] [--dir <dir>] [--json]`:
//! the user profile (`~/.a5c/user-profile.json`, or `<dir>/user-profile.json`) and the project
//! profile (`<cwd>/.a5c/project-profile.json`, or `<dir>/.a5c/project-profile.json`) agents
//! read and keep up to date, with a markdown rendering written beside each (`*.md`), as the
//! reference's `profile.ts`. Merge rules: [`merge`]; markdown: [`render`].
//!
//! Differences (outputs unchanged otherwise): a profile file that is not a JSON object is an
//! error naming it (the reference reports "no profile found", and `profile:merge` refuses as if
//! there were none); `--input` must hold a JSON object (the reference writes any JSON value,
//! which later reads cannot render); both files are written atomically.

pub mod merge;
pub mod render;

use std::path::PathBuf;

use serde_json::{Map, Value, json};

use crate::compat::cli::Cli;
use babysitter_journal::journal::now_iso;

use crate::compat::session::file::write_file_atomic;
use crate::compat::{json_file, output, paths};
use merge::Kind;

/// Where one profile lives, and how the reference names that place in its messages.
struct Location {
    kind: Kind,
    file: PathBuf,
    markdown: PathBuf,
    /// `dir ?? getUserProfileDir()` / `dir ?? getProjectProfileDir()`, as the reference prints it.
    shown: String,
}

fn location(cli: &Cli<'_>, kind: Kind) -> Location {
    let dir_flag = cli.args.value("--dir");
    let (dir, name) = match kind {
        Kind::User => {
            let home = paths::home(cli.env, &cli.cwd).unwrap_or_else(|| PathBuf::from("/"));
            let dir = match dir_flag {
                Some(d) => paths::resolve(&cli.cwd, d),
                None => home.join(".a5c"),
            };
            (dir, "user-profile")
        }
        Kind::Project => {
            let root = dir_flag.map_or_else(|| cli.cwd.clone(), |d| paths::resolve(&cli.cwd, d));
            (root.join(".a5c"), "project-profile")
        }
    };
    let shown = dir_flag.map_or_else(|| dir.display().to_string(), str::to_owned);
    Location {
        kind,
        file: dir.join(format!("{name}.json")),
        markdown: dir.join(format!("{name}.md")),
        shown,
    }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::User => "user",
        Kind::Project => "project",
    }
}

/// `User` / `Project`, as the text answers start.
fn title(kind: Kind) -> &'static str {
    match kind {
        Kind::User => "User",
        Kind::Project => "Project",
    }
}

fn markdown(kind: Kind, profile: &Value) -> String {
    match kind {
        Kind::User => render::user(profile),
        Kind::Project => render::project(profile),
    }
}

/// The stored profile: `Ok(None)` when there is none.
fn read(loc: &Location) -> Result<Option<Map<String, Value>>, String> {
    json_file::read_object(&loc.file)
}

/// Writes the profile and its markdown (both atomically; the markdown best-effort, as the
/// reference).
fn write(loc: &Location, profile: &Map<String, Value>) -> Result<(), String> {
    let value = Value::Object(profile.clone());
    write_file_atomic(&loc.file, &(output::pretty(&value) + "\n"))?;
    let _ = write_file_atomic(&loc.markdown, &markdown(loc.kind, &value));
    Ok(())
}

/// `--input <file>` as a JSON object.
fn input(cli: &Cli<'_>) -> Result<Map<String, Value>, String> {
    let Some(raw) = cli.args.value("--input") else {
        return Err("--input <file> is required".into());
    };
    let path = paths::resolve_input_path(raw, &cli.cwd);
    let fail = |m: String| format!("Failed to read input file: {m}");
    let text =
        std::fs::read_to_string(&path).map_err(|e| fail(output::io_message("open", &path, &e)))?;
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(fail(format!(
            "{} does not hold a JSON object",
            path.display()
        ))),
        Err(e) => Err(fail(format!("{} is not valid JSON ({e})", path.display()))),
    }
}

/// `[profile:<verb>] <message>` on stderr, exit 1.
fn refuse(verb: &str, message: &str) -> u8 {
    errln!("[profile:{verb}] {message}");
    1
}

/// `profile:<verb>`.
pub async fn run(cli: &Cli<'_>, verb: &str) -> anyhow::Result<u8> {
    let a = &cli.args;
    let kind = if a.flag("--user") {
        Kind::User
    } else if a.flag("--project") {
        Kind::Project
    } else {
        return Ok(refuse(verb, "Specify --user or --project"));
    };
    let loc = location(cli, kind);
    let label = kind_name(kind);
    let json = a.json();
    Ok(match verb {
        "read" | "render" => {
            let profile = match read(&loc) {
                Ok(Some(p)) => Value::Object(p),
                Ok(None) if verb == "read" && json => {
                    output::line(&output::compact(
                        &json!({"error": "no_profile", "profileDir": loc.shown}),
                    ));
                    return Ok(1);
                }
                Ok(None) => {
                    let msg = format!("No {label} profile found at {}", loc.shown);
                    return Ok(refuse(verb, &msg));
                }
                Err(e) => return Ok(refuse(verb, &e)),
            };
            match (verb, json) {
                ("read", true) => output::line(&output::pretty(&profile)),
                ("render", true) => output::line(&output::compact(
                    &json!({"markdown": markdown(kind, &profile), "type": label}),
                )),
                _ => output::line(&markdown(kind, &profile)),
            }
            0
        }
        "write" => {
            let profile = match input(cli) {
                Ok(p) => p,
                Err(e) => return Ok(refuse(verb, &e)),
            };
            if let Err(e) = write(&loc, &profile) {
                return Ok(refuse(verb, &e));
            }
            if json {
                output::line(&output::compact(
                    &json!({"status": "ok", "profileDir": loc.shown, "type": label}),
                ));
            } else {
                let title = title(kind);
                output::line(&format!(
                    "[profile:write] {title} profile written to {}",
                    loc.shown
                ));
            }
            0
        }
        _ => {
            let updates = match input(cli) {
                Ok(p) => p,
                Err(e) => return Ok(refuse(verb, &e)),
            };
            let existing = match read(&loc) {
                Ok(Some(p)) => p,
                Ok(None) => {
                    let msg = format!("No existing {label} profile to merge into at {}", loc.shown);
                    return Ok(refuse(verb, &msg));
                }
                Err(e) => return Ok(refuse(verb, &e)),
            };
            let merged = merge::merge(kind, &existing, &updates, &now_iso());
            if let Err(e) = write(&loc, &merged) {
                return Ok(refuse(verb, &e));
            }
            let version = merged.get("version").cloned().unwrap_or(Value::Null);
            if json {
                output::line(&output::compact(
                    &json!({"status": "ok", "type": label, "version": version}),
                ));
            } else {
                let title = title(kind);
                output::line(&format!(
                    "[profile:merge] {title} profile merged (version {})",
                    output::js_template(Some(&version))
                ));
            }
            0
        }
    })
}
