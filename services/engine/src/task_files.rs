//! A drive's new `task.json`s, handed to the journal as the process asks for them.
//!
//! A fan-out asks for hundreds of effects in one drive; writing their `task.json`s (a directory
//! and a file each) after the process had run put all of that file work — and the disk's time
//! to make it durable — after all of the JS. From the [`STREAM_FROM`]th request of a drive on,
//! the documents go to a [`RunFileStream`] instead, whose writer stores them while the process
//! goes on; the iteration's commit then waits only for the rest. A drive asking for a few
//! effects keeps them in its requests: a writer thread is not worth starting for them.

use babysitter_journal::store::RunFile;
use babysitter_journal::{Journal, JournalError, RunFileStream};

use crate::session::Request;

/// Requests in one drive from which their `task.json`s are streamed.
pub(crate) const STREAM_FROM: usize = 16;

/// Where one drive's `task.json`s go ([`super::session::Shared::task_files`]).
#[derive(Debug)]
pub struct TaskFiles {
    journal: Journal,
    run_id: String,
    stream: Option<RunFileStream>,
    /// Why streaming stopped (an effect id no run file can be named after): the iteration fails
    /// with it, as storing the files after the drive would have.
    failed: Option<JournalError>,
}

/// What a drive did with its `task.json`s.
#[derive(Debug, Default)]
pub enum Streamed {
    /// Every request still holds its document.
    #[default]
    No,
    /// Every request's document went to this stream, in request order.
    Yes(RunFileStream),
    /// Streaming failed: the iteration fails with this.
    Failed(JournalError),
}

impl TaskFiles {
    pub fn new(journal: &Journal, run_id: &str) -> Self {
        Self {
            journal: journal.clone(),
            run_id: run_id.to_owned(),
            stream: None,
            failed: None,
        }
    }

    /// Called once a request has been added to `requests` (this drive's, in order): streams its
    /// document, or all of them once there are [`STREAM_FROM`].
    pub fn requested(&mut self, requests: &mut [Request]) {
        if self.failed.is_some() {
            return;
        }
        let from = match &self.stream {
            Some(_) => requests.len().saturating_sub(1),
            None if requests.len() >= STREAM_FROM => {
                match self.journal.stream_run_json_files(&self.run_id) {
                    Ok(stream) => self.stream = Some(stream),
                    Err(e) => {
                        self.failed = Some(e);
                        return;
                    }
                }
                0
            }
            None => return,
        };
        let Some(stream) = self.stream.as_mut() else {
            return;
        };
        for r in &mut requests[from..] {
            match RunFile::task(&r.effect_id, "task.json") {
                Ok(file) => stream.push(file, std::mem::take(&mut r.task_doc)),
                Err(e) => {
                    self.failed = Some(e);
                    return;
                }
            }
        }
    }

    /// What became of the drive's documents.
    pub fn into_streamed(self) -> Streamed {
        match (self.failed, self.stream) {
            (Some(e), _) => Streamed::Failed(e),
            (None, Some(s)) => Streamed::Yes(s),
            (None, None) => Streamed::No,
        }
    }

    /// The drive is not going to be committed: waits until what was written is removed (a
    /// replay about to ask for the same effects must not race the removal).
    pub async fn abandon(self) {
        if let Some(stream) = self.stream {
            stream.abandon().await;
        }
    }
}
