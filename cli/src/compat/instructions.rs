//! `instructions:babysit-skill|orchestrate|process-create|breakpoint-handling [--harness <h>]
//! [--interactive|--no-interactive] [--json]` (spec §5.5): the instructions an agent loads — the
//! orchestration loop (create a run, iterate, perform each effect kind, post results, finish with
//! the completion proof (§5.6) and recover: §5.7 with this CLI's commands), how to write a
//! process, how to handle a breakpoint.
//!
//! The texts are this project's own (`instructions/*.md`), adapted per harness: who drives the
//! loop (a blocking stop hook re-prompting the agent, or the agent looping in-turn), how
//! sub-agents and human questions are reached, and how a session is bound. `orchestrate` is the
//! loop `babysit-skill` teaches. The JSON answer has the reference's shape:
//! `suggestedProcesses` are the process-library paths (relative to the active library's root,
//! `process-library:active`) for the context's capability flags, in the reference's order
//! (its `CAPABILITY_PROCESS_MAP`); `existingRun` is this project's live run, if any
//! ([`existing_run`]).

mod existing_run;

use babysitter_common::EnvMap;
use serde_json::{Value, json};

use crate::compat::cli::Cli;
use crate::compat::output;
use crate::compat::session::file::{session_file_path, state_dir};
use crate::compat::session::whoami;

const TEMPLATE: &str = include_str!("instructions/babysit_skill.md");
const BREAKPOINTS: &str = include_str!("instructions/breakpoint_handling.md");
const PROCESS_CREATE: &str = include_str!("instructions/process_create.md");

/// The sections the content has, in order (`partsIncluded`).
const PARTS: &[&str] = &[
    "run-creation",
    "iteration",
    "effects",
    "breakpoint-handling",
    "results-posting",
    "completion-proof",
    "recovery",
    "critical-rules",
    "quick-reference",
];

/// What the instructions need to know about a harness.
#[derive(Debug, Clone, Copy)]
struct Harness {
    name: &'static str,
    label: &'static str,
    /// A blocking stop-style hook re-prompts the agent after each turn.
    hook_driven: bool,
    /// Environment variables whose presence shows the CLI runs under this harness.
    caller_env: &'static [&'static str],
    subagent: &'static str,
    question_tool: &'static str,
}

const HARNESSES: &[Harness] = &[
    Harness {
        name: "claude-code",
        label: "Claude Code",
        hook_driven: true,
        caller_env: &["CLAUDE_ENV_FILE"],
        subagent: " (the Task tool)",
        question_tool: "the AskUserQuestion tool",
    },
    Harness {
        name: "codex",
        label: "Codex",
        hook_driven: true,
        caller_env: &["CODEX_THREAD_ID", "CODEX_SESSION_ID", "CODEX_PLUGIN_ROOT"],
        subagent: "",
        question_tool: "a direct question in your reply",
    },
    Harness {
        name: "gemini-cli",
        label: "Gemini CLI",
        hook_driven: true,
        caller_env: &["GEMINI_SESSION_ID", "GEMINI_CWD", "GEMINI_PROJECT_DIR"],
        subagent: "",
        question_tool: "a direct question in your reply",
    },
    Harness {
        name: "pi",
        label: "Pi",
        hook_driven: true,
        caller_env: &["PI_SESSION_ID"],
        subagent: "",
        question_tool: "a direct question in your reply",
    },
    Harness {
        name: "oh-my-pi",
        label: "oh-my-pi",
        hook_driven: true,
        caller_env: &["OMP_SESSION_ID"],
        subagent: "",
        question_tool: "a direct question in your reply",
    },
    Harness {
        name: "opencode",
        label: "OpenCode",
        hook_driven: false,
        caller_env: &["OPENCODE_SESSION_ID"],
        subagent: " (a subagent task)",
        question_tool: "a direct question in your reply",
    },
    Harness {
        name: "cursor",
        label: "Cursor",
        hook_driven: true,
        caller_env: &["CURSOR_PROJECT_DIR", "CURSOR_VERSION"],
        subagent: "",
        question_tool: "a direct question in your reply",
    },
    Harness {
        name: "github-copilot",
        label: "GitHub Copilot CLI",
        hook_driven: false,
        caller_env: &["COPILOT_SESSION_ID"],
        subagent: "",
        question_tool: "a direct question in your reply",
    },
    Harness {
        name: "custom",
        label: "Custom Harness",
        hook_driven: false,
        caller_env: &[],
        subagent: "",
        question_tool: "whatever channel reaches the user",
    },
];

