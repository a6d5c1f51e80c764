//! `run:create`'s session part (spec §5.3.1, §6.2): which harness the command runs in, which
//! session it acts for, whether the session's bare run is adopted instead of creating one, the
//! binding itself, and Claude Code's first iteration.
//!
//! A session is bound when `--session-id` or `--harness` is given or a harness is detected from
//! the environment ([`binding::detect`]). An explicit `--session-id` is refused
//! (`SESSION_ID_CONFLICT`) for harnesses that supply their own; otherwise the id comes from the
//! harness's PID marker, its own variables or `AGENT_SESSION_ID` (`session:whoami`'s order).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::compat::cli::Cli;
use crate::compat::client;
use crate::compat::output;
use crate::compat::session::binding::{self, Adapter, BindRequest, Bound};
use crate::compat::session::file::{DEFAULT_MAX_ITERATIONS, state_dir};
use crate::compat::session::whoami::{self, Whoami};

/// What `run:create` knows about the session before creating the run.
pub(super) struct Plan {
    adapter: Option<&'static Adapter>,
    /// `--harness` as given (it may name no adapter).
    harness_flag: Option<String>,
    /// `--session-id` was given, with or without a value.
    session_flag: bool,
    sid: Option<String>,
    resolved: Option<Whoami>,
    state_dir: PathBuf,
}

impl Plan {
    /// The plan, or the exit code of a refused `--session-id`.
    pub(super) fn new(cli: &Cli<'_>) -> Result<Plan, u8> {
        let a = &cli.args;
        let explicit = a.value("--session-id").filter(|s| !s.is_empty());
        let session_flag = a.value("--session-id").is_some() || a.session_id_flag;
        let harness_flag = a.value("--harness").filter(|s| !s.is_empty());
        // `--harness` names the adapter; else the environment's harness, else babysitter's
        // `custom` one when a session id was asked for.
        let adapter = match harness_flag {
            Some(h) => binding::by_name(h),
            None => binding::detect(cli.env)
                .or_else(|| session_flag.then(|| binding::by_name("custom")).flatten()),
        };
        let state_dir = state_dir(cli.env, &cli.cwd, a.value("--state-dir"));
        if let (Some(_), Some(ad)) = (explicit, adapter)
            && ad.auto_resolves(cli.env)
        {
            let message = format!(
                "The \"{0}\" harness auto-detects session IDs. Do not pass --session-id explicitly when running inside {0}.",
                ad.name
            );
            if a.json() {
                output::line(&output::compact(
                    &json!({"error": "SESSION_ID_CONFLICT", "message": message}),
                ));
            } else {
                errln!("Error: {message}");
            }
            return Err(1);
        }
        let (sid, resolved) = match (adapter, explicit) {
            (Some(_), Some(id)) => (Some(id.to_owned()), None),
            (Some(ad), None) => {
                let w = whoami::resolve(cli.env, &state_dir, ad.name);
                (w.session_id.clone(), Some(w))
            }
            (None, _) => (None, None),
        };
        Ok(Plan {
            adapter,
            harness_flag: harness_flag.map(str::to_owned),
            session_flag,
            sid,
            resolved,
            state_dir,
        })
    }

    /// The session's bare run, when `run:create` should adopt it (a run with a process, no
    /// `--run-id`, a session whose file names an adoptable run).
    pub(super) async fn adoptable(
        &self,
        cli: &Cli<'_>,
        runs_dir: &Path,
        bare: bool,
    ) -> Option<(String, PathBuf)> {
        if bare || cli.args.value("--run-id").is_some() {
            return None;
        }
        let (adapter, sid) = (self.adapter?, self.sid.as_deref()?);
        let harness = self.harness_flag.as_deref().unwrap_or(adapter.name);
        binding::adoptable(&self.state_dir, sid, runs_dir, harness, &cli.cwd).await
    }

    /// Binds the session to the run (`None`: no session to bind).
    pub(super) async fn bind(
        &self,
        cli: &Cli<'_>,
        run_id: &str,
        run_dir: &Path,
        runs_dir: &Path,
    ) -> Option<Bound> {
        let Some(adapter) = self.adapter else {
            return match (&self.harness_flag, self.session_flag) {
                (Some(h), true) => Some(Bound::failed(h, "", format!("Unsupported harness: {h}"))),
                _ => None,
            };
        };
        let harness = self.harness_flag.as_deref().unwrap_or(adapter.name);
        let Some(sid) = self.sid.as_deref() else {
            return Some(Bound::failed(harness, "", adapter.missing_id_hint()));
        };
        let a = &cli.args;
        let home = client::current();
        let server = home.server();
        let req = BindRequest {
            adapter,
            session_id: sid,
            run_id,
            run_dir,
            runs_dir,
            state_dir: &self.state_dir,
            max_iterations: a
                .number("--max-iterations")
                .unwrap_or(DEFAULT_MAX_ITERATIONS),
            prompt: a.value("--prompt").unwrap_or(""),
            verbose: a.verbose(),
            server,
        };
        // A run on an orchestrator: the session file records it, and the session's later
        // commands on the run follow it there (`binding::bound_server`).
        Some(binding::bind(&req).await)
    }

    /// Whether `run:create` performs iteration 1 itself: a Claude Code session (stop-hook
    /// driven) was bound to a run with a process that has not iterated yet.
    pub(super) fn seeds_first_iteration(&self, bound: Option<&Bound>, bare: bool) -> bool {
        let claude = self
            .adapter
            .is_some_and(|a| a.name == "claude-code" && a.stop_hook);
        !bare
            && claude
            && bound.is_some_and(|b| !b.session_id.is_empty() && b.error.is_none() && !b.fatal)
    }

    /// `session` of the JSON output: the binding, and for Claude Code where its id came from.
    pub(super) fn session_json(&self, bound: &Bound) -> Value {
        let mut m: Map<String, Value> = bound.to_json();
        if self.adapter.is_some_and(|a| a.name == "claude-code") {
            let (from, pid, alive) = match &self.resolved {
                Some(w) => (
                    w.resolved_from,
                    json!(w.ancestor_pid),
                    json!(w.ancestor_alive),
                ),
                None => ("explicit", Value::Null, Value::Null),
            };
            m.insert("resolvedFrom".into(), json!(from));
            m.insert("ancestorPid".into(), pid);
            m.insert("ancestorAlive".into(), alive);
        }
        Value::Object(m)
    }
}
