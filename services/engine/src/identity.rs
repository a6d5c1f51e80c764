//! Babysitter's effect identity, reproduced bit for bit (spec §3.5, §3.7, §3.8, §4.4; quirks
//! F1–F3).
//!
//! A babysitter run is resumed by re-executing the process from the start and looking every
//! `ctx.task` call up in the journal by its invocation key. The key is built from the task id, the
//! label, a hash of the argument *shape* and the call order, and the shape hash in turn depends on
//! JavaScript's `String.prototype.localeCompare` (the ICU root collation, not byte order) and on
//! the order in which JavaScript enumerates an object's keys. A single differing byte makes every
//! call of a run written by the reference look new, so resumption silently breaks; that is why
//! these rules live here, as small pure functions (no IO, no JS engine) checked against the
//! reference's golden vectors.
//!
//! Division of labour: the engine's JS side computes argument shapes of live JS values (it alone
//! sees `undefined`, functions and bigints) and calls into these functions for collation and
//! hashing; the Rust side uses [`key_sorted_clone`] and [`task_json`] to write `task.json` /
//! `result.json` exactly as the reference does. [`shape_of`] is the same shape rule over JSON
//! values, for Rust-side callers and tests.

use std::cmp::Ordering;
use std::sync::LazyLock;

use icu_collator::CollatorBorrowed;
use icu_collator::options::CollatorOptions;
use icu_locale_core::locale;
use serde_json::{Map, Value};
use sha1::Sha1;
use sha2::{Digest, Sha256};

mod task_json;

pub use task_json::{TASK_SCHEMA_VERSION, TaskInputs, TaskJsonError, TaskJsonIds, task_json};

#[cfg(test)]
mod tests;

/// Built-in task id of `ctx.breakpoint` effects.
pub const BREAKPOINT_TASK_ID: &str = "__sdk.breakpoint";
/// Built-in task id of `ctx.sleepUntil` effects.
pub const SLEEP_TASK_ID: &str = "__sdk.sleep";
/// Built-in task id of `ctx.orchestratorTask` effects.
pub const ORCHESTRATOR_TASK_ID: &str = "__sdk.orchestratorTask";
/// Built-in task id of `ctx.subprocess` effects.
pub const SUBPROCESS_TASK_ID: &str = "__sdk.subprocess";

/// Number of hex characters of the SHA-256 shape digest kept in a step id.
const SHAPE_HASH_LEN: usize = 12;
/// Number of hex characters of the SHA-1 digest kept in a parallel group id.
const PARALLEL_GROUP_ID_LEN: usize = 16;

/// The collator behind `localeCompare` in Node with its default locale (en-US): en has no
/// tailoring, so this is the CLDR root collation with default options (tertiary strength,
/// non-ignorable punctuation, no numeric ordering, no case-first).
static COLLATOR: LazyLock<CollatorBorrowed<'static>> = LazyLock::new(|| {
    CollatorBorrowed::try_new(locale!("en-US").into(), CollatorOptions::default())
        .expect("compiled ICU collation data covers en-US")
});

/// What `a.localeCompare(b)` returns in Node (ICU, default locale en-US = root collation).
///
/// Strings the collation treats as equal (canonically equivalent forms, differences only in
/// completely ignorable characters) compare [`Ordering::Equal`]; JS sorts are stable, so such ties
/// keep their input order.
///
/// Known differences from Node (checked against Node 20.20.2 with ICU 78.2; identical on thousands
/// of random keys from every other script, symbols, emoji and combining marks):
/// - Han ideographs: Node's full ICU data sorts them in UAX #38 radical-stroke order (the
///   "unihan" root), ICU4X's compiled data uses the smaller "implicithan" root (largely code point
///   order), so keys containing Han characters may order differently (about 1 in 20 adjacent pairs
///   of random CJK Unified Ideographs).
/// - Code points unassigned in Node's Unicode version (17) but assigned in ICU4X's (18).
///
/// Matching those would need ICU4X data generated from ICU 78 with the unihan root. Note that the
/// reference itself gives different orders for them on Node builds with other ICU versions.
pub fn locale_compare(a: &str, b: &str) -> Ordering {
    ascii_alphanumeric_compare(a, b).unwrap_or_else(|| COLLATOR.compare(a, b))
}

