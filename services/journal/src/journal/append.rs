//! Appends: seal a batch onto the run's chain (ULIDs, checksums, links), fold it into the index
//! before anything is written (what the index refuses is refused first), commit it, then move the
//! view on and take automatic snapshots.

use super::*;

impl Journal {
    /// Appends `events` at `expected_next_seq`; returns them as committed.
    pub async fn append(
        &self,
        run_id: &str,
        expected_next_seq: u64,
        events: Vec<NewEvent>,
    ) -> Result<Vec<StoredEvent>> {
        self.append_returning(run_id, expected_next_seq, events, true)
            .await
            .map(|(_, committed)| committed)
    }

    /// [`Journal::append`] for a caller that needs only the new head: the committed events are
    /// kept for tail reads without a copy.
    pub async fn append_for_head(
        &self,
        run_id: &str,
        expected_next_seq: u64,
        events: Vec<NewEvent>,
    ) -> Result<Head> {
        self.append_returning(run_id, expected_next_seq, events, false)
            .await
            .map(|(head, _)| head)
    }

    async fn append_returning(
        &self,
        run_id: &str,
        expected_next_seq: u64,
        events: Vec<NewEvent>,
        events_back: bool,
    ) -> Result<(Head, Vec<StoredEvent>)> {
        validate_id("run id", run_id)?;
        if events.is_empty() {
            return Err(JournalError::invalid("append", "no events"));
        }
        if events.len() > self.inner.options.max_batch_events {
            return Err(JournalError::invalid(
                "append",
                format!(
                    "{} events in one batch, the limit is {}",
                    events.len(),
                    self.inner.options.max_batch_events
                ),
            ));
        }
        let this = self.clone();
        let run_id = run_id.to_owned();
        let count = events.len();
        let started = tokio::time::Instant::now();
        let appended = spawn_whole(async move {
            this.append_inner(&run_id, expected_next_seq, events, events_back)
                .await
        })
        .await;
        match &appended {
            Ok(_) => crate::metrics::appended(self.inner.backend, count, started.elapsed()),
            Err(e) => crate::metrics::failed(self.inner.backend, "append", e),
        }
        appended
    }

    async fn append_inner(
        &self,
        run_id: &str,
        expected: u64,
        events: Vec<NewEvent>,
        events_back: bool,
    ) -> Result<(Head, Vec<StoredEvent>)> {
        let slot = self.slot(run_id);
        let mut guard = slot.lock().await;
        let mut view = self.current(run_id, &mut guard, false).await?;
        if expected != view.chain.head.seq + 1 {
            view = self.current(run_id, &mut guard, true).await?;
        }
        if expected != view.chain.head.seq + 1 {
            return Err(JournalError::Conflict {
                run_id: run_id.to_owned(),
                expected,
                head: view.chain.head.clone(),
            });
        }
        let (sealed, chain) = self.seal(run_id, view, events)?;
        if let Err(e) = Self::fold_batch(run_id, view, &sealed) {
            *guard = None;
            return Err(e);
        }
        match self.inner.store.commit(run_id, &sealed).await {
            Ok(()) => {}
            // Nothing was written, but another writer was: the view is behind. Drop it so the
            // next operation (even one that skips refreshing) re-reads the store.
            Err(e @ JournalError::Conflict { .. }) => {
                *guard = None;
                return Err(e);
            }
            Err(e) => {
                *guard = None; // unknown outcome: the next operation re-reads the store
                return Err(e);
            }
        }
        let view = guard.as_mut().ok_or(JournalError::ShuttingDown)?;
        // `seal` checked and linked the batch onto this very chain.
        view.chain = chain;
        let head = view.chain.head.clone();
        view.since_snapshot += sealed.len() as u64;
        let watched = self.watched(run_id);
        let back = if events_back || watched {
            view.remember(&sealed);
            sealed
        } else {
            view.remember_owned(sealed);
            Vec::new()
        };
        if self.inner.options.snapshot_every > 0
            && view.since_snapshot >= self.snapshot_spacing(view)
        {
            let snapshot = snapshot_of(run_id, view);
            if self.inner.options.background_snapshots {
                // A snapshot at a seq is a pure function of the journal (stores treat an
                // existing one as the same), so it needs no lock once taken.
                view.since_snapshot = 0;
                view.snapshot_seq = snapshot.seq();
                let store = self.inner.store.clone();
                let id = run_id.to_owned();
                // In the append's span (and so its trace), though nothing waits for it.
                self.inner
                    .background
                    .spawn(tracing::Instrument::in_current_span(async move {
                        if let Err(e) = store.put_snapshot(&id, &snapshot).await {
                            tracing::warn!(run_id = id, error = %e, "snapshot failed; the next one follows");
                        }
                    }));
            } else {
                match self.inner.store.put_snapshot(run_id, &snapshot).await {
                    Ok(()) => {
                        view.since_snapshot = 0;
                        view.snapshot_seq = snapshot.seq();
                    }
                    Err(e) => {
                        tracing::warn!(run_id, error = %e, "snapshot failed; will retry after the next append")
                    }
                }
            }
        }
        drop(guard);
        if watched {
            self.notify(run_id, &back);
        }
        Ok((head, if events_back { back } else { Vec::new() }))
    }

