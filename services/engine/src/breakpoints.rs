//! Breakpoint auto-approval, as babysitter computes it: the advisory `autoApproval` object of a
//! breakpoint's `task.json` (`{recommended, reason, matchedRule?, consecutiveApprovals,
//! blockedByPosture?, effectiveCategory?}`), from the user's rules in
//! `~/.a5c/breakpoint-approvals/rules.json` (`{schemaVersion, rules: [{id, pattern, action,
//! createdAt, createdBy, source?, note?}]}`), which the CLI's `breakpoint:*` commands edit.
//!
//! Precedence, highest first: the posture of the breakpoint id's category prefix (`destroy.*` and
//! `auth.*` are never auto-approved; `exec.*` needs an explicit rule), a `never-auto-approve`
//! rule, an `auto-approve` rule, the `autoApproveAfterN` threshold, else "prompt".
//!
//! A pattern is an id glob (`*` matches anything, dots included) optionally followed by
//! predicates: `deploy.*(tags contains 'prod' AND expert = 'sre')`.
//!
//! Fixed here (the reference's behaviour bugs): rules are edited under a lock (concurrent edits
//! lost rules) and a pattern is checked when a rule is added (a bad one, once saved, made every
//! evaluation fail); a rules file that is not JSON is an error naming the file, not a crash.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

pub const RULES_SCHEMA_VERSION: &str = "2026.01.breakpoint-rules-v1";

#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    #[error("cannot {op} {path}: {source}")]
    Io {
        op: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not a breakpoint rules file: {reason}")]
    Malformed { path: PathBuf, reason: String },
    #[error("rule {rule}: {reason}")]
    BadRule { rule: String, reason: String },
}

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> RulesError + 'a {
    move |source| RulesError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

/// The rules of the file at `path` (none when it does not exist; a `rules` that is not a list
/// counts as none, as in the reference). Entries that are not objects are skipped.
pub fn read_rules(path: &Path) -> Result<Vec<Map<String, Value>>, RulesError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("read", path)(e)),
    };
    let doc: Value = serde_json::from_slice(&bytes).map_err(|e| RulesError::Malformed {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    Ok(match doc.get("rules") {
        Some(Value::Array(rules)) => rules
            .iter()
            .filter_map(|r| r.as_object().cloned())
            .collect(),
        _ => Vec::new(),
    })
}

/// Reads the rules, lets `edit` change them and writes them back, holding `<path>.lock` the
/// whole time (concurrent edits queue instead of losing each other's rules). The file is
/// replaced atomically, durable before this returns.
pub fn update_rules<R>(
    path: &Path,
    edit: impl FnOnce(&mut Vec<Map<String, Value>>) -> Result<R, RulesError>,
) -> Result<R, RulesError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io("create", dir))?;
    let lock_path = path.with_extension("json.lock");
    let lock = File::create(&lock_path).map_err(io("create", &lock_path))?;
    lock.lock().map_err(io("lock", &lock_path))?;
    let mut rules = read_rules(path)?;
    let out = edit(&mut rules)?;
    let doc = json!({
        "schemaVersion": RULES_SCHEMA_VERSION,
        "rules": rules.into_iter().map(Value::Object).collect::<Vec<_>>(),
    });
    let mut text = babysitter_journal::node_json::to_string_pretty(&doc);
    text.push('\n');
    let tmp = path.with_extension(format!("json.tmp-{}", std::process::id()));
    let written = File::create(&tmp)
        .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
        .and_then(|()| std::fs::rename(&tmp, path))
        .and_then(|()| File::open(dir)?.sync_all());
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(io("write", path)(e));
    }
    Ok(out)
}

/// A parsed rule pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    glob: String,
    predicates: Vec<Predicate>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Predicate {
    /// `tags contains '<v>'`
    TagsContain(String),
    /// `expert = '<v>'`
    ExpertIs(String),
    /// Another attribute or operator: parses, never matches (as in the reference).
    Never,
}

impl Pattern {
    pub fn parse(raw: &str) -> Result<Pattern, String> {
        let trimmed = raw.trim();
        let Some(open) = trimmed.find('(') else {
            return Ok(Pattern {
                glob: trimmed.to_owned(),
                predicates: Vec::new(),
            });
        };
        let close = trimmed
            .rfind(')')
            .filter(|c| *c > open)
            .ok_or_else(|| format!("Invalid pattern: unmatched parenthesis in \"{raw}\""))?;
        let glob = trimmed[..open].trim().to_owned();
        let inner = trimmed[open + 1..close].trim();
        let predicates = if inner.is_empty() {
            Vec::new()
        } else {
            split_and(inner)
                .into_iter()
                .map(parse_predicate)
                .collect::<Result<_, _>>()?
        };
        Ok(Pattern { glob, predicates })
    }

