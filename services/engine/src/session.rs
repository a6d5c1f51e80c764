//! One run's live JS session: the QuickJS host with the engine runtime, the process module and
//! the process's promise. It lives on one JS worker thread (QuickJS values are not `Send`); the
//! async side talks to it through [`crate::pool`].
//!
//! Cold start loads the process and calls it; later iterations on a warm session deliver the
//! resolutions that arrived since (pending promises resolve, the process continues) instead of
//! replaying from the start. Both drive the job queue to quiescence, releasing parallel loops
//! innermost-first, so effects are requested in the reference's order either way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rquickjs::{Ctx, Function, Object};
use serde_json::{Value, json};

use crate::host::{HostConfig, HostError, JsHost, precompiled, set_slot, slot};
use crate::identity;
use crate::js_shape;
use crate::js_value;
use crate::task_files::{Streamed, TaskFiles};
use crate::views::EffectView;
use crate::{EngineError, FastMap, FastSet};

pub use crate::host::precompiled::SDK_MODULE;

/// A new effect the process asked for in this iteration.
#[derive(Debug, Clone)]
pub struct Request {
    pub effect_id: String,
    pub task_id: String,
    pub step_id: String,
    pub invocation_key: String,
    pub kind: String,
    pub label: String,
    pub labels: Vec<String>,
    /// The TaskDef, kept when babysitter's `nextActions` show it ([`Shared::keep_task_defs`]).
    pub task_def: Option<Value>,
    /// The `task.json` document.
    pub task_doc: Value,
}

/// A `ctx.log` line, with the per-run sequence number used to de-duplicate across replays.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    pub seq: u64,
    pub label: Option<String>,
    pub message: String,
}

/// Where the process stands after a drive.
#[derive(Debug, Clone, PartialEq)]
pub enum ProcessState {
    Pending,
    Returned(Value),
    Halted {
        reason: String,
        payload: Option<Value>,
    },
    Threw(Value),
}

/// What one drive produced.
#[derive(Debug)]
pub struct DriveReport {
    /// Time spent in the JS engine for this drive (start or delivery through quiescence).
    pub js_time: std::time::Duration,
    pub state: ProcessState,
    pub requests: Vec<Request>,
    /// Effects the process is waiting on (already journaled ones and this drive's new ones).
    pub blocked: Vec<String>,
    pub logs: Vec<LogLine>,
    /// Invocation keys of journaled effects the process has reached in this session.
    pub reached: FastSet<String>,
    /// Whether the requests' `task.json`s went to the journal during the drive.
    pub task_files: Streamed,
    /// The session's code hash: its import closure as loaded when the process module was
    /// evaluated ([`crate::process_file::closure_digest`]).
    pub code_digest: Option<String>,
}

/// Rust-side state the host functions read and write during a drive.
#[derive(Default)]
pub struct Shared {
    pub process_id: String,
    /// Journaled effects by invocation key.
    pub views: FastMap<String, EffectView>,
    /// Whether some key of `views` may be a legacy (0.0.187) one ([`identity::may_be_legacy_key`]);
    /// without one the legacy fallback lookup is skipped.
    pub legacy_views: bool,
    pub occurrences: FastMap<String, u32>,
    pub legacy_counter: u32,
    pub wall_now_ms: i64,
    pub non_interactive: bool,
    /// `ctx.subprocess` is enabled ([`crate::EngineOptions::subprocesses`]).
    pub subprocesses: bool,
    /// Keep each request's TaskDef (babysitter's `nextActions` show it).
    pub keep_task_defs: bool,
    pub next_ids: Vec<String>,
    /// Effect ids drawn since the last [`Session::take_issued_ids`] (or the drive's start).
    pub issued: Vec<String>,
    pub id_source: Option<Arc<dyn Fn() -> String + Send + Sync>>,
    pub requests: Vec<Request>,
    pub logs: Vec<LogLine>,
    pub errors: Vec<String>,
    pub reached: FastSet<String>,
    /// Where breakpoint auto-approval rules are read from ([`super::breakpoints`]).
    pub breakpoint_rules: Option<Arc<std::path::PathBuf>>,
    /// Where this drive's new `task.json`s go as they are asked for (`None`: they stay in the
    /// requests); taken by the drive's report.
    pub task_files: Option<TaskFiles>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("process_id", &self.process_id)
            .field("views", &self.views.len())
            .field("requests", &self.requests.len())
            .finish_non_exhaustive()
    }
}

