//! A [`JournalStore`] backed by a remote `JournalService`: how an orchestrator (or any other
//! process) keeps its own [`crate::Journal`] — verified view, effect index, watchers — over a
//! journal that another process owns.
//!
//! The local journal seals every event itself (sequence number, ULID, checksum) and sends it with
//! its ULID; the server re-seals the same fields, so both sides hold byte-identical events, and
//! the committed checksums are compared to prove it. The server's create-only append at
//! `expected_next_seq` is the single point of truth for ordering: a second writer gets the usual
//! retryable [`JournalError::Conflict`] with the head.
//!
//! What stays on the server: snapshots and `state/state.json` (derived, rebuilt there), hash-chain
//! links (verified there before anything is sent). Events read back are re-verified here
//! (checksums, contiguous sequence numbers, ULID order) but carry no chain links: the remote view
//! is the filesystem-style [`Layout::Babysitter`].

use std::sync::Arc;

use async_trait::async_trait;
use babysitter_common::auth::Secret;
use babysitter_common::client::{AuthedChannel, ClientOptions, client_tls};
use babysitter_common::error::{ErrorKind, error_kind, retryable};
use babysitter_common::tls::ClientTlsConfig;
use babysitter_proto::journal::v1 as pb;
use babysitter_proto::journal::v1::journal_service_client::JournalServiceClient;
use bytes::Bytes;
use serde_json::Value;
use tonic::{Code, Status};

use crate::error::{JournalError, Location, Result};
use crate::event::StoredEvent;
use crate::grpc::{HEAD_SEQ_KEY, HEAD_ULID_KEY, MISSING_KEY};
use crate::index::ChainCheck;
use crate::leadership::WriterTerm;
use crate::store::{BlobRef, JournalStore, Layout, RunFile, RunFiles, Snapshot};
use crate::{Head, node_json};

mod leases;

/// A journal store that is a `JournalService` elsewhere.
#[derive(Clone)]
pub struct RemoteStore {
    client: JournalServiceClient<AuthedChannel>,
    url: String,
    /// The writer's term, sent with every write when set (see [`RemoteStore::with_fence`]).
    fence: Option<(Arc<WriterTerm>, String)>,
}

