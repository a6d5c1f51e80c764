//! The process bundle a run on an orchestrator is created from: the files the server needs to
//! load the process exactly as it loads on this machine. `run:create --server` and
//! `babysitter run --server` upload it.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use babysitter_proto::orchestrator::v1 as pb;

/// The process for a run on the server: every module or JSON file under the entry's folder and
/// every file module the entry imports from elsewhere in its project (the engine's entry check
/// loads it and names them: a library process's `../common-utilities/…`), by path relative to the
/// process root, so the server loads it exactly as it loads here. A module that does not load
/// here is sent with its folder alone: the server reports its error as the run's.
pub async fn bundle(entry: &str) -> anyhow::Result<pb::ProcessBundle> {
    let (path, export) = match entry.rsplit_once('#') {
        Some((p, x)) => (p, x.to_owned()),
        None => (entry, String::new()),
    };
    let entry = Path::new(path)
        .canonicalize()
        .with_context(|| format!("process file {path} cannot be opened"))?;
    let folder = entry
        .parent()
        .context("the process file has no folder")?
        .to_owned();
    let export_name = (!export.is_empty()).then_some(export.as_str());
    let (root, imported) = match babysitter_engine::check_entry(&entry, export_name, None).await {
        Ok(check) => (check.root, check.modules),
        Err(_) => (folder.clone(), Vec::new()),
    };
    let mut files: std::collections::BTreeMap<String, Vec<u8>> = Default::default();
    let mut stack = vec![folder];
    while let Some(dir) = stack.pop() {
        for e in
            std::fs::read_dir(&dir).with_context(|| format!("cannot list {}", dir.display()))?
        {
            let p = e?.path();
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if p.is_dir() {
                if name != "node_modules" && !name.starts_with('.') {
                    stack.push(p);
                }
                continue;
            }
            let ext = p.extension().and_then(|x| x.to_str()).unwrap_or_default();
            if matches!(ext, "js" | "mjs" | "cjs" | "json") {
                let content =
                    std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))?;
                files.insert(relative(&root, &p)?, content);
            }
        }
    }
    for (name, p) in imported {
        if let std::collections::btree_map::Entry::Vacant(slot) = files.entry(name) {
            slot.insert(std::fs::read(&p).with_context(|| format!("cannot read {}", p.display()))?);
        }
    }
    Ok(pb::ProcessBundle {
        entry_path: relative(&root, &entry)?,
        export_name: export,
        files: files
            .into_iter()
            .map(|(path, content)| pb::ProcessFile {
                path,
                content: content.into(),
            })
            .collect(),
    })
}

fn relative(root: &Path, p: &Path) -> anyhow::Result<String> {
    let rel: PathBuf = p.strip_prefix(root)?.to_owned();
    rel.to_str()
        .map(|s| s.replace('\\', "/"))
        .ok_or_else(|| anyhow!("{} is not UTF-8", rel.display()))
}
