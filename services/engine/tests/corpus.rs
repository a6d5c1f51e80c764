//! Our process corpus: every ctx call, parallel groups, breakpoints, sleeps, task errors, process
//! throws, bad imports and resource abuse — each run warm and cold with the same answers, which
//! must journal the same and end the same.

mod support;

use babysitter_engine::{Iteration, IterationStatus};
use serde_json::{Value, json};
use support::{Answer, Harness, both_modes, echo};

const SDK: &str = "import { defineTask } from '@a5c-ai/babysitter-sdk';\n";

fn src(body: &str) -> String {
    format!(
        "{SDK}export const work = defineTask('work', (args) => ({{ kind: 'agent', title: 'work ' + JSON.stringify(args), agent: {{ name: 'a', prompt: args }} }}));\n\
         export const sh = defineTask('sh', (args) => ({{ kind: 'shell', title: 'sh', shell: {{ command: 'echo ' + args.n }} }}));\n{body}"
    )
}

fn types(j: &[(String, Value)]) -> Vec<&str> {
    j.iter().map(|(t, _)| t.as_str()).collect()
}

async fn run(body: &str) -> (Harness, Vec<babysitter_engine::Iteration>) {
    let s = src(body);
    both_modes(&[("main.mjs", s.as_str())], Some(json!({"n": 3})), echo).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_tasks() {
    let (h, its) = run("export async function process(inputs, ctx) { const out = []; for (let i = 0; i < inputs.n; i++) out.push(await ctx.task(work, { i })); return out.length; }").await;
    assert_eq!(its.last().unwrap().status, IterationStatus::Completed);
    assert_eq!(its.last().unwrap().output, Some(json!(3)));
    let j = h.journal();
    assert_eq!(
        types(&j)
            .iter()
            .filter(|t| **t == "EFFECT_REQUESTED")
            .count(),
        3
    );
    assert_eq!(
        j[1].1["stepId"],
        "work.default.bba6aa31c1b9.0"
            .replace("bba6aa31c1b9", &j[1].1["stepId"].as_str().unwrap()[13..25])
    );
    assert!(
        j[3].1["stepId"].as_str().unwrap().ends_with(".1"),
        "occurrence index grows: {:?}",
        j[3].1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_all_requests_the_group_in_one_iteration() {
    let (h, its) = run("export async function process(inputs, ctx) { const r = await ctx.parallel.all([() => ctx.task(work, {a:1}), () => ctx.task(work, {a:2}), () => ctx.task(sh, {n:1})]); return r.length; }").await;
    assert_eq!(its[0].next_actions.len(), 3);
    let group = its[0].next_actions[0]["schedulerHints"]["parallelGroupId"].clone();
    assert!(group.is_string());
    assert!(
        its[0]
            .next_actions
            .iter()
            .all(|a| a["schedulerHints"]["parallelGroupId"] == group)
    );
    assert_eq!(its.last().unwrap().output, Some(json!(3)));
    let j = h.journal();
    assert_eq!(&types(&j)[1..4], ["EFFECT_REQUESTED"; 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_map_and_nested_groups_keep_call_order() {
    let (h, its) = run(
        "export async function process(inputs, ctx) {\n\
           const outer = await ctx.parallel.all([\n\
             () => ctx.parallel.map([1, 2], (x) => ctx.task(work, { x })),\n\
             async () => { const a = await ctx.task(sh, { n: 1 }); return ctx.task(work, { after: a.step }); },\n\
             () => ctx.parallel.all([() => ctx.task(work, { y: 1 }), () => ctx.task(work, { y: 2 })]),\n\
           ]);\n\
           return outer.map((o) => Array.isArray(o) ? o.length : 1);\n\
         }",
    )
    .await;
    assert_eq!(its.last().unwrap().output, Some(json!([2, 1, 2])));
    let j = h.journal();
    let first_batch: Vec<Value> = j
        .iter()
        .filter(|(t, _)| t == "EFFECT_REQUESTED")
        .take(5)
        .map(|(_, d)| d["taskId"].clone())
        .collect();
    assert_eq!(
        first_batch,
        [
            json!("work"),
            json!("work"),
            json!("sh"),
            json!("work"),
            json!("work")
        ],
        "depth-first call order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_with_max_concurrency_keeps_undefined_positions() {
    let (_, its) = run("export async function process(inputs, ctx) { const r = await ctx.parallel.all([async () => undefined, () => ctx.task(work, {z:1}), async () => 7], { maxConcurrency: 2 }); return r.map((x) => x === undefined ? 'u' : typeof x); }").await;
    assert_eq!(
        its.last().unwrap().output,
        Some(json!(["u", "object", "number"]))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn breakpoint_approved_and_rejected() {
    let body = "export async function process(inputs, ctx) { const a = await ctx.breakpoint({ question: 'go?' }, { label: 'Gate A' }); const b = await ctx.breakpoint({ question: 'again?' }, { label: 'Gate A' }); return [a.approved, b.approved]; }";
    let s = src(body);
    let answer = |a: &Value| {
        if a["kind"] == "breakpoint" {
            Answer::Ok(json!({"approved": a["stepId"] == "__sdk.breakpoint.gate-a"}))
        } else {
            echo(a)
        }
    };
    let (h, its) = both_modes(&[("main.mjs", s.as_str())], None, answer).await;
    assert_eq!(its.last().unwrap().output, Some(json!([true, false])));
    let steps: Vec<Value> = h
        .journal()
        .iter()
        .filter(|(t, _)| t == "EFFECT_REQUESTED")
        .map(|(_, d)| d["stepId"].clone())
        .collect();
    assert_eq!(
        steps,
        [
            json!("__sdk.breakpoint.gate-a"),
            json!("__sdk.breakpoint.gate-a.1")
        ]
    );
    let resolved: Vec<Value> = h
        .journal()
        .iter()
        .filter(|(t, _)| t == "EFFECT_RESOLVED")
        .map(|(_, d)| d["breakpointId"].clone())
        .collect();
    assert_eq!(resolved, [json!("gate-a"), json!("gate-a")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn future_sleep_is_an_effect_resolved_when_its_time_passes() {
    let (h, its) = run("export async function process(inputs, ctx) { await ctx.sleepUntil(Date.parse('2026-01-01T00:30:00.000Z')); return 'woke'; }").await;
    assert_eq!(its.last().unwrap().output, Some(json!("woke")));
    let j = h.journal();
    assert_eq!(
        types(&j),
        [
            "RUN_CREATED",
            "EFFECT_REQUESTED",
            "EFFECT_RESOLVED",
            "RUN_COMPLETED"
        ]
    );
    assert_eq!(j[1].1["kind"], "sleep");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_due_sleep_resolves_at_once_without_an_effect() {
    let (h, its) = run("export async function process(inputs, ctx) { await ctx.sleepUntil('2000-01-01T00:00:00.000Z'); return 'done'; }").await;
    assert_eq!(its.len(), 1);
    assert_eq!(types(&h.journal()), ["RUN_CREATED", "RUN_COMPLETED"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn task_errors_caught_and_uncaught() {
    let s = src(
        "export async function process(inputs, ctx) { let caught; try { await ctx.task(work, { bad: 1 }); } catch (e) { caught = [e.name, e.message, e.data]; } const r = await ctx.task(work, { bad: 2 }); return [caught, r]; }",
    );
    let answer = |a: &Value| {
        Answer::Err(
            json!({"name": "ToolError", "message": format!("boom {}", a["taskDef"]["agent"]["prompt"]["bad"]), "data": {"code": 7}}),
        )
    };
    let (h, its) = both_modes(&[("main.mjs", s.as_str())], None, answer).await;
    let last = its.last().unwrap();
    assert_eq!(
        last.status,
        IterationStatus::Failed,
        "a re-thrown task error fails the run"
    );
    assert_eq!(last.error.as_ref().unwrap()["message"], "boom 2");
    let j = h.journal();
    assert_eq!(j.last().unwrap().0, "RUN_FAILED");
    assert_eq!(j.last().unwrap().1["error"]["name"], "ToolError");
    // Iterating a failed run again does nothing.
    let again = h.engine.iterate(support::RUN).await.unwrap();
    assert_eq!(again.status, IterationStatus::None);
    assert_eq!(h.journal().len(), j.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_shell_tasks_arrive_as_values() {
    let s = src(
        "export async function process(inputs, ctx) { const r = await ctx.task(sh, { n: 1 }); return r; }",
    );
    let (_, its) = both_modes(&[("main.mjs", s.as_str())], None, |_| {
        Answer::Err(
            json!({"name": "Error", "message": "exit 3", "data": {"exitCode": 3, "stderr": "bad"}}),
        )
    })
    .await;
    let out = its.last().unwrap().output.clone().unwrap();
    assert_eq!(out["success"], false);
    assert_eq!(out["exitCode"], 3);
    assert_eq!(out["stderr"], "bad");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_effects_throw_effect_cancelled_error() {
    let s = src(
        "export async function process(inputs, ctx) { try { await ctx.task(work, {c:1}); return 'no'; } catch (e) { return [e.name, e.message]; } }",
    );
    let (_, its) = both_modes(&[("main.mjs", s.as_str())], None, |_| {
        Answer::Cancel("not needed")
    })
    .await;
    let out = its.last().unwrap().output.clone().unwrap();
    assert_eq!(out[0], "EffectCancelledError");
    assert!(out[1].as_str().unwrap().contains("not needed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_bug_is_a_runtime_error_event() {
    let (h, its) = run("export async function process(inputs, ctx) { await ctx.task(work, {}); return inputs.missing.field; }").await;
    assert_eq!(its.last().unwrap().status, IterationStatus::Failed);
    let j = h.journal();
    assert_eq!(j.last().unwrap().0, "PROCESS_RUNTIME_ERROR");
    assert_eq!(j.last().unwrap().1["error"]["name"], "TypeError");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halt_ends_the_run_halted() {
    let (h, its) = run("export async function process(inputs, ctx) { await ctx.task(work, {}); ctx.halt('enough', { why: 'test' }); }").await;
    assert_eq!(its.last().unwrap().status, IterationStatus::Halted);
    assert_eq!(
        h.journal().last().unwrap(),
        &(
            "RUN_HALTED".to_owned(),
            json!({"reason": "enough", "payload": {"why": "test"}})
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explicit_keys_labels_and_orchestrator_tasks() {
    let (h, _) = run("export async function process(inputs, ctx) { await ctx.task(work, {k:1}, { key: 'my-key' }); await ctx.task(work, {k:2}, { label: 'Build & Test!' }); await ctx.orchestratorTask({ do: 'x' }); return 1; }").await;
    let req: Vec<Value> = h
        .journal()
        .iter()
        .filter(|(t, _)| t == "EFFECT_REQUESTED")
        .map(|(_, d)| d.clone())
        .collect();
    assert_eq!(req[0]["stepId"], "my-key");
    assert_eq!(req[0]["invocationKey"], "test/p:my-key:work");
    assert!(
        req[1]["stepId"]
            .as_str()
            .unwrap()
            .starts_with("work.Build-Test-."),
        "{}",
        req[1]["stepId"]
    );
    assert_eq!(req[1]["label"], "Build & Test!");
    assert_eq!(req[2]["kind"], "orchestrator_task");
    assert_eq!(req[2]["taskId"], "__sdk.orchestratorTask");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_are_journaled_effects_not_repeated_on_replay() {
    let (h, its) = run("export async function process(inputs, ctx) { const r = await ctx.hook('notify', { msg: 'hi' }); return r; }").await;
    assert_eq!(its.last().unwrap().status, IterationStatus::Completed);
    let req: Vec<Value> = h
        .journal()
        .iter()
        .filter(|(t, _)| t == "EFFECT_REQUESTED")
        .map(|(_, d)| d.clone())
        .collect();
    assert_eq!(req.len(), 1);
    assert_eq!(req[0]["kind"], "hook");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_now_random_and_run_id_are_replay_stable() {
    let (h, its) = run(
        "export async function process(inputs, ctx) { ctx.log('phase', 'one'); const t0 = ctx.now().toISOString(); const r0 = Math.random(); const d0 = Date.now();\n\
           await ctx.task(work, { t0, r0, d0, run: ctx.runId }); ctx.log('two'); const t1 = ctx.now().toISOString();\n\
           await ctx.task(work, { t1 }); return { t0, t1, r0, d0, run: ctx.runId }; }",
    )
    .await;
    let out = its.last().unwrap().output.clone().unwrap();
    assert_eq!(
        out["t0"], "2026-01-01T00:00:00.000Z",
        "ctx.now() starts at the run's creation"
    );
    assert_eq!(out["run"], support::RUN);
    assert_ne!(out["t1"], out["t0"], "the clock moves with resolutions");
    let first_task = h
        .journal()
        .iter()
        .find(|(t, _)| t == "EFFECT_REQUESTED")
        .unwrap()
        .1["effectId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(h.task_json(&first_task)["inputs"]["t0"], out["t0"]);
    assert_eq!(
        h.task_json(&first_task)["inputs"]["r0"],
        out["r0"],
        "Math.random is seeded per run"
    );
    let seqs = std::fs::read_to_string(
        h.dir
            .path()
            .join("runs")
            .join(support::RUN)
            .join("state/logSeqs.txt"),
    )
    .unwrap();
    assert_eq!(seqs, "1\n2\n", "each log line emitted once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn define_task_forms_and_the_registry() {
    let lib = format!(
        "{SDK}export const shared = defineTask('shared', (a) => ({{ kind: 'agent', title: 'shared' }}));\n"
    );
    let main = format!(
        "{SDK}import {{ globalTaskRegistry }} from '@a5c-ai/babysitter-sdk';\nimport {{ shared }} from './lib/a.js';\nimport {{ shared as again }} from './lib/b.js';\n\
         import data from './data.json';\n\
         const stat = defineTask({{ id: 'static', kind: 'node', title: 'static', node: {{ entry: 'x.js' }} }});\n\
         const obj = defineTask({{ name: 'obj', run: (a) => ({{ kind: 'agent', title: 'obj' }}), labels: ['L'] }});\n\
         export async function process(inputs, ctx) {{\n\
           await ctx.task(shared, {{}}); await ctx.task(stat, {{}}); await ctx.task(obj, {{}});\n\
           let dup; try {{ defineTask('shared', () => ({{ kind: 'other' }})); }} catch (e) {{ dup = e.name; }}\n\
           return {{ same: shared === again, has: globalTaskRegistry.hasTask('static'), dup, data: data.v }};\n\
         }}"
    );
    let (h, its) = both_modes(
        &[
            ("main.mjs", main.as_str()),
            ("lib/a.js", lib.as_str()),
            ("lib/b.js", lib.as_str()),
            ("data.json", "{\"v\": 42}"),
        ],
        None,
        echo,
    )
    .await;
    assert_eq!(
        its.last().unwrap().output,
        Some(json!({"same": true, "has": true, "dup": "DuplicateTaskIdError", "data": 42}))
    );
    let req: Vec<Value> = h
        .journal()
        .iter()
        .filter(|(t, _)| t == "EFFECT_REQUESTED")
        .map(|(_, d)| d.clone())
        .collect();
    assert_eq!(req[1]["kind"], "node");
    assert_eq!(req[2]["labels"], json!(["L"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stray_effects_keep_the_run_waiting() {
    let (h, its) = run("export async function process(inputs, ctx) { ctx.task(work, { forgotten: true }); return 'early'; }").await;
    assert_eq!(its[0].status, IterationStatus::Waiting);
    assert_eq!(its[0].reason.as_deref(), Some("stray-effects"));
    assert!(types(&h.journal()).contains(&"EFFECT_REQUESTED"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsupported_imports_fail_the_run_naming_module_and_file() {
    let s = format!(
        "{SDK}import {{ execSync }} from 'child_process';\nexport async function process() {{ return 1; }}"
    );
    let h = Harness::new(&[("main.mjs", s.as_str())], None, true).await;
    let its = h.drive(3, echo).await;
    let last = its.last().unwrap();
    assert_eq!(last.status, IterationStatus::Failed);
    let msg = last.error.as_ref().unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        msg.contains("child_process") && msg.contains("main.mjs"),
        "{msg}"
    );
    assert_eq!(h.journal().last().unwrap().0, "RUN_FAILED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infinite_loops_and_memory_bombs_fail_their_run_only() {
    let spin = format!("{SDK}export async function process(inputs, ctx) {{ while (true) {{}} }}");
    let bomb = format!(
        "{SDK}export async function process(inputs, ctx) {{ const a = []; while (true) a.push(new Array(1e6).fill(1)); }}"
    );
    let tune = |o: &mut babysitter_engine::EngineOptions| {
        o.cpu_limit = std::time::Duration::from_millis(300);
        o.memory_limit = 64 * 1024 * 1024;
    };
    let h1 = Harness::with_options(&[("main.mjs", spin.as_str())], None, true, tune).await;
    let h2 = Harness::with_options(&[("main.mjs", bomb.as_str())], None, true, tune).await;
    let r1 = h1.drive(2, echo).await;
    let r2 = h2.drive(2, echo).await;
    assert_eq!(r1.last().unwrap().status, IterationStatus::Failed);
    assert!(
        r1.last().unwrap().error.as_ref().unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("cpu time limit")
    );
    assert_eq!(r2.last().unwrap().status, IterationStatus::Failed);
    let m2 = r2.last().unwrap().error.as_ref().unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(m2.contains("memory limit"), "{m2}");
    // The engine is still healthy for other runs.
    let ok = format!("{SDK}export async function process() {{ return 'fine'; }}");
    let h3 = Harness::new(&[("main.mjs", ok.as_str())], None, true).await;
    assert_eq!(
        h3.drive(2, echo).await.last().unwrap().output,
        Some(json!("fine"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_process_is_detected_and_unreached_effects_reported() {
    let v1 = src(
        "export async function process(inputs, ctx) { await ctx.task(work, {a:1}); await ctx.task(sh, {n:1}); return 1; }",
    );
    let h = Harness::new(&[("main.mjs", v1.as_str())], None, true).await;
    // Record the code hash the way run:create does.
    let its = h.drive(2, echo).await;
    assert_eq!(its.len(), 2);
    let v2 = src(
        "export async function process(inputs, ctx) { await ctx.task(work, {a:1}); return 2; }",
    );
    let run_json_path = h
        .dir
        .path()
        .join("runs")
        .join(support::RUN)
        .join("run.json");
    let mut run: Value = serde_json::from_slice(&std::fs::read(&run_json_path).unwrap()).unwrap();
    use sha2::Digest;
    run["processCodeHash"] = json!(hex::encode(sha2::Sha256::digest(v1.as_bytes())));
    std::fs::write(&run_json_path, serde_json::to_vec(&run).unwrap()).unwrap();
    std::fs::write(h.entry_path("main.mjs"), &v2).unwrap();
    let its = h.drive(5, echo).await;
    let last = its.last().unwrap();
    assert_eq!(last.status, IterationStatus::Completed);
    assert_eq!(last.output, Some(json!(2)));
    assert!(
        last.warnings
            .iter()
            .any(|w| w.contains("Process code changed"))
    );
    assert_eq!(
        last.unreached.len(),
        1,
        "the sh effect is no longer reached: {:?}",
        last.warnings
    );
    assert!(types(&h.journal()).contains(&"PROCESS_CODE_HASH_CHANGED"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subprocess_is_refused_and_unknown_ctx_members_are_type_errors() {
    let (_, its) = run("export async function process(inputs, ctx) { let a, b; try { await ctx.subprocess({}); } catch (e) { a = e.name; } try { ctx.agent({}); } catch (e) { b = e.name; } return [a, b]; }").await;
    assert_eq!(
        its.last().unwrap().output,
        Some(json!(["RunFailedError", "TypeError"]))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_shims_inside_the_process_root() {
    // The harness folder is the project (the journal keeps babysitter's package.json beside
    // `runs/`): `process.cwd()` and relative reads start there.
    let main = format!(
        "{SDK}import path from 'node:path';\nimport {{ readFileSync }} from 'node:fs';\nimport {{ createHash }} from 'node:crypto';\nimport {{ fileURLToPath }} from 'node:url';\n\
         export async function process(inputs, ctx) {{ const txt = readFileSync(path.join('processes', 'notes', 'a.txt'), 'utf8'); return {{ txt, h: createHash('sha256').update(txt).digest('hex').slice(0, 8), p: fileURLToPath('file:///x/y.js') }}; }}"
    );
    let (_, its) = both_modes(
        &[("main.mjs", main.as_str()), ("notes/a.txt", "hello")],
        None,
        echo,
    )
    .await;
    assert_eq!(
        its.last().unwrap().output,
        Some(json!({"txt": "hello", "h": "2cf24dba", "p": "/x/y.js"}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_delivered_out_of_order_converge() {
    // Answer only the last action of each batch first; the others on later iterations.
    let s = src(
        "export async function process(inputs, ctx) { const r = await ctx.parallel.all([1,2,3,4].map((i) => () => ctx.task(work, { i }))); return r.map((x) => x.step); }",
    );
    let answer = |a: &Value| {
        if a["taskDef"]["agent"]["prompt"]["i"] == 4 || a["taskDef"]["agent"]["prompt"]["i"] == 2 {
            echo(a)
        } else {
            Answer::Leave
        }
    };
    let warm = Harness::new(&[("main.mjs", s.as_str())], None, true).await;
    let w = warm.drive(3, answer).await;
    assert_eq!(w.last().unwrap().status, IterationStatus::Waiting);
    let rest = warm.drive(10, echo).await;
    assert_eq!(rest.last().unwrap().status, IterationStatus::Completed);
    let cold = Harness::new(&[("main.mjs", s.as_str())], None, false).await;
    cold.drive(3, answer).await;
    let rest_cold = cold.drive(10, echo).await;
    assert_eq!(warm.journal(), cold.journal());
    assert_eq!(
        rest.last().unwrap().output,
        rest_cold.last().unwrap().output
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eviction_between_iterations_replays_cold_to_the_same_journal() {
    let s = src(
        "export async function process(inputs, ctx) { let acc = 0; for (let i = 0; i < 4; i++) { const r = await ctx.parallel.all([() => ctx.task(work, { i }), () => ctx.task(sh, { n: i })]); acc += r.length; } return acc; }",
    );
    let a = Harness::new(&[("main.mjs", s.as_str())], None, true).await;
    let b = Harness::new(&[("main.mjs", s.as_str())], None, true).await;
    let ra = a.drive(20, echo).await;
    // b: evict before every other iteration.
    let rb = drive_evicting(&b, 20, |i| i % 2 == 1).await;
    assert_eq!(a.journal(), b.journal());
    assert_eq!(ra.last().unwrap().output, rb.last().unwrap().output);
    assert_eq!(ra.last().unwrap().output, Some(json!(8)));
    assert!(
        rb.iter().any(|i| i.warm) && rb.iter().skip(1).any(|i| !i.warm),
        "both paths were taken"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_env_is_what_the_run_is_configured_with() {
    let main = format!(
        "{SDK}export async function process() {{ const env = globalThis.process.env; return [env.TEAM ?? null, env.HOME ?? null, env.PATH ?? null]; }}"
    );
    let h = Harness::with_options(&[("main.mjs", main.as_str())], None, true, |o| {
        o.process_env.insert("TEAM".into(), "core".into());
    })
    .await;
    let its = h.drive(2, echo).await;
    assert_eq!(
        its.last().unwrap().output,
        Some(json!(["core", null, null])),
        "nothing of the host environment leaks in"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_run_answers_even_without_its_process_file() {
    let (h, its) =
        run("export async function process(inputs, ctx) { await ctx.task(work, {}); return 5; }")
            .await;
    assert_eq!(its.last().unwrap().output, Some(json!(5)));
    std::fs::remove_file(h.entry_path("main.mjs")).unwrap();
    let again = h.engine.iterate(support::RUN).await.unwrap();
    assert_eq!(again.status, IterationStatus::None);
    assert_eq!(again.output, Some(json!(5)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commit_records_metadata_and_log_refs_in_babysitter_order() {
    use babysitter_engine::commit::Commit;
    let s = src("export async function process(inputs, ctx) { return ctx.task(work, {}); }");
    let h = Harness::new(&[("main.mjs", s.as_str())], None, true).await;
    let it = h.engine.iterate(support::RUN).await.unwrap();
    let id = it.next_actions[0]["effectId"].as_str().unwrap().to_owned();
    h.engine
        .commit_result(
            support::RUN,
            Commit {
                effect_id: id.clone(),
                outcome: Ok(json!({"b": 1, "a": 2})),
                stdout: None,
                stderr: None,
                started_at: None,
                finished_at: None,
                metadata: Some(json!({"z": true, "m": 1})),
                stdout_ref: Some("artifacts/out.log".into()),
                stderr_ref: None,
            },
        )
        .await
        .unwrap();
    let text = std::fs::read_to_string(
        h.dir
            .path()
            .join("runs")
            .join(support::RUN)
            .join("tasks")
            .join(&id)
            .join("result.json"),
    )
    .unwrap();
    let doc: Value = serde_json::from_str(&text).unwrap();
    let keys: Vec<&str> = doc
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "schemaVersion",
            "effectId",
            "taskId",
            "invocationKey",
            "status",
            "result",
            "stdoutRef",
            "metadata",
            "value",
            "sdkVersion"
        ]
    );
    assert_eq!(doc["metadata"], json!({"m": 1, "z": true}));
    let resolved = h
        .journal()
        .into_iter()
        .find(|(t, _)| t == "EFFECT_RESOLVED")
        .unwrap()
        .1;
    assert_eq!(resolved["stdoutRef"], "artifacts/out.log");
}

/// A cold replay reads its result files in one batch: a `resultRef` is followed to the file it
/// names, and a `result.json` that went missing stops the iteration with an error naming its
/// effect (the journal untouched) until it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_replay_follows_result_refs_and_names_a_missing_result() {
    let s = src(
        "export async function process(inputs, ctx) { const r = await ctx.parallel.all([() => ctx.task(work, {a:1}), () => ctx.task(work, {a:2}), () => ctx.task(work, {a:3})]); await ctx.task(work, {last:1}); return r.map((x) => x.v); }",
    );
    let h = Harness::new(&[("main.mjs", s.as_str())], None, false).await;
    let first = h.engine.iterate(support::RUN).await.unwrap();
    assert_eq!(first.requested.len(), 3);
    for (i, id) in first.requested.iter().enumerate() {
        h.post(id, Ok(json!({"v": i}))).await;
    }
    let tasks = h.dir.path().join("runs").join(support::RUN).join("tasks");
    // The second effect's value moves to a file of its own, referred to by `resultRef`.
    let second = &first.requested[1];
    std::fs::write(tasks.join(second).join("value.json"), "{\"v\": \"by ref\"}").unwrap();
    let mut stored: Value =
        serde_json::from_slice(&std::fs::read(tasks.join(second).join("result.json")).unwrap())
            .unwrap();
    stored.as_object_mut().unwrap().remove("result");
    stored.as_object_mut().unwrap().remove("value");
    stored["resultRef"] = json!(format!("tasks/{second}/value.json"));
    std::fs::write(
        tasks.join(second).join("result.json"),
        serde_json::to_vec(&stored).unwrap(),
    )
    .unwrap();
    // The third one's result goes missing.
    let third = tasks.join(&first.requested[2]).join("result.json");
    let kept = std::fs::read(&third).unwrap();
    std::fs::remove_file(&third).unwrap();
    let before = h.journal();
    let err = h
        .engine
        .iterate(support::RUN)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(&first.requested[2]) && err.contains("missing"),
        "{err}"
    );
    assert_eq!(h.journal(), before, "nothing journaled");
    std::fs::write(&third, kept).unwrap();
    let next = h.engine.iterate(support::RUN).await.unwrap();
    assert_eq!(next.requested.len(), 1);
    h.post(&next.requested[0], Ok(json!({"v": "last"}))).await;
    let done = h.engine.iterate(support::RUN).await.unwrap();
    assert_eq!(done.status, IterationStatus::Completed);
    assert_eq!(done.output, Some(json!([0, "by ref", 2])));
}

/// A fan-out past the point where a drive streams its `task.json`s (to the journal's writer,
/// while the process runs): every file is stored as the iteration reports it (checked by
/// `drive` for every iteration), the events refer to them, and a run continued warm and one
/// replayed cold after every iteration journal the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_fan_out_journals_what_a_batch_would() {
    let s = src(
        "export async function process(inputs, ctx) { const a = await ctx.parallel.all(Array.from({ length: 40 }, (_, i) => () => ctx.task(work, { i }))); const b = await ctx.parallel.all(Array.from({ length: 3 }, (_, i) => () => ctx.task(sh, { n: i }))); return a.length + b.length; }",
    );
    let a = Harness::new(&[("main.mjs", s.as_str())], None, true).await;
    let b = Harness::new(&[("main.mjs", s.as_str())], None, true).await;
    let ra = a.drive(10, echo).await;
    assert_eq!(ra.first().unwrap().requested.len(), 40);
    assert_eq!(ra.last().unwrap().output, Some(json!(43)));
    let rb = drive_evicting(&b, 10, |_| true).await;
    assert_eq!(a.journal(), b.journal());
    assert_eq!(rb.last().unwrap().output, Some(json!(43)));
    let requested: Vec<String> = a
        .journal()
        .iter()
        .filter(|(t, _)| t == "EFFECT_REQUESTED")
        .map(|(_, d)| d["effectId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(requested.len(), 43);
    for id in &requested {
        assert_eq!(a.task_json(id)["effectId"], json!(id), "{id}");
    }
    for (x, y) in ra[0].requested_tasks.iter().zip(&rb[0].requested_tasks) {
        assert_eq!(x, y, "the same task.json either way");
    }
}

/// [`Harness::drive`] with `echo`, evicting the run's warm session before the iterations
/// `evict` picks (they replay cold).
async fn drive_evicting(h: &Harness, max: usize, evict: impl Fn(usize) -> bool) -> Vec<Iteration> {
    let mut out = Vec::new();
    for i in 0..max {
        if evict(i) {
            h.engine.evict(support::RUN).await.unwrap();
        }
        let it = h.engine.iterate(support::RUN).await.unwrap();
        out.push(it.clone());
        if it.status != IterationStatus::Waiting {
            break;
        }
        for act in &it.next_actions {
            if let Answer::Ok(v) = echo(act) {
                h.post(act["effectId"].as_str().unwrap(), Ok(v)).await;
            }
        }
    }
    out
}