/// The root collation where it is simple, for the keys most objects have: strings of ASCII
/// letters and digits (`None` for any other string). Digits sort before letters, letters
/// alphabetically ignoring case, a prefix before its extensions; only then does case count, at
/// the first position where it differs, lowercase first. Checked against the collator itself
/// (tests); it saves a collation-element walk per comparison in every key sort.
fn ascii_alphanumeric_compare(a: &str, b: &str) -> Option<Ordering> {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if !a.iter().chain(b).all(u8::is_ascii_alphanumeric) {
        return None;
    }
    let primary = a
        .iter()
        .map(u8::to_ascii_lowercase)
        .cmp(b.iter().map(u8::to_ascii_lowercase));
    if primary != Ordering::Equal {
        return Some(primary);
    }
    let first_case_difference = a.iter().zip(b).find(|(x, y)| x != y);
    Some(match first_case_difference {
        Some((x, _)) if x.is_ascii_lowercase() => Ordering::Less,
        Some(_) => Ordering::Greater,
        None => Ordering::Equal,
    })
}

/// Whether JS treats `key` as an array index when it is an object property name: a canonical
/// decimal integer (no sign, no leading zero except `"0"` itself) below 2^32 − 1. Such keys are
/// enumerated before all others, in ascending numeric order, whatever their insertion order.
pub fn is_array_index(key: &str) -> bool {
    const MAX_INDEX: u64 = (1 << 32) - 2;
    let bytes = key.as_bytes();
    match bytes {
        [] => false,
        [b'0'] => true,
        [b'0', ..] => false,
        _ if bytes.len() > 10 || !bytes.iter().all(u8::is_ascii_digit) => false,
        _ => key.parse::<u64>().is_ok_and(|n| n <= MAX_INDEX),
    }
}

/// The order in which JS enumerates an object after its keys were sorted with
/// `(a, b) => a.localeCompare(b)` and re-inserted into a fresh object: array-index keys first in
/// ascending numeric order, then the rest in `localeCompare` order (ties keep input order).
pub fn js_sorted_keys<'a>(keys: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let mut keys: Vec<&str> = keys.into_iter().collect();
    keys.sort_by(|a, b| js_key_order(a, b));
    keys
}

/// The order of [`js_sorted_keys`] (a stable sort by it): array indices first, in numeric order
/// (canonical indices: length first, then bytes), then the other keys by [`locale_compare`].
fn js_key_order(a: &str, b: &str) -> Ordering {
    match (is_array_index(a), is_array_index(b)) {
        (true, true) => a.len().cmp(&b.len()).then_with(|| a.cmp(b)),
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => locale_compare(a, b),
    }
}

/// Deep clone with every object's keys in [`js_sorted_keys`] order; arrays keep their order. This
/// is the reference's `stableClone`, used for `task.json` and `result.json`.
///
/// One deliberate difference: JS assignment of a `"__proto__"` key sets the clone's prototype
/// instead of a property, so the reference silently drops such keys; they are kept here (no data
/// loss, and nothing reads them back). [`shape_of`] does drop them, because identity must match.
pub fn key_sorted_clone(v: &Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.iter().map(key_sorted_clone).collect()),
        Value::Object(map) => Value::Object(
            js_sorted_keys(map.keys().map(String::as_str))
                .into_iter()
                .map(|key| (key.to_owned(), key_sorted_clone(&map[key])))
                .collect(),
        ),
        scalar => scalar.clone(),
    }
}

