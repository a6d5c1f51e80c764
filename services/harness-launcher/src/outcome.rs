//! From what the agent said to the task's value: the final text, or — when the task has an output
//! schema — the JSON object in it, validated; and what the run cost (a price table per model),
//! in total and per model request.
//!
//! Why a small validator here instead of a full JSON-Schema engine: task output schemas are the
//! SDK's plain shapes (types, properties, required, items, enums); the keywords below cover
//! them, and an unsupported keyword is ignored rather than failing a task that did its work.

use std::collections::BTreeMap;

use babysitter_proto::common::v1 as cpb;
use babysitter_transport_proxy::cost::RequestRecord;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::events::Tokens;

/// Why the agent's answer is not the value the task asked for.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum OutputError {
    #[error("the agent gave no final answer")]
    NoAnswer,
    #[error("the answer holds no JSON value (the task has an output schema)")]
    NotJson,
    #[error("the answer does not match the output schema: {}", .0.join("; "))]
    Invalid(Vec<String>),
}

/// The JSON in an answer: the whole text, a fenced ```json block, or the outermost `{…}` / `[…]`.
pub fn extract_json(text: &str) -> Option<Value> {
    let t = text.trim();
    if let Ok(v) = serde_json::from_str::<Value>(t) {
        return Some(v);
    }
    if let Some(start) = t.find("```") {
        let after = &t[start + 3..];
        let body_start = after.find('\n').map_or(0, |i| i + 1);
        if let Some(end) = after[body_start..].find("```")
            && let Ok(v) = serde_json::from_str::<Value>(after[body_start..body_start + end].trim())
        {
            return Some(v);
        }
    }
    for (open, close) in [('{', '}'), ('[', ']')] {
        if let (Some(a), Some(b)) = (t.find(open), t.rfind(close))
            && a < b
            && let Ok(v) = serde_json::from_str::<Value>(&t[a..=b])
        {
            return Some(v);
        }
    }
    None
}

/// The task's value from the final answer.
pub fn value_from_answer(
    answer: Option<&str>,
    schema: Option<&Value>,
) -> Result<Value, OutputError> {
    let text = answer.ok_or(OutputError::NoAnswer)?;
    let Some(schema) = schema else {
        return Ok(Value::String(text.to_owned()));
    };
    let v = extract_json(text).ok_or(OutputError::NotJson)?;
    let mut errors = Vec::new();
    validate(schema, &v, "", &mut errors);
    if errors.is_empty() {
        Ok(v)
    } else {
        Err(OutputError::Invalid(errors))
    }
}

fn type_ok(t: &str, v: &Value) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        "number" => v.is_number(),
        "integer" => {
            v.as_i64().is_some()
                || v.as_u64().is_some()
                || v.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        _ => true,
    }
}

/// Appends one message per violation, each naming its JSON pointer.
pub fn validate(schema: &Value, v: &Value, at: &str, errors: &mut Vec<String>) {
    let here = if at.is_empty() { "/" } else { at };
    let Some(s) = schema.as_object() else { return };
    match s.get("type") {
        Some(Value::String(t)) if !type_ok(t, v) => {
            errors.push(format!("{here}: expected {t}"));
            return;
        }
        Some(Value::Array(ts)) if !ts.iter().filter_map(Value::as_str).any(|t| type_ok(t, v)) => {
            errors.push(format!(
                "{here}: expected one of {}",
                Value::Array(ts.clone())
            ));
            return;
        }
        _ => {}
    }
    if let Some(Value::Array(options)) = s.get("enum")
        && !options.contains(v)
    {
        errors.push(format!(
            "{here}: not one of {}",
            Value::Array(options.clone())
        ));
    }
    if let Some(c) = s.get("const")
        && c != v
    {
        errors.push(format!("{here}: expected {c}"));
    }
    if let (Some(min), Some(n)) = (s.get("minimum").and_then(Value::as_f64), v.as_f64())
        && n < min
    {
        errors.push(format!("{here}: below minimum {min}"));
    }
    if let (Some(max), Some(n)) = (s.get("maximum").and_then(Value::as_f64), v.as_f64())
        && n > max
    {
        errors.push(format!("{here}: above maximum {max}"));
    }
    if let (Some(min), Some(text)) = (s.get("minLength").and_then(Value::as_u64), v.as_str())
        && (text.chars().count() as u64) < min
    {
        errors.push(format!("{here}: shorter than {min}"));
    }
    if let Some(obj) = v.as_object() {
        let props = s.get("properties").and_then(Value::as_object);
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(k) = r.as_str()
                && !obj.contains_key(k)
            {
                errors.push(format!("{here}: missing required property `{k}`"));
            }
        }
        for (k, val) in obj {
            match props.and_then(|p| p.get(k)) {
                Some(ps) => validate(ps, val, &format!("{at}/{k}"), errors),
                None => {
                    if s.get("additionalProperties") == Some(&Value::Bool(false)) {
                        errors.push(format!("{here}: unexpected property `{k}`"));
                    } else if let Some(ap @ Value::Object(_)) = s.get("additionalProperties") {
                        validate(ap, val, &format!("{at}/{k}"), errors);
                    }
                }
            }
        }
    }
    if let (Some(items), Some(arr)) = (s.get("items"), v.as_array()) {
        for (i, it) in arr.iter().enumerate() {
            validate(items, it, &format!("{at}/{i}"), errors);
        }
    }
    if let Some(Value::Array(all)) = s.get("allOf") {
        for sub in all {
            validate(sub, v, at, errors);
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(any)) = s.get(key) {
            let ok = any.iter().any(|sub| {
                let mut e = Vec::new();
                validate(sub, v, at, &mut e);
                e.is_empty()
            });
            if !ok {
                errors.push(format!("{here}: matches none of {key}"));
            }
        }
    }
}

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Price {
    pub input: f64,
    pub output: f64,
    #[serde(default)]
    pub cache_read: f64,
    #[serde(default)]
    pub cache_write: f64,
}

