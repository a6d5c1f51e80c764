//! Serde helpers for durations written the humantime way (`"30s"`, `"1m 30s"`, `"250ms"`).
//!
//! ```
//! # use std::time::Duration;
//! #[derive(serde::Serialize, serde::Deserialize)]
//! #[serde(rename_all = "kebab-case")]
//! struct Limits {
//!     #[serde(with = "babysitter_common::config::duration")]
//!     request_timeout: Duration,
//!     #[serde(with = "babysitter_common::config::duration::option", default)]
//!     idle_timeout: Option<Duration>,
//! }
//! ```

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serializer};

/// Serializes as a humantime string.
pub fn serialize<S: Serializer>(value: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_str(&humantime::format_duration(*value))
}

/// Deserializes from a humantime string.
pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse(&text).map_err(serde::de::Error::custom)
}

fn parse(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| {
        format!("invalid duration {text:?} ({e}); write it like \"30s\" or \"1m 30s\"")
    })
}

/// The same for `Option<Duration>`. TOML has no null, so `None` is written as `"off"` (and
/// `"off"` or `"none"` read back as `None`), which keeps `--dump-config` output loadable.
pub mod option {
    use super::*;

    /// Serializes `Some` as a humantime string and `None` as `"off"`.
    pub fn serialize<S: Serializer>(
        value: &Option<Duration>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => serializer.collect_str(&humantime::format_duration(*d)),
            None => serializer.serialize_str("off"),
        }
    }

    /// Deserializes a humantime string, or `"off"` / `"none"` as `None`.
    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Duration>, D::Error> {
        let text = String::deserialize(deserializer)?;
        match text.trim() {
            "off" | "none" => Ok(None),
            other => parse(other).map(Some).map_err(serde::de::Error::custom),
        }
    }
}
