//! The filesystem backend in babysitter's exact run-directory layout.
//!
//! `<root>/<runId>/{run.json, inputs.json, .gitignore, journal/, tasks/, state/, blobs/, …}`,
//! one journal file per event named `{seq:06}.{ULID}.json`, written the way Node writes it.
//!
//! Two writers must never both commit one sequence number (the reference's #191 / #77 bug:
//! two `000007.*.json`). File names carry a fresh ULID, so exclusive create alone cannot catch
//! it; every commit therefore runs under two locks:
//! 1. `flock` on the `journal/` directory — exclusion among babysitter-rs processes and threads,
//!    released by the kernel if the holder dies, so it can never go stale;
//! 2. babysitter's own `run.lock` (`O_EXCL`, `{pid, owner, acquiredAt}`, stale-pid takeover) —
//!    exclusion against the reference CLI working on the same run.
//!
//! Under both, the directory is listed to find the real head, the first new sequence number is
//! checked against it, and each event is written to a temp file, made durable and renamed into
//! place (see [`write`]). A crash mid-batch leaves a committed prefix of the batch (each file is
//! whole); the directory is fsynced once per batch.

use std::fs::{self, OpenOptions};
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Value, json};

use crate::error::{JournalError, Location, Result};
use crate::event::{StoredEvent, parse_file_name_ref};
use crate::index::ChainCheck;
use crate::node_json;
use crate::store::{
    BlobRef, JournalStore, Layout, RunFile, RunFileWriter, RunFiles, SNAPSHOT_FORMAT, Snapshot,
    Versioned,
};
use crate::{Head, validate_id};

pub(crate) mod control;
mod lock;
mod read;
mod runtime;
mod seen;
mod write;

pub use lock::{HeldRun, RunHolder, pid_alive, run_lock_holder};
pub use runtime::FsRuntime;
pub use write::write_atomic;
use write::{
    StreamedFiles, fsync_dir, join_background, write_all_atomic, write_derived, write_events,
    write_for_commit_background,
};

const GITIGNORE: &str = "state/\ntasks/*/artifacts/\nblobs/\norphaned/\n";

/// Babysitter run directories under one runs root.
#[derive(Debug, Clone)]
pub struct FsStore {
    root: PathBuf,
    /// What this process's stores share: run holds, deferred writes, commit-log settling.
    runtime: FsRuntime,
    /// How long a commit waits for the run's locks before failing with [`JournalError::Locked`].
    lock_attempts: u32,
    /// File I/O in the calling thread instead of tokio's blocking pool ([`FsStore::inline_io`]).
    inline_io: bool,
    /// Commits go through the run's commit log ([`FsStore::commit_log`]).
    commit_log: bool,
    /// The event files each open view was built from (`fs/seen.rs`).
    seen: seen::Seen,
}

