//! A request's wait under flow control (`flow_control.rs`): joining its
//! route's queue, and the answer when it leaves without a dispatch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use pingora::prelude::*;
use pingora::proxy::Session;

use super::ctx::RequestCtx;
use super::error_with;
use crate::error::GatewayError;
use crate::flow_control::{Outcome, Queued, RouteQueue};
use crate::state::GatewayState;

/// `Retry-After` of an overloaded answer: a tenth of the longest wait, so
/// clients that obey it come back spread over the time a queue drains.
fn retry_after_secs(max_wait: Duration) -> u64 {
    (max_wait.as_secs() / 10).max(1)
}

/// Joins `queue` as `(priority, tenant)`; a full queue is answered 429.
pub fn enqueue(
    state: &GatewayState,
    ctx: &mut RequestCtx,
    queue: &Arc<RouteQueue>,
    (priority, tenant): (i32, &str),
    waited: Instant,
) -> Result<Queued, Box<Error>> {
    let max_queued = ctx.snapshot.limits.flow_control.max_queued;
    queue
        .enqueue(priority, tenant, max_queued)
        .map_err(|_| leave(state, ctx, Outcome::Full, waited, max_queued))
}

/// The error of a request that leaves the queue without a dispatch.
pub fn leave(
    state: &GatewayState,
    ctx: &mut RequestCtx,
    outcome: Outcome,
    waited: Instant,
    max_queued: u64,
) -> Box<Error> {
    let (route, model) = ctx.route().map_or(("-".to_owned(), String::new()), |r| {
        (r.metrics.label.clone(), r.model.clone())
    });
    state
        .metrics
        .flow
        .record(&route, outcome, waited.elapsed().as_secs_f64());
    let max_wait = ctx.snapshot.limits.flow_control.max_wait;
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
pub async fn client_gone(session: &mut Session) {
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
