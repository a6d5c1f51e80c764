//! Telling a harness stopped by its provider's rate limit or quota window from one whose task
//! failed. The first is not the task's fault and passes: the worker gives the task back
//! (`ReleaseTask`) to be tried again after a while, and the next attempt resumes the saved
//! session ([`crate::session`]) instead of failing the effect or starting over.
//!
//! What counts: Claude Code's `api_error_status` 429, or a failure the harness reported (or
//! its last stderr line) naming a 429, a rate limit, a quota, a usage limit, Gemini's
//! `RESOURCE_EXHAUSTED` or "too many requests". Each harness retries transient 429s itself
//! first; what reaches here is a stop it gave up on.

use crate::events::Outcome;

/// Why the run was stopped by a rate limit or quota, if it was.
pub fn stop_reason(out: &Outcome, stderr: &str) -> Option<String> {
    if out.api_status == Some(429) {
        return Some(format!(
            "the provider answered 429: {}",
            out.failure.as_deref().unwrap_or("rate limited")
        ));
    }
    let last_stderr = stderr.lines().rev().find(|l| !l.trim().is_empty());
    [out.failure.as_deref(), last_stderr]
        .into_iter()
        .flatten()
        .find(|t| names_a_quota(t))
        .map(str::to_owned)
}

fn names_a_quota(text: &str) -> bool {
    let lower = text.to_ascii_lowercase();
    const PHRASES: [&str; 7] = [
        "rate limit",
        "rate_limit",
        "ratelimit",
        "quota",
        "usage limit",
        "resource_exhausted",
        "too many requests",
    ];
    PHRASES.iter().any(|p| lower.contains(p)) || has_status_429(&lower)
}

/// `429` standing alone (not inside a longer number).
fn has_status_429(text: &str) -> bool {
    let b = text.as_bytes();
    text.match_indices("429").any(|(i, _)| {
        let before = i.checked_sub(1).map(|j| b[j]);
        let after = b.get(i + 3).copied();
        !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(msg: &str) -> Outcome {
        Outcome {
            failure: Some(msg.to_owned()),
            ..Outcome::default()
        }
    }

    #[test]
    fn quota_stops_are_told_from_task_failures() {
        let claude = Outcome {
            api_status: Some(429),
            ..failed("claude code ended with error: API Error")
        };
        assert!(stop_reason(&claude, "").is_some());
        for msg in [
            "codex: stream error: 429 Too Many Requests",
            "You've hit your usage limit. Try again at 3pm",
            "[API Error: RESOURCE_EXHAUSTED: Quota exceeded for quota metric]",
            "Rate limit reached for requests",
        ] {
            assert!(stop_reason(&failed(msg), "").is_some(), "{msg}");
        }
        assert!(stop_reason(&Outcome::default(), "Error: 429 rate limited\n\n").is_some());
        for msg in [
            "exit code 1: tests failed",
            "cannot open /tmp/14290/x",
            "request 4291 failed",
        ] {
            assert!(stop_reason(&failed(msg), "").is_none(), "{msg}");
        }
        assert!(stop_reason(&Outcome::default(), "").is_none());
    }
}
