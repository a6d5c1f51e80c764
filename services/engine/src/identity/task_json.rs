//! The `task.json` document (spec §4.4), built exactly as the reference's
//! `serializeTaskDefinition` + `withSdkVersion` build it, so the file's key order (and hence its
//! bytes) matches: the TaskDef's key-sorted clone first, then the assigned fields appended in the
//! reference's assignment order, keys already present keeping their sorted position.

use serde_json::{Map, Value};

use super::{js_trim, key_sorted, locale_compare};

/// `schemaVersion` of every `task.json`.
pub const TASK_SCHEMA_VERSION: &str = "2026.01.tasks-v1";

/// The identity fields `task.json` records.
#[derive(Debug, Clone, Copy)]
pub struct TaskJsonIds<'a> {
    pub effect_id: &'a str,
    pub task_id: &'a str,
    pub invocation_key: &'a str,
    pub step_id: &'a str,
}

/// What `task.json` records about the call's arguments.
#[derive(Debug, Clone)]
pub enum TaskInputs<'a> {
    /// The args were JS `undefined`: neither `inputs` nor `inputsRef` is assigned (a TaskDef's
    /// own keys of those names survive).
    Undefined,
    /// The args, written inline as `inputs` (key-sorted here); `inputsRef` is cleared.
    Inline(Value),
    /// The args' 2-space JSON exceeded 1 MiB and was spilled: `inputsRef` is this run-relative
    /// blob path and `inputs` is cleared.
    Spilled(&'a str),
}

/// Why a TaskDef cannot be serialised (the reference throws the same two errors).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum TaskJsonError {
    #[error("task serializer requires a taskdef object")]
    NotAnObject,
    #[error("taskdef.kind must be a non-empty string")]
    MissingKind,
}

/// A JS object under construction, in enumeration order. Assigning `undefined` (`None`) to a
/// key leaves it out of the JSON; only non-index keys are added after the key-sorted clone, so
/// insertion order is enumeration order, and every key is assigned at most once after the clone
/// — so an `undefined` key never needs to keep a position for a later assignment, and is simply
/// removed (keeping the others' order).
struct JsObject(Map<String, Value>);

impl JsObject {
    fn set(&mut self, key: &str, value: Option<Value>) {
        match value {
            Some(v) => match self.0.get_mut(key) {
                Some(slot) => *slot = v,
                None => {
                    self.0.insert(key.to_owned(), v);
                }
            },
            None => {
                self.0.shift_remove(key);
            }
        }
    }

    /// Keeps `key` only when its value passes `keep` (the reference assigns the TaskDef's field
    /// again when it has the right type, `undefined` otherwise).
    fn keep_if(&mut self, key: &str, keep: impl FnOnce(&Value) -> bool) {
        if self.0.get(key).is_some_and(|v| !keep(v)) {
            self.0.shift_remove(key);
        }
    }

    fn into_json(self) -> Value {
        Value::Object(self.0)
    }
}

/// The `task.json` document for a TaskDef (already carrying `autoApproval` for breakpoints).
/// `sdk_version` is `Some` for 6.0.0-style files and `None` for the 0.0.187 form.
///
/// The TaskDef must be the JSON form of the JS value: top-level keys whose value was `undefined`
/// are absent, so they cannot reserve a position for a field assigned later (the reference would
/// keep e.g. an `inputs: undefined` key's sorted position).
///
/// The TaskDef and the args are consumed: the document is built from their parts, not copied.
pub fn task_json(
    task_def: Value,
    ids: &TaskJsonIds<'_>,
    inputs: TaskInputs<'_>,
    sdk_version: Option<&str>,
) -> Result<Value, TaskJsonError> {
    if !task_def.is_object() {
        return Err(TaskJsonError::NotAnObject);
    }
    if task_def
        .get("kind")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
    {
        return Err(TaskJsonError::MissingKind);
    }
    let Value::Object(sorted) = key_sorted(task_def) else {
        return Err(TaskJsonError::NotAnObject);
    };
    let mut out = JsObject(sorted);
    // Every field below is the TaskDef's own (already in the sorted clone, where an assignment
    // keeps it) when of the right type, and removed otherwise.
    out.set("schemaVersion", Some(TASK_SCHEMA_VERSION.into()));
    out.set("effectId", Some(ids.effect_id.into()));
    out.set("taskId", Some(ids.task_id.into()));
    out.set("invocationKey", Some(ids.invocation_key.into()));
    out.set("stepId", Some(ids.step_id.into()));
    out.keep_if("title", Value::is_string);
    out.keep_if("description", Value::is_string);
    let labels = out.0.get("labels").and_then(normalize_labels);
    out.set("labels", labels);
    out.keep_if("inputSchema", Value::is_object);
    out.keep_if("outputSchema", |v| {
        matches!(v, Value::Null | Value::Bool(false) | Value::Object(_))
    });
    for key in [
        "io",
        "agent",
        "node",
        "breakpoint",
        "orchestratorTask",
        "sleep",
        "metadata",
    ] {
        out.keep_if(key, Value::is_object);
    }
    match inputs {
        TaskInputs::Undefined => {}
        TaskInputs::Inline(args) => {
            out.set("inputs", Some(key_sorted(args)));
            out.set("inputsRef", None);
        }
        TaskInputs::Spilled(blob_ref) => {
            out.set("inputs", None);
            out.set("inputsRef", Some(blob_ref.into()));
        }
    }
    if let Some(version) = sdk_version {
        out.set("sdkVersion", Some(version.into()));
    }
    Ok(out.into_json())
}

/// `normalizeLabels`: the string entries, JS-trimmed, non-empty, de-duplicated (first occurrence
/// wins) and sorted by `localeCompare`; `None` when nothing is left or `labels` is not an array.
fn normalize_labels(labels: &Value) -> Option<Value> {
    let Value::Array(items) = labels else {
        return None;
    };
    let mut unique: Vec<&str> = Vec::with_capacity(items.len());
    for label in items.iter().filter_map(Value::as_str).map(js_trim) {
        if !label.is_empty() && !unique.contains(&label) {
            unique.push(label);
        }
    }
    if unique.is_empty() {
        return None;
    }
    unique.sort_by(|a, b| locale_compare(a, b));
    Some(Value::Array(unique.into_iter().map(Value::from).collect()))
}
