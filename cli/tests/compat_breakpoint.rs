//! Black-box tests of breakpoint auto-approval (spec §4.5, §5.5): the `breakpoint:*` commands
//! over `~/.a5c/breakpoint-approvals/rules.json`, the `autoApproval` advice `run:iterate` puts in
//! a breakpoint's `task.json` and `nextActions` from those rules (locally and through the warm
//! server), `breakpoint:history`, and bad input refused with the rules file untouched.

mod compat_support;

use std::path::PathBuf;

use compat_support::{GOLDEN_RUN, Sandbox, copy_dir, fixture, keys};
use serde_json::{Value, json};

const GATE: &str = "export async function process(inputs, ctx) {\n  const a = await ctx.breakpoint({ question: 'Deploy?' }, { label: 'deploy.web', tags: ['prod'] });\n  return { a };\n}\n";

fn rules_file(s: &Sandbox) -> PathBuf {
    s.tmp
        .path()
        .join("home/.a5c/breakpoint-approvals/rules.json")
}

fn approve(s: &Sandbox, pattern: &str, extra: &[&str]) -> Value {
    let mut argv = vec!["breakpoint:approve-rule", pattern, "--json"];
    argv.extend_from_slice(extra);
    s.cmd(&argv).ok().json()
}

fn advice(s: &Sandbox, id: &str, extra: &[&str]) -> Value {
    let mut argv = vec!["breakpoint:should-auto-approve", id, "--json"];
    argv.extend_from_slice(extra);
    s.cmd(&argv).ok().json()
}

#[test]
fn compat_breakpoint_rules_lifecycle() {
    let s = Sandbox::new();
    assert_eq!(
        s.cmd(&["breakpoint:list-rules"]).ok().stdout,
        "No breakpoint approval rules configured.\n"
    );
    assert_eq!(
        s.cmd(&["breakpoint:list-rules", "--json"]).ok().json(),
        json!({"rules": [], "count": 0})
    );
    let never = approve(
        &s,
        "deploy.*(tags contains 'prod')",
        &[
            "--action",
            "never-auto-approve",
            "--note",
            "prod needs a human",
            "--source",
            "ops",
        ],
    );
    assert_eq!(keys(&never), ["success", "rule", "totalRules"]);
    assert_eq!(
        keys(&never["rule"]),
        [
            "id",
            "pattern",
            "action",
            "createdAt",
            "createdBy",
            "source",
            "note"
        ]
    );
    assert_eq!(never["rule"]["createdBy"], "ops");
    let never_id = never["rule"]["id"].as_str().unwrap().to_owned();
    assert!(
        never_id.starts_with("rule-") && never_id.len() == 13,
        "{never_id}"
    );
    let any = approve(&s, "deploy.*", &[]);
    assert_eq!(any["totalRules"], 2);
    assert_eq!(
        keys(&any["rule"]),
        ["id", "pattern", "action", "createdAt", "createdBy"]
    );
    let any_id = any["rule"]["id"].as_str().unwrap().to_owned();

    let file: Value = serde_json::from_slice(&std::fs::read(rules_file(&s)).unwrap()).unwrap();
    assert_eq!(file["schemaVersion"], "2026.01.breakpoint-rules-v1");
    assert_eq!(file["rules"][0], never["rule"]);
    assert_eq!(file["rules"][1], any["rule"]);
    let listed = s.cmd(&["breakpoint:list-rules"]).ok().stdout;
    assert!(listed.contains(&format!("  {never_id}  never-auto-approve    deploy.*(tags contains 'prod')  (prod needs a human)\n")), "{listed}");
    assert!(listed.ends_with("\n2 rule(s) total.\n"), "{listed}");

    // never-auto-approve wins where both match; otherwise the auto-approve rule.
    let blocked = advice(&s, "deploy.web", &["--tags", "prod, x"]);
    assert_eq!(blocked["recommended"], false);
    assert_eq!(blocked["matchedRule"], never_id.as_str());
    let ok = advice(&s, "deploy.web", &["--tags", "staging"]);
    assert_eq!(
        ok,
        json!({"recommended": true, "reason": format!("Matched auto-approve rule: {any_id}"),
               "matchedRule": any_id, "consecutiveApprovals": 0})
    );
    let text = s
        .cmd(&["breakpoint:should-auto-approve", "ship"])
        .ok()
        .stdout;
    assert_eq!(
        text,
        "Breakpoint: ship\nRecommended: prompt\nReason: No matching auto-approval rule\n"
    );
    // A locked category is never auto-approved, whatever the rules say.
    approve(&s, "*", &[]);
    let locked = advice(&s, "destroy.db", &[]);
    assert_eq!(locked["blockedByPosture"], true);
    assert_eq!(locked["effectiveCategory"], "destroy");

    let removed = s
        .cmd(&["breakpoint:remove-rule", &any_id, "--json"])
        .ok()
        .json();
    assert_eq!(
        removed,
        json!({"success": true, "ruleId": any_id, "totalRules": 2})
    );
    let again = s.cmd(&["breakpoint:remove-rule", &any_id]).ok().stdout;
    assert_eq!(again, format!("Rule {any_id} not found\n"));
}

