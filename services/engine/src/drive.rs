//! Bringing a run's process up to the journal: continue its warm session with the resolutions
//! that arrived since it last ran, or replay it cold from the start. Which thread runs the JS is
//! `engine::pool`'s business ([`crate::JsPlacement`]); this module decides warm or cold
//! and gathers what the process is handed.

use std::sync::Arc;

use babysitter_journal::index::EffectRecord;
use babysitter_journal::{EventType, Head};
use serde_json::Value;

use crate::host::{HostConfig, HostError};
use crate::iteration::{RunInfo, cannot_open, run_info};
use crate::pool::Warm;
use crate::session::{DriveReport, EntryCheck, Session, Shared, StartSpec};
use crate::task_files::TaskFiles;
use crate::views::{self, EffectView};
use crate::{BUNDLE_DIR, Engine, EngineError, identity, process_file};

/// What a drive produced: the report, the session to keep warm once the iteration's events are
/// journaled (`None`: not kept), and whether it continued a warm session.
pub(crate) struct Driven {
    pub report: DriveReport,
    pub session: Option<Session>,
    pub warm: bool,
}

impl Engine {
    /// Replays the run's process cold over its journal without writing anything (a check that
    /// the code still reaches the journal: what it would request, and how it ends).
    pub async fn replay_dry(&self, run_id: &str) -> Result<DriveReport, EngineError> {
        let journal = self.journal();
        let files = self.run_files(run_id).await?;
        let info = run_info(self, run_id, &files.run_json, files.inputs_json.clone())?;
        let records: Vec<Arc<EffectRecord>> = journal
            .inspect(run_id, |_, idx| idx.effects.values().cloned().collect())
            .await?;
        let all_views = views::views_of(journal, run_id, &records).await?;
        let spec = self.start_spec(run_id, &info)?;
        let shared = Shared {
            process_id: info.process_id.clone(),
            legacy_views: all_views.keys().any(|k| identity::may_be_legacy_key(k)),
            views: all_views,
            wall_now_ms: self.now_ms(),
            non_interactive: info.non_interactive,
            keep_task_defs: self.options().next_actions,
            id_source: self.options().ids.clone(),
            breakpoint_rules: self.options().breakpoint_rules.clone().map(Arc::new),
            subprocesses: self.options().subprocesses,
            ..Shared::default()
        };
        self.pool()
            .on_thread(run_id, move || {
                Session::start(&spec, shared).map(|(_, report)| report)
            })
            .await?
    }

    /// Babysitter's entry check for a new run of the process at `entry` (`run:create`,
    /// `run:assign-process`, `babysitter run`): the module loads and exports the process
    /// function `export_name` (else `process`, else the default export), in a host of its own,
    /// the process not called. Answers the code hash the run records as `processCodeHash` — the
    /// SHA-256 of the import closure ([`process_file::closure_digest`]; the entry file's own
    /// hash when it imports no file) — and the closure itself (what a remote run's bundle
    /// must carry).
    pub async fn check_entry(
        &self,
        entry: &std::path::Path,
        export_name: Option<&str>,
    ) -> Result<EntryCheck, EngineError> {
        const ID: &str = "entry-check";
        let info = RunInfo {
            process_id: ID.into(),
            run_dir: self.options().runs_root.join(ID),
            entry: entry.to_path_buf(),
            export_name: export_name.unwrap_or("process").to_owned(),
            inputs: None,
            non_interactive: true,
            process_code_hash: None,
            created_ms: 0,
        };
        let spec = self.start_spec(ID, &info)?;
        self.pool()
            .on_thread(ID, move || Session::check(&spec))
            .await?
    }

