//! The error → `tonic::Status` conventions shared by every service.
//!
//! Each service crate writes one exhaustive `From<DomainError> for tonic::Status` (no `_ =>`)
//! that picks an [`ErrorKind`] per variant and calls [`status`]. The kind and a retry hint travel
//! in ASCII metadata ([`ERROR_KIND_KEY`], [`RETRYABLE_KEY`]) so clients can decode them with
//! [`error_kind`] and [`retryable`]; a status without that metadata (an older server, a proxy,
//! tonic itself) falls back to its gRPC code.
//!
//! [`ErrorKind::Internal`] is for bugs only: its message is replaced by a generic text on the
//! wire and the detail goes to the log.

use std::fmt;
use std::str::FromStr;

use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::{Code, Status};

/// Metadata key holding the kebab-case [`ErrorKind`].
pub const ERROR_KIND_KEY: &str = "babysitter-error-kind";
/// Metadata key holding `true` or `false`: may the client retry the same request unchanged.
pub const RETRYABLE_KEY: &str = "babysitter-retryable";
/// The message clients see for [`ErrorKind::Internal`].
pub const INTERNAL_MESSAGE: &str = "internal error";

/// The restricted set of error kinds a babysitter service returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// Bad input from the caller. `InvalidArgument`.
    InvalidArgument,
    /// The addressed thing does not exist. `NotFound`.
    NotFound,
    /// Create of something that already exists. `AlreadyExists`.
    AlreadyExists,
    /// A write conflict or a failed precondition (stale expected sequence, expired lease).
    /// `FailedPrecondition`.
    Conflict,
    /// Shutting down, not ready, a dependency down. `Unavailable`.
    Unavailable,
    /// The request ran out of time. `DeadlineExceeded`.
    DeadlineExceeded,
    /// Load shed or a quota hit. `ResourceExhausted`.
    ResourceExhausted,
    /// No or a wrong credential. `Unauthenticated`.
    Unauthenticated,
    /// A valid credential without the right role. `PermissionDenied`.
    PermissionDenied,
    /// A worker's lease expired or belongs to another worker: drop the task. `FailedPrecondition`.
    LeaseLost,
    /// A writer's leadership term was superseded (another orchestrator took over the journal):
    /// the writer must step down, not retry. `FailedPrecondition`.
    Fenced,
    /// Stored data failed verification (checksum, hash chain, sequence): retrying cannot help.
    /// `DataLoss`.
    Corrupt,
    /// Cancelled by its caller or by a cancel request. `Cancelled`.
    Cancelled,
    /// A bug. `Internal`.
    Internal,
}

impl ErrorKind {
    /// Every kind, in declaration order.
    pub const ALL: [ErrorKind; 14] = [
        ErrorKind::InvalidArgument,
        ErrorKind::NotFound,
        ErrorKind::AlreadyExists,
        ErrorKind::Conflict,
        ErrorKind::Unavailable,
        ErrorKind::DeadlineExceeded,
        ErrorKind::ResourceExhausted,
        ErrorKind::Unauthenticated,
        ErrorKind::PermissionDenied,
        ErrorKind::LeaseLost,
        ErrorKind::Fenced,
        ErrorKind::Corrupt,
        ErrorKind::Cancelled,
        ErrorKind::Internal,
    ];

    /// The gRPC code this kind is sent with.
    pub fn code(self) -> Code {
        match self {
            ErrorKind::InvalidArgument => Code::InvalidArgument,
            ErrorKind::NotFound => Code::NotFound,
            ErrorKind::AlreadyExists => Code::AlreadyExists,
            ErrorKind::Conflict | ErrorKind::LeaseLost | ErrorKind::Fenced => {
                Code::FailedPrecondition
            }
            ErrorKind::Unavailable => Code::Unavailable,
            ErrorKind::DeadlineExceeded => Code::DeadlineExceeded,
            ErrorKind::ResourceExhausted => Code::ResourceExhausted,
            ErrorKind::Unauthenticated => Code::Unauthenticated,
            ErrorKind::PermissionDenied => Code::PermissionDenied,
            ErrorKind::Corrupt => Code::DataLoss,
            ErrorKind::Cancelled => Code::Cancelled,
            ErrorKind::Internal => Code::Internal,
        }
    }