fn known() -> String {
    HARNESSES
        .iter()
        .map(|h| h.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `--harness`, else the harness whose variables are set, else `custom` with a warning.
fn resolve_harness(
    env: &EnvMap,
    flag: Option<&str>,
) -> (String, &'static str, Vec<String>, Vec<String>) {
    if let Some(h) = flag {
        return (h.to_owned(), "explicit", Vec::new(), Vec::new());
    }
    for h in HARNESSES {
        let matched: Vec<String> = h
            .caller_env
            .iter()
            .filter(|k| env.get_non_empty(k).is_some())
            .map(|k| (*k).to_owned())
            .collect();
        if !matched.is_empty() {
            return (h.name.to_owned(), "caller", matched, Vec::new());
        }
    }
    (
        "custom".into(),
        "fallback",
        Vec::new(),
        vec!["Host discovery failed for `instructions:*`; using the pessimistic custom-harness prompt context.".into()],
    )
}

/// How a breakpoint reaches a human under `h` (or why it cannot).
fn ask_hint(h: &Harness, interactive: Option<bool>) -> String {
    if interactive == Some(false) {
        "This session is non-interactive: nobody will answer, so never wait for one. Runs created with `--non-interactive` approve breakpoints automatically; for any other breakpoint, report it to the user and stop.".to_owned()
    } else {
        format!(
            "Ask the user with {}, showing the breakpoint's title and payload, and wait for the answer.",
            h.question_tool
        )
    }
}

/// The content and parts of one kind of instructions for `h`.
fn content(
    kind: &str,
    h: &Harness,
    hook_driven: bool,
    interactive: Option<bool>,
) -> (String, &'static [&'static str]) {
    match kind {
        "breakpoint-handling" => (
            BREAKPOINTS
                .replace("{{HARNESS_LABEL}}", h.label)
                .replace("{{BREAKPOINT_HINT}}", &ask_hint(h, interactive)),
            &["breakpoint-handling", "results-posting"],
        ),
        "process-create" => (
            PROCESS_CREATE.replace("{{HARNESS_LABEL}}", h.label),
            &[
                "interview",
                "process-creation",
                "task-kinds",
                "task-examples",
                "process-guidelines",
            ],
        ),
        _ => (compose(h, hook_driven, interactive), PARTS),
    }
}

/// The content for `h`, driven by a stop hook or looping in-turn.
fn compose(h: &Harness, hook_driven: bool, interactive: Option<bool>) -> String {
    let session_flags = if h.name == "custom" {
        String::new()
    } else {
        format!(" \\\n  --harness {}", h.name)
    };
    let after_create = if hook_driven {
        format!(
            "In {} the loop is driven by babysitter's stop hook: after `run:create`, perform one iteration (section 2) per turn and then end your turn. The hook checks the run and, while it is not finished, starts your next turn with the run's status; it lets the session end once you have emitted the completion proof or the run waits only on a human.",
            h.label
        )
    } else {
        "No hook drives this loop: you run it yourself, in this turn — iterate, perform the effects, post, and iterate again until the run completes, fails or waits on a human.".into()
    };
    let breakpoint = format!(
        "If its `taskDef.autoApproval.recommended` is `true` (the user's own auto-approval rules: `babysitter breakpoint:list-rules`), approve it without asking and say which rule matched (`autoApproval.matchedRule`). Otherwise: {}",
        ask_hint(h, interactive)
    );
    let finish = if hook_driven {
        "The stop hook compares your promise with the run's proof and ends the loop when they match."
    } else {
        "Then stop: the run is done."
    };
    let loop_rule = if hook_driven {
        "One iteration per turn: end the turn after posting, and let the hook bring you back."
    } else {
        "Keep looping until the run completes, fails or needs a human; do not stop half-way."
    };
    TEMPLATE
        .replace("{{HARNESS_LABEL}}", h.label)
        .replace("{{SESSION_FLAGS}}", &session_flags)
        .replace("{{AFTER_CREATE}}", &after_create)
        .replace("{{SUBAGENT_HINT}}", h.subagent)
        .replace("{{BREAKPOINT_HINT}}", &breakpoint)
        .replace("{{FINISH_HINT}}", finish)
        .replace("{{LOOP_RULE}}", loop_rule)
}

/// The reference's `detectExecutionContext`: CI kind, trigger, branch, actor, repository.
fn execution_context(env: &EnvMap) -> Value {
    let get = |k: &str| env.get_non_empty(k).map(str::to_owned);
    let ci = if env.get("GITHUB_ACTIONS") == Some("true") {
        "github-actions"
    } else if matches!(env.get("CI"), Some("true" | "1")) {
        "generic-ci"
    } else {
        "local"
    };
    let strip = |r: &str| r.trim_start_matches("refs/heads/").to_owned();
    let (r#ref, head_ref) = (get("GITHUB_REF"), get("GITHUB_HEAD_REF"));
    let is_main = head_ref
        .as_deref()
        .or(r#ref.as_deref())
        .map(strip)
        .is_some_and(|b| matches!(b.as_str(), "main" | "master" | "develop"));
    let event = get("GITHUB_EVENT_NAME");
    let trigger = match (ci, event.as_deref()) {
        ("local", _) => "manual",
        (_, Some("pull_request")) if env.get("GITHUB_EVENT_ACTION") == Some("synchronize") => {
            "pr-synchronize"
        }
        (_, Some("pull_request" | "pull_request_target")) => "pr-opened",
        (_, Some("issue_comment"))
            if env.get("GITHUB_EVENT_ISSUE_PULL_REQUEST") == Some("true") =>
        {
            "pr-comment-mention"
        }
        (_, Some("issue_comment")) => "issue-comment-mention",
        (_, Some("push")) if is_main => "push-to-main",
        (_, Some("push")) => "push-to-branch",
        (_, Some("workflow_run")) if env.get("GITHUB_EVENT_CONCLUSION") == Some("failure") => {
            "build-failure"
        }
        (_, Some("workflow_run" | "workflow_dispatch")) => "workflow-dispatch",
        (_, Some("schedule")) => "scheduled",
        _ => "manual",
    };
    let actor = get("GITHUB_ACTOR");
    let is_bot = actor
        .as_deref()
        .is_some_and(|a| a.ends_with("[bot]") || a.to_lowercase().ends_with("-bot"));
    let repo = get("GITHUB_REPOSITORY").unwrap_or_default();
    let (owner, name) = repo.split_once('/').unwrap_or((repo.as_str(), ""));
    let some = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    json!({
        "ci": ci, "trigger": trigger,
        "branch": {"ref": r#ref, "headRef": head_ref, "baseRef": get("GITHUB_BASE_REF"), "isMain": is_main},
        "actor": {"login": actor, "isBot": is_bot},
        "mergeableState": "unknown",
        "eventName": event,
        "repo": {"owner": some(owner), "name": some(name.split('/').next().unwrap_or(""))},
    })
}

/// The reference's `deriveCapabilityFlags`.
fn capability_flags(ctx: &Value) -> Value {
    let ci = ctx["ci"].as_str().unwrap_or("local");
    let trigger = ctx["trigger"].as_str().unwrap_or("manual");
    let gha = ci == "github-actions";
    let in_ci = ci != "local";
    json!({
        "hasPrPolicies": gha, "hasBranchPolicies": gha, "hasIssueLinking": gha,
        "hasDraftPrProhibition": gha, "hasLabelTaxonomy": gha, "hasSingleChannelRule": gha,
        "hasSourceQuoteCap": gha, "hasHandoffConventions": gha,
        "hasIdempotencyAndAbort": in_ci, "hasIssueOnlyNoDirectCommits": in_ci,
        "hasPrCommentFormat": trigger == "pr-comment-mention" || trigger == "issue-comment-mention",
        "hasSixDimensionReview": trigger == "pr-comment-mention",
        "hasScheduledReportFormat": trigger == "scheduled",
        "hasLocalDevRelax": ci == "local",
    })
}

/// The reference's `CAPABILITY_PROCESS_MAP`: for each capability flag, the library processes
/// (relative to the process library's root) to prefer, in priority order.
const CAPABILITY_PROCESSES: &[(&str, &[&str])] = &[
    (
        "hasPrPolicies",
        &[
            "specializations/collaboration/github/pr-lifecycle-router.js",
            "specializations/collaboration/github/pr-policies.js",
        ],
    ),
    (
        "hasBranchPolicies",
        &["specializations/collaboration/github/branch-policies.js"],
    ),
    (
        "hasIssueLinking",
        &["specializations/collaboration/github/issue-linking.js"],
    ),
    (
        "hasDraftPrProhibition",
        &["specializations/collaboration/github/draft-pr-policy.js"],
    ),
    (
        "hasLabelTaxonomy",
        &["specializations/collaboration/github/label-taxonomy.js"],
    ),
    (
        "hasSingleChannelRule",
        &["processes/shared/communication/single-channel-communication.js"],
    ),
    (
        "hasSourceQuoteCap",
        &["processes/shared/communication/source-quote-discipline.js"],
    ),
    (
        "hasHandoffConventions",
        &["processes/shared/communication/handoff-conventions.js"],
    ),
    (
        "hasIdempotencyAndAbort",
        &["processes/shared/ci/idempotency-and-safe-abort.js"],
    ),
    (
        "hasIssueOnlyNoDirectCommits",
        &["specializations/collaboration/github/issue-only-no-direct-commits.js"],
    ),
    (
        "hasPrCommentFormat",
        &[
            "specializations/collaboration/github/pr-lifecycle-comment-response.js",
            "specializations/collaboration/github/pr-comment-response.js",
        ],
    ),
    (
        "hasSixDimensionReview",
        &["specializations/collaboration/code-review/six-dimension-review.js"],
    ),
    (
        "hasScheduledReportFormat",
        &[
            "processes/shared/reporting/scheduled-report.js",
            "specializations/research/news-intelligence-pipeline.js",
        ],
    ),
    (
        "hasLocalDevRelax",
        &["processes/shared/local-dev-workflow.js"],
    ),
];

/// The reference's `processPathsForCapabilities`: the processes of every flag that is `true`,
/// in the flags' order, each once.
fn suggested_processes(flags: &Value) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    let Some(flags) = flags.as_object() else {
        return out;
    };
    for (flag, active) in flags {
        if active != &Value::Bool(true) {
            continue;
        }
        let Some((_, processes)) = CAPABILITY_PROCESSES.iter().find(|(f, _)| f == flag) else {
            continue;
        };
        for p in *processes {
            if !out.contains(p) {
                out.push(p);
            }
        }
    }
    out
}

/// `instructions:<kind>`: `babysit-skill`, `orchestrate`, `process-create` or
/// `breakpoint-handling`.
pub async fn instructions(cli: &Cli<'_>, kind: &str) -> anyhow::Result<u8> {
    let a = &cli.args;
    let (name, source, evidence, warnings) = resolve_harness(cli.env, a.value("--harness"));
    let Some(h) = HARNESSES.iter().find(|h| h.name == name) else {
        let message = format!("Unknown harness \"{name}\". Known harnesses: {}", known());
        if a.json() {
            output::line(&output::compact(
                &json!({"error": "unknown_harness", "message": message}),
            ));
        } else {
            errln!("[instructions] {message}");
        }
        return Ok(1);
    };
    // A session file for this harness's session means its hooks ran (session-start creates it).
    let dir = state_dir(cli.env, &cli.cwd, a.value("--state-dir"));
    let hooks_detected = a.interactive != Some(false)
        && whoami::resolve(cli.env, &dir, h.name)
            .session_id
            .is_some_and(|sid| session_file_path(&dir, &sid).is_file());
    let hook_driven = h.hook_driven && hooks_detected;
    let (content, parts) = content(kind, h, hook_driven, a.interactive);
    if a.json() {
        let ctx = execution_context(cli.env);
        let flags = capability_flags(&ctx);
        let suggested = suggested_processes(&flags);
        // The reference looks in the default runs root (no `--runs-dir`).
        let runs_dir = crate::compat::paths::resolve_runs_dir(cli.env, &cli.cwd, None);
        let existing = existing_run::detect(&runs_dir, &cli.cwd).await;
        let mut out = json!({
            "harness": h.name, "harnessSource": source, "discoveryEvidence": evidence,
        });
        if let Some(i) = a.interactive {
            out["interactive"] = json!(i);
        }
        for (k, v) in [
            ("promptType", json!(kind)),
            ("hookDriven", json!(hook_driven)),
            ("hooksDetected", json!(hooks_detected)),
            ("warnings", json!(warnings)),
            ("executionContext", ctx),
            ("capabilityFlags", flags),
            ("suggestedProcesses", json!(suggested)),
            ("existingRun", existing.unwrap_or(Value::Null)),
            ("content", json!(content)),
            ("partsIncluded", json!(parts)),
        ] {
            out[k] = v;
        }
        output::line(&output::pretty(&out));
    } else {
        for w in &warnings {
            errln!("[instructions] Warning: {w}");
        }
        output::line(&content);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placeholder_is_filled_for_every_harness() {
        for h in HARNESSES {
            for (hooks, interactive) in [(true, None), (false, Some(false))] {
                let c = compose(h, hooks && h.hook_driven, interactive);
                assert!(!c.contains("{{"), "{} left a placeholder", h.name);
                assert!(c.contains("run:iterate") && c.contains("<promise>"));
            }
        }
        let claude = compose(&HARNESSES[0], true, None);
        assert!(claude.contains("stop hook") && claude.contains("AskUserQuestion"));
        let opencode = HARNESSES.iter().find(|h| h.name == "opencode").unwrap();
        assert!(compose(opencode, false, None).contains("in this turn"));
        for h in HARNESSES {
            for kind in ["breakpoint-handling", "process-create", "orchestrate"] {
                let (c, parts) = content(kind, h, false, Some(false));
                assert!(
                    !c.contains("{{"),
                    "{kind} for {} left a placeholder",
                    h.name
                );
                assert!(c.contains(h.label) && !parts.is_empty());
            }
        }
        let (bp, _) = content("breakpoint-handling", &HARNESSES[0], true, None);
        assert!(bp.contains("autoApproval.recommended") && bp.contains("AskUserQuestion"));
    }

    #[test]
    fn execution_context_in_github_actions() {
        let env: EnvMap = [
            ("GITHUB_ACTIONS", "true"),
            ("GITHUB_EVENT_NAME", "push"),
            ("GITHUB_REF", "refs/heads/main"),
            ("GITHUB_REPOSITORY", "a5c-ai/babysitter"),
            ("GITHUB_ACTOR", "dependabot[bot]"),
        ]
        .into_iter()
        .collect();
        let ctx = execution_context(&env);
        assert_eq!(ctx["trigger"], "push-to-main");
        assert_eq!(ctx["repo"]["owner"], "a5c-ai");
        assert_eq!(ctx["actor"]["isBot"], true);
        assert_eq!(capability_flags(&ctx)["hasPrPolicies"], true);
        let local = execution_context(&EnvMap::default());
        assert_eq!(local["trigger"], "manual");
        assert_eq!(capability_flags(&local)["hasLocalDevRelax"], true);
        assert_eq!(
            suggested_processes(&capability_flags(&local)),
            ["processes/shared/local-dev-workflow.js"]
        );
        let gha = suggested_processes(&capability_flags(&ctx));
        assert_eq!(
            gha[0],
            "specializations/collaboration/github/pr-lifecycle-router.js"
        );
        assert!(gha.contains(&"processes/shared/ci/idempotency-and-safe-abort.js"));
        assert!(!gha.contains(&"processes/shared/local-dev-workflow.js"));
    }
}
