//! The `task.json` document (spec §4.4), built exactly as the reference's
//! `serializeTaskDefinition` + `withSdkVersion` build it, so the file's key order (and hence its
//! bytes) matches: the TaskDef's key-sorted clone first, then the assigned fields appended in the
//! reference's assignment order, keys already present keeping their sorted position.

use serde_json::{Map, Value};

use super::{js_sorted_keys, js_trim, key_sorted_clone, locale_compare};

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
#[derive(Debug, Clone, Copy)]
pub enum TaskInputs<'a> {
    /// The args were JS `undefined`: neither `inputs` nor `inputsRef` is assigned (a TaskDef's
    /// own keys of those names survive).
    Undefined,
    /// The args, written inline as `inputs` (key-sorted here); `inputsRef` is cleared.
    Inline(&'a Value),
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

/// A JS object under construction: insertion-ordered keys whose value may be `undefined`
/// (`None`). An `undefined` key keeps its position but is left out of the JSON. Only non-index
/// keys are ever added after the key-sorted clone, so insertion order is enumeration order.
struct JsObject(Vec<(String, Option<Value>)>);

impl JsObject {
    fn set(&mut self, key: &str, value: Option<Value>) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, slot)) => *slot = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }

    fn into_json(self) -> Value {
        Value::Object(
            self.0
                .into_iter()
                .filter_map(|(key, value)| value.map(|v| (key, v)))
                .collect::<Map<_, _>>(),
        )
    }
}

/// The `task.json` document for a TaskDef (already carrying `autoApproval` for breakpoints).
/// `sdk_version` is `Some` for 6.0.0-style files and `None` for the 0.0.187 form.
///
/// The TaskDef must be the JSON form of the JS value: top-level keys whose value was `undefined`
/// are absent, so they cannot reserve a position for a field assigned later (the reference would
/// keep e.g. an `inputs: undefined` key's sorted position).
pub fn task_json(
    task_def: &Value,
    ids: &TaskJsonIds<'_>,
    inputs: TaskInputs<'_>,
    sdk_version: Option<&str>,
) -> Result<Value, TaskJsonError> {
    let def = task_def.as_object().ok_or(TaskJsonError::NotAnObject)?;
    let kind = match def.get("kind") {
        Some(Value::String(kind)) if !kind.is_empty() => kind,
        _ => return Err(TaskJsonError::MissingKind),
    };
    let mut out = JsObject(
        js_sorted_keys(def.keys().map(String::as_str))
            .into_iter()
            .map(|key| (key.to_owned(), Some(key_sorted_clone(&def[key]))))
            .collect(),
    );

    let string_field = |key: &str| def.get(key).filter(|v| v.is_string()).cloned();
    let object_field = |key: &str| def.get(key).filter(|v| v.is_object()).map(key_sorted_clone);

    out.set("schemaVersion", Some(TASK_SCHEMA_VERSION.into()));
    out.set("effectId", Some(ids.effect_id.into()));
    out.set("taskId", Some(ids.task_id.into()));
    out.set("invocationKey", Some(ids.invocation_key.into()));
    out.set("stepId", Some(ids.step_id.into()));
    out.set("kind", Some(kind.as_str().into()));
    out.set("title", string_field("title"));
    out.set("description", string_field("description"));
    out.set("labels", def.get("labels").and_then(normalize_labels));
    out.set("inputSchema", object_field("inputSchema"));
    let output_schema = match def.get("outputSchema") {
        Some(v @ (Value::Null | Value::Bool(false))) => Some(v.clone()),
        _ => object_field("outputSchema"),
    };
    out.set("outputSchema", output_schema);
    for key in [
        "io",
        "agent",
        "node",
        "breakpoint",
        "orchestratorTask",
        "sleep",
        "metadata",
    ] {
        out.set(key, object_field(key));
    }
    match inputs {
        TaskInputs::Undefined => {}
        TaskInputs::Inline(args) => {
            out.set("inputs", Some(key_sorted_clone(args)));
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
