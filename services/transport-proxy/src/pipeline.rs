//! The streaming pipeline: upstream bytes → SSE events → canonical events → client frames.
//!
//! Why two traits: each protocol contributes one decoder (its upstream stream → canonical) and
//! one encoder (canonical → its client stream), and any decoder can feed any encoder. Both are
//! plain synchronous state machines, so the translation tables are tested without sockets
//! ([`translate_chunks`]); [`spawn_translation`] runs the same machines in a task fed by the
//! upstream body, which keeps a client disconnect from cancelling work mid-frame and lets the
//! task stop reading upstream as soon as the client is gone. Same-protocol streams run through
//! the same task in [`Output::Raw`] mode: bytes pass unchanged while the decoder watches usage.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;

use std::time::Duration;

use crate::canonical::{StreamEvent, Usage};
use crate::error::{
    ErrorKind, StreamError, anthropic_error_body, gemini_error_body, openai_error_body,
};
use crate::protocol::Protocol;
use crate::sse::{SseEvent, SseParser, data_frame, named_frame};

/// Upstream protocol stream → canonical events.
pub trait StreamDecoder: Send + 'static {
    /// One upstream SSE event.
    fn on_sse(&mut self, ev: &SseEvent) -> Vec<StreamEvent>;
    /// The upstream body ended (cleanly or not). Emits the terminal event if none was seen.
    fn on_end(&mut self) -> Vec<StreamEvent>;
}

/// Canonical events → client protocol frames.
pub trait StreamEncoder: Send + 'static {
    fn on_event(&mut self, ev: StreamEvent) -> Vec<Bytes>;
    /// True once a terminal frame (stop or error) was written.
    fn is_done(&self) -> bool;
}

impl StreamDecoder for Box<dyn StreamDecoder> {
    fn on_sse(&mut self, ev: &SseEvent) -> Vec<StreamEvent> {
        (**self).on_sse(ev)
    }
    fn on_end(&mut self) -> Vec<StreamEvent> {
        (**self).on_end()
    }
}

impl StreamEncoder for Box<dyn StreamEncoder> {
    fn on_event(&mut self, ev: StreamEvent) -> Vec<Bytes> {
        (**self).on_event(ev)
    }
    fn is_done(&self) -> bool {
        (**self).is_done()
    }
}

/// Runs a whole upstream body, given as chunks, through decoder and encoder (tests, fixtures).
pub fn translate_chunks<D: StreamDecoder, E: StreamEncoder>(
    mut dec: D,
    mut enc: E,
    chunks: &[&[u8]],
) -> Vec<Bytes> {
    let mut parser = SseParser::new();
    let mut out = Vec::new();
    for chunk in chunks {
        for ev in parser.push(chunk) {
            feed(&mut dec, &mut enc, &ev, &mut out);
        }
    }
    for ev in parser.finish() {
        feed(&mut dec, &mut enc, &ev, &mut out);
    }
    if !enc.is_done() {
        for c in dec.on_end() {
            out.extend(enc.on_event(c));
        }
    }
    out
}

fn feed<D: StreamDecoder, E: StreamEncoder>(
    dec: &mut D,
    enc: &mut E,
    ev: &SseEvent,
    out: &mut Vec<Bytes>,
) {
    if enc.is_done() {
        return;
    }
    for c in dec.on_sse(ev) {
        out.extend(enc.on_event(c));
    }
}

/// What a finished stream reports to the metrics.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamOutcome {
    pub usage: Usage,
    /// The kind of the in-band error that ended the stream, if one did.
    pub failed: Option<ErrorKind>,
}

/// How upstream bytes reach the client.
pub enum Output {
    /// Cross-protocol: canonical events re-encoded for the client.
    Encode(Box<dyn StreamEncoder>),
    /// Same protocol: upstream bytes forwarded unchanged (the decoder only watches usage); a
    /// failure the upstream could not report is rendered in `Protocol`'s error frame.
    Raw(Protocol),
}

