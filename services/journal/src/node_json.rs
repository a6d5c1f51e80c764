//! `JSON.stringify(value, null, 2)` exactly as JavaScript engines produce it.
//!
//! Babysitter's journal checksum is the SHA-256 of the event serialised by Node, so the bytes
//! must match Node's output for every value that can occur: number formatting (shortest
//! round-trip digits, `1e+21`, `-0` printed as `0`, integers beyond 2^53 printed as the double
//! they become), string escaping (only `"`, `\\` and C0 controls are escaped; non-ASCII, `/`,
//! DEL and U+2028 are emitted raw) and key order (insertion order, except that array-index-like
//! keys are enumerated first in ascending numeric order). `serde_json` with `preserve_order`
//! keeps insertion order; this module adds the rest.

use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

/// Serialises `value` as `JSON.stringify(value, null, 2)` does (without a trailing newline).
pub fn to_string_pretty(value: &Value) -> String {
    let mut out = String::with_capacity(256);
    write_value(&mut out, value, 0);
    out
}

/// `JSON.stringify(value, null, 2) + "\n"`, the form of every file babysitter writes.
pub fn to_file_string(value: &Value) -> String {
    let mut out = to_string_pretty(value);
    out.push('\n');
    out
}

/// [`to_file_string`] of an object with `members` in this order, without building the object
/// (the journal serialises every event's envelope around its borrowed `data`). No member name
/// may be an array index: those would be enumerated first.
pub fn object_to_file_string(members: &[(&str, &Value)]) -> String {
    debug_assert!(members.iter().all(|(k, _)| array_index(k).is_none()));
    if members.is_empty() {
        return "{}\n".to_owned();
    }
    let mut out = String::with_capacity(256);
    out.push_str("{\n");
    for (i, (key, value)) in members.iter().enumerate() {
        if i > 0 {
            out.push_str(",\n");
        }
        write_indent(&mut out, 1);
        write_string(&mut out, key);
        out.push_str(": ");
        write_value(&mut out, value, 1);
    }
    out.push_str("\n}\n");
    out
}

fn write_indent(out: &mut String, depth: usize) {
    const SPACES: &str = "                                                                ";
    let mut n = depth * 2;
    while n > SPACES.len() {
        out.push_str(SPACES);
        n -= SPACES.len();
    }
    out.push_str(&SPACES[..n]);
}

fn write_value(out: &mut String, value: &Value, depth: usize) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => write_number(out, n),
        Value::String(s) => write_string(out, s),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push_str("[\n");
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(",\n");
                }
                write_indent(out, depth + 1);
                write_value(out, item, depth + 1);
            }
            out.push('\n');
            write_indent(out, depth);
            out.push(']');
        }
        Value::Object(map) => write_object(out, map, depth),
    }
}

fn write_object(out: &mut String, map: &Map<String, Value>, depth: usize) {
    if map.is_empty() {
        out.push_str("{}");
        return;
    }
    out.push_str("{\n");
    let mut member = |first: bool, key: &str, value: &Value| {
        if !first {
            out.push_str(",\n");
        }
        write_indent(out, depth + 1);
        write_string(out, key);
        out.push_str(": ");
        write_value(out, value, depth + 1);
    };
    // Most objects have no array-index keys: their insertion order is the JS order, no copy.
    if map.keys().any(|k| array_index(k).is_some()) {
        for (i, (key, value)) in js_key_order(map).into_iter().enumerate() {
            member(i == 0, key, value);
        }
    } else {
        for (i, (key, value)) in map.iter().enumerate() {
            member(i == 0, key, value);
        }
    }
    out.push('\n');
    write_indent(out, depth);
    out.push('}');
}

/// Keys in the order a JS engine enumerates them: array indices (canonical decimal integers
/// below 2^32 - 1) ascending, then the others in insertion order.
pub fn js_key_order(map: &Map<String, Value>) -> Vec<(&String, &Value)> {
    let mut indices: Vec<(u32, &String, &Value)> = Vec::new();
    let mut others: Vec<(&String, &Value)> = Vec::with_capacity(map.len());
    for (k, v) in map {
        match array_index(k) {
            Some(i) => indices.push((i, k, v)),
            None => others.push((k, v)),
        }
    }
    if indices.is_empty() {
        return others;
    }
    indices.sort_by_key(|(i, _, _)| *i);
    let mut ordered: Vec<(&String, &Value)> = indices.into_iter().map(|(_, k, v)| (k, v)).collect();
    ordered.extend(others);
    ordered
}

/// `Some(n)` when `key` is a canonical array index ("0", "17"; not "01", "-1" or "4294967295").
fn array_index(key: &str) -> Option<u32> {
    if key.is_empty() || key.len() > 10 || (key.len() > 1 && key.starts_with('0')) {
        return None;
    }
    if !key.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = key.parse().ok()?;
    if n < u64::from(u32::MAX) {
        u32::try_from(n).ok()
    } else {
        None
    }
}

