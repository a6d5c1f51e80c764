//! babysitter's structured log files (`~/.a5c/logs/<runId>/process.log` and its siblings): one
//! JSON object per line, keys in the reference's order (`ts, level, type, label, msg, runId,
//! processId, source`), empty fields left out. The engine appends `ctx.log` lines here when
//! [`super::EngineOptions::process_log_dir`] is set (the CLI, a drop-in for babysitter's); the
//! service logs them through `tracing` instead. The CLI's `log` command writes the same records.

use std::io::Write as _;
use std::path::Path;

use serde_json::{Map, Value};

/// One log line (with its `\n`): the given string fields in this order, absent or empty ones
/// left out (the reference tests them for truthiness). A flat map of strings is written by
/// `serde_json` exactly as `JSON.stringify` writes it.
pub fn record(fields: &[(&str, Option<&str>)]) -> String {
    let mut m = Map::new();
    for (k, v) in fields {
        if let Some(v) = v.filter(|v| !v.is_empty()) {
            m.insert((*k).to_owned(), Value::String(v.to_owned()));
        }
    }
    let mut line = Value::Object(m).to_string();
    line.push('\n');
    line
}

/// Appends whole lines to `path` in one write (appends from concurrent writers do not
/// interleave within a line), creating the directories on the way.
pub fn append(path: &Path, lines: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?
        .write_all(lines.as_bytes())
}

/// The `process.log` lines of a drive's new `ctx.log` calls.
pub(crate) fn ctx_log_lines<'a>(
    run_id: &str,
    process_id: &str,
    lines: impl Iterator<Item = (Option<&'a str>, &'a str)>,
    ts: &str,
) -> String {
    lines
        .map(|(label, msg)| {
            record(&[
                ("ts", Some(ts)),
                ("level", Some("info")),
                ("type", Some("process")),
                ("label", label),
                ("msg", Some(msg)),
                ("runId", Some(run_id)),
                ("processId", Some(process_id)),
                ("source", Some("ctx.log")),
            ])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_keep_the_reference_key_order_and_drop_empty_fields() {
        let line = record(&[
            ("ts", Some("t")),
            ("level", Some("info")),
            ("label", Some("")),
            ("msg", Some("m \"q\"\n")),
            ("runId", None),
            ("source", Some("s")),
        ]);
        assert_eq!(
            line,
            "{\"ts\":\"t\",\"level\":\"info\",\"msg\":\"m \\\"q\\\"\\n\",\"source\":\"s\"}\n"
        );
    }

    #[test]
    fn appends_whole_lines_and_creates_the_directories() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r1").join("process.log");
        append(&path, "a\n").unwrap();
        append(
            &path,
            &ctx_log_lines("r1", "p", [(Some("L"), "m")].into_iter(), "t"),
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "a\n{\"ts\":\"t\",\"level\":\"info\",\"type\":\"process\",\"label\":\"L\",\"msg\":\"m\",\"runId\":\"r1\",\"processId\":\"p\",\"source\":\"ctx.log\"}\n"
        );
    }
}
