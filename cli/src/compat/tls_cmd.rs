//! `babysitter tls:generate --out DIR NAME[=SAN,SAN…]…`: a private CA and one certificate per
//! service for a deployment that has none yet (the compose stack's first start, a trial
//! cluster). The generation itself is `babysitter_common::tls::generate`, which the tests use
//! too. Idempotent: a directory that already holds everything is left as it is.

use serde_json::json;

use super::cli::Cli;
use super::plugin_cmds::usage_error;
use super::{output, paths};
use babysitter_common::tls::generate::{Generated, Leaf, generate};

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let out = cli
        .args
        .value("--out")
        .map(|d| paths::resolve(&cli.cwd, d))
        .ok_or_else(|| usage_error("tls:generate needs --out <dir>".into()))?;
    if cli.args.positionals.is_empty() {
        return Err(usage_error(
            "tls:generate needs at least one NAME (a service's host name; NAME=SAN,SAN… adds names)"
                .into(),
        ));
    }
    let leaves: Vec<Leaf> = cli
        .args
        .positionals
        .iter()
        .map(|p| match p.split_once('=') {
            Some((name, extra)) => {
                let extra: Vec<String> = extra
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect();
                Leaf::for_host(name, &extra)
            }
            None => Leaf::for_host(p, &[]),
        })
        .collect();
    if let Some(bad) = leaves.iter().find(|l| {
        l.file_stem.is_empty() || l.file_stem.contains(['/', '\\']) || l.file_stem.starts_with('.')
    }) {
        return Err(usage_error(format!(
            "`{}` cannot name a certificate file",
            bad.file_stem
        )));
    }
    let generated = generate(&out, &leaves).map_err(|e| usage_error(e.to_string()))?;
    let (written, line) = match &generated {
        Generated::AlreadyThere => (
            Vec::new(),
            format!(
                "{} already holds every certificate asked for",
                out.display()
            ),
        ),
        Generated::Wrote(files) => (
            files.clone(),
            format!(
                "wrote a CA and {} certificates to {}",
                leaves.len(),
                out.display()
            ),
        ),
    };
    if cli.args.json() {
        output::line(&output::pretty(&json!({
            "out": out.display().to_string(),
            "written": written.iter().map(|p| p.display().to_string()).collect::<Vec<_>>(),
        })));
    } else {
        output::line(&line);
    }
    Ok(0)
}
