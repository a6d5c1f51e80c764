//! The plugin bundles and their installs, through the real binary: `plugins/dist/` is exactly
//! what the source renders to (a changed source without regenerated bundles fails here), every
//! `babysitter <command>` any file under `plugins/` calls exists in this build, and an install
//! writes its bundle where the harness looks, records it, is a no-op the second time, refuses to
//! overwrite a file it did not write, and is undone exactly by `plugin:uninstall`.

mod compat_support;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};

use compat_support::*;
use serde_json::Value;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every file under `root`: relative path → (bytes, executable).
fn tree(root: &Path) -> BTreeMap<String, (Vec<u8>, bool)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (Vec<u8>, bool)>) {
        for e in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let e = e.unwrap_or_else(|e| panic!("{e}"));
            let p = e.path();
            let meta = e.metadata().unwrap_or_else(|e| panic!("{e}"));
            if meta.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p.strip_prefix(root).unwrap_or(&p).display().to_string();
                let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{e}"));
                out.insert(rel, (bytes, meta.permissions().mode() & 0o111 != 0));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn plugins_dist_is_what_the_source_renders() {
    let s = Sandbox::new();
    let out = s.tmp.path().join("dist");
    s.cmd(&[
        "plugin:generate",
        "--out",
        &out.display().to_string(),
        "--json",
    ])
    .ok();
    let fresh = tree(&out);
    let checked_in = tree(&repo().join("plugins/dist"));
    let fresh_names: BTreeSet<&String> = fresh.keys().collect();
    let checked_names: BTreeSet<&String> = checked_in.keys().collect();
    assert_eq!(
        fresh_names, checked_names,
        "plugins/dist has drifted from plugins/babysitter: run `babysitter plugin:generate --out plugins/dist`"
    );
    for (name, (bytes, exec)) in &fresh {
        let (theirs, their_exec) = &checked_in[name];
        assert!(
            bytes == theirs,
            "plugins/dist/{name} differs from what plugins/babysitter renders: run `babysitter plugin:generate --out plugins/dist`"
        );
        assert_eq!(exec, their_exec, "plugins/dist/{name}: executable bit");
    }
    assert!(fresh.len() > 60, "{} files", fresh.len());
}

/// `babysitter <noun>:<verb>` (and the shim's `"$bin" hooks:invoke`) in a text.
fn called_commands(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for marker in ["babysitter ", "\"$bin\" "] {
        let mut rest = text;
        while let Some(i) = rest.find(marker) {
            rest = &rest[i + marker.len()..];
            let word: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == ':')
                .collect();
            let command = word.contains(':') && !word.ends_with(':');
            if command || matches!(word.as_str(), "version" | "health") {
                out.insert(word);
            }
        }
    }
    out
}

#[test]
fn every_command_the_plugins_call_exists() {
    let mut commands = BTreeSet::new();
    for dir in ["plugins/babysitter", "plugins/dist"] {
        for (name, (bytes, _)) in tree(&repo().join(dir)) {
            let found = called_commands(&String::from_utf8_lossy(&bytes));
            commands.extend(found.into_iter().map(|c| (c, format!("{dir}/{name}"))));
        }
    }
    let names: BTreeSet<&str> = commands.iter().map(|(c, _)| c.as_str()).collect();
    // The loop's own commands must be among them, or the grep is broken.
    for must in [
        "run:create",
        "run:iterate",
        "task:post",
        "hooks:invoke",
        "harness:install-plugin",
    ] {
        assert!(names.contains(must), "{must} not found in {names:?}");
    }
    let s = Sandbox::new();
    for name in names {
        let out = s.cmd(&[name, "--help"]);
        let users: Vec<&str> = commands
            .iter()
            .filter(|(c, _)| c == name)
            .map(|(_, f)| f.as_str())
            .collect();
        assert_eq!(
            out.code, 0,
            "`babysitter {name}` is called by {users:?} but this build does not have it: {}",
            out.stderr
        );
    }
    // And the check can fail: a command this build lacks answers --help with an error.
    assert_eq!(s.cmd(&["nope:never", "--help"]).code, 1);
}

