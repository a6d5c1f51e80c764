use super::*;

fn rule(id: &str, pattern: &str, action: &str) -> Map<String, Value> {
    json!({"id": id, "pattern": pattern, "action": action, "createdAt": "t", "createdBy": "cli"})
        .as_object()
        .cloned()
        .unwrap()
}

fn eval(id: &str, tags: &[&str], expert: Option<&str>, rules: &[Map<String, Value>]) -> Value {
    let tags: Vec<Value> = tags.iter().map(|t| json!(t)).collect();
    let facts = BreakpointFacts {
        id,
        tags: Some(&tags),
        expert,
        auto_approve_after_n: -1,
    };
    Value::Object(evaluate(&facts, rules).unwrap())
}

#[test]
fn globs_match_like_the_reference_regex() {
    for (glob, value, want) in [
        ("confirm.*", "confirm.deploy", true),
        ("confirm.*", "confirm.", true),
        ("confirm.*", "xconfirm.a", false),
        ("confirm.*", "confirmXa", false),
        ("a.b", "axb", false),
        ("*", "", true),
        ("*.review", "design.review", true),
        ("a*b*c", "aXbYc", true),
        ("a*b*c", "acb", false),
        ("ab*ba", "aba", false),
        ("gate", "gate", true),
    ] {
        assert_eq!(glob_matches(glob, value), want, "{glob} ~ {value}");
    }
}

#[test]
fn patterns_parse_predicates_and_refuse_malformed_ones() {
    let p = Pattern::parse(" deploy.*(tags contains 'prod' and expert = 'sre') ").unwrap();
    assert_eq!(p.glob, "deploy.*");
    assert_eq!(
        p.predicates,
        [
            Predicate::TagsContain("prod".into()),
            Predicate::ExpertIs("sre".into())
        ]
    );
    let tags = [json!("prod")];
    assert!(p.matches("deploy.web", Some(&tags), Some("sre")));
    assert!(!p.matches("deploy.web", Some(&tags), Some("dev")));
    assert!(!p.matches("deploy.web", None, Some("sre")));
    // Known shape, unknown attribute: parses, never matches.
    let p = Pattern::parse("x(owner = 'me')").unwrap();
    assert!(!p.matches("x", None, None));
    assert_eq!(Pattern::parse("x()").unwrap().predicates, []);
    for bad in [
        "x(tags contains prod)",
        "x(tags has 'a')",
        "x)(",
        "x(tags contains 'a'",
    ] {
        assert!(Pattern::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn precedence_follows_the_reference() {
    let none = eval("ship-gate", &[], None, &[]);
    assert_eq!(
        none,
        json!({"recommended": false, "reason": "No matching auto-approval rule", "consecutiveApprovals": 0})
    );
    let keys: Vec<&String> = none.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["recommended", "reason", "consecutiveApprovals"]);
    let rules = [
        rule(
            "r-never",
            "deploy.*(tags contains 'prod')",
            "never-auto-approve",
        ),
        rule("r-any", "deploy.*", "auto-approve"),
        rule("r-exec", "exec.tests", "auto-approve"),
    ];
    assert_eq!(
        eval("deploy.web", &["prod"], None, &rules)["matchedRule"],
        "r-never"
    );
    assert_eq!(
        eval("deploy.web", &["prod"], None, &rules)["recommended"],
        false
    );
    let ok = eval("deploy.web", &["staging"], None, &rules);
    assert_eq!(ok["recommended"], true);
    assert_eq!(ok["reason"], "Matched auto-approve rule: r-any");
    // Postures: destroy/auth never; exec only with an explicit rule; write as usual.
    let locked = eval("destroy.db", &[], None, &[rule("all", "*", "auto-approve")]);
    assert_eq!(
        locked,
        json!({"recommended": false,
               "reason": "Category 'destroy' requires explicit human approval (posture: locked)",
               "consecutiveApprovals": 0, "blockedByPosture": true, "effectiveCategory": "destroy"})
    );
    let guarded = eval("exec.deploy", &[], None, &rules);
    assert_eq!(guarded["blockedByPosture"], true);
    assert_eq!(eval("exec.tests", &[], None, &rules)["recommended"], true);
    assert_eq!(
        eval("exec.tests", &[], None, &rules)["effectiveCategory"],
        "execute"
    );
    // A bad pattern in the rules is an error naming the rule.
    let err = evaluate(
        &BreakpointFacts {
            id: "a",
            ..Default::default()
        },
        &[rule("r-bad", "a(", "auto-approve")],
    )
    .unwrap_err();
    assert!(err.to_string().contains("r-bad"), "{err}");
}

#[test]
fn auto_approval_only_for_breakpoints_with_an_id() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rules.json");
    update_rules(&path, |r| {
        r.push(rule("r1", "gate.*(expert = 'qa')", "auto-approve"));
        Ok(())
    })
    .unwrap();
    let def =
        json!({"kind": "breakpoint", "metadata": {"breakpointId": "gate.one", "expert": "qa"}});
    let got = auto_approval_for(&def, Some(&path)).unwrap().unwrap();
    assert_eq!(got["matchedRule"], "r1");
    // Without the rules: the default; without an id: nothing.
    let got = auto_approval_for(&def, None).unwrap().unwrap();
    assert_eq!(got["recommended"], false);
    assert!(
        auto_approval_for(&json!({"kind": "breakpoint", "metadata": {}}), Some(&path)).is_none()
    );
    // A rules file that is not JSON: an error naming it.
    std::fs::write(&path, "{oops").unwrap();
    let err = auto_approval_for(&def, Some(&path)).unwrap().unwrap_err();
    assert!(err.to_string().contains("rules.json"), "{err}");
}

#[test]
fn concurrent_edits_keep_every_rule() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a5c").join("rules.json");
    std::thread::scope(|s| {
        for i in 0..8 {
            let path = &path;
            s.spawn(move || {
                update_rules(path, |r| {
                    r.push(rule(&format!("r{i}"), "*", "auto-approve"));
                    Ok(())
                })
                .unwrap();
            });
        }
    });
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(
        text.starts_with(
            "{\n  \"schemaVersion\": \"2026.01.breakpoint-rules-v1\",\n  \"rules\": ["
        )
    );
    assert!(text.ends_with("}\n"));
    let mut ids: Vec<String> = read_rules(&path)
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    ids.sort();
    assert_eq!(ids, (0..8).map(|i| format!("r{i}")).collect::<Vec<_>>());
}
