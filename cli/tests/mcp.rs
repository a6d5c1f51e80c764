//! `babysitter mcp:serve` with the official MCP Python SDK as its client (`mcp_client.py`, in the
//! venv `scripts/ensure-sdk-venv.sh` makes; skipped, saying why, without it — a failure under
//! `BABYSITTER_REQUIRE_ALL=1`, as in CI): every tool is listed and called, the demo process is
//! driven to completion through the tools alone, and bad calls are refused with a reason.

mod compat_support;

use std::collections::BTreeSet;
use std::path::Path;

use compat_support::*;
use serde_json::Value;

const TOOLS: &[&str] = &[
    "breakpoint_answer",
    "breakpoint_rules",
    "configure_show",
    "health",
    "process_library_active",
    "run_create",
    "run_events",
    "run_iterate",
    "run_rebuild_state",
    "run_status",
    "session_associate",
    "session_init",
    "session_resume",
    "session_state",
    "skill_discover",
    "task_list",
    "task_post",
    "task_show",
];

#[test]
fn the_official_python_client_lists_and_calls_every_tool() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = repo.join(".ci-work/venv-sdk/bin/python");
    if skip::installed(&python).is_none() {
        skip::skip::<()>(format!(
            "needs the Python SDK venv (mcp) at {}: run scripts/ensure-sdk-venv.sh",
            skip::tidy(&python).display()
        ));
        return;
    }
    let s = Sandbox::with_demo();
    // A bound process library (the default one would be cloned from the network).
    std::fs::create_dir_all(s.project.join("library")).unwrap_or_else(|e| panic!("{e}"));
    s.cmd(&["process-library:use", "--dir", "library", "--json"])
        .ok();
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let out = s.exec(
        &python,
        &[
            &client.display().to_string(),
            env!("CARGO_BIN_EXE_babysitter"),
            &s.project.display().to_string(),
        ],
        &[],
    );
    assert_eq!(out.code, 0, "client: {}", out.stderr);
    let report: Value = serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("client report: {e}: {}", out.stdout));
    assert_eq!(report["server"], "babysitter");
    let listed: Vec<&str> = report["tools"]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(listed, TOOLS);

    let calls = report["calls"].as_array().cloned().unwrap_or_default();
    let called: BTreeSet<&str> = calls.iter().filter_map(|c| c["tool"].as_str()).collect();
    for t in TOOLS {
        assert!(called.contains(t), "{t} was never called");
    }
    // Everything up to the bad calls succeeded, each answering its command's JSON.
    let bad_from = calls
        .iter()
        .position(|c| c["tool"] == "task_post" && c["args"]["status"] == "maybe")
        .unwrap_or(calls.len());
    for c in &calls[..bad_from] {
        assert_eq!(c["isError"], false, "{} failed: {}", c["tool"], c["text"]);
        assert!(
            c["structured"].is_object(),
            "{}: no JSON: {}",
            c["tool"],
            c["text"]
        );
    }
    // The demo run was driven to completion through the tools alone.
    let last_iterate = calls
        .iter()
        .rev()
        .find(|c| c["tool"] == "run_iterate")
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        last_iterate["structured"]["status"], "completed",
        "{last_iterate}"
    );
    let status = s.cmd(&["run:status", "mcp-run", "--json"]).ok().json();
    assert_eq!(status["state"], "completed");
    let resolved = s
        .cmd(&[
            "run:events",
            "mcp-run",
            "--json",
            "--filter-type",
            "EFFECT_RESOLVED",
        ])
        .ok()
        .json();
    assert_eq!(
        resolved["events"].as_array().map(Vec::len),
        Some(4),
        "plan, 2 checks, the gate"
    );

    // The bad calls: refused with what was wrong.
    let bad: Vec<(String, String)> = calls[bad_from..]
        .iter()
        .map(|c| {
            assert_eq!(c["isError"], true, "{c}");
            (
                c["tool"].as_str().unwrap_or_default().to_owned(),
                c["text"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let says = |i: usize, what: &str| {
        assert!(
            bad.get(i).is_some_and(|(_, t)| t.contains(what)),
            "{:?} lacks {what:?}",
            bad.get(i)
        );
    };
    says(0, "status must be ok or error, not \"maybe\"");
    says(1, "unknown argument \"colour\"");
    says(2, "runId is required");
    says(3, "no-such-run");
    assert!(
        report["unknownTool"]
            .as_str()
            .is_some_and(|t| t.contains("unknown tool \"no_such_tool\"")),
        "{}",
        report["unknownTool"]
    );
}
