//! Black-box tests of the peripheral commands of the reference CLI: `process-library:*` over a
//! git remote that is a bare repository made in the test (a local path, never the network),
//! and the process-library facts `instructions:*` reports (`suggestedProcesses`,
//! `existingRun`).

mod compat_support;

use std::path::{Path, PathBuf};
use std::process::Command;

use compat_support::{Sandbox, keys, read_json};
use serde_json::{Value, json};

/// `git` with a fixed identity, in `dir`; panics with its stderr when it fails.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.com"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A library repository in the babysitter layout (`library/processes/…`) and its bare clone,
/// the remote the tests clone from. Returns (work tree, bare remote).
fn library_remote(s: &Sandbox) -> (PathBuf, PathBuf) {
    let src = s.tmp.path().join("lib-src");
    std::fs::create_dir_all(src.join("library/processes")).unwrap();
    std::fs::write(
        src.join("library/processes/hello.js"),
        "export async function process() { return {}; }\n",
    )
    .unwrap();
    git(&src, &["init", "-q", "-b", "main"]);
    git(&src, &["add", "."]);
    git(&src, &["commit", "-q", "-m", "first"]);
    let bare = s.tmp.path().join("remote.git");
    git(
        s.tmp.path(),
        &["clone", "-q", "--bare", "lib-src", "remote.git"],
    );
    (src, bare)
}

/// Commits a new file in `src` and pushes it to `bare`; returns the new revision.
fn push_commit(src: &Path, bare: &Path, name: &str) -> String {
    std::fs::write(src.join("library/processes").join(name), "// more\n").unwrap();
    git(src, &["add", "."]);
    git(src, &["commit", "-q", "-m", name]);
    git(src, &["push", "-q", &bare.display().to_string(), "main"]);
    git(src, &["rev-parse", "HEAD"])
}

fn path_env() -> String {
    std::env::var("PATH").unwrap_or_default()
}

/// Our CLI with `PATH` (it runs `git`) and `extra`.
fn bs(s: &Sandbox, args: &[&str], extra: &[(&str, &str)]) -> compat_support::Out {
    let path = path_env();
    let mut env = vec![("PATH", path.as_str())];
    env.extend_from_slice(extra);
    s.cmd_env(args, &env)
}

fn home_a5c(s: &Sandbox) -> PathBuf {
    s.tmp.path().join("home").join(".a5c")
}

#[test]
fn compat_process_library_clone_update_and_clone_twice() {
    let s = Sandbox::new();
    let (src, bare) = library_remote(&s);
    let bare_s = bare.display().to_string();
    let head = git(&src, &["rev-parse", "HEAD"]);

    // Clone into --dir (relative to the working directory).
    let v = bs(
        &s,
        &[
            "process-library:clone",
            "--repo",
            &bare_s,
            "--dir",
            "lib",
            "--json",
        ],
        &[],
    )
    .ok()
    .json();
    let dir = s.project.join("lib");
    assert_eq!(keys(&v), ["success", "dir", "repo", "revision"]);
    assert_eq!(
        v,
        json!({"success": true, "dir": dir.display().to_string(), "repo": bare_s, "revision": head})
    );
    assert!(dir.join("library/processes/hello.js").is_file());

    // Cloning again is refused and leaves the first clone alone.
    let before = git(&dir, &["rev-parse", "HEAD"]);
    let out = bs(
        &s,
        &[
            "process-library:clone",
            "--repo",
            &bare_s,
            "--dir",
            "lib",
            "--json",
        ],
        &[],
    )
    .fails();
    assert_eq!(
        out.json(),
        json!({"error": "clone_failed", "message": format!("Process-library directory already exists at {}. Choose a new --dir or update it instead.", dir.display())})
    );
    assert!(out.stdout.starts_with("{\"error\""), "compact JSON");
    assert_eq!(git(&dir, &["rev-parse", "HEAD"]), before);
    assert!(dir.join("library/processes/hello.js").is_file());

    // Update follows a new commit on the remote.
    let next = push_commit(&src, &bare, "second.js");
    let v = bs(
        &s,
        &["process-library:update", "--dir", "lib", "--json"],
        &[],
    )
    .ok()
    .json();
    assert_eq!(
        v,
        json!({"success": true, "dir": dir.display().to_string(), "repo": bare_s, "revision": next})
    );
    assert!(dir.join("library/processes/second.js").is_file());
    // Text form.
    let out = bs(&s, &["process-library:update", "--dir", "lib"], &[]).ok();
    assert_eq!(
        out.stdout,
        format!(
            "Process library updated.\n  Dir: {}\n  Revision: {next}\n",
            dir.display()
        )
    );

    // The default clone dir is under the state dir; text output.
    let out = bs(&s, &["process-library:clone", "--repo", &bare_s], &[]).ok();
    let default_dir = home_a5c(&s).join("process-library/babysitter-repo");
    assert_eq!(
        out.stdout,
        format!(
            "Process library cloned.\n  Repo: {bare_s}\n  Dir: {}\n  Revision: {next}\n",
            default_dir.display()
        )
    );
}

