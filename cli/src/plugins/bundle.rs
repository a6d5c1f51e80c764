//! Renders the plugin source into one harness's native bundle: the manifest files that harness
//! reads, its hook registration (every entry one call of the shim,
//! `babysitter-hook.sh <harness> <phase>`), the skill, the commands in the harness's command
//! format, and the agent instructions. The bundles are checked in under `plugins/dist/<harness>/`
//! (`babysitter plugin:generate --out plugins/dist`); a test regenerates them and fails on drift.
//!
//! Each bundle's layout is the directory the harness reads it from, so installing is copying:
//! Claude Code and Codex take a plugin directory that is also a one-plugin local marketplace;
//! Gemini CLI an extension directory; Cursor, OpenCode and Pi the contents of their config
//! directory (`.cursor/`, `.opencode/`, `.pi/`).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::harness::{Harness, NativeEvent};
use super::source::{self, Manifest, SourceError};

/// The name of the local marketplace the Claude Code and Codex bundles declare.
pub const MARKETPLACE: &str = "babysitter-rs";

/// One file of a bundle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BundleFile {
    pub bytes: Vec<u8>,
    pub executable: bool,
}

/// A rendered bundle: path relative to the bundle root → file.
pub type Bundle = BTreeMap<String, BundleFile>;

const SHIM: &str = "hooks/babysitter-hook.sh";

struct Out(Bundle);

impl Out {
    fn text(&mut self, path: impl Into<String>, text: String) {
        self.0.insert(
            path.into(),
            BundleFile {
                bytes: text.into_bytes(),
                executable: false,
            },
        );
    }
    fn json(&mut self, path: &str, v: &Value) {
        let mut s = serde_json::to_string_pretty(v).unwrap_or_default();
        s.push('\n');
        self.text(path, s);
    }
    fn shim(&mut self, path: &str) -> Result<(), SourceError> {
        self.0.insert(
            path.to_owned(),
            BundleFile {
                bytes: source::file(SHIM)?.to_vec(),
                executable: true,
            },
        );
        Ok(())
    }
}