#[test]
fn file_installs_are_recorded_idempotent_refuse_foreign_files_and_uninstall_exactly() {
    // Gemini CLI loads extensions from the home directory only: its bundle goes there.
    for (harness, in_home, probe) in [
        ("pi", false, ".pi/extensions/babysitter/index.ts"),
        ("opencode", false, ".opencode/plugins/babysitter.js"),
        (
            "gemini-cli",
            true,
            ".gemini/extensions/babysitter/gemini-extension.json",
        ),
        ("cursor", false, ".cursor/hooks.json"),
    ] {
        let s = Sandbox::new();
        let base = if in_home {
            s.tmp.path().join("home")
        } else {
            s.project.clone()
        };
        // Something of the user's own in the same directory, which must survive.
        let own = base.join(format!(
            "{}/mine.txt",
            probe.split('/').next().unwrap_or(".x")
        ));
        std::fs::create_dir_all(own.parent().unwrap_or(&base)).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&own, "mine").unwrap_or_else(|e| panic!("{e}"));
        let first = s
            .cmd(&[
                "harness:install-plugin",
                harness,
                "--project",
                ".",
                "--json",
            ])
            .ok()
            .json();
        let written = first["written"].as_array().cloned().unwrap_or_default();
        assert!(written.len() >= 10, "{harness}: {first}");
        assert!(base.join(probe).is_file(), "{harness}: {probe} missing");
        // The shim is executable and knows which binary installed it.
        let shim = written
            .iter()
            .filter_map(Value::as_str)
            .find(|p| p.ends_with("babysitter-hook.sh"))
            .map(PathBuf::from)
            .unwrap_or_else(|| panic!("{harness}: no shim in {first}"));
        let mode = std::fs::metadata(&shim)
            .map(|m| m.permissions().mode())
            .unwrap_or(0);
        assert!(mode & 0o111 != 0, "{harness}: shim not executable");
        let bin =
            std::fs::read_to_string(shim.with_file_name("babysitter-bin")).unwrap_or_default();
        assert_eq!(bin.trim(), env!("CARGO_BIN_EXE_babysitter"), "{harness}");

        // Again: nothing to write.
        let second = s
            .cmd(&[
                "harness:install-plugin",
                harness,
                "--project",
                ".",
                "--json",
            ])
            .ok()
            .json();
        assert_eq!(
            second["written"],
            serde_json::json!([]),
            "{harness}: {second}"
        );
        assert_eq!(
            second["unchanged"].as_array().map(Vec::len),
            Some(written.len())
        );

        let listed = s.cmd(&["plugin:list-installed", "--json"]).ok().json();
        assert_eq!(listed["installed"][0]["harness"], harness, "{listed}");

        // Uninstall removes exactly what was written.
        let removed = s
            .cmd(&["plugin:uninstall", harness, "--project", ".", "--json"])
            .ok()
            .json();
        assert_eq!(
            removed["removed"].as_array().map(Vec::len),
            Some(written.len()),
            "{harness}"
        );
        for p in written.iter().filter_map(Value::as_str) {
            assert!(
                !Path::new(p).try_exists().unwrap_or(true),
                "{harness}: {p} left behind"
            );
        }
        assert_eq!(
            std::fs::read_to_string(&own).unwrap_or_default(),
            "mine",
            "{harness}"
        );
        assert!(s.project.is_dir());
        let listed = s.cmd(&["plugin:list-installed", "--json"]).ok().json();
        assert_eq!(listed["installed"], serde_json::json!([]), "{harness}");

        // A file in the way that the plugin did not write: nothing is written, the file named.
        let foreign = base.join(probe);
        std::fs::create_dir_all(foreign.parent().unwrap_or(&base))
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(&foreign, "someone else's").unwrap_or_else(|e| panic!("{e}"));
        let out = s
            .cmd(&[
                "harness:install-plugin",
                harness,
                "--project",
                ".",
                "--json",
            ])
            .fails();
        assert!(
            out.stderr.contains(&foreign.display().to_string()),
            "{harness}: {}",
            out.stderr
        );
        assert!(
            out.stderr.contains("was not written by this plugin"),
            "{}",
            out.stderr
        );
        assert_eq!(
            std::fs::read_to_string(&foreign).unwrap_or_default(),
            "someone else's"
        );
        let listed = s.cmd(&["plugin:list-installed", "--json"]).ok().json();
        assert_eq!(
            listed["installed"],
            serde_json::json!([]),
            "{harness}: {listed}"
        );
    }
}