#[test]
fn compat_process_library_errors_name_what_was_wrong() {
    let s = Sandbox::new();
    let (_src, bare) = library_remote(&s);
    let bare_s = bare.display().to_string();
    let missing = s.tmp.path().join("no-such-remote.git");

    // A remote that does not exist: git's message, and nothing left behind.
    let out = bs(
        &s,
        &[
            "process-library:clone",
            "--repo",
            &missing.display().to_string(),
            "--dir",
            "x",
            "--json",
        ],
        &[],
    )
    .fails();
    let msg = out.json()["message"].as_str().unwrap().to_owned();
    assert_eq!(out.json()["error"], "clone_failed");
    assert!(msg.starts_with("Command failed: git clone"), "{msg}");
    assert!(!s.project.join("x").try_exists().unwrap());

    // A ref that is not safe to pass to git.
    let out = bs(
        &s,
        &[
            "process-library:clone",
            "--repo",
            &bare_s,
            "--dir",
            "y",
            "--ref",
            "a..b",
            "--json",
        ],
        &[],
    )
    .fails();
    assert_eq!(
        out.json(),
        json!({"error": "clone_failed", "message": "Invalid process-library git ref: a..b"})
    );
    // Text form goes to stderr.
    let out = bs(&s, &["process-library:update", "--dir", "nope"], &[]).fails();
    assert_eq!(out.stdout, "");
    assert_eq!(
        out.stderr,
        format!(
            "[process-library:update] Process-library directory not found: {}\n",
            s.project.join("nope").display()
        )
    );
    let out = bs(&s, &["process-library:use", "--dir", "nope", "--json"], &[]).fails();
    assert_eq!(out.json()["error"], "bind_failed");

    // A damaged bindings file is named, not overwritten.
    let state = home_a5c(&s).join("active/process-library.json");
    std::fs::create_dir_all(state.parent().unwrap()).unwrap();
    std::fs::write(&state, "{not json").unwrap();
    std::fs::create_dir_all(s.project.join("here")).unwrap();
    let out = bs(&s, &["process-library:use", "--dir", "here", "--json"], &[]).fails();
    let v = out.json();
    assert_eq!(v["error"], "bind_failed");
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains(&state.display().to_string())
    );
    assert_eq!(std::fs::read_to_string(&state).unwrap(), "{not json");
    let out = bs(&s, &["process-library:active", "--json"], &[]).fails();
    assert_eq!(out.json()["error"], "active_failed");
}