/// An in-band error frame of `p` (used when the proxy itself ends a passthrough stream).
pub fn error_frame(p: Protocol, err: &StreamError) -> Bytes {
    match p {
        Protocol::Anthropic => named_frame("error", &anthropic_error_body(err.kind, &err.message)),
        Protocol::OpenAiChat => data_frame(&openai_error_body(err.kind, &err.message)),
        Protocol::OpenAiResponses => {
            let (_, _, code) = err.kind.openai();
            named_frame(
                "error",
                &serde_json::json!({"type": "error", "code": code, "message": err.message, "param": null}),
            )
        }
        Protocol::Gemini => data_frame(&gemini_error_body(err.kind, &err.message)),
    }
}

/// Spawns the translation (or watched passthrough) of a live upstream body; the receiver
/// yields client frames. `idle` bounds the silence between upstream chunks; `done` gets the
/// merged usage once the stream ends, however it ends.
pub fn spawn_stream<S>(
    body: S,
    mut dec: Box<dyn StreamDecoder>,
    mut output: Output,
    idle: Duration,
    done: Box<dyn FnOnce(StreamOutcome) + Send>,
) -> mpsc::Receiver<Bytes>
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
{
    let (tx, rx) = mpsc::channel::<Bytes>(32);
    tokio::spawn(async move {
        let mut body = std::pin::pin!(body);
        let mut parser = SseParser::new();
        let mut outcome = StreamOutcome::default();
        loop {
            let mut raw: Option<Bytes> = None;
            // A client that goes away ends the stream at once: dropping the upstream body closes
            // the upstream connection, so the provider stops generating (and billing).
            let next = tokio::select! {
                biased;
                () = tx.closed() => {
                    tracing::debug!("client went away, upstream stream dropped");
                    done(outcome);
                    return;
                }
                next = tokio::time::timeout(idle, body.next()) => next,
            };
            let (events, last): (Vec<StreamEvent>, bool) = match next {
                Ok(Some(Ok(chunk))) => {
                    let evs = parser
                        .push(&chunk)
                        .iter()
                        .flat_map(|e| dec.on_sse(e))
                        .collect();
                    raw = Some(chunk);
                    (evs, false)
                }
                Ok(Some(Err(e))) => {
                    tracing::warn!(error = %e, "upstream stream failed");
                    (
                        vec![proxy_error(
                            ErrorKind::Unavailable,
                            "upstream stream interrupted",
                        )],
                        true,
                    )
                }
                Ok(None) => {
                    let mut evs: Vec<StreamEvent> =
                        parser.finish().iter().flat_map(|e| dec.on_sse(e)).collect();
                    evs.extend(dec.on_end());
                    (evs, true)
                }
                Err(_) => (
                    vec![proxy_error(
                        ErrorKind::Timeout,
                        "upstream stream idle timeout",
                    )],
                    true,
                ),
            };
            let mut frames: Vec<Bytes> = Vec::new();
            let mut finished = false;
            for ev in events {
                match &ev {
                    StreamEvent::MessageStart { usage, .. } | StreamEvent::Usage(usage) => {
                        outcome.usage.merge(usage);
                    }
                    StreamEvent::Error(e) => outcome.failed = Some(e.kind),
                    _ => {}
                }
                match &mut output {
                    Output::Encode(enc) => {
                        frames.extend(enc.on_event(ev));
                        finished |= enc.is_done();
                    }
                    Output::Raw(p) => {
                        // Errors the upstream sent in-band are already in `raw`; only the
                        // proxy's own (idle, interrupted) need a frame.
                        if let StreamEvent::Error(err) = &ev
                            && raw.is_none()
                        {
                            frames.push(error_frame(*p, err));
                        }
                    }
                }
                if finished {
                    break;
                }
            }
            if let (Output::Raw(_), Some(chunk)) = (&output, raw) {
                frames.insert(0, chunk);
            }
            for frame in frames {
                if tx.send(frame).await.is_err() {
                    tracing::debug!("client went away, upstream stream dropped");
                    done(outcome);
                    return;
                }
            }
            if last || finished {
                done(outcome);
                return;
            }
        }
    });
    rx
}

fn proxy_error(kind: ErrorKind, message: &str) -> StreamEvent {
    StreamEvent::Error(StreamError {
        kind,
        message: message.to_owned(),
    })
}
