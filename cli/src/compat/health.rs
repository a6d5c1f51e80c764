//! `health` (spec §5.5): `{status, timestamp, checks[], summary, nextSteps}` in the reference's
//! shape. The checks are this implementation's: the SDK format version it writes, its embedded
//! process engine (no Node.js needed), the project `.a5c` directory, the runs directory, and the
//! babysitter environment variables. Exit 1 only when unhealthy.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::compat::cli::{Cli, SDK_VERSION};
use crate::compat::output;
use crate::compat::paths;

struct Check {
    name: &'static str,
    description: &'static str,
    status: &'static str,
    message: String,
    next_steps: Vec<String>,
    details: Option<Value>,
}

impl Check {
    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), json!(self.name));
        m.insert("description".into(), json!(self.description));
        m.insert("status".into(), json!(self.status));
        m.insert("message".into(), json!(self.message));
        if !self.next_steps.is_empty() {
            m.insert("nextSteps".into(), json!(self.next_steps));
        }
        if let Some(d) = &self.details {
            m.insert("details".into(), d.clone());
        }
        Value::Object(m)
    }
}

fn writable(dir: &Path) -> bool {
    let probe = dir.join(format!(".health-check-test-{}", std::process::id()));
    let ok = std::fs::write(&probe, b"test").is_ok();
    let _ = std::fs::remove_file(&probe);
    ok
}

fn a5c_directory(cwd: &Path) -> Check {
    let dir = cwd.join(".a5c");
    let description = ".a5c directory exists and is writable";
    match std::fs::metadata(&dir) {
        Ok(m) if !m.is_dir() => Check {
            name: "a5c-directory",
            description,
            status: "fail",
            message: format!(".a5c exists but is not a directory at {}", dir.display()),
            next_steps: vec!["Remove the .a5c file and let babysitter create the directory".into()],
            details: Some(json!({"path": dir.display().to_string(), "isDirectory": false})),
        },
        Ok(_) if !writable(&dir) => Check {
            name: "a5c-directory",
            description,
            status: "fail",
            message: format!(
                ".a5c directory exists but is not writable at {}",
                dir.display()
            ),
            next_steps: vec!["Check file permissions on the .a5c directory".into()],
            details: Some(json!({"path": dir.display().to_string(), "writable": false})),
        },
        Ok(_) => Check {
            name: "a5c-directory",
            description,
            status: "pass",
            message: format!(".a5c directory is ready at {}", dir.display()),
            next_steps: vec![],
            details: Some(json!({"path": dir.display().to_string(), "writable": true})),
        },
        Err(_) => Check {
            name: "a5c-directory",
            description,
            status: "warn",
            message: format!(".a5c directory does not exist at {}", dir.display()),
            next_steps: vec![
                "The directory will be created automatically when running babysitter commands"
                    .into(),
                "Or create it manually: mkdir -p .a5c".into(),
            ],
            details: Some(json!({"path": dir.display().to_string(), "exists": false})),
        },
    }
}

fn runs_directory(runs_dir: &Path) -> Check {
    let description = "runs directory is usable";
    let details = json!({"path": runs_dir.display().to_string()});
    match std::fs::metadata(runs_dir) {
        Ok(m) if m.is_dir() && writable(runs_dir) => Check {
            name: "runs-directory",
            description,
            status: "pass",
            message: format!("runs are stored in {}", runs_dir.display()),
            next_steps: vec![],
            details: Some(details),
        },
        Ok(_) => Check {
            name: "runs-directory",
            description,
            status: "fail",
            message: format!("{} is not a writable directory", runs_dir.display()),
            next_steps: vec![
                "Fix the permissions, or point BABYSITTER_RUNS_DIR / --runs-dir elsewhere".into(),
            ],
            details: Some(details),
        },
        Err(_) => Check {
            name: "runs-directory",
            description,
            status: "pass",
            message: format!(
                "{} does not exist yet; run:create creates it",
                runs_dir.display()
            ),
            next_steps: vec![],
            details: Some(details),
        },
    }
}

