//! Writes that a dropped caller cannot tear.
//!
//! A gRPC handler's future is dropped when its client goes away; a journal write dropped halfway
//! (a batch PUT begun, a rename not done) must still finish, so every write runs to completion
//! on its own. Moving every write into a task of its own costs a task hop and, with idle runtime
//! workers, a thread wake-up per write, which dominated an in-memory dispatch round trip. So the
//! write is polled in place first: a store that answers without waiting (memory, a cached
//! answer) finishes right there, and only a write that has to wait moves into its own task,
//! where it continues whether or not anyone awaits it.

use std::future::Future;
use std::task::Poll;

use crate::error::{JournalError, Result};

/// Runs `fut` to completion even if the caller stops waiting for it.
pub(crate) async fn spawn_whole<T: Send + 'static>(
    fut: impl Future<Output = Result<T>> + Send + 'static,
) -> Result<T> {
    let mut fut = Box::pin(fut);
    // One poll in place: nothing can drop the future in the middle of a synchronous poll.
    if let Poll::Ready(out) = futures::poll!(fut.as_mut()) {
        return out;
    }
    // In the caller's span: a remote store's call then still carries the caller's trace context
    // (its client interceptor reads the current span when the call is made, which may be now).
    tokio::spawn(tracing::Instrument::in_current_span(fut))
        .await
        .map_err(|e| {
            if e.is_cancelled() {
                JournalError::ShuttingDown
            } else {
                JournalError::io("journal task", std::io::Error::other(e.to_string()))
            }
        })?
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    #[test]
    fn a_write_that_does_not_wait_runs_in_place() {
        // No tokio runtime here: spawning would panic, so this passes only without a task.
        let out = futures::executor::block_on(spawn_whole(async { Ok(7) }));
        assert_eq!(out.expect("ready write"), 7);
    }

    #[tokio::test]
    async fn a_waiting_write_finishes_after_its_caller_is_dropped() {
        let (open, gate) = tokio::sync::oneshot::channel::<()>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let written = Arc::new(AtomicBool::new(false));
        let w = written.clone();
        let mut call = Box::pin(spawn_whole(async move {
            gate.await.map_err(|_| JournalError::ShuttingDown)?;
            w.store(true, Ordering::SeqCst);
            let _ = done_tx.send(());
            Ok(())
        }));
        // The caller polls once (the write starts and waits), then goes away.
        assert!(futures::poll!(call.as_mut()).is_pending());
        drop(call);
        assert!(!written.load(Ordering::SeqCst));
        open.send(()).expect("the write is still alive");
        done_rx.await.expect("the write ran to its end");
        assert!(written.load(Ordering::SeqCst));
    }

    #[tokio::test]
    async fn a_waiting_write_returns_its_result() {
        let (open, gate) = tokio::sync::oneshot::channel::<u32>();
        let call = tokio::spawn(spawn_whole(async move {
            gate.await.map_err(|_| JournalError::ShuttingDown)
        }));
        tokio::task::yield_now().await;
        open.send(41).expect("waiting");
        assert_eq!(call.await.expect("joined").expect("written"), 41);
    }
}
