//! Black-box tests of the settings commands of the reference CLI: `compression:*` (the project
//! file `<cwd>/.a5c/compression.config.json` the hooks read).

mod compat_support;

use compat_support::{Sandbox, append_event, keys, read_json};
use serde_json::json;

#[test]
fn compat_compression_status_shows_the_resolved_settings() {
    let s = Sandbox::new();
    let file = s.project.join(".a5c/compression.config.json");
    let v = s.cmd(&["compression:status", "--json"]).ok().json();
    assert_eq!(keys(&v), ["masterEnabled", "configFile", "layers"]);
    assert_eq!(v["masterEnabled"], true);
    assert_eq!(v["configFile"], file.display().to_string());
    assert_eq!(
        v["layers"],
        json!([
            {"layer": "userPromptHook", "enabled": true, "engine": "density-filter", "keySettings": "threshold=500, keepRatio=0.78"},
            {"layer": "commandOutputHook", "enabled": true, "engine": "command-compressor", "keySettings": "excludeCommands=[node, python, ruby]"},
            {"layer": "sdkContextHook", "enabled": true, "engine": "sentence-extractor", "keySettings": "targetReduction=0.15, minTokens=150"},
            {"layer": "processLibraryCache", "enabled": true, "engine": "sentence-extractor", "keySettings": "targetReduction=0.35, ttlHours=24"},
        ])
    );

    // The user's file, then the project's, then the environment.
    let home = s.tmp.path().join("home/.a5c");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(
        home.join("compression.config.json"),
        r#"{"layers":{"userPromptHook":{"threshold":100},"sdkContextHook":{"enabled":false}}}"#,
    )
    .unwrap();
    s.write(
        ".a5c/compression.config.json",
        r#"{"layers":{"userPromptHook":{"keepRatio":0.5}}}"#,
    );
    let v = s
        .cmd_env(
            &["compression:status", "--json"],
            &[("BABYSITTER_COMPRESSION_LIBRARY_CACHE", "no")],
        )
        .ok()
        .json();
    assert_eq!(
        v["layers"][0]["keySettings"],
        "threshold=100, keepRatio=0.5"
    );
    assert_eq!(v["layers"][2]["enabled"], false);
    assert_eq!(v["layers"][3]["enabled"], false);
    // The master switch off turns every layer off.
    let v = s
        .cmd_env(
            &["compression:status", "--json"],
            &[("BABYSITTER_COMPRESSION_ENABLED", "0")],
        )
        .ok()
        .json();
    assert_eq!(v["masterEnabled"], false);
    assert!(
        v["layers"]
            .as_array()
            .unwrap()
            .iter()
            .all(|l| l["enabled"] == false)
    );

    // The table.
    let out = s.cmd(&["compression:status"]).ok();
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines[0], "");
    assert_eq!(lines[1], "Compression master switch: ENABLED");
    assert_eq!(
        lines[3],
        format!(
            "{:<22}  {:<9}  {:<22}  Key settings",
            "Layer", "Enabled", "Engine"
        )
    );
    assert_eq!(
        lines[5],
        format!(
            "{:<22}  {:<9}  {:<22}  threshold=100, keepRatio=0.5",
            "userPromptHook", "true", "density-filter"
        )
    );
    assert_eq!(lines.len(), 10);
}

