//! The plugin in a real Claude Code session (the pinned CLI in `.ci-work/harness-claude`, put
//! there by `scripts/ensure-claude-code.sh`; skipped, saying why, when it is missing — a failure
//! under `BABYSITTER_REQUIRE_ALL=1`, as in CI).
//!
//! `babysitter harness:install-plugin claude-code --project DIR` installs the bundle from its
//! local marketplace through Claude Code's own CLI; then `claude -p "/babysitter:call …"` runs
//! in DIR against the scripted model server, whose script follows the skill: `run:create` of a
//! two-task process, `run:iterate`, perform the agent task and `task:post` it, try to stop —
//! the Stop hook blocks, since the run is unfinished — iterate, perform and post the second task,
//! iterate to completion and end with the completion proof that `run:iterate` printed, which the
//! Stop hook accepts. Asserted: the journal (one request and one resolution per effect, the
//! run completed once, the stop-hook decisions block then approve, made for Claude Code's own
//! session), the block's reason reaching the model, and that nothing called npm or npx.

mod compat_support;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use babysitter_transport_proxy::scripted::{Script, ScriptedServer};
use compat_support::*;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn claude() -> Option<PathBuf> {
    let p = repo().join(".ci-work/harness-claude/node_modules/.bin/claude");
    match skip::installed(&p) {
        Some(p) => Some(p),
        None => {
            skip::skip::<()>(format!(
                "needs the Claude Code CLI at {}: run scripts/ensure-claude-code.sh",
                skip::tidy(&p).display()
            ));
            None
        }
    }
}

