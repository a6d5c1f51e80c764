//! babysitter's compression settings and its prompt density filter (spec `babysitter-core.md`
//! §5.5): what `hook:run --hook-type user-prompt-submit` and `pre-tool-use` consult.
//!
//! Settings, highest first: the environment (`BABYSITTER_COMPRESSION_ENABLED` switches every
//! layer; `BABYSITTER_COMPRESSION_USER_PROMPT` / `_COMMANDS` one layer, only while compression is
//! on), `<cwd>/.a5c/compression.config.json`, `~/.a5c/compression.config.json`, the defaults
//! (on; prompts over 500 tokens keep 78 %; command output of everything but `node`, `python`,
//! `ruby`). Files are merged key by key as the reference merges them; a file that is not JSON is
//! skipped with a warning on stderr (the reference skips it silently).

pub mod commands;

use std::path::Path;

use babysitter_common::EnvMap;
use serde_json::{Map, Value, json};

/// The layers the hooks use.
#[derive(Debug, Clone, PartialEq)]
pub struct Compression {
    pub enabled: bool,
    pub prompt_enabled: bool,
    /// Prompts with more estimated tokens than this are filtered.
    pub prompt_threshold: f64,
    /// The fraction of a filtered prompt's tokens kept.
    pub prompt_keep: f64,
    pub commands_enabled: bool,
    /// Commands (first words) whose output is never compressed.
    pub commands_excluded: Vec<String>,
}

/// The reference's `DEFAULT_COMPRESSION_CONFIG`, every layer (the hooks use two; the
/// `compression:*` commands show and edit all four).
fn defaults() -> Value {
    json!({
        "enabled": true,
        "layers": {
            "userPromptHook": {"enabled": true, "engine": "density-filter", "threshold": 500, "keepRatio": 0.78},
            "commandOutputHook": {"enabled": true, "engine": "command-compressor", "excludeCommands": ["node", "python", "ruby"]},
            "sdkContextHook": {
                "enabled": true, "engine": "sentence-extractor", "targetReduction": 0.15,
                "minCompressionTokens": 150,
                "perTaskKind": {"agent": 0.15, "skill": 0.2, "breakpoint": 0.1},
            },
            "processLibraryCache": {"enabled": true, "engine": "sentence-extractor", "targetReduction": 0.35, "ttlHours": 24},
        }
    })
}

/// Each layer and the variable that switches it while compression is on.
pub const LAYERS: &[(&str, &str)] = &[
    ("userPromptHook", "BABYSITTER_COMPRESSION_USER_PROMPT"),
    ("commandOutputHook", "BABYSITTER_COMPRESSION_COMMANDS"),
    ("sdkContextHook", "BABYSITTER_COMPRESSION_SDK_CONTEXT"),
    (
        "processLibraryCache",
        "BABYSITTER_COMPRESSION_LIBRARY_CACHE",
    ),
];

/// The project's settings file, `<dir>/.a5c/compression.config.json`.
pub fn config_file(dir: &Path) -> std::path::PathBuf {
    dir.join(".a5c").join("compression.config.json")
}

/// `base` with `over` merged in: objects key by key, anything else replaced.
fn merge(base: &mut Value, over: Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(&k) {
                    Some(slot) if slot.is_object() && v.is_object() => merge(slot, v),
                    _ if v.is_null() => {}
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
        (b, o) => *b = o,
    }
}

fn file_config(dir: &Path) -> Option<Value> {
    let path = config_file(dir);
    let text = std::fs::read_to_string(&path).ok()?;
    match serde_json::from_str::<Value>(&text) {
        Ok(v @ Value::Object(_)) => Some(v),
        Ok(_) => {
            errln!(
                "[compression] {} is not a JSON object; ignored",
                path.display()
            );
            None
        }
        Err(e) => {
            errln!(
                "[compression] {} is not valid JSON ({e}); ignored",
                path.display()
            );
            None
        }
    }
}

/// `1`/`true`/`yes` or `0`/`false`/`no` (any case); anything else is unset.
fn flag(env: &EnvMap, key: &str) -> Option<bool> {
    match env.get(key)?.trim().to_lowercase().as_str() {
        "1" | "true" | "yes" => Some(true),
        "0" | "false" | "no" => Some(false),
        _ => None,
    }
}