impl std::fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteStore")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl RemoteStore {
    /// A store talking to the journal service at `url` (`http://127.0.0.1:50051`), sending
    /// `token` as its bearer token. Connects lazily: the first call reports an unreachable server.
    ///
    /// Transport settings are the [`ClientOptions`] defaults: an append whose events come to more
    /// than 64 MiB is refused (`OutOfRange`), as the server would refuse it by default.
    pub fn connect(url: &str, token: Option<&Secret>) -> Result<Self> {
        Self::connect_tls(url, token, &ClientTlsConfig::default())
    }

    /// [`RemoteStore::connect`] with the TLS settings `tls` (for an `https://` URL).
    pub fn connect_tls(url: &str, token: Option<&Secret>, tls: &ClientTlsConfig) -> Result<Self> {
        let client = client_tls(url, token, &ClientOptions::default(), tls).map_err(|e| {
            JournalError::UnsafeStore {
                reason: e.to_string(),
            }
        })?;
        Ok(Self {
            client,
            url: url.to_owned(),
            fence: None,
        })
    }

    /// Every write (create, append, run file) carries `term`'s epoch of `group`, and is refused
    /// here without a term; a write the service fences deposes the term.
    pub fn with_fence(mut self, term: Arc<WriterTerm>, group: &str) -> Self {
        self.fence = Some((term, group.to_owned()));
        self
    }

    fn fence(&self) -> Result<Option<pb::WriterFence>> {
        let Some((term, group)) = &self.fence else {
            return Ok(None);
        };
        let t = term.require(group)?;
        Ok(Some(pb::WriterFence {
            group: t.group,
            epoch: t.epoch,
        }))
    }

    /// A write's failure; a fenced one ends the term.
    fn write_error(
        &self,
        run_id: &str,
        call: &'static str,
        fence: Option<&pb::WriterFence>,
        s: Status,
    ) -> JournalError {
        match (fence, error_kind(&s)) {
            (Some(f), Some(ErrorKind::Fenced)) => {
                if let Some((term, _)) = &self.fence {
                    term.depose(f.epoch);
                }
                JournalError::Fenced {
                    group: f.group.clone(),
                    epoch: f.epoch,
                    reason: s.message().to_owned(),
                }
            }
            _ => self.error(run_id, call, s),
        }
    }

    fn client(&self) -> JournalServiceClient<AuthedChannel> {
        self.client.clone()
    }

    /// A remote failure as the journal error the same failure would be locally.
    fn error(&self, run_id: &str, call: &'static str, s: Status) -> JournalError {
        let kind = error_kind(&s);
        match (s.code(), kind) {
            (_, Some(ErrorKind::Conflict)) if s.metadata().get(HEAD_SEQ_KEY).is_some() => {
                let meta = |k: &str| {
                    s.metadata()
                        .get(k)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned()
                };
                JournalError::Conflict {
                    run_id: run_id.to_owned(),
                    expected: 0,
                    head: Head {
                        seq: meta(HEAD_SEQ_KEY).parse().unwrap_or(0),
                        ulid: meta(HEAD_ULID_KEY),
                    },
                }
            }
            (Code::AlreadyExists, _) if call == "CreateRun" => JournalError::RunAlreadyExists {
                run_id: run_id.to_owned(),
            },
            (Code::NotFound, _) => {
                match s.metadata().get(MISSING_KEY).and_then(|v| v.to_str().ok()) {
                    Some("run") => JournalError::RunNotFound {
                        run_id: run_id.to_owned(),
                    },
                    Some("blob") => JournalError::BlobNotFound {
                        run_id: run_id.to_owned(),
                        blob_ref: s.message().to_owned(),
                    },
                    Some("run-file") => JournalError::RunFileNotFound {
                        run_id: run_id.to_owned(),
                        path: s.message().to_owned(),
                    },
                    _ => self.remote(call, kind, &s),
                }
            }
            _ => self.remote(call, kind, &s),
        }
    }

    fn remote(&self, call: &'static str, kind: Option<ErrorKind>, s: &Status) -> JournalError {
        JournalError::Remote {
            url: self.url.clone(),
            call,
            kind: kind.unwrap_or(ErrorKind::Unavailable),
            retryable: retryable(s) || s.code() == Code::Unavailable,
            message: s.message().to_owned(),
        }
    }
}

fn head_of(h: Option<pb::Head>) -> Head {
    h.map(|h| Head {
        seq: h.seq,
        ulid: h.ulid,
    })
    .unwrap_or_default()
}

fn to_json_bytes(v: &Value) -> Bytes {
    Bytes::from(node_json::to_file_string(v).into_bytes())
}

#[async_trait]
impl JournalStore for RemoteStore {
    fn layout(&self) -> Layout {
        Layout::Babysitter
    }

    fn describe(&self) -> String {
        format!("journal service at {}", self.url)
    }

    async fn create_run(&self, run_id: &str, files: &RunFiles) -> Result<()> {
        let fence = self.fence()?;
        self.client()
            .create_run(pb::CreateRunRequest {
                run_id: run_id.to_owned(),
                run_json: to_json_bytes(&files.run_json),
                inputs_json: files.inputs_json.as_ref().map(to_json_bytes),
                fence: fence.clone(),
            })
            .await
            .map_err(|s| self.write_error(run_id, "CreateRun", fence.as_ref(), s))?;
        Ok(())
    }

