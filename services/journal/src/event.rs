//! The journal event: babysitter's envelope, its checksum, and its on-disk file form.
//!
//! An event file is `{type, recordedAt, data, sdkVersion?, checksum}` serialised as Node's
//! `JSON.stringify(_, null, 2) + "\n"`. The checksum is the SHA-256 of the same object without
//! `checksum` (so `sdkVersion` is covered when present: 6.0.0 writes it, 0.0.187 does not).
//! Sequence number and ULID live in the file name `{seq:06}.{ULID}.json`, never inside.
//! Unknown event types and unknown top-level keys are kept as they are and written back.

use std::fmt;

use crate::error::{JournalError, Location};
use crate::node_json;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// The event types babysitter writes or reads. Anything else is `Other` and passes through.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EventType {
    RunCreated,
    ProcessAssigned,
    ProcessCodeHashChanged,
    EffectRequested,
    EffectResolved,
    EffectCancelled,
    EffectProgress,
    CostTracked,
    ProcessLog,
    RunCompleted,
    RunFailed,
    RunHalted,
    ProcessRuntimeError,
    StopHookInvoked,
    RunIteration,
    Other(String),
}

impl EventType {
    pub fn parse(s: &str) -> Self {
        match s {
            "RUN_CREATED" => Self::RunCreated,
            "PROCESS_ASSIGNED" => Self::ProcessAssigned,
            "PROCESS_CODE_HASH_CHANGED" => Self::ProcessCodeHashChanged,
            "EFFECT_REQUESTED" => Self::EffectRequested,
            "EFFECT_RESOLVED" => Self::EffectResolved,
            "EFFECT_CANCELLED" => Self::EffectCancelled,
            "EFFECT_PROGRESS" => Self::EffectProgress,
            "COST_TRACKED" => Self::CostTracked,
            "PROCESS_LOG" => Self::ProcessLog,
            "RUN_COMPLETED" => Self::RunCompleted,
            "RUN_FAILED" => Self::RunFailed,
            "RUN_HALTED" => Self::RunHalted,
            "PROCESS_RUNTIME_ERROR" => Self::ProcessRuntimeError,
            "STOP_HOOK_INVOKED" => Self::StopHookInvoked,
            "RUN_ITERATION" => Self::RunIteration,
            other => Self::Other(other.to_owned()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Self::RunCreated => "RUN_CREATED",
            Self::ProcessAssigned => "PROCESS_ASSIGNED",
            Self::ProcessCodeHashChanged => "PROCESS_CODE_HASH_CHANGED",
            Self::EffectRequested => "EFFECT_REQUESTED",
            Self::EffectResolved => "EFFECT_RESOLVED",
            Self::EffectCancelled => "EFFECT_CANCELLED",
            Self::EffectProgress => "EFFECT_PROGRESS",
            Self::CostTracked => "COST_TRACKED",
            Self::ProcessLog => "PROCESS_LOG",
            Self::RunCompleted => "RUN_COMPLETED",
            Self::RunFailed => "RUN_FAILED",
            Self::RunHalted => "RUN_HALTED",
            Self::ProcessRuntimeError => "PROCESS_RUNTIME_ERROR",
            Self::StopHookInvoked => "STOP_HOOK_INVOKED",
            Self::RunIteration => "RUN_ITERATION",
            Self::Other(s) => s,
        }
    }

    /// Terminal lifecycle events (`run:status` precedence).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Self::RunCompleted | Self::RunFailed | Self::RunHalted | Self::ProcessRuntimeError
        )
    }
}

impl fmt::Display for EventType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The checksummed part of an event: what a writer supplies, stamped with `recorded_at`.
#[derive(Debug, Clone, PartialEq)]
pub struct EventBody {
    pub kind: EventType,
    /// ISO-8601 UTC with milliseconds (`2025-01-01T00:00:07.000Z`).
    pub recorded_at: String,
    pub data: Value,
    /// `Some("6.0.0")` for 6.0.0-style events; `None` for 0.0.187 and rewritten journals.
    pub sdk_version: Option<String>,
    /// Top-level keys other than the five known ones, in file order (not checksummed).
    pub extra: Map<String, Value>,
}

impl EventBody {
    /// The object the checksum covers: `{type, recordedAt, data, sdkVersion?}`.
    fn checksum_payload(&self) -> Value {
        let mut m = Map::with_capacity(4);
        m.insert("type".into(), Value::String(self.kind.as_str().to_owned()));
        m.insert("recordedAt".into(), Value::String(self.recorded_at.clone()));
        m.insert("data".into(), self.data.clone());
        if let Some(v) = &self.sdk_version {
            m.insert("sdkVersion".into(), Value::String(v.clone()));
        }
        Value::Object(m)
    }

    /// Babysitter's checksum: SHA-256 hex of `JSON.stringify(payload, null, 2) + "\n"`.
    pub fn checksum(&self) -> String {
        sha256_hex(self.serialise(None).as_bytes())
    }

