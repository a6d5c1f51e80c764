//! One OpenTelemetry trace per run: run → iteration → task → worker → harness → model request.
//!
//! A run gets a root span of its own when it is created (`run`, covering the creation's writes),
//! not a child of the `CreateRun` request that made it: a run outlives its request by hours,
//! retries and orchestrator restarts, and one trace per run is what an operator looks up. The
//! root links to the request's span instead, so the two are still found from each other.
//!
//! The root's W3C context is kept in `run.json` ([`TRACEPARENT_KEY`], [`TRACESTATE_KEY`]; extra
//! keys are ignored by babysitter) and in the run's summary. Everything later hangs off it by
//! that text alone, so an orchestrator that recovered the run after a restart continues the same
//! trace:
//! - each iteration is a `run.iterate` span, child of the root; the journal calls made inside it
//!   carry it to the journal (the client interceptor injects the current span);
//! - each task handed to the queue gets a `run.task` span, child of the root; its context rides
//!   with the task to the worker (`TaskAssignment.traceparent`), whose execution span is its
//!   child. The span marks the dispatch (it ends once the task is queued): holding it open until
//!   the task resolves would tie an exported span to queue state that a restart loses, and the
//!   worker's spans under it carry the task's time anyway.
//!
//! A run without a stored context (made outside this service, or while tracing was off) has
//! iterations and tasks traced without a common root: nothing is made up for it.

use babysitter_common::telemetry::{W3cContext, link_to, set_remote_parent};
use serde_json::Value;

use crate::service::queue::TaskSpec;

/// `run.json` key of the run's root `traceparent`.
pub(crate) const TRACEPARENT_KEY: &str = "traceparent";
/// `run.json` key of the run's root `tracestate` (only when it has one).
pub(crate) const TRACESTATE_KEY: &str = "tracestate";

/// The root span of a run being created: a new trace, linked to the creating request's span.
pub(super) fn root_span(run_id: &str, namespace: &str, request: &tracing::Span) -> tracing::Span {
    let span = tracing::info_span!(parent: None, "run", run_id = %run_id, namespace = %namespace);
    link_to(&span, request);
    span
}

/// The run's trace context as stored in `run.json`, when it has one.
pub(super) fn of_run_json(run_json: &Value) -> Option<W3cContext> {
    let s = |k| run_json.get(k).and_then(Value::as_str).unwrap_or_default();
    W3cContext::parse(s(TRACEPARENT_KEY), s(TRACESTATE_KEY))
}

/// `run.json` entries for the run's trace context.
pub(super) fn run_json_entries(trace: &W3cContext) -> Vec<(&'static str, Value)> {
    let mut entries = vec![(TRACEPARENT_KEY, Value::from(trace.traceparent.clone()))];
    if !trace.tracestate.is_empty() {
        entries.push((TRACESTATE_KEY, Value::from(trace.tracestate.clone())));
    }
    entries
}

/// The span of one iteration of a run, child of the run's root when it has one.
pub(super) fn iteration_span(run_id: &str, root: Option<&W3cContext>) -> tracing::Span {
    let span = tracing::info_span!("run.iterate", run_id = %run_id);
    if let Some(root) = root {
        set_remote_parent(&span, root);
    }
    span
}

/// The dispatch span of a task (child of the run's root), its context put on the task for the
/// worker. The span ends when this returns.
pub(super) fn dispatch(spec: &mut TaskSpec, root: Option<&W3cContext>) {
    let span = tracing::info_span!(
        "run.task",
        run_id = %spec.run_id,
        effect_id = %spec.effect_id,
        kind = %spec.kind,
        label = %spec.label,
    );
    if let Some(root) = root {
        set_remote_parent(&span, root);
    }
    spec.trace = W3cContext::of_span(&span);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_context_round_trips_through_run_json() {
        let trace = W3cContext {
            traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
            tracestate: String::new(),
        };
        let run_json: serde_json::Map<String, Value> = run_json_entries(&trace)
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        assert_eq!(run_json.len(), 1, "no empty tracestate stored");
        assert_eq!(of_run_json(&Value::Object(run_json)), Some(trace));
        assert_eq!(of_run_json(&serde_json::json!({"runId": "r"})), None);
        assert_eq!(of_run_json(&serde_json::json!({"traceparent": 7})), None);
    }
}
