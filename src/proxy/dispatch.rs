//! One attempt's dispatch: the pick over the combined loads, the
//! breaker's admission and the engine's concurrency slot, claimed together
//! so `max_concurrency` holds under any number of concurrent picks.

use std::sync::Arc;
use std::time::Instant;

use pingora::prelude::*;
use pingora::upstreams::peer::HttpPeer;
use smallvec::SmallVec;

use super::ctx::{Attempt, RequestCtx};
use super::eligibility::{self, Remaining};
use super::{body, error_with, not_admitted, select};
use crate::error::GatewayError;
use crate::state::GatewayState;

/// What a dispatch came to.
pub enum Dispatch {
    /// An attempt is set up on `ctx`; proxy to this peer.
    Peer(Box<HttpPeer>),
    /// Only saturated targets are left: flow control may hold the request.
    Saturated,
    /// Nothing to route to (`ctx.error` says why), or a request that was
    /// not admitted (a bug).
    Refused(Box<Error>),
}

/// Picks a target for the next attempt and claims it. `may_queue`: flow
/// control is on, so a pick that finds only saturated targets answers
/// [`Dispatch::Saturated`] instead of an error.
pub fn dispatch(state: &GatewayState, ctx: &mut RequestCtx, may_queue: bool) -> Dispatch {
    let Some(admitted) = &ctx.admitted else {
        return Dispatch::Refused(not_admitted("upstream_peer"));
    };
    let route = Arc::clone(&admitted.route);
    let preferred = admitted.preferred;
    let started = Instant::now();
    let now_ms = crate::clock::ms_at(started);
    let loads: SmallVec<[u64; 16]> = route
        .targets
        .iter()
        .map(|t| t.stats.combined_load(now_ms))
        .collect();
    // A claim fails only when another pick filled the engine between this
    // pick's judgement and its claim; the next round judges it saturated.
    for _ in 0..=route.targets.len() {
        let mut rule = ctx.eligibility(&route, now_ms);
        eligibility::note_health_panic(&route, rule.health_panic());
        let breaker = &ctx.snapshot.limits.breaker;
        // The target holding what the request continues, when it may take it.
        let picked = preferred
            .filter(|&i| rule.is_eligible(i))
            .and_then(|i| {
                let admission = route.targets[i].stats.breaker.try_admit(now_ms, breaker)?;
                Some((i, admission))
            })
            .or_else(|| {
                select::admitted_pick(
                    &route,
                    &mut rule,
                    &admitted.route_context(now_ms),
                    &loads,
                    breaker,
                )
            });
        let Some((index, admission)) = picked else {
            match rule.remaining() {
                // A stream that ended between the balancer's look and this
                // one freed a place: pick again rather than answer a 503
                // that has no reason to give.
                Remaining::Eligible => continue,
                Remaining::OnlySaturated if may_queue => return Dispatch::Saturated,
                _ => return unroutable(state, ctx, &route, now_ms),
            }
        };
        let health_panic = rule.health_panic();
        let Some((breaker, in_flight)) = select::claim(&route, index, admission, &rule) else {
            continue;
        };
        if health_panic {
            state.metrics.record_health_panic(&route.metrics.label);
        }
        let target = &route.targets[index];
        let body = body::body_for(&admitted.body, &admitted.request, target, true);
        let peer = target.peer();
        let attempt = Attempt {
            target: index,
            started,
            now_ms,
            queue_depth: loads[index],
            in_flight: Some(in_flight),
            breaker,
            body,
            status: None,
            failed_over_status: false,
            teaches: false,
            streaming: false,
            first_byte: None,
            usage: Default::default(),
            usage_charged: false,
            usage_filter: None,
        };
        ctx.tried.insert(index);
        ctx.attempts += 1;
        ctx.attempt = Some(attempt);
        return Dispatch::Peer(peer);
    }
    if may_queue {
        Dispatch::Saturated
    } else {
        unroutable(state, ctx, &route, now_ms)
    }
}

/// The error for a request that found no target: the last failure if an
/// attempt was made, else why none was eligible (counted per reason).
fn unroutable(
    state: &GatewayState,
    ctx: &mut RequestCtx,
    route: &crate::snapshot::Route,
    now_ms: u64,
) -> Dispatch {
    let error = match ctx.last_failure.clone() {
        Some(last) => GatewayError::UpstreamFailed {
            model: route.model.clone(),
            last,
        },
        None => {
            let why = ctx.eligibility(route, now_ms).why_none();
            for (reason, count) in why.counts() {
                state
                    .metrics
                    .record_ineligible(&route.metrics.label, reason, count);
            }
            GatewayError::NoEligibleTarget {
                model: route.model.clone(),
                reason: why.to_string(),
            }
        }
    };
    let e = error_with(
        ErrorType::HTTPStatus(error.status()),
        error.to_string(),
        false,
    );
    ctx.error = Some(error);
    Dispatch::Refused(e)
}
