//! Where a process's code may come from and how a change to it is seen (fix B9): imports are
//! confined to the project the entry belongs to (babysitter's library processes import shared
//! helpers from `../common-utilities/…`), the code hash covers the import closure, and a
//! change in an imported module sends a warm session back to a cold replay and is journaled.
//! Also: a TaskDef without a `kind` fails the run as babysitter does.

mod support;

use babysitter_engine::IterationStatus;
use serde_json::{Value, json};
use support::{Harness, RUN, echo};

const SDK: &str = "import { defineTask } from '@a5c-ai/babysitter-sdk';\n";

fn types(j: &[(String, Value)]) -> Vec<&str> {
    j.iter().map(|(t, _)| t.as_str()).collect()
}

/// A library laid out as babysitter's: `library/package.json`, a methodology importing a shared
/// helper two folders up, and the helper.
fn library(helper_label: &str) -> Vec<(String, String)> {
    let process = format!(
        "{SDK}import {{ label }} from '../../common-utilities/routed-gate-combinators.js';\n\
         const work = defineTask('work', (args) => ({{ kind: 'agent', title: 'w', agent: {{ name: 'a', prompt: args }} }}));\n\
         export async function process(inputs, ctx) {{ const a = await ctx.task(work, {{ i: 1 }}); const b = await ctx.task(work, {{ i: 2 }}); return label() + ':' + (a.step !== undefined) + (b.step !== undefined); }}\n"
    );
    vec![
        (
            "library/methodologies/waterfall/waterfall.js".into(),
            process,
        ),
        (
            "library/common-utilities/routed-gate-combinators.js".into(),
            format!("export function label() {{ return '{helper_label}'; }}\n"),
        ),
        (
            "library/package.json".into(),
            "{\"type\":\"module\"}".into(),
        ),
    ]
}

async fn harness(files: &[(String, String)], warm: bool) -> Harness {
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    Harness::new(&refs, None, warm).await
}

fn run_json_path(h: &Harness) -> std::path::PathBuf {
    h.dir.path().join("runs").join(RUN).join("run.json")
}

