//! Process bundles: the entry module and every file it imports, stored with the run so any
//! orchestrator replica (or a restarted one on a fresh disk) can replay it.
//!
//! Each file is a content-addressed journal blob; `run.json` carries the manifest
//! (`"processBundle": {"entryPath", "files": {"<path>": "sha256:…"}}`) and the usual
//! `entrypoint.importPath` = `process/<entryPath>`, so the engine finds the files at
//! `<runs_root>/<runId>/process/…` once [`materialize`] has written them there. Materializing is
//! idempotent and verifies every blob's hash, so a half-written cache from a crash is repaired.

use std::collections::BTreeMap;
use std::path::{Component, Path};

use babysitter_journal::Journal;
use babysitter_journal::store::BlobRef;
use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::{Result, ServiceError};

/// Where bundle files live inside a run directory.
pub const PROCESS_DIR: &str = crate::engine::BUNDLE_DIR;

/// Limits on what a client may upload.
#[derive(Debug, Clone, Copy)]
pub struct BundleLimits {
    pub max_files: usize,
    pub max_total_bytes: usize,
}

impl Default for BundleLimits {
    fn default() -> Self {
        Self {
            max_files: 1000,
            max_total_bytes: 32 * 1024 * 1024,
        }
    }
}

/// A process bundle as a client sends it.
#[derive(Debug, Clone, Default)]
pub struct Bundle {
    pub entry_path: String,
    /// `None` = `process`.
    pub export_name: Option<String>,
    pub files: Vec<(String, Bytes)>,
}

/// A bundle-relative path that cannot leave the bundle.
fn check_path(path: &str) -> Result<()> {
    let bad = |why: &str| ServiceError::invalid("process.files", format!("path `{path}` {why}"));
    if path.is_empty() {
        return Err(bad("is empty"));
    }
    if path.contains('\\') || path.contains('\0') {
        return Err(bad("must use `/` separators and no NUL"));
    }
    for c in Path::new(path).components() {
        match c {
            Component::Normal(_) => {}
            Component::CurDir => return Err(bad("must not contain `.` segments")),
            Component::ParentDir => return Err(bad("must not contain `..`")),
            Component::RootDir | Component::Prefix(_) => return Err(bad("must be relative")),
        }
    }
    Ok(())
}

impl Bundle {
    /// A bundle of one file, its entry (exporting `process`).
    pub fn single_file(path: &str, code: &[u8]) -> Self {
        Self {
            entry_path: path.to_owned(),
            export_name: None,
            files: vec![(path.to_owned(), Bytes::copy_from_slice(code))],
        }
    }

