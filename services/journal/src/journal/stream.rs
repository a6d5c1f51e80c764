//! Run files stored while they are still being produced ([`Journal::stream_run_json_files`]).
//!
//! A fan-out iteration asks for hundreds of effects, each with its `task.json` (a directory and
//! a file). Written after the process had run, all of that file work came after all of the JS,
//! one after the other. Streamed, each file is written as the process asks for it, on a thread
//! of its own, by the store's [`RunFileWriter`] — which also gets the disk started on making
//! them durable meanwhile — and the commit that follows has only the rest to wait for.

use std::sync::Arc;
use std::sync::mpsc;

use bytes::Bytes;
use serde_json::Value;
use tokio::sync::oneshot;

use super::Journal;
use super::run_files::json_file_form;
use crate::error::{JournalError, Result};
use crate::redact::Redactor;
use crate::store::{RunFile, RunFileWriter};
use crate::validate_id;

impl Journal {
    /// Starts storing `.json` run files for the run's next commit while the caller is still
    /// producing them ([`RunFileStream`]).
    pub fn stream_run_json_files(&self, run_id: &str) -> Result<RunFileStream> {
        validate_id("run id", run_id)?;
        let Some(writer) = self.inner.store.run_file_writer(run_id)? else {
            return Ok(RunFileStream::collecting(self, run_id));
        };
        let (tx, rx) = mpsc::channel::<Streamed>();
        let (done_tx, done) = oneshot::channel();
        let writing = Writing {
            writer,
            redactor: self.inner.options.redactor.clone(),
            stored: Vec::new(),
            failed: None,
        };
        let spawned = std::thread::Builder::new()
            .name("journal-stream".into())
            .spawn(move || {
                if let Some(outcome) = writing.run(&rx) {
                    let _ = done_tx.send(outcome);
                }
            });
        Ok(match spawned {
            Ok(_) => RunFileStream {
                mode: Mode::Writing { tx, done },
            },
            // No thread to be had: collect them and store them at the end.
            Err(_) => RunFileStream::collecting(self, run_id),
        })
    }
}

/// `.json` run files handed over one at a time, stored for the run's next commit — written as
/// they come where the store can ([`crate::store::JournalStore::run_file_writer`]), else all
/// together by [`RunFileStream::finish`]. Dropped before `finish`, it stores nothing (what was
/// written is removed).
#[derive(Debug)]
pub struct RunFileStream {
    mode: Mode,
}

#[derive(Debug)]
enum Mode {
    /// A thread of its own writes each file as it comes.
    Writing {
        tx: mpsc::Sender<Streamed>,
        done: oneshot::Receiver<Result<Vec<Bytes>>>,
    },
    /// Kept until [`RunFileStream::finish`] stores them with [`Journal::put_run_json_files`].
    Collecting {
        journal: Journal,
        run_id: String,
        files: Vec<(RunFile, Value)>,
    },
}

#[derive(Debug)]
enum Streamed {
    File(RunFile, Value),
    Finish,
}

impl RunFileStream {
    fn collecting(journal: &Journal, run_id: &str) -> Self {
        Self {
            mode: Mode::Collecting {
                journal: journal.clone(),
                run_id: run_id.to_owned(),
                files: Vec::new(),
            },
        }
    }

    /// Hands over one file (a `.json` file). Never waits; a failure to store it is reported by
    /// [`RunFileStream::finish`].
    pub fn push(&mut self, file: RunFile, doc: Value) {
        match &mut self.mode {
            // The writer thread holds the receiver until told to finish.
            Mode::Writing { tx, .. } => drop(tx.send(Streamed::File(file, doc))),
            Mode::Collecting { files, .. } => files.push((file, doc)),
        }
    }

    /// Stores nothing: waits until what was written is removed (dropping the stream removes it
    /// too, without waiting).
    pub async fn abandon(self) {
        if let Mode::Writing { tx, done } = self.mode {
            drop(tx);
            // The writer thread drops (and so cleans up) its writer before its end of `done`.
            let _ = done.await;
        }
    }

    /// Waits until every file handed over is stored for the run's next commit, as
    /// [`Journal::put_run_json_files`] stores them; returns what was stored, in order. On error,
    /// none of them is left for an event to refer to.
    pub async fn finish(self) -> Result<Vec<Bytes>> {
        match self.mode {
            Mode::Writing { tx, done } => {
                let _ = tx.send(Streamed::Finish);
                done.await.unwrap_or_else(|_| {
                    let e = std::io::Error::other("run file writer thread ended early");
                    Err(JournalError::io("journal-stream", e))
                })
            }
            Mode::Collecting {
                journal,
                run_id,
                files,
            } => {
                if files.is_empty() {
                    return Ok(Vec::new());
                }
                journal.put_run_json_files(&run_id, files).await
            }
        }
    }
}

/// The writer thread's state.
struct Writing {
    writer: Box<dyn RunFileWriter>,
    redactor: Option<Arc<Redactor>>,
    stored: Vec<Bytes>,
    failed: Option<JournalError>,
}

