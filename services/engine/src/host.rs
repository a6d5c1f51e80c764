//! The embedded JS host the engine builds on: one QuickJS runtime + context per run.
//!
//! Babysitter processes are ES modules written for Node. To run them unchanged without Node, the
//! host provides what the library survey (spec `babysitter-core.md` §8.3) shows they need, and
//! nothing more:
//!
//! - an ES module loader confined to the process folder (`host/loader.rs`): relative `.js`,
//!   `.mjs` and `.json` imports, static and dynamic, resolved from the importing file and
//!   canonicalised so neither `../` nor a symlink can reach outside; built-in modules registered
//!   by the engine (`@a5c-ai/babysitter-sdk`); every other bare import fails naming the module
//!   and the importer;
//! - small Node shims (`path`, `url`, `crypto`, read-only `fs`, `process`, `console`), written in
//!   JS (`host/shims/`) over a handful of Rust functions (`host/api.rs`);
//! - determinism: `Math.random`, `crypto.randomUUID` and friends draw from a PRNG seeded per run,
//!   so a replay sees the same values;
//! - limits: a memory limit per runtime and a CPU deadline per drive (QuickJS's interrupt
//!   handler). A process that loops forever or allocates without bound ends with
//!   [`HostError::CpuLimit`] / [`HostError::MemoryLimit`]; the host is then poisoned and the engine
//!   drops it, while other hosts in the same OS process keep working.
//!
//! The engine installs its own globals and host functions through [`JsHost::with`] /
//! [`JsHost::context`] and passes values to its built-in modules through
//! [`JsHost::engine_api`], which those modules read as `import.meta.engine`.
//!
//! Every `Persistent` handed out by a host (e.g. by [`JsHost::export_function`]) must be dropped
//! before the host: QuickJS aborts when a runtime is freed with live references into it.

mod api;
mod loader;
pub mod precompiled;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_limits;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rquickjs::{
    Context, Ctx, FromJs, Function, IntoJs, Module, Object, Persistent, Runtime, Value,
};

/// The deadline clock. The CPU limit is a watchdog over real elapsed time: it must keep running
/// when a test pauses tokio's clock (with `tokio::time::Instant` a paused clock would never reach
/// the deadline and `while(true){}` would hang the test), so this uses the std clock on purpose.
#[allow(clippy::disallowed_types)]
type Clock = std::time::Instant;

/// Default memory limit of a runtime: 256 MiB.
pub const DEFAULT_MEMORY_LIMIT: usize = 256 * 1024 * 1024;
/// Default CPU time allowed per drive: 30 s.
pub const DEFAULT_CPU_LIMIT: Duration = Duration::from_secs(30);

/// How a [`JsHost`] is set up for one run.
#[derive(Debug, Clone)]
pub struct HostConfig {
    /// The process root (`process.cwd()`). Every file import and every `fs` access must stay inside it (checked
    /// after canonicalisation, so symlinks cannot escape).
    pub root: PathBuf,
    /// What `process.env` shows (a frozen copy).
    pub env: BTreeMap<String, String>,
    /// Memory limit of the runtime in bytes (0 = unlimited). Default 256 MiB.
    pub memory_limit: usize,
    /// CPU time per drive (`load_module`, `export_function`, `drive`, `with`). Default 30 s.
    pub cpu_limit: Duration,
    /// Extra built-in ES modules: (specifier, JS source), e.g. `@a5c-ai/babysitter-sdk`.
    pub builtin_modules: Vec<(String, String)>,
    /// Seed of the PRNG behind `Math.random`, `crypto.randomUUID`, `crypto.randomBytes`, ...
    pub random_seed: u64,
}

impl Default for HostConfig {
    fn default() -> Self {
        Self {
            root: PathBuf::from("."),
            env: BTreeMap::new(),
            memory_limit: DEFAULT_MEMORY_LIMIT,
            cpu_limit: DEFAULT_CPU_LIMIT,
            builtin_modules: Vec::new(),
            random_seed: 0,
        }
    }
}