/// The parameters of a cold start.
#[derive(Debug, Clone)]
pub struct StartSpec {
    pub host: HostConfig,
    /// The entry module, relative to the process folder.
    pub entry: String,
    pub export_name: String,
    pub run_id: String,
    pub run_dir: String,
    pub inputs: Option<Value>,
    pub start_ms: i64,
}

/// What babysitter's entry check found ([`Session::check`]).
#[derive(Debug, Clone)]
pub struct EntryCheck {
    /// The import closure's code hash (`processCodeHash`).
    pub code_hash: String,
    /// The process root the module was loaded under.
    pub root: std::path::PathBuf,
    /// The file modules loaded, by root-relative name, with their canonical paths.
    pub modules: Vec<(String, std::path::PathBuf)>,
}

/// A host with the process module loaded ([`Session::load`]).
struct Loaded {
    host: JsHost,
    shared: Arc<Mutex<Shared>>,
    code_digest: Option<String>,
}

pub struct Session {
    host: JsHost,
    shared: Arc<Mutex<Shared>>,
    /// Effects the JS side holds pending promises for.
    pub waiting_on: FastSet<String>,
    /// The same, in program order.
    pub waiting_order: Vec<String>,
    code_digest: Option<String>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("waiting_on", &self.waiting_on.len())
            .finish_non_exhaustive()
    }
}

fn lock(shared: &Arc<Mutex<Shared>>) -> std::sync::MutexGuard<'_, Shared> {
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

