//! [`FencedStore`]: an in-process store whose writes are fenced by this process's own term.
//!
//! Every write that could change what a run says — creating a run, committing events, writing a
//! run file — is admitted by the [`Arbiter`] under the [`WriterTerm`]'s epoch and holds the
//! admission for the whole write; a refused write deposes the term. Reads, content-addressed
//! blobs and derived data (snapshots, the state cache: pure functions of the journal) pass
//! through. The streaming [`RunFileWriter`] passes through too: it writes new task files that
//! nothing refers to until a (fenced) commit does.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

use super::{Arbiter, Pass, WriterTerm};
use crate::Head;
use crate::error::{JournalError, Result};
use crate::event::StoredEvent;
use crate::index::ChainCheck;
use crate::store::{
    BlobRef, JournalStore, Layout, RunFile, RunFileWriter, RunFiles, Snapshot, Versioned,
};

/// A store whose writes need the current term (see the module doc).
#[derive(Debug)]
pub struct FencedStore {
    inner: Arc<dyn JournalStore>,
    arbiter: Arc<Arbiter>,
    term: Arc<WriterTerm>,
    group: String,
}

impl FencedStore {
    pub fn new(
        inner: Arc<dyn JournalStore>,
        arbiter: Arc<Arbiter>,
        term: Arc<WriterTerm>,
        group: &str,
    ) -> Self {
        Self {
            inner,
            arbiter,
            term,
            group: group.to_owned(),
        }
    }

    async fn admit(&self) -> Result<Pass> {
        let term = self.term.require(&self.group)?;
        match self.arbiter.admit(&term.group, term.epoch).await {
            Ok(pass) => Ok(pass),
            Err(e @ JournalError::Fenced { .. }) => {
                self.term.depose(term.epoch);
                Err(e)
            }
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl JournalStore for FencedStore {
    fn layout(&self) -> Layout {
        self.inner.layout()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    async fn create_run(&self, run_id: &str, files: &RunFiles) -> Result<()> {
        let _pass = self.admit().await?;
        self.inner.create_run(run_id, files).await
    }

    async fn get_run(&self, run_id: &str) -> Result<RunFiles> {
        self.inner.get_run(run_id).await
    }

    async fn commit(&self, run_id: &str, events: &[StoredEvent]) -> Result<()> {
        let _pass = self.admit().await?;
        self.inner.commit(run_id, events).await
    }

    async fn load(
        &self,
        run_id: &str,
        from: &ChainCheck,
        to: Option<u64>,
    ) -> Result<Vec<StoredEvent>> {
        self.inner.load(run_id, from, to).await
    }

    async fn head(&self, run_id: &str, hint: Option<&Head>) -> Result<Head> {
        self.inner.head(run_id, hint).await
    }

    async fn list_runs(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>> {
        self.inner.list_runs(prefix, after, limit).await
    }

    async fn put_blob(&self, run_id: &str, content: Bytes) -> Result<BlobRef> {
        self.inner.put_blob(run_id, content).await
    }

    async fn get_blob(&self, run_id: &str, blob: &BlobRef) -> Result<Bytes> {
        self.inner.get_blob(run_id, blob).await
    }

    async fn put_snapshot(&self, run_id: &str, snapshot: &Snapshot) -> Result<()> {
        self.inner.put_snapshot(run_id, snapshot).await
    }

    async fn latest_snapshot(
        &self,
        run_id: &str,
        at_most: Option<u64>,
    ) -> Result<Option<Snapshot>> {
        self.inner.latest_snapshot(run_id, at_most).await
    }

    async fn put_run_file(&self, run_id: &str, file: &RunFile, content: Bytes) -> Result<()> {
        let _pass = self.admit().await?;
        self.inner.put_run_file(run_id, file, content).await
    }

    async fn put_run_files(&self, run_id: &str, files: Vec<(RunFile, Bytes)>) -> Result<()> {
        let _pass = self.admit().await?;
        self.inner.put_run_files(run_id, files).await
    }

    async fn put_run_files_for_commit(
        &self,
        run_id: &str,
        files: Vec<(RunFile, Bytes)>,
    ) -> Result<()> {
        let _pass = self.admit().await?;
        self.inner.put_run_files_for_commit(run_id, files).await
    }

    fn run_file_writer(&self, run_id: &str) -> Result<Option<Box<dyn RunFileWriter>>> {
        self.inner.run_file_writer(run_id)
    }

    async fn get_run_file(&self, run_id: &str, file: &RunFile) -> Result<Bytes> {
        self.inner.get_run_file(run_id, file).await
    }

    async fn get_run_files(&self, run_id: &str, files: &[RunFile]) -> Result<Vec<Result<Bytes>>> {
        self.inner.get_run_files(run_id, files).await
    }

    async fn read_state_cache(&self, run_id: &str) -> Result<Option<Bytes>> {
        self.inner.read_state_cache(run_id).await
    }

    async fn write_state_cache(&self, run_id: &str, content: Bytes) -> Result<()> {
        self.inner.write_state_cache(run_id, content).await
    }

    async fn read_control(&self, name: &str) -> Result<Option<Versioned>> {
        self.inner.read_control(name).await
    }

    async fn write_control(
        &self,
        name: &str,
        content: Bytes,
        expected: Option<&str>,
    ) -> Result<String> {
        self.inner.write_control(name, content, expected).await
    }
}
