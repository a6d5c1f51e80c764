//! Where a run's JS executes (`engine::pool`): warm continuations run inline on the calling
//! thread under a time slice; one that outruns it is cut off and the run replays cold on a JS
//! thread, journaling exactly what an uninterrupted run journals; a process that loops forever
//! still fails with its CPU limit; `JsPlacement::CallingThread` runs everything inline.

mod support;

use std::time::Duration;

use babysitter_engine::{EngineOptions, IterationStatus, JsPlacement};
use support::{Harness, echo};

const SDK: &str = "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
export const work = defineTask('work', (args) => ({ kind: 'agent', title: 'work', agent: { name: 'a', prompt: args } }));\n";

/// Two tasks; between them the process computes far longer than a 1 ms slice.
fn busy() -> String {
    format!(
        "{SDK}export async function process(inputs, ctx) {{ const a = await ctx.task(work, {{ i: 1 }}); \
         let x = 0; for (let i = 0; i < 3e6; i++) x = (x + i) % 1000003; \
         const b = await ctx.task(work, {{ i: 2, x }}); const c = await ctx.task(work, {{ i: 3 }}); return [a.step, b.step, c.step, x]; }}"
    )
}

fn placement(p: JsPlacement) -> impl FnOnce(&mut EngineOptions) {
    move |o| o.js_placement = p
}

/// A warm harness whose continuations run inline under `slice`.
async fn inline_harness(files: &[(&str, &str)], slice: Duration) -> Harness {
    Harness::with_options(
        files,
        None,
        true,
        placement(JsPlacement::InlineWarm { slice }),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continuation_that_outruns_its_slice_replays_on_a_js_thread_to_the_same_journal() {
    let src = busy();
    let files = [("main.mjs", src.as_str())];
    let sliced = inline_harness(&files, Duration::from_millis(1)).await;
    let its = sliced.drive(10, echo).await;
    let cold = Harness::new(&files, None, false).await;
    let reference = cold.drive(10, echo).await;
    assert_eq!(
        sliced.journal(),
        cold.journal(),
        "same journal as cold runs"
    );
    assert_eq!(its.last().unwrap().status, IterationStatus::Completed);
    assert_eq!(its.last().unwrap().output, reference.last().unwrap().output);
    // The busy continuation was cut off and replayed cold; the run is heavy from then on and
    // its last continuation ran warm on a JS thread.
    assert!(!its[1].warm, "the cut-off continuation was replayed cold");
    assert!(its[2].warm && its[3].warm, "later continuations stay warm");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_infinite_loop_fails_its_run_with_the_cpu_limit() {
    let spin = format!(
        "{SDK}export async function process(inputs, ctx) {{ await ctx.task(work, {{ i: 1 }}); while (true) {{}} }}"
    );
    let h = Harness::with_options(&[("main.mjs", spin.as_str())], None, true, |o| {
        o.cpu_limit = Duration::from_millis(300);
        o.js_placement = JsPlacement::InlineWarm {
            slice: Duration::from_millis(5),
        };
    })
    .await;
    let its = h.drive(3, echo).await;
    let last = its.last().unwrap();
    assert_eq!(last.status, IterationStatus::Failed);
    let message = last.error.as_ref().unwrap()["message"].as_str().unwrap();
    assert!(message.contains("cpu time limit"), "{message}");
}

#[tokio::test(flavor = "current_thread")]
async fn the_calling_thread_placement_runs_everything_inline() {
    let src = busy();
    let files = [("main.mjs", src.as_str())];
    let inline =
        Harness::with_options(&files, None, true, placement(JsPlacement::CallingThread)).await;
    let its = inline.drive(10, echo).await;
    let cold = Harness::new(&files, None, false).await;
    cold.drive(10, echo).await;
    assert_eq!(inline.journal(), cold.journal());
    assert_eq!(its.last().unwrap().status, IterationStatus::Completed);
    assert!(
        its.iter().skip(1).all(|i| i.warm),
        "every continuation ran warm"
    );
}

/// Deep recursion in an inline continuation ends in QuickJS's stack-overflow error, like on a
/// JS thread: the runtime worker's stack holds QuickJS's 1 MiB limit plus the host calls made
/// at that depth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_recursion_in_an_inline_continuation_is_a_range_error() {
    let deep = format!(
        "{SDK}export async function process(inputs, ctx) {{ await ctx.task(work, {{ i: 1 }}); \
         const down = (n) => {{ 'a\\u00e9'.localeCompare('ae'); JSON.stringify({{ n, a: [{{ b: [n] }}] }}); return n === 0 ? ctx.task(work, {{ i: 2 }}) : down(n - 1); }}; \
         try {{ await down(1e7); }} catch (e) {{ return String(e.name) + ':' + (e instanceof RangeError); }} return 'no overflow'; }}"
    );
    let files = [("main.mjs", deep.as_str())];
    // A slice no machine outruns here: the continuation must run inline.
    let inline = inline_harness(&files, Duration::from_secs(60)).await;
    let its = inline.drive(5, echo).await;
    assert!(its[1].warm, "the continuation ran inline");
    let cold = Harness::new(&files, None, false).await;
    cold.drive(5, echo).await;
    assert_eq!(inline.journal(), cold.journal());
    assert_eq!(
        its.last().unwrap().output,
        Some(serde_json::json!("RangeError:true"))
    );
}
