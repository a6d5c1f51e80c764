//! Black-box tests of the settings commands of the reference CLI: `compression:*` (the project
//! file `<cwd>/.a5c/compression.config.json` the hooks read).

mod compat_support;

use compat_support::{Sandbox, keys, read_json};
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
