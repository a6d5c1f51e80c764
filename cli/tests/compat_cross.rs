//! Runs cross between the reference CLI (npm 0.0.187) and ours over the same run directory: a
//! run either of them created is iterated by the reference, posted to by us, then iterated by
//! us and posted to by the reference, and completes with the output the process computes; both
//! list the same pending effects at every step. Skips, saying so, when the reference CLI is not
//! installed (`.ci/run` installs it, and sets `BABYSITTER_REQUIRE_ALL=1`: a skip fails there).

mod compat_support;

use std::path::Path;

use compat_support::*;
use serde_json::Value;

const SEQ: &str = "import { defineTask } from '@a5c-ai/babysitter-sdk';\n\
export const step = defineTask('cross.step', (args) => ({ kind: 'node', title: 'step ' + args.i, node: { entry: 'noop.js' } }));\n\
export async function process(inputs, ctx) { let sum = 0; for (let i = 0; i < 6; i++) { const r = await ctx.task(step, { i }); sum += r.value * (i + 1); } return { sum }; }\n";

/// Which CLI runs a command.
#[derive(Clone, Copy, Debug)]
enum Cli {
    Ours,
    Theirs,
}

fn run(s: &Sandbox, reference: &Path, cli: Cli, args: &[&str]) -> Value {
    let out = match cli {
        Cli::Ours => s.cmd(args),
        Cli::Theirs => s.cmd_ref(reference, args),
    };
    out.ok().json()
}

/// Creates run `id` with `creator`, then drives it: for steps 0–2 the reference iterates and we
/// post, for steps 3–5 we iterate and the reference posts; both list the same pending effect at
/// every step, and the run completes under us. (The published 0.0.187 keys effects by call
/// index, `S000001`…; 6.0.0 — our format — finds those by its legacy key, spec §3.5, but 0.0.187
/// cannot find 6.0.0's derived keys, so once we have requested effects it can list and post
/// them, not iterate.)
fn cross(s: &Sandbox, reference: &Path, id: &str, creator: Cli) {
    let out = run(
        s,
        reference,
        creator,
        &[
            "run:create",
            "--process-id",
            "cross/seq",
            "--entry",
            "processes/seq.mjs#process",
            "--inputs",
            "inputs.json",
            "--run-id",
            id,
            "--json",
        ],
    );
    assert_eq!(out["runId"], id, "{creator:?} run:create: {out}");
    let dir = format!(".a5c/runs/{id}");
    let pending = |cli: Cli| -> Vec<String> {
        run(
            s,
            reference,
            cli,
            &["task:list", &dir, "--pending", "--json"],
        )["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["effectId"].as_str().unwrap().to_owned())
            .collect()
    };
    for step in 0..6 {
        let (iterates, posts) = if step < 3 {
            (Cli::Theirs, Cli::Ours)
        } else {
            (Cli::Ours, Cli::Theirs)
        };
        let it = run(s, reference, iterates, &["run:iterate", &dir, "--json"]);
        assert_eq!(it["status"], "waiting", "step {step} ({iterates:?}): {it}");
        let ours = pending(Cli::Ours);
        assert_eq!(ours, pending(Cli::Theirs), "step {step}");
        assert_eq!(ours.len(), 1, "step {step}: one task at a time");
        let value = format!("{{\"value\": {}}}", step + 1);
        run(
            s,
            reference,
            posts,
            &[
                "task:post",
                &dir,
                &ours[0],
                "--status",
                "ok",
                "--value-inline",
                &value,
                "--json",
            ],
        );
    }
    let it = run(s, reference, Cli::Ours, &["run:iterate", &dir, "--json"]);
    assert_eq!(it["status"], "completed", "{it}");
    for cli in [Cli::Ours, Cli::Theirs] {
        let status = run(s, reference, cli, &["run:status", &dir, "--json"]);
        assert_eq!(status["state"], "completed", "{cli:?}: {status}");
    }
    // 1·1 + 2·2 + … + 6·6, computed by the process from results both CLIs posted.
    let out = read_json(&s.run_dir(id).join("state/output.json"));
    assert_eq!(out["sum"], 91, "{out}");
    // Six effects in all: each step's effect was found again, whichever CLI requested it.
    let events = s.event_types(id);
    assert_eq!(
        events.iter().filter(|t| *t == "EFFECT_REQUESTED").count(),
        6,
        "{events:?}"
    );
}

#[test]
fn runs_cross_between_the_reference_and_us() {
    let Some(reference) = reference_cli() else {
        return; // skipped: reference_cli() recorded why
    };
    let s = Sandbox::new();
    s.write("processes/seq.mjs", SEQ);
    s.write("inputs.json", "{}");
    // The reference imports the SDK with Node's resolution from the process file.
    let sdk = reference
        .parent()
        .and_then(Path::parent)
        .unwrap()
        .join("@a5c-ai/babysitter-sdk");
    let link = s.project.join("node_modules/@a5c-ai");
    std::fs::create_dir_all(&link).unwrap();
    std::os::unix::fs::symlink(sdk.canonicalize().unwrap(), link.join("babysitter-sdk")).unwrap();
    cross(&s, &reference, "made-by-them", Cli::Theirs);
    cross(&s, &reference, "made-by-us", Cli::Ours);
}
