// babysitter-rs engine runtime: the ctx API and the task registry, evaluated as a script in every
// run's QuickJS context before the process module loads. It talks to Rust only through
// `globalThis.__bs_host` (installed by the engine) and exposes `globalThis.__bs_engine`.
//
// Execution model: ctx.task returns a promise that stays pending until the effect is resolved;
// the Rust side drives the job queue to quiescence, and resolves pending promises when results
// arrive (warm runs) or hands resolved results out at call time (cold replay). Both follow the
// reference's call order: parallel thunks start one after another, each running as far as it can
// before the next starts (depth-first, via quiescence waits released by the host).
(function () {
  "use strict";
  const host = globalThis.__bs_host;

  // ---------------------------------------------------------------- errors
  class BabysitterError extends Error {
    constructor(name, message, data) {
      super(message);
      this.name = name;
      if (data !== undefined) this.data = data;
    }
  }
  class DuplicateTaskIdError extends BabysitterError {
    constructor(id) { super("DuplicateTaskIdError", `Task id '${id}' is already defined with a different definition`); }
  }
  class InvalidTaskDefinitionError extends BabysitterError {
    constructor(msg) { super("InvalidTaskDefinitionError", msg); }
  }
  class EffectCancelledError extends BabysitterError {
    constructor(effectId, reason) {
      super("EffectCancelledError", `Effect ${effectId} cancelled${reason ? ": " + reason : ""}`);
      this.effectId = effectId;
    }
  }
  class RunHaltedError extends BabysitterError {
    constructor(reason, payload) { super("RunHaltedError", reason); this.reason = reason; this.payload = payload; }
  }
  class InvalidSleepTargetError extends BabysitterError {
    constructor(msg) { super("InvalidSleepTargetError", msg); }
  }
  class RunFailedError extends BabysitterError {
    constructor(msg, data) { super("RunFailedError", msg, data); }
  }

  // ---------------------------------------------------------------- task registry
  const definitions = new Map();
  const fingerprints = new Map();
  const globalTaskRegistry = {
    definitions,
    hasTask(id) { return definitions.has(id); },
    getTask(id) { return definitions.get(id); },
  };

  function fingerprint(impl, options, staticDef) {
    try {
      return (impl ? String(impl) : "") + "\u0000" + JSON.stringify(options ?? null) + "\u0000" + JSON.stringify(staticDef ?? null);
    } catch (_) {
      return String(Math.random());
    }
  }

  // The builder the engine calls: synchronous when the definition is (see `then`). The task's
  // public `build` stays an async function, as process code may call and chain it.
  const BUILD_NOW = Symbol("buildNow");

  function register(id, buildNow, fp) {
    const existing = definitions.get(id);
    if (existing) {
      // Same id, same definition (e.g. a module imported by two compositions): not an error.
      if (fingerprints.get(id) === fp) return existing;
      throw new DuplicateTaskIdError(id);
    }
    const task = Object.freeze({ id, build: async (args, taskCtx) => buildNow(args, taskCtx), [BUILD_NOW]: buildNow });
    definitions.set(id, task);
    fingerprints.set(id, fp);
    return task;
  }

  function defineTask(idOrSpec, impl, options) {
    if (typeof idOrSpec === "string") {
      const id = idOrSpec.trim();
      if (!id) throw new InvalidTaskDefinitionError("defineTask requires a non-empty id");
      if (typeof impl !== "function") throw new InvalidTaskDefinitionError(`defineTask('${id}') requires a build function`);
      const opts = options ?? {};
      const build = (args, taskCtx) => then(impl(args, taskCtx), (def) => withOptions(def, opts));
      return register(id, build, fingerprint(impl, opts));
    }
    if (idOrSpec && typeof idOrSpec === "object") {
      const spec = idOrSpec;
      const id = String(spec.id ?? spec.name ?? "").trim();
      if (!id) throw new InvalidTaskDefinitionError("defineTask requires an id or name");
      if (typeof spec.run === "function") {
        const opts = { description: spec.description, labels: spec.labels, kind: spec.kind };
        const build = (args, taskCtx) => then(spec.run(args, taskCtx), (def) => withOptions(def, opts));
        return register(id, build, fingerprint(spec.run, opts));
      }
      const staticDef = {};
      for (const k of Object.keys(spec)) {
        if (!["id", "name", "run", "inputs", "outputs", "source"].includes(k)) staticDef[k] = spec[k];
      }
      const build = () => JSON.parse(JSON.stringify(staticDef));
      return register(id, build, fingerprint(null, null, staticDef));
    }
    throw new InvalidTaskDefinitionError("defineTask requires an id string or a definition object");
  }

  // A builder's result may be a promise (an async build function) or the TaskDef itself: `then`
  // continues at once on a plain value, so a synchronous build costs no job-queue round trips.
  function isThenable(v) {
    return v !== null && (typeof v === "object" || typeof v === "function") && typeof v.then === "function";
  }
  function then(v, f) {
    return isThenable(v) ? Promise.resolve(v).then(f) : f(v);
  }

  function withOptions(def, opts) {
    if (!def || typeof def !== "object") return def;
    if (opts.description !== undefined && def.description === undefined) def.description = opts.description;
    if (opts.kind !== undefined && def.kind === undefined) def.kind = opts.kind;
    if (opts.inputSchema !== undefined && def.inputSchema === undefined) def.inputSchema = opts.inputSchema;
    if (opts.outputSchema !== undefined && def.outputSchema === undefined) def.outputSchema = opts.outputSchema;
    if (Array.isArray(opts.labels) && def.labels === undefined) def.labels = opts.labels.slice();
    return def;
  }

  // ---------------------------------------------------------------- identity
  // The step id, occurrence counter, invocation key and journal lookup are one host call
  // (`host.step` for explicit keys, `host.stepArgs` deriving the argument shape from the args
  // value itself: engine/js_shape.rs).

  // ---------------------------------------------------------------- scheduling
  let frameSeq = 0;
  const waiters = []; // {frame, resolve}
  function quiescence(frame) {
    return new Promise((resolve) => waiters.push({ frame, resolve }));
  }
  // Called by the host when the job queue is empty: lets the innermost parallel loop go on.
  function releaseOne() {
    if (waiters.length === 0) return false;
    let best = 0;
    for (let i = 1; i < waiters.length; i++) if (waiters[i].frame > waiters[best].frame) best = i;
    const [w] = waiters.splice(best, 1);
    w.resolve();
    return true;
  }

  // ---------------------------------------------------------------- the run state
  const pending = new Map(); // effectId -> {resolve, reject, kind}
  let clockMs = 0;
  let logSeq = 0;

  function advanceClock(ms) {
    if (typeof ms === "number" && ms > clockMs) clockMs = ms;
  }

  function rehydrateError(e) {
    const err = new Error(e && e.message !== undefined ? String(e.message) : "Task failed");
    err.name = (e && e.name) || "TaskError";
    // A journaled error without a stack gets a fixed one, so warm and cold runs report the same.
    err.stack = e && e.stack ? e.stack : `${err.name}: ${err.message}`;
    if (e && e.data !== undefined) err.data = e.data;
    return err;
  }

  function settle(view) {
    advanceClock(view.atMs);
    switch (view.outcome) {
      case "value": return { ok: true, value: view.value };
      case "throw": return { ok: false, error: rehydrateError(view.error) };
      case "cancelled": return { ok: false, error: new EffectCancelledError(view.effectId, view.reason) };
      default: return null;
    }
  }

  // In-place insert / remove (`splice` builds a result array through the species protocol, which
  // cost more than the rest of a delivery).
  function insertInto(list, at, value) {
    for (let i = list.length; i > at; i--) list[i] = list[i - 1];
    list[at] = value;
  }
  function removeFrom(list, at) {
    for (let i = at + 1; i < list.length; i++) list[i - 1] = list[i];
    list.length--;
  }

  // Program order of the pending waits. A wait made while a delivery's continuation runs goes
  // where the delivered wait was (after earlier ones made in the same continuation), so the
  // list is always in the order a cold replay would reach the waits (depth-first program
  // order) — an order-maintenance list instead of ever-growing position vectors.
  const order = [];
  let insertAt = -1;

  function waitFor(effectId, kind) {
    if (insertAt < 0) order.push(effectId);
    else insertInto(order, insertAt++, effectId);
    return new Promise((resolve, reject) => pending.set(effectId, { resolve, reject, kind }));
  }

  // Called by the host with a resolution for a pending effect (warm runs): the view's parts,
  // only the value or error as JSON (`payload`; a cancellation's reason as it is).
  function deliver(effectId, kind, outcome, payload, atMs) {
    const p = pending.get(effectId);
    if (!p) return false;
    pending.delete(effectId);
    const at = order.indexOf(effectId);
    if (at >= 0) removeFrom(order, at);
    insertAt = at >= 0 ? at : order.length;
    const view = { effectId, kind, outcome, atMs };
    if (outcome === "value") view.value = JSON.parse(payload);
    else if (outcome === "throw") view.error = JSON.parse(payload);
    else if (outcome === "cancelled") view.reason = payload;
    const s = settle(view);
    if (!s) return false;
    if (s.ok) p.resolve(s.value); else p.reject(s.error);
    return true;
  }

  // ctx.task and the intrinsics: always a promise. The work up to the request runs synchronously
  // when the task's builder is synchronous (the common case): fewer job-queue round trips per
  // effect; identities are drawn at call time either way, in call order.
  function invoke(task, args, opts, meta) {
    try {
      return invokeSync(task, args, opts, meta);
    } catch (e) {
      return Promise.reject(e);
    }
  }

  function invokeSync(task, args, opts, meta) {
    if (!task || typeof task.build !== "function" || typeof task.id !== "string" || !task.id) {
      throw new InvalidTaskDefinitionError("ctx.task requires a DefinedTask created via defineTask()");
    }
    const options = opts ?? {};
    const explicitKey = options.key ?? options.stableKey;
    // [stepId, invocationKey, view JSON when journaled]: explicit keys are the step id as given;
    // derived ones are `<task>.<label>.<shapeHash>.<n>` (and advance the legacy S00000k counter).
    const step = explicitKey !== undefined
      ? host.step(task.id, String(explicitKey), null)
      : host.stepArgs(task.id, String(options.label ?? "default"), args);
    const stepId = step[0];
    if (typeof step[2] === "string") {
      const view = JSON.parse(step[2]);
      if (view.outcome === "pending") return waitFor(view.effectId, view.kind);
      const s = settle(view);
      return s.ok ? Promise.resolve(s.value) : Promise.reject(s.error);
    }
    if (meta && typeof meta.skipIfPastMs === "number" && meta.skipIfPastMs <= host.wallNowMs()) return Promise.resolve(undefined);
    const effectId = host.newEffectId();
    const label = options.label;
    const taskCtx = Object.freeze({
      effectId,
      invocationKey: step[1],
      taskId: task.id,
      runId: ctx.runId,
      runDir: ctx.runDir,
      taskDir: `${ctx.runDir}/tasks/${effectId}`,
      tasksDir: `${ctx.runDir}/tasks`,
      label,
      labels: label ? [label] : [],
      toTaskRelativePath(rel) {
        const clean = String(rel).replace(/^\/+/, "");
        if (clean.split("/").includes("..")) throw new Error(`path '${rel}' escapes the task directory`);
        return `tasks/${effectId}/${clean}`;
      },
      createBlobRef(name, value) {
        return host.createBlobRef(effectId, String(name), JSON.stringify(value ?? null));
      },
    });
    const built = (task[BUILD_NOW] ?? task.build)(args, taskCtx);
    return isThenable(built)
      ? Promise.resolve(built).then((taskDef) => request(task, args, label, effectId, stepId, taskCtx, taskDef))
      : request(task, args, label, effectId, stepId, taskCtx, built);
  }

  // Journals a new effect's request and waits for its resolution.
  function request(task, args, label, effectId, stepId, taskCtx, taskDef) {
    if (!taskDef || typeof taskDef !== "object" || typeof taskDef.kind !== "string" || !taskDef.kind) {
      throw new InvalidTaskDefinitionError(`Task ${task.id} did not provide a kind`);
    }
    // A breakpoint's `autoApproval` is computed on the Rust side (engine/breakpoints.rs).
    const labels = effectLabels(label || undefined, taskDef.labels);
    const effectLabel = label ?? labels[0] ?? taskDef.title ?? task.id;
    // task.json is built on the Rust side (identity::task_json, the reference's serializer), which
    // reads the TaskDef and the args as JSON.stringify would (engine/js_value.rs).
    host.request([effectId, task.id, stepId, taskDef.kind], typeof effectLabel === "string" ? effectLabel : null,
      labels, taskDef, args);
    return waitFor(effectId, taskDef.kind);
  }

  // The call's label, then the TaskDef's labels: strings only, trimmed, non-empty, first
  // occurrence kept (a handful of entries: a linear scan beats a Set).
  function effectLabels(label, defLabels) {
    const out = [];
    if (typeof label === "string") {
      const t = label.trim();
      if (t) out.push(t);
    }
    if (Array.isArray(defLabels)) {
      for (let i = 0; i < defLabels.length; i++) {
        const v = defLabels[i];
        if (typeof v !== "string") continue;
        const t = v.trim();
        if (t && !out.includes(t)) out.push(t);
      }
    }
    return out;
  }

  // ---------------------------------------------------------------- intrinsics
  function slug(label) {
    const s = String(label).toLowerCase().replace(/[^a-z0-9.]+/g, "-").replace(/^-+|-+$/g, "").replace(/--+/g, "-");
    return s || "breakpoint";
  }

  const sdkTasks = {
    breakpoint: Object.freeze({ id: "__sdk.breakpoint", build: async (args) => ({
      kind: "breakpoint", title: args.label, metadata: { ...args },
    }) }),
    sleep: Object.freeze({ id: "__sdk.sleep", build: async (args) => ({
      kind: "sleep", title: `sleep:${args.iso}`, sleep: { iso: args.iso, targetEpochMs: args.targetEpochMs },
      metadata: { targetEpochMs: args.targetEpochMs, iso: args.iso },
    }) }),
    orchestratorTask: Object.freeze({ id: "__sdk.orchestratorTask", build: async (args, taskCtx) => ({
      kind: "orchestrator_task", title: taskCtx.label ?? "orchestrator-task",
      metadata: { payload: args.payload, orchestratorTask: true },
    }) }),
    subprocess: Object.freeze({ id: "__sdk.subprocess", build: async (args) => {
      const inv = args.invocation;
      const shareSession = inv.shareSession !== false;
      return {
        kind: "subprocess", title: args.label,
        metadata: { subprocess: true, processPath: inv.processPath, processId: inv.processId, harness: inv.harness,
          model: inv.model, maxIterations: inv.maxIterations, shareSession },
        subprocess: { processPath: inv.processPath, exportName: inv.exportName, processId: inv.processId,
          prompt: inv.prompt, inputs: inv.inputs, inputSchema: inv.inputSchema, outputSchema: inv.outputSchema,
          harness: inv.harness, model: inv.model, maxIterations: inv.maxIterations, shareSession,
          metadata: inv.metadata },
      };
    } }),
    hook: Object.freeze({ id: "__sdk.hook", build: async (args) => ({
      kind: "hook", title: `hook:${args.hookType}`, hook: { hookType: args.hookType, payload: args.payload, timeout: args.timeout },
    }) }),
  };

  const breakpointCounts = new Map();

  const ctx = {
    runId: "",
    runDir: "",
    artifactsDir: "",
    now() { return new Date(clockMs); },
    task(task, args, options) { return invoke(task, args, options); },
    async breakpoint(payload, options) {
      const opts = options ?? {};
      const label = (typeof opts.label === "string" && opts.label.trim()) ? opts.label
        : (payload && typeof payload.label === "string" && payload.label.trim()) ? payload.label : "breakpoint";
      const breakpointId = opts.breakpointId ?? slug(label);
      if (host.nonInteractive()) {
        const seq = ++logSeq;
        host.autoApproved(seq, `Breakpoint '${opts.label ?? "unnamed"}' auto-approved (non-interactive mode)`);
        return { approved: true, response: "Auto-approved (non-interactive mode)" };
      }
      const base = `__sdk.breakpoint.${breakpointId}`;
      const n = breakpointCounts.get(base) ?? 0;
      breakpointCounts.set(base, n + 1);
      const key = n === 0 ? base : `${base}.${n}`;
      const args = { payload, requestedAt: new Date(clockMs).toISOString(), label, breakpointId };
      for (const k of ["expert", "tags", "strategy", "autoApproveAfterN", "presentAlwaysApprove"]) {
        if (opts[k] !== undefined) args[k] = opts[k];
      }
      return invoke(sdkTasks.breakpoint, args, { key, label });
    },
    async sleepUntil(target, options) {
      const ms = typeof target === "number" ? target : Date.parse(String(target));
      if (!Number.isFinite(ms) || ms < 0) throw new InvalidSleepTargetError(`Invalid sleep target: ${String(target)}`);
      const iso = new Date(ms).toISOString();
      // A sleep already journaled replays from the journal (a past-due pending one is resolved by
      // the host at iteration start); a new one whose target has passed resolves at once.
      await invoke(sdkTasks.sleep, { iso, targetEpochMs: ms }, { label: (options && options.label) ?? `sleep:${iso}` },
        { skipIfPastMs: ms });
      advanceClock(ms);
    },
    sleep(ms, options) {
      return ctx.sleepUntil(clockMs + Number(ms), options);
    },
    orchestratorTask(payload, options) {
      const label = (options && options.label) ?? "orchestrator-task";
      return invoke(sdkTasks.orchestratorTask, { payload }, { label });
    },
    // The executor makes the child run ([`EngineOptions::subprocesses`]); babysitter's own
    // loop leaves subprocesses to a plugin-mode harness and refuses them elsewhere.
    subprocess(invocation, options) {
      if (!host.subprocesses()) {
        throw new RunFailedError("Subprocess effects are disabled for this orchestration context.");
      }
      const inv = invocation ?? {};
      const label = (options && options.label) ?? inv.processId ?? inv.processPath;
      return invoke(sdkTasks.subprocess, { invocation: inv, label }, { ...(options ?? {}), label });
    },
    // Journaled as an effect of kind `hook`: executed once by the host, replayed from the journal.
    hook(hookType, payload, options) {
      const label = (options && options.label) ?? `hook:${hookType}`;
      return invoke(sdkTasks.hook, { hookType, payload: payload ?? {}, timeout: options && options.timeout }, { label });
    },
    log(...args) {
      let label, message;
      if (typeof args[0] === "string" && typeof args[1] === "string") { label = args[0]; message = args[1]; }
      else if (typeof args[0] === "string") { message = args[0]; }
      else return;
      if (!message) return;
      const seq = ++logSeq;
      host.log(seq, label ?? null, message);
    },
    halt(reason, payload) {
      const r = typeof reason === "string" ? reason.trim() : "";
      if (!r) throw new TypeError("ctx.halt requires a non-empty reason");
      throw new RunHaltedError(r, payload);
    },
    onCleanup(fn) { if (typeof fn === "function") cleanups.push(fn); },
    parallel: {
      async all(thunks, options) {
        if (!Array.isArray(thunks)) throw new TypeError("ctx.parallel.all expects an array");
        const frame = ++frameSeq;
        const promises = [];
        for (const t of thunks) {
          let p;
          if (typeof t === "function") p = Promise.resolve().then(() => t());
          else if (t && typeof t.then === "function") p = t;
          else throw new TypeError("ctx.parallel.all expects functions (thunks) or promises");
          p.catch(() => {}); // errors surface through Promise.all below
          promises.push(p);
          await quiescence(frame);
        }
        if (options && (options.maxConcurrency !== undefined || options.executionStrategy !== undefined)) {
          host.groupHints(frame, JSON.stringify({ maxConcurrency: options.maxConcurrency, executionStrategy: options.executionStrategy }));
        }
        return Promise.all(promises);
      },
      map(items, fn, options) {
        return ctx.parallel.all(Array.from(items, (item, i) => () => fn(item, i)), options);
      },
    },
  };
  const cleanups = [];

  // Date.now() and `new Date()` read the run's logical clock, so replays see the same times.
  const RealDate = Date;
  function LogicalDate(...args) {
    if (!new.target) return new RealDate(clockMs).toString();
    return args.length === 0 ? new RealDate(clockMs) : new RealDate(...args);
  }
  LogicalDate.prototype = RealDate.prototype;
  LogicalDate.now = () => clockMs;
  LogicalDate.parse = RealDate.parse;
  LogicalDate.UTC = RealDate.UTC;
  globalThis.Date = LogicalDate;

  globalThis.__bs_engine = {
    ctx,
    deliver,
    releaseOne,
    pendingIds() { return order.filter((id) => pending.has(id)); },
    setRun(runId, runDir, startMs) { ctx.runId = runId; ctx.runDir = runDir; ctx.artifactsDir = `${runDir}/artifacts`; advanceClock(startMs); },
    cleanups,
    sdk: {
      defineTask, globalTaskRegistry, DuplicateTaskIdError, InvalidTaskDefinitionError, EffectCancelledError,
      RunHaltedError, InvalidSleepTargetError, RunFailedError,
    },
  };
})();
