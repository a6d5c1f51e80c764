//! The error-kind metadata on answers tonic writes itself.
//!
//! Our handlers build every error with [`crate::error::status`], which attaches
//! [`ERROR_KIND_KEY`] and [`RETRYABLE_KEY`]. Some answers never reach a handler: the generated
//! server decodes a unary request before calling it, and a request over
//! `max-decoding-message-size` is answered there — `OutOfRange` ("decoded message length too
//! large"), or `ResourceExhausted` when the limit is hit while decompressing; a malformed
//! protobuf gets `Internal`. Those answers are trailers-only (the status is in the response
//! headers), so a response mapper can add the metadata cheaply:
//!
//! - a message over a size limit (`OutOfRange`, `ResourceExhausted`) is `invalid`: the
//!   caller sent too much, the same way with or without compression, and it is
//!   not worth sending again unchanged;
//! - any other code (a handler's bare `Status`, tonic's `Internal` for a malformed message) gets
//!   the kind it stands for and its default retry hint ([`ErrorKind::from_code`]; nothing for
//!   `Unimplemented`, an unknown method or encoding), which is what clients would derive anyway.
//!
//! Not covered: a status sent in the trailers of a streamed response (a response message over
//! `max-encoding-message-size`, a client stream that goes over the limit after the handler has
//! answered). Rewriting trailers means wrapping every response body; clients still fall back to
//! the code there ([`crate::error::error_kind`]).

use tonic::Code;

use crate::error::{ERROR_KIND_KEY, ErrorKind, RETRYABLE_KEY};

/// Adds [`ERROR_KIND_KEY`] and [`RETRYABLE_KEY`] to a trailers-only error answer that lacks them
/// (one tonic wrote itself), derived from its `grpc-status`. Other responses pass unchanged.
pub fn add_error_kind<B>(mut response: http::Response<B>) -> http::Response<B> {
    let headers = response.headers_mut();
    if headers.contains_key(ERROR_KIND_KEY) {
        return response;
    }
    let Some(code) = headers.get("grpc-status") else {
        return response;
    };
    let (kind, retryable) = match Code::from_bytes(code.as_bytes()) {
        Code::OutOfRange | Code::ResourceExhausted => (ErrorKind::InvalidArgument, false),
        code => match ErrorKind::from_code(code) {
            Some(kind) => (kind, kind.default_retryable()),
            None => return response,
        },
    };
    headers.insert(
        ERROR_KIND_KEY,
        http::HeaderValue::from_static(kind.as_str()),
    );
    headers.insert(
        RETRYABLE_KEY,
        http::HeaderValue::from_static(if retryable { "true" } else { "false" }),
    );
    response
}

#[cfg(test)]
mod tests {
    use tonic::Status;

    use super::*;
    use crate::error::{error_kind, retryable, status};

    fn answer(status: Status) -> http::Response<()> {
        add_error_kind(status.into_http())
    }

    fn back(response: &http::Response<()>) -> Status {
        Status::from_header_map(response.headers()).unwrap()
    }

    #[test]
    fn tonic_over_limit_answers_get_a_kind() {
        let response = answer(Status::out_of_range(
            "Error, decoded message length too large: found 2097157 bytes, the limit is: 1048576 bytes",
        ));
        assert_eq!(response.headers()[ERROR_KIND_KEY], "invalid");
        let status = back(&response);
        assert_eq!(status.code(), Code::OutOfRange, "tonic's code is kept");
        assert_eq!(error_kind(&status), Some(ErrorKind::InvalidArgument));
        assert!(!retryable(&status));

        let response = answer(Status::resource_exhausted(
            "Error decompressing: size limit, of 1048576 bytes, exceeded while decompressing message",
        ));
        let status = back(&response);
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert_eq!(error_kind(&status), Some(ErrorKind::InvalidArgument));
        assert!(!retryable(&status), "sending it again would not help");
    }

    #[test]
    fn our_own_answers_and_successes_are_left_alone() {
        let ours = answer(status(ErrorKind::Unavailable, "draining", true, &[]));
        assert_eq!(ours.headers()[ERROR_KIND_KEY], "unavailable");
        assert_eq!(ours.headers()[RETRYABLE_KEY], "true");

        let ok = add_error_kind(http::Response::new(()));
        assert!(ok.headers().is_empty());
        // No kind for codes that stand for none (an unknown method).
        let unimplemented = answer(Status::unimplemented("no such method"));
        assert!(!unimplemented.headers().contains_key(ERROR_KIND_KEY));
    }
}