#[test]
fn compat_compression_toggle_set_reset_edit_the_project_file() {
    let s = Sandbox::new();
    let file = s.project.join(".a5c/compression.config.json");
    let f = file.display().to_string();

    let out = s
        .cmd(&["compression:toggle", "sdkContextHook", "OFF", "--json"])
        .ok();
    assert_eq!(
        out.stdout,
        format!("{{\"layer\":\"sdkContextHook\",\"enabled\":false,\"configFile\":\"{f}\"}}\n")
    );
    assert_eq!(
        read_json(&file),
        json!({"layers": {"sdkContextHook": {"enabled": false}}})
    );
    let out = s.cmd(&["compression:toggle", "userPromptHook", "on"]).ok();
    assert_eq!(
        out.stdout,
        format!("Compression layer \"userPromptHook\" enabled.\nConfig written to: {f}\n")
    );

    let v = s
        .cmd(&[
            "compression:set",
            "userPromptHook.threshold",
            "300",
            "--json",
        ])
        .ok()
        .json();
    assert_eq!(
        v,
        json!({"key": "userPromptHook.threshold", "value": 300, "configFile": f})
    );
    s.cmd(&[
        "compression:set",
        "commandOutputHook.excludeCommands",
        " node, ,go ",
    ])
    .ok();
    let out = s.cmd(&["compression:set", "enabled", "no"]).ok();
    assert_eq!(
        out.stdout,
        format!("Set enabled = false\nConfig written to: {f}\n")
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.ends_with("}\n"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&text).unwrap(),
        json!({
            "layers": {
                "sdkContextHook": {"enabled": false},
                "userPromptHook": {"enabled": true, "threshold": 300},
                "commandOutputHook": {"excludeCommands": ["node", "go"]},
            },
            "enabled": false,
        })
    );
    // The hooks' view follows (status reads the same resolution).
    let v = s.cmd(&["compression:status", "--json"]).ok().json();
    assert_eq!(v["masterEnabled"], false);
    assert_eq!(v["layers"][1]["keySettings"], "excludeCommands=[node, go]");

    // Refusals: stderr, exit 1, the file untouched.
    let before = std::fs::read_to_string(&file).unwrap();
    let out = s
        .cmd(&["compression:set", "userPromptHook.bogus", "1", "--json"])
        .fails();
    assert_eq!(out.stdout, "");
    let err: serde_json::Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert!(err["error"].as_str().unwrap().starts_with(
        "Unknown key: \"userPromptHook.bogus\". Valid keys: enabled, userPromptHook.threshold"
    ));
    let out = s
        .cmd(&["compression:set", "userPromptHook.keepRatio", "lots"])
        .fails();
    assert_eq!(
        out.stderr,
        "Error: \"userPromptHook.keepRatio\" expects a number, got: lots\n"
    );
    let out = s.cmd(&["compression:set", "enabled", "maybe"]).fails();
    assert_eq!(
        out.stderr,
        "Error: \"enabled\" expects true/false, got: maybe\n"
    );
    let out = s.cmd(&["compression:toggle", "nope", "on"]).fails();
    assert_eq!(
        out.stderr,
        "Error: Unknown layer: \"nope\". Valid layers: userPromptHook, commandOutputHook, sdkContextHook, processLibraryCache\n"
    );
    let out = s
        .cmd(&["compression:toggle", "userPromptHook", "maybe", "--json"])
        .fails();
    assert!(
        out.stderr.contains(
            "compression:toggle value must be \\\"on\\\" or \\\"off\\\" (received: maybe)"
        ),
        "{}",
        out.stderr
    );
    let out = s.cmd(&["compression:toggle", "userPromptHook"]).fails();
    assert!(
        out.stderr
            .starts_with("compression:toggle requires <on|off> as the second argument\nUsage:")
    );
    let out = s.cmd(&["compression:set", "enabled"]).fails();
    assert!(
        out.stderr
            .starts_with("compression:set requires <layer.key> and <value> arguments\n")
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), before);

    // A damaged file is named and kept, not replaced.
    std::fs::write(&file, "{oops").unwrap();
    let out = s
        .cmd(&["compression:toggle", "userPromptHook", "off"])
        .fails();
    assert!(
        out.stderr.contains(&f) && out.stderr.contains("not valid JSON"),
        "{}",
        out.stderr
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "{oops");

    // Reset removes it; a second reset has nothing to do.
    let v = s.cmd(&["compression:reset", "--json"]).ok();
    assert_eq!(
        v.stdout,
        format!("{{\"removed\":true,\"configFile\":\"{f}\"}}\n")
    );
    assert!(!file.try_exists().unwrap());
    let out = s.cmd(&["compression:reset"]).ok();
    assert_eq!(
        out.stdout,
        format!(
            "No project config file found at: {f}\nNothing to reset — already using defaults.\n"
        )
    );
}

