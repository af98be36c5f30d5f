//! How an attempt at a target ended, and what the gateway learns from it:
//! counters, the circuit breaker, parking, metrics.

use std::time::Duration;

use super::ctx::RequestCtx;
use crate::metrics::Metrics;
use crate::snapshot::{Limits, Target};
use crate::tracker::{BreakerTicket, FailureReason, Transition};

/// Why an attempt failed.
#[derive(Debug)]
pub enum Failure {
    Connect(String),
    /// A 5xx, 429 or 408 answer, with the `Retry-After` it carried.
    Status {
        status: u16,
        retry_after: Option<Duration>,
    },
    FirstByteTimeout,
    IdleTimeout,
    Stream(String),
}

impl Failure {
    pub fn reason(&self) -> FailureReason {
        match self {
            Failure::Connect(_) => FailureReason::Connect,
            Failure::Status { .. } => FailureReason::Status,
            Failure::FirstByteTimeout => FailureReason::FirstByteTimeout,
            Failure::IdleTimeout => FailureReason::IdleTimeout,
            Failure::Stream(_) => FailureReason::Stream,
        }
    }

    /// Whether the engine is failing (the breaker counts it) rather than
    /// answering "busy" (429) or "too slow a client" (408).
    fn counts_for_breaker(&self) -> bool {
        !matches!(
            self,
            Failure::Status {
                status: 429 | 408,
                ..
            }
        )
    }

    /// Whether the target is parked, and for how long it asked.
    fn parks(&self) -> Option<Option<Duration>> {
        match self {
            Failure::Connect(_) => Some(None),
            Failure::Status { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            Failure::Connect(e) => format!("connect failed: {e}"),
            Failure::Status { status, .. } => format!("answered {status}"),
            Failure::FirstByteTimeout => "no response header in time".to_string(),
            Failure::IdleTimeout => "the response stalled".to_string(),
            Failure::Stream(e) => format!("connection broke: {e}"),
        }
    }
}

/// Records a failed attempt against its target. One log line per failure
/// while the target's failure log admits it (`tracker/failure_log.rs`),
/// the parking it caused included; none past that.
pub fn attempt_failed(ctx: &mut RequestCtx, metrics: &Metrics, failure: Failure) {
    let (Some(admitted), Some(attempt)) = (&ctx.admitted, ctx.attempt.as_mut()) else {
        return;
    };
    let Some(target) = admitted.route.targets.get(attempt.target) else {
        return;
    };
    let described = target_failed(
        target,
        &mut attempt.breaker,
        &ctx.snapshot.limits,
        metrics,
        &failure,
    );
    ctx.last_failure = Some(described);
}

/// What a failure at `target` teaches: its counters, parking and breaker
/// (through the attempt's `ticket`). Returns the failure as the final error
/// message names it.
pub fn target_failed(
    target: &Target,
    ticket: &mut BreakerTicket,
    limits: &Limits,
    metrics: &Metrics,
    failure: &Failure,
) -> String {
    let now = crate::clock::now_ms();
    let label = &target.label;
    let metric_label = &target.metrics.label;
    let stats = &target.stats;
    target.metrics.failures.inc();

    stats.record_failure();
    metrics.record_upstream_failure(metric_label, failure.reason());
    match failure {
        Failure::FirstByteTimeout => metrics.record_timeout(metric_label, "first_byte"),
        Failure::IdleTimeout => metrics.record_timeout(metric_label, "idle"),
        _ => {}
    }
    let parked_until = failure.parks().map(|retry_after| {
        stats
            .parking
            .park(now, limits.parking.duration_ms(retry_after))
    });
    if stats.failure_log.admit(failure.reason(), now) {
        match parked_until {
            Some(until) => log::warn!(
                "{label}: {}; parked for {} ms",
                failure.describe(),
                until.saturating_sub(now)
            ),
            None => log::warn!("{label}: {}", failure.describe()),
        }
    }
    let transition = if failure.counts_for_breaker() {
        ticket.failure(now, &limits.breaker)
    } else {
        ticket.success()
    };
    report_transition(metrics, label, metric_label, transition);
    format!("{label}: {}", failure.describe())
}

/// Records that `target` answered, through the attempt's breaker `ticket`.
pub fn target_succeeded(target: &Target, ticket: &mut BreakerTicket, metrics: &Metrics) {
    report_transition(
        metrics,
        &target.label,
        &target.metrics.label,
        ticket.success(),
    );
}

/// Records that the target answered (any status the breaker does not count).
pub fn attempt_succeeded(ctx: &mut RequestCtx, metrics: &Metrics) {
    let (Some(admitted), Some(attempt)) = (&ctx.admitted, ctx.attempt.as_mut()) else {
        return;
    };
    if let Some(target) = admitted.route.targets.get(attempt.target) {
        target_succeeded(target, &mut attempt.breaker, metrics);
    }
}

fn report_transition(
    metrics: &Metrics,
    label: &str,
    metric_label: &str,
    transition: Option<Transition>,
) {
    if let Some(transition) = transition {
        log::warn!(
            "circuit breaker of {label} is now {}",
            transition.to.as_str()
        );
        metrics.record_breaker_transition(metric_label, transition.to);
    }
}