/// [`key_sorted_clone`] of a value the caller gives up: its keys and leaves are moved, not
/// copied.
pub fn key_sorted(v: Value) -> Value {
    match v {
        Value::Array(items) => Value::Array(items.into_iter().map(key_sorted).collect()),
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|(a, _), (b, _)| js_key_order(a, b));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, key_sorted(v)))
                    .collect(),
            )
        }
        scalar => scalar,
    }
}

/// Whether `c` is removed by JS `String.prototype.trim` (WhiteSpace and LineTerminator). This is
/// Unicode `White_Space` minus U+0085 (NEL), plus U+FEFF (BOM).
pub(crate) fn is_js_whitespace(c: char) -> bool {
    (c.is_whitespace() && c != '\u{85}') || c == '\u{feff}'
}

/// JS `String.prototype.trim`.
pub(crate) fn js_trim(s: &str) -> &str {
    s.trim_matches(is_js_whitespace)
}

/// Replaces every maximal run of characters for which `keep` is false with one `-`.
fn replace_runs(s: &str, keep: impl Fn(char) -> bool) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_run = false;
    for c in s.chars() {
        if keep(c) {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('-');
            in_run = true;
        }
    }
    out
}

/// One segment of a derived step id (`normalizeKeyPart`): JS-trim, replace every maximal run of
/// characters outside `[A-Za-z0-9_-]` with a single `-`; an empty result becomes `"default"`.
pub fn normalize_segment(s: &str) -> String {
    let out = replace_runs(js_trim(s), |c| {
        c.is_ascii_alphanumeric() || c == '_' || c == '-'
    });
    if out.is_empty() {
        "default".to_owned()
    } else {
        out
    }
}

/// The argument shape of a JSON value (`stableNormalizeShape`): `None` (JS `undefined`) →
/// `"undefined"`, `null` → `"null"`, scalars → their `typeof`, arrays → arrays of shapes, objects
/// → objects with [`js_sorted_keys`] order and shape values.
///
/// As in the reference, an object key `"__proto__"` never appears in a shape (JS assignment of it
/// sets the prototype instead). JS-only values (functions, bigints, `undefined` inside objects)
/// cannot occur in JSON; the engine's JS side shapes those itself.
pub fn shape_of(v: Option<&Value>) -> Value {
    let Some(v) = v else {
        return Value::from("undefined");
    };
    match v {
        Value::Null => Value::from("null"),
        Value::Bool(_) => Value::from("boolean"),
        Value::Number(_) => Value::from("number"),
        Value::String(_) => Value::from("string"),
        Value::Array(items) => {
            Value::Array(items.iter().map(|item| shape_of(Some(item))).collect())
        }
        Value::Object(map) => {
            let mut shape = Map::with_capacity(map.len());
            for key in js_sorted_keys(map.keys().map(String::as_str)) {
                if key != "__proto__" {
                    shape.insert(key.to_owned(), shape_of(map.get(key)));
                }
            }
            Value::Object(shape)
        }
    }
}

/// Compact JSON of [`shape_of`] (what JS `JSON.stringify(shape)` produces: a shape contains only
/// strings, arrays and objects, whose compact forms agree between serde_json and JS).
pub fn shape_json(v: Option<&Value>) -> String {
    shape_of(v).to_string()
}

/// Lowercase hex SHA-256 of `data`.
fn sha256_hex(data: &str) -> String {
    babysitter_journal::event::hex_lower(&Sha256::digest(data.as_bytes()))
}

/// The shape hash of a step id: the first 12 lowercase hex characters of SHA-256 of the compact
/// shape JSON (as produced by [`shape_json`] or by JS `JSON.stringify`).
pub fn shape_hash(shape_json: &str) -> String {
    let mut hash = sha256_hex(shape_json);
    hash.truncate(SHAPE_HASH_LEN);
    hash
}

