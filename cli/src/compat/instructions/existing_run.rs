//! `existingRun` of `instructions:*` (the reference's `detectExistingRun`): the newest run of
//! the default runs root that is still going and belongs to this project, so the agent
//! continues it instead of creating an overlapping one.
//!
//! As the reference: the 25 newest run directories (by name, ULIDs sort by time) are looked at,
//! a run whose `run.json` records another `cwd` is skipped (the global runs root is shared by
//! every project), one that records none is kept. Difference: the reference calls a run
//! finished when its `run.json` has a `completionProof` — which every 6.0.0 run has from
//! creation, so it never reports one. Here a run is finished when its journal's last lifecycle
//! event is terminal (`RUN_COMPLETED` / `RUN_FAILED` / `RUN_HALTED`, as `session:cleanup`
//! judges it); a run whose journal cannot be read is not reported either.

use std::path::Path;

use serde_json::{Map, Value, json};

use crate::compat::paths;
use crate::compat::run_dir::Run;
use crate::compat::session::run_facts::run_facts;

/// How many of the newest runs are looked at.
const SCAN_WINDOW: usize = 25;

/// The live run of this project in `runs_dir`, as `{runId, runDir, processId, isBareRun,
/// entrypoint: {importPath, exportName?}}`.
pub async fn detect(runs_dir: &Path, cwd: &Path) -> Option<Value> {
    let mut ids: Vec<String> = std::fs::read_dir(runs_dir)
        .ok()?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    let cwd = paths::normalize(cwd);
    for id in ids.into_iter().take(SCAN_WINDOW) {
        let dir = runs_dir.join(&id);
        let Some(meta) = std::fs::read(dir.join("run.json"))
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            .filter(Value::is_object)
        else {
            continue;
        };
        if let Some(recorded) = meta.get("cwd").and_then(Value::as_str)
            && !recorded.is_empty()
            && paths::resolve(&cwd, recorded) != cwd
        {
            continue;
        }
        let live = match Run::open(&dir) {
            Ok(run) => run_facts(&run).await.is_ok_and(|f| !f.sealed),
            Err(_) => false,
        };
        if !live {
            continue;
        }
        let entry = meta.get("entrypoint");
        let import_path = entry
            .and_then(|e| e.get("importPath"))
            .and_then(Value::as_str)
            .unwrap_or_default();
        let mut entrypoint = Map::new();
        entrypoint.insert("importPath".into(), json!(import_path));
        if let Some(export) = entry
            .and_then(|e| e.get("exportName"))
            .filter(|v| !v.is_null())
        {
            entrypoint.insert("exportName".into(), export.clone());
        }
        return Some(json!({
            "runId": id,
            "runDir": dir.display().to_string(),
            "processId": meta.get("processId").and_then(Value::as_str).unwrap_or_default(),
            "isBareRun": import_path == "bare-run",
            "entrypoint": entrypoint,
        }));
    }
    None
}