    async fn get_run(&self, run_id: &str) -> Result<RunFiles> {
        let r = self
            .client()
            .get_run(pb::GetRunRequest {
                run_id: run_id.to_owned(),
            })
            .await
            .map_err(|s| self.error(run_id, "GetRun", s))?
            .into_inner();
        let at = Location::object(run_id, "run.json");
        let parse = |b: &[u8]| {
            serde_json::from_slice::<Value>(b)
                .map_err(|e| JournalError::corrupt(&at, format!("not JSON: {e}")))
        };
        Ok(RunFiles {
            run_json: parse(&r.run_json)?,
            inputs_json: r.inputs_json.as_deref().map(parse).transpose()?,
        })
    }

    async fn commit(&self, run_id: &str, events: &[StoredEvent]) -> Result<()> {
        let Some(first) = events.first() else {
            return Ok(());
        };
        let fence = self.fence()?;
        let request = pb::AppendRequest {
            fence: fence.clone(),
            run_id: run_id.to_owned(),
            expected_next_seq: first.seq,
            events: events
                .iter()
                .map(|e| pb::NewEvent {
                    r#type: e.body.kind.as_str().to_owned(),
                    recorded_at: e.body.recorded_at.clone(),
                    data_json: Bytes::from(serde_json::to_vec(&e.body.data).unwrap_or_default()),
                    sdk_version: e.body.sdk_version.clone(),
                    ulid: Some(e.ulid.clone()),
                })
                .collect(),
        };
        let committed = self
            .client()
            .append(request)
            .await
            .map_err(
                |s| match self.write_error(run_id, "Append", fence.as_ref(), s) {
                    JournalError::Conflict { run_id, head, .. } => JournalError::Conflict {
                        run_id,
                        expected: first.seq,
                        head,
                    },
                    other => other,
                },
            )?
            .into_inner()
            .events;
        // The server sealed the same fields: anything else means the two sides disagree.
        let same = committed.len() == events.len()
            && committed
                .iter()
                .zip(events)
                .all(|(c, e)| c.seq == e.seq && c.ulid == e.ulid && c.checksum == e.checksum);
        if !same {
            return Err(JournalError::corrupt(
                &Location::file(run_id, first.seq, first.file_name()),
                "the journal service committed different events than were sent",
            ));
        }
        Ok(())
    }

    async fn load(
        &self,
        run_id: &str,
        from: &ChainCheck,
        to: Option<u64>,
    ) -> Result<Vec<StoredEvent>> {
        let from_seq = from.head.seq + 1;
        if to.is_some_and(|t| t < from_seq) {
            return Ok(Vec::new());
        }
        let mut stream = self
            .client()
            .read(pb::ReadRequest {
                run_id: run_id.to_owned(),
                from_seq,
                to_seq: to.unwrap_or(0),
            })
            .await
            .map_err(|s| self.error(run_id, "Read", s))?
            .into_inner();
        let mut chain = ChainCheck {
            linked: false,
            ..from.clone()
        };
        let mut out = Vec::new();
        while let Some(msg) = stream
            .message()
            .await
            .map_err(|s| self.error(run_id, "Read", s))?
        {
            for e in msg.events {
                let event = crate::grpc::event_from_pb(run_id, e)?;
                chain.push(
                    &event,
                    &Location::file(run_id, event.seq, event.file_name()),
                )?;
                out.push(event);
            }
        }
        Ok(out)
    }

    async fn head(&self, run_id: &str, _hint: Option<&Head>) -> Result<Head> {
        let r = self
            .client()
            .get_head(pb::GetHeadRequest {
                run_id: run_id.to_owned(),
            })
            .await
            .map_err(|s| self.error(run_id, "GetHead", s))?;
        Ok(head_of(r.into_inner().head))
    }