    /// The checksum payload (`checksum: None`) or the stored envelope, serialised without
    /// copying `data`; envelopes with extra members take the general path.
    fn serialise(&self, checksum: Option<&str>) -> String {
        if let Some(sum) = checksum
            && !self.extra.is_empty()
        {
            return node_json::to_file_string(&self.envelope(sum));
        }
        let ty = Value::String(self.kind.as_str().to_owned());
        let at = Value::String(self.recorded_at.clone());
        let sdk = self.sdk_version.clone().map(Value::String);
        let sum = checksum.map(|c| Value::String(c.to_owned()));
        let mut members: Vec<(&str, &Value)> =
            vec![("type", &ty), ("recordedAt", &at), ("data", &self.data)];
        if let Some(v) = &sdk {
            members.push(("sdkVersion", v));
        }
        if let Some(c) = &sum {
            members.push(("checksum", c));
        }
        node_json::object_to_file_string(&members)
    }

    /// The full envelope with `checksum` (and any extra keys) as it is stored.
    pub fn envelope(&self, checksum: &str) -> Value {
        let Value::Object(mut m) = self.checksum_payload() else {
            unreachable!("checksum_payload always builds an object")
        };
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        m.insert("checksum".into(), Value::String(checksum.to_owned()));
        Value::Object(m)
    }

    /// Parses an envelope object (file or batch entry). `at` names where it came from.
    pub fn from_envelope(value: Value, at: &Location) -> Result<(Self, String), JournalError> {
        let Value::Object(mut m) = value else {
            return Err(JournalError::corrupt(at, "event is not a JSON object"));
        };
        let kind = match m.remove("type") {
            Some(Value::String(s)) if !s.is_empty() => EventType::parse(&s),
            Some(_) => {
                return Err(JournalError::corrupt(
                    at,
                    "field `type` is not a non-empty string",
                ));
            }
            None => return Err(JournalError::corrupt(at, "field `type` is missing")),
        };
        let recorded_at = match m.remove("recordedAt") {
            Some(Value::String(s)) => s,
            Some(_) => {
                return Err(JournalError::corrupt(
                    at,
                    "field `recordedAt` is not a string",
                ));
            }
            None => return Err(JournalError::corrupt(at, "field `recordedAt` is missing")),
        };
        let data = m
            .remove("data")
            .ok_or_else(|| JournalError::corrupt(at, "field `data` is missing"))?;
        let sdk_version = match m.remove("sdkVersion") {
            Some(Value::String(s)) => Some(s),
            Some(_) => {
                return Err(JournalError::corrupt(
                    at,
                    "field `sdkVersion` is not a string",
                ));
            }
            None => None,
        };
        let checksum = match m.remove("checksum") {
            Some(Value::String(s)) => s,
            Some(_) => {
                return Err(JournalError::corrupt(
                    at,
                    "field `checksum` is not a string",
                ));
            }
            None => return Err(JournalError::corrupt(at, "field `checksum` is missing")),
        };
        Ok((
            Self {
                kind,
                recorded_at,
                data,
                sdk_version,
                extra: m,
            },
            checksum,
        ))
    }
}

/// A committed event: its body plus position, identity and integrity fields.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub seq: u64,
    /// 26 Crockford base32 characters, kept exactly as written.
    pub ulid: String,
    pub body: EventBody,
    pub checksum: String,
    /// Hash-chain link to the predecessor (object layout); `None` on the filesystem layout.
    pub prev_hash: Option<String>,
}

impl StoredEvent {
    /// Seals a body at a position: computes its checksum.
    pub fn seal(seq: u64, ulid: String, body: EventBody, prev_hash: Option<String>) -> Self {
        Self::seal_measured(seq, ulid, body, prev_hash).0
    }

    /// [`StoredEvent::seal`], also returning an upper bound of [`StoredEvent::file_bytes`]'s
    /// length, known from the checksum payload without serialising the event again.
    pub fn seal_measured(
        seq: u64,
        ulid: String,
        body: EventBody,
        prev_hash: Option<String>,
    ) -> (Self, usize) {
        let payload = body.serialise(None);
        let checksum = sha256_hex(payload.as_bytes());
        // The stored envelope is the payload plus `,\n  "checksum": "<64 hex>"` (and, for an
        // envelope with extra members, those: measured exactly then).
        let bound = if body.extra.is_empty() {
            payload.len() + 96
        } else {
            usize::MAX
        };
        let event = Self {
            seq,
            ulid,
            body,
            checksum,
            prev_hash,
        };
        (event, bound)
    }

    /// `000007.01JGFJK7S8000000000000001K.json`
    pub fn file_name(&self) -> String {
        file_name(self.seq, &self.ulid)
    }

    /// The exact file content babysitter writes for this event.
    pub fn file_bytes(&self) -> Vec<u8> {
        self.body.serialise(Some(&self.checksum)).into_bytes()
    }