/// The whole resolved settings document (`loadCompressionConfig`): defaults, then the user's
/// file, the project's, then the environment.
pub fn resolved(env: &EnvMap, cwd: &Path, home: Option<&Path>) -> Value {
    let mut doc = defaults();
    for dir in [home, Some(cwd)].into_iter().flatten() {
        if let Some(v) = file_config(dir) {
            merge(&mut doc, v);
        }
    }
    let set_layer = |doc: &mut Value, layer: &str, on: bool| {
        if let Some(l) = doc.pointer_mut(&format!("/layers/{layer}")) {
            if !l.is_object() {
                *l = json!({});
            }
            l["enabled"] = json!(on);
        }
    };
    if let Some(master) = flag(env, "BABYSITTER_COMPRESSION_ENABLED") {
        doc["enabled"] = json!(master);
        if !master {
            for (layer, _) in LAYERS {
                set_layer(&mut doc, layer, false);
            }
        }
    }
    if doc
        .get("enabled")
        .is_some_and(crate::compat::output::js_truthy)
    {
        for (layer, var) in LAYERS {
            if let Some(on) = flag(env, var) {
                set_layer(&mut doc, layer, on);
            }
        }
    }
    doc
}

impl Compression {
    /// The settings for a command run in `cwd` by a user whose home is `home`.
    pub fn load(env: &EnvMap, cwd: &Path, home: Option<&Path>) -> Compression {
        let doc = resolved(env, cwd, home);
        let layer = |name: &str| doc.pointer(&format!("/layers/{name}")).cloned();
        let prompt = layer("userPromptHook").unwrap_or(Value::Null);
        let commands = layer("commandOutputHook").unwrap_or(Value::Null);
        let on = |v: &Value| v.get("enabled").and_then(Value::as_bool).unwrap_or(false);
        Compression {
            enabled: doc.get("enabled").and_then(Value::as_bool).unwrap_or(false),
            prompt_enabled: on(&prompt),
            prompt_threshold: prompt
                .get("threshold")
                .and_then(Value::as_f64)
                .unwrap_or(500.0),
            prompt_keep: prompt
                .get("keepRatio")
                .and_then(Value::as_f64)
                .unwrap_or(0.78),
            commands_enabled: on(&commands),
            commands_excluded: commands
                .get("excludeCommands")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

/// babysitter's token estimate: each run of letters and digits is one token, and so is every
/// other character that is not white space.
pub fn estimate_tokens(text: &str) -> usize {
    let mut n = 0;
    let mut in_word = false;
    for c in text.chars() {
        if c.is_alphabetic() || c.is_numeric() {
            if !in_word {
                n += 1;
                in_word = true;
            }
        } else {
            in_word = false;
            if !c.is_whitespace() {
                n += 1;
            }
        }
    }
    n
}

/// Sentences: text cut after `.`, `!`, `?` (kept) and at line breaks (dropped), trimmed, empty
/// ones left out.
fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if matches!(c, '\n' | '.' | '!' | '?') {
            if c != '\n' {
                cur.push(c);
            }
            let t = cur.trim();
            if !t.is_empty() {
                out.push(t.to_owned());
            }
            cur.clear();
        } else {
            cur.push(c);
        }
    }
    let t = cur.trim();
    if !t.is_empty() {
        out.push(t.to_owned());
    }
    out
}

const BOILERPLATE: &[&str] = &[
    "copyright",
    "all rights reserved",
    "disclaimer",
    "terms of use",
    "privacy policy",
    "proprietary",
    "confidential",
    "trademark",
];

/// babysitter's density filter: keeps the highest-scoring sentences (longer is better, up to 40
/// tokens; boilerplate loses half a point; repeats are dropped) within a budget of
/// `max(80, round(tokens × (1 − reduction)))`, in their original order, joined by spaces. The
/// text itself when nothing fits.
pub fn density_filter(text: &str, reduction: f64) -> String {
    let all = sentences(text);
    if all.is_empty() {
        return text.to_owned();
    }
    let total = estimate_tokens(text) as f64;
    let budget = (total * (1.0 - reduction)).round().max(80.0);
    let mut seen = std::collections::HashSet::new();
    let mut scored: Vec<(usize, usize, f64)> = Vec::new();
    for (i, s) in all.iter().enumerate() {
        let lower = s.to_lowercase();
        let key = lower.split_whitespace().collect::<Vec<_>>().join(" ");
        if !seen.insert(key) {
            continue;
        }
        let tokens = estimate_tokens(s);
        let boiler = BOILERPLATE.iter().any(|b| lower.contains(b));
        let score = tokens.min(40) as f64 / 40.0 - if boiler { 0.5 } else { 0.0 };
        scored.push((i, tokens, score));
    }
    // Stable, highest score first: equal scores keep document order.
    scored.sort_by(|a, b| b.2.total_cmp(&a.2));
    let mut kept = Vec::new();
    let mut used = 0usize;
    for (i, tokens, _) in scored {
        if kept.len() >= 500 {
            break;
        }
        if (used + tokens) as f64 <= budget {
            kept.push(i);
            used += tokens;
        }
    }
    if kept.is_empty() {
        return text.to_owned();
    }
    kept.sort_unstable();
    kept.iter()
        .map(|&i| all[i].as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The `user-prompt-submit` payload with its prompt filtered when the settings say so.
pub fn compress_prompt(payload: &mut Map<String, Value>, c: &Compression) {
    if !(c.enabled && c.prompt_enabled) {
        return;
    }
    if let Some(Value::String(prompt)) = payload.get_mut("prompt")
        && estimate_tokens(prompt) as f64 > c.prompt_threshold
    {
        *prompt = density_filter(prompt, 1.0 - c.prompt_keep);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_and_sentences() {
        assert_eq!(estimate_tokens("Hello, world! 42x"), 5);
        assert_eq!(estimate_tokens("  été—ok "), 3);
        assert_eq!(
            sentences("One. Two!\nthree? four"),
            ["One.", "Two!", "three?", "four"]
        );
    }

    #[test]
    fn density_filter_keeps_long_sentences_in_order_within_budget() {
        // 30 distinct sentences of 10 tokens, a repeated short one and boilerplate: the budget is
        // 78 % of the tokens, boilerplate goes first.
        let mut text = String::new();
        for i in 0..30 {
            text.push_str(&format!(
                "Sentence number {i} talks about the build in detail. "
            ));
            text.push_str("Ok. ");
        }
        text.push_str("Copyright notice here for the whole document and more words. ");
        let out = density_filter(&text, 1.0 - 0.78);
        let budget = (estimate_tokens(&text) as f64 * 0.78).round();
        assert!(estimate_tokens(&out) as f64 <= budget);
        // Repeats count once; short sentences only fill what the long ones leave.
        assert!(out.matches("Ok.").count() <= 1, "{out}");
        assert!(out.matches("Sentence number").count() >= 28, "{out}");
        assert!(!out.contains("Copyright"));
        let first = out.find("number 0 ").unwrap();
        let second = out.find("number 1 ").unwrap();
        assert!(first < second, "document order");
        // Nothing fits the budget of a single huge sentence: the text comes back unchanged.
        let long = "word ".repeat(200);
        assert_eq!(density_filter(&long, 0.9), long);
    }

    #[test]
    fn settings_merge_files_then_environment() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let cwd = dir.path().join("cwd");
        std::fs::create_dir_all(home.join(".a5c")).unwrap();
        std::fs::create_dir_all(cwd.join(".a5c")).unwrap();
        std::fs::write(
            home.join(".a5c/compression.config.json"),
            r#"{"layers":{"userPromptHook":{"threshold":10}}}"#,
        )
        .unwrap();
        std::fs::write(
            cwd.join(".a5c/compression.config.json"),
            r#"{"layers":{"commandOutputHook":{"excludeCommands":["git"]}}}"#,
        )
        .unwrap();
        let env = EnvMap::new();
        let c = Compression::load(&env, &cwd, Some(&home));
        assert!(c.enabled && c.prompt_enabled && c.commands_enabled);
        assert_eq!(c.prompt_threshold, 10.0);
        assert_eq!(c.prompt_keep, 0.78);
        assert_eq!(c.commands_excluded, ["git"]);
        let env = EnvMap::new().with("BABYSITTER_COMPRESSION_COMMANDS", "no");
        assert!(!Compression::load(&env, &cwd, Some(&home)).commands_enabled);
        let env = EnvMap::new()
            .with("BABYSITTER_COMPRESSION_ENABLED", "0")
            .with("BABYSITTER_COMPRESSION_USER_PROMPT", "1");
        let c = Compression::load(&env, &cwd, Some(&home));
        assert!(!c.enabled && !c.prompt_enabled && !c.commands_enabled);
    }
}
