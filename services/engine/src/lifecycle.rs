//! The run lifecycle's rules that every driver shares — the orchestrator service, `babysitter
//! run`, the compat commands (`run:create`, `task:post`, `run:halt`, …) and the warm server —
//! written once: a new run's `run.json` and its `RUN_CREATED` ([`NewRun`]), the completion proof
//! ([`new_completion_proof`], [`completion_proof`]), and the shell-failure rule
//! ([`shell_failure`]).
//!
//! Formats are babysitter 6.0.0's (spec §1.3, the golden run's `run.json` key order).

use serde_json::{Map, Value, json};
use sha2::Digest as _;

pub use babysitter_journal::{LAYOUT_VERSION, SDK_VERSION};

/// A run's entry point: `{importPath, exportName?}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entrypoint {
    /// Relative to the run directory (POSIX separators), absolute (`run:assign-process`), or
    /// `"bare-run"`.
    pub import_path: String,
    pub export_name: Option<String>,
}

impl Entrypoint {
    /// The entry point of a run without a process.
    pub fn bare() -> Self {
        Self {
            import_path: "bare-run".into(),
            export_name: None,
        }
    }

    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("importPath".into(), json!(self.import_path));
        if let Some(x) = &self.export_name {
            m.insert("exportName".into(), json!(x));
        }
        Value::Object(m)
    }
}

/// A new run: what its `run.json` and its `RUN_CREATED` say.
#[derive(Debug, Clone)]
pub struct NewRun {
    pub run_id: String,
    /// `"bare-run"` for a run without a process.
    pub process_id: String,
    pub request: String,
    pub entrypoint: Entrypoint,
    pub harness: Option<String>,
    pub process_revision: Option<String>,
    /// ISO-8601 with milliseconds ([`crate::iso`]).
    pub created_at: String,
    /// The directory the run was created from (babysitter scopes run adoption by it).
    pub cwd: Option<String>,
    pub prompt: Option<String>,
    pub non_interactive: bool,
    /// The import closure's code hash (`crate::process_file::closure_digest`).
    pub code_hash: Option<String>,
    /// 32 lowercase hex characters ([`new_completion_proof`]); the service leaves it out.
    pub completion_proof: Option<String>,
    /// Whether the run has `inputs.json` (`RUN_CREATED.inputsRef`).
    pub has_inputs: bool,
    /// The parent of a subprocess run: babysitter's `nested`
    /// (`{parentRunId, parentEffectId?, parentInvocationKey?, sessionId?, shareSession?}`).
    pub nested: Option<Value>,
    /// Fields of this implementation's own, after babysitter's (the service's namespace,
    /// labels, process bundle, idempotency key).
    pub extra: Map<String, Value>,
}

impl NewRun {
    /// A run of `process_id` at `entrypoint`, created now: `request` defaults to the process id.
    pub fn new(run_id: &str, process_id: &str, entrypoint: Entrypoint, created_at: String) -> Self {
        Self {
            run_id: run_id.to_owned(),
            process_id: process_id.to_owned(),
            request: process_id.to_owned(),
            entrypoint,
            harness: None,
            process_revision: None,
            created_at,
            cwd: None,
            prompt: None,
            non_interactive: false,
            code_hash: None,
            completion_proof: None,
            has_inputs: false,
            nested: None,
            extra: Map::new(),
        }
    }