#[test]
fn compat_process_library_use_and_active_bindings() {
    let s = Sandbox::new();
    let (src, bare) = library_remote(&s);
    let bare_s = bare.display().to_string();
    let head = git(&src, &["rev-parse", "HEAD"]);
    bs(
        &s,
        &["process-library:clone", "--repo", &bare_s, "--dir", "lib"],
        &[],
    )
    .ok();
    let lib = s.project.join("lib/library");
    let state = home_a5c(&s).join("active/process-library.json");

    // Default binding.
    let v = bs(
        &s,
        &["process-library:use", "--dir", "lib/library", "--json"],
        &[],
    )
    .ok()
    .json();
    assert_eq!(
        keys(&v),
        ["success", "stateFile", "bindingScope", "binding"]
    );
    assert_eq!(v["bindingScope"], "default");
    assert_eq!(v["stateFile"], state.display().to_string());
    assert_eq!(
        keys(&v["binding"]),
        ["dir", "repoUrl", "revision", "boundAt"]
    );
    assert_eq!(v["binding"]["dir"], lib.display().to_string());
    assert_eq!(v["binding"]["repoUrl"], bare_s);
    assert_eq!(v["binding"]["revision"], head);
    let file = read_json(&state);
    assert_eq!(
        keys(&file),
        [
            "version",
            "updatedAt",
            "runBindings",
            "sessionBindings",
            "defaultBinding"
        ]
    );
    assert_eq!(file["defaultBinding"], v["binding"]);

    // A run + session binding elsewhere.
    std::fs::create_dir_all(s.project.join("other")).unwrap();
    let other = s.project.join("other");
    let v = bs(
        &s,
        &[
            "process-library:use",
            "--dir",
            "other",
            "--run-id",
            "R1",
            "--session-id",
            "S1",
            "--ref",
            "main",
            "--json",
        ],
        &[],
    )
    .ok()
    .json();
    assert_eq!(v["bindingScope"], "run+session");
    assert_eq!(v["bindingKey"], "R1:S1");
    // Not a git checkout: no repoUrl / revision; the ref is recorded.
    assert_eq!(keys(&v["binding"]), ["dir", "ref", "boundAt"]);
    let out = bs(
        &s,
        &[
            "process-library:use",
            "--dir",
            "other",
            "--session-id",
            "S1",
        ],
        &[],
    )
    .ok();
    assert_eq!(
        out.stdout,
        format!(
            "Active process library updated.\n  Scope: session\n  Dir: {}\n  State: {}\n",
            other.display(),
            state.display()
        )
    );

    // Resolution: run, then session, then default; never bootstraps while the dir exists.
    let active = |extra: &[&str]| {
        let mut args = vec!["process-library:active", "--json"];
        args.extend_from_slice(extra);
        bs(&s, &args, &[]).ok().json()
    };
    let v = active(&["--run-id", "R1"]);
    assert_eq!(
        keys(&v),
        [
            "stateFile",
            "bindingScope",
            "bindingKey",
            "binding",
            "bootstrapped",
            "defaultSpec"
        ]
    );
    assert_eq!(
        (&v["bindingScope"], &v["bindingKey"], &v["binding"]["dir"]),
        (
            &json!("run"),
            &json!("R1"),
            &json!(other.display().to_string())
        )
    );
    assert_eq!(v["bootstrapped"], false);
    assert_eq!(
        keys(&v["defaultSpec"]),
        [
            "stateDir",
            "repo",
            "cloneDir",
            "processRoot",
            "referenceRoot"
        ]
    );
    let v = active(&["--run-id", "unknown", "--session-id", "S1"]);
    assert_eq!(
        (&v["bindingScope"], &v["bindingKey"]),
        (&json!("session"), &json!("S1"))
    );
    let v = active(&[]);
    assert_eq!(
        keys(&v),
        [
            "stateFile",
            "bindingScope",
            "binding",
            "bootstrapped",
            "defaultSpec"
        ]
    );
    assert_eq!(v["binding"]["dir"], lib.display().to_string());

    let out = bs(&s, &["process-library:active"], &[]).ok();
    assert_eq!(
        out.stdout,
        format!(
            "Active process library.\n  Scope: default\n  Dir: {}\n  Revision: {head}\n  State: {}\n",
            lib.display(),
            state.display()
        )
    );

    // --state-dir moves the bindings file.
    let st = s.tmp.path().join("st");
    let v = bs(
        &s,
        &[
            "process-library:use",
            "--dir",
            "other",
            "--state-dir",
            &st.display().to_string(),
            "--json",
        ],
        &[],
    )
    .ok()
    .json();
    assert_eq!(
        v["stateFile"],
        st.join("active/process-library.json").display().to_string()
    );
    assert!(st.join("active/process-library.json").is_file());
}