impl FsStore {
    /// A store on a runtime of its own: for a process with one filesystem store. A process
    /// with several — or one that holds runs for whole commands — builds one [`FsRuntime`] and
    /// uses [`FsStore::with_runtime`] (see `fs/runtime.rs`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self::with_runtime(root, FsRuntime::new())
    }

    /// A store on `runtime`, shared with the process's other stores.
    pub fn with_runtime(root: impl Into<PathBuf>, runtime: FsRuntime) -> Self {
        Self {
            root: root.into(),
            runtime,
            lock_attempts: 6000,
            inline_io: false,
            commit_log: false,
            seen: seen::Seen::default(),
        }
    }

    /// For a long-lived process (the warm server): a batch of events is committed with one
    /// durable append to the run's commit log (`state/commit.log`: the events and the task
    /// files they refer to), and its files are made durable in the background, instead of an
    /// `fsync` per file and directory (or, for a fan-out's hundreds of files, two syncs of the
    /// filesystem) while the caller waits (see `fs/write/commit_log.rs`). The store's runtime
    /// settles the logs in the background, and on the way out when its last handle is
    /// dropped ([`FsRuntime::settle`] waits for it on demand). Every store
    /// reads runs with a commit log, whether it writes them or not.
    pub fn commit_log(mut self) -> Self {
        self.commit_log = true;
        self
    }

    /// For a process that runs one command and has nothing else for its runtime to do (the
    /// CLI): file I/O runs in place. Each trip to the blocking pool costs two thread wake-ups,
    /// and a cold iteration reads every result file — a thousand futex calls for a few hundred
    /// files. A server must keep the default: its runtime threads serve other requests.
    pub fn inline_io(mut self) -> Self {
        self.inline_io = true;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The runtime this store shares with the process's other stores.
    pub fn runtime(&self) -> &FsRuntime {
        &self.runtime
    }

    pub fn run_dir(&self, run_id: &str) -> PathBuf {
        self.root.join(run_id)
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(FsStore) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let this = self.clone();
        if self.inline_io {
            return f(this);
        }
        tokio::task::spawn_blocking(move || f(this))
            .await
            .map_err(|e| JournalError::io("blocking task", std::io::Error::other(e.to_string())))?
    }

    fn existing_run_dir(&self, run_id: &str) -> Result<PathBuf> {
        validate_id("run id", run_id)?;
        let dir = self.run_dir(run_id);
        // Held for this command: it exists (its lock file is in it).
        if self.runtime.shared().holds.held(&dir) {
            return Ok(dir);
        }
        match fs::metadata(dir.join("run.json")) {
            Ok(_) => Ok(dir),
            Err(e) if e.kind() == ErrorKind::NotFound => Err(JournalError::RunNotFound {
                run_id: run_id.to_owned(),
            }),
            Err(e) => Err(JournalError::io(dir.display(), e)),
        }
    }
}

/// One journal file name (`<seq>.<ULID>.json`), parsed.
#[derive(Debug, Clone)]
pub(crate) struct Entry {
    seq: u64,
    name: String,
}

impl Entry {
    /// The ULID part of the name (validated when the entry was parsed).
    fn ulid(&self) -> &str {
        self.name
            .split_once('.')
            .and_then(|(_, rest)| rest.strip_suffix(".json"))
            .unwrap_or_default()
    }
}