    /// `run.json`, in babysitter 6.0.0's key order.
    pub fn run_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("runId".into(), json!(self.run_id));
        m.insert("request".into(), json!(self.request));
        m.insert("processId".into(), json!(self.process_id));
        if let Some(h) = &self.harness {
            m.insert("harness".into(), json!(h));
        }
        if let Some(n) = &self.nested {
            m.insert("nested".into(), n.clone());
        }
        m.insert("entrypoint".into(), self.entrypoint.to_json());
        m.insert("processPath".into(), json!(self.entrypoint.import_path));
        if let Some(r) = &self.process_revision {
            m.insert("processRevision".into(), json!(r));
        }
        m.insert("layoutVersion".into(), json!(LAYOUT_VERSION));
        m.insert("createdAt".into(), json!(self.created_at));
        if let Some(cwd) = &self.cwd {
            m.insert("cwd".into(), json!(cwd));
        }
        if let Some(p) = &self.prompt {
            m.insert("prompt".into(), json!(p));
        }
        if self.non_interactive {
            m.insert("nonInteractive".into(), json!(true));
        }
        // The reference's `createRun`: `{...metadata, processCodeHash, completionProof}` (a proof
        // handed in as metadata, as the golden run's was, keeps its earlier place).
        if let Some(h) = &self.code_hash {
            m.insert("processCodeHash".into(), json!(h));
        }
        if let Some(p) = &self.completion_proof {
            m.insert("completionProof".into(), json!(p));
        }
        m.insert("sdkVersion".into(), json!(SDK_VERSION));
        for (k, v) in &self.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }

    /// The run a stored `run.json` describes, read back by the keys [`NewRun::run_json`] writes
    /// (for finishing a creation whose `RUN_CREATED` never landed: its data then comes from the
    /// same rule as at creation). `None` when `runId`, `processId` or `entrypoint.importPath`
    /// is missing or not a string; `has_inputs` says whether the run has `inputs.json`.
    pub fn from_run_json(run_json: &Value, has_inputs: bool) -> Option<Self> {
        let text = |k: &str| run_json.get(k).and_then(Value::as_str).map(str::to_owned);
        let entry = run_json.get("entrypoint")?;
        let entrypoint = Entrypoint {
            import_path: entry.get("importPath")?.as_str()?.to_owned(),
            export_name: entry
                .get("exportName")
                .and_then(Value::as_str)
                .map(str::to_owned),
        };
        let mut run = NewRun::new(
            &text("runId")?,
            &text("processId")?,
            entrypoint,
            text("createdAt").unwrap_or_default(),
        );
        run.request = text("request").unwrap_or_else(|| run.process_id.clone());
        run.harness = text("harness");
        run.process_revision = text("processRevision");
        run.cwd = text("cwd");
        run.prompt = text("prompt");
        run.non_interactive = run_json.get("nonInteractive") == Some(&Value::Bool(true));
        run.code_hash = text("processCodeHash");
        run.completion_proof = text("completionProof");
        run.has_inputs = has_inputs;
        run.nested = run_json.get("nested").filter(|n| n.is_object()).cloned();
        Some(run)
    }

    /// The data of the run's `RUN_CREATED`.
    pub fn created_data(&self) -> Map<String, Value> {
        let mut d = Map::new();
        d.insert("runId".into(), json!(self.run_id));
        d.insert("processId".into(), json!(self.process_id));
        d.insert("entrypoint".into(), self.entrypoint.to_json());
        if let Some(h) = &self.harness {
            d.insert("harness".into(), json!(h));
        }
        if let Some(n) = &self.nested {
            d.insert("nested".into(), n.clone());
        }
        if let Some(r) = &self.process_revision {
            d.insert("processRevision".into(), json!(r));
        }
        if let Some(h) = &self.code_hash {
            d.insert("processCodeHash".into(), json!(h));
        }
        if self.has_inputs {
            d.insert("inputsRef".into(), json!("inputs.json"));
        }
        if let Some(p) = &self.prompt {
            d.insert("prompt".into(), json!(p));
        }
        d
    }
}

/// The process a run iterates: `entrypoint.importPath` of its `run.json`, once the run is known
/// to be one this runtime can iterate (babysitter's layout version, a process assigned). The
/// message is babysitter's.
pub fn iterable_entry(run_json: &Value) -> Result<&str, &'static str> {
    if run_json.get("layoutVersion").and_then(Value::as_str) != Some(LAYOUT_VERSION) {
        return Err("Run layout version is not supported by this runtime");
    }
    let import_path = run_json
        .get("entrypoint")
        .ok_or("run.json has no entrypoint")?
        .get("importPath")
        .and_then(Value::as_str)
        .ok_or("entrypoint.importPath missing")?;
    if import_path == "bare-run" {
        return Err(
            "Run has no process assigned. Use run:assign-process to attach a process before iterating.",
        );
    }
    Ok(import_path)
}

/// A new run's completion proof: 16 random bytes from the operating system, lowercase hex.
pub fn new_completion_proof() -> std::io::Result<String> {
    use std::io::Read as _;
    let mut buf = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(hex::encode(buf))
}