#[test]
fn compat_process_library_active_bootstraps_the_default_library() {
    let s = Sandbox::new();
    let (src, bare) = library_remote(&s);
    let bare_s = bare.display().to_string();
    let head = git(&src, &["rev-parse", "HEAD"]);
    let env = [("BABYSITTER_PROCESS_LIBRARY_REPO", bare_s.as_str())];

    // Nothing bound, no clone: clone the default library and bind its library/ dir.
    let v = bs(&s, &["process-library:active", "--json"], &env)
        .ok()
        .json();
    let clone_dir = home_a5c(&s).join("process-library/babysitter-repo");
    assert_eq!(v["bootstrapped"], true);
    assert_eq!(v["bindingScope"], "default");
    assert_eq!(
        v["binding"]["dir"],
        clone_dir.join("library").display().to_string()
    );
    assert_eq!(v["binding"]["revision"], head);
    assert_eq!(
        v["defaultSpec"],
        json!({
            "stateDir": home_a5c(&s).display().to_string(),
            "repo": bare_s,
            "cloneDir": clone_dir.display().to_string(),
            "processRoot": clone_dir.join("library").display().to_string(),
            "referenceRoot": clone_dir.join("plugins/babysitter/reference").display().to_string(),
        })
    );
    // Second call: the binding is used as it is.
    let again = bs(&s, &["process-library:active", "--json"], &env)
        .ok()
        .json();
    assert_eq!(again["bootstrapped"], false);
    assert_eq!(again["binding"], v["binding"]);

    // The bound directory gone: the existing clone is updated (pull) and bound again, here
    // for a run (the run's scope).
    let next = push_commit(&src, &bare, "second.js");
    let st = s.tmp.path().join("st2");
    std::fs::create_dir_all(st.join("active")).unwrap();
    std::fs::write(
        st.join("active/process-library.json"),
        serde_json::to_string(&json!({"version": 1, "updatedAt": "x", "defaultBinding": {"dir": "/nonexistent/lib", "boundAt": "x"}})).unwrap(),
    )
    .unwrap();
    let st_s = st.display().to_string();
    let v = bs(
        &s,
        &[
            "process-library:clone",
            "--repo",
            &bare_s,
            "--dir",
            &st.join("process-library/babysitter-repo")
                .display()
                .to_string(),
        ],
        &[],
    );
    v.ok();
    let next2 = push_commit(&src, &bare, "third.js");
    assert_ne!(next, next2);
    let v = bs(
        &s,
        &[
            "process-library:active",
            "--state-dir",
            &st_s,
            "--run-id",
            "R9",
            "--session-id",
            "S9",
            "--json",
        ],
        &env,
    )
    .ok()
    .json();
    assert_eq!(v["bootstrapped"], true);
    assert_eq!(v["bindingScope"], "run");
    assert_eq!(v["bindingKey"], "R9:S9");
    assert_eq!(v["binding"]["revision"], next2);
    let file = read_json(&st.join("active/process-library.json"));
    // Unknown order kept: the file's own keys first, new tables appended.
    assert_eq!(
        keys(&file),
        [
            "version",
            "updatedAt",
            "defaultBinding",
            "runBindings",
            "sessionBindings"
        ]
    );
    assert_eq!(file["defaultBinding"]["dir"], "/nonexistent/lib");
    assert_eq!(file["runBindings"]["R9"], v["binding"]);

    // No library and an unreachable default remote: active_failed, exit 1.
    let s2 = Sandbox::new();
    let missing = s2.tmp.path().join("gone.git").display().to_string();
    let out = bs(
        &s2,
        &["process-library:active", "--json"],
        &[("BABYSITTER_PROCESS_LIBRARY_REPO", &missing)],
    )
    .fails();
    let v: Value = out.json();
    assert_eq!(keys(&v), ["error", "message"]);
    assert_eq!(v["error"], "active_failed");
    let out = bs(
        &s2,
        &["process-library:active"],
        &[("BABYSITTER_PROCESS_LIBRARY_REPO", &missing)],
    )
    .fails();
    assert!(
        out.stderr
            .starts_with("[process-library:active] Command failed: git clone"),
        "{}",
        out.stderr
    );
}

