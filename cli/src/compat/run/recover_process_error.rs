//! `run:recover-process-error <runDir> [--patch-effect <effectId>:<dot.path>=<json>] [--dry-run]
//! [--json]` (spec §2.10, §5.3.6): lets a run whose process threw (`PROCESS_RUNTIME_ERROR`, a
//! terminal event) be iterated again once the cause is fixed — usually a task result the process
//! could not digest, which `--patch-effect` corrects in `tasks/<effectId>/result.json`. The latest
//! `PROCESS_RUNTIME_ERROR` is removed by rewriting the journal (old one kept as
//! `journal.process-error.bak.<ms>/`), then the state cache is rebuilt
//! (`process_error_recovery`).
//!
//! Everything is validated before anything is written: the patch syntax, the effect id (one path
//! segment: no way out of `tasks/`), the result file and the patch's applicability. Differences
//! from the reference (`docs/compatibility.md`): the swap holds every writer lock of the run; a
//! patch of the stored value updates both copies babysitter keeps in `result.json` (`value` and
//! `result`, F11) so every reader sees it.

use std::path::{Path, PathBuf};

use babysitter_journal::{EventType, StoredEvent, node_json};
use serde_json::{Map, Value, json};

use super::rewrite::{self, RawEvent};
use crate::compat::cli::Cli;
use crate::compat::output;
use crate::compat::output::io_message;
use crate::compat::run_dir::{Run, rebuilt_metadata};

const CMD: &str = "run:recover-process-error";

/// A parsed `--patch-effect`.
#[derive(Debug, Clone, PartialEq)]
pub struct Patch {
    pub effect_id: String,
    pub path: Vec<String>,
    pub value: Value,
}

/// `<effectId>:<seg>[.<seg>…]=<json>`, segments `[A-Za-z0-9_-]+`.
pub fn parse_patch(raw: &str) -> Result<Patch, String> {
    let shape = || "--patch-effect must use <effectId>:<jsonPath>=<json>".to_owned();
    let (effect_id, rest) = raw.split_once(':').ok_or_else(shape)?;
    let (path, value) = rest.split_once('=').ok_or_else(shape)?;
    if effect_id.is_empty() || path.is_empty() {
        return Err(shape());
    }
    babysitter_journal::validate_id("effect id", effect_id)
        .map_err(|e| format!("--patch-effect effect id {effect_id:?} is not valid: {e}"))?;
    let segments: Vec<String> = path
        .split('.')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let bad = segments.iter().find(|s| {
        !s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    });
    if segments.is_empty() || bad.is_some() {
        return Err(format!(
            "--patch-effect path must contain dot-separated object keys ([A-Za-z0-9_-]+), got {path:?}"
        ));
    }
    let value = serde_json::from_str(value)
        .map_err(|e| format!("--patch-effect value must be valid JSON ({e})"))?;
    Ok(Patch {
        effect_id: effect_id.to_owned(),
        path: segments,
        value,
    })
}

/// Sets `segs` inside `target` (an object), creating missing objects on the way.
fn set_path(target: &mut Value, segs: &[String], value: &Value) -> Result<(), String> {
    let Value::Object(mut cursor) = std::mem::take(target) else {
        return Err("task result artifact must contain a JSON object".into());
    };
    let result = set_in(&mut cursor, segs, value);
    *target = Value::Object(cursor);
    result
}