/// A run's completion proof: `run.json.completionProof`, or for runs that have none the one
/// babysitter derives from the run id (spec §5.6).
pub fn completion_proof(run_json: &Value) -> String {
    if let Some(p) = run_json.get("completionProof").and_then(Value::as_str) {
        return p.to_owned();
    }
    let run_id = run_json.get("runId").and_then(Value::as_str).unwrap_or("");
    hex::encode(sha2::Sha256::digest(
        format!("{run_id}:babysitter-completion-secret-v1").as_bytes(),
    ))
}

/// A run ended by hand (`run:halt`, the service's `HaltRun`): the terminal event babysitter
/// journals — `RUN_FAILED` when `failed` (with a `ManualHalt` error), else `RUN_COMPLETED` — and
/// its data: `manual_seal_reason`, the run's completion proof (`null` when `run.json` has none).
pub fn manual_seal(
    run_json: &Value,
    reason: &str,
    failed: bool,
) -> (babysitter_journal::EventType, Map<String, Value>) {
    let mut data = Map::new();
    data.insert("manual_seal_reason".into(), json!(reason));
    data.insert(
        "completionProof".into(),
        run_json
            .get("completionProof")
            .and_then(Value::as_str)
            .map_or(Value::Null, |p| json!(p)),
    );
    let kind = if failed {
        data.insert("error".into(), manual_halt_error(reason));
        babysitter_journal::EventType::RunFailed
    } else {
        babysitter_journal::EventType::RunCompleted
    };
    (kind, data)
}

/// The error a run failed by hand ends with.
pub fn manual_halt_error(reason: &str) -> Value {
    json!({"name": "ManualHalt", "message": reason})
}

/// A failed shell effect's result, as babysitter commits it (`coerceShellFailureResult`): the
/// effect resolves `ok` with `{success: false, exitCode, stdout, stderr, error}`, so the process
/// sees a value, not a thrown error. `error` is the reported error (its `data`, or the error
/// itself, may carry `exitCode`, `stdout`, `stderr`, `error`); `stdout` / `stderr`, when given,
/// are the task's logs and win over what the error carries.
pub fn shell_failure(error: &Value, stdout: Option<&str>, stderr: Option<&str>) -> Value {
    let data = match error {
        Value::Object(m) => match m.get("data") {
            Some(Value::Object(d)) => Some(d),
            _ => Some(m),
        },
        _ => None,
    };
    let str_of = |k: &str| data.and_then(|d| d.get(k)).and_then(Value::as_str);
    let exit = data
        .and_then(|d| d.get("exitCode"))
        .filter(|v| v.as_f64().is_some_and(f64::is_finite))
        .cloned()
        .unwrap_or(json!(1));
    let message = str_of("error")
        .or_else(|| str_of("message"))
        .map(str::to_owned)
        .unwrap_or_else(|| format!("Shell command exited with code {exit}"));
    json!({
        "success": false,
        "exitCode": exit,
        "stdout": stdout.or_else(|| str_of("stdout")).unwrap_or(""),
        "stderr": stderr.or_else(|| str_of("stderr")).unwrap_or(""),
        "error": message,
    })
}