const DONE: &str = "export async function process(inputs, ctx) { return { ok: true }; }\n";

#[test]
fn compat_instructions_suggested_processes_and_existing_run() {
    let s = Sandbox::with_demo();
    let instructions = |extra: &[(&str, &str)]| {
        s.cmd_env(
            &[
                "instructions:babysit-skill",
                "--harness",
                "claude-code",
                "--json",
            ],
            extra,
        )
        .ok()
        .json()
    };
    // Locally: the local-dev process; no runs yet.
    let v = instructions(&[]);
    assert_eq!(
        v["suggestedProcesses"],
        json!(["processes/shared/local-dev-workflow.js"])
    );
    assert_eq!(v["existingRun"], Value::Null);
    // In GitHub Actions on a scheduled trigger: the flags' processes in the reference's order.
    let v = instructions(&[
        ("GITHUB_ACTIONS", "true"),
        ("GITHUB_EVENT_NAME", "schedule"),
    ]);
    let suggested: Vec<&str> = v["suggestedProcesses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert_eq!(
        suggested.first(),
        Some(&"specializations/collaboration/github/pr-lifecycle-router.js")
    );
    assert!(suggested.contains(&"processes/shared/reporting/scheduled-report.js"));
    assert!(!suggested.contains(&"processes/shared/local-dev-workflow.js"));

    // A finished run is not reported; a waiting one of this project is.
    s.write("processes/done.mjs", DONE);
    let done = s.create("01B-done", "processes/done.mjs");
    assert_eq!(s.iterate(&done)["status"], "completed");
    assert_eq!(instructions(&[])["existingRun"], Value::Null);
    let live = s.create("01A-live", "processes/demo.mjs");
    s.iterate(&live);
    let v = instructions(&[]);
    assert_eq!(
        keys(&v["existingRun"]),
        ["runId", "runDir", "processId", "isBareRun", "entrypoint"]
    );
    assert_eq!(
        v["existingRun"],
        json!({
            "runId": "01A-live",
            "runDir": s.run_dir("01A-live").display().to_string(),
            "processId": "golden/demo",
            "isBareRun": false,
            // As `run:create` recorded it (no `exportName`: the default `process`).
            "entrypoint": read_json(&s.run_dir("01A-live").join("run.json"))["entrypoint"],
        })
    );

    // A newer live run of another project (its recorded cwd) is skipped.
    let other = s.create("01C-other", "processes/demo.mjs");
    let run_json = s.run_dir(&other).join("run.json");
    let mut meta = read_json(&run_json);
    meta["cwd"] = json!("/somewhere/else");
    std::fs::write(&run_json, serde_json::to_string_pretty(&meta).unwrap()).unwrap();
    assert_eq!(instructions(&[])["existingRun"]["runId"], "01A-live");
}

fn skill_md(name: &str, description: &str, category: &str) -> String {
    format!(
        "---\nname: {name}\ndescription: \"{description}\"\ncategory: {category}\n---\n\n# {name}\n"
    )
}

