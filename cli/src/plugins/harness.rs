//! The harnesses the plugin serves and what each calls its hook events: one table, read by the
//! bundle generator (which native events a bundle registers, and under which phase) and by the
//! hooks adapter (which phase a native payload belongs to). A native event missing here is
//! neither registered nor answered with anything but "allow".
//!
//! Phases are the canonical names of `adapters-and-hooks.md` §1.6 (`a5c.hooks.v1`), limited to
//! the ones babysitter acts on or observes.

use std::fmt;

/// A canonical hook phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    SessionStart,
    SessionEnd,
    SessionIdle,
    UserPromptSubmitted,
    BeforeAgent,
    Stop,
    AfterAgent,
    ToolBefore,
    ToolAfter,
    SubagentEnd,
}

impl Phase {
    pub const ALL: &'static [Phase] = &[
        Phase::SessionStart,
        Phase::SessionEnd,
        Phase::SessionIdle,
        Phase::UserPromptSubmitted,
        Phase::BeforeAgent,
        Phase::Stop,
        Phase::AfterAgent,
        Phase::ToolBefore,
        Phase::ToolAfter,
        Phase::SubagentEnd,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::SessionStart => "session.start",
            Phase::SessionEnd => "session.end",
            Phase::SessionIdle => "session.idle",
            Phase::UserPromptSubmitted => "turn.user_prompt_submitted",
            Phase::BeforeAgent => "turn.before_agent",
            Phase::Stop => "turn.stop",
            Phase::AfterAgent => "turn.after_agent",
            Phase::ToolBefore => "tool.before",
            Phase::ToolAfter => "tool.after",
            Phase::SubagentEnd => "subagent.end",
        }
    }

    pub fn parse(s: &str) -> Option<Phase> {
        Phase::ALL.iter().copied().find(|p| p.as_str() == s)
    }

    /// The phases where the agent is about to stop and babysitter may keep it going.
    pub fn drives_loop(self) -> bool {
        matches!(self, Phase::Stop | Phase::AfterAgent | Phase::SessionIdle)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A harness the plugin is generated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Harness {
    ClaudeCode,
    Codex,
    GeminiCli,
    Cursor,
    OpenCode,
    Pi,
}

/// One native event: its name, the phase it is, and how long the harness should let the hook
/// run (the loop-driving phases wait out babysitter's back-off, up to 300 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NativeEvent {
    pub name: &'static str,
    pub phase: Phase,
}

const fn ev(name: &'static str, phase: Phase) -> NativeEvent {
    NativeEvent { name, phase }
}

use Phase::*;

const CLAUDE_CODE_EVENTS: &[NativeEvent] = &[
    ev("SessionStart", SessionStart),
    ev("UserPromptSubmit", UserPromptSubmitted),
    ev("PreToolUse", ToolBefore),
    ev("PostToolUse", ToolAfter),
    ev("Stop", Stop),
    ev("SubagentStop", SubagentEnd),
    ev("SessionEnd", SessionEnd),
];
const CODEX_EVENTS: &[NativeEvent] = &[
    ev("SessionStart", SessionStart),
    ev("UserPromptSubmit", UserPromptSubmitted),
    ev("PreToolUse", ToolBefore),
    ev("PostToolUse", ToolAfter),
    ev("Stop", Stop),
];
const GEMINI_CLI_EVENTS: &[NativeEvent] = &[
    ev("SessionStart", SessionStart),
    ev("BeforeAgent", BeforeAgent),
    ev("AfterAgent", AfterAgent),
    ev("BeforeTool", ToolBefore),
    ev("AfterTool", ToolAfter),
    ev("SessionEnd", SessionEnd),
];
const CURSOR_EVENTS: &[NativeEvent] = &[
    ev("sessionStart", SessionStart),
    ev("beforeSubmitPrompt", UserPromptSubmitted),
    ev("preToolUse", ToolBefore),
    ev("postToolUse", ToolAfter),
    ev("stop", Stop),
    ev("subagentStop", SubagentEnd),
    ev("sessionEnd", SessionEnd),
];
const OPEN_CODE_EVENTS: &[NativeEvent] = &[
    ev("session.created", SessionStart),
    ev("session.idle", SessionIdle),
    ev("tool.execute.before", ToolBefore),
    ev("tool.execute.after", ToolAfter),
];
const PI_EVENTS: &[NativeEvent] = &[
    ev("session_start", SessionStart),
    ev("tool_call", ToolBefore),
    ev("tool_result", ToolAfter),
    ev("agent_end", AfterAgent),
    ev("session_shutdown", SessionEnd),
];