/// Errors of the JS host.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The process used more CPU time than allowed in one drive; the host is poisoned.
    #[error("process exceeded its cpu time limit of {} ms", limit.as_millis())]
    CpuLimit { limit: Duration },
    /// The process exhausted the runtime's memory limit; the host is poisoned.
    #[error("process exceeded its memory limit of {limit} bytes")]
    MemoryLimit { limit: usize },
    /// An uncaught JS error (or a thrown non-error value, then `name` is `Error`).
    #[error("{name}: {message}")]
    Js {
        name: String,
        message: String,
        stack: Option<String>,
    },
    /// The selected export is not a function (babysitter's exact message).
    #[error("Export '{export}' was not a function in {path}")]
    NotAFunction { export: String, path: String },
    /// A file or the process folder could not be read.
    #[error("cannot access '{}': {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A module could not be loaded (outside the folder, not a file, never settled, ...).
    #[error("cannot load module '{path}': {message}")]
    Load { path: String, message: String },
    /// An inline drive outran the slice it was given ([`JsHost::with_slice`]); the host is
    /// poisoned (the engine replays the run on a JS thread with the full CPU limit).
    #[error("process outran its inline time slice")]
    SliceExpired,
    /// An earlier limit error poisoned this host; drop it.
    #[error("the js host hit a resource limit earlier and must be dropped")]
    Poisoned,
    /// An rquickjs error that is not a JS exception (e.g. a failed conversion).
    #[error("js engine error: {0}")]
    Engine(String),
}

impl HostError {
    /// Same as [`js_error`], for `map_err(|e| HostError::from_js(&ctx, e))`.
    pub fn from_js(ctx: &Ctx<'_>, err: rquickjs::Error) -> HostError {
        js_error(ctx, err)
    }

    /// True for the errors that poison the host (CPU or memory limit).
    pub fn is_limit(&self) -> bool {
        matches!(
            self,
            HostError::CpuLimit { .. } | HostError::MemoryLimit { .. } | HostError::SliceExpired
        )
    }
}

/// Whether (and until when) the CPU deadline is armed.
#[derive(Clone, Copy)]
enum Deadline {
    Disarmed,
    Unlimited,
    At(Clock),
}

/// A file module as it was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadedModule {
    /// Canonical path.
    pub path: PathBuf,
    /// Lowercase hex SHA-256 of the bytes the module was loaded from.
    pub sha256: String,
}

/// Host state shared by the runtime's callbacks (interrupt handler, loader, host functions).
/// Holds no JS values, so closures capturing it create no cycles the GC cannot see. `Sync`
/// (atomics and mutexes, never contended: one thread drives a runtime at a time) so that a host
/// can move between threads with its runtime (rquickjs `parallel`).
pub(crate) struct HostCore {
    /// Canonical process folder.
    root: PathBuf,
    env: BTreeMap<String, String>,
    memory_limit: usize,
    cpu_limit: Duration,
    builtins: HashMap<String, String>,
    /// File module name (root-relative, `/`-separated) → canonical path.
    files: Mutex<HashMap<String, PathBuf>>,
    /// The file modules loaded so far: name → (canonical path, SHA-256 of the bytes loaded).
    /// What the session's code is made of (the run's import closure, fix B9).
    loaded: Mutex<BTreeMap<String, LoadedModule>>,
    rng: AtomicU64,
    deadline: Mutex<Deadline>,
    /// The armed deadline is an inline drive's slice, not the run's CPU limit.
    slice: AtomicBool,
    interrupted: AtomicBool,
    poisoned: AtomicBool,
}

