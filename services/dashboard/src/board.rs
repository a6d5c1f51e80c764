//! The board: an in-memory index of every run's [`Digest`], kept current from the source's
//! change feed, and read a page at a time.
//!
//! Why an index rather than asking the source per request: a board page needs counts per bucket
//! over all runs and a filtered, sorted page; listing 10,000 runs from a journal per request (or
//! per live update) would cost journal reads each time. The index costs a few hundred bytes per
//! run, is built once at start, and then changes one digest per event; a page is a filter and a
//! sort over memory. Every change bumps a version on a `watch` channel, which the SSE stream
//! follows (a slow browser skips intermediate versions, it never holds the updater up).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use serde::Serialize;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::model::{Bucket, Digest, now_ms};
use crate::source::Source;

/// A request for a page of the board.
#[derive(Debug, Clone, Default)]
pub struct Query {
    /// Lower-case search text (run id, process, project, label).
    pub q: String,
    pub bucket: Option<Bucket>,
    /// Exact run status (`running`, `failed`, …).
    pub status: Option<String>,
    pub offset: usize,
    pub limit: usize,
}

/// One page of the board.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Page {
    pub version: u64,
    /// Runs per bucket among those matching the search (before the bucket filter).
    pub counts: HashMap<Bucket, usize>,
    /// Runs matching search and filters.
    pub total: usize,
    pub offset: usize,
    pub runs: Vec<Digest>,
}

/// The whole board: counts and the first cards of every bucket.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Columns {
    pub version: u64,
    pub counts: HashMap<Bucket, usize>,
    pub columns: HashMap<Bucket, Vec<Digest>>,
}

#[derive(Debug)]
pub struct Board {
    runs: RwLock<HashMap<String, Digest>>,
    version: watch::Sender<u64>,
    stale_after_ms: i64,
}

impl Board {
    pub fn new(stale_after_ms: i64) -> Arc<Self> {
        Arc::new(Self {
            runs: RwLock::default(),
            version: watch::Sender::new(0),
            stale_after_ms,
        })
    }

