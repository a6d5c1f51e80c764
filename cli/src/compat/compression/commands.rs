//! `compression:status|toggle|set|reset [--json]`: show and edit the compression settings the
//! hooks consult ([`super::resolved`] is the one place they are resolved). Edits go to the
//! project file `<cwd>/.a5c/compression.config.json`, patching only the key named, as the
//! reference's `compression/*.ts`; outputs, error texts and exit codes are the reference's.
//!
//! Differences (fixes, formats unchanged): a project file that is not a JSON object is refused
//! with an error naming it instead of being silently replaced by one holding only the new key;
//! writes are atomic; `compression:set` refuses a number that is not finite (the reference
//! writes `Infinity` as `null`).

use serde_json::{Map, Value, json};

use super::{LAYERS, config_file, resolved};
use crate::compat::cli::Cli;
use crate::compat::output::{self, CliError, js_template};
use crate::compat::session::file::write_file_atomic;
use crate::compat::{paths, usage};

/// How a settable key's text becomes a value.
#[derive(Clone, Copy)]
enum Kind {
    Number,
    Boolean,
    List,
}

/// The keys `compression:set` accepts: (layer, field, kind); no layer is the top level.
const FIELDS: &[(Option<&str>, &str, Kind)] = &[
    (None, "enabled", Kind::Boolean),
    (Some("userPromptHook"), "threshold", Kind::Number),
    (Some("userPromptHook"), "keepRatio", Kind::Number),
    (Some("commandOutputHook"), "excludeCommands", Kind::List),
    (Some("sdkContextHook"), "targetReduction", Kind::Number),
    (Some("sdkContextHook"), "minCompressionTokens", Kind::Number),
    (Some("processLibraryCache"), "targetReduction", Kind::Number),
    (Some("processLibraryCache"), "ttlHours", Kind::Number),
];

/// One status row: `{layer, enabled, engine, keySettings}`.
fn row(doc: &Value, layer: &str) -> Map<String, Value> {
    let l = doc.pointer(&format!("/layers/{layer}"));
    let get = |k: &str| l.and_then(|l| l.get(k));
    let t = |k: &str| js_template(get(k));
    let settings = match layer {
        "userPromptHook" => format!("threshold={}, keepRatio={}", t("threshold"), t("keepRatio")),
        "commandOutputHook" => {
            let list = match get("excludeCommands") {
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|x| js_template(Some(x)))
                    .collect::<Vec<_>>()
                    .join(", "),
                other => js_template(other),
            };
            format!("excludeCommands=[{list}]")
        }
        "sdkContextHook" => format!(
            "targetReduction={}, minTokens={}",
            t("targetReduction"),
            t("minCompressionTokens")
        ),
        _ => format!(
            "targetReduction={}, ttlHours={}",
            t("targetReduction"),
            t("ttlHours")
        ),
    };
    let mut m = Map::new();
    m.insert("layer".into(), json!(layer));
    for k in ["enabled", "engine"] {
        if let Some(v) = get(k) {
            m.insert(k.into(), v.clone());
        }
    }
    m.insert("keySettings".into(), json!(settings));
    m
}

/// `compression:status`.
pub async fn status(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let home = paths::home(cli.env, &cli.cwd);
    let doc = resolved(cli.env, &cli.cwd, home.as_deref());
    let rows: Vec<Map<String, Value>> = LAYERS.iter().map(|(l, _)| row(&doc, l)).collect();
    if cli.args.json() {
        let mut out = Map::new();
        if let Some(e) = doc.get("enabled") {
            out.insert("masterEnabled".into(), e.clone());
        }
        out.insert(
            "configFile".into(),
            json!(config_file(&cli.cwd).display().to_string()),
        );
        out.insert(
            "layers".into(),
            Value::Array(rows.into_iter().map(Value::Object).collect()),
        );
        output::line(&output::pretty(&Value::Object(out)));
        return Ok(0);
    }
    let master = doc.get("enabled").is_some_and(output::js_truthy);
    let mut text = format!(
        "\nCompression master switch: {}\n\n",
        if master { "ENABLED" } else { "DISABLED" }
    );
    let pad = |s: &str, n: usize| format!("{s:<n$}");
    text.push_str(&format!(
        "{}  {}  {}  Key settings\n",
        pad("Layer", 22),
        pad("Enabled", 9),
        pad("Engine", 22)
    ));
    text.push_str(&format!(
        "{}  {}  {}  {}\n",
        "-".repeat(22),
        "-".repeat(9),
        "-".repeat(22),
        "-".repeat(60)
    ));
    for r in &rows {
        text.push_str(&format!(
            "{}  {}  {}  {}\n",
            pad(&js_template(r.get("layer")), 22),
            pad(&js_template(r.get("enabled")), 9),
            pad(&js_template(r.get("engine")), 22),
            js_template(r.get("keySettings")),
        ));
    }
    output::line(&text);
    Ok(0)
}