fn install_host<'js>(ctx: &Ctx<'js>, shared: &Arc<Mutex<Shared>>) -> rquickjs::Result<()> {
    let host = Object::new(ctx.clone())?;
    // `String.prototype.localeCompare` (installed at session start) sorts as the reference's ICU.
    host.set(
        "localeCompare",
        Function::new(ctx.clone(), |a: String, b: String| -> i32 {
            match identity::locale_compare(&a, &b) {
                std::cmp::Ordering::Less => -1,
                std::cmp::Ordering::Equal => 0,
                std::cmp::Ordering::Greater => 1,
            }
        })?,
    )?;
    let sh = shared.clone();
    host.set(
        "step",
        Function::new(
            ctx.clone(),
            move |task_id: String, label_or_key: String, shape_json: Option<String>| {
                rquickjs::convert::List(step(
                    &mut lock(&sh),
                    &task_id,
                    &label_or_key,
                    shape_json.as_deref(),
                ))
            },
        )?,
    )?;
    let sh = shared.clone();
    host.set(
        "stepArgs",
        Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>, task_id: String, label: String, args: rquickjs::Value<'js>| {
                let shape = js_shape::shape_json(&ctx, &args)?;
                rquickjs::Result::Ok(rquickjs::convert::List(step(
                    &mut lock(&sh),
                    &task_id,
                    &label,
                    Some(&shape),
                )))
            },
        )?,
    )?;
    let sh = shared.clone();
    host.set(
        "newEffectId",
        Function::new(ctx.clone(), move || -> String {
            let mut s = lock(&sh);
            let id = if s.next_ids.is_empty() {
                match &s.id_source {
                    Some(f) => f(),
                    None => ulid::Ulid::generate().to_string(),
                }
            } else {
                s.next_ids.remove(0)
            };
            s.issued.push(id.clone());
            id
        })?,
    )?;
    let sh = shared.clone();
    host.set(
        "request",
        Function::new(
            ctx.clone(),
            move |ctx: Ctx<'js>,
                  ids: Vec<String>,
                  label: Option<String>,
                  labels: Vec<String>,
                  task_def: rquickjs::Value<'js>,
                  args: rquickjs::Value<'js>|
                  -> rquickjs::Result<()> {
                // What JSON.stringify throws (a cyclic or bigint argument) reaches the process.
                let task_def = js_value::to_json(&ctx, &task_def)?;
                let args = if args.is_undefined() {
                    None
                } else {
                    Some(js_value::to_json(&ctx, &args)?.unwrap_or(Value::Null))
                };
                let call = RequestCall {
                    ids: &ids,
                    label,
                    labels,
                    task_def,
                    args,
                };
                let mut s = lock(&sh);
                let rules = s.breakpoint_rules.clone();
                match parse_request(
                    &s.process_id,
                    s.keep_task_defs,
                    rules.as_deref().map(|p| p.as_path()),
                    call,
                ) {
                    Ok(r) => {
                        let s = &mut *s;
                        s.requests.push(r);
                        if let Some(files) = &mut s.task_files {
                            files.requested(&mut s.requests);
                        }
                    }
                    Err(e) => s.errors.push(e),
                }
                Ok(())
            },
        )?,
    )?;
    let sh = shared.clone();
    host.set(
        "wallNowMs",
        Function::new(ctx.clone(), move || -> f64 { lock(&sh).wall_now_ms as f64 })?,
    )?;
    let sh = shared.clone();
    host.set(
        "nonInteractive",
        Function::new(ctx.clone(), move || -> bool { lock(&sh).non_interactive })?,
    )?;
    let sh = shared.clone();
    host.set(
        "subprocesses",
        Function::new(ctx.clone(), move || -> bool { lock(&sh).subprocesses })?,
    )?;
    let sh = shared.clone();
    host.set(
        "log",
        Function::new(
            ctx.clone(),
            move |seq: f64, label: Option<String>, message: String| {
                lock(&sh).logs.push(LogLine {
                    seq: seq as u64,
                    label,
                    message,
                });
            },
        )?,
    )?;
    let sh = shared.clone();
    host.set(
        "autoApproved",
        Function::new(ctx.clone(), move |seq: f64, message: String| {
            lock(&sh).logs.push(LogLine {
                seq: seq as u64,
                label: Some("breakpoint:skipped".into()),
                message,
            });
        })?,
    )?;
    host.set(
        "groupHints",
        Function::new(ctx.clone(), |_frame: f64, _json: String| {})?,
    )?;
    host.set(
        "createBlobRef",
        Function::new(
            ctx.clone(),
            |_effect: String, name: String, _json: String| -> rquickjs::Result<String> {
                Err(rquickjs::Error::new_from_js_message(
                    "blob",
                    "ref",
                    format!("createBlobRef({name}) is not supported yet"),
                ))
            },
        )?,
    )?;
    ctx.globals().set("__bs_host", host)?;
    Ok(())
}

/// The identity of one `ctx.task` call and what the journal holds for it: `[stepId,
/// invocationKey, view JSON]` (no view when the effect is new).
///
/// With a shape (`shape_json`, the compact JSON of the argument shape) the step id is derived —
/// `<task>.<label>.<shapeHash>.<n>`, `n` counting earlier calls with the same base — and the
/// legacy `S00000k` counter advances, its key being the fallback lookup for runs recorded by
/// babysitter 0.0.187. Without one, `label_or_key` is the explicit step id.
fn step(
    s: &mut Shared,
    task_id: &str,
    label_or_key: &str,
    shape_json: Option<&str>,
) -> (String, String, Option<String>) {
    let (step_id, legacy) = match shape_json {
        Some(shape) => {
            s.legacy_counter += 1;
            let legacy = s
                .legacy_views
                .then(|| identity::legacy_step_id(s.legacy_counter));
            let base =
                identity::step_base(task_id, Some(label_or_key), &identity::shape_hash(shape));
            let occurrence = match s.occurrences.get_mut(&base) {
                Some(n) => {
                    *n += 1;
                    *n - 1
                }
                None => {
                    s.occurrences.insert(base.clone(), 1);
                    0
                }
            };
            (identity::step_id(&base, occurrence), legacy)
        }
        None => (label_or_key.to_owned(), None),
    };
    let key = identity::invocation_key(&s.process_id, &step_id, task_id);
    let mut found_key = key.clone();
    if !s.views.contains_key(&found_key)
        && let Some(l) = legacy.as_deref()
    {
        found_key = identity::invocation_key(&s.process_id, l, task_id);
    }
    let view = s.views.get(&found_key).map(EffectView::to_js);
    if view.is_some() {
        s.reached.insert(found_key);
    }
    (step_id, key, view)
}

