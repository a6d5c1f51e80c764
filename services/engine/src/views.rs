//! What each journaled effect hands to the process when `ctx.task` reaches it: a pending
//! promise, a value, a thrown error or a cancellation — babysitter's result-delivery rules
//! (§3.6 of the core spec), computed once per resolution on the Rust side and handed to the JS
//! runtime as a small JSON document.
//!
//! Values come from `tasks/<effectId>/result.json` (`result`, else `value`), errors from the
//! journal's `EFFECT_RESOLVED.error`, and failed shell effects arrive as values
//! `{success:false, exitCode, stdout, stderr, error}` rather than exceptions.

use crate::FastMap;
use std::sync::Arc;

use babysitter_journal::index::{EffectRecord, EffectStatus};
use babysitter_journal::store::RunFile;
use babysitter_journal::{Journal, JournalError};
use serde_json::{Value, json};

use crate::EngineError;

/// How a journaled effect presents itself to the process.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Pending,
    Value(Value),
    Throw(Value),
    Cancelled(Option<String>),
}

/// One effect as the JS runtime sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct EffectView {
    pub effect_id: String,
    pub kind: Option<String>,
    pub outcome: Outcome,
    /// When it was resolved (epoch ms), advancing the process's logical clock.
    pub at_ms: Option<i64>,
}

impl EffectView {
    /// The JSON the runtime's `settle` reads.
    pub fn to_js(&self) -> String {
        /// Serialised from borrowed parts (no copy of the value).
        #[derive(serde::Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Js<'a> {
            effect_id: &'a str,
            kind: &'a Option<String>,
            outcome: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            value: Option<&'a Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            error: Option<&'a Value>,
            #[serde(skip_serializing_if = "Option::is_none")]
            reason: Option<&'a Option<String>>,
            #[serde(skip_serializing_if = "Option::is_none")]
            at_ms: Option<i64>,
        }
        let mut js = Js {
            effect_id: &self.effect_id,
            kind: &self.kind,
            outcome: "pending",
            value: None,
            error: None,
            reason: None,
            at_ms: self.at_ms,
        };
        match &self.outcome {
            Outcome::Pending => {}
            Outcome::Value(v) => (js.outcome, js.value) = ("value", Some(v)),
            Outcome::Throw(e) => (js.outcome, js.error) = ("throw", Some(e)),
            Outcome::Cancelled(reason) => (js.outcome, js.reason) = ("cancelled", Some(reason)),
        }
        // Serialising borrowed JSON values cannot fail.
        serde_json::to_string(&js).unwrap_or_default()
    }

    /// The arguments of the runtime's `deliver`: `[outcome, payload]`, the payload being the
    /// value's or error's JSON, or a cancellation's reason (no envelope to build and parse).
    pub fn delivery(&self) -> (&'static str, Option<String>) {
        match &self.outcome {
            Outcome::Pending => ("pending", None),
            Outcome::Value(v) => ("value", Some(v.to_string())),
            Outcome::Throw(e) => ("throw", Some(e.to_string())),
            Outcome::Cancelled(reason) => ("cancelled", reason.clone()),
        }
    }

    pub fn is_pending(&self) -> bool {
        self.outcome == Outcome::Pending
    }
}

pub fn iso_to_ms(iso: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(iso)
        .ok()
        .map(|d| d.timestamp_millis())
}