#[test]
fn compat_breakpoint_bad_input_leaves_the_rules_alone() {
    let s = Sandbox::new();
    for (argv, msg) in [
        (
            vec!["breakpoint:approve-rule"],
            "requires a pattern argument",
        ),
        (
            vec!["breakpoint:approve-rule", "deploy.*(tags contains prod)"],
            "Invalid predicate",
        ),
        (
            vec!["breakpoint:approve-rule", "deploy.*("],
            "unmatched parenthesis",
        ),
        (
            vec!["breakpoint:approve-rule", "x", "--action", "never"],
            "--action must be",
        ),
        (
            vec!["breakpoint:remove-rule"],
            "requires a rule-id argument",
        ),
        (
            vec!["breakpoint:should-auto-approve"],
            "requires a breakpoint-id argument",
        ),
    ] {
        let out = s.cmd(&argv).fails();
        assert_eq!(out.code, 1, "{argv:?}");
        assert!(out.stderr.contains(msg), "{argv:?}: {}", out.stderr);
    }
    assert!(!rules_file(&s).try_exists().unwrap());
    // A rules file that is not JSON: commands say which file; nothing is rewritten.
    std::fs::create_dir_all(rules_file(&s).parent().unwrap()).unwrap();
    std::fs::write(rules_file(&s), "{not json").unwrap();
    for argv in [
        vec!["breakpoint:list-rules", "--json"],
        vec!["breakpoint:approve-rule", "x"],
        vec!["breakpoint:should-auto-approve", "x"],
    ] {
        let out = s.cmd(&argv).fails();
        assert!(
            out.stderr.contains("rules.json"),
            "{argv:?}: {}",
            out.stderr
        );
    }
    assert_eq!(
        std::fs::read_to_string(rules_file(&s)).unwrap(),
        "{not json"
    );
    // The run still stops at its breakpoint, without advice.
    s.write("processes/gate.mjs", GATE);
    s.write("inputs.json", "{}");
    let id = s.create("gate", "processes/gate.mjs#process");
    let it = s.iterate(&id);
    assert_eq!(it["status"], "waiting");
    assert!(
        it["nextActions"][0]["taskDef"]
            .get("autoApproval")
            .is_none()
    );
}

/// `run:iterate` advises from the rules: in `task.json` and in `nextActions`.
fn advised(s: &Sandbox, id: &str) -> (Value, Value) {
    let it = s.iterate(id);
    let action = &it["nextActions"][0];
    assert_eq!(action["kind"], "breakpoint");
    let effect = action["effectId"].as_str().unwrap();
    let task: Value = serde_json::from_slice(
        &std::fs::read(s.run_dir(id).join("tasks").join(effect).join("task.json")).unwrap(),
    )
    .unwrap();
    (
        action["taskDef"]["autoApproval"].clone(),
        task["autoApproval"].clone(),
    )
}