    fn start_spec(&self, run_id: &str, info: &RunInfo) -> Result<StartSpec, EngineError> {
        let entry = info
            .entry
            .canonicalize()
            .map_err(|e| cannot_open(run_id, &info.entry, &e))?;
        let root = process_file::process_root(
            &entry,
            &info.run_dir.join(BUNDLE_DIR),
            self.options().process_root.as_deref(),
        );
        let outside = || EngineError::InvalidRun {
            run_id: run_id.to_owned(),
            reason: format!(
                "process file {} is outside the process root {}",
                entry.display(),
                root.display()
            ),
        };
        let rel = entry.strip_prefix(&root).map_err(|_| outside())?;
        let rel: Vec<&str> = rel
            .components()
            .map(|c| c.as_os_str().to_str())
            .collect::<Option<_>>()
            .ok_or_else(outside)?;
        Ok(StartSpec {
            host: HostConfig {
                root,
                memory_limit: self.options().memory_limit,
                cpu_limit: self.options().cpu_limit,
                random_seed: seed_of(run_id),
                env: self.options().process_env.clone(),
                ..HostConfig::default()
            },
            entry: rel.join("/"),
            export_name: info.export_name.clone(),
            run_id: run_id.to_owned(),
            run_dir: info.run_dir.display().to_string(),
            inputs: info.inputs.clone(),
            start_ms: info.created_ms,
        })
    }

    /// Continues the run's warm session, or replays cold.
    pub(crate) async fn drive(
        &self,
        run_id: &str,
        info: &RunInfo,
        head: &Head,
    ) -> Result<Driven, EngineError> {
        let wall = self.now_ms();
        // Effect ids drawn by a continuation cut off by its time slice: the cold replay that
        // takes over requests the same effects in the same order and gets the same ids.
        let mut reuse_ids = Vec::new();
        let (warm, heavy) = self.pool().take(run_id);
        if self.options().warm
            && let Some(Warm {
                mut session,
                consumed,
                last_js,
            }) = warm
            && consumed <= head.seq
            // Code changed under the session (the entry or any module it imported): cold.
            && session.code_is_current(&self.inner.code_hashes)
            && let Some(updates) = self.warm_updates(run_id, consumed, head).await?
        {
            let files = TaskFiles::new(self.journal(), run_id);
            let deliver = prepare(&session, wall, updates, files);
            match self.pool().inline_slice(heavy, last_js) {
                Some(slice) => {
                    let outcome = {
                        let _slice = session.host().sliced(slice);
                        session.deliver(&deliver)
                    };
                    match outcome {
                        Ok(report) => {
                            return Ok(Driven {
                                report,
                                session: Some(session),
                                warm: true,
                            });
                        }
                        Err(EngineError::Host(HostError::SliceExpired)) => {
                            reuse_ids = session.take_issued_ids();
                            // The replay asks for the same effects (same ids): what the cut-off
                            // continuation wrote is gone before it does.
                            let files = session
                                .shared()
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .task_files
                                .take();
                            if let Some(files) = files {
                                files.abandon().await;
                            }
                            self.pool().mark_heavy(run_id);
                            tracing::debug!(
                                run_id,
                                "continuation outran its inline slice; replaying on a js thread"
                            );
                        }
                        Err(e) => return Err(e),
                    }
                }
                None => {
                    let (session, outcome) = self
                        .pool()
                        .on_thread(run_id, move || {
                            let r = session.deliver(&deliver);
                            (session, r)
                        })
                        .await?;
                    return outcome.map(|report| Driven {
                        report,
                        session: Some(session),
                        warm: true,
                    });
                }
            }
        }
        // Cold: every journaled effect, since the replay may reach any of them.
        let journal = self.journal();
        let records: Vec<Arc<EffectRecord>> = journal
            .inspect_now(run_id, |_, idx| idx.effects.values().cloned().collect())
            .await?;
        let all_views = views::views_of(journal, run_id, &records).await?;
        let spec = self.start_spec(run_id, info)?;
        let shared = Shared {
            process_id: info.process_id.clone(),
            legacy_views: all_views.keys().any(|k| identity::may_be_legacy_key(k)),
            views: all_views,
            wall_now_ms: wall,
            non_interactive: info.non_interactive,
            keep_task_defs: self.options().next_actions,
            id_source: self.options().ids.clone(),
            breakpoint_rules: self.options().breakpoint_rules.clone().map(Arc::new),
            subprocesses: self.options().subprocesses,
            next_ids: reuse_ids,
            task_files: Some(TaskFiles::new(journal, run_id)),
            ..Shared::default()
        };
        let keep = self.options().warm;
        let (session, report) = self
            .pool()
            .on_thread(run_id, move || Session::start(&spec, shared))
            .await??;
        Ok(Driven {
            report,
            session: keep.then_some(session),
            warm: false,
        })
    }

