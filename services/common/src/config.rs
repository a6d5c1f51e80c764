//! Layered, typed configuration: `T::default()` → TOML file → environment → command-line
//! overrides, validated by deserializing into `T` after every layer so an error names the layer
//! (file path, environment variable, override) and the key.
//!
//! Config structs are `#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]`, so a
//! partial file is fine and a misspelt key is an error wherever it comes from.
//!
//! Environment variables are `<PREFIX>__SECTION__KEY` (for example
//! `BABYSITTER_JOURNAL__STORE__URL` → `store.url`): the part after `<PREFIX>__` is split on
//! `__`, lower-cased, and `_` becomes `-`. Values are read as TOML values when they parse
//! (`8080`, `true`, `["a", "b"]`) and as strings otherwise; a value that parses as another type
//! but fits the field only as a string (`true` for a string key) is kept as a string. Variables
//! that start with `<PREFIX>_` but not `<PREFIX>__` (such as `BABYSITTER_JOURNAL_CONFIG` for the
//! config-file flag) are not config keys and are ignored.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;
use toml::{Table, Value};

use crate::env::EnvMap;

pub mod duration;

/// Why a configuration could not be loaded or printed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {}: {source}", path.display())]
    ReadFile {
        /// The file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// The config file is not valid TOML.
    #[error("config file {} is not valid toml: {source}", path.display())]
    ParseFile {
        /// The file.
        path: PathBuf,
        /// The parse error (with line and column).
        source: Box<toml::de::Error>,
    },
    /// The config file parsed but a key is unknown or has the wrong type.
    #[error("config file {}: key `{key}`: {message}", path.display())]
    InvalidFile {
        /// The file.
        path: PathBuf,
        /// The dotted key path where the error was found (`.` for the top level).
        key: String,
        /// What is wrong.
        message: String,
    },
    /// An environment variable names no key or holds a value of the wrong type.
    #[error("environment variable {var} (key `{key}`): {message}")]
    InvalidEnv {
        /// The variable.
        var: String,
        /// The dotted key it maps to.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// An override is not of the form `key.path=value`.
    #[error("override {arg:?} is not of the form key.path=value")]
    BadOverride {
        /// The override as given (only its key part, the value may be a secret).
        arg: String,
    },
    /// An override names no key or holds a value of the wrong type.
    #[error("override of key `{key}`: {message}")]
    InvalidOverride {
        /// The dotted key.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The JSON override names no key or holds a value of the wrong type.
    #[error("json override: key `{key}`: {message}")]
    InvalidJson {
        /// The dotted key path where the error was found.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The defaults of the config type do not round-trip (a bug in its `Default` or serde
    /// attributes).
    #[error("config defaults: key `{key}`: {message}")]
    InvalidDefaults {
        /// The dotted key path where the error was found.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// The configuration could not be serialized to TOML.
    #[error("cannot serialize config to toml: {0}")]
    Serialize(#[from] toml::ser::Error),
}

/// Loads a `T` from defaults, an optional TOML file, the environment and overrides, in that
/// order of precedence (last wins).
///
/// ```no_run
/// # use babysitter_common::{config::ConfigLoader, env::EnvMap};
/// # #[derive(Default, serde::Serialize, serde::Deserialize)] struct JournalConfig {}
/// let cfg: JournalConfig = ConfigLoader::new("BABYSITTER_JOURNAL")
///     .file(Some("journal.toml"))
///     .env(EnvMap::from_process())
///     .overrides(["server.listen-addr=127.0.0.1:7000"])
///     .load()?;
/// # Ok::<(), babysitter_common::config::ConfigError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ConfigLoader {
    env_prefix: String,
    file: Option<PathBuf>,
    env: EnvMap,
    overrides: Vec<String>,
    json: Option<serde_json::Value>,
}

impl ConfigLoader {
    /// A loader reading environment variables that start with `<env_prefix>__`.
    pub fn new(env_prefix: impl Into<String>) -> Self {
        Self {
            env_prefix: env_prefix.into(),
            file: None,
            env: EnvMap::new(),
            overrides: Vec::new(),
            json: None,
        }
    }

    /// The TOML file to read, if any (a missing file given here is an error).
    pub fn file(mut self, path: Option<impl Into<PathBuf>>) -> Self {
        self.file = path.map(Into::into);
        self
    }

    /// The environment to read `<PREFIX>__…` variables from.
    pub fn env(mut self, env: EnvMap) -> Self {
        self.env = env;
        self
    }

    /// `key.path=value` overrides (from repeated `--set` flags), applied in order after the
    /// environment.
    pub fn overrides<I, S>(mut self, overrides: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.overrides.extend(overrides.into_iter().map(Into::into));
        self
    }

    /// A JSON object deep-merged last (from typed CLI flags); `null` members are skipped.
    pub fn json_override(mut self, value: serde_json::Value) -> Self {
        self.json = Some(value);
        self
    }

    /// Merges the layers and deserializes the result.
    pub fn load<T>(&self) -> Result<T, ConfigError>
    where
        T: Serialize + DeserializeOwned + Default,
    {
        let mut table = match Value::try_from(T::default()) {
            Ok(Value::Table(table)) => table,
            Ok(other) => {
                return Err(ConfigError::InvalidDefaults {
                    key: ".".to_owned(),
                    message: format!("defaults serialize to a {}, not a table", other.type_str()),
                });
            }
            Err(e) => {
                return Err(ConfigError::InvalidDefaults {
                    key: ".".to_owned(),
                    message: e.to_string(),
                });
            }
        };
        let mut current: T = validate(&table)
            .map_err(|(key, message)| ConfigError::InvalidDefaults { key, message })?;

        if let Some(path) = &self.file {
            merge(&mut table, read_file(path)?);
            current = validate(&table).map_err(|(key, message)| ConfigError::InvalidFile {
                path: path.clone(),
                key,
                message,
            })?;
        }

        for (var, raw) in self.env.iter() {
            let Some(segments) = self.env_segments(var) else {
                continue;
            };
            let key = segments.join(".");
            if segments.iter().any(String::is_empty) {
                return Err(ConfigError::InvalidEnv {
                    var: var.to_owned(),
                    key,
                    message: "empty key segment (`__` twice or at the end)".to_owned(),
                });
            }
            current = apply_one(&mut table, &segments, raw).map_err(|message| {
                ConfigError::InvalidEnv {
                    var: var.to_owned(),
                    key,
                    message,
                }
            })?;
        }

        for arg in &self.overrides {
            let Some((key, raw)) = arg.split_once('=') else {
                return Err(ConfigError::BadOverride { arg: arg.clone() });
            };
            let key = key.trim();
            let segments: Vec<String> = key.split('.').map(str::to_owned).collect();
            if segments.iter().any(String::is_empty) {
                return Err(ConfigError::BadOverride {
                    arg: format!("{key}=…"),
                });
            }
            current = apply_one(&mut table, &segments, raw).map_err(|message| {
                ConfigError::InvalidOverride {
                    key: key.to_owned(),
                    message,
                }
            })?;
        }

        if let Some(json) = &self.json {
            let layer = match json_to_toml(json) {
                Some(Value::Table(layer)) => layer,
                _ => {
                    return Err(ConfigError::InvalidJson {
                        key: ".".to_owned(),
                        message: "expected a json object".to_owned(),
                    });
                }
            };
            merge(&mut table, layer);
            current = validate(&table)
                .map_err(|(key, message)| ConfigError::InvalidJson { key, message })?;
        }

        Ok(current)
    }

    /// The key segments of a `<PREFIX>__…` variable, `None` when the variable is not a config
    /// key.
    fn env_segments(&self, var: &str) -> Option<Vec<String>> {
        let rest = var.strip_prefix(&self.env_prefix)?.strip_prefix("__")?;
        Some(rest.split("__").map(env_segment_to_key).collect())
    }
}

/// `LISTEN_ADDR` → `listen-addr`.
fn env_segment_to_key(segment: &str) -> String {
    segment.to_ascii_lowercase().replace('_', "-")
}

/// The environment variable that sets the dotted `key` (`store.url`) under `prefix`
/// (`BABYSITTER_JOURNAL__STORE__URL`). Useful for docs and Helm values.
pub fn env_var_name(prefix: &str, key: &str) -> String {
    let mut name = prefix.to_owned();
    for segment in key.split('.') {
        name.push_str("__");
        name.push_str(&segment.to_ascii_uppercase().replace('-', "_"));
    }
    name
}

/// The effective configuration as TOML, for `--dump-config`. Secret fields (auth tokens) print
/// redacted. Settings that are unset and have no default (a token file, an S3 endpoint) have
/// no TOML form, so they follow as comments, each with its environment variable: every setting
/// a deployment may need is on this page.
pub fn dump_config<T: Serialize>(config: &T, env_prefix: &str) -> Result<String, ConfigError> {
    let mut text = toml::to_string_pretty(config)?;
    // serde_json keeps a `None` as `null` where TOML drops it.
    let mut unset = Vec::new();
    if let Ok(v) = serde_json::to_value(config) {
        unset_keys(&v, "", &mut unset);
    }
    if !unset.is_empty() {
        text.push_str(
            "\n# Unset, no default. Set one in the config file, in the environment, or with\n\
             # --set key=value:\n",
        );
        let width = unset.iter().map(String::len).max().unwrap_or(0);
        for key in &unset {
            text.push_str(&format!(
                "#   {key:<width$}  {}\n",
                env_var_name(env_prefix, key)
            ));
        }
    }
    Ok(text)
}

/// The dotted paths of `null`s in `v` (inside tables; array items are values, not settings).
fn unset_keys(v: &serde_json::Value, prefix: &str, out: &mut Vec<String>) {
    let serde_json::Value::Object(m) = v else {
        return;
    };
    for (k, v) in m {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            serde_json::Value::Null => out.push(path),
            serde_json::Value::Object(_) => unset_keys(v, &path, out),
            _ => {}
        }
    }
}

fn read_file(path: &Path) -> Result<Table, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        path: path.to_owned(),
        source,
    })?;
    text.parse::<Table>()
        .map_err(|source| ConfigError::ParseFile {
            path: path.to_owned(),
            source: Box::new(source),
        })
}