#[test]
fn compat_skill_discover_lists_library_plugin_and_project_skills() {
    let s = Sandbox::new();
    // The active library (bound for the user) with two specializations.
    let lib = s.tmp.path().join("lib");
    for (spec, skill) in [("web", "css-helper"), ("data", "sql-helper")] {
        let d = lib.join("specializations").join(spec);
        std::fs::create_dir_all(d.join("skills").join(skill)).unwrap();
        std::fs::write(
            d.join("skills").join(skill).join("SKILL.md"),
            skill_md(skill, &format!("{spec} things"), spec),
        )
        .unwrap();
        std::fs::write(
            d.join(format!("{spec}-flow.js")),
            "export async function process() {}\n",
        )
        .unwrap();
    }
    std::fs::create_dir_all(lib.join("specializations/web/agents/reviewer")).unwrap();
    std::fs::write(
        lib.join("specializations/web/agents/reviewer/AGENT.md"),
        "---\nname: reviewer\ndescription: reviews\nrole: critic\ndomain: web\n---\n",
    )
    .unwrap();
    std::fs::create_dir_all(lib.join("methodologies/tdd")).unwrap();
    std::fs::write(lib.join("methodologies/tdd/red-green.js"), "").unwrap();
    bs(
        &s,
        &["process-library:use", "--dir", &lib.display().to_string()],
        &[],
    )
    .ok();
    // The plugin's own skills and the project's.
    let plugin = s.tmp.path().join("plugin");
    std::fs::create_dir_all(plugin.join("skills/babysit")).unwrap();
    std::fs::write(
        plugin.join("skills/babysit/SKILL.md"),
        skill_md("babysit", "", ""),
    )
    .unwrap();
    s.write(
        ".a5c/skills/mine/SKILL.md",
        &skill_md("mine", "project skill", "web"),
    );
    s.write(
        ".a5c/skills/dup/SKILL.md",
        &skill_md("css-helper", "a second one", "web"),
    );
    s.write(".a5c/processes/local.js", "");
    s.write("no-name/SKILL.md", "---\ndescription: no name\n---\n");

    let plugin_s = plugin.display().to_string();
    let env = [("CLAUDE_PLUGIN_ROOT", plugin_s.as_str())];
    let v = bs(&s, &["skill:discover", "--json"], &env).ok().json();
    assert_eq!(
        keys(&v),
        ["skills", "agents", "processes", "summary", "cached"]
    );
    assert_eq!(v["cached"], false);
    let names = |k: &str| -> Vec<String> {
        v[k].as_array()
            .unwrap()
            .iter()
            .map(|x| x["name"].as_str().unwrap().to_owned())
            .collect()
    };
    // Library (name order of specializations), then plugin, then project; first of a name wins.
    assert_eq!(
        names("skills"),
        ["sql-helper", "css-helper", "babysit", "mine"]
    );
    assert_eq!(
        v["skills"][1],
        json!({"name": "css-helper", "description": "web things", "category": "web", "source": "local",
               "file": lib.join("specializations/web/skills/css-helper/SKILL.md").display().to_string()})
    );
    assert_eq!(v["skills"][2]["source"], "local-plugin");
    assert_eq!(
        keys(&v["agents"][0]),
        ["name", "description", "role", "category", "source", "file"]
    );
    assert_eq!(v["agents"][0]["category"], "web");
    assert_eq!(
        v["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| (
                p["name"].as_str().unwrap(),
                p["category"].as_str().unwrap(),
                p["source"].as_str().unwrap()
            ))
            .collect::<Vec<_>>(),
        [
            ("data-flow", "data", "library"),
            ("web-flow", "web", "library"),
            ("red-green", "tdd", "library"),
            ("local", "project", "repo")
        ]
    );
    assert_eq!(
        v["summary"],
        "sql-helper (data things), css-helper (web things), babysit (no description), mine (project skill), reviewer (reviews)"
    );

    // The second call within the TTL comes from the cache (no processes).
    let cached = bs(&s, &["skill:discover", "--json"], &env).ok().json();
    assert_eq!(cached["cached"], true);
    assert_eq!(keys(&cached), ["skills", "agents", "summary", "cached"]);
    assert_eq!(cached["skills"], v["skills"]);
    assert!(
        s.tmp
            .path()
            .join("tmp/babysitter-skill-cache/default.summary")
            .is_file()
    );
    let out = bs(&s, &["skill:discover", "--summary-only"], &env).ok();
    assert_eq!(out.stdout, format!("{}\n", v["summary"].as_str().unwrap()));

    // session:iteration-message --plugin-root: the summary as skillContext.
    let msg = |extra: &[&str]| {
        let mut args = vec!["session:iteration-message", "--iteration", "2", "--json"];
        args.extend_from_slice(extra);
        bs(&s, &args, &[]).ok().json()
    };
    assert_eq!(
        msg(&["--plugin-root", &plugin_s])["skillContext"],
        v["summary"]
    );
    assert_eq!(msg(&[])["skillContext"], Value::Null);
    let out = bs(
        &s,
        &[
            "session:iteration-message",
            "--iteration",
            "2",
            "--plugin-root",
            &plugin_s,
        ],
        &[],
    )
    .ok();
    assert!(
        out.stdout.contains(&format!(
            "skillContext={} systemMessage=",
            v["summary"].as_str().unwrap()
        )),
        "{}",
        out.stdout
    );

    // A process of a specialization: only that specialization's skills and processes.
    let v = bs(
        &s,
        &[
            "skill:discover",
            "--process-path",
            "specializations/web/web-flow.js",
            "--json",
        ],
        &env,
    )
    .ok()
    .json();
    assert_eq!(v["cached"], false);
    assert_eq!(v["skills"].as_array().unwrap().len(), 1);
    assert_eq!(v["skills"][0]["name"], "css-helper");
    assert_eq!(v["processes"].as_array().unwrap().len(), 1);

    // Text form.
    let out = bs(
        &s,
        &["skill:discover", "--cache-ttl", "1", "--run-id", "fresh"],
        &env,
    )
    .ok();
    assert!(
        out.stdout
            .starts_with("Skills (4):\n  - sql-helper: data things ["),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("\nAgents (1):\n  - reviewer: reviews [")
    );
    assert!(
        out.stdout
            .contains("\nProcesses (4):\n  - data-flow [data]: ")
    );

    // Bad input.
    let out = bs(&s, &["skill:discover", "--run-id", "../x", "--json"], &[]).fails();
    assert!(out.stderr.contains("INVALID_RUN_ID"), "{}", out.stderr);
    let out = bs(&s, &["skill:fetch-remote", "--json"], &[]).fails();
    assert_eq!(
        serde_json::from_str::<Value>(&out.stderr).unwrap(),
        json!({"error": "MISSING_SOURCE_TYPE", "message": "--source-type is required (github or well-known)"})
    );
    let out = bs(
        &s,
        &["skill:fetch-remote", "--source-type", "ftp", "--url", "x"],
        &[],
    )
    .fails();
    assert_eq!(
        out.stderr,
        "Error: --source-type must be github or well-known\n"
    );
    let out = bs(&s, &["skill:fetch-remote", "--source-type", "github"], &[]).fails();
    assert_eq!(out.stderr, "Error: --url is required\n");
    let out = bs(
        &s,
        &[
            "skill:fetch-remote",
            "--source-type",
            "github",
            "--url",
            "https://github.com/a/b",
            "--json",
        ],
        &[],
    )
    .fails();
    assert_eq!(
        serde_json::from_str::<Value>(&out.stderr).unwrap()["error"],
        "REMOTE_FETCH_UNAVAILABLE"
    );
}