    /// Events between automatic snapshots of the run. In the background (a long-lived process,
    /// which keeps the view open and reopens it only after a restart) also at least half the
    /// journal's length: a snapshot serialises the whole index, so at a fixed spacing a long run
    /// spent more on its snapshots than on its iterations (quadratic in its length); spaced with
    /// the journal, snapshots come each time it has doubled, those of a whole run serialise about
    /// twice its final index, and a reopen replays at most half the journal. A short-lived
    /// process (the CLI) opens the run on every command and keeps the fixed spacing.
    fn snapshot_spacing(&self, view: &RunView) -> u64 {
        let every = self.inner.options.snapshot_every;
        if self.inner.options.background_snapshots {
            every.max(view.chain.head.seq / 2)
        } else {
            every
        }
    }

    /// Stamps a batch and checks it against the view (which it does not change); returns the
    /// view's chain advanced over the batch.
    fn seal(
        &self,
        run_id: &str,
        view: &RunView,
        events: Vec<NewEvent>,
    ) -> Result<(Vec<StoredEvent>, ChainCheck)> {
        let linked = self.inner.store.layout() == Layout::Object;
        let mut chain = view.chain.clone();
        let mut out = Vec::with_capacity(events.len());
        for (i, ev) in events.into_iter().enumerate() {
            let refuse = |reason: String| JournalError::InvalidEvent {
                run_id: run_id.to_owned(),
                index: i,
                reason,
            };
            if ev.kind.as_str().is_empty() {
                return Err(refuse("event type is empty".into()));
            }
            if !ev.data.is_object() {
                return Err(refuse("`data` must be a JSON object".into()));
            }
            if let Some(at) = &ev.recorded_at
                && chrono::DateTime::parse_from_rfc3339(at).is_err()
            {
                return Err(refuse(format!(
                    "recordedAt `{at}` is not an ISO-8601 timestamp"
                )));
            }
            let seq = chain.head.seq + 1;
            let ulid = match ev.ulid {
                Some(u) if crate::event::is_ulid(&u) => u,
                Some(u) => return Err(refuse(format!("ulid `{u}` is not a ULID"))),
                None => self.next_ulid(&chain.head.ulid),
            };
            let mut data = ev.data;
            if let Some(r) = &self.inner.options.redactor {
                r.value(&mut data);
            }
            let body = EventBody {
                kind: ev.kind,
                recorded_at: ev.recorded_at.unwrap_or_else(now_iso),
                data,
                sdk_version: ev.sdk_version,
                extra: Default::default(),
            };
            let prev_hash = linked.then(|| chain.head_hash.clone());
            let (event, bound) = StoredEvent::seal_measured(seq, ulid, body, prev_hash);
            let limit = self.inner.options.max_event_bytes;
            let size = if bound <= limit {
                0
            } else {
                event.file_bytes().len()
            };
            if size > limit {
                return Err(JournalError::EventTooLarge {
                    run_id: run_id.to_owned(),
                    index: i,
                    size,
                    limit: self.inner.options.max_event_bytes,
                });
            }
            chain.push(&event, &|| Location::file(run_id, seq, event.file_name()))?;
            out.push(event);
        }
        Ok((out, chain))
    }

    /// Folds a sealed batch into the view's index before it is written: what the index refuses
    /// (an unknown or doubly resolved effect, a duplicate key, a malformed event) is refused
    /// before anything is written. Applying to the index itself, instead of checking the batch
    /// against a scratch copy and applying it again after the write, folds every event once; a
    /// refused batch leaves the index partly applied, so the caller drops the view (the next
    /// operation re-reads the store, as after a failed write).
    fn fold_batch(run_id: &str, view: &mut RunView, sealed: &[StoredEvent]) -> Result<()> {
        for (i, e) in sealed.iter().enumerate() {
            let at = || Location::file(run_id, e.seq, e.file_name());
            if let Err(err) = view.index.apply(e, &at) {
                return Err(JournalError::InvalidEvent {
                    run_id: run_id.to_owned(),
                    index: i,
                    reason: err.to_string(),
                });
            }
        }
        Ok(())
    }

    /// A ULID from the injected source or this process's monotonic generator, forced after `prev`
    /// (another writer's clock may be ahead of ours).
    fn next_ulid(&self, prev: &str) -> String {
        let injected = self
            .inner
            .options
            .ulids
            .as_ref()
            .and_then(|source| ulid::Ulid::from_string(&(source.0)()).ok());
        let fresh = injected.unwrap_or_else(|| {
            let mut g = self.inner.ulids.lock().unwrap_or_else(|p| p.into_inner());
            match g.generate() {
                Ok(u) => u,
                Err(overflow) => overflow.commit_overflow_increment(),
            }
        });
        let prev = ulid::Ulid::from_string(prev).ok();
        match prev {
            Some(p) if fresh <= p => p.increment().unwrap_or(fresh).to_string(),
            _ => fresh.to_string(),
        }
    }
}