/// [`list_entries`] for readers that do not hold the run's lock. `readdir` gives no snapshot: a
/// listing that runs while another writer renames its event into place can miss that file yet
/// see a later one, which looks like a gap. Such a gap closes at once, so the listing is retried
/// briefly; a gap that stays is real and reported.
fn list_settled(run_id: &str, journal_dir: &Path) -> Result<Vec<Entry>> {
    let mut attempt = 0;
    loop {
        match list_entries(run_id, journal_dir) {
            Err(JournalError::SequenceGap { .. }) if attempt < 20 => {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
            other => return other,
        }
    }
}

/// How long a reader that must restore a commit log's events waits for the run's lock.
const RECOVERY_LOCK_ATTEMPTS: u32 = 6000;

/// The journal for readers: the listing taken under the runtime's hold of the run when there
/// is one (see [`lock`]), else a fresh settled listing (kept if the run is held).
fn listing(
    rt: &runtime::Shared,
    run_id: &str,
    run_dir: &Path,
) -> Result<std::sync::Arc<Vec<Entry>>> {
    if let Some(l) = rt.holds.listing(run_dir) {
        return Ok(l);
    }
    write::commit_log::recover(rt, run_id, run_dir, false, RECOVERY_LOCK_ATTEMPTS)?;
    let l = std::sync::Arc::new(list_settled(run_id, &run_dir.join("journal"))?);
    rt.holds.remember_listing(run_dir, &l);
    Ok(l)
}

/// Lists `journal/`, ordered by sequence number (not by name: the reference's lexicographic sort
/// breaks past 999 999), refusing duplicate sequence numbers and gaps. Reads the directory with
/// `getdents` straight into one `String` per journal file (a run of a few hundred tasks lists
/// about a thousand names, on every command).
fn list_entries(run_id: &str, journal_dir: &Path) -> Result<Vec<Entry>> {
    let io = |e: std::io::Error| JournalError::io(journal_dir.display(), e);
    let fd = match rustix::fs::open(
        journal_dir,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(Vec::new()),
        Err(e) => return Err(io(e.into())),
    };
    let mut dir = rustix::fs::Dir::read_from(&fd).map_err(|e| io(e.into()))?;
    let mut out: Vec<Entry> = Vec::new();
    while let Some(item) = dir.read() {
        let item = item.map_err(|e| io(e.into()))?;
        let Ok(name) = item.file_name().to_str() else {
            continue;
        };
        if !name.ends_with(".json") {
            continue; // `.`, `..`, temp files `*.json.tmp-…` and foreign files
        }
        let (seq, _) = parse_file_name_ref(run_id, name)?;
        out.push(Entry {
            seq,
            name: name.to_owned(),
        });
    }
    out.sort_unstable_by_key(|e| e.seq);
    for i in 0..out.len() {
        let (seq, expected) = (out[i].seq, i as u64 + 1);
        if seq == expected {
            continue;
        }
        if i > 0 && out[i - 1].seq == seq {
            let mut files: Vec<String> = out
                .iter()
                .filter(|e| e.seq == seq)
                .map(|e| format!("journal/{}", e.name))
                .collect();
            files.sort();
            return Err(JournalError::DuplicateSequence {
                run_id: run_id.to_owned(),
                seq,
                files,
            });
        }
        return Err(JournalError::SequenceGap {
            at: Location::file(run_id, seq, format!("journal/{}", out[i].name)),
            expected,
            got: seq,
        });
    }
    Ok(out)
}

fn head_of(entries: &[Entry]) -> Head {
    entries
        .last()
        .map(|e| Head {
            seq: e.seq,
            ulid: e.ulid().to_owned(),
        })
        .unwrap_or_default()
}

fn write_json(path: &Path, value: &Value) -> Result<()> {
    write_atomic(path, node_json::to_file_string(value).as_bytes())
}

fn read_json(path: &Path, run_id: &str) -> Result<Option<Value>> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| JournalError::Corrupt {
                at: Location::object(run_id, path.display().to_string()),
                reason: format!("invalid JSON: {e}"),
            }),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(JournalError::io(path.display(), e)),
    }
}

fn snapshot_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("state").join("snapshots")
}

#[async_trait]
impl JournalStore for FsStore {
    fn layout(&self) -> Layout {
        Layout::Babysitter
    }

    fn describe(&self) -> String {
        format!("file://{}", self.root.display())
    }

    async fn create_run(&self, run_id: &str, files: &RunFiles) -> Result<()> {
        validate_id("run id", run_id)?;
        let run_id = run_id.to_owned();
        let files = files.clone();
        self.blocking(move |this| {
            fs::create_dir_all(&this.root).map_err(|e| JournalError::io(this.root.display(), e))?;
            // Build the whole directory aside, then move it into place without replacing
            // anything: a crash never leaves a half-created run, and two creators cannot both win.
            let staging = this
                .root
                .join(format!(".creating-{run_id}-{}", ulid::Ulid::generate()));
            let result = (|| {
                for sub in ["journal", "tasks", "state", "blobs", "orphaned", "process"] {
                    fs::create_dir_all(staging.join(sub))
                        .map_err(|e| JournalError::io(staging.display(), e))?;
                }
                write_json(&staging.join("run.json"), &files.run_json)?;
                if let Some(inputs) = &files.inputs_json {
                    write_json(&staging.join("inputs.json"), inputs)?;
                }
                write_atomic(&staging.join(".gitignore"), GITIGNORE.as_bytes())?;
                let target = this.run_dir(&run_id);
                match rustix::fs::renameat_with(
                    rustix::fs::CWD,
                    &staging,
                    rustix::fs::CWD,
                    &target,
                    rustix::fs::RenameFlags::NOREPLACE,
                ) {
                    Ok(()) => Ok(()),
                    Err(e) if e == rustix::io::Errno::EXIST || e == rustix::io::Errno::NOTEMPTY => {
                        Err(JournalError::RunAlreadyExists {
                            run_id: run_id.clone(),
                        })
                    }
                    Err(e) => Err(JournalError::io(target.display(), e.into())),
                }
            })();
            if result.is_err() {
                let _ = fs::remove_dir_all(&staging);
            }
            result?;
            fsync_dir(&this.root)?;
            // babysitter keeps `<runsRoot>/../package.json` = {"type": "module"} so process files
            // under `.a5c/` load as ES modules; never overwritten.
            if let Some(parent) = this.root.parent() {
                let pkg = parent.join("package.json");
                if let Ok(mut f) = OpenOptions::new().write(true).create_new(true).open(&pkg) {
                    let _ = f.write_all(
                        node_json::to_file_string(&json!({"type": "module"})).as_bytes(),
                    );
                }
            }
            Ok(())
        })
        .await
    }

