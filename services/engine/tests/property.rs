//! Property: random process shapes (sequences, nested parallel groups, breakpoints), with
//! results delivered in random orders and subsets, and warm sessions randomly evicted, always
//! converge to the same output and the same effects; and for one delivery schedule, warm and
//! cold engines journal exactly the same.

mod support;

use std::collections::BTreeMap;

use babysitter_engine::IterationStatus;
use proptest::prelude::*;
use serde_json::{Value, json};
use support::{Harness, RUN};

#[derive(Debug, Clone)]
enum Step {
    Task,
    Breakpoint,
    Parallel(Vec<Vec<Step>>),
}

fn step() -> impl Strategy<Value = Step> {
    let leaf = prop_oneof![4 => Just(Step::Task), 1 => Just(Step::Breakpoint)];
    leaf.prop_recursive(2, 12, 3, |inner| {
        prop_oneof![
            3 => inner.clone(),
            1 => prop::collection::vec(prop::collection::vec(inner, 1..3), 1..4).prop_map(Step::Parallel),
        ]
    })
}

/// Emits JS for a sequence; every call site gets a unique label so identities never collide.
fn emit(steps: &[Step], out: &mut String, counter: &mut usize) {
    for s in steps {
        *counter += 1;
        let n = *counter;
        match s {
            Step::Task => out.push_str(&format!("acc.push((await ctx.task(work, {{ n: {n} }}, {{ label: 't{n}' }})).v);\n")),
            Step::Breakpoint => out.push_str(&format!("acc.push((await ctx.breakpoint({{ q: {n} }}, {{ label: 'b{n}' }})).approved ? 1 : 0);\n")),
            Step::Parallel(branches) => {
                out.push_str("acc.push(await ctx.parallel.all([\n");
                for b in branches {
                    out.push_str("async () => { const acc = [];\n");
                    emit(b, out, counter);
                    out.push_str("return acc; },\n");
                }
                out.push_str("]));\n");
            }
        }
    }
}

fn process_source(steps: &[Step]) -> String {
    let mut body = String::new();
    emit(steps, &mut body, &mut 0);
    format!(
        "import {{ defineTask }} from '@a5c-ai/babysitter-sdk';\n\
         export const work = defineTask('work', (args) => ({{ kind: 'agent', title: 'w', agent: {{ prompt: args }} }}));\n\
         export async function process(inputs, ctx) {{ const acc = [];\n{body}return acc; }}\n"
    )
}

/// Deterministic answers: a value derived from the effect's step id.
fn answer_for(a: &Value) -> Value {
    if a["kind"] == "breakpoint" {
        json!({"approved": true})
    } else {
        let step = a["stepId"].as_str().unwrap_or("");
        json!({"v": step.len() as u64 * 7 + step.bytes().map(u64::from).sum::<u64>() % 97})
    }
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

/// Drives with a schedule from `seed`: each iteration answers a random non-empty subset of the
/// pending actions in random order, and sometimes evicts the warm session first.
async fn drive(h: &Harness, seed: u64, evict: bool) -> (Value, Vec<(String, Value)>) {
    let mut rng = Lcg(seed);
    for _ in 0..400 {
        if evict && rng.next().is_multiple_of(3) {
            h.engine.evict(RUN).await.unwrap();
        }
        let it = h.engine.iterate(RUN).await.unwrap();
        match it.status {
            IterationStatus::Waiting => {
                let mut actions = it.next_actions.clone();
                assert!(!actions.is_empty(), "a waiting run always has actions");
                // Fisher-Yates with the schedule's generator, then keep a non-empty prefix.
                for i in (1..actions.len()).rev() {
                    let j = (rng.next() as usize) % (i + 1);
                    actions.swap(i, j);
                }
                let keep = 1 + (rng.next() as usize) % actions.len();
                for a in actions.iter().take(keep) {
                    h.post(a["effectId"].as_str().unwrap(), Ok(answer_for(a)))
                        .await;
                }
            }
            IterationStatus::Completed => return (it.output.unwrap(), h.journal()),
            other => panic!("unexpected {other:?}: {:?}", it.error),
        }
    }
    panic!("did not converge")
}

/// The effects of a journal by invocation key (what was asked for, independent of order).
fn effects(j: &[(String, Value)]) -> BTreeMap<String, Value> {
    j.iter()
        .filter(|(t, _)| t == "EFFECT_REQUESTED")
        .map(|(_, d)| {
            let mut d = d.clone();
            let o = d.as_object_mut().unwrap();
            o.remove("effectId");
            o.remove("taskDefRef");
            (o["invocationKey"].as_str().unwrap().to_owned(), d)
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_shapes_and_schedules_converge(steps in prop::collection::vec(step(), 1..6), s1 in any::<u64>(), s2 in any::<u64>()) {
        let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
        rt.block_on(async {
            let src = process_source(&steps);
            let files = [("main.mjs", src.as_str())];
            // Reference: cold engine, answers in order, one at a time.
            let reference = Harness::new(&files, None, false).await;
            let (out_ref, j_ref) = drive(&reference, 0, false).await;
            // Random schedule with evictions, warm engine.
            let warm = Harness::new(&files, None, true).await;
            let (out_w, j_w) = drive(&warm, s1, true).await;
            prop_assert_eq!(&out_w, &out_ref);
            prop_assert_eq!(effects(&j_w), effects(&j_ref));
            prop_assert_eq!(j_w.last().map(|e| e.0.clone()), Some("RUN_COMPLETED".to_owned()));
            // Same schedule, warm vs cold: the very same journal.
            let a = Harness::new(&files, None, true).await;
            let b = Harness::new(&files, None, false).await;
            let (out_a, j_a) = drive(&a, s2, false).await;
            let (out_b, j_b) = drive(&b, s2, false).await;
            prop_assert_eq!(out_a, out_b);
            prop_assert_eq!(j_a, j_b);
            Ok(())
        })?;
    }
}