    /// The kind a bare gRPC code stands for, when a status carries no kind metadata.
    pub fn from_code(code: Code) -> Option<Self> {
        Some(match code {
            Code::InvalidArgument | Code::OutOfRange => ErrorKind::InvalidArgument,
            Code::NotFound => ErrorKind::NotFound,
            Code::AlreadyExists => ErrorKind::AlreadyExists,
            Code::FailedPrecondition | Code::Aborted => ErrorKind::Conflict,
            Code::Unavailable => ErrorKind::Unavailable,
            Code::DeadlineExceeded => ErrorKind::DeadlineExceeded,
            Code::ResourceExhausted => ErrorKind::ResourceExhausted,
            Code::Unauthenticated => ErrorKind::Unauthenticated,
            Code::PermissionDenied => ErrorKind::PermissionDenied,
            Code::DataLoss => ErrorKind::Corrupt,
            Code::Cancelled => ErrorKind::Cancelled,
            Code::Internal => ErrorKind::Internal,
            Code::Ok | Code::Unknown | Code::Unimplemented => return None,
        })
    }

    /// The kebab-case name sent in [`ERROR_KIND_KEY`]: `common.proto`'s `ErrorKind` spellings.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid",
            ErrorKind::NotFound => "not-found",
            ErrorKind::AlreadyExists => "already-exists",
            ErrorKind::Conflict => "conflict",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::DeadlineExceeded => "timeout",
            ErrorKind::ResourceExhausted => "resource-exhausted",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::PermissionDenied => "permission-denied",
            ErrorKind::LeaseLost => "lease-lost",
            ErrorKind::Fenced => "fenced",
            ErrorKind::Corrupt => "corrupt",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Internal => "internal",
        }
    }

    /// Whether a status of this kind is worth retrying when the server gave no hint.
    pub fn default_retryable(self) -> bool {
        matches!(self, ErrorKind::Unavailable | ErrorKind::ResourceExhausted)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unrecognised error-kind name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown error kind {0:?}")]
pub struct UnknownErrorKind(pub String);

impl FromStr for ErrorKind {
    type Err = UnknownErrorKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ErrorKind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownErrorKind(s.to_owned()))
    }
}