impl HostCore {
    /// Called by QuickJS every few thousand operations.
    fn should_interrupt(&self) -> bool {
        if self.interrupted.load(Ordering::Relaxed) {
            return true;
        }
        match self.deadline() {
            Deadline::At(at) if Clock::now() >= at => {
                self.interrupted.store(true, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    fn deadline(&self) -> Deadline {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Arms the deadline `limit` from now; `slice`: it is an inline drive's slice.
    fn set_armed(&self, limit: Duration, slice: bool) {
        let deadline = Clock::now()
            .checked_add(limit)
            .map_or(Deadline::Unlimited, Deadline::At);
        self.slice.store(slice, Ordering::Relaxed);
        self.set_deadline(deadline);
    }

    fn set_deadline(&self, deadline: Deadline) {
        *self.deadline.lock().unwrap_or_else(|p| p.into_inner()) = deadline;
    }

    fn poison(&self) {
        self.poisoned.store(true, Ordering::Relaxed);
    }

    pub(crate) fn file(&self, name: &str) -> Option<PathBuf> {
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    pub(crate) fn record_loaded(&self, name: &str, path: &Path, bytes: &[u8]) {
        let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes));
        self.loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(
                name.to_owned(),
                LoadedModule {
                    path: path.to_owned(),
                    sha256,
                },
            );
    }

    pub(crate) fn add_file(&self, name: String, path: PathBuf) {
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name, path);
    }

    /// Next value of the run's splitmix64 PRNG.
    pub(crate) fn next_random(&self) -> u64 {
        let mut z = self
            .rng
            .load(Ordering::Relaxed)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.rng.store(z, Ordering::Relaxed);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn limit_error(&self) -> Option<HostError> {
        self.interrupted.load(Ordering::Relaxed).then(|| {
            self.poison();
            self.limit_hit()
        })
    }

    /// The error of an expired deadline: the run's CPU limit, or the shorter slice an inline
    /// drive was given ([`JsHost::with_slice`]).
    fn limit_hit(&self) -> HostError {
        if self.slice.load(Ordering::Relaxed) {
            HostError::SliceExpired
        } else {
            HostError::CpuLimit {
                limit: self.cpu_limit,
            }
        }
    }
}

/// JS values the host keeps for later calls (the shims' `import.meta.host`, the built-in
/// modules' `import.meta.engine`, the engine's own functions): properties of one object kept as
/// the runtime's user data, so they live and move with the runtime (a `Persistent` is tied to
/// its thread) and are freed before it.
pub(crate) fn slot<'js, T: FromJs<'js>>(ctx: &Ctx<'js>, name: &str) -> rquickjs::Result<Option<T>> {
    match ctx.userdata::<Object<'js>>() {
        Some(slots) => slots.get(name),
        None => Ok(None),
    }
}

/// Keeps `value` in the slot `name` (see [`slot`]).
pub(crate) fn set_slot<'js, T: IntoJs<'js>>(
    ctx: &Ctx<'js>,
    name: &str,
    value: T,
) -> rquickjs::Result<()> {
    if ctx.userdata::<Object<'js>>().is_none() {
        let slots = Object::new(ctx.clone())?;
        // Only this module stores user data, and only here: the slot cannot be taken.
        let _ = ctx.store_userdata(slots);
    }
    match ctx.userdata::<Object<'js>>() {
        Some(slots) => slots.set(name, value),
        None => Err(rquickjs::Error::new_from_js("slots", "user data")),
    }
}

/// Hosts alive in this process, keyed by their context pointer, so [`js_error`] can find the
/// limits and poison flag of the host an error came from (whatever thread drives it now).
static HOSTS: Mutex<Vec<(usize, Weak<HostCore>)>> = Mutex::new(Vec::new());

fn hosts() -> std::sync::MutexGuard<'static, Vec<(usize, Weak<HostCore>)>> {
    HOSTS.lock().unwrap_or_else(|p| p.into_inner())
}

fn ctx_key(ctx: &Ctx<'_>) -> usize {
    ctx.as_raw().as_ptr() as usize
}

fn core_of(ctx: &Ctx<'_>) -> Option<Arc<HostCore>> {
    let key = ctx_key(ctx);
    hosts()
        .iter()
        .find(|(k, _)| *k == key)
        .and_then(|(_, core)| core.upgrade())
}

/// The embedded JS host of one run. `Send` (rquickjs `parallel`): it may be driven from any
/// thread, by one thread at a time.
pub struct JsHost {
    core: Arc<HostCore>,
    key: usize,
    context: Context,
    runtime: Runtime,
}

impl std::fmt::Debug for JsHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsHost")
            .field("root", &self.core.root)
            .field("poisoned", &self.is_poisoned())
            .finish_non_exhaustive()
    }
}