/// Deserializes the merged table, returning the failing key path and message on error.
fn validate<T: DeserializeOwned>(table: &Table) -> Result<T, (String, String)> {
    serde_path_to_error::deserialize::<_, T>(Value::Table(table.clone())).map_err(|e| {
        let key = e.path().to_string();
        (key, e.into_inner().to_string())
    })
}

/// Sets one key from a raw string (environment or override) and validates, keeping the value as
/// a string when its TOML reading does not fit. Leaves `table` unchanged on error.
fn apply_one<T: DeserializeOwned>(
    table: &mut Table,
    segments: &[String],
    raw: &str,
) -> Result<T, String> {
    let parsed = parse_value(raw);
    let is_string = parsed.is_str();
    let mut candidate = table.clone();
    set_path(&mut candidate, segments, parsed)?;
    let first_err = match validate::<T>(&candidate) {
        Ok(value) => {
            *table = candidate;
            return Ok(value);
        }
        Err((_, message)) => message,
    };
    if !is_string {
        let mut candidate = table.clone();
        set_path(&mut candidate, segments, Value::String(raw.to_owned()))?;
        if let Ok(value) = validate::<T>(&candidate) {
            *table = candidate;
            return Ok(value);
        }
    }
    Err(first_err)
}

/// A raw value read as a single TOML value when it parses as one, else as a string.
fn parse_value(raw: &str) -> Value {
    if !raw.contains(['\n', '\r'])
        && let Ok(mut table) = format!("v = {raw}").parse::<Table>()
        && table.len() == 1
        && let Some(value) = table.remove("v")
    {
        return value;
    }
    Value::String(raw.to_owned())
}