impl Writing {
    /// Each file as it comes, the writer told when none is waiting; closed on
    /// [`Streamed::Finish`], dropped (what it wrote removed) when the stream is dropped first or
    /// a file failed. `None`: nobody waits for the outcome.
    fn run(mut self, rx: &mpsc::Receiver<Streamed>) -> Option<Result<Vec<Bytes>>> {
        loop {
            let next = match rx.try_recv() {
                Ok(m) => Ok(m),
                Err(mpsc::TryRecvError::Empty) => {
                    if self.failed.is_none()
                        && let Err(e) = self.writer.idle()
                    {
                        self.failed = Some(e);
                    }
                    rx.recv()
                }
                Err(mpsc::TryRecvError::Disconnected) => Err(mpsc::RecvError),
            };
            match next {
                Ok(Streamed::File(file, doc)) => {
                    if self.failed.is_some() {
                        continue;
                    }
                    let written = json_file_form(&file, doc, self.redactor.as_deref())
                        .and_then(|bytes| self.writer.write(&file, &bytes).map(|()| bytes));
                    match written {
                        Ok(bytes) => self.stored.push(bytes),
                        Err(e) => self.failed = Some(e),
                    }
                }
                Ok(Streamed::Finish) => {
                    return Some(match self.failed {
                        Some(e) => Err(e),
                        None => self.writer.close().map(|()| self.stored),
                    });
                }
                Err(mpsc::RecvError) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {

    /// The runs root inside a test's temporary directory: a runs root's parent receives babysitter's
    /// `package.json`, which must land in the temporary directory, not in `/tmp`.
    fn runs(dir: &tempfile::TempDir) -> std::path::PathBuf {
        dir.path().join("runs")
    }

    use std::path::Path;

    use serde_json::json;

    use super::*;
    use crate::JournalOptions;
    use crate::store::RunFiles;

    async fn journal_with_run(store: Arc<dyn crate::JournalStore>) -> Journal {
        let j = Journal::new(store, JournalOptions::default());
        let files = RunFiles {
            run_json: json!({"runId": "r1"}),
            inputs_json: None,
        };
        j.create_run("r1", files).await.unwrap();
        j
    }

    fn doc(i: usize) -> Value {
        json!({"effectId": format!("E{i}"), "title": format!("step {i}"), "z": 1, "a": [i]})
    }

    fn task(i: usize) -> RunFile {
        RunFile::task(&format!("E{i}"), "task.json").unwrap()
    }

    /// Streamed files are stored as `put_run_json_files` stores them — the bytes it returns and
    /// those on disk alike — whether the store writes them as they come (files) or at the end
    /// (objects).
    #[tokio::test]
    async fn streamed_files_are_stored_as_a_batch_would_be() {
        let dir = tempfile::tempdir().unwrap();
        let stores: Vec<Arc<dyn crate::JournalStore>> = vec![
            Arc::new(crate::fs::FsStore::new(runs(&dir))),
            Arc::new(crate::object::ObjectJournal::new(
                Arc::new(object_store::memory::InMemory::new()),
                "",
                "memory://",
                1 << 20,
            )),
        ];
        for store in stores {
            let j = journal_with_run(store).await;
            let mut stream = j.stream_run_json_files("r1").unwrap();
            for i in 0..40 {
                stream.push(task(i), doc(i));
            }
            let stored = stream.finish().await.unwrap();
            assert_eq!(stored.len(), 40);
            // The same documents as one batch, under other names.
            let batch: Vec<(RunFile, Value)> = (0..40)
                .map(|i| {
                    (
                        RunFile::task(&format!("B{i}"), "task.json").unwrap(),
                        doc(i),
                    )
                })
                .collect();
            let expected = j.put_run_json_files("r1", batch).await.unwrap();
            assert_eq!(stored, expected);
            for (i, bytes) in stored.iter().enumerate() {
                assert_eq!(&j.get_run_file("r1", &task(i)).await.unwrap(), bytes);
            }
        }
    }

    /// An abandoned stream leaves nothing behind: no file, no directory it made, and no temp
    /// file where a file it would have replaced stands untouched.
    #[tokio::test]
    async fn an_abandoned_stream_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let j = journal_with_run(Arc::new(crate::fs::FsStore::new(runs(&dir)))).await;
        j.put_run_json_files("r1", vec![(task(0), json!({"kept": true}))])
            .await
            .unwrap();
        let before = std::fs::read(runs(&dir).join("r1/tasks/E0/task.json")).unwrap();
        let mut stream = j.stream_run_json_files("r1").unwrap();
        for i in 0..50 {
            stream.push(task(i), doc(i));
        }
        stream.abandon().await;
        let tasks: Vec<String> = std::fs::read_dir(runs(&dir).join("r1/tasks"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(tasks, vec!["E0".to_owned()]);
        let e0: Vec<String> = std::fs::read_dir(runs(&dir).join("r1/tasks/E0"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(e0, vec!["task.json".to_owned()]);
        assert_eq!(
            std::fs::read(runs(&dir).join("r1/tasks/E0/task.json")).unwrap(),
            before
        );
    }

    /// A file that cannot be written fails the stream at its end, and what was written before
    /// it is removed: nothing is left for an event to refer to.
    #[tokio::test]
    async fn a_failed_file_fails_the_stream_and_takes_the_others_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let j = journal_with_run(Arc::new(crate::fs::FsStore::new(runs(&dir)))).await;
        // `tasks/E3` is a regular file: `tasks/E3/task.json` cannot be made.
        std::fs::create_dir_all(runs(&dir).join("r1/tasks")).unwrap();
        std::fs::write(runs(&dir).join("r1/tasks/E3"), b"x").unwrap();
        let mut stream = j.stream_run_json_files("r1").unwrap();
        for i in 0..6 {
            stream.push(task(i), doc(i));
        }
        let err = stream.finish().await.unwrap_err();
        assert!(err.to_string().contains("E3"), "{err}");
        let left: Vec<String> = std::fs::read_dir(runs(&dir).join("r1/tasks"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, vec!["E3".to_owned()]);
        assert!(!Path::new(&runs(&dir).join("r1/tasks/E0")).is_dir());
    }
}