/// Builds the status for `kind`: code, message, [`ERROR_KIND_KEY`], [`RETRYABLE_KEY`] and any
/// `extra_metadata` (ASCII keys such as `babysitter-current-head`; non-printable characters in
/// values are escaped).
///
/// For [`ErrorKind::Internal`] the message is logged at error level and replaced by
/// [`INTERNAL_MESSAGE`]; the extra metadata is still attached.
pub fn status(
    kind: ErrorKind,
    message: impl Into<String>,
    retryable: bool,
    extra_metadata: &[(&'static str, String)],
) -> Status {
    let message = message.into();
    let message = if kind == ErrorKind::Internal {
        tracing::error!(detail = %message, "internal error returned to a client");
        INTERNAL_MESSAGE.to_owned()
    } else {
        message
    };
    let mut status = Status::new(kind.code(), message);
    let metadata = status.metadata_mut();
    metadata.insert(ERROR_KIND_KEY, MetadataValue::from_static(kind.as_str()));
    metadata.insert(
        RETRYABLE_KEY,
        MetadataValue::from_static(if retryable { "true" } else { "false" }),
    );
    for (key, value) in extra_metadata {
        match MetadataKey::from_bytes(key.as_bytes()) {
            Ok(key) if !key.as_str().ends_with("-bin") => {
                metadata.insert(key, ascii_value(value));
            }
            _ => {
                debug_assert!(false, "invalid ascii metadata key {key:?}");
                tracing::warn!(key = %key, "dropped error metadata with an invalid ascii key");
            }
        }
    }
    status
}

/// The kind of a status: its [`ERROR_KIND_KEY`] metadata when present and known, else the kind
/// its gRPC code stands for (`None` for `Ok`, `Cancelled`, `Unknown`, `Unimplemented`).
pub fn error_kind(status: &Status) -> Option<ErrorKind> {
    status
        .metadata()
        .get(ERROR_KIND_KEY)
        .and_then(|v| v.to_str().ok())
        .and_then(|s| s.parse().ok())
        .or_else(|| ErrorKind::from_code(status.code()))
}

/// Whether the same request may be retried: the server's [`RETRYABLE_KEY`] hint when present,
/// else [`ErrorKind::default_retryable`] of [`error_kind`].
pub fn retryable(status: &Status) -> bool {
    match status
        .metadata()
        .get(RETRYABLE_KEY)
        .and_then(|v| v.to_str().ok())
    {
        Some("true") => true,
        Some("false") => false,
        _ => error_kind(status).is_some_and(ErrorKind::default_retryable),
    }
}

/// An ASCII metadata value for `value`, escaping anything outside printable ASCII.
fn ascii_value(value: &str) -> MetadataValue<tonic::metadata::Ascii> {
    let escaped: String = value
        .chars()
        .map(|c| {
            if (' '..='~').contains(&c) {
                c.to_string()
            } else {
                c.escape_default().to_string()
            }
        })
        .collect();
    // Printable ASCII is always a valid header value.
    MetadataValue::try_from(escaped.as_str()).unwrap_or_else(|_| MetadataValue::from_static(""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_names_and_codes() {
        for kind in ErrorKind::ALL {
            assert_eq!(kind.as_str().parse::<ErrorKind>(), Ok(kind));
            // lease-lost shares FailedPrecondition with conflict: only its metadata tells them apart.
            let expected = if matches!(kind, ErrorKind::LeaseLost | ErrorKind::Fenced) {
                ErrorKind::Conflict
            } else {
                kind
            };
            assert_eq!(ErrorKind::from_code(kind.code()), Some(expected));
        }
        let lost = status(ErrorKind::LeaseLost, "gone", false, &[]);
        assert_eq!(error_kind(&lost), Some(ErrorKind::LeaseLost));
        assert!("conflicts".parse::<ErrorKind>().is_err());
        assert_eq!(ErrorKind::Conflict.code(), Code::FailedPrecondition);
    }

    /// The names on the wire are `common.proto`'s: each `ERROR_KIND_*` value's comment starts
    /// with its spelling, and every kind here is one of them (the contract is the proto file).
    #[test]
    fn the_names_are_common_protos() {
        let proto = include_str!("../../../proto/babysitter/common/v1/common.proto");
        let enum_body = proto
            .split("enum ErrorKind {")
            .nth(1)
            .and_then(|rest| rest.split('}').next())
            .expect("common.proto declares ErrorKind");
        let spelled: Vec<&str> = enum_body
            .lines()
            .filter_map(|l| l.trim().strip_prefix("// `"))
            .filter_map(|l| l.split('`').next())
            .collect();
        assert_eq!(spelled.len(), ErrorKind::ALL.len(), "{spelled:?}");
        for kind in ErrorKind::ALL {
            assert!(
                spelled.contains(&kind.as_str()),
                "{kind:?} is sent as `{}`, which common.proto does not name ({spelled:?})",
                kind.as_str()
            );
        }
    }

    #[test]
    fn status_carries_kind_retry_hint_and_extra_metadata() {
        let s = status(
            ErrorKind::Conflict,
            "expected sequence 7, head is 9",
            true,
            &[
                ("babysitter-current-head", "9".to_owned()),
                ("babysitter-note", "naïve\n".to_owned()),
            ],
        );
        assert_eq!(s.code(), Code::FailedPrecondition);
        assert_eq!(s.message(), "expected sequence 7, head is 9");
        assert_eq!(s.metadata().get(ERROR_KIND_KEY).unwrap(), "conflict");
        assert_eq!(s.metadata().get(RETRYABLE_KEY).unwrap(), "true");
        assert_eq!(s.metadata().get("babysitter-current-head").unwrap(), "9");
        assert_eq!(
            s.metadata().get("babysitter-note").unwrap(),
            "na\\u{ef}ve\\n"
        );
        assert_eq!(error_kind(&s), Some(ErrorKind::Conflict));
        assert!(retryable(&s));

        let s = status(ErrorKind::Unavailable, "shutting down", false, &[]);
        assert!(!retryable(&s), "explicit hint wins over the kind default");
    }

    #[test]
    fn internal_messages_are_hidden() {
        let s = status(
            ErrorKind::Internal,
            "index out of bounds at store.rs:42",
            false,
            &[],
        );
        assert_eq!(s.code(), Code::Internal);
        assert_eq!(s.message(), INTERNAL_MESSAGE);
        assert_eq!(error_kind(&s), Some(ErrorKind::Internal));
    }

    #[test]
    fn bare_statuses_fall_back_to_their_code() {
        assert_eq!(
            error_kind(&Status::unavailable("x")),
            Some(ErrorKind::Unavailable)
        );
        assert!(retryable(&Status::unavailable("x")));
        assert!(!retryable(&Status::invalid_argument("x")));
        assert_eq!(
            error_kind(&Status::cancelled("x")),
            Some(ErrorKind::Cancelled)
        );
        assert_eq!(error_kind(&Status::unknown("x")), None);
        assert!(!retryable(&Status::unknown("x")));
        let mut s = Status::not_found("x");
        s.metadata_mut().insert(
            ERROR_KIND_KEY,
            MetadataValue::from_static("from-the-future"),
        );
        assert_eq!(
            error_kind(&s),
            Some(ErrorKind::NotFound),
            "unknown names fall back to the code"
        );
    }
}
