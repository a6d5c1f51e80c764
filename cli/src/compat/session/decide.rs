//! The session loop's decisions as pure functions over facts their callers gather: whether the
//! stop hook lets the agent stop ([`decide`], spec `babysitter-core.md` §6.1), what it does with
//! a session whose file is missing ([`recover`]), and how `run:create` binds a run to a session
//! ([`bind`], §6.2). Nothing here reads or writes anything: each rule is a row of a table test.
//!
//! A decision that needs a fact its caller has not gathered yet asks for it
//! ([`Decision::FindRun`], [`Decision::ReadRun`], [`Binding::CheckOldRun`]) instead of the caller
//! gathering everything up front: the hook reads a run's journal only when the session's own
//! state leaves the stop undecided, as it always has.

use super::file::{SessionFile, update_iteration_times};
use super::run_facts::ObservedState;

/// What the stop hook knows when it decides (the caller fills `run_found` and `run` when asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// The session file (front matter and prompt).
    pub session: SessionFile,
    /// The `<promise>` of the agent's last message.
    pub promise: Option<String>,
    /// Now, as the session file writes it.
    pub now: String,
    /// Whether the session's run was found (its directory holds `run.json` and opens); `None`
    /// until looked up ([`Decision::FindRun`]).
    pub run_found: Option<bool>,
    /// What the run's journal says; `None` until read ([`Decision::ReadRun`]).
    pub run: Option<RunView>,
}

/// The run as the stop hook sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunView {
    /// Its journal cannot be read.
    Unreadable,
    Read {
        state: ObservedState,
        /// Pending kinds, sorted, joined by `", "` (empty when none).
        pending_kinds: String,
        /// Every pending effect is a breakpoint, or none can be run by the host.
        only_breakpoints: bool,
        /// The oldest pending effect the host can run.
        current_effect: Option<String>,
        /// The last lifecycle event is terminal (no back-off).
        sealed: bool,
        /// `run.json`'s completion proof (the derived one when it has none).
        completion_proof: String,
    },
}

/// What the stop hook does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Look up the session's run, then decide again.
    FindRun,
    /// Read the run's journal, then decide again.
    ReadRun,
    /// The agent may stop.
    Approve(Approval),
    /// Block the stop: the loop goes on.
    Continue(Continuation),
}

/// Why the agent may stop (`reason` of `STOP_HOOK_INVOKED`, `hookExitReason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    SessionInactive,
    MaxIterationsReached,
    NoRunId,
    RunUnresolved,
    RunStateUnknown,
    BreakpointWaiting,
    ExternalWaiting,
    CompletionProofMatched,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SessionInactive => "session_inactive",
            Self::MaxIterationsReached => "max_iterations_reached",
            Self::NoRunId => "no_run_id",
            Self::RunUnresolved => "run_unresolved",
            Self::RunStateUnknown => "run_state_unknown",
            Self::BreakpointWaiting => "breakpoint_waiting",
            Self::ExternalWaiting => "external_waiting",
            Self::CompletionProofMatched => "completion_proof_matched",
        }
    }
}

/// `runState`, `pendingKinds`, `hasPromise`: carried by every `STOP_HOOK_INVOKED`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateFields {
    pub run_state: &'static str,
    pub pending_kinds: String,
    pub has_promise: bool,
}

impl StateFields {
    /// The fields when the run's state is not known.
    fn unknown(has_promise: bool) -> StateFields {
        StateFields {
            run_state: "",
            pending_kinds: String::new(),
            has_promise,
        }
    }
}

/// Letting the agent stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub reason: Reason,
    /// `STOP_HOOK_INVOKED` (decision `approve`) is journaled with these fields; `None`: nothing
    /// is (no run to journal in).
    pub journal: Option<StateFields>,
    /// The session ends: the file is written inactive with `hookExitReason`.
    pub deactivate: bool,
    pub exit_code: u8,
}

/// Blocking the stop for iteration `next`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Continuation {
    pub next: u64,
    /// The session file's new `last_iteration_at` and `iteration_times`.
    pub last_iteration_at: String,
    pub iteration_times: Vec<u64>,
    pub fields: StateFields,
    /// Back off on this effect before answering (the run waits on an effect the host runs).
    pub backoff_effect: Option<String>,
    /// The block `reason` (the prompt re-injected) and `systemMessage`.
    pub reason: String,
    pub system_message: String,
}