    /// Checks paths, duplicates, the entry and the limits.
    pub fn validate(&self, limits: BundleLimits) -> Result<()> {
        if self.files.is_empty() {
            return Err(ServiceError::invalid("process", "the bundle has no files"));
        }
        if self.files.len() > limits.max_files {
            return Err(ServiceError::invalid(
                "process.files",
                format!(
                    "{} files, the limit is {}",
                    self.files.len(),
                    limits.max_files
                ),
            ));
        }
        let total: usize = self.files.iter().map(|(_, c)| c.len()).sum();
        if total > limits.max_total_bytes {
            return Err(ServiceError::invalid(
                "process.files",
                format!(
                    "{total} bytes in total, the limit is {}",
                    limits.max_total_bytes
                ),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (path, _) in &self.files {
            check_path(path)?;
            if !seen.insert(path.as_str()) {
                return Err(ServiceError::invalid(
                    "process.files",
                    format!("path `{path}` appears twice"),
                ));
            }
        }
        check_path(&self.entry_path).map_err(|_| {
            ServiceError::invalid(
                "process.entry_path",
                format!("`{}` is not a relative path", self.entry_path),
            )
        })?;
        if !seen.contains(self.entry_path.as_str()) {
            return Err(ServiceError::invalid(
                "process.entry_path",
                format!("`{}` is not one of the bundle's files", self.entry_path),
            ));
        }
        if let Some(x) = &self.export_name
            && (x.is_empty()
                || !x
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$'))
        {
            return Err(ServiceError::invalid(
                "process.export_name",
                format!("`{x}` is not a JavaScript identifier"),
            ));
        }
        Ok(())
    }

    /// The manifest recorded in `run.json` (hashes computed here; blobs stored by [`store`]).
    pub fn manifest(&self) -> Value {
        let files: Map<String, Value> = self
            .files
            .iter()
            .map(|(p, c)| (p.clone(), json!(BlobRef::of(c).to_string())))
            .collect();
        json!({"entryPath": self.entry_path, "files": files})
    }

    /// sha256 hex of the entry file (`processCodeHash`).
    pub fn entry_hash(&self) -> String {
        self.files
            .iter()
            .find(|(p, _)| *p == self.entry_path)
            .map(|(_, c)| BlobRef::of(c).hex().to_owned())
            .unwrap_or_default()
    }
}

/// Stores every file of the bundle as a blob of the run.
pub async fn store(journal: &Journal, run_id: &str, bundle: &Bundle) -> Result<()> {
    for (_, content) in &bundle.files {
        journal.put_blob(run_id, content.clone()).await?;
    }
    Ok(())
}

/// Whether every blob the manifest names is stored (false: the creation that wrote the manifest
/// was cut before its bundle was; see `runs::recovery`).
pub async fn is_stored(journal: &Journal, run_id: &str, manifest: &Value) -> Result<bool> {
    for (_, blob) in manifest_files(run_id, manifest)? {
        match journal.get_blob(run_id, &blob).await {
            Ok(_) => {}
            Err(babysitter_journal::JournalError::BlobNotFound { .. }) => return Ok(false),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

/// The bundle a run's manifest names, its files read back from the run's blobs; `entry_path`
/// and `export_name` are the caller's (a subprocess run is another entry of its parent's bundle).
pub async fn load(
    journal: &Journal,
    run_id: &str,
    manifest: &Value,
    entry_path: String,
    export_name: Option<String>,
) -> Result<Bundle> {
    let mut files = Vec::new();
    for (path, blob) in manifest_files(run_id, manifest)? {
        files.push((path, journal.get_blob(run_id, &blob).await?));
    }
    Ok(Bundle {
        entry_path,
        export_name,
        files,
    })
}

/// The bundle path a subprocess's `processPath` names: as given from the bundle's root (the
/// project, as babysitter resolves it from the working directory), else from the folder of the
/// entry `from`; `.` and `..` segments are resolved, and a path that leaves the bundle, is
/// absolute, or names no file of it is an error saying which paths were tried.
pub fn resolve_entry(
    manifest: &Value,
    from: &str,
    process_path: &str,
) -> std::result::Result<String, String> {
    if process_path.is_empty() {
        return Err("processPath is empty".into());
    }
    if process_path.starts_with('/') {
        return Err(format!(
            "processPath `{process_path}` is absolute; a run on the server names it relative to the process root it was bundled from"
        ));
    }
    let known = |p: &str| manifest.get("files").and_then(|f| f.get(p)).is_some();
    let folder = from.rsplit_once('/').map_or("", |(d, _)| d);
    let mut tried = Vec::new();
    for base in ["", folder] {
        let mut parts: Vec<&str> = base.split('/').filter(|s| !s.is_empty()).collect();
        let mut escapes = false;
        for seg in process_path.split('/') {
            match seg {
                "" | "." => {}
                ".." => escapes |= parts.pop().is_none(),
                s => parts.push(s),
            }
        }
        let candidate = parts.join("/");
        if escapes {
            tried.push(format!("`{candidate}` (leaves the bundle)"));
            continue;
        }
        if known(&candidate) {
            return Ok(candidate);
        }
        if !tried.iter().any(|t| t == &format!("`{candidate}`")) {
            tried.push(format!("`{candidate}`"));
        }
    }
    Err(format!(
        "processPath `{process_path}` is not in the run's process bundle (tried {})",
        tried.join(", ")
    ))
}

/// The manifest's files: path → blob.
fn manifest_files(run_id: &str, manifest: &Value) -> Result<BTreeMap<String, BlobRef>> {
    let corrupt =
        |why: String| ServiceError::Conflict(format!("run {run_id}: processBundle {why}"));
    let files = manifest
        .get("files")
        .and_then(Value::as_object)
        .ok_or_else(|| corrupt("has no files".into()))?;
    let mut out = BTreeMap::new();
    for (path, r) in files {
        check_path(path).map_err(|e| corrupt(e.to_string()))?;
        let blob = r
            .as_str()
            .ok_or_else(|| corrupt(format!("entry `{path}` is not a blob reference")))
            .and_then(|s| BlobRef::parse(s).map_err(|e| corrupt(e.to_string())))?;
        out.insert(path.clone(), blob);
    }
    Ok(out)
}

/// Writes the run's bundle under `<runs_root>/<runId>/process/` unless already there intact.
pub async fn materialize(
    journal: &Journal,
    runs_root: &Path,
    run_id: &str,
    manifest: &Value,
) -> Result<()> {
    let dir = runs_root.join(run_id).join(PROCESS_DIR);
    for (path, blob) in manifest_files(run_id, manifest)? {
        let target = dir.join(&path);
        if let Ok(existing) = tokio::fs::read(&target).await
            && BlobRef::of(&existing) == blob
        {
            continue;
        }
        let content = journal.get_blob(run_id, &blob).await?;
        let io = |e: std::io::Error| {
            ServiceError::Journal(babysitter_journal::JournalError::io(target.display(), e))
        };
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent).await.map_err(io)?;
        }
        // Write then rename: a crash never leaves a truncated module behind.
        let tmp = target.with_extension("tmp-materialize");
        tokio::fs::write(&tmp, &content).await.map_err(io)?;
        tokio::fs::rename(&tmp, &target).await.map_err(io)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle(files: &[(&str, &str)], entry: &str) -> Bundle {
        Bundle {
            entry_path: entry.into(),
            export_name: None,
            files: files
                .iter()
                .map(|(p, c)| ((*p).to_owned(), Bytes::from((*c).to_owned())))
                .collect(),
        }
    }

    #[test]
    fn a_subprocess_entry_is_found_from_the_root_then_from_the_parents_folder() {
        let manifest = json!({"entryPath": "procs/main.mjs", "files": {
            "procs/main.mjs": "x", "procs/child.mjs": "x", "lib/other.mjs": "x"}});
        let r = |p: &str| resolve_entry(&manifest, "procs/main.mjs", p);
        assert_eq!(r("procs/child.mjs").unwrap(), "procs/child.mjs");
        assert_eq!(r("./procs/child.mjs").unwrap(), "procs/child.mjs");
        assert_eq!(r("child.mjs").unwrap(), "procs/child.mjs");
        assert_eq!(r("./child.mjs").unwrap(), "procs/child.mjs");
        assert_eq!(r("../lib/other.mjs").unwrap(), "lib/other.mjs");
        let e = r("missing.mjs").unwrap_err();
        assert!(e.contains("`missing.mjs`, `procs/missing.mjs`"), "{e}");
        assert!(r("../../x.mjs").unwrap_err().contains("leaves the bundle"));
        assert!(r("/abs/child.mjs").unwrap_err().contains("absolute"));
        assert!(r("").unwrap_err().contains("empty"));
    }

    #[test]
    fn refuses_paths_that_leave_the_bundle() {
        let limits = BundleLimits::default();
        for bad in [
            "../x.mjs",
            "/etc/passwd",
            "a/../../b",
            "./a.mjs",
            "a\\b.mjs",
            "",
        ] {
            let b = bundle(&[("main.mjs", "x"), (bad, "y")], "main.mjs");
            let err = b.validate(limits).unwrap_err().to_string();
            assert!(err.contains("process.files"), "{bad}: {err}");
        }
        let b = bundle(&[("main.mjs", "x")], "other.mjs");
        assert!(
            b.validate(limits)
                .unwrap_err()
                .to_string()
                .contains("entry_path")
        );
        let b = bundle(&[("main.mjs", "x"), ("main.mjs", "y")], "main.mjs");
        assert!(
            b.validate(limits)
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
        let b = bundle(&[("main.mjs", "xx")], "main.mjs");
        let tight = BundleLimits {
            max_files: 10,
            max_total_bytes: 1,
        };
        assert!(b.validate(tight).unwrap_err().to_string().contains("limit"));
        bundle(&[("main.mjs", "x"), ("lib/a.mjs", "y")], "main.mjs")
            .validate(limits)
            .unwrap();
    }

    #[tokio::test]
    async fn materializes_verified_files_and_repairs_damage() {
        let backend = babysitter_journal::config::open_store(
            &babysitter_journal::config::StoreConfig {
                url: "memory://".into(),
                ..Default::default()
            },
            &Default::default(),
            &babysitter_common::EnvMap::new(),
        )
        .await
        .unwrap();
        let journal = Journal::new(backend, Default::default());
        let id = "01JBUNDLE000000000000000000";
        journal
            .create_run(
                id,
                babysitter_journal::store::RunFiles {
                    run_json: json!({"runId": id}),
                    inputs_json: None,
                },
            )
            .await
            .unwrap();
        let b = bundle(&[("main.mjs", "export {}"), ("lib/a.mjs", "a")], "main.mjs");
        store(&journal, id, &b).await.unwrap();
        let root = tempfile::tempdir().unwrap();
        materialize(&journal, root.path(), id, &b.manifest())
            .await
            .unwrap();
        let lib = root.path().join(id).join("process/lib/a.mjs");
        assert_eq!(std::fs::read_to_string(&lib).unwrap(), "a");
        std::fs::write(&lib, "tampered").unwrap();
        materialize(&journal, root.path(), id, &b.manifest())
            .await
            .unwrap();
        assert_eq!(std::fs::read_to_string(&lib).unwrap(), "a");
        assert_eq!(b.entry_hash().len(), 64);
    }
}