fn environment(cli: &Cli<'_>, runs_dir: &Path) -> Check {
    let env = cli.env;
    let mut problems = Vec::new();
    if let Some(v) = env.get_non_empty("BABYSITTER_MAX_ITERATIONS")
        && v.trim().parse::<u64>().map_or(true, |n| n == 0)
    {
        problems.push(format!(
            "BABYSITTER_MAX_ITERATIONS={v} (must be a positive integer)"
        ));
    }
    if let Some(v) = env.get_non_empty("BABYSITTER_LOG_LEVEL")
        && !["debug", "info", "warn", "error", "silent"].contains(&v.to_lowercase().as_str())
    {
        problems.push(format!(
            "BABYSITTER_LOG_LEVEL={v} (must be one of: debug, info, warn, error, silent)"
        ));
    }
    let scope = match paths::runs_scope(env) {
        paths::Scope::Repo => "repo",
        paths::Scope::Global => "global",
    };
    let details = json!({
        "BABYSITTER_RUNS_DIR": env.get("BABYSITTER_RUNS_DIR"),
        "BABYSITTER_RUNS_SCOPE": env.get("BABYSITTER_RUNS_SCOPE"),
        "runsScope": scope,
        "runsDir": runs_dir.display().to_string(),
    });
    if problems.is_empty() {
        Check {
            name: "environment-variables",
            description: "Environment variables are valid",
            status: "pass",
            message: "All babysitter environment variables are valid".into(),
            next_steps: vec![],
            details: Some(details),
        }
    } else {
        Check {
            name: "environment-variables",
            description: "Environment variables are valid",
            status: "warn",
            message: problems.join("; "),
            next_steps: vec!["Fix or unset the variables named above".into()],
            details: Some(details),
        }
    }
}

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let runs_dir = cli.runs_dir();
    let checks = vec![
        Check {
            name: "sdk-version",
            description: "SDK CLI version is accessible",
            status: "pass",
            message: format!("SDK version {SDK_VERSION}"),
            next_steps: vec![],
            details: Some(json!({
                "version": SDK_VERSION, "implementation": "babysitter-rs",
                "implementationVersion": env!("CARGO_PKG_VERSION"),
            })),
        },
        Check {
            name: "process-engine",
            description: "Process engine is available",
            status: "pass",
            message: "embedded QuickJS engine (Node.js is not required)".into(),
            next_steps: vec![],
            details: None,
        },
        a5c_directory(&cli.cwd),
        runs_directory(&runs_dir),
        environment(cli, &runs_dir),
    ];
    let count = |s: &str| checks.iter().filter(|c| c.status == s).count();
    let (passed, failed, warnings) = (count("pass"), count("fail"), count("warn"));
    let status = if failed > 0 {
        "unhealthy"
    } else if warnings > 0 {
        "degraded"
    } else {
        "healthy"
    };
    let next_steps: Vec<String> = checks
        .iter()
        .filter(|c| c.status != "pass")
        .flat_map(|c| c.next_steps.clone())
        .collect();
    if cli.args.json() {
        output::line(&output::pretty(&json!({
            "status": status,
            "timestamp": babysitter_journal::journal::now_iso(),
            "checks": checks.iter().map(Check::to_json).collect::<Vec<_>>(),
            "summary": {"total": checks.len(), "passed": passed, "failed": failed, "warnings": warnings},
            "nextSteps": next_steps,
        })));
    } else {
        output::line("");
        output::line(&format!(
            "Babysitter SDK Health Check: {}",
            status.to_uppercase()
        ));
        output::line("");
        for c in &checks {
            let symbol = match c.status {
                "pass" => "[PASS]",
                "fail" => "[FAIL]",
                _ => "[WARN]",
            };
            output::line(&format!("  {symbol} {}", c.description));
            if cli.args.verbose() || c.status != "pass" {
                output::line(&format!("      {}", c.message));
            }
        }
        output::line("");
        output::line(&format!(
            "Summary: {passed} passed, {failed} failed, {warnings} warnings"
        ));
        if !next_steps.is_empty() {
            output::line("");
            output::line("Next Steps:");
            for s in &next_steps {
                output::line(&format!("  - {s}"));
            }
        }
        output::line("");
    }
    Ok(if status == "unhealthy" { 1 } else { 0 })
}