fn approve(
    reason: Reason,
    journal: Option<StateFields>,
    deactivate: bool,
    exit_code: u8,
) -> Decision {
    Decision::Approve(Approval {
        reason,
        journal,
        deactivate,
        exit_code,
    })
}

/// The stop hook's decision for a session whose file was found (or recovered).
pub fn decide(f: &Facts) -> Decision {
    let st = &f.session.state;
    if !st.active {
        return approve(Reason::SessionInactive, None, false, 0);
    }
    let Some(run_found) = f.run_found else {
        return Decision::FindRun;
    };
    if st.max_iterations > 0 && st.iteration >= st.max_iterations {
        let journal = run_found.then(|| StateFields::unknown(false));
        return approve(Reason::MaxIterationsReached, journal, true, 0);
    }
    let has_promise = f.promise.is_some();
    if st.run_id.is_empty() {
        return approve(Reason::NoRunId, None, true, 0);
    }
    if !run_found {
        return approve(Reason::RunUnresolved, None, false, 1);
    }
    let Some(run) = &f.run else {
        return Decision::ReadRun;
    };
    let RunView::Read {
        state,
        pending_kinds,
        only_breakpoints,
        current_effect,
        sealed,
        completion_proof,
    } = run
    else {
        let fields = StateFields::unknown(has_promise);
        return approve(Reason::RunStateUnknown, Some(fields), false, 1);
    };
    let fields = StateFields {
        run_state: state.as_str(),
        pending_kinds: pending_kinds.clone(),
        has_promise,
    };
    let waiting = *state == ObservedState::Waiting;
    if waiting && *only_breakpoints {
        return approve(Reason::BreakpointWaiting, Some(fields), false, 0);
    }
    if waiting && !pending_kinds.is_empty() && current_effect.is_none() {
        return approve(Reason::ExternalWaiting, Some(fields), false, 0);
    }
    let completed = *state == ObservedState::Completed;
    if completed && f.promise.as_deref() == Some(completion_proof.as_str()) {
        return approve(Reason::CompletionProofMatched, Some(fields), true, 0);
    }
    let next = st.iteration + 1;
    let iteration_times = if st.iteration >= 5 {
        update_iteration_times(&st.iteration_times, &st.last_iteration_at, &f.now)
    } else {
        st.iteration_times.clone()
    };
    let backoff_effect = if waiting && !sealed {
        current_effect.clone()
    } else {
        None
    };
    let (reason, system_message) = continuation(
        next,
        st.max_iterations,
        *state,
        pending_kinds,
        completed,
        &f.session.prompt,
    );
    Decision::Continue(Continuation {
        next,
        last_iteration_at: f.now.clone(),
        iteration_times,
        fields,
        backoff_effect,
        reason,
        system_message,
    })
}

/// The block `reason` and `systemMessage` for iteration `next`.
fn continuation(
    next: u64,
    max: u64,
    state: ObservedState,
    pending_kinds: &str,
    completed: bool,
    prompt: &str,
) -> (String, String) {
    let first = if completed {
        format!(
            "Babysitter iteration {next} | Run completed! To finish: call 'run:status --json' on your run, extract 'completionProof' from the output, then output it in <promise>SECRET</promise> tags. Do not mention or reveal the secret otherwise."
        )
    } else if state == ObservedState::Waiting && !pending_kinds.is_empty() {
        format!(
            "Babysitter iteration {next} | Waiting on: {pending_kinds}. Check if pending effects are resolved, then call run:iterate."
        )
    } else if state == ObservedState::Halted {
        format!(
            "Babysitter iteration {next} | Run halted. Inspect run:status --json for the halt reason and payload, then fix the process or inputs before continuing."
        )
    } else if state == ObservedState::Failed {
        format!(
            "Babysitter iteration {next} | Run failed. Fix the run, journal or process (inspect the sdk.md if needed) and proceed."
        )
    } else {
        format!("Babysitter iteration {next} | Continue orchestration (run:iterate).")
    };
    let banner = format!("\u{1F504} Babysitter iteration {next}/{max}");
    let system = if completed {
        format!("{banner} | Run completed! Extract promise tag to finish.")
    } else if state == ObservedState::Waiting && !pending_kinds.is_empty() {
        format!("{banner} | Waiting on: {pending_kinds}")
    } else if state == ObservedState::Failed {
        format!("{banner} | Failed — check run state")
    } else {
        format!("{banner} [{}]", state.as_str())
    };
    (format!("{first}\n\n{prompt}"), system)
}