/// Renders the bundle of `h`.
pub fn render(h: Harness) -> Result<Bundle, SourceError> {
    let m = Manifest::load()?;
    let mut out = Out(Bundle::new());
    let skill_ref = match h {
        Harness::ClaudeCode => "the `babysitter:babysit` skill, with the Skill tool",
        _ => "the `babysit` skill",
    };
    let vars: [(&str, &str); 5] = [
        ("harness", h.key()),
        ("harness_label", h.label()),
        ("command_prefix", h.command_prefix()),
        ("skill_ref", skill_ref),
        ("plugin_version", &m.version),
    ];
    let render_src = |path: &str| -> Result<String, SourceError> {
        source::render(path, source::text(path)?, &vars)
    };
    let events: Vec<NativeEvent> = m.hooks_of(h).iter().filter_map(|n| h.event(n)).collect();
    let agents = render_src("harness/AGENTS.md")?;
    let skills: Vec<(String, String)> = m
        .skills
        .iter()
        .map(|s| {
            let p = format!("skills/{s}/SKILL.md");
            render_src(&p).map(|t| (p, t))
        })
        .collect::<Result<_, _>>()?;
    let commands: Vec<(String, Command)> = m
        .commands
        .iter()
        .map(|c| {
            let p = format!("commands/{c}.md");
            render_src(&p).and_then(|t| Command::parse(&p, &t).map(|cmd| (c.clone(), cmd)))
        })
        .collect::<Result<_, _>>()?;
    let plugin_meta = json!({
        "name": m.name,
        "version": m.version,
        "description": m.description,
        "author": {"name": m.author},
        "license": m.license,
        "homepage": m.homepage,
    });

    match h {
        Harness::ClaudeCode | Harness::Codex => {
            let manifest_dir = if h == Harness::ClaudeCode {
                ".claude-plugin"
            } else {
                ".codex-plugin"
            };
            out.json(&format!("{manifest_dir}/plugin.json"), &plugin_meta);
            out.json(
                ".claude-plugin/marketplace.json",
                &json!({
                    "name": MARKETPLACE,
                    "owner": {"name": m.author},
                    "plugins": [{
                        "name": m.name,
                        "source": "./",
                        "description": m.description,
                        "version": m.version,
                    }],
                }),
            );
            let root = if h == Harness::ClaudeCode {
                "${CLAUDE_PLUGIN_ROOT}"
            } else {
                "${PLUGIN_ROOT}"
            };
            out.json(
                "hooks/hooks.json",
                &claude_style_hooks(h, &events, |e| {
                    format!("sh \"{root}/{SHIM}\" {} {}", h.key(), e.phase.as_str())
                }),
            );
            out.shim(SHIM)?;
            for (p, t) in skills {
                out.text(p, t);
            }
            for (name, c) in &commands {
                out.text(format!("commands/{name}.md"), c.markdown());
            }
            out.text("AGENTS.md", agents);
        }
        Harness::GeminiCli => {
            out.json(
                "gemini-extension.json",
                &json!({
                    "name": m.name,
                    "version": m.version,
                    "description": m.description,
                    "contextFileName": "GEMINI.md",
                }),
            );
            out.text("GEMINI.md", agents);
            let mut hooks = serde_json::Map::new();
            for e in &events {
                hooks.insert(
                    e.name.to_owned(),
                    // No matcher: absent matches every event (on lifecycle events a matcher is
                    // an exact string, not a glob).
                    json!([{
                        "hooks": [{
                            "name": format!("babysitter-{}", e.phase.as_str()),
                            "type": "command",
                            "command": format!("sh \"${{extensionPath}}/{SHIM}\" gemini-cli {}", e.phase.as_str()),
                            "timeout": Harness::timeout_secs(e.phase) * 1000,
                            "description": format!("babysitter: {}", e.phase.as_str()),
                        }],
                    }]),
                );
            }
            out.json("hooks/hooks.json", &json!({"hooks": hooks}));
            out.shim(SHIM)?;
            for (p, t) in skills {
                out.text(p, t);
            }
            for (name, c) in &commands {
                out.text(format!("commands/babysitter/{name}.toml"), c.gemini_toml());
            }
        }
        Harness::Cursor => {
            let mut hooks = serde_json::Map::new();
            for e in &events {
                let mut entry = json!({
                    "command": format!("sh .cursor/{SHIM} cursor {}", e.phase.as_str()),
                    "timeout": Harness::timeout_secs(e.phase),
                });
                if e.phase.drives_loop() {
                    entry["loop_limit"] = Value::Null;
                }
                hooks.insert(e.name.to_owned(), json!([entry]));
            }
            out.json("hooks.json", &json!({"version": 1, "hooks": hooks}));
            out.shim(SHIM)?;
            for (p, t) in skills {
                out.text(p, t);
            }
            for (name, c) in &commands {
                out.text(
                    format!("commands/babysitter-{name}.md"),
                    c.body_with_description(),
                );
            }
            out.text("rules/babysitter.mdc", cursor_rule(&agents));
        }
        // In-process harnesses: the module, the shim it calls beside it, skills, commands.
        Harness::OpenCode | Harness::Pi => {
            let (module, src, shim_dir, commands_dir) = if h == Harness::OpenCode {
                (
                    "plugins/babysitter.js",
                    "harness/opencode-plugin.js",
                    "plugins/babysitter",
                    "commands",
                )
            } else {
                (
                    "extensions/babysitter/index.ts",
                    "harness/pi-extension.ts",
                    "extensions/babysitter",
                    "prompts",
                )
            };
            out.text(module, source::text(src)?.to_owned());
            out.shim(&format!("{shim_dir}/{SHIM}"))?;
            for (p, t) in skills {
                out.text(p, t);
            }
            for (name, c) in &commands {
                out.text(
                    format!("{commands_dir}/babysitter-{name}.md"),
                    c.body_with_description(),
                );
            }
            out.text("AGENTS.md", agents);
        }
    }
    Ok(out.0)
}

/// Claude Code's registration shape (Codex reads the same): event → matcher groups → commands.
fn claude_style_hooks(
    h: Harness,
    events: &[NativeEvent],
    command: impl Fn(&NativeEvent) -> String,
) -> Value {
    let mut hooks = serde_json::Map::new();
    for e in events {
        let mut group = json!({
            "hooks": [{
                "type": "command",
                "command": command(e),
                "timeout": Harness::timeout_secs(e.phase),
            }],
        });
        // Claude Code: only Bash commands are ever rewritten (output compression).
        if h == Harness::ClaudeCode && matches!(e.name, "PreToolUse" | "PostToolUse") {
            group["matcher"] = json!("Bash");
        }
        hooks.insert(e.name.to_owned(), json!([group]));
    }
    json!({
        "description": "babysitter-rs: every hook is one call of babysitter hooks:invoke",
        "hooks": hooks,
    })
}

fn cursor_rule(agents: &str) -> String {
    format!(
        "---\ndescription: How to run work as a babysitter process\nalwaysApply: false\n---\n\n{agents}"
    )
}

