//! Choosing the target of an attempt: the route's balancer over the
//! eligible targets, and the reason when none is eligible.

use super::ctx::RequestCtx;
use crate::snapshot::Route;

/// The balancer's pick among the eligible targets. Every strategy honours
/// eligibility; should one ever pick an ineligible target, the first
/// eligible one is taken instead (and debug builds stop right there).
pub fn pick(route: &Route, ctx: &RequestCtx, loads: &[u64]) -> Option<usize> {
    let eligible = |i: usize| ctx.is_eligible(route, i);
    let picked = route
        .balancer
        .pick_eligible(&ctx.route_context(), loads, &eligible)?;
    if eligible(picked) {
        return Some(picked);
    }
    debug_assert!(false, "{} picked an ineligible target", route.strategy);
    (0..route.targets.len()).find(|&i| eligible(i))
}

/// Why no target of `route` may take the request, e.g.
/// "2 unhealthy, 1 parked (retry in 4 s), 1 breaker open".
pub fn why_none(route: &Route, ctx: &RequestCtx) -> String {
    let Some(snapshot) = ctx.snapshot.as_deref() else {
        return "no configuration".to_string();
    };
    let mut tried = 0;
    let mut not_allowed = 0;
    let mut unhealthy = 0;
    let mut parked = 0;
    let mut open = 0;
    let mut soonest: Option<u64> = None;
    for (i, target) in route.targets.iter().enumerate() {
        if ctx.tried.contains(i) {
            tried += 1;
        } else if ctx
            .caller
            .as_ref()
            .is_some_and(|c| !c.may_use_provider(&target.id.provider))
        {
            not_allowed += 1;
        } else if !target.provider.health.is_healthy() {
            unhealthy += 1;
        } else if let Some(until) = target.stats.parking.parked_until(ctx.now_ms) {
            parked += 1;
            soonest = Some(soonest.map_or(until, |s| s.min(until)));
        } else if !target
            .stats
            .breaker
            .admits(ctx.now_ms, &snapshot.limits.breaker)
        {
            open += 1;
        }
    }
    let mut parts = Vec::new();
    for (count, what) in [
        (tried, "already tried"),
        (not_allowed, "not allowed to this key"),
        (unhealthy, "unhealthy"),
        (open, "breaker open"),
    ] {
        if count > 0 {
            parts.push(format!("{count} {what}"));
        }
    }
    if parked > 0 {
        let wait = soonest.unwrap_or(ctx.now_ms).saturating_sub(ctx.now_ms);
        parts.push(format!(
            "{parked} parked (the first for {} more s)",
            wait.div_ceil(1000)
        ));
    }
    format!(
        "of its {} targets, {}",
        route.targets.len(),
        parts.join(", ")
    )
}