/// List prices of common models (USD per million tokens); the config adds or overrides.
pub fn default_prices() -> BTreeMap<String, Price> {
    let p = |input, output, cache_read, cache_write| Price {
        input,
        output,
        cache_read,
        cache_write,
    };
    BTreeMap::from([
        ("claude-opus-4".into(), p(15.0, 75.0, 1.5, 18.75)),
        ("claude-sonnet-4".into(), p(3.0, 15.0, 0.3, 3.75)),
        ("claude-haiku-4".into(), p(1.0, 5.0, 0.1, 1.25)),
        ("gpt-4o".into(), p(2.5, 10.0, 1.25, 0.0)),
        ("gpt-4.1".into(), p(2.0, 8.0, 0.5, 0.0)),
        ("gpt-5".into(), p(1.25, 10.0, 0.125, 0.0)),
        ("gemini-2.5-pro".into(), p(1.25, 10.0, 0.31, 0.0)),
        ("gemini-2.5-flash".into(), p(0.3, 2.5, 0.075, 0.0)),
    ])
}

/// Cost of `tokens` on `model`: an exact entry, else the longest entry the model name starts
/// with (`claude-sonnet-4-20250514` → `claude-sonnet-4`); 0 for an unknown model.
pub fn cost_usd(prices: &BTreeMap<String, Price>, model: &str, tokens: Tokens) -> f64 {
    let price = prices.get(model).or_else(|| {
        prices
            .iter()
            .filter(|(k, _)| model.starts_with(k.as_str()))
            .max_by_key(|(k, _)| k.len())
            .map(|(_, p)| p)
    });
    let Some(p) = price else { return 0.0 };
    let m = 1_000_000.0;
    tokens.input as f64 * p.input / m
        + tokens.output as f64 * p.output / m
        + tokens.cache_read as f64 * p.cache_read / m
        + tokens.cache_write as f64 * p.cache_write / m
}

/// The in-process proxy's records of a task's model requests as the wire's per-request usage
/// of provider `provider`, each priced like the task's total ([`cost_usd`], by the model the
/// proxy sent upstream).
pub fn priced_requests(
    prices: &BTreeMap<String, Price>,
    provider: &str,
    records: Vec<RequestRecord>,
) -> Vec<cpb::RequestUsage> {
    records
        .into_iter()
        .map(|r| {
            let tokens = Tokens {
                input: r.usage.input.unwrap_or(0),
                output: r.usage.output.unwrap_or(0),
                cache_read: r.usage.cache_read.unwrap_or(0),
                cache_write: r.usage.cache_write.unwrap_or(0),
            };
            cpb::RequestUsage {
                cost_usd: cost_usd(prices, &r.model, tokens),
                request_id: r.request_id,
                provider: provider.to_owned(),
                model: r.model,
                input_tokens: tokens.input,
                output_tokens: tokens.output,
                cache_read_tokens: tokens.cache_read,
                cache_write_tokens: tokens.cache_write,
                failed: r.failed,
                duration_ms: u64::try_from(r.duration.as_millis()).unwrap_or(u64::MAX),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn json_answers_are_found_validated_and_refused_with_a_reason() {
        let schema = json!({"type": "object", "required": ["ok", "files"], "additionalProperties": false,
            "properties": {"ok": {"type": "boolean"}, "files": {"type": "array", "items": {"type": "string"}}}});
        let good = "Here you go:\n```json\n{\"ok\": true, \"files\": [\"out.txt\"]}\n```";
        assert_eq!(
            value_from_answer(Some(good), Some(&schema)),
            Ok(json!({"ok": true, "files": ["out.txt"]}))
        );
        let bad = value_from_answer(Some("{\"ok\": \"yes\", \"extra\": 1}"), Some(&schema));
        let Err(OutputError::Invalid(errors)) = bad else {
            panic!("expected invalid, got {bad:?}")
        };
        assert!(
            errors.contains(&"/ok: expected boolean".to_owned()),
            "{errors:?}"
        );
        assert!(
            errors.contains(&"/: missing required property `files`".to_owned()),
            "{errors:?}"
        );
        assert!(
            errors.contains(&"/: unexpected property `extra`".to_owned()),
            "{errors:?}"
        );
        assert_eq!(
            value_from_answer(Some("DONE"), Some(&schema)),
            Err(OutputError::NotJson)
        );
        assert_eq!(value_from_answer(None, None), Err(OutputError::NoAnswer));
        assert_eq!(value_from_answer(Some("DONE"), None), Ok(json!("DONE")));
    }

    #[test]
    fn cost_uses_the_longest_matching_price_and_zero_for_unknown_models() {
        let prices = default_prices();
        let t = Tokens {
            input: 1_000_000,
            output: 100_000,
            cache_read: 0,
            cache_write: 0,
        };
        let c = cost_usd(&prices, "claude-sonnet-4-20250514", t);
        assert!((c - 4.5).abs() < 1e-9, "{c}");
        assert_eq!(cost_usd(&prices, "fake-model", t), 0.0);
    }
}