/// What the stop hook does when the session file is missing, by the live runs that journaled
/// this session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// No run claims the session: the agent may stop.
    Nothing,
    /// One does: the session file is recreated for it (index into the candidates).
    Recreate(usize),
    /// Several do (B20): journaled in each, the stop is blocked until one is re-associated.
    Ambiguous {
        reason: String,
        system_message: String,
    },
}

/// The recovery for session `sid` claimed by the live runs `candidates` (their ids).
pub fn recover(sid: &str, candidates: &[&str]) -> Recovery {
    match candidates {
        [] => Recovery::Nothing,
        [_] => Recovery::Recreate(0),
        ids => {
            let n = ids.len();
            let ids = ids.join(", ");
            Recovery::Ambiguous {
                reason: format!(
                    "Babysitter | The session state file for session {sid} is missing and {n} active runs are bound to this session: {ids}. Choose the run to continue and re-associate it: babysitter session:associate --session-id {sid} --run-id <runId> --force (or session:init --session-id {sid} --run-id <runId>), and halt the others with run:halt. Then continue orchestrating that run."
                ),
                system_message: format!(
                    "\u{1F504} Babysitter | Ambiguous session: {n} runs claim this session — re-associate one"
                ),
            }
        }
    }
}

/// What `run:create` (and the binding of a session's bare run) knows about the session file when
/// it binds run `run_id` (the caller fills `old_run_finished` when asked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindFacts<'a> {
    /// The session file: its bound run id (empty: none), `None` when it does not exist, `Err`
    /// when it cannot be read.
    pub existing: Result<Option<&'a str>, &'a str>,
    pub run_id: &'a str,
    /// The harness releases a session bound to a finished run.
    pub auto_release: bool,
    /// The session file's path, as errors name it.
    pub state_file: &'a str,
    /// Whether the run the session is bound to has ended; `None` until checked
    /// ([`Binding::CheckOldRun`]).
    pub old_run_finished: Option<bool>,
}

/// How a run is bound to a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Binding {
    /// Check whether the session's current run has ended, then decide again.
    CheckOldRun,
    /// Refused (`fatal`: the run must not go on under this session).
    Refuse { error: String, fatal: bool },
    /// The session file names no run or this one: it is updated in place.
    Update,
    /// A fresh session file is written, releasing `released` (a finished run) when set.
    Create { released: Option<String> },
}

