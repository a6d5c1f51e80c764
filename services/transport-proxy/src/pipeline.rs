//! The streaming pipeline: upstream bytes → SSE events → canonical events → client frames.
//!
//! Why two traits: each protocol contributes one decoder (its upstream stream → canonical) and
//! one encoder (canonical → its client stream), and any decoder can feed any encoder. Both are
//! plain synchronous state machines, so the translation tables are tested without sockets
//! ([`translate_chunks`]); [`spawn_translation`] runs the same machines in a task fed by the
//! upstream body, which keeps a client disconnect from cancelling work mid-frame and lets the
//! task stop reading upstream as soon as the client is gone.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::sync::mpsc;

use crate::canonical::StreamEvent;
use crate::error::{ErrorKind, StreamError};
use crate::sse::{SseEvent, SseParser};

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

/// Spawns the translation of a live upstream body; the receiver yields client frames.
pub fn spawn_translation<S, D, E>(body: S, mut dec: D, mut enc: E) -> mpsc::Receiver<Bytes>
where
    S: Stream<Item = Result<Bytes, reqwest::Error>> + Send + 'static,
    D: StreamDecoder,
    E: StreamEncoder,
{
    let (tx, rx) = mpsc::channel::<Bytes>(32);
    tokio::spawn(async move {
        let mut body = std::pin::pin!(body);
        let mut parser = SseParser::new();
        loop {
            let (events, last): (Vec<StreamEvent>, bool) = match body.next().await {
                Some(Ok(chunk)) => (
                    parser
                        .push(&chunk)
                        .iter()
                        .flat_map(|e| dec.on_sse(e))
                        .collect(),
                    false,
                ),
                Some(Err(e)) => {
                    tracing::warn!(error = %e, "upstream stream failed");
                    let err = StreamError {
                        kind: ErrorKind::Unavailable,
                        message: "upstream stream interrupted".to_owned(),
                    };
                    (vec![StreamEvent::Error(err)], true)
                }
                None => {
                    let mut evs: Vec<StreamEvent> =
                        parser.finish().iter().flat_map(|e| dec.on_sse(e)).collect();
                    evs.extend(dec.on_end());
                    (evs, true)
                }
            };
            for ev in events {
                for frame in enc.on_event(ev) {
                    if tx.send(frame).await.is_err() {
                        tracing::debug!("client went away, upstream stream dropped");
                        return;
                    }
                }
                if enc.is_done() {
                    return;
                }
            }
            if last {
                return;
            }
        }
    });
    rx
}