const MAX_SAFE: u64 = 1 << 53;

fn write_number(out: &mut String, n: &Number) {
    if let Some(u) = n.as_u64() {
        if u <= MAX_SAFE {
            let _ = write!(out, "{u}");
        } else {
            write_f64(out, u as f64);
        }
    } else if let Some(i) = n.as_i64() {
        if i.unsigned_abs() <= MAX_SAFE {
            let _ = write!(out, "{i}");
        } else {
            write_f64(out, i as f64);
        }
    } else if let Some(f) = n.as_f64() {
        write_f64(out, f);
    } else {
        // serde_json numbers are always one of the three above.
        out.push_str("null");
    }
}

fn write_f64(out: &mut String, f: f64) {
    if !f.is_finite() {
        // JSON.stringify(NaN / Infinity) === "null"
        out.push_str("null");
        return;
    }
    if f == 0.0 {
        // covers -0, which JS prints as "0"
        out.push('0');
        return;
    }
    let mut buf = ryu_js::Buffer::new();
    out.push_str(buf.format_finite(f));
}

fn write_string(out: &mut String, s: &str) {
    out.push('"');
    let mut start = 0;
    for (i, b) in s.bytes().enumerate() {
        let escape: Option<&str> = match b {
            b'"' => Some("\\\""),
            b'\\' => Some("\\\\"),
            b'\n' => Some("\\n"),
            b'\r' => Some("\\r"),
            b'\t' => Some("\\t"),
            0x08 => Some("\\b"),
            0x0c => Some("\\f"),
            0x00..=0x1f => None,
            _ => continue,
        };
        out.push_str(&s[start..i]);
        match escape {
            Some(e) => out.push_str(e),
            None => {
                let _ = write!(out, "\\u{b:04x}");
            }
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
    out.push('"');
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn numbers_follow_ecmascript_number_to_string() {
        let v: Value = serde_json::from_str(
            r#"[0, -0.0, 1.0, 1.5, 1e21, 1e-7, 123456789012345678901234567890, 0.1, 100, -42, 9007199254740993, 1e300, 5e-324]"#,
        )
        .unwrap();
        let s = to_string_pretty(&v).replace(['\n', ' '], "");
        assert_eq!(
            s,
            "[0,0,1,1.5,1e+21,1e-7,1.2345678901234568e+29,0.1,100,-42,9007199254740992,1e+300,5e-324]"
        );
    }

    #[test]
    fn strings_escape_like_json_stringify() {
        let v = json!("a\"b\\c\n\r\t\u{8}\u{c}\u{1}\u{1f}/é\u{7f}\u{2028}😀");
        assert_eq!(
            to_string_pretty(&v),
            "\"a\\\"b\\\\c\\n\\r\\t\\b\\f\\u0001\\u001f/é\u{7f}\u{2028}😀\""
        );
    }

    #[test]
    fn integer_like_keys_come_first_in_numeric_order() {
        let v: Value = serde_json::from_str(
            r#"{"b":1,"10":2,"a":3,"2":4,"01":5,"-1":6,"4294967295":7,"4294967294":8}"#,
        )
        .unwrap();
        let s = to_string_pretty(&v).replace(['\n', ' '], "");
        assert_eq!(
            s,
            r#"{"2":4,"10":2,"4294967294":8,"b":1,"a":3,"01":5,"-1":6,"4294967295":7}"#
        );
    }

    #[test]
    fn borrowed_members_serialise_like_the_object() {
        let data = json!({"2": 1, "a": [1, {"b": null}], "c": "x"});
        let ty = json!("T");
        let members = [("type", &ty), ("data", &data)];
        assert_eq!(
            object_to_file_string(&members),
            to_file_string(&json!({"type": "T", "data": data}))
        );
        assert_eq!(object_to_file_string(&[]), to_file_string(&json!({})));
    }

    /// Indentation past the spaces kept at hand (depth 40: 80 spaces) is still two per level.
    #[test]
    fn deep_nesting_indents_two_spaces_per_level() {
        let mut v = json!(1);
        for _ in 0..40 {
            v = json!([v]);
        }
        let text = to_string_pretty(&v);
        let deepest = text.lines().find(|l| l.trim() == "1").unwrap();
        assert_eq!(deepest.len() - 1, 80, "{deepest:?}");
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap(), v);
    }

    #[test]
    fn pretty_layout_matches_node() {
        let v = json!({"a": [], "b": {}, "c": [1, {"d": null}], "e": true});
        assert_eq!(
            to_file_string(&v),
            "{\n  \"a\": [],\n  \"b\": {},\n  \"c\": [\n    1,\n    {\n      \"d\": null\n    }\n  ],\n  \"e\": true\n}\n"
        );
    }
}