    async fn get_run(&self, run_id: &str) -> Result<RunFiles> {
        let dir = self.existing_run_dir(run_id)?;
        let run_id = run_id.to_owned();
        self.blocking(move |_| {
            let run_json = read_json(&dir.join("run.json"), &run_id)?.ok_or_else(|| {
                JournalError::RunNotFound {
                    run_id: run_id.clone(),
                }
            })?;
            let inputs_json = read_json(&dir.join("inputs.json"), &run_id)?;
            Ok(RunFiles {
                run_json,
                inputs_json,
            })
        })
        .await
    }

    async fn commit(&self, run_id: &str, events: &[StoredEvent]) -> Result<()> {
        let Some(first) = events.first() else {
            return Ok(());
        };
        let dir = self.existing_run_dir(run_id)?;
        let expected = first.seq;
        self.seen.wrote(run_id);
        let run_id = run_id.to_owned();
        let files: Vec<(String, Vec<u8>)> = events
            .iter()
            .map(|e| (e.file_name(), e.file_bytes()))
            .collect();
        self.blocking(move |this| {
            let rt = this.runtime.shared();
            let lock = rt.holds.lock_run(&run_id, &dir, this.lock_attempts);
            let _lock = match lock {
                Ok(l) => l,
                Err(e) => {
                    let _ = join_background(rt, &dir); // their files are orphans now
                    return Err(e);
                }
            };
            let journal_dir = dir.join("journal");
            write::commit_log::recover(rt, &run_id, &dir, true, this.lock_attempts)?;
            // Always listed afresh (not the held listing): see `lock`.
            let mut entries = list_entries(&run_id, &journal_dir)?;
            let head = head_of(&entries);
            if head.seq + 1 != expected {
                let _ = join_background(rt, &dir);
                // Another writer got there first: readers under the hold must see it too.
                rt.holds
                    .remember_listing(&dir, &std::sync::Arc::new(entries));
                return Err(JournalError::Conflict {
                    run_id,
                    expected,
                    head,
                });
            }
            let staged: Vec<(PathBuf, &[u8])> = files
                .iter()
                .map(|(name, bytes)| (journal_dir.join(name), bytes.as_slice()))
                .collect();
            write_events(rt, &dir, &journal_dir, &staged, this.commit_log)?;
            // What this process wrote counts as verified: a view refreshed later stats the
            // files instead of reading them back (a fan-out iteration wrote 200).
            this.seen.record_written(
                &run_id,
                expected,
                &journal_dir,
                files.iter().map(|(name, _)| name.as_str()),
            );
            for (name, _) in &files {
                let (seq, _) = parse_file_name_ref(&run_id, name)?;
                entries.push(Entry {
                    seq,
                    name: name.clone(),
                });
            }
            rt.holds
                .remember_listing(&dir, &std::sync::Arc::new(entries));
            Ok(())
        })
        .await
    }