/// Sets `segments` in `table` to `value`, creating intermediate tables.
fn set_path(table: &mut Table, segments: &[String], value: Value) -> Result<(), String> {
    let Some((last, parents)) = segments.split_last() else {
        return Err("empty key".to_owned());
    };
    let mut node = table;
    for (i, segment) in parents.iter().enumerate() {
        let entry = node
            .entry(segment.clone())
            .or_insert_with(|| Value::Table(Table::new()));
        node = match entry {
            Value::Table(t) => t,
            other => {
                return Err(format!(
                    "`{}` is a {}, not a table",
                    segments[..=i].join("."),
                    other.type_str()
                ));
            }
        };
    }
    node.insert(last.clone(), value);
    Ok(())
}

/// Deep-merges `layer` into `base`: tables merge key by key, anything else replaces.
fn merge(base: &mut Table, layer: Table) {
    for (key, value) in layer {
        match (base.get_mut(&key), value) {
            (Some(Value::Table(b)), Value::Table(l)) => merge(b, l),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// JSON → TOML, dropping `null`s (TOML has none); `None` for a top-level `null`.
fn json_to_toml(json: &serde_json::Value) -> Option<Value> {
    use serde_json::Value as J;
    Some(match json {
        J::Null => return None,
        J::Bool(b) => Value::Boolean(*b),
        J::Number(n) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => Value::Integer(i),
            (None, Some(f)) => Value::Float(f),
            (None, None) => Value::String(n.to_string()),
        },
        J::String(s) => Value::String(s.clone()),
        J::Array(items) => Value::Array(items.iter().filter_map(json_to_toml).collect()),
        J::Object(members) => Value::Table(
            members
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), json_to_toml(v)?)))
                .collect(),
        ),
    })
}

#[cfg(test)]
mod tests;