    /// Receives the board's version whenever a digest changes.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.version.subscribe()
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Digest>> {
        self.runs.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Digest>> {
        self.runs.write().unwrap_or_else(|p| p.into_inner())
    }

    fn bump(&self) {
        self.version.send_modify(|v| *v += 1);
    }

    pub fn replace_all(&self, digests: Vec<Digest>) {
        *self.write() = digests.into_iter().map(|d| (d.run_id.clone(), d)).collect();
        self.bump();
    }

    /// Puts (or removes, with `None`) one run's digest.
    pub fn put(&self, run_id: &str, digest: Option<Digest>) {
        {
            let mut runs = self.write();
            match digest {
                Some(d) => {
                    if runs.get(run_id) == Some(&d) {
                        return;
                    }
                    runs.insert(run_id.to_owned(), d);
                }
                None => {
                    if runs.remove(run_id).is_none() {
                        return;
                    }
                }
            }
        }
        self.bump();
    }

    /// One run's digest with its bucket.
    pub fn get(&self, run_id: &str) -> Option<Digest> {
        let now = now_ms();
        self.read().get(run_id).map(|d| self.triaged(d, now))
    }

    fn triaged(&self, d: &Digest, now: i64) -> Digest {
        let mut d = d.clone();
        d.bucket = Some(d.bucket_at(now, self.stale_after_ms));
        d
    }

    /// A page of the runs `visible` lets through, newest first (ULIDs sort by creation).
    pub fn page(&self, query: &Query, visible: impl Fn(&Digest) -> bool) -> Page {
        let now = now_ms();
        let version = *self.version.borrow();
        let runs = self.read();
        let mut counts: HashMap<Bucket, usize> = Bucket::ALL.iter().map(|b| (*b, 0)).collect();
        let mut hits: Vec<(Bucket, &Digest)> = Vec::new();
        for d in runs.values() {
            if !visible(d) || (!query.q.is_empty() && !d.matches(&query.q)) {
                continue;
            }
            if query.status.as_deref().is_some_and(|s| s != d.status) {
                continue;
            }
            let bucket = d.bucket_at(now, self.stale_after_ms);
            *counts.entry(bucket).or_default() += 1;
            if query.bucket.is_none_or(|b| b == bucket) {
                hits.push((bucket, d));
            }
        }
        let total = hits.len();
        let limit = query.limit.clamp(1, 500);
        // Only the page is sorted in full; the rest is partitioned around it.
        let end = (query.offset + limit).min(total);
        let order = |a: &(Bucket, &Digest), b: &(Bucket, &Digest)| {
            a.0.cmp(&b.0).then_with(|| b.1.run_id.cmp(&a.1.run_id))
        };
        if end > 0 && end < total {
            hits.select_nth_unstable_by(end - 1, order);
        }
        hits.truncate(end);
        hits.sort_unstable_by(order);
        let page = hits
            .into_iter()
            .skip(query.offset)
            .map(|(b, d)| {
                let mut d = d.clone();
                d.bucket = Some(b);
                d
            })
            .collect();
        Page {
            version,
            counts,
            total,
            offset: query.offset,
            runs: page,
        }
    }

    /// The whole board in one read: counts per bucket and each bucket's first `per_column`
    /// runs (newest first) among the runs matching `query` (its bucket, offset and limit aside).
    /// One scan of the index however many columns: what the page reads on every change.
    pub fn columns(
        &self,
        query: &Query,
        per_column: usize,
        visible: impl Fn(&Digest) -> bool,
    ) -> Columns {
        let now = now_ms();
        let version = *self.version.borrow();
        let runs = self.read();
        let mut by_bucket: HashMap<Bucket, Vec<&Digest>> = HashMap::new();
        for d in runs.values() {
            if !visible(d) || (!query.q.is_empty() && !d.matches(&query.q)) {
                continue;
            }
            if query.status.as_deref().is_some_and(|s| s != d.status) {
                continue;
            }
            by_bucket
                .entry(d.bucket_at(now, self.stale_after_ms))
                .or_default()
                .push(d);
        }
        let per = per_column.clamp(1, 500);
        let mut counts = HashMap::new();
        let mut columns = HashMap::new();
        for b in Bucket::ALL {
            let mut hits = by_bucket.remove(&b).unwrap_or_default();
            counts.insert(b, hits.len());
            let newest = |x: &&Digest, y: &&Digest| y.run_id.cmp(&x.run_id);
            if hits.len() > per {
                hits.select_nth_unstable_by(per - 1, newest);
                hits.truncate(per);
            }
            hits.sort_unstable_by(newest);
            let cards = hits
                .into_iter()
                .map(|d| {
                    let mut d = d.clone();
                    d.bucket = Some(b);
                    d
                })
                .collect();
            columns.insert(b, cards);
        }
        Columns {
            version,
            counts,
            columns,
        }
    }

    /// Builds the index from `source` and keeps it current from its change feed until `stop`.
    pub fn follow(self: &Arc<Self>, source: Arc<dyn Source>, stop: CancellationToken) {
        let board = self.clone();
        // Subscribed before the first listing, so no change falls in between.
        let mut changes = source.changes();
        tokio::spawn(async move {
            board.reload(source.as_ref()).await;
            loop {
                let changed = tokio::select! {
                    () = stop.cancelled() => return,
                    c = changes.recv() => c,
                };
                match changed {
                    Ok(run_id) => match source.run(&run_id).await {
                        Ok(d) => board.put(&run_id, d),
                        Err(e) => {
                            tracing::warn!(%run_id, error = %e, "dashboard: a run could not be read")
                        }
                    },
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        board.reload(source.as_ref()).await
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }

    async fn reload(&self, source: &dyn Source) {
        match source.runs().await {
            Ok(all) => self.replace_all(all),
            Err(e) => tracing::warn!(error = %e, "dashboard: runs could not be listed"),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn digest(id: &str, status: &str, breakpoints: u32) -> Digest {
        Digest {
            run_id: id.into(),
            namespace: "default".into(),
            project: "proj".into(),
            process_id: format!("process-{id}"),
            labels: BTreeMap::new(),
            status: status.into(),
            status_reason: String::new(),
            pending: [("breakpoint".to_owned(), breakpoints)].into(),
            created_at: None,
            last_activity_ms: Some(now_ms()),
            head_seq: 1,
            corrupt: false,
            bucket: None,
        }
    }

    #[test]
    fn a_page_is_filtered_counted_and_sorted_by_bucket_then_newest() {
        let board = Board::new(60_000);
        board.replace_all(
            (0..50)
                .map(|i| {
                    digest(
                        &format!("{i:03}"),
                        if i % 2 == 0 { "completed" } else { "waiting" },
                        u32::from(i % 5 == 0),
                    )
                })
                .collect(),
        );
        let q = Query {
            limit: 10,
            ..Query::default()
        };
        let page = board.page(&q, |_| true);
        assert_eq!(page.total, 50);
        assert_eq!(page.runs.len(), 10);
        // Needs-you first: the odd multiples of 5, newest first.
        assert_eq!(page.runs[0].run_id, "045");
        assert_eq!(page.runs[0].bucket, Some(Bucket::NeedsYou));
        assert_eq!(page.counts[&Bucket::NeedsYou], 5);
        assert_eq!(page.counts[&Bucket::Completed], 25);
        let searched = board.page(
            &Query {
                q: "process-01".into(),
                limit: 100,
                ..Query::default()
            },
            |_| true,
        );
        assert_eq!(searched.total, 10);
        let hidden = board.page(&q, |d| d.run_id != "045");
        assert_eq!(hidden.runs[0].run_id, "035");
        let second = board.page(
            &Query {
                offset: 45,
                limit: 10,
                ..Query::default()
            },
            |_| true,
        );
        assert_eq!(second.runs.len(), 5);
        assert_eq!(second.runs[4].run_id, "000");
        let cols = board.columns(&Query::default(), 3, |_| true);
        assert_eq!(cols.counts[&Bucket::Completed], 25);
        let ids: Vec<&str> = cols.columns[&Bucket::NeedsYou]
            .iter()
            .map(|d| d.run_id.as_str())
            .collect();
        assert_eq!(ids, ["045", "035", "025"]);
        assert_eq!(cols.columns[&Bucket::Working].len(), 3);
        assert!(cols.columns[&Bucket::Stale].is_empty());
    }
}