#[test]
fn user_installs_go_under_home_and_bad_arguments_name_the_choices() {
    let s = Sandbox::new();
    let out = s
        .cmd(&["harness:install-plugin", "pi", "--user", "--json"])
        .ok()
        .json();
    let home = s.tmp.path().join("home");
    assert!(
        home.join(".pi/agent/extensions/babysitter/index.ts")
            .is_file(),
        "{out}"
    );
    assert_eq!(out["scope"], "user");
    let out = s.cmd(&["harness:install-plugin", "copilot"]).fails();
    assert!(
        out.stderr.contains("unknown harness \"copilot\""),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("claude-code, codex, gemini-cli"),
        "{}",
        out.stderr
    );
    let out = s.cmd(&["harness:install-plugin"]).fails();
    assert!(out.stderr.contains("needs a harness"), "{}", out.stderr);
    let out = s
        .cmd(&["harness:install-plugin", "pi", "--project", "no/such/dir"])
        .fails();
    assert!(out.stderr.contains("does not exist"), "{}", out.stderr);
    // Claude Code is enabled through its own CLI: without it, nothing is written.
    let out = s
        .cmd_env(
            &["harness:install-plugin", "claude-code", "--project", "."],
            &[("PATH", "/nonexistent")],
        )
        .fails();
    assert!(
        out.stderr.contains("`claude` is not on PATH"),
        "{}",
        out.stderr
    );
    assert!(
        !s.project
            .join(".a5c/plugins/claude-code")
            .try_exists()
            .unwrap_or(true)
    );
}

#[test]
fn discover_lists_every_harness() {
    let s = Sandbox::new();
    let v = s
        .cmd_env(&["harness:discover", "--json"], &[("PATH", "/nonexistent")])
        .ok()
        .json();
    let keys: Vec<&str> = v["harnesses"]
        .as_array()
        .map(|a| a.iter().filter_map(|h| h["harness"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        keys,
        [
            "claude-code",
            "codex",
            "gemini-cli",
            "cursor",
            "opencode",
            "pi"
        ]
    );
    assert!(
        v["harnesses"]
            .as_array()
            .is_some_and(|a| a.iter().all(|h| h["installed"] == false))
    );
}

#[test]
fn harness_install_plans_the_pinned_npm_install_and_reports_npm_failing() {
    let s = Sandbox::new();
    let v = s
        .cmd(&[
            "harness:install",
            "codex",
            "--prefix",
            "tools",
            "--dry-run",
            "--json",
        ])
        .ok()
        .json();
    let prefix = s.project.join("tools");
    assert_eq!(v["status"], "planned");
    assert_eq!(
        v["command"],
        format!(
            "npm install --prefix {} @openai/codex@0.171.0",
            prefix.display()
        )
    );
    assert_eq!(
        v["location"],
        prefix.join("node_modules/.bin/codex").display().to_string()
    );
    let v = s
        .cmd(&["harness:install", "claude-code", "--dry-run", "--json"])
        .ok()
        .json();
    assert_eq!(
        v["command"],
        "npm install -g @anthropic-ai/claude-code@2.1.197"
    );
    let out = s.cmd(&["harness:install", "cursor", "--dry-run"]).fails();
    assert!(
        out.stderr.contains("not distributed through npm"),
        "{}",
        out.stderr
    );

    // A real npm against a registry that refuses: exit 1 with npm's own words, nothing left.
    let npm = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("npm"))
        .find(|p| p.is_file());
    if npm.is_none() {
        skip::skip::<()>("needs npm on PATH (Node 20)");
        return;
    }
    let out = s.cmd_env(
        &["harness:install", "pi", "--prefix", "tools", "--json"],
        &[
            ("NPM_CONFIG_REGISTRY", "http://127.0.0.1:9/"),
            ("NPM_CONFIG_FETCH_RETRIES", "0"),
            (
                "NPM_CONFIG_CACHE",
                &s.tmp.path().join("npm-cache").display().to_string(),
            ),
            ("PATH", &std::env::var("PATH").unwrap_or_default()),
        ],
    );
    assert_eq!(out.code, 1, "{}", out.stdout);
    let v = out.json();
    assert_eq!(v["status"], "failed");
    assert_eq!(v["success"], false);
    assert!(
        v["output"]
            .as_str()
            .is_some_and(|o| o.contains("127.0.0.1:9")),
        "{v}"
    );
    assert!(!prefix.join("node_modules/.bin/pi").is_file());
}
