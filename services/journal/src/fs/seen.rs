//! What a long-lived reader has verified of each run's journal, so that an event file changed
//! under it is noticed.
//!
//! A reader that keeps a run's view between commands (the CLI's warm server, a service) reads
//! each event file once; a file replaced or edited after that (`sed -i` on an event, a restore
//! from a backup) would otherwise go on being served from memory while a one-shot reader fails
//! with a checksum mismatch. So every refresh of an open view checks the files it already holds
//! against the identity they had when they were verified — inode, size, modification time: a
//! replaced file has another inode, an edited one another modification time — one `statat` per
//! event on the directory already open for the listing. A file whose identity changed, or seen
//! for the first time after this process wrote to the run, is read and verified again as a
//! one-shot reader would. A run opened from a snapshot trusts the events the snapshot covers,
//! exactly as a one-shot reader opening from that snapshot does (reading them all again cost a
//! 10,000-event open from a snapshot 4.5× its time). A checksum failure is reported as it is to any
//! reader; a file rewritten with a valid checksum fails the refresh as changed, and the journal
//! reopens the view from the store.
//!
//! Limit: an in-place edit that keeps the size and lands in the same timestamp tick as the
//! write that preceded it (the kernel's coarse clock, a few milliseconds) is not seen; `sed -i`,
//! editors and copies all replace or rewrite with a new inode or time.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::error::{JournalError, Location, Result};
use crate::event::StoredEvent;

use super::Entry;

/// Runs remembered before the memory starts over (each holds a few words per event).
const MAX_RUNS: usize = 65_536;

/// The identity of an event file when it was verified.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    dev: u64,
    size: i64,
    mtime: (i64, i64),
}

impl Stamp {
    fn of_meta(m: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt as _;
        Self {
            ino: m.ino(),
            dev: m.dev(),
            size: m.size().try_into().unwrap_or(i64::MAX),
            mtime: (m.mtime(), m.mtime_nsec()),
        }
    }

    fn of(st: &rustix::fs::Stat) -> Self {
        Self {
            ino: st.st_ino,
            dev: st.st_dev,
            size: st.st_size,
            mtime: (
                st.st_mtime,
                i64::try_from(st.st_mtime_nsec).unwrap_or(i64::MAX),
            ),
        }
    }
}

/// Verified identities of event files, by run and sequence number. Shared by a store's clones.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    runs: Arc<Mutex<HashMap<String, RunSeen>>>,
}

/// What this process knows of one run's event files.
#[derive(Debug, Default)]
struct RunSeen {
    /// Events `1..=trusted` came from a snapshot this process opened the run from, without
    /// reading their files — as a one-shot reader opening from that snapshot does, so a change to
    /// one of them is no more visible here than there. Not re-read by a check.
    trusted: usize,
    /// The identity of each event file read and verified (index = seq - 1).
    stamps: Vec<Option<Stamp>>,
}

impl Seen {
    fn take(&self, run_id: &str) -> Option<RunSeen> {
        self.lock().remove(run_id)
    }

    fn put(&self, run_id: &str, seen: RunSeen) {
        let mut runs = self.lock();
        if runs.len() >= MAX_RUNS {
            runs.clear();
        }
        runs.insert(run_id.to_owned(), seen);
    }

    /// Forgets the run (a view opened from the start re-verifies everything it reads).
    pub(crate) fn forget(&self, run_id: &str) {
        self.lock().remove(run_id);
    }

