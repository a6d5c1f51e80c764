//! Validated identifiers that end up as path segments (run directories, effect directories,
//! object-store key parts).
//!
//! One rule for all of them, so a run id or an effect id can never escape its directory:
//! non-empty, at most [`MAX_SEGMENT_LEN`] characters, only `[A-Za-z0-9._-]`, and not `.` or `..`
//! (which also rules out `/` and `\`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The longest identifier accepted as a path segment.
pub const MAX_SEGMENT_LEN: usize = 128;

/// How much of an offending value an error message repeats.
const SHOWN_PREFIX: usize = 64;

/// Why an identifier was refused. Every variant names the kind of id and the bad value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum IdError {
    /// The value is empty.
    #[error("invalid {kind}: must not be empty")]
    Empty {
        /// What was being validated (`run id`, `effect id`, …).
        kind: String,
    },
    /// The value is longer than [`MAX_SEGMENT_LEN`].
    #[error("invalid {kind} {value:?}: {len} characters, at most {MAX_SEGMENT_LEN} allowed")]
    TooLong {
        /// What was being validated.
        kind: String,
        /// The first characters of the value.
        value: String,
        /// Its length in characters.
        len: usize,
    },
    /// The value is `.` or `..`.
    #[error("invalid {kind} {value:?}: `.` and `..` are not allowed")]
    DotSegment {
        /// What was being validated.
        kind: String,
        /// The value.
        value: String,
    },
    /// The value holds a character outside `[A-Za-z0-9._-]` (a `/` or `\` among them).
    #[error("invalid {kind} {value:?}: character {ch:?} is not allowed (use A-Z a-z 0-9 . _ -)")]
    BadChar {
        /// What was being validated.
        kind: String,
        /// The value.
        value: String,
        /// The first offending character.
        ch: char,
    },
}

/// Checks that `value` is safe to use as a single path segment; `kind` names it in the error
/// (`"run id"`, `"effect id"`).
pub fn validate_path_segment(kind: &str, value: &str) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty {
            kind: kind.to_owned(),
        });
    }
    let len = value.chars().count();
    if len > MAX_SEGMENT_LEN {
        let shown: String = value.chars().take(SHOWN_PREFIX).collect();
        return Err(IdError::TooLong {
            kind: kind.to_owned(),
            value: format!("{shown}…"),
            len,
        });
    }
    if value == "." || value == ".." {
        return Err(IdError::DotSegment {
            kind: kind.to_owned(),
            value: value.to_owned(),
        });
    }
    if let Some(ch) = value
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(IdError::BadChar {
            kind: kind.to_owned(),
            value: value.to_owned(),
            ch,
        });
    }
    Ok(())
}

/// A run identifier (babysitter uses ULIDs, but any safe path segment is accepted).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RunId(String);

impl RunId {
    /// Validates and wraps `value`.
    pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
        let value = value.into();
        validate_path_segment("run id", &value)?;
        Ok(Self(value))
    }

    /// The id as a string slice.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as an owned string.
    pub fn into_inner(self) -> String {
        self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RunId({})", self.0)
    }
}

impl AsRef<str> for RunId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl FromStr for RunId {
    type Err = IdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for RunId {
    type Error = IdError;

    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl TryFrom<&str> for RunId {
    type Error = IdError;

    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Self::new(value)
    }
}

impl From<RunId> for String {
    fn from(id: RunId) -> Self {
        id.0
    }
}

impl Serialize for RunId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for RunId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = String::deserialize(deserializer)?;
        Self::new(value).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ulids_and_safe_names() {
        for ok in [
            "01JZ8X9Q2V3W4Y5Z6A7B8C9D0E",
            "run-1",
            "a.b_c-d",
            "...",
            ".hidden",
            "x",
        ] {
            assert!(RunId::new(ok).is_ok(), "{ok} should be accepted");
        }
        let max = "a".repeat(MAX_SEGMENT_LEN);
        assert!(validate_path_segment("effect id", &max).is_ok());
    }

    #[test]
    fn rejects_unsafe_values_naming_them() {
        assert_eq!(
            RunId::new(""),
            Err(IdError::Empty {
                kind: "run id".into()
            })
        );
        let err = RunId::new("..").unwrap_err();
        assert!(matches!(err, IdError::DotSegment { .. }));
        assert!(err.to_string().contains("\"..\""), "{err}");
        assert!(matches!(RunId::new("."), Err(IdError::DotSegment { .. })));

        let err = validate_path_segment("effect id", "a/b").unwrap_err();
        assert_eq!(
            err,
            IdError::BadChar {
                kind: "effect id".into(),
                value: "a/b".into(),
                ch: '/'
            }
        );
        assert_eq!(
            err.to_string(),
            "invalid effect id \"a/b\": character '/' is not allowed (use A-Z a-z 0-9 . _ -)"
        );
        assert!(matches!(
            RunId::new("a\\b"),
            Err(IdError::BadChar { ch: '\\', .. })
        ));
        assert!(matches!(
            RunId::new("../etc"),
            Err(IdError::BadChar { ch: '/', .. })
        ));
        assert!(matches!(
            RunId::new("é"),
            Err(IdError::BadChar { ch: 'é', .. })
        ));
        assert!(matches!(
            RunId::new("a b"),
            Err(IdError::BadChar { ch: ' ', .. })
        ));

        let long = "a".repeat(MAX_SEGMENT_LEN + 1);
        let err = RunId::new(long).unwrap_err();
        assert!(matches!(err, IdError::TooLong { len: 129, .. }), "{err:?}");
    }

    #[test]
    fn round_trips_through_display_fromstr_and_serde() {
        let id: RunId = "01JZ8X9Q2V".parse().unwrap();
        assert_eq!(id.to_string(), "01JZ8X9Q2V");
        let json = serde_json::to_string(&id).unwrap();
        assert_eq!(json, "\"01JZ8X9Q2V\"");
        let back: RunId = serde_json::from_str(&json).unwrap();
        assert_eq!(back, id);
        let bad = serde_json::from_str::<RunId>("\"a/b\"").unwrap_err();
        assert!(bad.to_string().contains("invalid run id \"a/b\""), "{bad}");
    }
}