/// The base of a derived step id, `normalize(taskId).normalize(label ?? "default").shapeHash`; it
/// is also the key of the per-iteration occurrence counter.
pub fn step_base(task_id: &str, label: Option<&str>, shape_hash: &str) -> String {
    format!(
        "{}.{}.{shape_hash}",
        normalize_segment(task_id),
        normalize_segment(label.unwrap_or("default"))
    )
}

/// A derived step id: the `n`-th (from 0) call with this base in the current iteration.
pub fn step_id(base: &str, n: u32) -> String {
    format!("{base}.{n}")
}

/// `processId:stepId:taskId`, the key the effect index is consulted by.
pub fn invocation_key(process_id: &str, step_id: &str, task_id: &str) -> String {
    format!("{process_id}:{step_id}:{task_id}")
}

/// Lowercase hex SHA-256 of an invocation key (the `invocationHash` of `EFFECT_REQUESTED`).
pub fn invocation_hash(invocation_key: &str) -> String {
    sha256_hex(invocation_key)
}

/// The legacy (0.0.187) step id of the `k`-th (from 1) non-keyed task call: `S` + at least six
/// digits.
pub fn legacy_step_id(k: u32) -> String {
    format!("S{k:06}")
}

/// Whether an invocation key may hold a legacy step id (one of its `:`-separated parts is `S`
/// and six or more digits): only then can the legacy fallback lookup find anything.
pub fn may_be_legacy_key(invocation_key: &str) -> bool {
    invocation_key.split(':').any(|part| {
        part.len() >= 7 && part.starts_with('S') && part[1..].bytes().all(|b| b.is_ascii_digit())
    })
}

/// The legacy fallback key `processId:S00000k:taskId`, under which 0.0.187 runs recorded effects.
pub fn legacy_invocation_key(process_id: &str, k: u32, task_id: &str) -> String {
    invocation_key(process_id, &legacy_step_id(k), task_id)
}

/// The auto-generated group id of a parallel batch of more than one action: the first 16 hex
/// characters of SHA-1 over `key + "|"` for each action in order (the reference falls back to the
/// effect id for an action without invocation key; pass that in its place).
pub fn parallel_group_id(invocation_keys: &[&str]) -> String {
    let mut hasher = Sha1::new();
    for key in invocation_keys {
        hasher.update(key.as_bytes());
        hasher.update(b"|");
    }
    let mut id = hex::encode(hasher.finalize());
    id.truncate(PARALLEL_GROUP_ID_LEN);
    id
}

/// The default breakpoint id for a label (`slugifyBreakpointId`): lowercase, replace runs of
/// characters outside `[a-z0-9.]` with `-`, strip leading and trailing `-`; empty → `"breakpoint"`.
pub fn breakpoint_slug(label: &str) -> String {
    let lowered = label.to_lowercase();
    let replaced = replace_runs(&lowered, |c| {
        c.is_ascii_lowercase() || c.is_ascii_digit() || c == '.'
    });
    // Runs are already single dashes, so the reference's final collapse of `-+` is a no-op.
    let slug = replaced.trim_matches('-');
    if slug.is_empty() {
        "breakpoint".to_owned()
    } else {
        slug.to_owned()
    }
}

/// The occurrence-counter base of a breakpoint, `__sdk.breakpoint.<breakpointId>`; it shares the
/// per-iteration counter map with [`step_base`] bases.
pub fn breakpoint_base(breakpoint_id: &str) -> String {
    format!("{BREAKPOINT_TASK_ID}.{breakpoint_id}")
}

/// The explicit step id of a breakpoint: the bare [`breakpoint_base`] for the first occurrence in
/// an iteration (compatible with runs recorded before the counter existed), then `<base>.1`,
/// `<base>.2`, …
pub fn breakpoint_step_id(breakpoint_id: &str, occurrence: u32) -> String {
    let base = breakpoint_base(breakpoint_id);
    if occurrence == 0 {
        base
    } else {
        format!("{base}.{occurrence}")
    }
}