/// Appends a 6.0.0 event to a run's journal (next sequence, checksum as the spec's §2.2).
fn compression_event(
    layer: serde_json::Value,
    original: u64,
    compressed: u64,
) -> serde_json::Value {
    json!({"runId": "x", "layer": layer, "tool": "rtk", "contentType": "bash_output",
           "originalTokens": original, "compressedTokens": compressed,
           "tokensSaved": original - compressed, "reductionPct": 0})
}

#[test]
fn compat_tokens_stats_sums_compression_events() {
    let s = Sandbox::with_demo();
    let a = s.create("run-a", "processes/demo.mjs");
    let b = s.create("run-b", "processes/demo.mjs");
    s.create("run-c", "processes/demo.mjs");
    let ra = s.run_dir(&a);
    append_event(
        &ra,
        "COMPRESSION_APPLIED",
        "2026-01-02T03:04:05.000Z",
        compression_event(json!("1b"), 1000, 600),
    );
    append_event(
        &ra,
        "COST_TRACKED",
        "2026-01-02T03:04:06.000Z",
        json!({"model": "m", "inputTokens": 5}),
    );
    append_event(
        &ra,
        "COMPRESSION_APPLIED",
        "2026-01-02T03:04:07.000Z",
        compression_event(json!("1a"), 2000, 1000),
    );
    append_event(
        &ra,
        "COMPRESSION_APPLIED",
        "2026-01-02T03:04:08.000Z",
        compression_event(json!("1b"), 500, 500),
    );
    append_event(
        &s.run_dir(&b),
        "COMPRESSION_APPLIED",
        "2026-02-01T00:00:00.000Z",
        compression_event(json!(null), 100, 90),
    );

    let v = s.cmd(&["tokens:stats", &a, "--json"]).ok().json();
    assert_eq!(
        keys(&v),
        [
            "runId",
            "date",
            "eventCount",
            "originalTokens",
            "compressedTokens",
            "tokensSaved",
            "reductionPct",
            "byLayer"
        ]
    );
    assert_eq!(v["runId"], "run-a");
    assert_eq!(v["date"], "2026-01-02T03:04:05.000Z");
    assert_eq!(
        (
            v["eventCount"].as_u64(),
            v["originalTokens"].as_f64(),
            v["compressedTokens"].as_f64()
        ),
        (Some(3), Some(3500.0), Some(2100.0))
    );
    assert_eq!(v["tokensSaved"].as_f64(), Some(1400.0));
    assert_eq!(v["reductionPct"].as_f64(), Some(40.0));
    assert_eq!(
        v["byLayer"],
        json!({
            "1b": {"eventCount": 2, "originalTokens": 1500, "compressedTokens": 1100, "tokensSaved": 400},
            "1a": {"eventCount": 1, "originalTokens": 2000, "compressedTokens": 1000, "tokensSaved": 1000},
        })
    );
    // Node's integers: no `.0`.
    let out = s.cmd(&["tokens:stats", &a, "--json"]).ok();
    assert!(
        out.stdout.contains("\"originalTokens\": 3500,"),
        "{}",
        out.stdout
    );

    // The table (no terminal: no colours).
    let out = s.cmd(&["tokens:stats", &a]).ok();
    assert!(
        out.stdout.contains("  Original tokens:   3,500\n"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("  Reduction:         40.0%\n"));
    assert!(out.stdout.contains(&format!(
        "  {:<8}  {:>8}  {:>12}  {:>12}  {:>12}  {:>10}\n",
        "Layer 1a", "1", "2,000", "1,000", "1,000", "50.0%"
    )));
    assert!(!out.stdout.contains('\x1b'));
    let out = s
        .cmd_env(&["tokens:stats", &a], &[("FORCE_COLOR", "1")])
        .ok();
    assert!(out.stdout.contains("\x1b[1mRun: run-a\x1b[0m"));
    let out = s.cmd(&["tokens:stats", "run-c"]).ok();
    assert!(
        out.stdout
            .contains("  No COMPRESSION_APPLIED events found in this run.\n")
    );

    // --all: runs with events only, in name order; totals.
    let v = s.cmd(&["tokens:stats", "--all", "--json"]).ok().json();
    assert_eq!(
        keys(&v),
        [
            "totalRuns",
            "totalEvents",
            "totalOriginalTokens",
            "totalCompressedTokens",
            "totalTokensSaved",
            "overallReductionPct",
            "runs"
        ]
    );
    assert_eq!(v["totalRuns"], 2);
    assert_eq!(v["totalEvents"], 4);
    assert_eq!(v["totalOriginalTokens"].as_f64(), Some(3600.0));
    assert_eq!(v["runs"][1]["runId"], "run-b");
    assert_eq!(
        v["runs"][1]["byLayer"],
        json!({"unknown": {"eventCount": 1, "originalTokens": 100, "compressedTokens": 90, "tokensSaved": 10}})
    );
    let out = s.cmd(&["tokens:stats", "--all"]).ok();
    let a_at = out.stdout.find("  run-a ").unwrap();
    let b_at = out.stdout.find("  run-b ").unwrap();
    assert!(a_at < b_at, "most saved first");
    assert!(out.stdout.contains("  Total runs with compression: 2\n"));

    // Errors: an unknown run, no arguments, a damaged journal.
    let out = s.cmd(&["tokens:stats", "nope", "--json"]).fails();
    let err: serde_json::Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert!(
        err["error"]
            .as_str()
            .unwrap()
            .starts_with("Run not found: nope (looked in ")
    );
    let out = s.cmd(&["tokens:stats"]).fails();
    assert!(out.stderr.starts_with(
        "Usage: babysitter tokens:stats [runId] [--all] [--json] [--runs-dir <dir>]\n"
    ));
    let first = std::fs::read_dir(s.run_dir(&b).join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .min()
        .unwrap();
    let text = std::fs::read_to_string(&first)
        .unwrap()
        .replace("golden", "GOLDEN");
    std::fs::write(&first, text).unwrap();
    let out = s.cmd(&["tokens:stats", &b]).fails();
    assert!(
        out.stderr.starts_with("cannot read run run-b: "),
        "{}",
        out.stderr
    );
    let v = s.cmd(&["tokens:stats", "--all", "--json"]).ok();
    assert!(
        v.stderr.contains("[tokens:stats] skipping "),
        "{}",
        v.stderr
    );
    assert_eq!(v.json()["totalRuns"], 1);
}

#[test]
fn compat_profile_write_read_merge_render() {
    let s = Sandbox::new();
    let home_a5c = s.tmp.path().join("home/.a5c");
    s.write(
        "user.json",
        &json!({
            "name": "Ada", "specialties": [{"domain": "web"}], "expertiseLevels": {},
            "goals": [], "preferences": {"verbosity": "terse"}, "toolPreferences": {},
            "breakpointTolerance": {"global": "low"}, "communicationStyle": {"tone": "casual"},
            "experience": {}, "createdAt": "C", "updatedAt": "U", "version": 1,
        })
        .to_string(),
    );
    s.write(
        "more.json",
        &json!({"specialties": [{"domain": "web", "yearsActive": 2}, {"domain": "ml"}], "installedSkills": ["a"]}).to_string(),
    );

    // Nothing yet.
    let out = s.cmd(&["profile:read", "--user", "--json"]).fails();
    assert_eq!(
        out.json(),
        json!({"error": "no_profile", "profileDir": home_a5c.display().to_string()})
    );
    let out = s.cmd(&["profile:render", "--user"]).fails();
    assert_eq!(
        out.stderr,
        format!(
            "[profile:render] No user profile found at {}\n",
            home_a5c.display()
        )
    );
    let out = s
        .cmd(&["profile:merge", "--user", "--input", "more.json"])
        .fails();
    assert_eq!(
        out.stderr,
        format!(
            "[profile:merge] No existing user profile to merge into at {}\n",
            home_a5c.display()
        )
    );

    // Write: the JSON file and its markdown.
    let out = s
        .cmd(&["profile:write", "--user", "--input", "user.json", "--json"])
        .ok();
    assert_eq!(
        out.stdout,
        format!(
            "{{\"status\":\"ok\",\"profileDir\":\"{}\",\"type\":\"user\"}}\n",
            home_a5c.display()
        )
    );
    let stored = read_json(&home_a5c.join("user-profile.json"));
    assert_eq!(stored["name"], "Ada");
    let md = std::fs::read_to_string(home_a5c.join("user-profile.md")).unwrap();
    assert!(
        md.starts_with(
            "# User Profile: Ada\n\n> Last updated: U | Version: 1\n\n## Specialties\n\n- **web**\n"
        ),
        "{md}"
    );

    // Read: JSON as stored; text = the markdown.
    assert_eq!(
        s.cmd(&["profile:read", "--user", "--json"]).ok().json(),
        stored
    );
    assert_eq!(
        s.cmd(&["profile:read", "--user"]).ok().stdout,
        format!("{md}\n")
    );
    let v = s.cmd(&["profile:render", "--user", "--json"]).ok().json();
    assert_eq!(v, json!({"markdown": md, "type": "user"}));

    // Merge: by the reference's rules, version + 1.
    let v = s
        .cmd(&["profile:merge", "--user", "--input", "more.json", "--json"])
        .ok()
        .json();
    assert_eq!(v, json!({"status": "ok", "type": "user", "version": 2}));
    let merged = read_json(&home_a5c.join("user-profile.json"));
    assert_eq!(
        merged["specialties"],
        json!([{"domain": "web", "yearsActive": 2}, {"domain": "ml"}])
    );
    assert_eq!(merged["installedSkills"], json!(["a"]));
    assert_ne!(merged["updatedAt"], "U");
    let md = std::fs::read_to_string(home_a5c.join("user-profile.md")).unwrap();
    assert!(md.contains("- **web** - 2 years\n- **ml**\n"), "{md}");
    let out = s
        .cmd(&["profile:merge", "--user", "--input", "more.json"])
        .ok();
    assert_eq!(
        out.stdout,
        "[profile:merge] User profile merged (version 3)\n"
    );

    // Project profile under --dir (a project root): <dir>/.a5c/project-profile.json.
    s.write("p.json", &json!({"projectName": "P", "goals": [], "techStack": {}, "architecture": {}, "workflows": [], "tools": {}, "conventions": {}, "version": 1}).to_string());
    let out = s
        .cmd(&[
            "profile:write",
            "--project",
            "--input",
            "p.json",
            "--dir",
            "sub",
        ])
        .ok();
    assert_eq!(
        out.stdout,
        "[profile:write] Project profile written to sub\n"
    );
    assert!(s.project.join("sub/.a5c/project-profile.json").is_file());
    assert!(s.project.join("sub/.a5c/project-profile.md").is_file());
    let out = s.cmd(&["profile:render", "--project", "--dir", "sub"]).ok();
    assert_eq!(
        out.stdout,
        "# Project Profile: P\n\n> Last updated: undefined | Version: 1\n\n"
    );

    // Errors name what was wrong.
    let out = s.cmd(&["profile:read", "--json"]).fails();
    assert_eq!(out.stderr, "[profile:read] Specify --user or --project\n");
    let out = s.cmd(&["profile:write", "--user"]).fails();
    assert_eq!(out.stderr, "[profile:write] --input <file> is required\n");
    let out = s
        .cmd(&["profile:write", "--user", "--input", "missing.json"])
        .fails();
    assert!(
        out.stderr.starts_with(
            "[profile:write] Failed to read input file: ENOENT: no such file or directory"
        ),
        "{}",
        out.stderr
    );
    s.write("list.json", "[1,2]");
    let out = s
        .cmd(&["profile:merge", "--user", "--input", "list.json"])
        .fails();
    assert!(
        out.stderr.contains("does not hold a JSON object"),
        "{}",
        out.stderr
    );
    // A damaged profile is named, and left as it is.
    std::fs::write(home_a5c.join("user-profile.json"), "{broken").unwrap();
    let out = s
        .cmd(&["profile:merge", "--user", "--input", "more.json"])
        .fails();
    assert!(
        out.stderr.contains("user-profile.json is not valid JSON"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_to_string(home_a5c.join("user-profile.json")).unwrap(),
        "{broken"
    );
}

#[test]
fn compat_configure_show_validate_paths() {
    let s = Sandbox::new();
    let v = s.cmd(&["configure", "--json"]).ok().json();
    assert_eq!(keys(&v), ["values", "timestamp"]);
    let values = v["values"].as_array().unwrap();
    let keys_in_order: Vec<&str> = values.iter().map(|x| x["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys_in_order,
        [
            "runsDir",
            "maxIterations",
            "qualityThreshold",
            "timeout",
            "logLevel",
            "allowSecretLogs",
            "hookTimeout",
            "nodeTaskTimeout",
            "clockStepMs",
            "clockStartMs",
            "layoutVersion",
            "largeResultPreviewLimit"
        ]
    );
    assert_eq!(
        values[1],
        json!({"key": "maxIterations", "value": 65000, "source": "default", "envVar": "BABYSITTER_MAX_ITERATIONS",
               "docLink": "https://docs.a5c.ai/sdk/config#max-iterations", "description": "Maximum iterations before run terminates"})
    );
    // Repo scope in the sandbox: the project's runs directory.
    assert_eq!(values[0]["value"], s.runs().display().to_string());
    assert_eq!(
        keys(&values[8]),
        ["key", "value", "source", "docLink", "description"]
    );

    // Variables that parse override; one that does not still counts as set (as the reference).
    let v = s
        .cmd_env(
            &["configure", "show", "--json"],
            &[
                ("BABYSITTER_TIMEOUT", "5000ms"),
                ("BABYSITTER_LOG_LEVEL", "LOUD"),
                ("BABYSITTER_ALLOW_SECRET_LOGS", "TRUE"),
            ],
        )
        .ok()
        .json();
    assert_eq!(
        (&v["values"][3]["value"], &v["values"][3]["source"]),
        (&json!(5000), &json!("env"))
    );
    assert_eq!(
        (&v["values"][4]["value"], &v["values"][4]["source"]),
        (&json!("info"), &json!("env"))
    );
    assert_eq!(v["values"][5]["value"], true);
    let v = s
        .cmd_env(
            &["configure", "--defaults-only", "--json"],
            &[("BABYSITTER_TIMEOUT", "5000")],
        )
        .ok()
        .json();
    assert_eq!(
        (&v["values"][3]["value"], &v["values"][3]["source"]),
        (&json!(120000), &json!("default"))
    );
    let out = s
        .cmd_env(&["configure"], &[("BABYSITTER_MAX_ITERATIONS", "12")])
        .ok();
    assert!(
        out.stdout.contains("  maxIterations            12 "),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("Environment Overrides:\n  BABYSITTER_MAX_ITERATIONS = 12\n")
    );
    assert!(out.stdout.contains("  timeout                  120,000 "));

    // validate: warnings keep exit 0, an error exits 1.
    let v = s.cmd(&["configure", "validate", "--json"]).ok().json();
    assert_eq!(v["valid"], true);
    assert_eq!(
        v["warnings"],
        json!(["maxIterations is unusually high (>10000), this may cause performance issues"])
    );
    let out = s
        .cmd_env(
            &["configure", "validate", "--json"],
            &[("BABYSITTER_QUALITY_THRESHOLD", "150")],
        )
        .fails();
    assert_eq!(
        out.json()["errors"],
        json!(["qualityThreshold must be a number between 0 and 100"])
    );
    let out = s
        .cmd_env(
            &["configure", "validate"],
            &[("BABYSITTER_MAX_ITERATIONS", "10")],
        )
        .ok();
    assert_eq!(
        out.stdout,
        "\n[PASS] Configuration is valid\n\nAll configuration values are within valid ranges.\n\n"
    );

    // paths.
    std::fs::create_dir_all(s.project.join(".a5c/processes")).unwrap();
    let v = s.cmd(&["configure", "paths", "--json"]).ok().json();
    let p = &v["paths"];
    assert_eq!(
        p[1],
        json!({"name": "a5cDir", "path": s.project.join(".a5c").display().to_string(), "exists": true, "description": "Root directory for babysitter data"})
    );
    assert_eq!(p[2]["exists"], false);
    assert_eq!(p[3]["exists"], true);

    // An unknown subcommand.
    let out = s.cmd(&["configure", "bogus", "--json"]).fails();
    assert_eq!(out.json(), json!({"error": "Unknown subcommand: bogus"}));
    let out = s.cmd(&["configure", "bogus"]).fails();
    assert!(
        out.stderr
            .starts_with("Error: Unknown subcommand: bogus\n\nAvailable subcommands:\n")
    );
}

/// The settings commands beside the reference CLI (0.0.187, where it has them) in the same
/// sandbox: the same JSON for the same files. Skips, saying so, without the reference.
#[test]
fn compat_settings_match_the_reference() {
    let Some(reference) = compat_support::reference_cli() else {
        return; // skipped: reference_cli() recorded why
    };
    let s = Sandbox::new();
    let both = |args: &[&str]| {
        let ours = s.cmd(args);
        let theirs = s.cmd_ref(&reference, args);
        assert_eq!(
            ours.code, theirs.code,
            "{args:?}\nours: {ours:?}\ntheirs: {theirs:?}"
        );
        (ours, theirs)
    };
    // Same answers, byte for byte.
    for args in [
        &["compression:status", "--json"][..],
        &["profile:read", "--user", "--json"],
        &["profile:read", "--project", "--json"],
        &["tokens:stats", "--all", "--json"],
    ] {
        let (ours, theirs) = both(args);
        assert_eq!(ours.stdout, theirs.stdout, "{args:?}");
    }
    // Edits: same answer and the same file.
    let file = s.project.join(".a5c/compression.config.json");
    for args in [
        &[
            "compression:set",
            "userPromptHook.threshold",
            "300",
            "--json",
        ][..],
        &["compression:toggle", "sdkContextHook", "off", "--json"],
        &[
            "compression:set",
            "commandOutputHook.excludeCommands",
            "go,rust",
            "--json",
        ],
    ] {
        let before = std::fs::read_to_string(&file).ok();
        let ours = s.cmd(args).ok();
        let written = std::fs::read_to_string(&file).unwrap();
        match &before {
            Some(text) => std::fs::write(&file, text).unwrap(),
            None => std::fs::remove_file(&file).unwrap(),
        }
        let theirs = s.cmd_ref(&reference, args).ok();
        assert_eq!(ours.stdout, theirs.stdout, "{args:?}");
        assert_eq!(written, std::fs::read_to_string(&file).unwrap(), "{args:?}");
    }
    let (ours, theirs) = both(&["compression:toggle", "nope", "on", "--json"]);
    assert_eq!(ours.stderr, theirs.stderr);
    // Profiles: what one writes the other reads.
    s.write("p.json", &json!({"name": "Ada", "specialties": [], "expertiseLevels": {}, "goals": [], "preferences": {}, "toolPreferences": {}, "breakpointTolerance": {"global": "low"}, "communicationStyle": {}, "experience": {}, "updatedAt": "U", "version": 1}).to_string());
    s.cmd_ref(
        &reference,
        &["profile:write", "--user", "--input", "p.json"],
    )
    .ok();
    let (ours, theirs) = both(&["profile:render", "--user", "--json"]);
    assert_eq!(ours.stdout, theirs.stdout);
    s.write(
        "m.json",
        &json!({"specialties": [{"domain": "web"}]}).to_string(),
    );
    let (ours, theirs) = both(&["profile:merge", "--user", "--input", "m.json", "--json"]);
    // Ours merged first (1 → 2), then the reference merged into ours (2 → 3).
    assert_eq!(ours.json()["version"], 2);
    assert_eq!(theirs.json()["version"], 3);
    let merged = read_json(&s.tmp.path().join("home/.a5c/user-profile.json"));
    assert_eq!(merged["specialties"], json!([{"domain": "web"}]));
    // Process library: a binding made by either is resolved the same by both.
    let lib = s.project.join("lib");
    std::fs::create_dir_all(&lib).unwrap();
    s.cmd_ref(
        &reference,
        &[
            "process-library:use",
            "--dir",
            "lib",
            "--run-id",
            "R",
            "--json",
        ],
    )
    .ok();
    let (ours, theirs) = both(&["process-library:active", "--run-id", "R", "--json"]);
    let (mut o, mut t) = (ours.json(), theirs.json());
    for v in [&mut o, &mut t] {
        // 0.0.187 puts the reference docs under library/ (6.0.0: plugins/babysitter/reference).
        v["defaultSpec"]
            .as_object_mut()
            .unwrap()
            .remove("referenceRoot");
    }
    assert_eq!(o, t);
    assert_eq!(o["binding"]["dir"], lib.display().to_string());
}

#[test]
fn compat_discover_reports_installed_and_calling_harnesses() {
    use std::os::unix::fs::PermissionsExt as _;
    let s = Sandbox::new();
    let bin = s.tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for (name, script) in [
        ("claude", "#!/bin/sh\necho '2.1.159 (Claude Code)'\n"),
        ("gh", "#!/bin/sh\nexit 3\n"),
        ("codex", "not executable"),
    ] {
        let p = bin.join(name);
        std::fs::write(&p, script).unwrap();
        let mode = if name == "codex" { 0o644 } else { 0o755 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::create_dir_all(s.tmp.path().join("home/.gemini")).unwrap();
    std::fs::create_dir_all(s.project.join(".cursor")).unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let v = s
        .cmd_env(
            &["discover", "--json"],
            &[("PATH", &path), ("PI_SESSION_ID", "p1")],
        )
        .ok()
        .json();
    assert_eq!(keys(&v), ["installed", "caller"]);
    let list = v["installed"].as_array().unwrap();
    let names: Vec<&str> = list.iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "claude-code",
            "codex",
            "cursor",
            "gemini-cli",
            "genty",
            "github-copilot",
            "hermes",
            "oh-my-pi",
            "openclaw",
            "opencode",
            "pi",
            "unified"
        ]
    );
    assert_eq!(
        list[0],
        json!({"name": "claude-code", "installed": true, "version": "2.1.159",
               "cliPath": bin.join("claude").display().to_string(), "cliCommand": "claude",
               "configFound": false, "capabilities": ["session-binding", "stop-hook", "mcp", "headless-prompt"],
               "platform": "linux"})
    );
    // Not executable: not installed; a CLI whose --version fails has no version.
    assert_eq!(
        keys(&list[1]),
        [
            "name",
            "installed",
            "cliCommand",
            "configFound",
            "capabilities",
            "platform"
        ]
    );
    assert_eq!(list[1]["installed"], false);
    assert_eq!(
        (&list[5]["installed"], list[5].get("version")),
        (&json!(true), None)
    );
    // Config directories in the project or the home.
    assert_eq!(
        (&list[2]["configFound"], &list[3]["configFound"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(
        v["caller"],
        json!({"name": "pi", "matchedEnvVars": ["PI_SESSION_ID"], "capabilities": ["programmatic", "session-binding", "stop-hook", "headless-prompt"]})
    );

    // `list` is the same command; text form; no caller.
    let out = s.cmd_env(&["list"], &[("PATH", &path)]).ok();
    assert!(out.stdout.starts_with("\nInstalled Harnesses\n\n  Name            Installed  Version          Config   Capabilities\n"), "{}", out.stdout);
    assert!(out.stdout.contains(&format!(
        "\n  {:<14}  {:<9}  {:<15}  {:<7}  session-binding, stop-hook, mcp, headless-prompt\n",
        "claude-code", "yes", "2.1.159", "no"
    )));
    assert!(
        out.stdout.ends_with("\nCaller Harness  none detected\n\n"),
        "{}",
        out.stdout
    );
    // AGENT_SESSION_ID alone names no harness.
    let v = s
        .cmd_env(&["list", "--json"], &[("AGENT_SESSION_ID", "x")])
        .ok()
        .json();
    assert_eq!(v["caller"], serde_json::Value::Null);
}
