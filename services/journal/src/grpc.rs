//! The gRPC adapter: decode the request, call [`Journal`], encode the answer, map the error.
//! Nothing else lives here; prost types do not leave this module.

use std::pin::Pin;
use std::sync::Arc;

use babysitter_common::error::{ErrorKind, status};
use babysitter_common::server::ServerConfig;
use babysitter_proto::journal::v1 as pb;
use babysitter_proto::journal::v1::journal_service_server::{JournalService, JournalServiceServer};
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::Head;
use crate::error::{JournalError, Location};
use crate::event::{EventBody, EventType, StoredEvent};
use crate::journal::{Journal, NewEvent, spawn_whole};
use crate::leadership::{Acquired, Arbiter, Candidate, LeaseKeeper, Pass, Term};
use crate::store::{BlobRef, RunFile, RunFiles};

/// Most events per streamed `Read` / `Watch` message.
const EVENTS_PER_MESSAGE: usize = 256;

/// Metadata keys carrying the head on an append conflict.
pub const HEAD_SEQ_KEY: &str = "babysitter-journal-head-seq";
pub const HEAD_ULID_KEY: &str = "babysitter-journal-head-ulid";
/// Metadata key naming what a NotFound is about: `run`, `blob` or `run-file`.
pub const MISSING_KEY: &str = "babysitter-journal-missing";

/// `JournalService` over a [`Journal`].
#[derive(Debug, Clone)]
pub struct JournalGrpcServer {
    journal: Journal,
    shutdown: CancellationToken,
    /// Arbitrates the writers' leadership leases and fences their writes: the one arbiter every
    /// orchestrator of this journal goes through, so the fence is exact (see [`crate::leadership`]).
    arbiter: Arc<Arbiter>,
}

impl JournalGrpcServer {
    pub fn new(journal: Journal) -> Self {
        let arbiter = Arc::new(Arbiter::new(journal.store().clone()));
        Self {
            journal,
            shutdown: CancellationToken::new(),
            arbiter,
        }
    }

    /// Admits a write under `fence` (none: an unfenced writer, such as a single orchestrator
    /// without leadership or a tool); the pass must be held until the write is done.
    async fn admit(&self, fence: Option<pb::WriterFence>) -> Result<Option<Pass>, Status> {
        match fence {
            None => Ok(None),
            Some(f) => Ok(Some(self.arbiter.admit(&f.group, f.epoch).await?)),
        }
    }

    /// Ends open `Watch` streams when `shutdown` is cancelled, so draining does not wait for
    /// watchers that would never hang up by themselves.
    pub fn with_shutdown(mut self, shutdown: CancellationToken) -> Self {
        self.shutdown = shutdown;
        self
    }

    /// The tonic service, with the message-size limits and compression of `config` (the
    /// `[server]` section the [`ServerBuilder`](babysitter_common::server::ServerBuilder) serving
    /// it was built with).
    pub fn into_service(self, config: &ServerConfig) -> JournalServiceServer<Self> {
        babysitter_common::tune_grpc_service!(JournalServiceServer::new(self), config)
    }
}