    async fn load(
        &self,
        run_id: &str,
        from: &ChainCheck,
        to: Option<u64>,
    ) -> Result<Vec<StoredEvent>> {
        let dir = self.existing_run_dir(run_id)?;
        let run_id = run_id.to_owned();
        let mut chain = from.clone();
        self.blocking(move |this| {
            let journal_dir = dir.join("journal");
            let entries = listing(this.runtime.shared(), &run_id, &dir)?;
            let start = chain.head.seq;
            if start > 0 {
                match entries.get(start as usize - 1) {
                    Some(e) if e.ulid() == chain.head.ulid => {}
                    other => {
                        return Err(JournalError::Corrupt {
                            at: Location::file(
                                &run_id,
                                start,
                                other.map(|e| e.name.clone()).unwrap_or_default(),
                            ),
                            reason: format!(
                                "snapshot head {} no longer matches the journal",
                                chain.head.ulid
                            ),
                        });
                    }
                }
            }
            // The events the caller's view holds are still those it was built from.
            if start == 0 {
                this.seen.forget(&run_id);
            } else {
                let holds = &this.runtime.shared().holds;
                let under_hold = holds.checked(&dir);
                if under_hold != Some(true) {
                    let held = entries.get(..start as usize).unwrap_or_default();
                    this.seen.check(&run_id, &journal_dir, held)?;
                    if under_hold.is_some() {
                        holds.mark_checked(&dir);
                    }
                }
            }
            let end = to.unwrap_or(u64::MAX);
            let mut out = Vec::new();
            let mut metas = Vec::new();
            let first = start + 1;
            let read = entries
                .iter()
                .skip(start as usize)
                .take_while(|e| e.seq <= end)
                .try_for_each(|e| {
                    let path = journal_dir.join(&e.name);
                    let (bytes, meta) = seen::read_with_meta(&path)
                        .map_err(|err| JournalError::io(path.display(), err))?;
                    let event = StoredEvent::from_file(&run_id, &e.name, &bytes)?;
                    chain.push(
                        &event,
                        &Location::file(&run_id, e.seq, format!("journal/{}", e.name)),
                    )?;
                    // In the chain: its seq is `first` + its index.
                    metas.push(meta);
                    out.push(event);
                    Ok::<_, JournalError>(())
                });
            // What was verified stays recorded, also when a later file fails.
            this.seen.record(&run_id, first, &metas);
            read.map(|()| out)
        })
        .await
    }

    async fn head(&self, run_id: &str, _hint: Option<&Head>) -> Result<Head> {
        let dir = self.existing_run_dir(run_id)?;
        let run_id = run_id.to_owned();
        self.blocking(move |this| Ok(head_of(&listing(this.runtime.shared(), &run_id, &dir)?)))
            .await
    }

    async fn list_runs(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>> {
        let prefix = prefix.to_owned();
        let after = after.map(str::to_owned);
        self.blocking(move |this| {
            let read = match fs::read_dir(&this.root) {
                Ok(r) => r,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(JournalError::io(this.root.display(), e)),
            };
            let mut ids = Vec::new();
            for item in read {
                let item = item.map_err(|e| JournalError::io(this.root.display(), e))?;
                let Ok(name) = item.file_name().into_string() else {
                    continue;
                };
                if !name.starts_with(&prefix)
                    || name.starts_with('.')
                    || after.as_deref().is_some_and(|a| name.as_str() <= a)
                {
                    continue;
                }
                if validate_id("run id", &name).is_ok() && item.path().join("run.json").is_file() {
                    ids.push(name);
                }
            }
            ids.sort();
            ids.truncate(limit);
            Ok(ids)
        })
        .await
    }

    async fn put_blob(&self, run_id: &str, content: Bytes) -> Result<BlobRef> {
        let dir = self.existing_run_dir(run_id)?;
        self.blocking(move |_| {
            let blob = BlobRef::of(&content);
            let blobs = dir.join("blobs");
            fs::create_dir_all(&blobs).map_err(|e| JournalError::io(blobs.display(), e))?;
            let path = blobs.join(format!("sha256-{}", blob.hex()));
            if !path.is_file() {
                write_atomic(&path, &content)?;
            }
            Ok(blob)
        })
        .await
    }

    async fn get_blob(&self, run_id: &str, blob: &BlobRef) -> Result<Bytes> {
        let dir = self.existing_run_dir(run_id)?;
        let blob = blob.clone();
        let run_id = run_id.to_owned();
        self.blocking(move |_| {
            let path = dir.join("blobs").join(format!("sha256-{}", blob.hex()));
            let bytes = match fs::read(&path) {
                Ok(b) => b,
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    return Err(JournalError::BlobNotFound {
                        run_id,
                        blob_ref: blob.to_string(),
                    });
                }
                Err(e) => return Err(JournalError::io(path.display(), e)),
            };
            blob.verify(&run_id, &bytes)?;
            Ok(Bytes::from(bytes))
        })
        .await
    }