/// What the runtime's `host.request` hands over for a new effect.
struct RequestCall<'a> {
    /// `[effectId, taskId, stepId, kind]`.
    ids: &'a [String],
    label: Option<String>,
    labels: Vec<String>,
    /// The TaskDef; `None` when `JSON.stringify` gives `undefined` for it.
    task_def: Option<Value>,
    /// The args; `None` when they were `undefined`.
    args: Option<Value>,
}

fn parse_request(
    process_id: &str,
    keep_task_def: bool,
    rules: Option<&std::path::Path>,
    call: RequestCall<'_>,
) -> Result<Request, String> {
    let [effect_id, task_id, step_id, kind] = call.ids else {
        return Err("engine runtime sent a bad request: expected four ids".into());
    };
    let label = call
        .label
        .ok_or_else(|| "request without label".to_owned())?;
    let mut task_def = call.task_def.unwrap_or(Value::Null);
    if kind == "breakpoint" {
        match super::breakpoints::auto_approval_for(&task_def, rules) {
            Some(Ok(a)) => {
                if let Value::Object(def) = &mut task_def {
                    def.insert("autoApproval".into(), Value::Object(a));
                }
            }
            // As for the reference: no advice, the breakpoint still stops.
            Some(Err(e)) => {
                tracing::warn!(effect_id, error = %e, "breakpoint auto-approval not evaluated")
            }
            None => {}
        }
    }
    let args = call.args;
    let kept = keep_task_def.then(|| task_def.clone());
    let invocation_key = identity::invocation_key(process_id, step_id, task_id);
    let inputs = match args {
        None => identity::TaskInputs::Undefined,
        Some(args) => identity::TaskInputs::Inline(args),
    };
    let ids = identity::TaskJsonIds {
        effect_id,
        task_id,
        invocation_key: &invocation_key,
        step_id,
    };
    let doc = identity::task_json(task_def, &ids, inputs, Some("6.0.0"))
        .map_err(|e| format!("task {task_id}: {e}"))?;
    Ok(Request {
        effect_id: effect_id.clone(),
        invocation_key,
        task_id: task_id.clone(),
        step_id: step_id.clone(),
        kind: kind.clone(),
        label,
        labels: call.labels,
        task_doc: doc,
        task_def: kept,
    })
}

const START_JS: &str = r#"
(function (fn, inputsJson, hasInputs) {
  const inputs = hasInputs ? JSON.parse(inputsJson) : undefined;
  const st = { state: "pending" };
  globalThis.__bs_state = st;
  Promise.resolve().then(() => fn(inputs, globalThis.__bs_engine.ctx)).then(
    (value) => { st.state = "fulfilled"; st.value = value; },
    (error) => { st.state = "rejected"; st.error = error; });
})
"#;