/// A slash command of the source: its front matter and its prompt.
struct Command {
    description: String,
    argument_hint: Option<String>,
    body: String,
}

impl Command {
    fn parse(path: &str, text: &str) -> Result<Command, SourceError> {
        let bad = |what: &str| SourceError::Template {
            file: path.to_owned(),
            what: what.to_owned(),
        };
        let rest = text
            .strip_prefix("---\n")
            .ok_or_else(|| bad("a command starts with `---` front matter"))?;
        let (front, body) = rest
            .split_once("\n---\n")
            .ok_or_else(|| bad("the front matter is never closed"))?;
        let mut description = None;
        let mut argument_hint = None;
        for line in front.lines() {
            match line.split_once(':') {
                Some(("description", v)) => description = Some(unquote(v.trim())),
                Some(("argument-hint", v)) => argument_hint = Some(unquote(v.trim())),
                _ => return Err(bad(&format!("unknown front-matter line {line:?}"))),
            }
        }
        Ok(Command {
            description: description.ok_or_else(|| bad("no description"))?,
            argument_hint,
            body: body.trim_start_matches('\n').to_owned(),
        })
    }

    /// Claude Code / Codex markdown with front matter.
    fn markdown(&self) -> String {
        let mut s = format!("---\ndescription: {}\n", yaml_str(&self.description));
        if let Some(h) = &self.argument_hint {
            s.push_str(&format!("argument-hint: {}\n", yaml_str(h)));
        }
        s.push_str("---\n\n");
        s.push_str(&self.body);
        s
    }

    /// Cursor, OpenCode and Pi: markdown with a description and `$ARGUMENTS`.
    fn body_with_description(&self) -> String {
        format!(
            "---\ndescription: {}\n---\n\n{}",
            yaml_str(&self.description),
            self.body
        )
    }

    /// Gemini CLI's TOML command: `{{args}}` instead of `$ARGUMENTS`.
    fn gemini_toml(&self) -> String {
        let prompt = self.body.replace("$ARGUMENTS", "{{args}}");
        format!(
            "description = {}\nprompt = {}\n",
            toml_str(&self.description),
            toml_multiline(&prompt)
        )
    }
}

fn unquote(s: &str) -> String {
    s.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(s)
        .to_owned()
}

fn yaml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

/// A TOML multi-line literal string (no escapes inside); the body never holds `'''`.
fn toml_multiline(s: &str) -> String {
    if s.contains("'''") {
        return toml_str(s);
    }
    format!("'''\n{s}'''")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bundle_renders_and_registers_only_the_shim() {
        for h in Harness::ALL {
            let b = render(*h).unwrap_or_else(|e| panic!("{h}: {e}"));
            assert!(b.values().any(|f| f.executable), "{h}: no shim");
            for (p, f) in &b {
                let t = String::from_utf8_lossy(&f.bytes);
                assert!(!t.contains("{{harness"), "{h} {p}: unfilled placeholder");
                if p.ends_with("hooks.json") {
                    let v: Value =
                        serde_json::from_slice(&f.bytes).unwrap_or_else(|e| panic!("{h} {p}: {e}"));
                    let hooks = v["hooks"].as_object().map(|m| m.len()).unwrap_or(0);
                    assert!(hooks >= 2, "{h} {p}: {hooks} hooks");
                    assert!(t.contains("babysitter-hook.sh"), "{h} {p}: not the shim");
                }
            }
        }
    }

    #[test]
    fn claude_code_stop_is_registered_with_a_long_timeout() {
        let b = render(Harness::ClaudeCode).unwrap_or_else(|e| panic!("{e}"));
        let v: Value = serde_json::from_slice(&b["hooks/hooks.json"].bytes).unwrap_or_default();
        let stop = &v["hooks"]["Stop"][0]["hooks"][0];
        assert_eq!(
            stop["command"],
            "sh \"${CLAUDE_PLUGIN_ROOT}/hooks/babysitter-hook.sh\" claude-code turn.stop"
        );
        assert_eq!(stop["timeout"], 360);
        assert_eq!(v["hooks"]["PreToolUse"][0]["matcher"], "Bash");
    }

    #[test]
    fn gemini_commands_take_args() {
        let b = render(Harness::GeminiCli).unwrap_or_else(|e| panic!("{e}"));
        let call = String::from_utf8_lossy(&b["commands/babysitter/call.toml"].bytes).into_owned();
        assert!(
            call.contains("{{args}}") && !call.contains("$ARGUMENTS"),
            "{call}"
        );
        assert!(call.starts_with("description = \""), "{call}");
    }
}