fn set_in(map: &mut Map<String, Value>, segs: &[String], value: &Value) -> Result<(), String> {
    let (last, init) = segs.split_last().ok_or("empty patch path")?;
    let mut cursor = map;
    for seg in init {
        let next = cursor
            .entry(seg.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        cursor = next
            .as_object_mut()
            .ok_or_else(|| format!("cannot patch through non-object path segment '{seg}'"))?;
    }
    cursor.insert(last.clone(), value.clone());
    Ok(())
}

/// The reference's rule, applied to both stored copies of the value: a path whose first segment
/// is `value`/`result`, or names no top-level key while the stored value is an object, patches
/// the stored value; anything else patches the document itself.
pub fn apply_patch(doc: &mut Value, segs: &[String], value: &Value) -> Result<(), String> {
    let Some(map) = doc.as_object_mut() else {
        return Err("task result artifact must contain a JSON object".into());
    };
    let first = segs.first().map(String::as_str).unwrap_or("");
    let (named, rest): (Option<&str>, &[String]) = match first {
        "value" | "result" => (Some(first), &segs[1..]),
        _ if map.contains_key(first) => return set_in(map, segs, value),
        _ => (None, segs),
    };
    let is_obj = |k: &str| map.get(k).is_some_and(Value::is_object);
    let targets: Vec<&str> = match named {
        Some(k) => {
            let twin = if k == "value" { "result" } else { "value" };
            let mirror = map.contains_key(twin) && (rest.is_empty() || is_obj(twin));
            [Some(k), mirror.then_some(twin)]
                .into_iter()
                .flatten()
                .collect()
        }
        None if is_obj("value") || is_obj("result") => ["value", "result"]
            .into_iter()
            .filter(|k| is_obj(k))
            .collect(),
        None => return set_in(map, segs, value),
    };
    for key in targets {
        if rest.is_empty() {
            map.insert(key.to_owned(), value.clone());
        } else {
            let slot = map
                .entry(key.to_owned())
                .or_insert_with(|| Value::Object(Map::new()));
            if !slot.is_object() {
                return Err(format!(
                    "cannot patch through non-object path segment '{key}'"
                ));
            }
            set_path(slot, rest, value)?;
        }
    }
    Ok(())
}

/// `tasks/<effectId>/result.json` with the patch applied (nothing written).
fn patched_result(run_dir: &Path, patch: &Patch) -> Result<(PathBuf, Value), String> {
    let path = run_dir
        .join("tasks")
        .join(&patch.effect_id)
        .join("result.json");
    let bytes = std::fs::read(&path).map_err(|e| io_message("open", &path, &e))?;
    let mut doc: Value = serde_json::from_slice(&bytes)
        .map_err(|e| format!("{} is not valid JSON: {e}", path.display()))?;
    apply_patch(&mut doc, &patch.path, &patch.value)
        .map_err(|e| format!("{e} (in {})", path.display()))?;
    Ok((path, doc))
}

fn latest_process_error(events: &[StoredEvent]) -> Option<&StoredEvent> {
    events
        .iter()
        .rev()
        .find(|e| e.body.kind == EventType::ProcessRuntimeError)
}

pub async fn run(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let a = &cli.args;
    let patch_arg = a.value("--patch-effect").map(str::to_owned);
    let run = match super::open_run_arg(cli, CMD, &[("patchEffect", patch_arg)]) {
        Ok((r, _)) => r,
        Err(code) => return Ok(code),
    };
    let fail = |m: String| {
        errln!("[{CMD}] {m}");
        Ok(1)
    };
    let patch = match a.value("--patch-effect").map(parse_patch).transpose() {
        Ok(p) => p,
        Err(m) => return fail(m),
    };
    // Dry runs read without locking; a real recovery reads again under the lock.
    let _guard = if a.dry_run() {
        None
    } else {
        match rewrite::lock_for_swap(cli, &run.dir).await {
            Ok(g) => Some(g),
            Err(e) => return fail(format!("{e:#}")),
        }
    };
    let events = match run.events().await {
        Ok(e) => e,
        Err(e) => {
            return fail(format!(
                "{e:#} (run run:repair-journal first if the journal is damaged)"
            ));
        }
    };
    let Some(target) = latest_process_error(&events) else {
        return fail("no PROCESS_RUNTIME_ERROR event found".into());
    };
    let patched = match patch
        .as_ref()
        .map(|p| patched_result(&run.dir, p))
        .transpose()
    {
        Ok(p) => p,
        Err(m) => return fail(m),
    };
    let dir = run.dir.display().to_string();
    let mut summary = json!({
        "runDir": dir,
        "dryRun": a.dry_run(),
        "recovered": !a.dry_run(),
        "processError": {"type": target.body.kind.as_str(), "seq": target.seq, "data": target.body.data},
        "patchedEffect": patch.as_ref().map_or(Value::Null, |p| json!({"effectId": p.effect_id, "path": p.path.join(".")})),
    });
    if a.dry_run() {
        if a.json() {
            output::line(&output::pretty(&summary));
        } else {
            output::line(&format!(
                "[{CMD}] dry-run runDir={dir} processError=#{:06}",
                target.seq
            ));
        }
        return Ok(0);
    }
    // The patched result goes first (as in the reference); its old bytes are put back if the
    // journal cannot be rewritten, so a failed recovery leaves the run as it was.
    let mut restore = None;
    if let Some((path, doc)) = &patched {
        let old = std::fs::read(path).map_err(|e| anyhow::anyhow!(io_message("open", path, &e)))?;
        let bytes = node_json::to_file_string(doc);
        if let Err(e) = babysitter_journal::fs::write_atomic(path, bytes.as_bytes()) {
            return fail(format!("{e} (nothing was changed)"));
        }
        restore = Some((path, old));
    }
    let kept: Vec<RawEvent> = events
        .iter()
        .filter(|e| e.seq != target.seq)
        .map(RawEvent::from)
        .collect();
    let backup = match rewrite::swap_journal(
        &run.dir,
        kept,
        "journal.process-error-recovered",
        "journal.process-error.bak",
    )
    .await
    {
        Ok(b) => b,
        Err(e) => {
            let restored = restore
                .map(|(path, old)| babysitter_journal::fs::write_atomic(path, &old))
                .transpose();
            let note = match restored {
                Ok(_) => "the run is unchanged".to_owned(),
                Err(r) => format!(
                    "the journal is unchanged but the patched result could not be restored: {r}"
                ),
            };
            return fail(format!("{e:#} ({note})"));
        }
    };
    // A fresh handle, so the cache is built from the rewritten journal.
    let fresh = Run::open(&run.dir).map_err(anyhow::Error::msg)?;
    let doc = fresh.write_state_cache("process_error_recovery").await?;
    summary["backupDir"] = json!(backup.display().to_string());
    summary["metadata"] = rebuilt_metadata(&doc);
    if a.json() {
        output::line(&output::pretty(&summary));
    } else {
        output::line(&format!(
            "[{CMD}] recovered runDir={dir} backupDir={}",
            backup.display()
        ));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segs(p: &str) -> Vec<String> {
        p.split('.').map(str::to_owned).collect()
    }

    #[test]
    fn patch_syntax() {
        let p = parse_patch("E1:answer.text={\"a\":1}").unwrap();
        assert_eq!(p.effect_id, "E1");
        assert_eq!(p.path, segs("answer.text"));
        assert_eq!(p.value, json!({"a": 1}));
        for bad in [
            "E1",
            ":a=1",
            "E1:=1",
            "E1:a",
            "E1:a b=1",
            "E1:a/b=1",
            "E1:a=nope",
            "..:a=1",
        ] {
            assert!(parse_patch(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn patches_both_stored_copies_of_the_value() {
        let mut doc = json!({"status": "ok", "result": {"a": 1}, "value": {"a": 1}});
        apply_patch(&mut doc, &segs("b.c"), &json!(2)).unwrap();
        assert_eq!(doc["value"], json!({"a": 1, "b": {"c": 2}}));
        assert_eq!(doc["result"], doc["value"]);
        apply_patch(&mut doc, &segs("value.a"), &json!(5)).unwrap();
        assert_eq!(doc["result"]["a"], 5);
        apply_patch(&mut doc, &segs("status"), &json!("ok2")).unwrap();
        assert_eq!(doc["status"], "ok2");
        assert!(apply_patch(&mut doc, &segs("status.x"), &json!(1)).is_err());
        let mut scalar = json!({"status": "ok", "value": 3});
        apply_patch(&mut scalar, &segs("x"), &json!(1)).unwrap();
        assert_eq!(scalar["x"], 1);
    }
}