/// Records the code hash as `run:create` / `babysitter run` do.
async fn record_code_hash(h: &Harness, entry: &str) -> String {
    let digest = h
        .engine
        .check_entry(&h.entry_path(entry), None)
        .await
        .expect("code digest")
        .code_hash;
    let path = run_json_path(h);
    let mut run: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    run["processCodeHash"] = json!(digest);
    std::fs::write(&path, serde_json::to_vec(&run).unwrap()).unwrap();
    digest
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_library_process_imports_shared_helpers_from_its_project() {
    for warm in [true, false] {
        let h = harness(&library("gate"), warm).await;
        let its = h.drive(5, echo).await;
        let last = its.last().unwrap();
        assert_eq!(
            last.status,
            IterationStatus::Completed,
            "warm={warm}: {:?}",
            last.error
        );
        assert_eq!(last.output, Some(json!("gate:truetrue")));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imports_outside_the_project_and_symlinks_out_of_it_stay_refused() {
    let mut files = library("gate");
    // The methodology reaches above the library's package.json.
    files[0].1 = format!(
        "{SDK}import x from '../../../outside.js';\nexport async function process() {{ return x; }}\n"
    );
    let h = harness(&files, true).await;
    std::fs::write(
        h.dir.path().join("processes/outside.js"),
        "export default 'secret';",
    )
    .unwrap();
    let it = h.engine.iterate(RUN).await.expect("iterate");
    assert_eq!(it.status, IterationStatus::Failed);
    let error = it.error.unwrap().to_string();
    assert!(error.contains("escapes the process root"), "{error}");

    // A symlink inside the project that points out of it.
    let mut files = library("gate");
    files[0].1 = format!(
        "{SDK}import x from '../../common-utilities/link.js';\nexport async function process() {{ return x; }}\n"
    );
    let h = harness(&files, true).await;
    let outside = h.dir.path().join("processes/outside.js");
    std::fs::write(&outside, "export default 'secret';").unwrap();
    std::os::unix::fs::symlink(
        &outside,
        h.dir
            .path()
            .join("processes/library/common-utilities/link.js"),
    )
    .unwrap();
    let it = h.engine.iterate(RUN).await.expect("iterate");
    assert_eq!(it.status, IterationStatus::Failed);
    let error = it.error.unwrap().to_string();
    assert!(error.contains("escapes the process root"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_code_hash_covers_the_import_closure() {
    use sha2::Digest;
    let h = harness(&library("gate"), true).await;
    let entry = "library/methodologies/waterfall/waterfall.js";
    let digest = record_code_hash(&h, entry).await;
    let entry_hash = hex::encode(sha2::Sha256::digest(
        std::fs::read(h.entry_path(entry)).unwrap(),
    ));
    assert_ne!(digest, entry_hash, "imports are part of the hash");

    // A process that imports no file hashes as babysitter does: its file's bytes.
    let alone = format!("{SDK}export async function process() {{ return 1; }}\n");
    let h2 = Harness::new(&[("main.mjs", alone.as_str())], None, true).await;
    let digest2 = record_code_hash(&h2, "main.mjs").await;
    assert_eq!(digest2, hex::encode(sha2::Sha256::digest(alone.as_bytes())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_imported_module_is_detected_and_replayed_cold() {
    for warm in [true, false] {
        let h = harness(&library("v1"), warm).await;
        let entry = "library/methodologies/waterfall/waterfall.js";
        record_code_hash(&h, entry).await;
        // First iteration: the first task is requested; the session stays warm (if warm).
        let it = h.engine.iterate(RUN).await.expect("iterate");
        assert_eq!(it.status, IterationStatus::Waiting);
        assert!(it.warnings.is_empty(), "{:?}", it.warnings);
        let first = it.requested[0].clone();
        h.post(&first, Ok(json!({"step": 1}))).await;

        // Only the imported helper changes; the entry file is untouched.
        std::fs::write(
            h.dir
                .path()
                .join("processes/library/common-utilities/routed-gate-combinators.js"),
            "export function label() { return 'v2'; }\n",
        )
        .unwrap();
        let its = h.drive(5, echo).await;
        let last = its.last().unwrap();
        assert_eq!(last.status, IterationStatus::Completed, "warm={warm}");
        // The new helper ran: a warm session holding the old one was not continued.
        assert_eq!(last.output, Some(json!("v2:truetrue")), "warm={warm}");
        assert!(
            its[0]
                .warnings
                .iter()
                .any(|w| w.contains("Process code changed")),
            "warm={warm}: {:?}",
            its[0].warnings
        );
        let journal = h.journal();
        let changes: Vec<_> = journal
            .iter()
            .filter(|(t, _)| t == "PROCESS_CODE_HASH_CHANGED")
            .collect();
        assert_eq!(changes.len(), 1, "journaled once: {:?}", types(&journal));
        let current = h
            .engine
            .check_entry(&h.entry_path(entry), None)
            .await
            .unwrap()
            .code_hash;
        assert_eq!(changes[0].1["processCodeHash"], json!(current));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_definition_without_a_kind_fails_the_run() {
    let src = format!(
        "{SDK}const t = defineTask('no-kind', (args) => ({{ title: 'no kind', agent: {{ name: 'a', prompt: 'x' }} }}));\n\
         export async function process(inputs, ctx) {{ return await ctx.task(t, {{}}); }}\n"
    );
    for warm in [true, false] {
        let h = Harness::new(&[("main.mjs", src.as_str())], None, warm).await;
        let it = h.engine.iterate(RUN).await.expect("iterate");
        assert_eq!(it.status, IterationStatus::Failed, "warm={warm}");
        assert!(it.requested.is_empty(), "no effect is requested");
        let error = it.error.unwrap().to_string();
        assert!(
            error.contains("Task no-kind did not provide a kind"),
            "{error}"
        );
        let journal = h.journal();
        assert_eq!(
            types(&journal),
            ["RUN_CREATED", "PROCESS_RUNTIME_ERROR"],
            "babysitter's failed run, no effect"
        );
        let message = &journal[1].1["error"]["message"];
        assert_eq!(message, "Task no-kind did not provide a kind");
    }
}