    pub fn matches(&self, id: &str, tags: Option<&[Value]>, expert: Option<&str>) -> bool {
        glob_matches(&self.glob, id)
            && self.predicates.iter().all(|p| match p {
                Predicate::TagsContain(v) => {
                    tags.is_some_and(|t| t.iter().any(|x| x.as_str() == Some(v)))
                }
                Predicate::ExpertIs(v) => expert == Some(v.as_str()),
                Predicate::Never => false,
            })
    }
}

/// `str.split(/\s+AND\s+/i)`.
fn split_and(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let bytes = s.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i].is_ascii_whitespace() {
            let ws_start = i;
            while i < bytes.len() && bytes[i].is_ascii_whitespace() {
                i += 1;
            }
            if s[i..].len() >= 3 && s[i..i + 3].eq_ignore_ascii_case("and") {
                let mut j = i + 3;
                let after = j;
                while j < bytes.len() && bytes[j].is_ascii_whitespace() {
                    j += 1;
                }
                if j > after {
                    parts.push(&s[start..ws_start]);
                    start = j;
                    i = j;
                    continue;
                }
            }
        } else {
            i += 1;
        }
    }
    parts.push(&s[start..]);
    parts
}

/// `^(\w+)\s+(contains|=)\s+'([^']*)'$`.
fn parse_predicate(s: &str) -> Result<Predicate, String> {
    let t = s.trim();
    let bad =
        || format!("Invalid predicate: \"{t}\". Expected: attr contains 'value' or attr = 'value'");
    let attr_end = t
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .ok_or_else(bad)?;
    let (attr, rest) = t.split_at(attr_end);
    if attr.is_empty() || !rest.starts_with(|c: char| c.is_ascii_whitespace()) {
        return Err(bad());
    }
    let rest = rest.trim_start();
    let (op, rest) = if let Some(r) = rest.strip_prefix("contains") {
        ("contains", r)
    } else if let Some(r) = rest.strip_prefix('=') {
        ("=", r)
    } else {
        return Err(bad());
    };
    if !rest.starts_with(|c: char| c.is_ascii_whitespace()) {
        return Err(bad());
    }
    let value = rest
        .trim_start()
        .strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
        .filter(|v| !v.contains('\''))
        .ok_or_else(bad)?;
    Ok(match (attr, op) {
        ("tags", "contains") => Predicate::TagsContain(value.to_owned()),
        ("expert", "=") => Predicate::ExpertIs(value.to_owned()),
        _ => Predicate::Never,
    })
}

/// `*` matches any run of characters; everything else itself.
fn glob_matches(glob: &str, value: &str) -> bool {
    let parts: Vec<&str> = glob.split('*').collect();
    if parts.len() == 1 {
        return glob == value;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if value.len() < first.len() + last.len() || !value.starts_with(first) || !value.ends_with(last)
    {
        return false;
    }
    let mut rest = &value[first.len()..value.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(at) => rest = &rest[at + mid.len()..],
            None => return false,
        }
    }
    true
}

/// The posture of an action category: may it be auto-approved, does it need an explicit rule,
/// the least `autoApproveAfterN` (-1: never by count).
struct Posture {
    name: &'static str,
    allow: bool,
    explicit_rule: bool,
    min_after_n: i64,
}

fn category_of(breakpoint_id: &str) -> Option<&'static str> {
    let (prefix, _) = breakpoint_id.split_once('.')?;
    Some(match prefix {
        "read" => "read",
        "write" => "write",
        "exec" | "execute" => "execute",
        "destroy" | "delete" => "destroy",
        "net" | "network" => "network",
        "auth" | "cred" => "auth",
        _ => return None,
    })
}

fn posture(category: &str) -> Posture {
    let p = |name, allow, explicit_rule, min_after_n| Posture {
        name,
        allow,
        explicit_rule,
        min_after_n,
    };
    match category {
        "read" => p("permissive", true, false, 0),
        "write" | "network" => p("cautious", true, false, 3),
        "execute" => p("guarded", true, true, 5),
        _ => p("locked", false, true, -1),
    }
}

