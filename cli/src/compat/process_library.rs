//! `process-library:clone|update|use|active [--repo <url>] [--dir <dir>] [--ref <ref>]
//! [--run-id <id>] [--session-id <id>] [--state-dir <dir>] [--json]`: the process library
//! agents pick processes from, as the reference's `processLibrary.ts` (the files: [`store`]).
//!
//! - `clone`: a shallow `git clone` of `--repo` (default `BABYSITTER_PROCESS_LIBRARY_REPO`, else
//!   babysitter's repository) into `--dir` (default the state dir's clone); refuses an existing
//!   directory (so a second clone fails and leaves the first alone).
//! - `update`: `git pull --ff-only` in the clone, or fetch and check out `--ref`.
//! - `use`: binds `--dir` as the active library (for `--run-id` / `--session-id`, else by
//!   default); without `--dir`, as `active`.
//! - `active`: the active binding (run, then session, then default). When none is bound, or the
//!   bound directory is gone, it bootstraps as the reference does: clone (or update) the default
//!   library and bind its `library/` directory — which needs the network unless
//!   `BABYSITTER_PROCESS_LIBRARY_REPO` names a local repository.
//!
//! Outputs, errors (`{"error":"clone_failed|update_failed|bind_failed|active_failed",
//! "message"}` on stdout with `--json`, `[process-library:<verb>] <message>` on stderr
//! otherwise) and exit codes are the reference's.

pub mod store;

use serde_json::{Map, Value, json};

use crate::compat::cli::Cli;
use crate::compat::output;
use store::{Scope, Store};

fn store<'a>(cli: &'a Cli<'_>) -> Store<'a> {
    Store {
        env: cli.env,
        cwd: &cli.cwd,
        state_dir_flag: cli.args.value("--state-dir"),
    }
}

fn scope<'a>(cli: &'a Cli<'_>) -> Scope<'a> {
    Scope {
        run_id: cli.args.value("--run-id").filter(|s| !s.is_empty()),
        session_id: cli.args.value("--session-id").filter(|s| !s.is_empty()),
    }
}

fn fail(cli: &Cli<'_>, verb: &str, code: &str, message: &str) -> u8 {
    if cli.args.json() {
        output::line(&output::compact(
            &json!({"error": code, "message": message}),
        ));
    } else {
        errln!("[process-library:{verb}] {message}");
    }
    1
}

fn object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn text<'a>(v: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Prints a command's result (`{success: true, …}` for the three that change something, the
/// result itself for `active`) or its error; the exit code.
fn report(
    cli: &Cli<'_>,
    verb: &str,
    result: Result<Map<String, Value>, String>,
    text: impl FnOnce(&Map<String, Value>) -> String,
) -> u8 {
    let code = match verb {
        "clone" => "clone_failed",
        "update" => "update_failed",
        "use" => "bind_failed",
        _ => "active_failed",
    };
    match result {
        Ok(r) if !cli.args.json() => {
            output::line(&text(&r));
            0
        }
        Ok(r) if verb == "active" => {
            output::line(&output::pretty(&Value::Object(r)));
            0
        }
        Ok(r) => {
            let mut out = Map::new();
            out.insert("success".into(), json!(true));
            out.extend(r);
            output::line(&output::pretty(&Value::Object(out)));
            0
        }
        Err(e) => fail(cli, verb, code, &e),
    }
}

/// `process-library:<verb>`.
pub async fn run(cli: &Cli<'_>, verb: &str) -> anyhow::Result<u8> {
    let a = &cli.args;
    let st = store(cli);
    let r#ref = a.value("--ref");
    Ok(match verb {
        "clone" => {
            let spec = st.spec(a.value("--repo"), r#ref, a.value("--dir"));
            let repo = a.value("--repo").unwrap_or(&spec.repo);
            let dir = match a.value("--dir") {
                Some(d) => st.resolve(d),
                None => spec.clone_dir.clone(),
            };
            report(
                cli,
                verb,
                store::clone(repo, &dir, r#ref).map(object),
                |r| {
                    format!(
                        "Process library cloned.\n  Repo: {}\n  Dir: {}\n  Revision: {}",
                        text(r, "repo").unwrap_or_default(),
                        text(r, "dir").unwrap_or_default(),
                        text(r, "revision").unwrap_or_default(),
                    )
                },
            )
        }
        "update" => {
            let dir = match a.value("--dir") {
                Some(d) => st.resolve(d),
                None => st.spec(None, r#ref, None).clone_dir,
            };
            report(cli, verb, store::update(&dir, r#ref).map(object), |r| {
                format!(
                    "Process library updated.\n  Dir: {}\n  Revision: {}",
                    text(r, "dir").unwrap_or_default(),
                    text(r, "revision").unwrap_or_default(),
                )
            })
        }
        "use" => {
            let result = match a.value("--dir") {
                Some(d) => st.bind(d, r#ref, scope(cli)).map(|r| r.to_json()),
                None => store::ensure_active(&st, scope(cli), r#ref),
            };
            report(cli, verb, result, |r| {
                format!(
                    "Active process library updated.\n  Scope: {}\n  Dir: {}\n  State: {}",
                    scope_text(r),
                    bound(r, "dir").unwrap_or("(missing)"),
                    text(r, "stateFile").unwrap_or_default(),
                )
            })
        }
        _ => {
            let result = store::ensure_active(&st, scope(cli), None);
            report(cli, verb, result, |r| {
                let mut lines = vec![
                    "Active process library.".to_owned(),
                    format!("  Scope: {}", scope_text(r)),
                    format!("  Dir: {}", bound(r, "dir").unwrap_or("(missing)")),
                    format!("  Revision: {}", bound(r, "revision").unwrap_or("unknown")),
                    format!("  State: {}", text(r, "stateFile").unwrap_or_default()),
                ];
                if r.get("bootstrapped") == Some(&json!(true)) {
                    let clone_dir = r
                        .get("defaultSpec")
                        .and_then(|s| s.get("cloneDir"))
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    lines.push(format!("  Bootstrapped: yes ({clone_dir})"));
                }
                lines.join("\n")
            })
        }
    })
}

/// `${bindingScope}` as a template literal prints it (`null` when unbound).
fn scope_text(r: &Map<String, Value>) -> &str {
    text(r, "bindingScope").unwrap_or("null")
}

fn bound<'a>(r: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    r.get("binding")?.get(key)?.as_str()
}
