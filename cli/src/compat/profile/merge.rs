//! `profile:merge`'s rules (the reference's `mergeUserProfile` / `mergeProjectProfile`), written
//! as data: for each field, when an update applies (the key is present, or truthy) and how it
//! combines with the existing value — replaced, object-spread, arrays merged by a key field, or
//! arrays of primitives de-duplicated. Fields the rules do not name are not merged (as the
//! reference); `version` is incremented and `updatedAt` set.
//!
//! Where the reference would throw on a shape it does not expect (an array field that is not an
//! array), the value counts as empty instead.

use serde_json::{Map, Value};

use crate::compat::output::js_truthy;

/// When a field's update applies.
#[derive(Clone, Copy)]
enum When {
    /// `updates.x !== undefined`.
    Present,
    /// `if (updates.x)`.
    Truthy,
    /// `if (existing.x && updates.x)`.
    BothTruthy,
}

/// How a field's update combines with the existing value.
#[derive(Clone, Copy)]
enum How {
    Replace,
    /// `{...existing, ...update}`.
    Spread,
    /// `mergeArrayByKey(existing ?? [], update, key)`.
    ByKey(&'static str),
    /// `[...new Set([...existing ?? [], ...update])]`.
    Dedup,
    /// For each key of the update: `{...existing[key], ...update[key]}`.
    SpreadEach,
    /// `{...existing, ...update}` (or `{...existing}` when `false`), then the listed sub-fields.
    Nested(bool, &'static [Field]),
}

type Field = (&'static str, When, How);

use How::*;
use When::*;

const USER: &[Field] = &[
    ("name", Present, Replace),
    ("createdAt", Present, Replace),
    ("specialties", Present, ByKey("domain")),
    ("expertiseLevels", Present, SpreadEach),
    ("goals", Present, ByKey("id")),
    (
        "preferences",
        Present,
        Nested(true, &[("workingHours", BothTruthy, Spread)]),
    ),
    (
        "toolPreferences",
        Present,
        Nested(
            true,
            &[
                ("packageManagers", Truthy, Dedup),
                ("languages", Truthy, Dedup),
            ],
        ),
    ),
    (
        "breakpointTolerance",
        Present,
        Nested(
            true,
            &[
                ("perCategory", Truthy, Spread),
                ("alwaysBreakOn", Truthy, Dedup),
            ],
        ),
    ),
    ("communicationStyle", Present, Spread),
    ("socialProfiles", Present, ByKey("platform")),
    (
        "experience",
        Present,
        Nested(
            true,
            &[
                ("industries", Truthy, Dedup),
                ("previousRoles", Truthy, ByKey("title")),
                ("education", Truthy, ByKey("institution")),
                ("certifications", Truthy, Dedup),
            ],
        ),
    ),
    ("externalIntegrations", Present, ByKey("service")),
    ("installedPlugins", Present, Dedup),
    ("installedSkills", Present, Dedup),
    ("installedAgents", Present, Dedup),
];

const PROJECT: &[Field] = &[
    ("projectName", Present, Replace),
    ("description", Present, Replace),
    ("createdAt", Present, Replace),
    ("goals", Present, ByKey("id")),
    (
        "techStack",
        Present,
        Nested(
            false,
            &[
                ("languages", Present, ByKey("name")),
                ("frameworks", Present, ByKey("name")),
                ("databases", Present, ByKey("name")),
                ("infrastructure", Present, ByKey("name")),
                ("buildTools", Present, Dedup),
                ("packageManagers", Present, Dedup),
            ],
        ),
    ),
    (
        "architecture",
        Present,
        Nested(
            true,
            &[
                ("modules", Present, ByKey("name")),
                ("entryPoints", Present, Dedup),
            ],
        ),
    ),
    ("team", Present, ByKey("name")),
    ("workflows", Present, ByKey("name")),
    ("processes", Present, ByKey("id")),
    // `tools`: the three lists merged by name, any other key replaced (handled in `apply`).
    ("tools", Present, Nested(false, TOOLS)),
    ("services", Present, ByKey("name")),
    ("externalIntegrations", Present, ByKey("service")),
    (
        "cicd",
        Present,
        Nested(
            true,
            &[
                ("configPaths", Present, Dedup),
                ("pipelines", Present, ByKey("name")),
                (
                    "babysitterIntegration",
                    Present,
                    Nested(
                        true,
                        &[("triggerOn", Truthy, Dedup), ("processIds", Truthy, Dedup)],
                    ),
                ),
            ],
        ),
    ),
    ("painPoints", Present, ByKey("id")),
    ("bottlenecks", Present, ByKey("id")),
    (
        "conventions",
        Present,
        Nested(
            false,
            &[
                ("naming", Present, Spread),
                ("git", Present, Spread),
                ("codeStyle", Present, Spread),
                ("importOrder", Present, Dedup),
                ("errorHandling", Present, Replace),
                ("testingConventions", Present, Replace),
                ("additionalRules", Present, Dedup),
            ],
        ),
    ),
    ("repositories", Present, ByKey("name")),
    ("claudeMdInstructions", Present, Dedup),
    ("installedSkills", Present, Dedup),
    ("installedAgents", Present, Dedup),
    ("installedProcesses", Present, Dedup),
];

const TOOLS: &[Field] = &[
    ("linting", Present, ByKey("name")),
    ("testing", Present, ByKey("name")),
    ("formatting", Present, ByKey("name")),
];

fn object(v: Option<&Value>) -> Map<String, Value> {
    match v {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    }
}

fn array(v: Option<&Value>) -> &[Value] {
    match v {
        Some(Value::Array(a)) => a,
        _ => &[],
    }
}

fn spread(existing: Option<&Value>, update: Option<&Value>) -> Map<String, Value> {
    let mut out = object(existing);
    out.extend(object(update));
    out
}

/// A key for JavaScript's `Map` / `Set` identity: primitives by value, objects never equal.
fn identity(v: &Value) -> Option<String> {
    match v {
        Value::Object(_) | Value::Array(_) => None,
        other => Some(crate::compat::output::compact(other)),
    }
}

/// `mergeArrayByKey`: existing items with the key (others dropped), updates merged into the
/// item with the same key (`{...previous, ...item}`) or appended.
fn by_key(existing: &[Value], updates: &[Value], key: &str) -> Vec<Value> {
    let mut out: Vec<(Option<String>, Value)> = Vec::new();
    let key_of = |item: &Value| item.get(key).map(|k| (identity(k), k.clone()));
    for item in existing {
        if let Some((id, _)) = key_of(item) {
            match out.iter_mut().find(|(k, _)| id.is_some() && *k == id) {
                Some(slot) => slot.1 = item.clone(),
                None => out.push((id, item.clone())),
            }
        }
    }
    for item in updates {
        match key_of(item) {
            Some((id, _)) => match out.iter_mut().find(|(k, _)| id.is_some() && *k == id) {
                Some(slot) => slot.1 = Value::Object(spread(Some(&slot.1), Some(item))),
                None => out.push((id, item.clone())),
            },
            None => out.push((None, item.clone())),
        }
    }
    out.into_iter().map(|(_, v)| v).collect()
}

fn dedup(existing: &[Value], updates: &[Value]) -> Vec<Value> {
    let mut seen = std::collections::HashSet::new();
    existing
        .iter()
        .chain(updates)
        .filter(|v| identity(v).is_none_or(|id| seen.insert(id)))
        .cloned()
        .collect()
}

fn apply(how: How, existing: Option<&Value>, update: &Value) -> Value {
    match how {
        Replace => update.clone(),
        Spread => Value::Object(spread(existing, Some(update))),
        ByKey(key) => Value::Array(by_key(array(existing), array(Some(update)), key)),
        Dedup => Value::Array(dedup(array(existing), array(Some(update)))),
        SpreadEach => {
            let mut out = object(existing);
            for (k, v) in object(Some(update)) {
                let merged = spread(existing.and_then(|e| e.get(&k)), Some(&v));
                out.insert(k, Value::Object(merged));
            }
            Value::Object(out)
        }
        Nested(with_update, fields) => {
            let mut out = if with_update {
                spread(existing, Some(update))
            } else {
                object(existing)
            };
            merge_fields(&mut out, existing, update, fields);
            // `tools`: then keys other than its three lists are replaced by the update's.
            if std::ptr::eq(fields, TOOLS) {
                for (k, v) in object(Some(update)) {
                    if !fields.iter().any(|(f, _, _)| *f == k) {
                        out.insert(k, v);
                    }
                }
            }
            Value::Object(out)
        }
    }
}

fn merge_fields(
    out: &mut Map<String, Value>,
    existing: Option<&Value>,
    update: &Value,
    fields: &[Field],
) {
    for &(name, when, how) in fields {
        let Some(u) = update.get(name) else {
            continue;
        };
        let e = existing.and_then(|e| e.get(name));
        let applies = match when {
            Present => true,
            Truthy => js_truthy(u),
            BothTruthy => js_truthy(u) && e.is_some_and(js_truthy),
        };
        if applies {
            out.insert(name.to_owned(), apply(how, e, u));
        }
    }
}

/// Which profile a command works on.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    User,
    Project,
}

/// The merged profile: `existing` with `updates` applied, `updatedAt` = `now`, `version` + 1
/// (`null` when the existing version is not a number, as JavaScript's `NaN`).
pub fn merge(
    kind: Kind,
    existing: &Map<String, Value>,
    updates: &Map<String, Value>,
    now: &str,
) -> Map<String, Value> {
    let existing_v = Value::Object(existing.clone());
    let mut out = existing.clone();
    let fields = match kind {
        Kind::User => USER,
        Kind::Project => PROJECT,
    };
    merge_fields(
        &mut out,
        Some(&existing_v),
        &Value::Object(updates.clone()),
        fields,
    );
    out.insert("updatedAt".into(), Value::String(now.to_owned()));
    let version = existing
        .get("version")
        .and_then(Value::as_f64)
        .map_or(Value::Null, |v| serde_json::json!(v + 1.0));
    out.insert("version".into(), version);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn user_merge_follows_the_reference_rules() {
        let existing = obj(json!({
            "name": "a", "version": 2,
            "specialties": [{"domain": "web", "yearsActive": 1}, {"noDomain": true}],
            "expertiseLevels": {"rust": {"level": "expert", "confidence": 0.5}},
            "preferences": {"verbosity": "normal", "workingHours": {"start": "9"}},
            "toolPreferences": {"languages": ["rust"]},
            "installedSkills": ["x"],
        }));
        let updates = obj(json!({
            "specialties": [{"domain": "web", "subdomains": ["css"]}, {"domain": "ml"}, {"free": 1}],
            "expertiseLevels": {"rust": {"confidence": 0.9}, "go": {"level": "novice"}},
            "preferences": {"workingHours": {"end": "17"}},
            "toolPreferences": {"languages": ["go", "rust"]},
            "installedSkills": ["y", "x"],
            "unknownField": 1,
        }));
        let m = merge(Kind::User, &existing, &updates, "T");
        assert_eq!(
            m["specialties"],
            json!([{"domain": "web", "yearsActive": 1, "subdomains": ["css"]}, {"domain": "ml"}, {"free": 1}])
        );
        assert_eq!(
            m["expertiseLevels"]["rust"],
            json!({"level": "expert", "confidence": 0.9})
        );
        assert_eq!(m["expertiseLevels"]["go"], json!({"level": "novice"}));
        assert_eq!(
            m["preferences"],
            json!({"verbosity": "normal", "workingHours": {"start": "9", "end": "17"}})
        );
        assert_eq!(m["toolPreferences"]["languages"], json!(["rust", "go"]));
        assert_eq!(m["installedSkills"], json!(["x", "y"]));
        assert!(m.get("unknownField").is_none());
        assert_eq!(
            (m["version"].as_f64(), &m["updatedAt"]),
            (Some(3.0), &json!("T"))
        );
    }

    #[test]
    fn project_merge_tools_and_tech_stack() {
        let existing = obj(json!({
            "projectName": "p", "version": 1,
            "techStack": {"languages": [{"name": "ts"}], "buildTools": ["tsc"], "other": 1},
            "tools": {"linting": [{"name": "eslint"}], "custom": "a"},
        }));
        let updates = obj(json!({
            "techStack": {"languages": [{"name": "ts", "version": "5"}], "buildTools": ["vite", "tsc"], "ignored": 2},
            "tools": {"testing": [{"name": "vitest"}], "custom": "b"},
        }));
        let m = merge(Kind::Project, &existing, &updates, "T");
        assert_eq!(
            m["techStack"],
            json!({"languages": [{"name": "ts", "version": "5"}], "buildTools": ["tsc", "vite"], "other": 1})
        );
        assert_eq!(
            m["tools"],
            json!({"linting": [{"name": "eslint"}], "custom": "b", "testing": [{"name": "vitest"}]})
        );
        let no_version = merge(Kind::Project, &obj(json!({})), &obj(json!({})), "T");
        assert_eq!(no_version["version"], Value::Null);
    }
}