/// Where the process stands and what it waits on: `[state, pending ids, details JSON]` — the
/// details (value, halt reason, error) only once the process has settled, so the report of a
/// process that still waits (every warm iteration) serialises nothing.
const REPORT_JS: &str = r#"
(function () {
  const st = globalThis.__bs_state;
  const pending = globalThis.__bs_engine.pendingIds();
  if (!st || st.state === "pending") return ["pending", pending, null];
  if (st.state === "fulfilled") {
    return ["fulfilled", pending, JSON.stringify({ value: st.value === undefined ? null : st.value })];
  }
  const e = st.error;
  if (e && e.name === "RunHaltedError") {
    return ["halted", pending, JSON.stringify({ reason: e.reason, payload: e.payload })];
  }
  const err = (e instanceof Error || (e && typeof e === "object" && "message" in e))
    ? { name: e.name || "Error", message: String(e.message), stack: e.stack, data: e.data }
    : { name: "Error", message: String(e) };
  return ["rejected", pending, JSON.stringify({ error: err })];
})
"#;

/// The runtime functions a session calls on every drive, looked up once and kept in the host's
/// slots (they move with the runtime; a `Persistent` would tie the session to its thread).
fn install_fns(host: &JsHost) -> Result<(), EngineError> {
    host.context().with(|ctx| -> Result<(), EngineError> {
        let js = |e| EngineError::from(HostError::from_js(&ctx, e));
        let engine: Object = ctx.globals().get("__bs_engine").map_err(js)?;
        let deliver: Function = engine.get("deliver").map_err(js)?;
        let release_one: Function = engine.get("releaseOne").map_err(js)?;
        let report: Function = ctx.eval(REPORT_JS).map_err(js)?;
        set_slot(&ctx, "deliver", deliver).map_err(js)?;
        set_slot(&ctx, "releaseOne", release_one).map_err(js)?;
        set_slot(&ctx, "report", report).map_err(js)?;
        Ok(())
    })
}

/// One of the functions [`install_fns`] kept.
fn engine_fn<'js>(ctx: &Ctx<'js>, name: &str) -> rquickjs::Result<Function<'js>> {
    slot(ctx, name)?.ok_or_else(|| rquickjs::Error::new_from_js("undefined", "engine function"))
}

impl Session {
    /// Babysitter's entry check: the process module loads (is evaluated) in a host of its own
    /// and exports the process function (`mod[export] ?? mod.process ?? mod.default`); the
    /// process is not called. Answers the import closure's code hash.
    pub fn check(spec: &StartSpec) -> Result<EntryCheck, EngineError> {
        let loaded = Self::load(spec, Shared::default())?;
        let main = loaded
            .host
            .export_function(&spec.entry, &spec.export_name)?;
        // A Persistent must never outlive its runtime.
        drop(main);
        let code_hash = loaded
            .code_digest
            .ok_or_else(|| EngineError::Engine("the process module was not loaded".into()))?;
        Ok(EntryCheck {
            code_hash,
            root: loaded.host.root().to_path_buf(),
            modules: loaded
                .host
                .loaded_modules()
                .into_iter()
                .map(|(name, m)| (name, m.path))
                .collect(),
        })
    }

    /// Creates the host, loads the runtime, the SDK and the process module; answers the host
    /// and the import closure's code hash.
    fn load(spec: &StartSpec, shared: Shared) -> Result<Loaded, EngineError> {
        let mut cfg = spec.host.clone();
        cfg.builtin_modules
            .push((SDK_MODULE.to_owned(), precompiled::SDK_JS.to_owned()));
        let host = JsHost::new(cfg)?;
        let shared = Arc::new(Mutex::new(shared));
        host.context().with(|ctx| -> Result<(), EngineError> {
            install_host(&ctx, &shared).map_err(|e| HostError::from_js(&ctx, e))?;
            precompiled::evaluate(&ctx, precompiled::RUNTIME_MODULE, precompiled::RUNTIME_JS)
                .map_err(|e| HostError::from_js(&ctx, e))?;
            // Node's localeCompare is ICU's; QuickJS compares code points. Processes get ICU.
            ctx.eval::<(), _>(
                "String.prototype.localeCompare = function (that) { return __bs_host.localeCompare(String(this), String(that)); };",
            )
            .map_err(|e| HostError::from_js(&ctx, e))?;
            let engine: Object = ctx.globals().get("__bs_engine").map_err(|e| HostError::from_js(&ctx, e))?;
            let set_run: Function = engine.get("setRun").map_err(|e| HostError::from_js(&ctx, e))?;
            set_run
                .call::<_, ()>((spec.run_id.as_str(), spec.run_dir.as_str(), spec.start_ms as f64))
                .map_err(|e| HostError::from_js(&ctx, e))?;
            Ok(())
        })?;
        host.load_module(&spec.entry)?;
        let code_digest = {
            let loaded = host.loaded_modules();
            crate::process_file::closure_digest(
                &spec.entry,
                loaded.iter().map(|(n, m)| (n.as_str(), m.sha256.as_str())),
            )
        };
        Ok(Loaded {
            host,
            shared,
            code_digest,
        })
    }