/// The reference's refusal of an unknown layer / key / value: `{"error"}` or `Error: …` on
/// stderr, exit 1.
fn refuse(cli: &Cli<'_>, message: &str) -> u8 {
    if cli.args.json() {
        errln!("{}", output::compact(&json!({"error": message})));
    } else {
        errln!("Error: {message}");
    }
    1
}

/// A missing positional: the message and the usage on stderr, exit 1.
fn missing(message: &str) -> u8 {
    errln!("{message}");
    errln!("{}", usage::USAGE);
    1
}

/// The project file as an object (`{}` when there is none); a file that is not a JSON object
/// is an error naming it.
fn read_project(path: &std::path::Path) -> Result<Map<String, Value>, String> {
    crate::compat::json_file::read_object(path)
        .map(Option::unwrap_or_default)
        .map_err(|e| format!("{e}; fix or remove it (compression:reset)"))
}

/// Sets `layer.field` (or the top-level `field`) in the project file; returns its path.
fn patch(
    cli: &Cli<'_>,
    layer: Option<&str>,
    field: &str,
    value: Value,
) -> Result<std::path::PathBuf, String> {
    let path = config_file(&cli.cwd);
    let mut doc = read_project(&path)?;
    match layer {
        None => {
            doc.insert(field.into(), value);
        }
        Some(layer) => {
            let layers = doc.entry("layers").or_insert_with(|| json!({}));
            if !layers.is_object() {
                *layers = json!({});
            }
            let slot = &mut layers[layer];
            if !slot.is_object() {
                *slot = json!({});
            }
            slot[field] = value;
        }
    }
    write_file_atomic(&path, &(output::pretty(&Value::Object(doc)) + "\n"))?;
    Ok(path)
}

/// `compression:toggle <layer> <on|off>`.
pub async fn toggle(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let pos = &cli.args.positionals;
    let Some(layer) = pos.first() else {
        return Ok(missing(
            "compression:toggle requires <layer> and <on|off> arguments",
        ));
    };
    let on = match pos.get(1).map(|v| v.to_lowercase()).as_deref() {
        None => {
            return Ok(missing(
                "compression:toggle requires <on|off> as the second argument",
            ));
        }
        Some("on") => true,
        Some("off") => false,
        Some(_) => {
            let raw = pos.get(1).map(String::as_str).unwrap_or_default();
            return Err(CliError::plain(
                "Error",
                format!("compression:toggle value must be \"on\" or \"off\" (received: {raw})"),
            )
            .into());
        }
    };
    if !LAYERS.iter().any(|(l, _)| l == layer) {
        let names: Vec<&str> = LAYERS.iter().map(|(l, _)| *l).collect();
        return Ok(refuse(
            cli,
            &format!(
                "Unknown layer: \"{layer}\". Valid layers: {}",
                names.join(", ")
            ),
        ));
    }
    let path = match patch(cli, Some(layer), "enabled", json!(on)) {
        Ok(p) => p,
        Err(e) => return Ok(refuse(cli, &e)),
    };
    if cli.args.json() {
        output::line(&output::compact(&json!({
            "layer": layer, "enabled": on, "configFile": path.display().to_string(),
        })));
    } else {
        let action = if on { "enabled" } else { "disabled" };
        output::line(&format!(
            "Compression layer \"{layer}\" {action}.\nConfig written to: {}",
            path.display()
        ));
    }
    Ok(0)
}