    /// The views of the effects resolved or cancelled after `consumed`, keyed by invocation key;
    /// `None` when the tail holds another writer's new effects (the session cannot know them:
    /// replay cold).
    async fn warm_updates(
        &self,
        run_id: &str,
        consumed: u64,
        head: &Head,
    ) -> Result<Option<Vec<(String, EffectView)>>, EngineError> {
        // What was committed through this engine meanwhile, when that is the whole tail.
        let arrived: Vec<_> = self
            .pool()
            .take_arrived(run_id)
            .into_iter()
            .filter(|a| a.seq > consumed)
            .collect();
        let whole_tail = arrived
            .iter()
            .zip(consumed + 1..)
            .all(|(a, seq)| a.seq == seq)
            && arrived.len() as u64 == head.seq - consumed;
        if whole_tail {
            return Ok(Some(arrived.into_iter().filter_map(|a| a.update).collect()));
        }
        let journal = self.journal();
        let tail = if consumed < head.seq {
            journal.read(run_id, consumed + 1, head.seq).await?
        } else {
            Vec::new()
        };
        if tail
            .iter()
            .any(|e| e.body.kind == EventType::EffectRequested)
        {
            return Ok(None);
        }
        let changed: Vec<String> = tail
            .iter()
            .filter(|e| {
                matches!(
                    e.body.kind,
                    EventType::EffectResolved | EventType::EffectCancelled
                )
            })
            .filter_map(|e| {
                e.body
                    .data
                    .get("effectId")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .collect();
        if changed.is_empty() {
            return Ok(Some(Vec::new()));
        }
        let records: Vec<Arc<EffectRecord>> = journal
            .inspect_now(run_id, |_, idx| {
                changed
                    .iter()
                    .filter_map(|id| idx.effects.get(id).cloned())
                    .collect()
            })
            .await?;
        Ok(Some(views::keyed_views(journal, run_id, &records).await?))
    }
}

/// Hands the session the new views, the wall clock and where the drive's new `task.json`s go;
/// returns the resolutions to deliver (the ones its pending promises wait on), in resolution
/// order.
fn prepare(
    session: &Session,
    wall: i64,
    updates: Vec<(String, EffectView)>,
    files: TaskFiles,
) -> Vec<EffectView> {
    {
        let mut s = session.shared().lock().unwrap_or_else(|p| p.into_inner());
        s.wall_now_ms = wall;
        s.task_files = Some(files);
        s.issued.clear();
        s.legacy_views |= updates.iter().any(|(k, _)| identity::may_be_legacy_key(k));
    }
    // A resolution the session waits on goes to its promise (the process never asks for that
    // key again in this session); the others are kept for the calls that will reach them.
    let (mut deliver, keep): (Vec<_>, Vec<_>) = updates
        .into_iter()
        .partition(|(_, v)| !v.is_pending() && session.waiting_on.contains(&v.effect_id));
    {
        let mut s = session.shared().lock().unwrap_or_else(|p| p.into_inner());
        s.views.extend(keep);
    }
    let mut deliver: Vec<EffectView> = deliver.drain(..).map(|(_, v)| v).collect();
    deliver.sort_by_key(|v| v.at_ms.unwrap_or(0));
    deliver
}

fn seed_of(run_id: &str) -> u64 {
    use sha2::Digest;
    let d = sha2::Sha256::digest(run_id.as_bytes());
    u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
}