async fn read_json(
    journal: &Journal,
    run_id: &str,
    file: &RunFile,
) -> Result<Option<Value>, EngineError> {
    match journal.get_run_file(run_id, file).await {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| EngineError::Corrupt {
                run_id: run_id.to_owned(),
                what: file.path(),
                reason: e.to_string(),
            }),
        Err(JournalError::RunFileNotFound { .. }) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

async fn read_text(journal: &Journal, run_id: &str, path: Option<&str>) -> Option<String> {
    let file = RunFile::parse(path?).ok()?;
    let bytes = journal.get_run_file(run_id, &file).await.ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The views of `records`, keyed by invocation key.
pub async fn views_of(
    journal: &Journal,
    run_id: &str,
    records: &[Arc<EffectRecord>],
) -> Result<FastMap<String, EffectView>, EngineError> {
    let mut out = FastMap::with_capacity_and_hasher(records.len(), Default::default());
    out.extend(keyed_views(journal, run_id, records).await?);
    Ok(out)
}

/// The views of `records` with their invocation keys, in order. The result files they need are
/// read in one batch (a cold replay reads every one of the run); a view that needs more than its
/// `result.json` (a failed shell effect's logs, a `resultRef`), or whose file could not be read,
/// goes through [`view_of`], which reads what it needs and reports what is missing.
pub async fn keyed_views(
    journal: &Journal,
    run_id: &str,
    records: &[Arc<EffectRecord>],
) -> Result<Vec<(String, EffectView)>, EngineError> {
    let reads_result =
        |r: &EffectRecord| matches!(r.status, EffectStatus::ResolvedOk | EffectStatus::Cancelled);
    let files = records
        .iter()
        .filter(|r| reads_result(r))
        .map(|r| RunFile::task(&r.effect_id, "result.json"))
        .collect::<Result<Vec<_>, _>>()?;
    let mut read = journal.get_run_files(run_id, &files).await?.into_iter();
    let mut out = Vec::with_capacity(records.len());
    for r in records {
        let stored = if reads_result(r) { read.next() } else { None };
        let view = match stored {
            Some(Ok(bytes)) => view_from_stored(r, &bytes),
            Some(Err(_)) => None,
            None if r.status == EffectStatus::ResolvedError
                && r.kind.as_deref() == Some("shell") =>
            {
                None
            }
            // Pending, or a task error (the journal holds it): no result file to read.
            None => view_from_stored(r, b""),
        };
        let view = match view {
            Some(v) => v,
            None => view_of(journal, run_id, r).await?,
        };
        out.push((r.invocation_key.clone(), view));
    }
    Ok(out)
}

/// Builds the view of one effect, reading its result file when it is resolved.
pub async fn view_of(
    journal: &Journal,
    run_id: &str,
    r: &EffectRecord,
) -> Result<EffectView, EngineError> {
    let at_ms = r.resolved_at.as_deref().and_then(iso_to_ms);
    let missing = || EngineError::MissingResult {
        run_id: run_id.to_owned(),
        effect_id: r.effect_id.clone(),
    };
    let result_file = RunFile::task(&r.effect_id, "result.json")?;
    let outcome = match r.status {
        EffectStatus::Requested => Outcome::Pending,
        EffectStatus::Cancelled => {
            let stored = read_json(journal, run_id, &result_file)
                .await?
                .ok_or_else(missing)?;
            Outcome::Cancelled(
                stored
                    .get("reason")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            )
        }
        EffectStatus::ResolvedError if r.kind.as_deref() == Some("shell") => {
            let stored = read_json(journal, run_id, &result_file)
                .await?
                .ok_or_else(missing)?;
            Outcome::Value(shell_failure(journal, run_id, &stored).await)
        }
        EffectStatus::ResolvedError => Outcome::Throw(
            r.error
                .clone()
                .unwrap_or_else(|| json!({"name": "Error", "message": "Task failed"})),
        ),
        EffectStatus::ResolvedOk => {
            let bytes = match journal.get_run_file(run_id, &result_file).await {
                Ok(bytes) => bytes,
                Err(JournalError::RunFileNotFound { .. }) => return Err(missing()),
                Err(e) => return Err(e.into()),
            };
            let corrupt = |e: serde_json::Error| EngineError::Corrupt {
                run_id: run_id.to_owned(),
                what: result_file.path(),
                reason: e.to_string(),
            };
            match ok_outcome(&bytes).map_err(corrupt)? {
                Ok(outcome) => outcome,
                Err(rref) => {
                    let file = RunFile::parse(&rref)?;
                    Outcome::Value(
                        read_json(journal, run_id, &file)
                            .await?
                            .unwrap_or(Value::Null),
                    )
                }
            }
        }
    };
    Ok(EffectView {
        effect_id: r.effect_id.clone(),
        kind: r.kind.clone(),
        outcome,
        at_ms,
    })
}

/// [`view_of`] for an effect whose `result.json` the caller has just stored (`result`, as
/// stored): the same view without reading it back. `None` when the view needs more files (a
/// failed shell effect's logs, a `resultRef`): read it with [`view_of`].
pub fn view_from_stored(r: &EffectRecord, result: &[u8]) -> Option<EffectView> {
    let outcome = match r.status {
        EffectStatus::Requested => Outcome::Pending,
        EffectStatus::Cancelled => {
            let stored: Value = serde_json::from_slice(result).ok()?;
            Outcome::Cancelled(
                stored
                    .get("reason")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            )
        }
        EffectStatus::ResolvedError if r.kind.as_deref() == Some("shell") => return None,
        EffectStatus::ResolvedError => Outcome::Throw(
            r.error
                .clone()
                .unwrap_or_else(|| json!({"name": "Error", "message": "Task failed"})),
        ),
        EffectStatus::ResolvedOk => ok_outcome(result).ok()?.ok()?,
    };
    Some(EffectView {
        effect_id: r.effect_id.clone(),
        kind: r.kind.clone(),
        outcome,
        at_ms: r.resolved_at.as_deref().and_then(iso_to_ms),
    })
}

/// What an `ok` effect's stored `result.json` hands the process: `Ok(outcome)`, or `Err(ref)`
/// when the value lives in the run file `ref` (`resultRef`).
pub fn ok_outcome(bytes: &[u8]) -> Result<Result<Outcome, String>, serde_json::Error> {
    let stored = match serde_json::from_slice::<OkResult>(bytes) {
        Ok(doc) => doc,
        // JSON that is not an object reads as a document without fields.
        Err(e) => match serde_json::from_slice::<Value>(bytes) {
            Ok(_) => OkResult::default(),
            Err(_) => return Err(e),
        },
    };
    Ok(
        if stored.status.as_ref().and_then(Value::as_str) != Some("ok") {
            Ok(Outcome::Throw(stored.error.unwrap_or_else(
                || json!({"name": "Error", "message": "Task reported failure"}),
            )))
        } else if let Some(v) = stored.result.or(stored.value) {
            Ok(Outcome::Value(v))
        } else if let Some(rref) = stored.result_ref.as_ref().and_then(Value::as_str) {
            Err(rref.to_owned())
        } else {
            Ok(Outcome::Value(Value::Null))
        },
    )
}

/// A failed shell result as the process sees it ([`crate::lifecycle::shell_failure`]), its logs
/// read from the files the result refers to.
async fn shell_failure(journal: &Journal, run_id: &str, stored: &Value) -> Value {
    let stdout = read_text(
        journal,
        run_id,
        stored.get("stdoutRef").and_then(Value::as_str),
    )
    .await;
    let stderr = read_text(
        journal,
        run_id,
        stored.get("stderrRef").and_then(Value::as_str),
    )
    .await;
    crate::lifecycle::shell_failure(
        stored.get("error").unwrap_or(&Value::Null),
        stdout.as_deref(),
        stderr.as_deref(),
    )
}

/// What a view needs of an `ok` effect's `result.json`, read without building the whole
/// document: a cold replay reads one per journaled effect, and `value` (the same JSON as
/// `result` in every file babysitter writes) is skipped once `result` was seen. Repeated keys
/// keep their last value, as a parsed JSON object would.
#[derive(Default)]
struct OkResult {
    status: Option<Value>,
    result: Option<Value>,
    value: Option<Value>,
    result_ref: Option<Value>,
    error: Option<Value>,
}

impl<'de> serde::Deserialize<'de> for OkResult {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = OkResult;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a result.json object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<OkResult, A::Error> {
                let mut out = OkResult::default();
                while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                    let slot = match key.as_ref() {
                        "status" => &mut out.status,
                        "result" => &mut out.result,
                        "value" if out.result.is_none() => &mut out.value,
                        "resultRef" => &mut out.result_ref,
                        "error" => &mut out.error,
                        _ => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                            continue;
                        }
                    };
                    *slot = Some(map.next_value()?);
                }
                Ok(out)
            }
        }
        d.deserialize_map(Fields)
    }
}
