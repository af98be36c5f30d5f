//! Choosing the target of an attempt: the route's balancer over the
//! eligible targets, and the reason when none is eligible.
//!
//! Health panic (Envoy's panic threshold, at its limit): active health
//! checks alone never empty a route. When every target the caller may use
//! is down by its probes, the probes are more likely wrong (a slow health
//! path under load, a probe the engine does not serve) than every engine
//! dead, so the pick ignores health and the breaker, parking and the key's
//! rules still decide. Counted in `rolter_health_panic_total`; entering and
//! leaving it is logged once each.

use std::sync::atomic::Ordering;

use super::ctx::RequestCtx;
use crate::snapshot::Route;

/// Whether health must be ignored for this pick (see the module docs);
/// logs the route entering and leaving panic.
pub fn health_panic(route: &Route, ctx: &RequestCtx) -> bool {
    let mut usable = route.targets.iter().filter(|t| ctx.may_use(t)).peekable();
    let panic = usable.peek().is_some() && usable.all(|t| !t.provider.health.is_healthy());
    let flag = &route.metrics.health_panic;
    if panic != flag.load(Ordering::Relaxed) && flag.swap(panic, Ordering::Relaxed) != panic {
        if panic {
            log::warn!(
                "route {}: active health checks mark every target down; routing across them anyway (health panic) while breakers and parking still apply",
                route.metrics.label
            );
        } else {
            log::info!(
                "route {}: a target passes its health checks again; health panic over",
                route.metrics.label
            );
        }
    }
    panic
}

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
        } else if !ctx.may_use(target) {
            not_allowed += 1;
        } else if !ctx.attempt.ignore_health && !target.provider.health.is_healthy() {
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