/// The binding of `run_id` to the session (§6.2): a file bound to another run is refused —
/// fatally for harnesses that release finished runs, once the other run is known not to be
/// finished — the same run or no run is updated, and otherwise a file is created fresh.
pub fn bind(f: &BindFacts<'_>) -> Binding {
    let old = match f.existing {
        Err(e) => {
            return Binding::Refuse {
                error: format!("cannot read the session state file: {e}"),
                fatal: false,
            };
        }
        Ok(None) => return Binding::Create { released: None },
        Ok(Some(old)) => old,
    };
    if old.is_empty() || old == f.run_id {
        return Binding::Update;
    }
    if !f.auto_release {
        return Binding::Refuse {
            error: format!("Session already associated with run: {old}"),
            fatal: false,
        };
    }
    match f.old_run_finished {
        None => Binding::CheckOldRun,
        Some(false) => Binding::Refuse {
            error: format!(
                "Session bound to active run: {old}. Complete or fail that run first, or manually remove the session state file at {}",
                f.state_file
            ),
            fatal: true,
        },
        Some(true) => Binding::Create {
            released: Some(old.to_owned()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compat::session::file::SessionState;

    const PROOF: &str = "proof-123";

    fn session(active: bool, iteration: u64, max: u64, run_id: &str) -> SessionFile {
        SessionFile {
            state: SessionState {
                active,
                iteration,
                max_iterations: max,
                run_id: run_id.into(),
                last_iteration_at: "2026-11-30T07:00:00Z".into(),
                iteration_times: vec![7],
                ..SessionState::default()
            },
            prompt: "P".into(),
        }
    }

    fn read(state: ObservedState, kinds: &str, only_bp: bool, effect: Option<&str>) -> RunView {
        RunView::Read {
            state,
            pending_kinds: kinds.into(),
            only_breakpoints: only_bp,
            current_effect: effect.map(str::to_owned),
            sealed: false,
            completion_proof: PROOF.into(),
        }
    }

    fn facts(
        s: SessionFile,
        promise: Option<&str>,
        found: Option<bool>,
        run: Option<RunView>,
    ) -> Facts {
        Facts {
            session: s,
            promise: promise.map(str::to_owned),
            now: "2026-11-30T07:00:30Z".into(),
            run_found: found,
            run,
        }
    }

    fn fields(run_state: &'static str, kinds: &str, has_promise: bool) -> Option<StateFields> {
        Some(StateFields {
            run_state,
            pending_kinds: kinds.into(),
            has_promise,
        })
    }

    /// (case, facts, expected approval: reason, journaled fields, deactivate, exit; or the
    /// question asked).
    #[test]
    fn the_stop_hook_table() {
        use ObservedState::*;
        let live = || session(true, 3, 10, "R");
        let approve = |r, j, d, e| approve(r, j, d, e);
        let cases: Vec<(&str, Facts, Decision)> = vec![
            (
                "inactive session, nothing looked up",
                facts(session(false, 3, 10, "R"), None, None, None),
                approve(Reason::SessionInactive, None, false, 0),
            ),
            (
                "the run is looked up next",
                facts(live(), None, None, None),
                Decision::FindRun,
            ),
            (
                "max iterations with a run: journaled without state",
                facts(session(true, 10, 10, "R"), Some(PROOF), Some(true), None),
                approve(Reason::MaxIterationsReached, fields("", "", false), true, 0),
            ),
            (
                "max iterations without a run",
                facts(session(true, 12, 10, ""), None, Some(false), None),
                approve(Reason::MaxIterationsReached, None, true, 0),
            ),
            (
                "max 0 is unlimited",
                facts(session(true, 99, 0, "R"), None, Some(true), None),
                Decision::ReadRun,
            ),
            (
                "no run id",
                facts(session(true, 3, 10, ""), None, Some(false), None),
                approve(Reason::NoRunId, None, true, 0),
            ),
            (
                "run not found: exit 1",
                facts(live(), None, Some(false), None),
                approve(Reason::RunUnresolved, None, false, 1),
            ),
            (
                "the journal is read next",
                facts(live(), None, Some(true), None),
                Decision::ReadRun,
            ),
            (
                "unreadable journal: exit 1",
                facts(live(), Some("x"), Some(true), Some(RunView::Unreadable)),
                approve(Reason::RunStateUnknown, fields("", "", true), false, 1),
            ),
            (
                "waiting on breakpoints only",
                facts(
                    live(),
                    None,
                    Some(true),
                    Some(read(Waiting, "breakpoint", true, None)),
                ),
                approve(
                    Reason::BreakpointWaiting,
                    fields("waiting", "breakpoint", false),
                    false,
                    0,
                ),
            ),
            (
                "waiting on external effects only",
                facts(
                    live(),
                    None,
                    Some(true),
                    Some(read(Waiting, "agent", false, None)),
                ),
                approve(
                    Reason::ExternalWaiting,
                    fields("waiting", "agent", false),
                    false,
                    0,
                ),
            ),
            (
                "completed and the promise matches",
                facts(
                    live(),
                    Some(PROOF),
                    Some(true),
                    Some(read(Completed, "", false, None)),
                ),
                approve(
                    Reason::CompletionProofMatched,
                    fields("completed", "", true),
                    true,
                    0,
                ),
            ),
        ];
        for (case, f, expected) in cases {
            assert_eq!(decide(&f), expected, "{case}");
        }
    }

    #[test]
    fn the_loop_continues_otherwise() {
        use ObservedState::*;
        let go = |s: SessionFile, promise: Option<&str>, run: RunView| match decide(&facts(
            s,
            promise,
            Some(true),
            Some(run),
        )) {
            Decision::Continue(c) => c,
            other => panic!("expected a continuation, got {other:?}"),
        };
        // A completed run with a wrong promise: told to extract the proof.
        let c = go(
            session(true, 3, 10, "R"),
            Some("wrong"),
            read(Completed, "", false, None),
        );
        assert_eq!(c.next, 4);
        assert_eq!(c.fields, fields("completed", "", true).unwrap());
        assert_eq!(c.backoff_effect, None);
        assert!(
            c.system_message
                .ends_with("Run completed! Extract promise tag to finish.")
        );
        // Waiting on a host effect: back off on it (not once the run is sealed).
        let c = go(
            session(true, 3, 10, "R"),
            None,
            read(Waiting, "node", false, Some("e1")),
        );
        assert_eq!(c.backoff_effect.as_deref(), Some("e1"));
        assert_eq!(
            c.reason,
            "Babysitter iteration 4 | Waiting on: node. Check if pending effects are resolved, then call run:iterate.\n\nP"
        );
        let mut sealed = read(Waiting, "node", false, Some("e1"));
        if let RunView::Read { sealed: s, .. } = &mut sealed {
            *s = true;
        }
        assert_eq!(
            go(session(true, 3, 10, "R"), None, sealed).backoff_effect,
            None
        );
        // Iteration times are kept before iteration 5, then the elapsed seconds are added.
        let c = go(
            session(true, 4, 10, "R"),
            None,
            read(Created, "", false, None),
        );
        assert_eq!(
            (c.iteration_times, c.last_iteration_at.as_str()),
            (vec![7], "2026-11-30T07:00:30Z")
        );
        let c = go(
            session(true, 5, 10, "R"),
            None,
            read(Created, "", false, None),
        );
        assert_eq!(c.iteration_times, vec![7, 30]);
    }

    #[test]
    fn continuation_texts() {
        let (r, s) = continuation(3, 10, ObservedState::Waiting, "agent, node", false, "P");
        assert_eq!(
            r,
            "Babysitter iteration 3 | Waiting on: agent, node. Check if pending effects are resolved, then call run:iterate.\n\nP"
        );
        assert_eq!(
            s,
            "\u{1F504} Babysitter iteration 3/10 | Waiting on: agent, node"
        );
        let (_, s) = continuation(2, 5, ObservedState::Halted, "", false, "P");
        assert_eq!(s, "\u{1F504} Babysitter iteration 2/5 [halted]");
    }

    #[test]
    fn recovery_by_claiming_runs() {
        assert_eq!(recover("s", &[]), Recovery::Nothing);
        assert_eq!(recover("s", &["a"]), Recovery::Recreate(0));
        let Recovery::Ambiguous {
            reason,
            system_message,
        } = recover("s", &["a", "b"])
        else {
            panic!("two claims are ambiguous");
        };
        assert!(reason.contains("2 active runs are bound to this session: a, b."));
        assert!(system_message.contains("Ambiguous session: 2 runs claim this session"));
    }

    #[test]
    fn the_binding_table() {
        let f = |existing, auto_release, finished| BindFacts {
            existing,
            run_id: "new",
            auto_release,
            state_file: "/s/x.md",
            old_run_finished: finished,
        };
        let refuse = |error: &str, fatal| Binding::Refuse {
            error: error.into(),
            fatal,
        };
        let cases = [
            (
                "unreadable file",
                f(Err("EACCES"), true, None),
                refuse("cannot read the session state file: EACCES", false),
            ),
            (
                "no file",
                f(Ok(None), true, None),
                Binding::Create { released: None },
            ),
            (
                "unbound file",
                f(Ok(Some("")), false, None),
                Binding::Update,
            ),
            ("same run", f(Ok(Some("new")), false, None), Binding::Update),
            (
                "another run, no release",
                f(Ok(Some("old")), false, None),
                refuse("Session already associated with run: old", false),
            ),
            (
                "another run, release: check it",
                f(Ok(Some("old")), true, None),
                Binding::CheckOldRun,
            ),
            (
                "another live run",
                f(Ok(Some("old")), true, Some(false)),
                refuse(
                    "Session bound to active run: old. Complete or fail that run first, or manually remove the session state file at /s/x.md",
                    true,
                ),
            ),
            (
                "another finished run",
                f(Ok(Some("old")), true, Some(true)),
                Binding::Create {
                    released: Some("old".into()),
                },
            ),
        ];
        for (case, facts, expected) in cases {
            assert_eq!(bind(&facts), expected, "{case}");
        }
    }
}