impl JsHost {
    /// Creates the runtime (limits, interrupt handler, module loader) and the context (globals:
    /// `console`, `process`, `URL`, `crypto`, the seeded `Math.random`).
    pub fn new(config: HostConfig) -> Result<JsHost, HostError> {
        let root = config.root.canonicalize().map_err(|source| HostError::Io {
            path: config.root.clone(),
            source,
        })?;
        if !root.is_dir() {
            return Err(HostError::Load {
                path: config.root.display().to_string(),
                message: "the process folder is not a directory".into(),
            });
        }
        let core = Arc::new(HostCore {
            root,
            env: config.env,
            memory_limit: config.memory_limit,
            cpu_limit: config.cpu_limit,
            builtins: config.builtin_modules.into_iter().collect(),
            files: Mutex::new(HashMap::new()),
            loaded: Mutex::new(BTreeMap::new()),
            rng: AtomicU64::new(config.random_seed),
            deadline: Mutex::new(Deadline::Disarmed),
            slice: AtomicBool::new(false),
            interrupted: AtomicBool::new(false),
            poisoned: AtomicBool::new(false),
        });

        let engine = |e: rquickjs::Error| HostError::Engine(e.to_string());
        let runtime = Runtime::new().map_err(engine)?;
        runtime.set_memory_limit(core.memory_limit);
        let handler_core = core.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || handler_core.should_interrupt())));
        runtime.set_loader(
            loader::HostResolver::new(core.clone()),
            loader::HostLoader::new(core.clone()),
        );
        let context = Context::full(&runtime).map_err(engine)?;
        let key = context.with(|ctx| ctx_key(&ctx));
        {
            let mut hosts = hosts();
            hosts.retain(|(_, c)| c.strong_count() > 0);
            hosts.push((key, Arc::downgrade(&core)));
        }
        let host = JsHost {
            core,
            key,
            context,
            runtime,
        };
        host.install_globals()?;
        Ok(host)
    }

    fn install_globals(&self) -> Result<(), HostError> {
        let _armed = self.arm();
        self.context.with(|ctx| {
            let run = || -> rquickjs::Result<()> {
                let host_api = api::host_api(&ctx, self.core.clone())?;
                let engine_api = Object::new(ctx.clone())?;
                let env = Object::new(ctx.clone())?;
                for (k, v) in &self.core.env {
                    env.set(k.as_str(), v.as_str())?;
                }
                let prelude = precompiled::evaluate(
                    &ctx,
                    precompiled::PRELUDE_MODULE,
                    precompiled::PRELUDE_JS,
                )?;
                let install: Function = prelude.get("default")?;
                install.call::<_, ()>((host_api.clone(), env))?;
                set_slot(&ctx, "host", host_api)?;
                set_slot(&ctx, "engine", engine_api)?;
                Ok(())
            };
            run().map_err(|e| js_error(&ctx, e))
        })
    }

    /// The rquickjs context, for `context.with(|ctx| ...)` without arming the CPU deadline.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// Bytes the runtime has allocated (QuickJS `malloc_size`).
    pub fn memory_usage(&self) -> usize {
        usize::try_from(self.runtime.memory_usage().malloc_size).unwrap_or(0)
    }

    /// The canonical process folder.
    pub fn root(&self) -> &Path {
        &self.core.root
    }

    /// The file modules loaded so far, by root-relative name, with the hash of the bytes each
    /// was loaded from.
    pub fn loaded_modules(&self) -> BTreeMap<String, LoadedModule> {
        self.core
            .loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Runs `f` inside the context with the CPU deadline armed (unless already armed by an outer
    /// call). Map errors with [`js_error`]; it poisons the host on a limit error.
    pub fn with<F, R>(&self, f: F) -> R
    where
        F: for<'js> FnOnce(Ctx<'js>) -> R,
    {
        let _armed = self.arm();
        self.context.with(f)
    }

    /// The engine's object for its built-in modules, visible to them as `import.meta.engine`
    /// (and to nothing else). Fill it before the first module that uses it is loaded.
    #[cfg(test)]
    pub fn engine_api<'js>(&self, ctx: &Ctx<'js>) -> rquickjs::Result<Object<'js>> {
        match slot(ctx, "engine")? {
            Some(o) => Ok(o),
            None => Object::new(ctx.clone()),
        }
    }

    /// True after a CPU or memory limit error: the engine must drop this host.
    pub fn is_poisoned(&self) -> bool {
        self.core.poisoned.load(Ordering::Relaxed)
    }

    /// Declares and evaluates the ES module file `rel_path` (relative to the process folder),
    /// driving the job queue until its evaluation (including top-level `await`) settles.
    pub fn load_module(&self, rel_path: &str) -> Result<(), HostError> {
        self.namespace(rel_path).map(drop)
    }

    /// `mod[export_name] ?? mod.process ?? mod.default` of the module at `rel_path` (loaded on
    /// first use), as a function the engine can call later.
    pub fn export_function(
        &self,
        rel_path: &str,
        export_name: &str,
    ) -> Result<Persistent<Function<'static>>, HostError> {
        let namespace = self.namespace(rel_path)?;
        let _armed = self.arm();
        self.context.with(|ctx| {
            let pick = || -> rquickjs::Result<Option<Function<'_>>> {
                let ns = namespace.restore(&ctx)?;
                let mut value: Value = ns.get(export_name)?;
                for fallback in ["process", "default"] {
                    if value.is_null() || value.is_undefined() {
                        value = ns.get(fallback)?;
                    }
                }
                Ok(value.into_function())
            };
            match pick() {
                Ok(Some(f)) => Ok(Persistent::save(&ctx, f)),
                Ok(None) => Err(HostError::NotAFunction {
                    export: export_name.to_owned(),
                    path: rel_path.to_owned(),
                }),
                Err(e) => Err(js_error(&ctx, e)),
            }
        })
    }

    /// Runs pending jobs until none are left, with the CPU deadline armed.
    pub fn drive(&self) -> Result<(), HostError> {
        if self.is_poisoned() {
            return Err(HostError::Poisoned);
        }
        let _armed = self.arm();
        self.run_jobs()
    }

    fn run_jobs(&self) -> Result<(), HostError> {
        loop {
            if let Some(e) = self.core.limit_error() {
                return Err(e);
            }
            match self.runtime.execute_pending_job() {
                Ok(true) => {}
                Ok(false) => return Ok(()),
                Err(job) => {
                    return Err(job.0.with(|ctx| js_error(&ctx, rquickjs::Error::Exception)));
                }
            }
        }
    }

    /// Imports `rel_path` and returns its namespace once evaluation has settled.
    fn namespace(&self, rel_path: &str) -> Result<Persistent<Object<'static>>, HostError> {
        if self.is_poisoned() {
            return Err(HostError::Poisoned);
        }
        let name = self.core.entry_name(rel_path)?;
        let _armed = self.arm();
        let promise = self.context.with(|ctx| {
            Module::import(&ctx, format!("./{name}"))
                .map(|p| Persistent::save(&ctx, p))
                .map_err(|e| js_error(&ctx, e))
        })?;
        self.run_jobs()?;
        self.context.with(|ctx| {
            if let Some(e) = self.core.limit_error() {
                return Err(e);
            }
            let promise = promise.restore(&ctx).map_err(|e| js_error(&ctx, e))?;
            match promise.result::<Object>() {
                Some(Ok(ns)) => Ok(Persistent::save(&ctx, ns)),
                Some(Err(e)) => Err(js_error(&ctx, e)),
                None => Err(HostError::Load {
                    path: rel_path.to_owned(),
                    message: "its evaluation (top-level await) never settled".into(),
                }),
            }
        })
    }

    /// Arms the CPU deadline unless an outer call already did; disarms when dropped.
    fn arm(&self) -> Armed<'_> {
        if !matches!(self.core.deadline(), Deadline::Disarmed) {
            return Armed(None);
        }
        self.core.set_armed(self.core.cpu_limit, false);
        Armed(Some(&self.core))
    }

    /// Arms the deadline at `slice` from now when that is shorter than the CPU limit, until the
    /// guard is dropped: every drive meanwhile that outruns the slice fails with
    /// [`HostError::SliceExpired`] (and poisons the host) instead of running on. For drives on a
    /// thread that must not be held for long (see `engine::pool`).
    pub fn sliced(&self, slice: Duration) -> Sliced {
        if slice >= self.core.cpu_limit || !matches!(self.core.deadline(), Deadline::Disarmed) {
            return Sliced(None);
        }
        self.core.set_armed(slice, true);
        Sliced(Some(self.core.clone()))
    }
}