    /// Notes that this process committed events to the run: a view holding them was built
    /// from memory, not from their files, so a later check reads and verifies each file it has
    /// not seen (the one-shot reader's verdict on it), instead of trusting it.
    pub(crate) fn wrote(&self, run_id: &str) {
        self.lock().entry(run_id.to_owned()).or_default();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, RunSeen>> {
        self.runs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks that the event files of `held` (the journal's first events, which the caller's
    /// view already holds) are still the ones verified, verifying those not seen before. A run
    /// this process has neither read nor written is being opened from a snapshot: the events
    /// the snapshot covers are trusted as a one-shot reader trusts them (not read again; reading
    /// them all would make a snapshot worth nothing).
    pub(crate) fn check(&self, run_id: &str, journal_dir: &Path, held: &[Entry]) -> Result<()> {
        let mut seen = match self.take(run_id) {
            Some(seen) => seen,
            None => RunSeen {
                trusted: held.len(),
                stamps: Vec::new(),
            },
        };
        let from = seen.trusted.min(held.len());
        let result = check_files(
            run_id,
            journal_dir,
            held.get(from..).unwrap_or_default(),
            from,
            &mut seen.stamps,
        );
        if result.is_ok() {
            self.put(run_id, seen);
        }
        result
    }

    /// Records the identities of event files just read and verified, from seq `first` on (each
    /// one's metadata taken on the open file before the read, so a change during it shows at the
    /// next check). Once per read, not per event: one lock and one key for a whole replay.
    pub(crate) fn record(&self, run_id: &str, first: u64, metas: &[std::fs::Metadata]) {
        self.put_stamps(run_id, first, metas.iter().map(|m| Some(Stamp::of_meta(m))));
    }

    /// Records the identities of the event files this process just named, from seq `first` on,
    /// as verified: their bytes are the ones it sealed. One `statat` each on the journal
    /// directory; a file that cannot be stat'ed stays unknown (read and verified at the next
    /// check, as before).
    pub(crate) fn record_written<'a>(
        &self,
        run_id: &str,
        first: u64,
        journal_dir: &Path,
        names: impl Iterator<Item = &'a str>,
    ) {
        let Ok(dir) = rustix::fs::open(
            journal_dir,
            rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        ) else {
            return;
        };
        let stamps: Vec<Option<Stamp>> = names
            .map(|name| {
                rustix::fs::statat(&dir, name, rustix::fs::AtFlags::empty())
                    .ok()
                    .map(|st| Stamp::of(&st))
            })
            .collect();
        self.put_stamps(run_id, first, stamps);
    }

    /// Sets the stamps of seq `first` on, under one lock.
    fn put_stamps(
        &self,
        run_id: &str,
        first: u64,
        stamps: impl IntoIterator<Item = Option<Stamp>>,
    ) {
        let Some(from) = first.checked_sub(1).and_then(|i| usize::try_from(i).ok()) else {
            return;
        };
        let mut runs = self.lock();
        let known = match runs.get_mut(run_id) {
            Some(seen) => &mut seen.stamps,
            None => &mut runs.entry(run_id.to_owned()).or_default().stamps,
        };
        for (i, stamp) in stamps.into_iter().enumerate() {
            let at = from + i;
            if known.len() <= at {
                known.resize(at + 1, None);
            }
            known[at] = stamp;
        }
    }
}

/// Checks `held`, the events from index `offset` (seq `offset + 1`) on, against `stamps`.
fn check_files(
    run_id: &str,
    journal_dir: &Path,
    held: &[Entry],
    offset: usize,
    stamps: &mut Vec<Option<Stamp>>,
) -> Result<()> {
    if held.is_empty() {
        return Ok(());
    }
    let io = |e: std::io::Error| JournalError::io(journal_dir.display(), e);
    let dir = rustix::fs::open(
        journal_dir,
        rustix::fs::OFlags::PATH | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| io(e.into()))?;
    let end = offset + held.len();
    if stamps.len() < end {
        stamps.resize(end, None);
    }
    let window = stamps.get_mut(offset..end).unwrap_or_default();
    for (e, known) in held.iter().zip(window.iter_mut()) {
        let at = || Location::file(run_id, e.seq, format!("journal/{}", e.name));
        let st = rustix::fs::statat(&dir, e.name.as_str(), rustix::fs::AtFlags::empty())
            .map_err(|err| JournalError::io(journal_dir.join(&e.name).display(), err.into()))?;
        let now = Stamp::of(&st);
        if *known == Some(now) {
            continue;
        }
        let path = journal_dir.join(&e.name);
        let bytes = std::fs::read(&path).map_err(|err| JournalError::io(path.display(), err))?;
        // A checksum failure is reported exactly as to a reader opening the run.
        StoredEvent::from_file(run_id, &e.name, &bytes)?;
        if known.is_some() {
            // Valid, but not the file the view was built from: the view must be rebuilt.
            return Err(JournalError::Corrupt {
                at: at(),
                reason: "the event file changed after it was read".into(),
            });
        }
        *known = Some(now);
    }
    Ok(())
}

/// Reads a file whole, with its metadata taken on the open file before the read (the same
/// system calls as `std::fs::read`, which asks for the size to size its buffer).
pub(crate) fn read_with_meta(path: &Path) -> std::io::Result<(Vec<u8>, std::fs::Metadata)> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).saturating_add(1));
    file.read_to_end(&mut bytes)?;
    Ok((bytes, meta))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::fs::FsStore;
    use crate::store::RunFiles;
    use crate::testsuite::{requested, run_id};
    use crate::{Journal, JournalOptions};

    fn journal(root: &std::path::Path) -> Journal {
        Journal::new(
            Arc::new(FsStore::new(root)),
            JournalOptions {
                snapshot_every: 0,
                ..Default::default()
            },
        )
    }

    /// A run `id` of 20 requested events written through `writer`.
    async fn twenty_events(writer: &Journal, id: &str) {
        writer
            .create_run(
                id,
                RunFiles {
                    run_json: serde_json::json!({"runId": id, "processId": "p"}),
                    inputs_json: None,
                },
            )
            .await
            .unwrap();
        writer
            .append(
                id,
                1,
                (0..20).map(|i| requested(&format!("e{i}"))).collect(),
            )
            .await
            .unwrap();
    }

    /// Writes a run of 20 events (with a snapshot when `snapshot`), then edits event 3's file
    /// so its checksum no longer matches; the run's id.
    async fn run_with_an_edited_event(root: &std::path::Path, snapshot: bool) -> String {
        let writer = journal(root);
        let id = run_id("seen");
        twenty_events(&writer, &id).await;
        if snapshot {
            assert_eq!(writer.snapshot(&id).await.unwrap(), 20);
        }
        let dir = root.join(&id).join("journal");
        let mut names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        names.sort();
        let target = &names[2];
        let text = std::fs::read_to_string(target).unwrap();
        let edited = text.replace("\"e2\"", "\"eX\"");
        assert_ne!(edited, text);
        std::fs::write(target, edited).unwrap();
        id
    }

    /// The events a store committed are known by their identity right away: a view refreshed
    /// later stats them instead of reading every one back (a 200-effect fan-out iteration read
    /// its own 200 events again), and a change to one of them is still caught.
    #[tokio::test]
    async fn what_this_process_wrote_is_known_without_reading_it_back() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("runs");
        let store = Arc::new(FsStore::new(&root));
        let writer = Journal::new(store.clone(), JournalOptions::default());
        let id = run_id("wrote");
        twenty_events(&writer, &id).await;
        {
            let runs = store.seen.lock();
            let stamps = &runs.get(&id).expect("the run is known").stamps;
            assert_eq!(stamps.len(), 20);
            assert!(stamps.iter().all(Option::is_some), "{stamps:?}");
        }
        let dir = root.join(&id).join("journal");
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".json"))
            .collect();
        names.sort();
        let held: Vec<super::Entry> = names
            .iter()
            .enumerate()
            .map(|(i, name)| super::Entry {
                seq: i as u64 + 1,
                name: name.clone(),
            })
            .collect();
        store.seen.check(&id, &dir, &held).expect("unchanged");
        // Replaced under the writer: another inode, so read, and the bad checksum reported.
        let target = dir.join(&names[2]);
        let text = std::fs::read_to_string(&target).unwrap();
        std::fs::remove_file(&target).unwrap();
        std::fs::write(&target, text.replace("\"e2\"", "\"eX\"")).unwrap();
        let err = store.seen.check(&id, &dir, &held).unwrap_err();
        assert!(err.to_string().contains("checksum"), "{err}");
    }

    /// A reader opening a run from its snapshot trusts the events the snapshot covers, as a
    /// one-shot reader does (re-reading them all made a 10,000-event open from a snapshot 4.5×
    /// slower); without a snapshot every file is read and the damage reported.
    #[tokio::test]
    async fn a_snapshot_open_trusts_what_the_snapshot_covers() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("runs");

        let id = run_with_an_edited_event(&root, true).await;
        let (head, index) = journal(&root)
            .index(&id)
            .await
            .expect("opened from the snapshot, covered files not read");
        assert_eq!(head.seq, 20);
        assert_eq!(index.pending().count(), 20);

        let id = run_with_an_edited_event(&root, false).await;
        let err = journal(&root)
            .index(&id)
            .await
            .expect_err("without a snapshot the edited file is read");
        assert!(err.to_string().contains("checksum"), "{err}");
    }
}