    async fn list_runs(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>> {
        let mut out = Vec::new();
        let mut token = after.unwrap_or_default().to_owned();
        while out.len() < limit {
            let r = self
                .client()
                .list_runs(pb::ListRunsRequest {
                    prefix: prefix.to_owned(),
                    page_size: (limit - out.len()).min(1000) as u32,
                    page_token: token.clone(),
                })
                .await
                .map_err(|s| self.error("", "ListRuns", s))?
                .into_inner();
            out.extend(r.run_ids);
            if r.next_page_token.is_empty() {
                break;
            }
            token = r.next_page_token;
        }
        out.truncate(limit);
        Ok(out)
    }

    async fn put_blob(&self, run_id: &str, content: Bytes) -> Result<BlobRef> {
        let r = self
            .client()
            .put_blob(pb::PutBlobRequest {
                run_id: run_id.to_owned(),
                content,
            })
            .await
            .map_err(|s| self.error(run_id, "PutBlob", s))?;
        BlobRef::parse(&r.into_inner().blob_ref)
    }

    async fn get_blob(&self, run_id: &str, blob: &BlobRef) -> Result<Bytes> {
        let r = self
            .client()
            .get_blob(pb::GetBlobRequest {
                run_id: run_id.to_owned(),
                blob_ref: blob.to_string(),
            })
            .await
            .map_err(|s| self.error(run_id, "GetBlob", s))?;
        let content = r.into_inner().content;
        blob.verify(run_id, &content)?;
        Ok(content)
    }

    async fn put_snapshot(&self, run_id: &str, _snapshot: &Snapshot) -> Result<()> {
        // The service snapshots its own view at the head, which is this one (same events).
        self.client()
            .create_snapshot(pb::CreateSnapshotRequest {
                run_id: run_id.to_owned(),
            })
            .await
            .map_err(|s| self.error(run_id, "CreateSnapshot", s))?;
        Ok(())
    }

    async fn latest_snapshot(
        &self,
        run_id: &str,
        at_most: Option<u64>,
    ) -> Result<Option<Snapshot>> {
        if at_most == Some(0) {
            return Ok(None); // on the wire 0 means "the newest"
        }
        let r = self
            .client()
            .get_snapshot(pb::GetSnapshotRequest {
                run_id: run_id.to_owned(),
                at_most_seq: at_most.unwrap_or(0),
            })
            .await
            .map_err(|s| self.error(run_id, "GetSnapshot", s))?
            .into_inner();
        if r.snapshot_json.is_empty() {
            return Ok(None);
        }
        let mut snapshot: Snapshot = serde_json::from_slice(&r.snapshot_json).map_err(|e| {
            JournalError::corrupt(
                &Location::object(run_id, "snapshot"),
                format!("the journal service sent an unreadable snapshot: {e}"),
            )
        })?;
        if snapshot.run_id != run_id {
            return Err(JournalError::corrupt(
                &Location::object(run_id, "snapshot"),
                format!("the snapshot is of run {}", snapshot.run_id),
            ));
        }
        // This side's view carries no chain links (module docs).
        snapshot.chain.linked = false;
        Ok(Some(snapshot))
    }

    async fn put_run_file(&self, run_id: &str, file: &RunFile, content: Bytes) -> Result<()> {
        let fence = self.fence()?;
        self.client()
            .put_run_file(pb::PutRunFileRequest {
                run_id: run_id.to_owned(),
                path: file.path(),
                content,
                fence: fence.clone(),
            })
            .await
            .map_err(|s| self.write_error(run_id, "PutRunFile", fence.as_ref(), s))?;
        Ok(())
    }

    async fn get_run_file(&self, run_id: &str, file: &RunFile) -> Result<Bytes> {
        match self
            .client()
            .get_run_file(pb::GetRunFileRequest {
                run_id: run_id.to_owned(),
                path: file.path(),
            })
            .await
        {
            Ok(r) => Ok(r.into_inner().content),
            Err(s) => Err(match self.error(run_id, "GetRunFile", s) {
                JournalError::RunFileNotFound { run_id, .. } => JournalError::RunFileNotFound {
                    run_id,
                    path: file.path(),
                },
                other => other,
            }),
        }
    }

    async fn read_state_cache(&self, _run_id: &str) -> Result<Option<Bytes>> {
        // Derived state is rebuilt from the verified events this side holds.
        Ok(None)
    }

    async fn write_state_cache(&self, _run_id: &str, _content: Bytes) -> Result<()> {
        Ok(())
    }
}