impl From<JournalError> for Status {
    fn from(e: JournalError) -> Self {
        let msg = e.to_string();
        match e {
            JournalError::InvalidArgument { .. } | JournalError::InvalidEvent { .. } => {
                status(ErrorKind::InvalidArgument, msg, false, &[])
            }
            JournalError::EventTooLarge { .. } => {
                status(ErrorKind::InvalidArgument, msg, false, &[])
            }
            JournalError::RunNotFound { .. } => status(
                ErrorKind::NotFound,
                msg,
                false,
                &[(MISSING_KEY, "run".into())],
            ),
            JournalError::BlobNotFound { .. } => status(
                ErrorKind::NotFound,
                msg,
                false,
                &[(MISSING_KEY, "blob".into())],
            ),
            JournalError::RunFileNotFound { .. } => status(
                ErrorKind::NotFound,
                msg,
                false,
                &[(MISSING_KEY, "run-file".into())],
            ),
            JournalError::RunAlreadyExists { .. } => {
                status(ErrorKind::AlreadyExists, msg, false, &[])
            }
            JournalError::Conflict { head, .. } => status(
                ErrorKind::Conflict,
                msg,
                true,
                &[
                    (HEAD_SEQ_KEY, head.seq.to_string()),
                    (HEAD_ULID_KEY, head.ulid),
                ],
            ),
            JournalError::Locked { .. } => status(ErrorKind::Unavailable, msg, true, &[]),
            JournalError::ControlConflict { .. } => status(ErrorKind::Conflict, msg, true, &[]),
            JournalError::Fenced { .. } => status(ErrorKind::Fenced, msg, false, &[]),
            // Damage to stored data: the caller can do nothing about it; report it precisely.
            JournalError::Corrupt { .. }
            | JournalError::ChecksumMismatch { .. }
            | JournalError::SequenceGap { .. }
            | JournalError::DuplicateSequence { .. }
            | JournalError::UlidOrder { .. }
            | JournalError::HashChain { .. }
            | JournalError::BadFileName { .. }
            | JournalError::Replay { .. } => status(ErrorKind::Corrupt, msg, false, &[]),
            JournalError::UnsafeStore { .. } | JournalError::ShuttingDown => {
                status(ErrorKind::Unavailable, msg, true, &[])
            }
            JournalError::Io { .. } => status(ErrorKind::Unavailable, msg, true, &[]),
            JournalError::Remote {
                kind, retryable, ..
            } => status(kind, msg, retryable, &[]),
            JournalError::ObjectStore { ref source, .. } => match source {
                object_store::Error::NotFound { .. } => {
                    status(ErrorKind::NotFound, msg, false, &[])
                }
                _ => status(ErrorKind::Unavailable, msg, true, &[]),
            },
        }
    }
}

/// The term a renewal or release names (ttl and address play no part in either).
fn term_of((group, holder, epoch): (String, String, u64)) -> Term {
    Term {
        group,
        holder,
        address: String::new(),
        epoch,
        ttl: std::time::Duration::ZERO,
    }
}

fn to_head(h: &Head) -> pb::Head {
    pb::Head {
        seq: h.seq,
        ulid: h.ulid.clone(),
    }
}

