//! A request's wait under flow control (`flow_control.rs`): joining its
//! route's queue, its turn, and the answer when it leaves without a
//! dispatch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pingora::prelude::*;
use pingora::proxy::Session;
use pingora::upstreams::peer::HttpPeer;

use super::ctx::RequestCtx;
use super::dispatch::{dispatch, Dispatch};
use super::error_with;
use crate::error::GatewayError;
use crate::flow_control::{max_wait_for, Outcome, Queued, RouteQueue};
use crate::state::GatewayState;

/// The attempt's dispatch under flow control: at once while the route has
/// an unsaturated target and nobody waits; else in `queue`, in turn. Each
/// round is a pick or a wait that ended, so the loop is bounded by the
/// events that end waits (a kick per capacity change) and the deadline.
pub async fn dispatch_in_turn(
    state: &GatewayState,
    session: &mut Session,
    ctx: &mut RequestCtx,
    queue: &Arc<RouteQueue>,
) -> Result<Box<HttpPeer>, Box<Error>> {
    let priority = ctx.admitted.as_ref().map_or(0, |a| a.priority);
    let tenant = ctx
        .caller
        .as_ref()
        .map_or_else(|| "anonymous".to_owned(), |c| c.name.clone());
    let waited = Instant::now();
    let max_wait = max_wait_for(priority, ctx.snapshot.limits.flow_control.max_wait);
    let deadline = tokio::time::Instant::now() + max_wait;
    let mut place: Option<Queued> = None;
    let mut saturated = false;
    loop {
        // A newcomer queues behind requests that already wait.
        if place.is_none() && (saturated || queue.is_busy()) {
            place = Some(enqueue(state, ctx, queue, (priority, &tenant), waited)?);
        }
        if let Some(queued) = place.as_mut() {
            let left = tokio::select! {
                _ = queued.turn() => None,
                _ = tokio::time::sleep_until(deadline) => Some(Outcome::Expired),
                _ = client_gone(session) => Some(Outcome::Cancelled),
            };
            if let Some(outcome) = left {
                drop(place.take());
                return Err(leave(state, ctx, outcome, waited));
            }
        }
        match dispatch(state, ctx, true) {
            Dispatch::Peer(peer) => {
                if let Some(queued) = place.take() {
                    queued.dispatched();
                    record(state, ctx, Outcome::Dispatched, waited);
                }
                return Ok(peer);
            }
            Dispatch::Saturated => {
                saturated = true;
                if let Some(queued) = place.as_mut() {
                    queued.requeue();
                }
            }
            Dispatch::Refused(e) => return Err(e),
        }
    }
}

fn record(state: &GatewayState, ctx: &mut RequestCtx, outcome: Outcome, waited: Instant) {
    // A dispatched request stopped waiting when its attempt claimed the
    // target; one that left, now.
    let ended = ctx
        .attempt
        .as_ref()
        .map_or_else(Instant::now, |a| a.started);
    if let Some(trace) = ctx.trace.as_mut() {
        trace.queue_wait(waited, ended, outcome.label());
    }
    let route = ctx.route().map_or("-", |r| r.metrics.label.as_str());
    state
        .metrics
        .flow
        .record(route, outcome, waited.elapsed().as_secs_f64());
}

/// `Retry-After` of an overloaded answer: a tenth of the longest wait, so
/// clients that obey it come back spread over the time a queue drains.
fn retry_after_secs(max_wait: Duration) -> u64 {
    (max_wait.as_secs() / 10).max(1)
}

/// Joins `queue` as `(priority, tenant)`; a full queue is answered 429.
fn enqueue(
    state: &GatewayState,
    ctx: &mut RequestCtx,
    queue: &Arc<RouteQueue>,
    (priority, tenant): (i32, &str),
    waited: Instant,
) -> Result<Queued, Box<Error>> {
    let max_queued = ctx.snapshot.limits.flow_control.max_queued;
    queue
        .enqueue(priority, tenant, max_queued)
        .map_err(|_| leave(state, ctx, Outcome::Full, waited))
}

/// The error of a request that leaves the queue without a dispatch.
fn leave(
    state: &GatewayState,
    ctx: &mut RequestCtx,
    outcome: Outcome,
    waited: Instant,
) -> Box<Error> {
    record(state, ctx, outcome, waited);
    let model = ctx.route().map_or_else(String::new, |r| r.model.clone());
    let flow = ctx.snapshot.limits.flow_control;
    let (max_queued, max_wait) = (flow.max_queued, flow.max_wait);
    let reason = match outcome {
        Outcome::Full => format!("{max_queued} requests already wait for them"),
        Outcome::Expired => format!(
            "none freed within {:.1} s of waiting",
            waited.elapsed().as_secs_f64()
        ),
        Outcome::Cancelled | Outcome::Dispatched => {
            // The client is gone: nobody reads an answer; logged as 499.
            ctx.client_cancelled = true;
            let mut e = Error::explain(
                ErrorType::ConnectionClosed,
                "the client went away while its request waited in flow control",
            );
            e.esource = pingora::ErrorSource::Downstream;
            return e;
        }
    };
    let error = GatewayError::Overloaded {
        model,
        reason,
        retry_after_secs: retry_after_secs(max_wait),
    };
    let e = error_with(ErrorType::HTTPStatus(429), error.to_string(), false);
    ctx.error = Some(error);
    e
}

/// Resolves when the client closes its connection (or resets its HTTP/2
/// stream) while the request waits; the body was read whole at admission,
/// so anything further on the connection is its end.
async fn client_gone(session: &mut Session) {
    if let Some(closed) = session.downstream_session.watch_h2_stream_close() {
        let _ = closed.await;
        return;
    }
    match session.downstream_session.read_body_or_idle(true).await {
        Err(_) => {}
        // Bytes of a pipelined next request: the client is still there.
        Ok(_) => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_told_to_come_back_within_a_tenth_of_the_wait() {
        assert_eq!(retry_after_secs(Duration::from_secs(30)), 3);
        assert_eq!(retry_after_secs(Duration::from_secs(5)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(3_600)), 360);
    }
}
