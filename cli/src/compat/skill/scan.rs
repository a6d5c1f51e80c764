//! What `skill:discover` reads from disk (the reference's `skill/discoveryLocal.ts`): `SKILL.md`
//! and `AGENT.md` front matter under a directory tree, process files (`*.js`) of a directory,
//! the run's domain, and the per-run cache in `$TMPDIR/babysitter-skill-cache`.
//!
//! Directory entries are read in name order (the reference takes the operating system's order,
//! which differs between machines and so changes which 50 files, and which 30 entries, win).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

/// At most this many `SKILL.md` / `AGENT.md` files are read per tree.
const MAX_FILES: usize = 50;
/// How deep a tree is searched.
const MAX_DEPTH: usize = 5;

/// Entries of `dir` in name order: (name, path, is_dir, is_file).
fn entries(dir: &Path) -> Vec<(String, PathBuf, bool, bool)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut out: Vec<(String, PathBuf, bool, bool)> = rd
        .filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let t = e.file_type().ok()?;
            Some((name, e.path(), t.is_dir(), t.is_file()))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// Every file named `target` under `dir` (hidden directories skipped), depth first.
fn find(dir: &Path, target: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, target: &str, depth: usize, out: &mut Vec<PathBuf>) {
        if depth > MAX_DEPTH {
            return;
        }
        for (name, path, is_dir, is_file) in entries(dir) {
            if is_file && name == target {
                out.push(path);
            } else if is_dir && !name.starts_with('.') {
                walk(&path, target, depth + 1, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, target, 0, &mut out);
    out
}

/// The `key: value` lines of the first `---` block (quotes stripped, empty values dropped).
fn front_matter(content: &str) -> Map<String, Value> {
    let mut fields = Map::new();
    let mut inside = false;
    for line in content.split('\n') {
        let t = line.trim();
        if t == "---" {
            if inside {
                break;
            }
            inside = true;
            continue;
        }
        if !inside || t.is_empty() || t.starts_with("- ") {
            continue;
        }
        let Some(colon) = t.find(':').filter(|&i| i > 0) else {
            continue;
        };
        let key = t[..colon].trim();
        let mut value = t[colon + 1..].trim();
        let quoted = value.len() >= 2
            && ((value.starts_with('"') && value.ends_with('"'))
                || (value.starts_with('\'') && value.ends_with('\'')));
        if quoted {
            value = &value[1..value.len() - 1];
        }
        if !value.is_empty() {
            fields.insert(key.to_owned(), json!(value));
        }
    }
    fields
}

/// The first `n` characters.
pub fn prefix(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The skills (`SKILL.md`) or agents (`AGENT.md`) under `dir`, each `{name, description,
/// role? (agents), category, source, file}`.
pub fn scan(dir: &Path, agents: bool, source: &str) -> Vec<Value> {
    let target = if agents { "AGENT.md" } else { "SKILL.md" };
    let mut out = Vec::new();
    for file in find(dir, target).into_iter().take(MAX_FILES) {
        let Ok(content) = std::fs::read_to_string(&file) else {
            continue;
        };
        let f = front_matter(&content);
        let get = |k: &str| f.get(k).and_then(Value::as_str).unwrap_or_default();
        if get("name").is_empty() {
            continue;
        }
        let mut m = Map::new();
        m.insert("name".into(), json!(get("name")));
        m.insert("description".into(), json!(prefix(get("description"), 80)));
        if agents && !get("role").is_empty() {
            m.insert("role".into(), json!(get("role")));
        }
        let category = if get("category").is_empty() {
            get("domain")
        } else {
            get("category")
        };
        m.insert("category".into(), json!(category));
        m.insert("source".into(), json!(source));
        m.insert("file".into(), json!(file.display().to_string()));
        out.push(Value::Object(m));
    }
    out
}

/// The process files (`*.js`) directly in `dir`: `{name, category, source, file}`.
pub fn processes(dir: &Path, category: &str, source: &str) -> Vec<Value> {
    entries(dir)
        .into_iter()
        .filter(|(name, _, _, is_file)| *is_file && name.ends_with(".js"))
        .map(|(name, path, _, _)| {
            json!({
                "name": name.trim_end_matches(".js"), "category": category,
                "source": source, "file": path.display().to_string(),
            })
        })
        .collect()
}

/// The non-hidden subdirectories of `dir`, in name order.
pub fn subdirs(dir: &Path) -> Vec<(String, PathBuf)> {
    entries(dir)
        .into_iter()
        .filter(|(name, _, is_dir, _)| *is_dir && !name.starts_with('.'))
        .map(|(name, path, _, _)| (name, path))
        .collect()
}

/// `specializations/<name>` in a path.
pub fn specialization(path: &str) -> Option<String> {
    let normalized = path.replace('\\', "/");
    let rest = &normalized[normalized.find("specializations/")? + "specializations/".len()..];
    let name = rest.split('/').next().unwrap_or_default();
    (!name.is_empty()).then(|| name.to_owned())
}

/// The run's domain: the first `domain|category|specialization` word of the first `*.js` file
/// in its directory, lowercased (`detectRunDomain`).
pub fn run_domain(run_dir: &Path) -> String {
    let Some((_, js, _, _)) = entries(run_dir)
        .into_iter()
        .find(|(name, _, _, _)| name.ends_with(".js"))
    else {
        return String::new();
    };
    let Ok(content) = std::fs::read_to_string(js) else {
        return String::new();
    };
    domain_word(&content).unwrap_or_default()
}

/// `/(?:domain|category|specialization)[:\s]*["']?([a-z-]+)/i`, lowercased.
fn domain_word(content: &str) -> Option<String> {
    let lower = content.to_ascii_lowercase();
    let bytes = lower.as_bytes();
    let mut from = 0;
    while from < bytes.len() {
        let (at, word) = ["domain", "category", "specialization"]
            .iter()
            .filter_map(|w| lower[from..].find(w).map(|i| (from + i, *w)))
            .min_by_key(|(i, _)| *i)?;
        let mut i = at + word.len();
        while i < bytes.len() && (bytes[i] == b':' || bytes[i].is_ascii_whitespace()) {
            i += 1;
        }
        if i < bytes.len() && (bytes[i] == b'"' || bytes[i] == b'\'') {
            i += 1;
        }
        let start = i;
        while i < bytes.len() && (bytes[i].is_ascii_lowercase() || bytes[i] == b'-') {
            i += 1;
        }
        if i > start {
            return Some(lower[start..i].to_owned());
        }
        from = at + 1;
    }
    None
}

/// The cache files of a run (`<tmp>/babysitter-skill-cache/<runId|default>.{json,summary}`).
pub fn cache_paths(tmp: &Path, run_id: &str) -> (PathBuf, PathBuf) {
    let dir = tmp.join("babysitter-skill-cache");
    let id = if run_id.is_empty() { "default" } else { run_id };
    (
        dir.join(format!("{id}.json")),
        dir.join(format!("{id}.summary")),
    )
}

/// A cache entry younger than `ttl_secs`: `{skills, agents, summary, timestamp}`.
pub fn read_cache(path: &Path, ttl_secs: u64, now_ms: i64) -> Option<Value> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()?;
    v.get("agents")?.as_array()?;
    let age_ms = now_ms - v.get("timestamp")?.as_f64()? as i64;
    (age_ms < (ttl_secs as i64) * 1000).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_and_domain() {
        let f = front_matter(
            "---\nname: \"x\"\ndescription: 'd: e'\n- item: no\nempty:\n---\nname: later\n",
        );
        assert_eq!(
            f,
            json!({"name": "x", "description": "d: e"})
                .as_object()
                .cloned()
                .unwrap()
        );
        assert_eq!(
            domain_word("const x = 1;\n// Category: 'Web-Dev' more"),
            Some("web-dev".into())
        );
        assert_eq!(
            domain_word("domain = 42; specialization: ml"),
            Some("ml".into())
        );
        assert_eq!(domain_word("nothing here"), None);
        assert_eq!(
            specialization("/lib/specializations/web/x.js"),
            Some("web".into())
        );
        assert_eq!(specialization("/lib/other/x.js"), None);
    }
}