    /// Creates the host, loads the runtime, the SDK and the process, and calls the process.
    pub fn start(spec: &StartSpec, shared: Shared) -> Result<(Session, DriveReport), EngineError> {
        let started = tokio::time::Instant::now();
        let Loaded {
            host,
            shared,
            code_digest,
        } = Self::load(spec, shared)?;
        let main = host.export_function(&spec.entry, &spec.export_name)?;
        let inputs_json = spec
            .inputs
            .as_ref()
            .map(Value::to_string)
            .unwrap_or_default();
        host.with(|ctx| -> Result<(), EngineError> {
            let start: Function = ctx
                .eval(START_JS)
                .map_err(|e| HostError::from_js(&ctx, e))?;
            let f = main
                .clone()
                .restore(&ctx)
                .map_err(|e| HostError::from_js(&ctx, e))?;
            start
                .call::<_, ()>((f, inputs_json.as_str(), spec.inputs.is_some()))
                .map_err(|e| HostError::from_js(&ctx, e))?;
            Ok(())
        })?;
        // A Persistent must never outlive its runtime (QuickJS aborts the process).
        drop(main);
        install_fns(&host)?;
        let mut session = Session {
            host,
            shared,
            waiting_on: FastSet::default(),
            waiting_order: Vec::new(),
            code_digest,
        };
        let mut report = session.drive()?;
        report.js_time = started.elapsed();
        Ok((session, report))
    }

    pub fn shared(&self) -> &Arc<Mutex<Shared>> {
        &self.shared
    }

    /// Hands resolutions to the pending promises (warm runs), then drives.
    pub fn deliver(&mut self, resolutions: &[EffectView]) -> Result<DriveReport, EngineError> {
        let started = tokio::time::Instant::now();
        // One at a time, in program order, each continuation run to quiescence before the
        // next: the order a cold replay would run them in.
        let rank: HashMap<&str, usize> = self
            .waiting_order
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        let mut ordered: Vec<&EffectView> = resolutions.iter().collect();
        ordered.sort_by_key(|v| {
            rank.get(v.effect_id.as_str())
                .copied()
                .unwrap_or(usize::MAX)
        });
        for v in ordered {
            self.host.with(|ctx| -> Result<(), EngineError> {
                let js = |e| EngineError::from(HostError::from_js(&ctx, e));
                let deliver = engine_fn(&ctx, "deliver").map_err(js)?;
                let (outcome, payload) = v.delivery();
                let at_ms = v.at_ms.map(|ms| ms as f64);
                deliver
                    .call::<_, bool>((
                        v.effect_id.as_str(),
                        v.kind.as_deref(),
                        outcome,
                        payload,
                        at_ms,
                    ))
                    .map_err(js)?;
                Ok(())
            })?;
            self.quiesce()?;
        }
        let mut report = self.report()?;
        report.js_time = started.elapsed();
        Ok(report)
    }

    /// Runs the job queue to quiescence, letting parallel loops go on innermost-first.
    fn drive(&mut self) -> Result<DriveReport, EngineError> {
        self.quiesce()?;
        self.report()
    }