    async fn put_snapshot(&self, run_id: &str, snapshot: &Snapshot) -> Result<()> {
        let dir = self.existing_run_dir(run_id)?;
        let bytes = serde_json::to_vec(snapshot)
            .map_err(|e| JournalError::invalid("snapshot", e.to_string()))?;
        let seq = snapshot.seq();
        self.blocking(move |_| {
            let sdir = snapshot_dir(&dir);
            fs::create_dir_all(&sdir).map_err(|e| JournalError::io(sdir.display(), e))?;
            write_derived(&sdir.join(format!("{seq:020}.json")), &bytes)
        })
        .await
    }

    async fn latest_snapshot(
        &self,
        run_id: &str,
        at_most: Option<u64>,
    ) -> Result<Option<Snapshot>> {
        let dir = self.existing_run_dir(run_id)?;
        let run_id = run_id.to_owned();
        self.blocking(move |_| {
            let sdir = snapshot_dir(&dir);
            let read = match fs::read_dir(&sdir) {
                Ok(r) => r,
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(JournalError::io(sdir.display(), e)),
            };
            let mut best: Option<(u64, PathBuf)> = None;
            for item in read {
                let item = item.map_err(|e| JournalError::io(sdir.display(), e))?;
                let Ok(name) = item.file_name().into_string() else {
                    continue;
                };
                let Some(seq) = name
                    .strip_suffix(".json")
                    .and_then(|s| s.parse::<u64>().ok())
                else {
                    continue;
                };
                if at_most.is_some_and(|m| seq > m) {
                    continue;
                }
                if best.as_ref().is_none_or(|(b, _)| seq > *b) {
                    best = Some((seq, item.path()));
                }
            }
            let Some((seq, path)) = best else {
                return Ok(None);
            };
            let bytes = fs::read(&path).map_err(|e| JournalError::io(path.display(), e))?;
            parse_snapshot(&run_id, seq, &path.display().to_string(), &bytes).map(Some)
        })
        .await
    }

    async fn put_run_file(&self, run_id: &str, file: &RunFile, content: Bytes) -> Result<()> {
        let dir = self.existing_run_dir(run_id)?;
        let rel = file.path();
        self.blocking(move |this| {
            join_background(this.runtime.shared(), &dir)?;
            let path = dir.join(&rel);
            if let Some(parent) = path.parent() {
                fs::create_dir_all(parent).map_err(|e| JournalError::io(parent.display(), e))?;
            }
            write_atomic(&path, &content)
        })
        .await
    }

    async fn put_run_files(&self, run_id: &str, files: Vec<(RunFile, Bytes)>) -> Result<()> {
        let dir = self.existing_run_dir(run_id)?;
        self.blocking(move |this| {
            join_background(this.runtime.shared(), &dir)?;
            write_all_atomic(&run_paths(&dir, &files))
        })
        .await
    }

    async fn put_run_files_for_commit(
        &self,
        run_id: &str,
        files: Vec<(RunFile, Bytes)>,
    ) -> Result<()> {
        let dir = self.existing_run_dir(run_id)?;
        self.blocking(move |this| {
            let files = files
                .into_iter()
                .map(|(file, bytes)| (dir.join(file.path()), bytes))
                .collect();
            write_for_commit_background(this.runtime.shared(), dir, files, this.commit_log)
        })
        .await
    }

