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

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};
use std::time::Duration;

use rquickjs::{Context, Ctx, Function, Module, Object, Persistent, Runtime, Value};

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
    /// The process folder. Every file import and every `fs` access must stay inside it (checked
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
            HostError::CpuLimit { .. } | HostError::MemoryLimit { .. }
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

/// Host state shared by the runtime's callbacks (interrupt handler, loader, host functions).
/// Holds no JS values, so closures capturing it create no cycles the GC cannot see.
pub(crate) struct HostCore {
    /// Canonical process folder.
    root: PathBuf,
    env: BTreeMap<String, String>,
    memory_limit: usize,
    cpu_limit: Duration,
    builtins: HashMap<String, String>,
    /// File module name (root-relative, `/`-separated) → canonical path.
    files: RefCell<HashMap<String, PathBuf>>,
    rng: Cell<u64>,
    deadline: Cell<Deadline>,
    interrupted: Cell<bool>,
    poisoned: Cell<bool>,
}

impl HostCore {
    /// Called by QuickJS every few thousand operations.
    fn should_interrupt(&self) -> bool {
        if self.interrupted.get() {
            return true;
        }
        match self.deadline.get() {
            Deadline::At(at) if Clock::now() >= at => {
                self.interrupted.set(true);
                true
            }
            _ => false,
        }
    }

    /// Next value of the run's splitmix64 PRNG.
    pub(crate) fn next_random(&self) -> u64 {
        let mut z = self.rng.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
        self.rng.set(z);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn limit_error(&self) -> Option<HostError> {
        self.interrupted.get().then(|| {
            self.poisoned.set(true);
            HostError::CpuLimit {
                limit: self.cpu_limit,
            }
        })
    }
}

/// JS values the host keeps alive across `with` calls; cleared before the runtime is freed.
#[derive(Default)]
pub(crate) struct JsSlots {
    /// The object of Rust functions behind the shims (`import.meta.host` in shim modules).
    host_api: RefCell<Option<Persistent<Object<'static>>>>,
    /// The engine's object for its built-in modules (`import.meta.engine`).
    engine_api: RefCell<Option<Persistent<Object<'static>>>>,
}

impl JsSlots {
    fn clear(&self) {
        self.host_api.borrow_mut().take();
        self.engine_api.borrow_mut().take();
    }
}

thread_local! {
    /// Hosts alive on this thread, keyed by their context pointer, so [`js_error`] can find the
    /// limits and poison flag of the host an error came from.
    static HOSTS: RefCell<Vec<(usize, Weak<HostCore>)>> = const { RefCell::new(Vec::new()) };
}

fn ctx_key(ctx: &Ctx<'_>) -> usize {
    ctx.as_raw().as_ptr() as usize
}

fn core_of(ctx: &Ctx<'_>) -> Option<Rc<HostCore>> {
    let key = ctx_key(ctx);
    HOSTS.with(|hosts| {
        hosts
            .borrow()
            .iter()
            .find(|(k, _)| *k == key)
            .and_then(|(_, core)| core.upgrade())
    })
}

/// The embedded JS host of one run. `!Send`: keep it on the thread that created it.
pub struct JsHost {
    core: Rc<HostCore>,
    slots: Rc<JsSlots>,
    key: usize,
    context: Context,
    runtime: Runtime,
}

impl std::fmt::Debug for JsHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsHost")
            .field("root", &self.core.root)
            .field("poisoned", &self.core.poisoned.get())
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
        let core = Rc::new(HostCore {
            root,
            env: config.env,
            memory_limit: config.memory_limit,
            cpu_limit: config.cpu_limit,
            builtins: config.builtin_modules.into_iter().collect(),
            files: RefCell::new(HashMap::new()),
            rng: Cell::new(config.random_seed),
            deadline: Cell::new(Deadline::Disarmed),
            interrupted: Cell::new(false),
            poisoned: Cell::new(false),
        });
        let slots = Rc::new(JsSlots::default());

        let engine = |e: rquickjs::Error| HostError::Engine(e.to_string());
        let runtime = Runtime::new().map_err(engine)?;
        runtime.set_memory_limit(core.memory_limit);
        let handler_core = core.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || handler_core.should_interrupt())));
        runtime.set_loader(
            loader::HostResolver::new(core.clone()),
            loader::HostLoader::new(core.clone(), slots.clone()),
        );
        let context = Context::full(&runtime).map_err(engine)?;
        let key = context.with(|ctx| ctx_key(&ctx));
        HOSTS.with(|hosts| {
            let mut hosts = hosts.borrow_mut();
            hosts.retain(|(_, c)| c.strong_count() > 0);
            hosts.push((key, Rc::downgrade(&core)));
        });
        let host = JsHost {
            core,
            slots,
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
                *self.slots.host_api.borrow_mut() = Some(Persistent::save(&ctx, host_api));
                *self.slots.engine_api.borrow_mut() = Some(Persistent::save(&ctx, engine_api));
                Ok(())
            };
            run().map_err(|e| js_error(&ctx, e))
        })
    }

    /// The rquickjs context, for `context.with(|ctx| ...)` without arming the CPU deadline.
    pub fn context(&self) -> &Context {
        &self.context
    }

    /// The rquickjs runtime (memory usage, GC). Do not replace its loader or interrupt handler.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Bytes the runtime has allocated (QuickJS `malloc_size`).
    pub fn memory_usage(&self) -> usize {
        usize::try_from(self.runtime.memory_usage().malloc_size).unwrap_or(0)
    }

    /// The canonical process folder.
    pub fn root(&self) -> &Path {
        &self.core.root
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
    pub fn engine_api<'js>(&self, ctx: &Ctx<'js>) -> rquickjs::Result<Object<'js>> {
        match self.slots.engine_api.borrow().as_ref() {
            Some(p) => p.clone().restore(ctx),
            None => Object::new(ctx.clone()),
        }
    }

    /// True after a CPU or memory limit error: the engine must drop this host.
    pub fn is_poisoned(&self) -> bool {
        self.core.poisoned.get()
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
        if !matches!(self.core.deadline.get(), Deadline::Disarmed) {
            return Armed(None);
        }
        let deadline = Clock::now()
            .checked_add(self.core.cpu_limit)
            .map_or(Deadline::Unlimited, Deadline::At);
        self.core.deadline.set(deadline);
        Armed(Some(&self.core))
    }
}

impl Drop for JsHost {
    fn drop(&mut self) {
        // the persistent objects must go before the runtime is freed
        self.slots.clear();
        let key = self.key;
        HOSTS.with(|hosts| {
            hosts
                .borrow_mut()
                .retain(|(k, c)| *k != key && c.strong_count() > 0)
        });
    }
}

struct Armed<'a>(Option<&'a HostCore>);

impl Drop for Armed<'_> {
    fn drop(&mut self) {
        if let Some(core) = self.0 {
            core.deadline.set(Deadline::Disarmed);
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
            core.poisoned.set(true);
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
    if let Some(core) = core.as_ref().filter(|c| c.interrupted.get()) {
        return poison(HostError::CpuLimit {
            limit: core.cpu_limit,
        });
    }
    let Some(value) = thrown else {
        return match err {
            rquickjs::Error::Allocation => poison(memory()),
            other => HostError::Engine(other.to_string()),
        };
    };
    let (name, message, stack) = describe_thrown(ctx, &value);
    if value.is_uncatchable_error() && message == "interrupted" {
        return poison(HostError::CpuLimit {
            limit: core.as_ref().map_or(Duration::ZERO, |c| c.cpu_limit),
        });
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