fn write_exec(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_session_drives_a_run_to_completion_through_the_stop_hook() {
    let Some(claude) = claude() else { return };
    let s = Sandbox::new();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/plugin");
    std::fs::copy(
        fixtures.join("two-steps.mjs"),
        s.project.join("two-steps.mjs"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    s.write("inputs.json", "{}");

    // PATH: this build's babysitter first, and npm / npx that record any call and fail.
    let bin = s.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap_or_else(|e| panic!("{e}"));
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_babysitter"), bin.join("babysitter"))
        .unwrap_or_else(|e| panic!("{e}"));
    let node_calls = s.tmp.path().join("node-calls.log");
    for tool in ["npm", "npx"] {
        write_exec(
            &bin.join(tool),
            &format!(
                "#!/bin/sh\necho \"{tool} $*\" >> '{}'\nexit 1\n",
                node_calls.display()
            ),
        );
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into())
    );
    let home = s.tmp.path().join("home");
    let base_env: Vec<(String, String)> = vec![
        ("HOME".into(), home.display().to_string()),
        ("PATH".into(), path.clone()),
        (
            "TMPDIR".into(),
            s.tmp.path().join("tmp").display().to_string(),
        ),
        ("BABYSITTER_RUNS_SCOPE".into(), "repo".into()),
        ("BABYSITTER_WARM".into(), "0".into()),
        ("CLAUDE_BIN".into(), claude.display().to_string()),
    ];

    // Install the plugin for the project, through Claude Code's own CLI.
    let refs: Vec<(&str, &str)> = base_env
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let installed = s
        .cmd_env(
            &[
                "harness:install-plugin",
                "claude-code",
                "--project",
                ".",
                "--json",
            ],
            &refs,
        )
        .ok()
        .json();
    assert_eq!(
        installed["registered"],
        serde_json::json!([
            "marketplace babysitter-rs",
            "plugin babysitter@babysitter-rs"
        ]),
        "{installed}"
    );
    let settings = read_json(&s.project.join(".claude/settings.json"));
    assert_eq!(
        settings["enabledPlugins"]["babysitter@babysitter-rs"], true,
        "{settings}"
    );

    // The session, against the scripted model.
    let script: Script = serde_json::from_slice(
        &std::fs::read(fixtures.join("claude-code-script.json")).unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("script: {e}"));
    let server = ScriptedServer::start(([127, 0, 0, 1], 0).into(), Some(script), None)
        .await
        .unwrap_or_else(|e| panic!("scripted server: {e}"));
    let mut cmd = tokio::process::Command::new(&claude);
    cmd.args([
        "-p",
        "/babysitter:call run the two-steps process",
        "--output-format",
        "stream-json",
        "--verbose",
        "--dangerously-skip-permissions",
    ])
    .current_dir(&s.project)
    .env_clear()
    .envs(base_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    .env("IS_SANDBOX", "1")
    .env("ANTHROPIC_BASE_URL", server.url())
    .env("ANTHROPIC_API_KEY", "sk-ant-scripted-0000")
    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
    .env("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0")
    .env("NO_PROXY", "127.0.0.1,localhost")
    .env("BABYSITTER_HOOK_BACKOFF_BASE", "0.01")
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(240), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("claude did not finish within 240 s"))
        .unwrap_or_else(|e| panic!("claude: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let events: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let result = events
        .iter()
        .rev()
        .find(|e| e["type"] == "result")
        .cloned()
        .unwrap_or(Value::Null);
    assert!(
        out.status.success() && result["subtype"] == "success" && result["is_error"] == false,
        "claude: {}\nresult: {result}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let session_id = result["session_id"].as_str().unwrap_or_default().to_owned();
    assert!(!session_id.is_empty(), "{result}");

    // The journal: two effects, each requested and resolved once; completed once.
    let journal = s.cmd(&["run:events", "plugin-run", "--json"]).ok().json();
    let evs = journal["events"].as_array().cloned().unwrap_or_default();
    let mut per_effect: BTreeMap<String, (u32, u32)> = BTreeMap::new();
    for e in &evs {
        let id = e["data"]["effectId"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        match e["type"].as_str() {
            Some("EFFECT_REQUESTED") => per_effect.entry(id).or_default().0 += 1,
            Some("EFFECT_RESOLVED") => per_effect.entry(id).or_default().1 += 1,
            _ => {}
        }
    }
    let types: Vec<&str> = evs.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(per_effect.len(), 2, "{per_effect:?} {types:?}\n{stdout}");
    assert!(per_effect.values().all(|c| *c == (1, 1)), "{per_effect:?}");
    let count = |t: &str| evs.iter().filter(|e| e["type"] == t).count();
    assert_eq!(count("RUN_COMPLETED"), 1);
    let stops: Vec<(String, String, String)> = evs
        .iter()
        .filter(|e| e["type"] == "STOP_HOOK_INVOKED")
        .map(|e| {
            let d = &e["data"];
            let f = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
            (f("decision"), f("harness"), f("sessionId"))
        })
        .collect();
    assert_eq!(
        stops,
        vec![
            ("block".into(), "claude-code".into(), session_id.clone()),
            ("approve".into(), "claude-code".into(), session_id),
        ],
        "the stop-hook decisions"
    );
    // The block's reason reached the model as the next prompt.
    let fed_back = events.iter().any(|e| {
        e["type"] == "user"
            && e["message"]["content"].as_array().is_some_and(|c| {
                c.iter().any(|p| {
                    p["text"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("Stop hook feedback:"))
                })
            })
    });
    assert!(fed_back, "no Stop hook feedback in the session");
    // The final answer carries the run's proof.
    let status = s.cmd(&["run:status", "plugin-run", "--json"]).ok().json();
    assert_eq!(status["state"], "completed", "{status}");
    let proof = s.cmd(&["run:iterate", "plugin-run", "--json"]).ok().json()["completionProof"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(!proof.is_empty());
    assert_eq!(
        result["result"].as_str().unwrap_or_default(),
        format!("The run is complete. <promise>{proof}</promise>")
    );
    // Nothing reached for Node's babysitter.
    assert!(
        !node_calls.try_exists().unwrap_or(true),
        "npm/npx were called: {}",
        std::fs::read_to_string(&node_calls).unwrap_or_default()
    );
    drop(server);

    // Uninstall: the bundle and the registration go.
    let removed = s
        .cmd_env(
            &[
                "plugin:uninstall",
                "claude-code",
                "--project",
                ".",
                "--json",
            ],
            &refs,
        )
        .ok()
        .json();
    assert_eq!(
        removed["unregistered"].as_array().map(Vec::len),
        Some(2),
        "{removed}"
    );
    assert!(
        !s.project
            .join(".a5c/plugins/claude-code")
            .try_exists()
            .unwrap_or(true)
    );
    let settings = read_json(&s.project.join(".claude/settings.json"));
    assert!(
        settings["enabledPlugins"]["babysitter@babysitter-rs"].is_null(),
        "{settings}"
    );
}