    /// Runs the job queue until nothing can progress, releasing parallel loops innermost-first.
    fn quiesce(&mut self) -> Result<(), EngineError> {
        loop {
            self.host.drive()?;
            let released = self
                .host
                .context()
                .with(|ctx| -> Result<bool, EngineError> {
                    let js = |e| EngineError::from(HostError::from_js(&ctx, e));
                    let release = engine_fn(&ctx, "releaseOne").map_err(js)?;
                    release.call::<_, bool>(()).map_err(js)
                })?;
            if !released {
                return Ok(());
            }
        }
    }

    /// Where the process stands now, and what it asked for since the last report.
    fn report(&mut self) -> Result<DriveReport, EngineError> {
        let (state, waiting, details) = self.host.context().with(
            |ctx| -> Result<(String, Vec<String>, Option<String>), EngineError> {
                let js = |e| EngineError::from(HostError::from_js(&ctx, e));
                let report = engine_fn(&ctx, "report").map_err(js)?;
                let parts: rquickjs::Array = report.call(()).map_err(js)?;
                Ok((
                    parts.get(0).map_err(js)?,
                    parts.get(1).map_err(js)?,
                    parts.get(2).map_err(js)?,
                ))
            },
        )?;
        let details: Value = match details {
            Some(d) => serde_json::from_str(&d)
                .map_err(|e| EngineError::Engine(format!("process state is not JSON: {e}")))?,
            None => Value::Null,
        };
        let state = match state.as_str() {
            "fulfilled" => {
                ProcessState::Returned(details.get("value").cloned().unwrap_or(Value::Null))
            }
            "halted" => ProcessState::Halted {
                reason: details
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("halted")
                    .to_owned(),
                payload: details.get("payload").cloned().filter(|p| !p.is_null()),
            },
            "rejected" => ProcessState::Threw(details.get("error").cloned().unwrap_or(json!({}))),
            _ => ProcessState::Pending,
        };
        let mut s = lock(&self.shared);
        if let Some(e) = s.errors.first() {
            return Err(EngineError::Engine(e.clone()));
        }
        let requests = std::mem::take(&mut s.requests);
        let task_files = s
            .task_files
            .take()
            .map(TaskFiles::into_streamed)
            .unwrap_or_default();
        let blocked = waiting;
        let logs = std::mem::take(&mut s.logs);
        // Only a finished process needs the set (for the unreached report).
        let reached = if matches!(state, ProcessState::Pending) {
            FastSet::default()
        } else {
            s.reached.clone()
        };
        drop(s);
        self.waiting_on = blocked.iter().cloned().collect();
        self.waiting_order = blocked.clone();
        Ok(DriveReport {
            js_time: std::time::Duration::ZERO,
            state,
            requests,
            blocked,
            logs,
            reached,
            task_files,
            code_digest: self.code_digest.clone(),
        })
    }

    /// Whether every file module this session loaded still has the bytes it was loaded from
    /// (`hashes` remembers file hashes by identity, so an unchanged file is not re-read). A
    /// session whose code changed must not be continued: the run replays cold on the new code.
    pub(crate) fn code_is_current(&self, hashes: &crate::process_file::CodeHashes) -> bool {
        self.host
            .loaded_modules()
            .values()
            .all(|m| hashes.hash(&m.path).is_ok_and(|h| h == m.sha256))
    }

    pub fn memory_usage(&self) -> usize {
        self.host.memory_usage()
    }

    pub fn is_poisoned(&self) -> bool {
        self.host.is_poisoned()
    }

    /// The host, e.g. to run a drive under a time slice ([`JsHost::sliced`]).
    pub fn host(&self) -> &JsHost {
        &self.host
    }

    /// The effect ids drawn since the last call (or since the drive's start).
    pub fn take_issued_ids(&self) -> Vec<String> {
        std::mem::take(&mut lock(&self.shared).issued)
    }
}

/// Sessions move between threads (see `engine::pool`).
const _: fn() = || {
    fn send<T: Send>() {}
    send::<Session>();
};
