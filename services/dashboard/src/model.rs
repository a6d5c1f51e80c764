//! A run's digest (what a card shows; never a run's payloads) and its triage bucket.
//!
//! The bucket answers "does this run need me": a pending breakpoint first, then terminal
//! states, then whether anything is still moving it. Time-based buckets are decided when the
//! board is read (the digest keeps the last activity), so a run turns stale without any event.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The board's columns, in the order they are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Bucket {
    /// A breakpoint waits for a person.
    NeedsYou,
    /// Unfinished with nothing pending and no progress for `stale-after`, or halted: nothing
    /// will move it until someone resumes it.
    Orphaned,
    Working,
    /// Unfinished, waiting on pending work, no journal progress for `stale-after`.
    Stale,
    /// Failed or cancelled.
    Failed,
    Completed,
}

impl Bucket {
    pub const ALL: [Bucket; 6] = [
        Self::NeedsYou,
        Self::Orphaned,
        Self::Working,
        Self::Stale,
        Self::Failed,
        Self::Completed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::NeedsYou => "needs-you",
            Self::Orphaned => "orphaned",
            Self::Working => "working",
            Self::Stale => "stale",
            Self::Failed => "failed",
            Self::Completed => "completed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|b| b.as_str() == s)
    }
}

/// What a card shows of a run: small, so a page of 10,000 runs is cheap to index and filter.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Digest {
    pub run_id: String,
    pub namespace: String,
    /// The project (local: the folder holding `.a5c/runs`; orchestrator: the `project` label,
    /// else the namespace).
    pub project: String,
    pub process_id: String,
    pub labels: BTreeMap<String, String>,
    /// `created`, `running`, `waiting`, `completed`, `failed`, `halted`, `cancelled`.
    pub status: String,
    pub status_reason: String,
    /// Pending effects by kind.
    pub pending: BTreeMap<String, u32>,
    pub created_at: Option<String>,
    /// Milliseconds since the epoch of the run's last journal event (or summary change).
    pub last_activity_ms: Option<i64>,
    pub head_seq: u64,
    /// The journal did not verify (checksum, sequence or hash chain).
    pub corrupt: bool,
    /// Set by [`Digest::triaged`] when the board is read.
    pub bucket: Option<Bucket>,
}

impl Digest {
    pub fn pending_breakpoints(&self) -> u32 {
        self.pending.get("breakpoint").copied().unwrap_or(0)
    }

    pub fn is_terminal(&self) -> bool {
        matches!(
            self.status.as_str(),
            "completed" | "failed" | "cancelled" | "halted"
        )
    }

    /// The run's bucket at `now_ms`.
    pub fn bucket_at(&self, now_ms: i64, stale_after_ms: i64) -> Bucket {
        let idle = self
            .last_activity_ms
            .is_some_and(|t| now_ms.saturating_sub(t) > stale_after_ms);
        match self.status.as_str() {
            "completed" => Bucket::Completed,
            "failed" | "cancelled" => Bucket::Failed,
            _ if self.corrupt => Bucket::Failed,
            _ if self.pending_breakpoints() > 0 => Bucket::NeedsYou,
            "halted" => Bucket::Orphaned,
            _ if idle && self.pending.values().sum::<u32>() == 0 => Bucket::Orphaned,
            _ if idle => Bucket::Stale,
            _ => Bucket::Working,
        }
    }

    /// Whether the search text `q` (lower case) matches its id, process, project or a label.
    pub fn matches(&self, q: &str) -> bool {
        let has = |s: &str| s.to_lowercase().contains(q);
        has(&self.run_id)
            || has(&self.process_id)
            || has(&self.project)
            || self.labels.iter().any(|(k, v)| has(k) || has(v))
    }
}

/// Milliseconds since the epoch of an RFC 3339 time.
pub fn millis_of(rfc3339: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(rfc3339)
        .ok()
        .map(|t| t.timestamp_millis())
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(status: &str, pending: &[(&str, u32)], last: i64) -> Digest {
        Digest {
            run_id: "01RUN".into(),
            namespace: "default".into(),
            project: "p".into(),
            process_id: "proc".into(),
            labels: BTreeMap::new(),
            status: status.into(),
            status_reason: String::new(),
            pending: pending.iter().map(|(k, v)| ((*k).into(), *v)).collect(),
            created_at: None,
            last_activity_ms: Some(last),
            head_seq: 1,
            corrupt: false,
            bucket: None,
        }
    }

    #[test]
    fn triage_puts_a_breakpoint_first_and_idle_runs_aside() {
        let stale = 1000;
        assert_eq!(
            digest("waiting", &[("breakpoint", 1)], 0).bucket_at(5000, stale),
            Bucket::NeedsYou
        );
        assert_eq!(
            digest("waiting", &[("node", 1)], 4500).bucket_at(5000, stale),
            Bucket::Working
        );
        assert_eq!(
            digest("waiting", &[("node", 1)], 0).bucket_at(5000, stale),
            Bucket::Stale
        );
        assert_eq!(
            digest("waiting", &[], 0).bucket_at(5000, stale),
            Bucket::Orphaned
        );
        assert_eq!(
            digest("halted", &[], 4999).bucket_at(5000, stale),
            Bucket::Orphaned
        );
        assert_eq!(
            digest("cancelled", &[], 0).bucket_at(5000, stale),
            Bucket::Failed
        );
        assert_eq!(
            digest("completed", &[], 0).bucket_at(5000, stale),
            Bucket::Completed
        );
        let mut corrupt = digest("running", &[], 4999);
        corrupt.corrupt = true;
        assert_eq!(corrupt.bucket_at(5000, stale), Bucket::Failed);
    }
}