/// What a breakpoint is evaluated with.
#[derive(Debug, Clone, Copy, Default)]
pub struct BreakpointFacts<'a> {
    pub id: &'a str,
    pub tags: Option<&'a [Value]>,
    pub expert: Option<&'a str>,
    /// `autoApproveAfterN` (-1: disabled).
    pub auto_approve_after_n: i64,
}

/// The `autoApproval` object for a breakpoint (keys in the reference's order). A rule whose
/// pattern does not parse is an error, as it is for the reference.
pub fn evaluate(
    bp: &BreakpointFacts<'_>,
    rules: &[Map<String, Value>],
) -> Result<Map<String, Value>, RulesError> {
    let consecutive = 0i64;
    let category = category_of(bp.id);
    let posture = category.map(posture);
    let result = |recommended: bool, reason: String, rule: Option<&str>, blocked: bool| {
        let mut m = Map::new();
        m.insert("recommended".into(), recommended.into());
        m.insert("reason".into(), reason.into());
        if let Some(r) = rule {
            m.insert("matchedRule".into(), r.into());
        }
        m.insert("consecutiveApprovals".into(), consecutive.into());
        if blocked {
            m.insert("blockedByPosture".into(), true.into());
        }
        if let Some(c) = category {
            m.insert("effectiveCategory".into(), c.into());
        }
        m
    };
    let matching = |action: &str| -> Result<Option<String>, RulesError> {
        for rule in rules {
            if rule.get("action").and_then(Value::as_str) != Some(action) {
                continue;
            }
            let id = rule
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            let raw = rule.get("pattern").and_then(Value::as_str).unwrap_or("");
            let pattern = Pattern::parse(raw).map_err(|reason| RulesError::BadRule {
                rule: id.clone(),
                reason,
            })?;
            if pattern.matches(bp.id, bp.tags, bp.expert) {
                return Ok(Some(id));
            }
        }
        Ok(None)
    };
    let (cat, name) = (
        category.unwrap_or(""),
        posture.as_ref().map_or("", |p| p.name),
    );
    if let Some(p) = &posture {
        if !p.allow {
            let why =
                format!("Category '{cat}' requires explicit human approval (posture: {name})");
            return Ok(result(false, why, None, true));
        }
        if p.explicit_rule && matching("auto-approve")?.is_none() {
            let why = format!(
                "Category '{cat}' requires an explicit auto-approve rule (posture: {name})"
            );
            return Ok(result(false, why, None, true));
        }
    }
    if let Some(id) = matching("never-auto-approve")? {
        let why = format!("Blocked by never-auto-approve rule: {id}");
        return Ok(result(false, why, Some(&id), false));
    }
    if let Some(id) = matching("auto-approve")? {
        let why = format!("Matched auto-approve rule: {id}");
        return Ok(result(true, why, Some(&id), false));
    }
    let mut after_n = bp.auto_approve_after_n;
    match &posture {
        Some(p) if p.min_after_n == -1 => after_n = -1,
        Some(p) if after_n > 0 => after_n = after_n.max(p.min_after_n),
        _ => {}
    }
    if after_n > 0 && consecutive >= after_n {
        let why = format!(
            "Auto-approved after {consecutive} consecutive approvals (threshold: {after_n})"
        );
        return Ok(result(true, why, None, false));
    }
    Ok(result(
        false,
        "No matching auto-approval rule".into(),
        None,
        false,
    ))
}

/// A breakpoint TaskDef's `autoApproval`, the way the reference sets it when the TaskDef is
/// requested: only when `metadata.breakpointId` is a non-empty string (then replacing what the
/// TaskDef carried), from the rules at `rules` (none: no rules).
pub fn auto_approval_for(
    task_def: &Value,
    rules: Option<&Path>,
) -> Option<Result<Map<String, Value>, RulesError>> {
    let meta = task_def.get("metadata")?;
    let id = meta
        .get("breakpointId")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())?;
    let facts = BreakpointFacts {
        id,
        tags: meta
            .get("tags")
            .and_then(Value::as_array)
            .map(Vec::as_slice),
        expert: meta.get("expert").and_then(Value::as_str),
        auto_approve_after_n: meta
            .get("autoApproveAfterN")
            .and_then(Value::as_f64)
            .map_or(-1, |n| n as i64),
    };
    Some(
        rules
            .map_or_else(|| Ok(Vec::new()), read_rules)
            .and_then(|r| evaluate(&facts, &r)),
    )
}

#[cfg(test)]
mod tests;