/// JavaScript's `Number(raw)` for the decimal, hex, octal and binary forms; `None` for NaN and
/// for the infinities (refused, see the module doc).
fn js_number(raw: &str) -> Option<f64> {
    let t = raw.trim();
    if t.is_empty() {
        return Some(0.0);
    }
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if t.len() > 2 && t[..2].eq_ignore_ascii_case(prefix) {
            return u64::from_str_radix(&t[2..], radix).ok().map(|n| n as f64);
        }
    }
    if !t
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'))
    {
        return None;
    }
    t.parse::<f64>().ok().filter(|n| n.is_finite())
}

fn parse_value(raw: &str, kind: Kind, key: &str) -> Result<Value, String> {
    match kind {
        Kind::Number => js_number(raw)
            .map(|n| json!(n))
            .ok_or_else(|| format!("\"{key}\" expects a number, got: {raw}")),
        Kind::Boolean => match raw.trim().to_lowercase().as_str() {
            "true" | "1" | "yes" | "on" => Ok(json!(true)),
            "false" | "0" | "no" | "off" => Ok(json!(false)),
            _ => Err(format!("\"{key}\" expects true/false, got: {raw}")),
        },
        Kind::List => Ok(json!(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
        )),
    }
}

/// `compression:set <layer.key> <value>`.
pub async fn set(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let pos = &cli.args.positionals;
    let (Some(key), Some(raw)) = (pos.first(), pos.get(1)) else {
        return Ok(missing(
            "compression:set requires <layer.key> and <value> arguments",
        ));
    };
    let parts: Vec<&str> = key.split('.').collect();
    let field = FIELDS
        .iter()
        .find(|(layer, field, _)| match parts.as_slice() {
            [f] => layer.is_none() && field == f,
            [l, f] => *layer == Some(*l) && field == f,
            _ => false,
        });
    let Some(&(layer, field, kind)) = field else {
        let valid: Vec<String> = FIELDS
            .iter()
            .map(|(l, f, _)| l.map_or_else(|| (*f).to_owned(), |l| format!("{l}.{f}")))
            .collect();
        return Ok(refuse(
            cli,
            &format!("Unknown key: \"{key}\". Valid keys: {}", valid.join(", ")),
        ));
    };
    let value = match parse_value(raw, kind, key) {
        Ok(v) => v,
        Err(e) => return Ok(refuse(cli, &e)),
    };
    let path = match patch(cli, layer, field, value.clone()) {
        Ok(p) => p,
        Err(e) => return Ok(refuse(cli, &e)),
    };
    if cli.args.json() {
        output::line(&output::compact(&json!({
            "key": key, "value": value, "configFile": path.display().to_string(),
        })));
    } else {
        output::line(&format!(
            "Set {key} = {}\nConfig written to: {}",
            output::compact(&value),
            path.display()
        ));
    }
    Ok(0)
}

/// `compression:reset`: removes the project file.
pub async fn reset(cli: &Cli<'_>) -> anyhow::Result<u8> {
    let path = config_file(&cli.cwd);
    let removed = match std::fs::remove_file(&path) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => {
            let message = format!(
                "Failed to remove config file: {}",
                output::io_message("unlink", &path, &e)
            );
            return Ok(refuse(cli, &message));
        }
    };
    let file = path.display().to_string();
    if cli.args.json() {
        output::line(&output::compact(
            &json!({"removed": removed, "configFile": file}),
        ));
    } else if removed {
        output::line(&format!(
            "Removed: {file}\nCompression config reset to defaults."
        ));
    } else {
        output::line(&format!(
            "No project config file found at: {file}\nNothing to reset — already using defaults."
        ));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_parse_as_javascript_does() {
        assert_eq!(js_number(" 300 "), Some(300.0));
        assert_eq!(js_number(""), Some(0.0));
        assert_eq!(js_number("0x10"), Some(16.0));
        assert_eq!(js_number("1e3"), Some(1000.0));
        assert_eq!(js_number("0.85"), Some(0.85));
        for bad in ["abc", "inf", "NaN", "Infinity", "1,5", "0xZZ"] {
            assert_eq!(js_number(bad), None, "{bad}");
        }
    }
}
