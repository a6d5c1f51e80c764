//! Run files (`task.json`, `result.json`, logs, `state/*`): stored the way babysitter writes
//! them — `.json` files as 2-space JSON with key order kept and a trailing newline, secrets
//! redacted — several at once, made durable together with the events appended next.

use bytes::Bytes;
use serde_json::Value;

use super::{Journal, spawn_whole};
use crate::error::{JournalError, Result};
use crate::redact::Redactor;
use crate::store::RunFile;
use crate::{node_json, validate_id};

/// A run file's content for [`Journal::put_run_contents`].
#[derive(Debug, Clone)]
pub enum RunFileContent {
    /// Stored as [`Journal::put_run_file`] stores bytes.
    Bytes(Bytes),
    /// A JSON document for a `.json` file, serialised as babysitter writes it.
    Json(Value),
}

impl Journal {
    /// Stores a run file (`tasks/<effectId>/<name>`, `state/<name>`). `.json` files must be JSON
    /// and are written the way babysitter writes them (2-space, key order kept, trailing
    /// newline); others byte for byte.
    pub async fn put_run_file(&self, run_id: &str, file: &RunFile, content: Bytes) -> Result<()> {
        validate_id("run id", run_id)?;
        let content = self.stored_form(file, content)?;
        let store = self.inner.store.clone();
        let (run_id, file) = (run_id.to_owned(), file.clone());
        spawn_whole(async move { store.put_run_file(&run_id, &file, content).await }).await
    }

    /// What is stored for a run file: `.json` files in babysitter's exact JSON form, secrets
    /// redacted.
    fn stored_form(&self, file: &RunFile, content: Bytes) -> Result<Bytes> {
        let redactor = self.inner.options.redactor.as_deref();
        if file.name().ends_with(".json") {
            let mut value: Value = serde_json::from_slice(&content).map_err(|e| {
                JournalError::invalid("run file", format!("{file} is not valid JSON: {e}"))
            })?;
            if let Some(r) = redactor {
                r.value(&mut value);
            }
            Ok(Bytes::from(node_json::to_file_string(&value)))
        } else {
            Ok(match redactor {
                Some(r) => r.bytes(content),
                None => content,
            })
        }
    }

    /// Stores several run files at once, with the same JSON rule as [`Journal::put_run_file`],
    /// for the events the caller appends next to refer to: new files may become durable only
    /// with that append (on the filesystem, one sync covers the files and the events; no event
    /// is visible before them), and a large batch may still be being written when this returns
    /// (reads through the journal wait for it; the append fails if it failed). A caller that
    /// appends nothing after them and needs them durable stores them with
    /// [`Journal::put_run_file`].
    pub async fn put_run_files(&self, run_id: &str, files: Vec<(RunFile, Bytes)>) -> Result<()> {
        let files = files
            .into_iter()
            .map(|(f, b)| (f, RunFileContent::Bytes(b)))
            .collect();
        self.put_run_contents(run_id, files).await.map(drop)
    }

    /// [`Journal::put_run_files`] for `.json` files whose documents the caller holds (the engine's
    /// `task.json`s): each is redacted and serialised once, as babysitter writes it, instead of
    /// being parsed back from bytes. Returns what was stored, in order.
    pub async fn put_run_json_files(
        &self,
        run_id: &str,
        files: Vec<(RunFile, Value)>,
    ) -> Result<Vec<Bytes>> {
        let files = files
            .into_iter()
            .map(|(f, v)| (f, RunFileContent::Json(v)))
            .collect();
        self.put_run_contents(run_id, files).await
    }

    /// Stores run files given as bytes or as JSON documents, durable by the next append (as
    /// [`Journal::put_run_files`]); returns what was stored, in order. Bytes follow [`Journal::put_run_file`]'s
    /// rule; a document (only for `.json` files) is redacted and serialised once.
    pub async fn put_run_contents(
        &self,
        run_id: &str,
        files: Vec<(RunFile, RunFileContent)>,
    ) -> Result<Vec<Bytes>> {
        validate_id("run id", run_id)?;
        let mut out = Vec::with_capacity(files.len());
        for (file, content) in files {
            let stored = match content {
                RunFileContent::Bytes(b) => self.stored_form(&file, b)?,
                RunFileContent::Json(doc) => {
                    json_file_form(&file, doc, self.inner.options.redactor.as_deref())?
                }
            };
            out.push((file, stored));
        }
        let stored = out.iter().map(|(_, b)| b.clone()).collect();
        self.store_run_files(run_id, out).await?;
        Ok(stored)
    }
}

/// What is stored for a `.json` run file given as a document: redacted, serialised once as
/// babysitter writes it.
pub(super) fn json_file_form(
    file: &RunFile,
    mut doc: Value,
    redactor: Option<&Redactor>,
) -> Result<Bytes> {
    if !file.name().ends_with(".json") {
        return Err(JournalError::invalid(
            "run file",
            format!("{file} is not a .json file"),
        ));
    }
    if let Some(r) = redactor {
        r.value(&mut doc);
    }
    Ok(Bytes::from(node_json::to_file_string(&doc)))
}
