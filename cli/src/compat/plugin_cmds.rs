//! The plugin commands: `harness:install-plugin`, `harness:install`, `harness:discover`,
//! `plugin:list-installed`, `plugin:uninstall` and `plugin:generate` — thin over [`crate::plugins`], which renders the
//! bundles and owns what an install writes. Output is one JSON document with `--json`, a few
//! lines of text otherwise; a bad harness name or scope is an error naming the choices.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::compat::cli::Cli;
use crate::compat::output::{self, Category, CliError};
use crate::compat::{discover, paths};
use crate::plugins::bundle;
use crate::plugins::harness::Harness;
use crate::plugins::install::{self, Scope};

pub(super) fn usage_error(message: String) -> anyhow::Error {
    anyhow::Error::new(CliError::new(
        "ValidationError",
        message,
        Category::Validation,
    ))
}

fn harness_arg(cli: &Cli<'_>, command: &str) -> anyhow::Result<Harness> {
    let name = cli
        .args
        .positionals
        .first()
        .map(String::as_str)
        .or(cli.args.value("--harness"))
        .unwrap_or("");
    Harness::parse(name).ok_or_else(|| {
        usage_error(if name.is_empty() {
            format!("{command} needs a harness: one of {}", Harness::keys())
        } else {
            format!("unknown harness {name:?}: one of {}", Harness::keys())
        })
    })
}

fn home(cli: &Cli<'_>) -> anyhow::Result<PathBuf> {
    paths::home(cli.env, &cli.cwd).ok_or_else(|| usage_error("HOME is not set".into()))
}

/// `--user` → the home directory; else `--project [DIR]` / `--workspace DIR` / the working
/// directory.
fn scope(cli: &Cli<'_>) -> anyhow::Result<(Scope, PathBuf)> {
    if cli.args.flag("--user") {
        if cli.args.flag("--project") {
            return Err(usage_error("--user and --project are exclusive".into()));
        }
        let home = paths::home(cli.env, &cli.cwd)
            .ok_or_else(|| usage_error("--user needs HOME to be set".into()))?;
        return Ok((Scope::User, home));
    }
    let dir = cli
        .args
        .positionals
        .get(1)
        .map(String::as_str)
        .or(cli.args.value("--workspace"))
        .map(|d| paths::resolve(&cli.cwd, d))
        .unwrap_or_else(|| cli.cwd.clone());
    if !dir.is_dir() {
        return Err(usage_error(format!(
            "the project directory {} does not exist",
            dir.display()
        )));
    }
    Ok((Scope::Project, dir))
}