#[test]
fn compat_iterate_advises_breakpoints_from_the_rules() {
    for warm in [false, true] {
        let s = if warm {
            Sandbox::new().warm()
        } else {
            Sandbox::new()
        };
        s.write("processes/gate.mjs", GATE);
        s.write("inputs.json", "{}");
        let rule = approve(&s, "deploy.*", &[])["rule"]["id"].clone();
        let id = s.create("gate", "processes/gate.mjs#process");
        let (in_actions, in_task) = advised(&s, &id);
        let want = json!({"recommended": true, "reason": format!("Matched auto-approve rule: {}", rule.as_str().unwrap()),
                          "matchedRule": rule, "consecutiveApprovals": 0});
        assert_eq!(in_actions, want, "warm: {warm}");
        assert_eq!(
            keys(&in_actions),
            keys(&want),
            "nextActions keep the reference's order"
        );
        assert_eq!(in_task, want);
        // A never rule on the breakpoint's tag overrides; a new breakpoint sees it at once.
        approve(
            &s,
            "deploy.*(tags contains 'prod')",
            &["--action", "never-auto-approve"],
        );
        let id = s.create("gate-2", "processes/gate.mjs#process");
        let (advice, _) = advised(&s, &id);
        assert_eq!(advice["recommended"], false, "warm: {warm}");
        if warm {
            assert!(s.warm_served() >= 2);
        }
    }
}

#[test]
fn compat_breakpoint_history_lists_resolved_breakpoints() {
    let s = Sandbox::new();
    s.write("processes/gate.mjs", GATE);
    s.write("inputs.json", "{}");
    let id = s.create("gate", "processes/gate.mjs#process");
    let it = s.iterate(&id);
    let effect = it["nextActions"][0]["effectId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        s.cmd(&["breakpoint:history", "--json"]).ok().json(),
        json!({"entries": [], "count": 0})
    );
    s.post_inline(&id, &effect, r#"{"approved": true}"#).ok();
    let h = s.cmd(&["breakpoint:history", "--json"]).ok().json();
    assert_eq!(h["count"], 1);
    let e = &h["entries"][0];
    assert_eq!(
        keys(e),
        ["runId", "breakpointId", "effectId", "status", "resolvedAt"]
    );
    assert_eq!(e["runId"], id.as_str());
    assert_eq!(e["breakpointId"], "deploy.web");
    assert_eq!(e["effectId"], effect.as_str());
    assert_eq!(e["status"], "ok");
    let other = s
        .cmd(&["breakpoint:history", "--breakpoint-id", "other", "--json"])
        .ok()
        .json();
    assert_eq!(other["count"], 0);
    let text = s.cmd(&["breakpoint:history"]).ok().stdout;
    assert!(text.contains("  deploy.web  ok  run:gate\n"), "{text}");
    assert!(text.ends_with("\n1 entries.\n"), "{text}");
    // The reference's golden run (its EFFECT_RESOLVED names the breakpoint) is listed too.
    copy_dir(
        &fixture().join("runs").join(GOLDEN_RUN),
        &s.run_dir(GOLDEN_RUN),
    );
    let h = s
        .cmd(&[
            "breakpoint:history",
            "--breakpoint-id",
            "ship-gate",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(h["count"], 1, "{h}");
    assert_eq!(h["entries"][0]["runId"], GOLDEN_RUN);
    assert_eq!(h["entries"][0]["resolvedAt"], "2025-01-01T00:00:21.000Z");
    let all = s
        .cmd(&["breakpoint:history", "--limit", "1", "--json"])
        .ok()
        .json();
    assert_eq!(all["count"], 1, "--limit keeps the last ones");
}