    /// This event's link in the hash chain: what its successor carries as `prev_hash`.
    pub fn chain_hash(&self) -> String {
        let prev = self.prev_hash.as_deref().unwrap_or("");
        sha256_hex(format!("{}\n{}\n{}\n{}", self.seq, self.ulid, self.checksum, prev).as_bytes())
    }

    /// Recomputes the checksum and compares it with the stored one.
    pub fn verify_checksum(&self, at: &Location) -> Result<(), JournalError> {
        let actual = self.body.checksum();
        if actual == self.checksum {
            Ok(())
        } else {
            Err(JournalError::ChecksumMismatch {
                at: at.clone(),
                stored: self.checksum.clone(),
                computed: actual,
            })
        }
    }

    /// Parses one babysitter journal file (name gives seq and ULID) and verifies its checksum.
    pub fn from_file(run_id: &str, name: &str, bytes: &[u8]) -> Result<Self, JournalError> {
        let (seq, ulid) = parse_file_name(run_id, name)?;
        let at = Location::file(run_id, seq, name);
        let value: Value = serde_json::from_slice(bytes)
            .map_err(|e| JournalError::corrupt(&at, format!("invalid JSON: {e}")))?;
        let (body, checksum) = EventBody::from_envelope(value, &at)?;
        let event = Self {
            seq,
            ulid,
            body,
            checksum,
            prev_hash: None,
        };
        event.verify_checksum(&at)?;
        Ok(event)
    }
}

/// `{seq:06}.{ULID}.json` (at least 6 digits; wider when seq needs it).
pub fn file_name(seq: u64, ulid: &str) -> String {
    format!("{seq:06}.{ulid}.json")
}

/// Parses `{seq}.{ULID}.json` into its sequence number and ULID.
pub fn parse_file_name(run_id: &str, name: &str) -> Result<(u64, String), JournalError> {
    parse_file_name_ref(run_id, name).map(|(seq, ulid)| (seq, ulid.to_owned()))
}

/// [`parse_file_name`] without copying the ULID (listing a journal parses every name).
pub fn parse_file_name_ref<'a>(
    run_id: &str,
    name: &'a str,
) -> Result<(u64, &'a str), JournalError> {
    let bad = |why: &str| JournalError::BadFileName {
        run_id: run_id.to_owned(),
        file: name.to_owned(),
        reason: why.to_owned(),
    };
    let stem = name
        .strip_suffix(".json")
        .ok_or_else(|| bad("does not end in .json"))?;
    let (seq, ulid) = stem
        .split_once('.')
        .ok_or_else(|| bad("expected <seq>.<ULID>.json"))?;
    if seq.is_empty() || !seq.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("sequence prefix is not a decimal number"));
    }
    let seq: u64 = seq
        .parse()
        .map_err(|_| bad("sequence number out of range"))?;
    if seq == 0 {
        return Err(bad("sequence numbers start at 1"));
    }
    if !is_ulid(ulid) {
        return Err(bad("not a valid ULID"));
    }
    Ok((seq, ulid))
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex_lower(&Sha256::digest(bytes))
}

/// Lowercase hex of a digest, written byte-wise (`hex::encode` collects `char`s one by one:
/// this is on every event's path several times).
pub fn hex_lower(digest: &[u8]) -> String {
    let mut out = vec![0u8; digest.len() * 2];
    if hex::encode_to_slice(digest, &mut out).is_err() {
        return hex::encode(digest);
    }
    String::from_utf8(out).unwrap_or_default()
}

/// The chain link that precedes seq 1 of a run: binds a journal to its run id.
pub fn genesis_hash(run_id: &str) -> String {
    sha256_hex(format!("babysitter-rs journal genesis\n{run_id}").as_bytes())
}

/// 26 characters of Crockford base32 (upper case), the first one at most `7`.
pub fn is_ulid(s: &str) -> bool {
    s.len() == 26
        && s.as_bytes()[0] <= b'7'
        && s.bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'A'..=b'H' | b'J' | b'K' | b'M' | b'N' | b'P'..=b'T' | b'V'..=b'Z'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measured_bound_covers_the_stored_file() {
        for data in [
            serde_json::json!({}),
            serde_json::json!({"effectId": "e1", "nested": {"a": [1, 2.5, "x\u{1}"]}}),
        ] {
            for sdk in [None, Some("6.0.0".to_owned())] {
                let body = EventBody {
                    kind: EventType::EffectRequested,
                    recorded_at: "2026-01-01T00:00:00.000Z".into(),
                    data: data.clone(),
                    sdk_version: sdk,
                    extra: Default::default(),
                };
                let (event, bound) = StoredEvent::seal_measured(1, "0".repeat(26), body, None);
                let len = event.file_bytes().len();
                assert!(bound >= len && bound - len < 20, "{bound} vs {len}");
                assert_eq!(event.checksum, event.body.checksum());
            }
        }
    }
}