/// A committed event from the wire, checksum verified, chain link dropped (the receiver keeps
/// no hash chain of its own: the sender's store verified it).
pub fn event_from_pb(run_id: &str, e: pb::Event) -> crate::Result<StoredEvent> {
    let at = Location::file(run_id, e.seq, crate::event::file_name(e.seq, &e.ulid));
    if !crate::event::is_ulid(&e.ulid) {
        return Err(JournalError::corrupt(
            &at,
            format!("ulid `{}` is not a ULID", e.ulid),
        ));
    }
    let data: Value = serde_json::from_slice(&e.data_json)
        .map_err(|err| JournalError::corrupt(&at, format!("data_json is not JSON: {err}")))?;
    let event = StoredEvent {
        seq: e.seq,
        ulid: e.ulid,
        body: EventBody {
            kind: EventType::parse(&e.r#type),
            recorded_at: e.recorded_at,
            data,
            sdk_version: e.sdk_version,
            extra: Default::default(),
        },
        checksum: e.checksum,
        prev_hash: None,
    };
    event.verify_checksum(&at)?;
    Ok(event)
}

/// A committed event on the wire (also used by services that relay journal events).
pub fn event_to_pb(e: &StoredEvent) -> pb::Event {
    pb::Event {
        seq: e.seq,
        ulid: e.ulid.clone(),
        r#type: e.body.kind.as_str().to_owned(),
        recorded_at: e.body.recorded_at.clone(),
        data_json: serde_json::to_vec(&e.body.data).unwrap_or_default().into(),
        sdk_version: e.body.sdk_version.clone(),
        checksum: e.checksum.clone(),
        prev_hash: e.prev_hash.clone().unwrap_or_default(),
    }
}

fn parse_json(what: &'static str, bytes: &[u8]) -> Result<Value, Status> {
    serde_json::from_slice(bytes)
        .map_err(|e| Status::from(JournalError::invalid(what, format!("not valid JSON: {e}"))))
}

fn from_pb(i: usize, e: pb::NewEvent) -> Result<NewEvent, Status> {
    if e.r#type.is_empty() {
        return Err(JournalError::invalid("events", format!("events[{i}].type is empty")).into());
    }
    let data = if e.data_json.is_empty() {
        Value::Object(Default::default())
    } else {
        serde_json::from_slice(&e.data_json).map_err(|err| {
            Status::from(JournalError::invalid(
                "events",
                format!("events[{i}].data_json is not valid JSON: {err}"),
            ))
        })?
    };
    Ok(NewEvent {
        kind: EventType::parse(&e.r#type),
        recorded_at: (!e.recorded_at.is_empty()).then_some(e.recorded_at),
        data,
        sdk_version: e.sdk_version,
        ulid: e.ulid.filter(|u| !u.is_empty()),
    })
}

type EventStream<M> = Pin<Box<dyn Stream<Item = Result<M, Status>> + Send>>;

#[tonic::async_trait]
impl JournalService for JournalGrpcServer {
    #[tracing::instrument(skip_all, fields(run_id = %req.get_ref().run_id))]
    async fn create_run(
        &self,
        req: Request<pb::CreateRunRequest>,
    ) -> Result<Response<pb::CreateRunResponse>, Status> {
        let r = req.into_inner();
        let run_json = parse_json("run_json", &r.run_json)?;
        let inputs_json = r
            .inputs_json
            .as_deref()
            .map(|b| parse_json("inputs_json", b))
            .transpose()?;
        let pass = self.admit(r.fence).await?;
        let journal = self.journal.clone();
        let head = spawn_whole(async move {
            let _pass = pass;
            journal
                .create_run(
                    &r.run_id,
                    RunFiles {
                        run_json,
                        inputs_json,
                    },
                )
                .await
        })
        .await?;
        Ok(Response::new(pb::CreateRunResponse {
            head: Some(to_head(&head)),
        }))
    }

    #[tracing::instrument(skip_all, fields(run_id = %req.get_ref().run_id))]
    async fn get_run(
        &self,
        req: Request<pb::GetRunRequest>,
    ) -> Result<Response<pb::GetRunResponse>, Status> {
        let (files, head) = self.journal.get_run(&req.get_ref().run_id).await?;
        Ok(Response::new(pb::GetRunResponse {
            run_json: crate::node_json::to_file_string(&files.run_json)
                .into_bytes()
                .into(),
            inputs_json: files
                .inputs_json
                .map(|v| crate::node_json::to_file_string(&v).into_bytes().into()),
            head: Some(to_head(&head)),
        }))
    }

    #[tracing::instrument(skip_all, fields(run_id = %req.get_ref().run_id, expected = req.get_ref().expected_next_seq))]
    async fn append(
        &self,
        req: Request<pb::AppendRequest>,
    ) -> Result<Response<pb::AppendResponse>, Status> {
        let r = req.into_inner();
        if r.expected_next_seq == 0 {
            return Err(JournalError::invalid("expected_next_seq", "must be at least 1").into());
        }
        let events = r
            .events
            .into_iter()
            .enumerate()
            .map(|(i, e)| from_pb(i, e))
            .collect::<Result<Vec<_>, _>>()?;
        let committed = match self.admit(r.fence).await? {
            None => {
                self.journal
                    .append(&r.run_id, r.expected_next_seq, events)
                    .await?
            }
            Some(pass) => {
                // The pass lives as long as the write, even if this caller goes away.
                let journal = self.journal.clone();
                spawn_whole(async move {
                    let _pass = pass;
                    journal.append(&r.run_id, r.expected_next_seq, events).await
                })
                .await?
            }
        };
        let head = committed
            .last()
            .map(|e| Head {
                seq: e.seq,
                ulid: e.ulid.clone(),
            })
            .unwrap_or_default();
        Ok(Response::new(pb::AppendResponse {
            events: committed.iter().map(event_to_pb).collect(),
            head: Some(to_head(&head)),
        }))
    }

    type ReadStream = EventStream<pb::ReadResponse>;

    #[tracing::instrument(skip_all, fields(run_id = %req.get_ref().run_id))]
    async fn read(
        &self,
        req: Request<pb::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let r = req.into_inner();
        let events = self.journal.read(&r.run_id, r.from_seq, r.to_seq).await?;
        let messages: Vec<Result<pb::ReadResponse, Status>> = events
            .chunks(EVENTS_PER_MESSAGE)
            .map(|c| {
                Ok(pb::ReadResponse {
                    events: c.iter().map(event_to_pb).collect(),
                })
            })
            .collect();
        Ok(Response::new(Box::pin(futures::stream::iter(messages))))
    }

    type WatchStream = EventStream<pb::WatchResponse>;

    #[tracing::instrument(skip_all, fields(run_id = %req.get_ref().run_id))]
    async fn watch(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let r = req.into_inner();
        crate::validate_id("run id", &r.run_id)?;
        self.journal.head(&r.run_id).await?; // fail fast on an unknown run
        let stream = self.journal.watch(&r.run_id, r.from_seq).flat_map(|batch| {
            let msgs: Vec<Result<pb::WatchResponse, Status>> = match batch {
                Ok(events) => events
                    .chunks(EVENTS_PER_MESSAGE)
                    .map(|c| {
                        Ok(pb::WatchResponse {
                            events: c.iter().map(event_to_pb).collect(),
                        })
                    })
                    .collect(),
                Err(e) => vec![Err(Status::from(e))],
            };
            futures::stream::iter(msgs)
        });
        let shutdown = self.shutdown.clone().cancelled_owned();
        Ok(Response::new(Box::pin(stream.take_until(shutdown))))
    }

    async fn get_head(
        &self,
        req: Request<pb::GetHeadRequest>,
    ) -> Result<Response<pb::GetHeadResponse>, Status> {
        let head = self.journal.head(&req.get_ref().run_id).await?;
        Ok(Response::new(pb::GetHeadResponse {
            head: Some(to_head(&head)),
        }))
    }

    async fn list_runs(
        &self,
        req: Request<pb::ListRunsRequest>,
    ) -> Result<Response<pb::ListRunsResponse>, Status> {
        let r = req.into_inner();
        let size = if r.page_size == 0 {
            100
        } else {
            r.page_size as usize
        };
        let token = (!r.page_token.is_empty()).then_some(r.page_token.as_str());
        let (run_ids, next) = self.journal.list_runs(&r.prefix, token, size).await?;
        Ok(Response::new(pb::ListRunsResponse {
            run_ids,
            next_page_token: next.unwrap_or_default(),
        }))
    }

    async fn put_blob(
        &self,
        req: Request<pb::PutBlobRequest>,
    ) -> Result<Response<pb::PutBlobResponse>, Status> {
        let r = req.into_inner();
        let size = r.content.len() as u64;
        let blob = self.journal.put_blob(&r.run_id, r.content).await?;
        Ok(Response::new(pb::PutBlobResponse {
            blob_ref: blob.to_string(),
            size,
        }))
    }

    async fn get_blob(
        &self,
        req: Request<pb::GetBlobRequest>,
    ) -> Result<Response<pb::GetBlobResponse>, Status> {
        let r = req.into_inner();
        let blob = BlobRef::parse(&r.blob_ref)?;
        let content = self.journal.get_blob(&r.run_id, &blob).await?;
        Ok(Response::new(pb::GetBlobResponse {
            content: content.to_vec().into(),
        }))
    }

    async fn put_run_file(
        &self,
        req: Request<pb::PutRunFileRequest>,
    ) -> Result<Response<pb::PutRunFileResponse>, Status> {
        let r = req.into_inner();
        let file = RunFile::parse(&r.path)?;
        let pass = self.admit(r.fence).await?;
        let journal = self.journal.clone();
        spawn_whole(async move {
            let _pass = pass;
            journal.put_run_file(&r.run_id, &file, r.content).await
        })
        .await?;
        Ok(Response::new(pb::PutRunFileResponse {}))
    }

    #[tracing::instrument(skip_all, fields(group = %req.get_ref().group, holder = %req.get_ref().holder))]
    async fn acquire_leadership(
        &self,
        req: Request<pb::AcquireLeadershipRequest>,
    ) -> Result<Response<pb::AcquireLeadershipResponse>, Status> {
        let r = req.into_inner();
        let candidate = Candidate {
            group: r.group,
            holder: r.holder,
            address: r.address,
            ttl: std::time::Duration::from_millis(r.ttl_ms),
        };
        let (granted, term) = match self.arbiter.acquire(&candidate).await? {
            Acquired::Granted(t) => (true, t),
            Acquired::Held(t) => (false, t),
        };
        Ok(Response::new(pb::AcquireLeadershipResponse {
            granted,
            current: Some(pb::Leadership {
                group: term.group,
                holder: term.holder,
                address: term.address,
                epoch: term.epoch,
                ttl_ms: term.ttl.as_millis() as u64,
            }),
        }))
    }

    async fn renew_leadership(
        &self,
        req: Request<pb::RenewLeadershipRequest>,
    ) -> Result<Response<pb::RenewLeadershipResponse>, Status> {
        let r = req.into_inner();
        self.arbiter
            .renew(&term_of((r.group, r.holder, r.epoch)))
            .await?;
        Ok(Response::new(pb::RenewLeadershipResponse {}))
    }

    async fn release_leadership(
        &self,
        req: Request<pb::ReleaseLeadershipRequest>,
    ) -> Result<Response<pb::ReleaseLeadershipResponse>, Status> {
        let r = req.into_inner();
        self.arbiter
            .release(&term_of((r.group, r.holder, r.epoch)))
            .await?;
        Ok(Response::new(pb::ReleaseLeadershipResponse {}))
    }

    async fn get_run_file(
        &self,
        req: Request<pb::GetRunFileRequest>,
    ) -> Result<Response<pb::GetRunFileResponse>, Status> {
        let r = req.into_inner();
        let file = RunFile::parse(&r.path)?;
        let content = self.journal.get_run_file(&r.run_id, &file).await?;
        Ok(Response::new(pb::GetRunFileResponse { content }))
    }

    async fn get_state(
        &self,
        req: Request<pb::GetStateRequest>,
    ) -> Result<Response<pb::GetStateResponse>, Status> {
        let s = self.journal.state(&req.get_ref().run_id).await?;
        Ok(Response::new(pb::GetStateResponse {
            state_json: s.state_json.to_vec().into(),
            head: Some(to_head(&s.head)),
            snapshot_seq: s.snapshot_seq,
        }))
    }

    async fn create_snapshot(
        &self,
        req: Request<pb::CreateSnapshotRequest>,
    ) -> Result<Response<pb::CreateSnapshotResponse>, Status> {
        let seq = self.journal.snapshot(&req.get_ref().run_id).await?;
        Ok(Response::new(pb::CreateSnapshotResponse { seq }))
    }

    async fn get_snapshot(
        &self,
        req: Request<pb::GetSnapshotRequest>,
    ) -> Result<Response<pb::GetSnapshotResponse>, Status> {
        let r = req.into_inner();
        crate::validate_id("run id", &r.run_id)?;
        let at_most = (r.at_most_seq > 0).then_some(r.at_most_seq);
        let snapshot = self
            .journal
            .store()
            .latest_snapshot(&r.run_id, at_most)
            .await?;
        let snapshot_json = match snapshot {
            Some(s) => serde_json::to_vec(&s)
                .map_err(|e| status(ErrorKind::Internal, e.to_string(), false, &[]))?
                .into(),
            None => Default::default(),
        };
        Ok(Response::new(pb::GetSnapshotResponse { snapshot_json }))
    }
}