/// The harness's executable: `<BIN>_BIN` (e.g. `CLAUDE_BIN`) when set, else the first on `PATH`
/// (`discover`'s lookup).
fn harness_bin(cli: &Cli<'_>, h: Harness) -> Option<PathBuf> {
    let var = format!("{}_BIN", h.binary().to_uppercase().replace('-', "_"));
    if let Some(b) = cli.env.get_non_empty(&var) {
        return Some(PathBuf::from(b));
    }
    discover::which(cli.env.get_non_empty("PATH"), &cli.cwd, h.binary())
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

fn show(cli: &Cli<'_>, v: &Value, lines: &[String]) {
    if cli.args.json() {
        output::line(&output::pretty(v));
    } else {
        for l in lines {
            output::line(l);
        }
    }
}

fn paths_json(ps: &[PathBuf]) -> Value {
    json!(
        ps.iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
    )
}

/// `harness:install-plugin <harness> [--project [DIR] | --user] [--json]`.
pub async fn install_plugin(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let h = harness_arg(cli, "harness:install-plugin")?;
    let (scope, base) = scope(cli)?;
    let home = home(cli)?;
    let req = install::Request {
        harness: h,
        scope,
        base: &base,
        home: &home,
        babysitter: std::env::current_exe().ok(),
        harness_bin: harness_bin(cli, h),
        now: now(),
    };
    let out = install::install(&req).map_err(|e| {
        anyhow::Error::new(CliError::new(
            "InstallError",
            e.to_string(),
            Category::Configuration,
        ))
    })?;
    let v = json!({
        "harness": out.harness,
        "scope": scope.as_str(),
        "dir": out.dir.display().to_string(),
        "written": paths_json(&out.written),
        "unchanged": paths_json(&out.unchanged),
        "registered": out.registered,
    });
    let mut lines = vec![format!(
        "babysitter plugin for {} installed ({} scope) in {}",
        h.label(),
        scope.as_str(),
        out.dir.display()
    )];
    lines.extend(
        out.written
            .iter()
            .map(|p| format!("  wrote     {}", p.display())),
    );
    lines.extend(
        out.unchanged
            .iter()
            .map(|p| format!("  unchanged {}", p.display())),
    );
    lines.extend(out.registered.iter().map(|r| format!("  registered {r}")));
    show(cli, &v, &lines);
    Ok(0)
}

/// `plugin:uninstall <harness> [--project [DIR] | --user] [--json]`.
pub async fn uninstall(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let h = harness_arg(cli, "plugin:uninstall")?;
    let (scope, base) = scope(cli)?;
    let home = home(cli)?;
    let req = install::Request {
        harness: h,
        scope,
        base: &base,
        home: &home,
        babysitter: None,
        harness_bin: harness_bin(cli, h),
        now: now(),
    };
    let removed = install::uninstall(&req).map_err(|e| {
        anyhow::Error::new(CliError::new(
            "InstallError",
            e.to_string(),
            Category::Configuration,
        ))
    })?;
    let Some(r) = removed else {
        let v =
            json!({"harness": h.key(), "scope": scope.as_str(), "removed": [], "installed": false});
        show(
            cli,
            &v,
            &[format!(
                "babysitter plugin for {} is not installed ({} scope, {})",
                h.label(),
                scope.as_str(),
                base.display()
            )],
        );
        return Ok(0);
    };
    let v = json!({
        "harness": r.harness,
        "scope": scope.as_str(),
        "removed": paths_json(&r.removed),
        "unregistered": r.unregistered,
    });
    let mut lines = vec![format!(
        "babysitter plugin for {} removed ({} scope)",
        h.label(),
        scope.as_str()
    )];
    lines.extend(
        r.removed
            .iter()
            .map(|p| format!("  removed {}", p.display())),
    );
    show(cli, &v, &lines);
    Ok(0)
}

fn installed_json(base: &Path) -> anyhow::Result<Vec<Value>> {
    let list = install::list(base).map_err(|e| {
        anyhow::Error::new(CliError::new(
            "InstallError",
            e.to_string(),
            Category::Configuration,
        ))
    })?;
    Ok(list
        .into_iter()
        .map(|i| serde_json::to_value(i).unwrap_or(Value::Null))
        .collect())
}

/// `plugin:list-installed [--json]`: this project's installs and the user's.
pub async fn list_installed(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let mut all = installed_json(&cli.cwd)?;
    if let Some(home) = paths::home(cli.env, &cli.cwd).filter(|h| *h != cli.cwd) {
        all.extend(installed_json(&home)?);
    }
    let lines: Vec<String> = if all.is_empty() {
        vec!["no babysitter plugin installed here or for this user".into()]
    } else {
        all.iter()
            .map(|i| {
                format!(
                    "{} ({}) {} — {} files",
                    i["harness"].as_str().unwrap_or("?"),
                    i["scope"].as_str().unwrap_or("?"),
                    i["dir"].as_str().unwrap_or("?"),
                    i["files"].as_array().map(Vec::len).unwrap_or(0)
                )
            })
            .collect()
    };
    show(cli, &json!({"installed": all}), &lines);
    Ok(0)
}

/// `harness:discover [--json]`: which harness CLIs are installed (and their versions), and
/// where the plugin is installed for each.
pub async fn discover(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let mut project = install::list(&cli.cwd).unwrap_or_default();
    if let Some(home) = paths::home(cli.env, &cli.cwd).filter(|h| *h != cli.cwd) {
        project.extend(install::list(&home).unwrap_or_default());
    }
    let mut rows = Vec::new();
    let mut lines = Vec::new();
    for h in Harness::ALL {
        let bin = harness_bin(cli, *h);
        let version = match bin.as_deref() {
            Some(b) => discover::version_of(b, cli.env).await,
            None => None,
        };
        let plugin: Vec<&str> = project
            .iter()
            .filter(|i| i.harness == h.key())
            .map(|i| i.scope.as_str())
            .collect();
        lines.push(format!(
            "{:<12} {:<10} {}{}",
            h.key(),
            if bin.is_some() {
                "installed"
            } else {
                "missing"
            },
            version.as_deref().unwrap_or(""),
            if plugin.is_empty() {
                String::new()
            } else {
                format!("  plugin: {}", plugin.join(", "))
            }
        ));
        rows.push(json!({
            "harness": h.key(),
            "label": h.label(),
            "installed": bin.is_some(),
            "binary": bin.map(|b| b.display().to_string()),
            "version": version,
            "plugin": plugin,
        }));
    }
    show(cli, &json!({"harnesses": rows}), &lines);
    Ok(0)
}

/// `plugin:generate --out DIR [--harness H]`: writes the bundles (`plugins/dist` in the
/// repository), replacing each harness's directory whole.
pub async fn generate(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let out = cli
        .args
        .value("--out")
        .map(|d| paths::resolve(&cli.cwd, d))
        .ok_or_else(|| usage_error("plugin:generate needs --out <dir>".into()))?;
    let harnesses: Vec<Harness> = match cli.args.value("--harness") {
        Some(_) => vec![harness_arg(cli, "plugin:generate")?],
        None => Harness::ALL.to_vec(),
    };
    let mut written = Vec::new();
    for h in harnesses {
        let b = bundle::render(h).map_err(|e| anyhow::anyhow!("{e}"))?;
        let dir = out.join(h.key());
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => anyhow::bail!("{}", output::io_message("remove", &dir, &e)),
        }
        for (rel, f) in &b {
            let path = dir.join(rel);
            install::write_atomic(&path, &f.bytes, f.executable)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            written.push(path);
        }
    }
    let lines = vec![format!("{} files under {}", written.len(), out.display())];
    show(
        cli,
        &json!({"out": out.display().to_string(), "files": paths_json(&written)}),
        &lines,
    );
    Ok(0)
}

