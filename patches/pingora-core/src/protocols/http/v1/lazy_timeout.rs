// rolter patch: this file is new.

//! A timeout that reads no clock unless it has to.
//!
//! `pingora_timeout::timeout` checks that its timer thread is alive, a
//! clock read, every time it is called, before the future it guards is
//! even polled. The HTTP/1 sessions call it around every read and write,
//! and most of those are ready at their first poll: some seven clock reads
//! per proxied request that decided nothing. This one polls the future
//! first and only makes the timer (`pingora_timeout::sleep`, which does
//! that check when it is made) once the future is pending: the same
//! deadline, measured from the first pending poll rather than the call,
//! which for a future ready at once is a deadline never needed.

use pingora_timeout::fast_timeout::fast_timeout_to_tokio_threshold;
use pingora_timeout::{Elapsed, TokioTimeout, ToTimeout};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// `future`, failed with [`Elapsed`] if it is still pending `duration`
/// after its first pending poll.
pub(crate) fn timeout<F: Future>(duration: Duration, future: F) -> Timeout<F> {
    Timeout {
        future,
        duration,
        delay: None,
    }
}

pub(crate) struct Timeout<F> {
    future: F,
    duration: Duration,
    delay: Option<Pin<Box<dyn Future<Output = ()> + Send + Sync>>>,
}

/// The timer `pingora_timeout::timeout` would have used: Pingora's own,
/// or tokio's past the configured threshold.
fn delay(duration: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + Sync>> {
    match fast_timeout_to_tokio_threshold() {
        Some(threshold) if duration.as_secs() > threshold.as_secs() => {
            TokioTimeout::create(duration).timeout()
        }
        _ => Box::pin(pingora_timeout::sleep(duration)),
    }
}

impl<F: Future> Future for Timeout<F> {
    type Output = Result<F::Output, Elapsed>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `future` is pinned with `self` and never moved out of it:
        // `Timeout` has no `Drop` of its own and is `Unpin` only when `F`
        // is. The other fields are never pinned.
        let this = unsafe { self.get_unchecked_mut() };
        let future = unsafe { Pin::new_unchecked(&mut this.future) };
        if let Poll::Ready(output) = future.poll(cx) {
            return Poll::Ready(Ok(output));
        }
        let duration = this.duration;
        match this.delay.get_or_insert_with(|| delay(duration)).as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(Elapsed)),
            Poll::Pending => Poll::Pending,
        }
    }
}