impl Drop for JsHost {
    fn drop(&mut self) {
        let key = self.key;
        hosts().retain(|(k, c)| *k != key && c.strong_count() > 0);
    }
}

struct Armed<'a>(Option<&'a HostCore>);

/// A time slice armed by [`JsHost::sliced`]; disarms when dropped.
#[must_use]
pub struct Sliced(Option<Arc<HostCore>>);

impl Drop for Sliced {
    fn drop(&mut self) {
        if let Some(core) = &self.0 {
            core.set_deadline(Deadline::Disarmed);
        }
    }
}

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        if let Some(core) = self.0 {
            core.set_deadline(Deadline::Disarmed);
        }
    }
}

/// Turns an rquickjs error into a [`HostError`], taking the thrown value with `ctx.catch()`.
///
/// The interrupt of an expired CPU deadline becomes [`HostError::CpuLimit`], QuickJS's
/// `InternalError: out of memory` becomes [`HostError::MemoryLimit`] (both poison the host),
/// anything else thrown becomes [`HostError::Js`].
pub fn js_error(ctx: &Ctx<'_>, err: rquickjs::Error) -> HostError {
    let core = core_of(ctx);
    let poison = |e: HostError| {
        if let Some(core) = &core {
            core.poison();
        }
        e
    };
    let memory = || HostError::MemoryLimit {
        limit: core.as_ref().map_or(0, |c| c.memory_limit),
    };
    let thrown = match err {
        rquickjs::Error::Exception => Some(ctx.catch()),
        _ => None,
    };
    if let Some(core) = core
        .as_ref()
        .filter(|c| c.interrupted.load(Ordering::Relaxed))
    {
        return poison(core.limit_hit());
    }
    let Some(value) = thrown else {
        return match err {
            rquickjs::Error::Allocation => poison(memory()),
            other => HostError::Engine(other.to_string()),
        };
    };
    let (name, message, stack) = describe_thrown(ctx, &value);
    if value.is_uncatchable_error() && message == "interrupted" {
        return poison(core.as_ref().map_or(
            HostError::CpuLimit {
                limit: Duration::ZERO,
            },
            |c| c.limit_hit(),
        ));
    }
    if name == "InternalError" && message == "out of memory" {
        return poison(memory());
    }
    HostError::Js {
        name,
        message,
        stack,
    }
}

/// (name, message, stack) of a thrown value; getters that throw are ignored.
fn describe_thrown<'js>(ctx: &Ctx<'js>, value: &Value<'js>) -> (String, String, Option<String>) {
    let text = |key: &str| -> Option<String> {
        let obj = value.as_object()?;
        let got = obj.get::<_, Option<rquickjs::Coerced<String>>>(key);
        if ctx.has_exception() {
            ctx.catch();
        }
        got.ok().flatten().map(|c| c.0)
    };
    if value.as_object().is_some() {
        let message = text("message");
        if value.is_error() || message.is_some() {
            return (
                text("name").unwrap_or_else(|| "Error".into()),
                message.unwrap_or_default(),
                text("stack"),
            );
        }
    }
    let shown = ctx
        .json_stringify(value.clone())
        .ok()
        .flatten()
        .and_then(|s| s.to_string().ok())
        .filter(|_| value.is_object())
        .or_else(|| value.get::<rquickjs::Coerced<String>>().ok().map(|c| c.0))
        .unwrap_or_else(|| format!("<{}>", value.type_name()));
    if ctx.has_exception() {
        ctx.catch();
    }
    ("Error".into(), shown, None)
}
