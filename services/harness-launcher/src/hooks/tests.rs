use super::*;

fn script(path: &Path, body: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, body).unwrap();
}

struct Place {
    _tmp: tempfile::TempDir,
    cwd: PathBuf,
    home: PathBuf,
}

fn place() -> Place {
    let tmp = tempfile::tempdir().unwrap();
    let cwd = tmp.path().join("project");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    Place {
        _tmp: tmp,
        cwd,
        home,
    }
}

fn hooks(p: &Place, timeout: Option<Duration>) -> Hooks {
    Hooks::new(p.cwd.clone(), Some(p.home.clone()), None, timeout)
}

#[tokio::test]
async fn no_hooks_run_nothing() {
    let p = place();
    let h = hooks(&p, None);
    assert!(!h.any_for("on-run-start"));
    let r = h.call("on-run-start", json!({"runId": "r"})).await;
    assert!(r.success && r.executed.is_empty());
    assert_eq!(r.status(), "no-hooks-configured");
    assert_eq!(
        r.to_json(),
        json!({"hookType": "on-run-start", "success": true, "executedHooks": []})
    );
}

#[tokio::test]
async fn per_repo_then_per_user_scripts_get_the_payload_in_name_order() {
    let p = place();
    let log = p.cwd.join("seen.log");
    let body = |tag: &str| format!("read -r line; echo \"{tag} $line\" >> {}\n", log.display());
    script(&p.cwd.join(".a5c/hooks/on-run-start/b.sh"), &body("repo-b"));
    script(&p.cwd.join(".a5c/hooks/on-run-start/a.sh"), &body("repo-a"));
    script(&p.cwd.join(".a5c/hooks/on-run-start/notes.txt"), "exit 1\n");
    script(
        &p.home.join(".a5c/hooks/on-run-start/user.sh"),
        &(body("user") + "exit 3\n"),
    );
    let h = hooks(&p, None);
    assert!(h.any_for("on-run-start"));
    let r = h.call("on-run-start", json!({"runId": "r1"})).await;
    let seen = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines.len(), 3, "{seen}");
    assert!(
        lines[0].starts_with("repo-a {")
            && lines[1].starts_with("repo-b {")
            && lines[2].starts_with("user {")
    );
    let payload: Value = serde_json::from_str(lines[0].strip_prefix("repo-a ").unwrap()).unwrap();
    assert_eq!(payload["runId"], "r1");
    assert_eq!(payload["hookType"], "on-run-start");
    assert!(payload["timestamp"].as_str().unwrap().ends_with('Z'));
    assert!(!r.success);
    assert_eq!(r.status(), "error");
    let names: Vec<(&str, &str, bool, Option<i32>)> = r
        .executed
        .iter()
        .map(|e| (e.name.as_str(), e.location.as_str(), e.success, e.exit_code))
        .collect();
    assert_eq!(
        names,
        [
            ("a.sh", "per-repo", true, Some(0)),
            ("b.sh", "per-repo", true, Some(0)),
            ("user.sh", "per-user", false, Some(3))
        ]
    );
}

#[tokio::test]
async fn a_dispatcher_up_the_tree_takes_over_and_its_output_decides() {
    let p = place();
    let nested = p.cwd.join("a/b");
    std::fs::create_dir_all(&nested).unwrap();
    script(
        &p.cwd.join("plugins/babysitter/hooks/hook-dispatcher.sh"),
        "cat > /dev/null\necho \"plugin:logger.sh:success\" >&2\necho \"per-user:deny.sh:failed:2\" >&2\necho \"noise\" >&2\necho \"{\\\"decision\\\": \\\"deny\\\", \\\"reason\\\": \\\"type $1\\\"}\"\n",
    );
    // A per-repo hook is not run when a dispatcher exists.
    script(&nested.join(".a5c/hooks/task.completed/x.sh"), "exit 9\n");
    let h = Hooks::new(nested, None, None, None);
    let r = h.call("task.completed", json!({"effectId": "e"})).await;
    assert!(r.success);
    assert_eq!(
        r.output,
        Some(json!({"decision": "deny", "reason": "type task.completed"}))
    );
    assert_eq!(
        r.blocked().as_deref(),
        Some("Runtime hook task.completed blocked execution: type task.completed")
    );
    assert_eq!(r.executed.len(), 2);
    assert_eq!(r.executed[1].exit_code, Some(2));
    assert_eq!(r.status(), "error");
}

#[tokio::test]
async fn a_plugin_root_hook_runs_after_the_others() {
    let p = place();
    let root = p.cwd.join("plugin-root");
    script(&root.join("hooks/on-iteration-end.sh"), "echo ran >&2\n");
    let h = Hooks::new(p.cwd.clone(), Some(p.home.clone()), Some(root), None);
    let r = h.call("on-iteration-end", json!({})).await;
    assert_eq!(r.executed.len(), 1);
    assert_eq!(r.executed[0].location, "plugin");
    assert_eq!(r.status(), "executed");
}

#[tokio::test(start_paused = true)]
async fn a_hook_past_its_timeout_is_killed_and_reported() {
    let p = place();
    script(
        &p.cwd.join(".a5c/hooks/on-run-start/slow.sh"),
        "sleep 600\n",
    );
    let h = hooks(&p, Some(Duration::from_millis(200)));
    let r = h.call("on-run-start", json!({})).await;
    assert!(!r.success);
    assert_eq!(r.executed[0].exit_code, None);
    assert!(!r.executed[0].success);
}

#[tokio::test]
async fn a_hook_type_that_is_not_a_name_runs_nothing() {
    let p = place();
    script(&p.cwd.join(".a5c/x.sh"), "touch pwned\n");
    let h = hooks(&p, None);
    for bad in ["../x", "", ".hidden", "a/b", "a b"] {
        let r = h.call(bad, json!({})).await;
        assert!(!r.success && r.executed.is_empty(), "{bad}");
        assert!(!h.any_for(bad));
    }
    assert!(!p.cwd.join("pwned").try_exists().unwrap());
}

#[test]
fn summary_lines_follow_the_reference_pattern() {
    let got = summary(
        "plugin:a.sh:success\nper-repo:b.sh:failed:7\nper-user:c:failed:x\nother:d:success\nper-repo::success\n",
    );
    assert_eq!(got.len(), 2);
    assert_eq!(
        (got[1].name.as_str(), got[1].exit_code, got[1].success),
        ("b.sh", Some(7), false)
    );
}

#[tokio::test]
async fn scripts_get_the_given_environment_instead_of_this_process() {
    let p = place();
    let seen = p.cwd.join("env.txt");
    script(
        &p.cwd.join(".a5c/hooks/on-run-start/env.sh"),
        &format!(
            "echo \"client=${{CLIENT_VAR:-unset}} home=${{HOME:-unset}}\" > {}\n",
            seen.display()
        ),
    );
    let path = std::env::var("PATH").unwrap_or_default();
    let h = hooks(&p, None).with_env([("CLIENT_VAR", "from-client"), ("PATH", path.as_str())]);
    let r = h.call("on-run-start", json!({"runId": "r"})).await;
    assert!(r.success, "{:?}", r.error);
    // Only what was given: this process's HOME is not passed on.
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap().trim(),
        "client=from-client home=unset"
    );
}