impl Harness {
    pub const ALL: &'static [Harness] = &[
        Harness::ClaudeCode,
        Harness::Codex,
        Harness::GeminiCli,
        Harness::Cursor,
        Harness::OpenCode,
        Harness::Pi,
    ];

    /// The harness key of babysitter's CLI (`--harness`).
    pub fn key(self) -> &'static str {
        match self {
            Harness::ClaudeCode => "claude-code",
            Harness::Codex => "codex",
            Harness::GeminiCli => "gemini-cli",
            Harness::Cursor => "cursor",
            Harness::OpenCode => "opencode",
            Harness::Pi => "pi",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Harness::ClaudeCode => "Claude Code",
            Harness::Codex => "Codex",
            Harness::GeminiCli => "Gemini CLI",
            Harness::Cursor => "Cursor",
            Harness::OpenCode => "OpenCode",
            Harness::Pi => "Pi",
        }
    }

    pub fn parse(s: &str) -> Option<Harness> {
        let s = match s {
            "claude" => "claude-code",
            "gemini" => "gemini-cli",
            other => other,
        };
        Harness::ALL.iter().copied().find(|h| h.key() == s)
    }

    pub fn keys() -> String {
        Harness::ALL
            .iter()
            .map(|h| h.key())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The executable that runs the harness.
    pub fn binary(self) -> &'static str {
        match self {
            Harness::ClaudeCode => "claude",
            Harness::Codex => "codex",
            Harness::GeminiCli => "gemini",
            Harness::Cursor => "cursor-agent",
            Harness::OpenCode => "opencode",
            Harness::Pi => "pi",
        }
    }

    /// The npm package of the harness's CLI and the version babysitter is tested with
    /// (`scripts/ensure-*.sh` pin the same); `None`: not distributed through npm.
    pub fn npm_package(self) -> Option<(&'static str, &'static str)> {
        match self {
            Harness::ClaudeCode => Some(("@anthropic-ai/claude-code", "2.1.197")),
            Harness::Codex => Some(("@openai/codex", "0.171.0")),
            Harness::GeminiCli => Some(("@google/gemini-cli", "0.61.0")),
            Harness::OpenCode => Some(("opencode-ai", "1.18.33")),
            Harness::Pi => Some(("@mariozechner/pi-coding-agent", "0.73.1")),
            Harness::Cursor => None,
        }
    }

    /// How a user invokes the plugin's commands in this harness.
    pub fn command_prefix(self) -> &'static str {
        match self {
            Harness::ClaudeCode | Harness::GeminiCli => "/babysitter:",
            Harness::Codex => "$babysitter:",
            Harness::Cursor | Harness::OpenCode | Harness::Pi => "/babysitter-",
        }
    }

    /// The native events this harness fires that babysitter knows (names exactly as the
    /// harness spells them in its registration file and its payloads).
    pub fn events(self) -> &'static [NativeEvent] {
        match self {
            Harness::ClaudeCode => CLAUDE_CODE_EVENTS,
            Harness::Codex => CODEX_EVENTS,
            Harness::GeminiCli => GEMINI_CLI_EVENTS,
            Harness::Cursor => CURSOR_EVENTS,
            Harness::OpenCode => OPEN_CODE_EVENTS,
            Harness::Pi => PI_EVENTS,
        }
    }

    pub fn event(self, name: &str) -> Option<NativeEvent> {
        self.events().iter().copied().find(|e| e.name == name)
    }

    /// Every harness whose events include `name` (to name the likely sender of a payload that
    /// does not belong to this harness).
    pub fn owners_of(name: &str) -> Vec<Harness> {
        Harness::ALL
            .iter()
            .copied()
            .filter(|h| h.event(name).is_some())
            .collect()
    }

    /// How long the harness lets the hook run, in seconds: the loop-driving phases wait out
    /// the stop hook's back-off (at most 300 s), the others answer at once.
    pub fn timeout_secs(phase: Phase) -> u64 {
        if phase.drives_loop() { 360 } else { 30 }
    }
}

impl fmt::Display for Harness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_phases_round_trip() {
        for h in Harness::ALL {
            assert_eq!(Harness::parse(h.key()), Some(*h));
            for e in h.events() {
                assert_eq!(Phase::parse(e.phase.as_str()), Some(e.phase));
                assert_eq!(h.event(e.name), Some(*e), "{h} {}", e.name);
            }
        }
        assert_eq!(Harness::parse("claude"), Some(Harness::ClaudeCode));
        assert_eq!(Harness::parse("copilot"), None);
    }

    #[test]
    fn every_harness_has_a_loop_driver_and_a_session_start() {
        for h in Harness::ALL {
            assert!(h.events().iter().any(|e| e.phase.drives_loop()), "{h}");
            assert!(
                h.events().iter().any(|e| e.phase == Phase::SessionStart),
                "{h}"
            );
        }
    }

    #[test]
    fn an_event_name_names_its_harnesses() {
        assert_eq!(Harness::owners_of("AfterAgent"), vec![Harness::GeminiCli]);
        assert_eq!(
            Harness::owners_of("Stop"),
            vec![Harness::ClaudeCode, Harness::Codex]
        );
    }
}
