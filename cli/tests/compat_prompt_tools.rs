//! The harness-agnostic hook types (spec `adapters-and-hooks.md` §2.1, `babysitter-core.md`
//! §5.5) and `compress-output`, through the real binary and side by side with the reference CLI
//! where it is installed: `user-prompt-submit`'s prompt density filter, `pre-tool-use`'s command
//! rewrite, the compression settings that switch them, and `compress-output`'s condensed `ls`.

mod compat_support;

use compat_support::*;
use serde_json::{Value, json};

/// A prompt of ~1,000 estimated tokens: sentences of varied length, one repeated, one
/// boilerplate.
fn long_prompt() -> String {
    let words = [
        "alpha", "build", "test", "deploy", "review", "the", "of", "code", "module", "fix",
    ];
    let mut text = String::new();
    for i in 0..80 {
        let n = 2 + (i * 7) % 23;
        let sentence: Vec<&str> = (0..n).map(|k| words[(i + k * 3) % words.len()]).collect();
        text.push_str(&sentence.join(" "));
        text.push_str([". ", "! ", "? ", "\n"][i % 4]);
        if i == 10 {
            // Long enough to score the most (40 tokens and more): kept, once.
            let repeat = format!("Repeat this exact sentence {}. ", "word ".repeat(40).trim());
            text.push_str(&repeat);
            text.push_str(&repeat);
        }
    }
    text.push_str("All rights reserved by nobody in particular at all today.");
    text
}

fn payload(prompt: &str) -> String {
    json!({"session_id": "s", "hook_event_name": "UserPromptSubmit", "prompt": prompt, "cwd": "/x"})
        .to_string()
}

const PROMPT_HOOK: &[&str] = &["hook:run", "--hook-type", "user-prompt-submit", "--json"];
const TOOL_HOOK: &[&str] = &["hook:run", "--hook-type", "pre-tool-use", "--json"];

#[test]
fn compat_user_prompt_submit_filters_long_prompts_only() {
    let s = Sandbox::new();
    let prompt = long_prompt();
    let out = s.cmd_input(PROMPT_HOOK, &payload(&prompt)).ok();
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(keys(&v), ["session_id", "hook_event_name", "prompt", "cwd"]);
    let filtered = v["prompt"].as_str().unwrap();
    assert!(filtered.len() < prompt.len() * 9 / 10, "{filtered}");
    assert_eq!(filtered.matches("Repeat this exact sentence").count(), 1);
    assert!(!filtered.contains("rights reserved"));
    if let Some(reference) = reference_cli() {
        let theirs = s
            .cmd_ref_input(&reference, PROMPT_HOOK, &payload(&prompt))
            .ok();
        assert_eq!(out.stdout, theirs.stdout);
    }
    // A short prompt, a disabled layer, a payload that is not JSON: passed through.
    let short = payload("Fix the build. Then run the tests.");
    let out = s.cmd_input(PROMPT_HOOK, &short).ok();
    assert_eq!(out.stdout, short);
    let off = s
        .cmd_input_env(
            PROMPT_HOOK,
            &payload(&prompt),
            &[("BABYSITTER_COMPRESSION_USER_PROMPT", "false")],
        )
        .ok();
    assert_eq!(off.stdout, payload(&prompt));
    let out = s.cmd_input(PROMPT_HOOK, "not json {").ok();
    assert_eq!(out.stdout, "not json {");
}

fn tool(command: &str) -> String {
    json!({"session_id": "s", "tool_name": "Bash", "tool_input": {"command": command, "description": "d"}})
        .to_string()
}

#[test]
fn compat_pre_tool_use_rewrites_simple_listing_commands() {
    let s = Sandbox::new();
    let out = s.cmd_input(TOOL_HOOK, &tool("git status")).ok();
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(
        v,
        json!({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
            "permissionDecisionReason": "babysitter output compression",
            "updatedInput": {"command": "babysitter compress-output git status", "description": "d"}}})
    );
    if let Some(reference) = reference_cli() {
        for command in [
            "git status",
            "ls -la src",
            "grep -rn foo .",
            "git log | head",
        ] {
            let theirs = s.cmd_ref_input(&reference, TOOL_HOOK, &tool(command)).ok();
            let ours = s.cmd_input(TOOL_HOOK, &tool(command)).ok();
            assert_eq!(ours.stdout, theirs.stdout, "{command}");
        }
    }
    // Shell syntax, other programs, reading files (fixed: the reference rewrites `cat`),
    // excluded commands, a disabled layer: no answer, the command runs as written.
    for command in [
        "git log | head",
        "ls > x",
        "echo $(ls)",
        "node x.js",
        "cat src/main.rs",
        "",
    ] {
        let out = s.cmd_input(TOOL_HOOK, &tool(command)).ok();
        assert_eq!(out.stdout, "", "{command}");
    }
    s.write(
        ".a5c/compression.config.json",
        r#"{"layers": {"commandOutputHook": {"excludeCommands": ["GIT"]}}}"#,
    );
    assert_eq!(s.cmd_input(TOOL_HOOK, &tool("git status")).ok().stdout, "");
    let out = s
        .cmd_input_env(
            TOOL_HOOK,
            &tool("ls -la"),
            &[("BABYSITTER_COMPRESSION_ENABLED", "0")],
        )
        .ok();
    assert_eq!(out.stdout, "");
    assert!(
        s.cmd_input(TOOL_HOOK, &tool("ls -la"))
            .ok()
            .stdout
            .contains("compress-output ls -la")
    );
}

#[test]
fn compat_compress_output_condenses_ls_and_keeps_the_exit_code() {
    let s = Sandbox::new();
    s.write("listing/a.txt", "hi\n");
    s.write("listing/b.rs", "x\n");
    s.write("listing/sub/.keep", "");
    s.write("listing/node_modules/x", "");
    let args = ["compress-output", "ls", "-la", "listing"];
    let out = s.cmd(&args).ok();
    assert_eq!(
        out.stdout,
        "sub/\na.txt  3B\nb.rs  2B\n\n2 files, 1 dirs (1 .txt, 1 .rs)\n"
    );
    if let Some(reference) = reference_cli() {
        assert_eq!(s.cmd_ref(&reference, &args).ok().stdout, out.stdout);
    }
    let out = s.cmd(&["compress-output", "ls", "missing-dir"]);
    assert_eq!(out.code, 2);
    assert!(out.stderr.contains("missing-dir"), "{}", out.stderr);
    let out = s.cmd(&["compress-output"]);
    assert_eq!(out.code, 1);
    assert!(out.stderr.contains("requires a command"));
}