    fn run_file_writer(&self, run_id: &str) -> Result<Option<Box<dyn RunFileWriter>>> {
        let dir = self.existing_run_dir(run_id)?;
        Ok(Some(Box::new(StreamedFiles::new(
            self.runtime.shared().clone(),
            dir,
            self.commit_log,
        )?)))
    }

    async fn get_run_file(&self, run_id: &str, file: &RunFile) -> Result<Bytes> {
        let dir = self.existing_run_dir(run_id)?;
        let (run_id, rel) = (run_id.to_owned(), file.path());
        self.blocking(move |this| {
            join_background(this.runtime.shared(), &dir)?;
            let path = dir.join(&rel);
            match fs::read(&path) {
                Ok(b) => Ok(Bytes::from(b)),
                Err(e) if e.kind() == ErrorKind::NotFound => {
                    Err(JournalError::RunFileNotFound { run_id, path: rel })
                }
                Err(e) => Err(JournalError::io(path.display(), e)),
            }
        })
        .await
    }

    async fn get_run_files(&self, run_id: &str, files: &[RunFile]) -> Result<Vec<Result<Bytes>>> {
        let dir = self.existing_run_dir(run_id)?;
        let (run_id, rels) = (
            run_id.to_owned(),
            files.iter().map(RunFile::path).collect::<Vec<_>>(),
        );
        self.blocking(move |this| {
            join_background(this.runtime.shared(), &dir)?;
            read::run_files(&dir, &run_id, rels)
        })
        .await
    }

    async fn read_state_cache(&self, run_id: &str) -> Result<Option<Bytes>> {
        let dir = self.existing_run_dir(run_id)?;
        self.blocking(move |_| {
            let path = dir.join("state").join("state.json");
            match fs::read(&path) {
                Ok(b) => Ok(Some(Bytes::from(b))),
                Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
                Err(e) => Err(JournalError::io(path.display(), e)),
            }
        })
        .await
    }

    async fn write_state_cache(&self, run_id: &str, content: Bytes) -> Result<()> {
        let dir = self.existing_run_dir(run_id)?;
        self.blocking(move |_| {
            let sdir = dir.join("state");
            fs::create_dir_all(&sdir).map_err(|e| JournalError::io(sdir.display(), e))?;
            write_derived(&sdir.join("state.json"), &content)
        })
        .await
    }

    async fn read_control(&self, name: &str) -> Result<Option<Versioned>> {
        let name = name.to_owned();
        self.blocking(move |this| control::read_control(&this.root, &name))
            .await
    }

    async fn write_control(
        &self,
        name: &str,
        content: Bytes,
        expected: Option<&str>,
    ) -> Result<String> {
        let (name, expected) = (name.to_owned(), expected.map(str::to_owned));
        self.blocking(move |this| {
            control::write_control(&this.root, &name, &content, expected.as_deref())
        })
        .await
    }
}

/// Where each run file goes under `run_dir` (directories are created as they are written).
fn run_paths<'a>(run_dir: &Path, files: &'a [(RunFile, Bytes)]) -> Vec<(PathBuf, &'a [u8])> {
    files
        .iter()
        .map(|(file, bytes)| (run_dir.join(file.path()), bytes.as_ref()))
        .collect()
}

/// Parses and sanity-checks a snapshot document (shared by both backends).
pub(crate) fn parse_snapshot(
    run_id: &str,
    seq: u64,
    where_: &str,
    bytes: &[u8],
) -> Result<Snapshot> {
    let at = Location::object(run_id, where_.to_owned()).with_seq(seq);
    let snap: Snapshot = serde_json::from_slice(bytes)
        .map_err(|e| JournalError::corrupt(&at, format!("invalid snapshot: {e}")))?;
    if snap.format != SNAPSHOT_FORMAT || snap.run_id != run_id || snap.seq() != seq {
        return Err(JournalError::corrupt(
            &at,
            "snapshot header does not match its run and sequence number",
        ));
    }
    Ok(snap)
}