/// babysitter's `rebuildReason` for the state cache after an iteration that ended the run
/// (`post_completion`, `post_halt`, `post_process_runtime_error` when the process threw,
/// `post_failure`); `None` while it waits or had already ended (the cache is then only brought
/// up to date). Every driver that keeps the cache writes it by this rule.
pub fn iteration_cache_reason(
    status: crate::IterationStatus,
    runtime_error: bool,
) -> Option<&'static str> {
    use crate::IterationStatus as S;
    match status {
        S::Completed => Some("post_completion"),
        S::Halted => Some("post_halt"),
        S::Failed if runtime_error => Some("post_process_runtime_error"),
        S::Failed => Some("post_failure"),
        S::Waiting | S::None => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_golden_run_json_is_reproduced_field_for_field() {
        let golden = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/babysitter-v6/runs/01JGOLDENRUN0000000000000/run.json"
        ));
        let mut run = NewRun::new(
            "01JGOLDENRUN0000000000000",
            "golden/demo",
            Entrypoint {
                import_path: "../../processes/demo.mjs".into(),
                export_name: Some("process".into()),
            },
            "2025-01-01T00:00:00.000Z".into(),
        );
        run.cwd = Some("/home/dev/golden".into());
        run.prompt = Some("golden sample".into());
        run.completion_proof = Some("0123456789abcdef0123456789abcdef".into());
        run.code_hash =
            Some("0bdd3814946370179ebae74f502d8a160c7974951859a7573f98a7e247093e85".into());
        let written = run.run_json();
        let golden: Value = serde_json::from_str(golden).unwrap();
        assert_eq!(written, golden);
        // Key order is `createRun`'s for a generated proof: the hash, then the proof.
        let keys: Vec<&str> = written
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "runId",
                "request",
                "processId",
                "entrypoint",
                "processPath",
                "layoutVersion",
                "createdAt",
                "cwd",
                "prompt",
                "processCodeHash",
                "completionProof",
                "sdkVersion"
            ]
        );
    }

    #[test]
    fn a_shell_failure_is_a_value_with_the_reference_fields() {
        // The error's own message is not the command's (`data` is read, as the reference does).
        let e = json!({"name": "Error", "message": "boom", "data": {"exitCode": 2, "stdout": "o"}});
        assert_eq!(
            shell_failure(&e, None, Some("err")),
            json!({"success": false, "exitCode": 2, "stdout": "o", "stderr": "err", "error": "Shell command exited with code 2"})
        );
        // data.error wins over the message; logs given win over the error's copies
        let e = json!({"message": "m", "data": {"error": "exit 3", "exitCode": 3, "stdout": "x"}});
        assert_eq!(shell_failure(&e, Some("log"), None)["stdout"], "log");
        assert_eq!(shell_failure(&e, None, None)["error"], "exit 3");
        // an error without data carries its fields itself; nothing at all: exit code 1
        let e = json!({"exitCode": 4, "stderr": "s"});
        assert_eq!(
            shell_failure(&e, None, None),
            json!({"success": false, "exitCode": 4, "stdout": "", "stderr": "s", "error": "Shell command exited with code 4"})
        );
        assert_eq!(shell_failure(&Value::Null, None, None)["exitCode"], 1);
        // a non-finite or non-numeric exit code is not taken
        assert_eq!(
            shell_failure(&json!({"exitCode": "7"}), None, None)["exitCode"],
            1
        );
    }

    #[test]
    fn a_manual_seal_carries_the_reason_and_the_proof() {
        use babysitter_journal::EventType;
        let run = json!({"completionProof": "abc"});
        let (kind, data) = manual_seal(&run, "done by hand", false);
        assert_eq!(kind, EventType::RunCompleted);
        assert_eq!(
            Value::Object(data),
            json!({"manual_seal_reason": "done by hand", "completionProof": "abc"})
        );
        let (kind, data) = manual_seal(&json!({}), "stop", true);
        assert_eq!(kind, EventType::RunFailed);
        assert_eq!(
            Value::Object(data),
            json!({"manual_seal_reason": "stop", "completionProof": null,
                   "error": {"name": "ManualHalt", "message": "stop"}})
        );
    }

    #[test]
    fn proofs_are_fresh_or_derived() {
        let a = new_completion_proof().unwrap();
        assert_eq!(a.len(), 32);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_ne!(a, new_completion_proof().unwrap());
        assert_eq!(completion_proof(&json!({"completionProof": "x"})), "x");
        assert_eq!(completion_proof(&json!({"runId": "r"})).len(), 64);
    }

    #[test]
    fn a_stored_run_json_gives_back_the_created_data_it_was_made_with() {
        let mut new = NewRun::new(
            "01RUN",
            "p",
            Entrypoint {
                import_path: "./p.js".into(),
                export_name: Some("process".into()),
            },
            "2026-01-01T00:00:00.000Z".into(),
        );
        new.harness = Some("claude-code".into());
        new.process_revision = Some("r2".into());
        new.prompt = Some("do it".into());
        new.code_hash = Some("abc".into());
        new.has_inputs = true;
        let back = NewRun::from_run_json(&new.run_json(), true).expect("a complete run.json");
        assert_eq!(back.created_data(), new.created_data());
        assert_eq!(back.run_json(), new.run_json());
        assert!(NewRun::from_run_json(&json!({"runId": "r", "processId": "p"}), false).is_none());
        assert!(
            NewRun::from_run_json(
                &json!({"runId": 1, "processId": "p",
            "entrypoint": {"importPath": "x"}}),
                false
            )
            .is_none()
        );
    }
}
