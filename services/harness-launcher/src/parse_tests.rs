//! Replays native transcripts recorded from real harness runs (`tests/fixtures/native/`,
//! written by the real-harness tests with `BABYSITTER_RECORD_FIXTURES=1`) through the parsers.

use serde_json::Value;

use super::*;
use crate::events::Ev;

fn replay(kind: HarnessKind, text: &str) -> (Vec<Ev>, crate::events::Outcome) {
    let mut p = LineParser::new(kind);
    let mut all = Vec::new();
    for line in text.lines() {
        p.line(line);
        all.extend(p.take());
    }
    p.finish();
    all.extend(p.take());
    (all, p.sink.outcome.clone())
}

fn fixture(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/native")
        .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn kinds(evs: &[Ev]) -> Vec<String> {
    evs.iter()
        .map(
            |e| match e.data.pointer("/item/kind").and_then(Value::as_str) {
                Some(k) => format!("{}:{k}", e.kind),
                None => e.kind.to_owned(),
            },
        )
        .collect()
}

/// The shape every recorded tool turn must have: the shell call and its result as separate
/// items linked by call id, the final answer, a closed turn, nothing unparsed.
fn assert_tool_turn(kind: HarnessKind, file: &str) {
    let (evs, out) = replay(kind, &fixture(file));
    let ks = kinds(&evs);
    assert_eq!(out.unparsed, 0, "{kind}: {ks:?}");
    assert!(out.finished, "{kind}: no end-of-run marker");
    assert!(out.failure.is_none(), "{kind}: {:?}", out.failure);
    assert_eq!(
        out.final_text.as_deref().map(str::trim),
        Some("DONE"),
        "{kind}"
    );
    let call = evs
        .iter()
        .find(|e| e.kind == "item.completed" && e.data["item"]["kind"] == "tool_call")
        .unwrap_or_else(|| panic!("{kind}: no tool call in {ks:?}"));
    let result = evs
        .iter()
        .find(|e| e.kind == "item.completed" && e.data["item"]["kind"] == "tool_result")
        .unwrap_or_else(|| panic!("{kind}: no tool result in {ks:?}"));
    let call_part = &call.data["item"]["content"][0];
    assert!(
        call_part["arguments"]
            .as_str()
            .unwrap_or_default()
            .contains("out.txt"),
        "{kind}: {call_part}"
    );
    assert_eq!(
        call_part["call_id"], result.data["item"]["content"][0]["call_id"],
        "{kind}: call and result are linked"
    );
    let turn_start = ks.iter().position(|k| k == "turn.started");
    let turn_end = ks.iter().rposition(|k| k == "turn.ended");
    assert!(
        turn_start < turn_end && turn_start.is_some(),
        "{kind}: {ks:?}"
    );
    // The answer is streamed: a delta precedes the completed assistant message.
    assert!(ks.iter().any(|k| k == "item.delta"), "{kind}: {ks:?}");
}

#[test]
fn claude_code_transcript_replays_to_a_tool_turn() {
    assert_tool_turn(HarnessKind::ClaudeCode, "claude-code.jsonl");
}

#[test]
fn codex_transcript_replays_to_a_tool_turn() {
    assert_tool_turn(HarnessKind::Codex, "codex.jsonl");
}

#[test]
fn gemini_cli_transcript_replays_to_a_tool_turn() {
    assert_tool_turn(HarnessKind::GeminiCli, "gemini-cli.jsonl");
}

#[test]
fn pi_transcript_replays_to_a_tool_turn() {
    assert_tool_turn(HarnessKind::Pi, "pi.jsonl");
}

#[test]
fn opencode_transcript_replays_to_a_tool_turn() {
    assert_tool_turn(HarnessKind::OpenCode, "opencode.jsonl");
}

#[test]
fn usage_is_read_from_each_transcript() {
    for (kind, file) in [
        (HarnessKind::ClaudeCode, "claude-code.jsonl"),
        (HarnessKind::Codex, "codex.jsonl"),
        (HarnessKind::GeminiCli, "gemini-cli.jsonl"),
        (HarnessKind::Pi, "pi.jsonl"),
        (HarnessKind::OpenCode, "opencode.jsonl"),
    ] {
        let (_, out) = replay(kind, &fixture(file));
        assert!(
            out.tokens.input > 0 && out.tokens.output > 0,
            "{kind}: {:?}",
            out.tokens
        );
    }
}

#[test]
fn garbage_becomes_unparsed_events_naming_the_line_and_never_panics() {
    for kind in HarnessKind::ALL {
        let (evs, out) = replay(
            kind,
            "not json at all\n[1,2]\n{\"type\":\"from-the-future\"}\n{\"no_type\":1}\n\u{0}\u{1}binary",
        );
        assert_eq!(out.unparsed, 5, "{kind}: {evs:?}");
        assert_eq!(out.recognised, 0, "{kind}");
        assert!(!out.finished, "{kind}");
        let first = &evs[0];
        assert_eq!(first.kind, "agent.unparsed");
        assert!(first.synthetic);
        assert_eq!(first.data["location"], "stdout line 1");
    }
}

#[test]
fn claude_code_failures_and_denials_are_reported() {
    let text = r#"{"type":"system","subtype":"init","session_id":"s1","model":"m"}
{"type":"result","subtype":"error_max_turns","is_error":true,"errors":["Reached maximum number of turns (1)"],"permission_denials":[{"tool_name":"Bash","tool_use_id":"toolu_1","tool_input":{"command":"rm -rf /"}}],"usage":{"input_tokens":5,"output_tokens":2}}"#;
    let (evs, out) = replay(HarnessKind::ClaudeCode, text);
    assert_eq!(
        out.failure.as_deref(),
        Some("claude code ended with error_max_turns: Reached maximum number of turns (1)")
    );
    let ks = kinds(&evs);
    assert!(ks.contains(&"permission.requested".to_owned()), "{ks:?}");
    assert!(ks.contains(&"permission.resolved".to_owned()), "{ks:?}");
    assert!(ks.contains(&"error".to_owned()), "{ks:?}");
}