/// `harness:install <harness> [--prefix DIR] [--dry-run] [--json]`: installs the harness's CLI
/// from npm, at the version babysitter is tested with (`npm install -g`, or into `--prefix`).
/// The answer has the reference's fields (`status`, `command`, `output`, `location`,
/// `success`); a failed npm is exit 1 with npm's output.
pub async fn install_harness(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let h = harness_arg(cli, "harness:install")?;
    let Some((package, version)) = h.npm_package() else {
        return Err(usage_error(format!(
            "{} is not distributed through npm: install it from its vendor, then `babysitter harness:install-plugin {}`",
            h.label(),
            h.key()
        )));
    };
    let spec = format!("{package}@{version}");
    let prefix = cli
        .args
        .value("--prefix")
        .map(|d| paths::resolve(&cli.cwd, d));
    let mut args = vec!["install".to_owned()];
    match &prefix {
        Some(p) => args.extend(["--prefix".to_owned(), p.display().to_string()]),
        None => args.push("-g".to_owned()),
    }
    args.push(spec.clone());
    let command = format!("npm {}", args.join(" "));
    let location = prefix.as_ref().map(|p| {
        p.join("node_modules/.bin")
            .join(h.binary())
            .display()
            .to_string()
    });
    if cli.args.dry_run() {
        let v = json!({"harness": h.key(), "status": "planned", "success": true,
                       "command": command, "location": location});
        show(
            cli,
            &v,
            &["Status: planned".to_owned(), format!("Command: {command}")],
        );
        return Ok(0);
    }
    let out = tokio::process::Command::new("npm")
        .args(&args)
        .current_dir(&cli.cwd)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output()
        .await;
    let (ok, output) = match out {
        Ok(o) => (
            o.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
            .trim()
            .to_owned(),
        ),
        Err(e) => (false, format!("cannot run npm: {e}")),
    };
    let status = if ok { "installed" } else { "failed" };
    let v = json!({"harness": h.key(), "status": status, "success": ok, "command": command,
                   "output": output, "location": location});
    let mut lines = vec![format!("Status: {status}"), format!("Command: {command}")];
    if !output.is_empty() {
        lines.push(output);
    }
    if let Some(l) = &location {
        lines.push(format!("Location: {l}"));
    }
    show(cli, &v, &lines);
    Ok(if ok { 0 } else { 1 })
}
