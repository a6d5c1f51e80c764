//! The plugin in real harness sessions: Claude Code, Codex and Gemini CLI (the pinned CLIs in
//! `.ci-work/harness-*`, put there by `scripts/ensure-{claude-code,codex,gemini-cli}.sh`; skipped,
//! saying why, when missing — a failure under `BABYSITTER_REQUIRE_ALL=1`, as in CI).
//!
//! `babysitter harness:install-plugin <harness>` installs the bundle (Claude Code from its
//! local marketplace through its own CLI, Codex likewise, Gemini CLI as an extension); then the harness runs
//! headless in the project against the scripted model server, whose script follows the skill:
//! `run:create` of a two-task process, `run:iterate`, perform the agent task and `task:post` it,
//! try to stop — the stop hook (Claude Code and Codex `Stop`, Gemini CLI `AfterAgent`) blocks, since the
//! run is unfinished — iterate, perform and post the second task, iterate to completion and end
//! with the completion proof that `run:iterate` printed, which the hook accepts. Asserted: the
//! journal (one request and one resolution per effect, the run completed once, the stop-hook
//! decisions block then approve for the harness's own session), the proof in the final answer,
//! and that nothing called npm or npx.

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

/// The pinned CLI at `.ci-work/<dir>/node_modules/.bin/<bin>`, or `None` (skipped) without it.
fn installed(dir: &str, bin: &str, script: &str) -> Option<PathBuf> {
    let p = repo()
        .join(".ci-work")
        .join(dir)
        .join("node_modules/.bin")
        .join(bin);
    match skip::installed(&p) {
        Some(p) => Some(p),
        None => {
            skip::skip::<()>(format!(
                "needs the {bin} CLI at {}: run scripts/{script}",
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

/// A sandbox project with the two-task process, this build's `babysitter` first on PATH and
/// npm / npx that record any call and fail.
struct Project {
    s: Sandbox,
    env: Vec<(String, String)>,
    node_calls: PathBuf,
}

impl Project {
    fn new(harness_bin_var: (&str, &Path)) -> Project {
        Project::in_sandbox(Sandbox::new(), harness_bin_var)
    }

    fn in_sandbox(s: Sandbox, harness_bin_var: (&str, &Path)) -> Project {
        let fixtures = fixtures();
        std::fs::copy(
            fixtures.join("two-steps.mjs"),
            s.project.join("two-steps.mjs"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        s.write("inputs.json", "{}");
        // Where a user's own tools live; a login shell (Codex runs commands with `bash -lc`)
        // finds it through the usual `~/.profile`.
        let home = s.tmp.path().join("home");
        let bin = home.join(".local/bin");
        std::fs::create_dir_all(&bin).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            home.join(".profile"),
            "if [ -d \"$HOME/.local/bin\" ] ; then PATH=\"$HOME/.local/bin:$PATH\"; fi\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
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
        let env = vec![
            (
                "HOME".into(),
                s.tmp.path().join("home").display().to_string(),
            ),
            ("PATH".into(), path),
            (
                "TMPDIR".into(),
                s.tmp.path().join("tmp").display().to_string(),
            ),
            ("BABYSITTER_RUNS_SCOPE".into(), "repo".into()),
            ("BABYSITTER_WARM".into(), "0".into()),
            (
                harness_bin_var.0.into(),
                harness_bin_var.1.display().to_string(),
            ),
        ];
        Project { s, env, node_calls }
    }

    fn home(&self) -> PathBuf {
        self.s.tmp.path().join("home")
    }

    fn cmd(&self, args: &[&str]) -> Out {
        let refs: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        self.s.cmd_env(args, &refs)
    }

    /// Runs the harness in the project, against the scripted server, until it exits.
    async fn session(
        &self,
        program: &Path,
        args: &[&str],
        extra: &[(&str, String)],
    ) -> (std::process::ExitStatus, Vec<Value>, String) {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .current_dir(&self.s.project)
            .env_clear()
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("NO_PROXY", "127.0.0.1,localhost")
            .env("BABYSITTER_HOOK_BACKOFF_BASE", "0.01")
            .envs(extra.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(240), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("{} did not finish within 240 s", program.display()))
            .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
        let events = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (
            out.status,
            events,
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    /// The journal of `plugin-run` holds two effects, each requested and resolved once, one
    /// completion, and the stop-hook decisions block then approve for `harness`'s `session`.
    fn check_journal(&self, harness: &str, session: &str) -> String {
        self.check_journal_at(harness, session, &[])
    }

    /// [`Project::check_journal`] of a run read with `at` (`--server URL`: a run on an
    /// orchestrator, whose journal takes no stop-hook decisions from a session).
    fn check_journal_at(&self, harness: &str, session: &str, at: &[&str]) -> String {
        let with = |args: &[&str]| -> Vec<String> {
            args.iter().chain(at).map(|a| (*a).to_owned()).collect()
        };
        let run = |args: &[&str]| {
            let argv = with(args);
            let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
            self.cmd(&refs).ok().json()
        };
        let journal = run(&["run:events", "plugin-run", "--json"]);
        let evs = journal["events"].as_array().cloned().unwrap_or_default();
        let types: Vec<&str> = evs.iter().filter_map(|e| e["type"].as_str()).collect();
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
        assert_eq!(per_effect.len(), 2, "{harness}: {per_effect:?} {types:?}");
        assert!(
            per_effect.values().all(|c| *c == (1, 1)),
            "{harness}: {per_effect:?}"
        );
        assert_eq!(
            types.iter().filter(|t| **t == "RUN_COMPLETED").count(),
            1,
            "{types:?}"
        );
        let stops: Vec<(String, String, String)> = evs
            .iter()
            .filter(|e| e["type"] == "STOP_HOOK_INVOKED")
            .map(|e| {
                let d = &e["data"];
                let f = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
                (f("decision"), f("harness"), f("sessionId"))
            })
            .collect();
        let expected: Vec<(String, String, String)> = if at.is_empty() {
            vec![
                ("block".into(), harness.into(), session.into()),
                ("approve".into(), harness.into(), session.into()),
            ]
        } else {
            Vec::new()
        };
        assert_eq!(stops, expected, "{harness}: the stop-hook decisions");
        let status = run(&["run:status", "plugin-run", "--json"]);
        assert_eq!(status["state"], "completed", "{status}");
        let proof = run(&["run:iterate", "plugin-run", "--json"])["completionProof"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(!proof.is_empty());
        assert!(
            !self.node_calls.try_exists().unwrap_or(true),
            "npm/npx were called: {}",
            std::fs::read_to_string(&self.node_calls).unwrap_or_default()
        );
        proof
    }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/plugin")
}

/// The skill-following script, for a harness whose shell tool is `tool` (Codex's
/// `exec_command` takes `cmd`, the others `command`).
async fn scripted(tool: &str, harness: &str) -> ScriptedServer {
    let text = std::fs::read_to_string(fixtures().join("session-script.json"))
        .unwrap_or_else(|e| panic!("{e}"))
        .replace("{{TOOL}}", tool)
        .replace("{{HARNESS}}", harness);
    let mut script: Script = serde_json::from_str(&text).unwrap_or_else(|e| panic!("script: {e}"));
    if tool == "exec_command" {
        for call in script
            .turns
            .iter_mut()
            .flat_map(|t| t.reply.tool_calls.iter_mut())
        {
            call.arguments = serde_json::json!({"cmd": call.arguments["command"]});
        }
    }
    ScriptedServer::start(([127, 0, 0, 1], 0).into(), Some(script), None)
        .await
        .unwrap_or_else(|e| panic!("scripted server: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_session_drives_a_run_to_completion_through_the_stop_hook() {
    let Some(claude) = installed("harness-claude", "claude", "ensure-claude-code.sh") else {
        return;
    };
    let p = Project::new(("CLAUDE_BIN", &claude));
    let installed = p
        .cmd(&[
            "harness:install-plugin",
            "claude-code",
            "--project",
            ".",
            "--json",
        ])
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
    let settings = read_json(&p.s.project.join(".claude/settings.json"));
    assert_eq!(
        settings["enabledPlugins"]["babysitter@babysitter-rs"], true,
        "{settings}"
    );

    let server = scripted("Bash", "claude-code").await;
    let (status, events, stderr) = p
        .session(
            &claude,
            &[
                "-p",
                "/babysitter:call run the two-steps process",
                "--output-format",
                "stream-json",
                "--verbose",
                "--dangerously-skip-permissions",
            ],
            &[
                ("IS_SANDBOX", "1".into()),
                ("ANTHROPIC_BASE_URL", server.url()),
                ("ANTHROPIC_API_KEY", "sk-ant-scripted-0000".into()),
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
                ("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0".into()),
            ],
        )
        .await;
    let result = events
        .iter()
        .rev()
        .find(|e| e["type"] == "result")
        .cloned()
        .unwrap_or(Value::Null);
    assert!(
        status.success() && result["subtype"] == "success" && result["is_error"] == false,
        "claude: {status}\nresult: {result}\nstderr: {stderr}"
    );
    let session_id = result["session_id"].as_str().unwrap_or_default().to_owned();
    assert!(!session_id.is_empty(), "{result}");
    let proof = p.check_journal("claude-code", &session_id);
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
    assert_eq!(
        result["result"].as_str().unwrap_or_default(),
        format!("The run is complete. <promise>{proof}</promise>")
    );
    drop(server);

    // Uninstall: the bundle and the registration go.
    let removed = p
        .cmd(&[
            "plugin:uninstall",
            "claude-code",
            "--project",
            ".",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(
        removed["unregistered"].as_array().map(Vec::len),
        Some(2),
        "{removed}"
    );
    assert!(
        !p.s.project
            .join(".a5c/plugins/claude-code")
            .try_exists()
            .unwrap_or(true)
    );
    let settings = read_json(&p.s.project.join(".claude/settings.json"));
    assert!(
        settings["enabledPlugins"]["babysitter@babysitter-rs"].is_null(),
        "{settings}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_cli_session_drives_a_run_to_completion_through_after_agent() {
    let Some(gemini) = installed("harness-gemini", "gemini", "ensure-gemini-cli.sh") else {
        return;
    };
    let p = Project::new(("GEMINI_BIN", &gemini));
    let installed = p
        .cmd(&["harness:install-plugin", "gemini-cli", "--user", "--json"])
        .ok()
        .json();
    let ext = p.home().join(".gemini/extensions/babysitter");
    assert_eq!(installed["dir"], ext.display().to_string(), "{installed}");
    // Headless Gemini CLI: API-key auth against the scripted server, no usage statistics.
    std::fs::write(
        p.home().join(".gemini/settings.json"),
        r#"{"security":{"auth":{"selectedType":"gemini-api-key"}},"privacy":{"usageStatisticsEnabled":false}}"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));

    let server = scripted("run_shell_command", "gemini-cli").await;
    let (status, events, stderr) = p
        .session(
            &gemini,
            &[
                "-p",
                "/babysitter:call run the two-steps process",
                "-m",
                "gemini-2.5-pro",
                "--output-format",
                "stream-json",
                "--yolo",
                "--skip-trust",
            ],
            &[
                ("GOOGLE_GEMINI_BASE_URL", server.url()),
                ("GEMINI_API_KEY", "scripted-gemini-key".into()),
                ("GEMINI_CLI_TRUST_WORKSPACE", "true".into()),
            ],
        )
        .await;
    let result = events
        .iter()
        .rev()
        .find(|e| e["type"] == "result")
        .cloned()
        .unwrap_or(Value::Null);
    assert!(
        status.success() && result["status"] == "success",
        "gemini: {status}\nresult: {result}\nstderr: {stderr}"
    );
    let session_id = events
        .iter()
        .find(|e| e["type"] == "init")
        .and_then(|e| e["session_id"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(!session_id.is_empty(), "no init event with a session id");
    let proof = p.check_journal("gemini-cli", &session_id);
    let answer: String = events
        .iter()
        .filter(|e| e["type"] == "message" && e["role"] == "assistant")
        .filter_map(|e| e["content"].as_str())
        .collect();
    assert!(
        answer.ends_with(&format!("The run is complete. <promise>{proof}</promise>")),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_session_drives_a_run_to_completion_through_the_stop_hook() {
    let Some(codex) = installed("harness-codex", "codex", "ensure-codex.sh") else {
        return;
    };
    let mut p = Project::new(("CODEX_BIN", &codex));
    let codex_home = p.home().join(".codex");
    std::fs::create_dir_all(&codex_home).unwrap_or_else(|e| panic!("{e}"));
    p.env
        .push(("CODEX_HOME".into(), codex_home.display().to_string()));
    let server = scripted("exec_command", "codex").await;
    // The scripted provider first: `codex plugin add` appends its tables after these keys.
    std::fs::write(
        codex_home.join("config.toml"),
        format!(
            "model = \"fake-model\"\nmodel_provider = \"scripted\"\n\n\
             [model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{}/v1\"\n\
             env_key = \"SCRIPTED_OPENAI_KEY\"\nwire_api = \"responses\"\n\n\
             [analytics]\nenabled = false\n",
            server.url()
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let installed = p
        .cmd(&[
            "harness:install-plugin",
            "codex",
            "--project",
            ".",
            "--json",
        ])
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

    let (status, events, stderr) = p
        .session(
            &codex,
            &[
                "exec",
                "--json",
                "--skip-git-repo-check",
                "-s",
                "danger-full-access",
                "--dangerously-bypass-hook-trust",
                "run the two-steps process",
            ],
            &[("SCRIPTED_OPENAI_KEY", "sk-scripted-codex".into())],
        )
        .await;
    assert!(status.success(), "codex: {status}\nstderr: {stderr}");
    assert!(
        events.iter().any(|e| e["type"] == "turn.completed"),
        "codex: no completed turn\nstderr: {stderr}"
    );
    let thread = events
        .iter()
        .find(|e| e["type"] == "thread.started")
        .and_then(|e| e["thread_id"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert!(!thread.is_empty(), "no thread.started event");
    let proof = p.check_journal("codex", &thread);
    let last = events
        .iter()
        .rev()
        .find(|e| e["type"] == "item.completed" && e["item"]["type"] == "agent_message")
        .and_then(|e| e["item"]["text"].as_str())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(
        last,
        format!("The run is complete. <promise>{proof}</promise>")
    );
    drop(server);

    let removed = p
        .cmd(&["plugin:uninstall", "codex", "--project", ".", "--json"])
        .ok()
        .json();
    assert_eq!(
        removed["unregistered"].as_array().map(Vec::len),
        Some(2),
        "{removed}"
    );
    let config = std::fs::read_to_string(codex_home.join("config.toml")).unwrap_or_default();
    assert!(!config.contains("babysitter"), "{config}");
}

/// A `BABYSITTER_BIN` that records each call's arguments and payload, then runs this build's
/// babysitter on it: what the hooks of an in-process plugin received.
fn recording_bin(p: &Project) -> (PathBuf, PathBuf) {
    let log = p.s.tmp.path().join("hooks.log");
    let bin = p.s.tmp.path().join("record-babysitter.sh");
    write_exec(
        &bin,
        &format!(
            "#!/bin/sh\nin=$(cat)\nprintf '%s\\t%s\\n' \"$*\" \"$in\" >> '{}'\nprintf '%s' \"$in\" | exec '{}' \"$@\"\n",
            log.display(),
            env!("CARGO_BIN_EXE_babysitter")
        ),
    );
    (bin, log)
}

/// The recorded calls: (arguments, payload).
fn recorded(log: &Path) -> Vec<(String, Value)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(a, p)| (a.to_owned(), serde_json::from_str(p).unwrap_or(Value::Null)))
        .collect()
}

/// Every call was `hooks:invoke --harness <harness>`, the phases in `want` were among them, all
/// for one session, and babysitter's session start made that session's file.
fn check_in_process_hooks(p: &Project, log: &Path, harness: &str, want: &[(&str, &str)]) -> String {
    let calls = recorded(log);
    assert!(!calls.is_empty(), "{harness}: no hook reached babysitter");
    for (args, _) in &calls {
        assert!(
            args.starts_with(&format!("hooks:invoke --harness {harness} --phase ")),
            "{harness}: {args}"
        );
    }
    for (phase, event) in want {
        let hit = calls
            .iter()
            .find(|(a, _)| a.ends_with(&format!("--phase {phase}")));
        let (_, payload) = hit.unwrap_or_else(|| panic!("{harness}: no {phase} call in {calls:?}"));
        assert_eq!(
            payload["hook_event_name"], *event,
            "{harness} {phase}: {payload}"
        );
        assert_eq!(
            payload["cwd"],
            p.s.project.display().to_string(),
            "{payload}"
        );
    }
    let sessions: std::collections::BTreeSet<&str> = calls
        .iter()
        .filter_map(|(_, payload)| payload["session_id"].as_str())
        .collect();
    assert_eq!(sessions.len(), 1, "{harness}: sessions {sessions:?}");
    let sid = sessions.into_iter().next().unwrap_or_default().to_owned();
    let state = p.home().join(".a5c/state").join(format!("{sid}.md"));
    assert!(
        state.is_file(),
        "{harness}: no session file {}",
        state.display()
    );
    sid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_loads_the_extension_and_its_hooks_reach_babysitter() {
    let Some(pi) = installed("harness-pi", "pi", "ensure-pi.sh") else {
        return;
    };
    let p = Project::new(("PI_BIN", &pi));
    p.cmd(&["harness:install-plugin", "pi", "--project", ".", "--json"])
        .ok();
    let (bin, log) = recording_bin(&p);
    let server = ScriptedServer::start(([127, 0, 0, 1], 0).into(), None, None)
        .await
        .unwrap_or_else(|e| panic!("scripted server: {e}"));
    std::fs::create_dir_all(p.home().join(".pi/agent")).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        p.home().join(".pi/agent/models.json"),
        serde_json::json!({"providers": {"scripted": {
            "baseUrl": format!("{}/v1", server.url()), "api": "openai-completions",
            "apiKey": "SCRIPTED_KEY",
            "models": [{"id": "fake", "name": "fake", "contextWindow": 128000, "maxTokens": 16384}]
        }}})
        .to_string(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let (status, _events, stderr) = p
        .session(
            &pi,
            &[
                "-p",
                "--mode",
                "json",
                "--provider",
                "scripted",
                "--model",
                "fake",
                "Create out.txt containing hello using the shell, then reply DONE",
            ],
            &[
                ("SCRIPTED_KEY", "k".into()),
                ("PI_OFFLINE", "1".into()),
                ("BABYSITTER_BIN", bin.display().to_string()),
            ],
        )
        .await;
    assert!(status.success(), "pi: {status}\n{stderr}");
    check_in_process_hooks(
        &p,
        &log,
        "pi",
        &[
            ("session.start", "session_start"),
            ("tool.before", "tool_call"),
            ("turn.after_agent", "agent_end"),
            ("session.end", "session_shutdown"),
        ],
    );
    let calls = recorded(&log);
    let end = calls
        .iter()
        .find(|(a, _)| a.ends_with("turn.after_agent"))
        .map(|(_, p)| p.clone());
    assert_eq!(end.unwrap_or_default()["last_assistant_message"], "DONE");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opencode_loads_the_plugin_and_its_hooks_reach_babysitter() {
    let Some(opencode) = installed("harness-opencode", "opencode", "ensure-opencode.sh") else {
        return;
    };
    let p = Project::new(("OPENCODE_BIN", &opencode));
    p.cmd(&[
        "harness:install-plugin",
        "opencode",
        "--project",
        ".",
        "--json",
    ])
    .ok();
    let (bin, log) = recording_bin(&p);
    let server = ScriptedServer::start(([127, 0, 0, 1], 0).into(), None, None)
        .await
        .unwrap_or_else(|e| panic!("scripted server: {e}"));
    let config = p.home().join(".config/opencode/opencode.json");
    std::fs::create_dir_all(config.parent().unwrap_or(&p.home())).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(
        &config,
        serde_json::json!({"$schema": "https://opencode.ai/config.json",
            "provider": {"scripted": {"npm": "@ai-sdk/openai-compatible", "name": "scripted",
                "options": {"baseURL": format!("{}/v1", server.url()), "apiKey": "{env:SCRIPTED_KEY}"},
                "models": {"fake": {"name": "fake", "tool_call": true}}}},
            "model": "scripted/fake", "autoupdate": false, "share": "disabled"})
        .to_string(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let mut extra: Vec<(&str, String)> = vec![
        ("SCRIPTED_KEY", "k".into()),
        (
            "XDG_CONFIG_HOME",
            p.home().join(".config").display().to_string(),
        ),
        ("OPENCODE_CONFIG", config.display().to_string()),
        // OpenCode installs its plugin SDK in the background; a dead registry with no retries
        // fails that at once instead of after a minute of back-off.
        ("NPM_CONFIG_REGISTRY", "http://127.0.0.1:9/".into()),
        ("NPM_CONFIG_FETCH_RETRIES", "0".into()),
        ("BABYSITTER_BIN", bin.display().to_string()),
    ];
    for v in [
        "OPENCODE_DISABLE_AUTOUPDATE",
        "OPENCODE_DISABLE_MODELS_FETCH",
        "OPENCODE_DISABLE_SHARE",
        "OPENCODE_DISABLE_LSP_DOWNLOAD",
    ] {
        extra.push((v, "1".into()));
    }
    let (status, _events, stderr) = p
        .session(
            &opencode,
            &[
                "run",
                "--format",
                "json",
                "--auto",
                "-m",
                "scripted/fake",
                "Create out.txt containing hello using the shell, then reply DONE",
            ],
            &extra,
        )
        .await;
    assert!(status.success(), "opencode: {status}\n{stderr}");
    check_in_process_hooks(
        &p,
        &log,
        "opencode",
        &[
            ("session.start", "session.created"),
            ("tool.before", "tool.execute.before"),
            ("session.idle", "session.idle"),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_session_drives_a_run_that_lives_on_the_teams_server() {
    let Some(claude) = installed("harness-claude", "claude", "ensure-claude-code.sh") else {
        return;
    };
    // `babysitter up` (journal and orchestrator, no worker) as the team's server; the session
    // is told of it by `run:create --server` alone.
    let s = Sandbox::new();
    // The server keeps its runs in its own data directory, away from the project.
    let data = s.tmp.path().join("server-data");
    let mut s = s.remote_at(data.clone());
    let pos = s.env.iter().position(|(k, _)| k == "BABYSITTER_SERVER");
    let url = pos.map(|i| s.env.remove(i).1).unwrap_or_default();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let p = Project::in_sandbox(s, ("CLAUDE_BIN", &claude));
    p.cmd(&[
        "harness:install-plugin",
        "claude-code",
        "--project",
        ".",
        "--json",
    ])
    .ok();
    let server = scripted("Bash", &format!("claude-code --server {url}")).await;
    let (status, events, stderr) = p
        .session(
            &claude,
            &[
                "-p",
                "/babysitter:call run the two-steps process on the team server",
                "--output-format",
                "stream-json",
                "--verbose",
                "--dangerously-skip-permissions",
            ],
            &[
                ("IS_SANDBOX", "1".into()),
                ("ANTHROPIC_BASE_URL", server.url()),
                ("ANTHROPIC_API_KEY", "sk-ant-scripted-0000".into()),
                ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
                ("CLAUDE_CODE_STOP_HOOK_BLOCK_CAP", "0".into()),
            ],
        )
        .await;
    let result = events
        .iter()
        .rev()
        .find(|e| e["type"] == "result")
        .cloned()
        .unwrap_or(Value::Null);
    assert!(
        status.success() && result["subtype"] == "success" && result["is_error"] == false,
        "claude: {status}\nresult: {result}\nstderr: {stderr}"
    );
    let session_id = result["session_id"].as_str().unwrap_or_default().to_owned();
    // The run and its journal are the server's: read there, the loop's work is all in it.
    let proof = p.check_journal_at("claude-code", &session_id, &["--server", &url]);
    assert_eq!(
        result["result"].as_str().unwrap_or_default(),
        format!("The run is complete. <promise>{proof}</promise>")
    );
    // The stop hook read the unfinished run on the server and kept the session going once.
    let feedback = events
        .iter()
        .filter(|e| {
            e["type"] == "user"
                && e["message"]["content"].as_array().is_some_and(|c| {
                    c.iter().any(|p| {
                        p["text"]
                            .as_str()
                            .is_some_and(|t| t.starts_with("Stop hook feedback:"))
                    })
                })
        })
        .count();
    assert_eq!(feedback, 1, "the stop hook's blocks");
    let state = std::fs::read_to_string(p.home().join(format!(".a5c/state/{session_id}.md")))
        .unwrap_or_default();
    assert!(
        state.contains(&format!("metadata_server: \"{url}\"")),
        "{state}"
    );
    // The run is in the server's data directory, and nothing of it in the project.
    assert!(data.join("runs/plugin-run/run.json").is_file());
    assert!(!p.s.project.join(".a5c/runs").try_exists().unwrap_or(true));
    // A teammate elsewhere sees it, by its id.
    let teammate = Sandbox::new();
    let seen = teammate
        .cmd(&["run:status", "plugin-run", "--server", &url, "--json"])
        .ok()
        .json();
    assert_eq!(seen["state"], "completed", "{seen}");
}
