//! Choosing the target of an attempt: the route's balancer over the
//! eligible targets (`eligibility.rs`), confirmed by the target's breaker.

use rolter_balancer::{Candidates, RouteContext};

use super::eligibility::Eligibility;
use crate::snapshot::Route;
use crate::tracker::{Admission, BreakerPolicy, BreakerTicket, InFlightGuard};

/// The balancer's pick among the eligible targets. Every strategy honours
/// eligibility; should one ever pick an ineligible target, the first
/// eligible one is taken instead (and debug builds stop right there).
pub fn pick(
    route: &Route,
    rule: &Eligibility<'_>,
    routing: &RouteContext<'_>,
    loads: &[u64],
) -> Option<usize> {
    let eligible = |i: usize| rule.is_eligible(i);
    let picked = route
        .balancer
        .pick_eligible(routing, Candidates::new(loads, &eligible))?;
    if eligible(picked) {
        return Some(picked);
    }
    debug_assert!(false, "{} picked an ineligible target", route.strategy);
    (0..route.targets.len()).find(|&i| eligible(i))
}

/// A pick its breaker admitted, and how. When a half-open probe slot went
/// to another request between the pick and the claim, the target is left
/// out of this pick (not marked tried: the final error names its breaker,
/// and a retry may still use it) and the balancer picks again, at most
/// once per target. `None`: nothing eligible is left.
pub fn admitted_pick(
    route: &Route,
    rule: &mut Eligibility<'_>,
    routing: &RouteContext<'_>,
    loads: &[u64],
    breaker: &BreakerPolicy,
) -> Option<(usize, Admission)> {
    for _ in 0..route.targets.len() {
        let index = pick(route, rule, routing, loads)?;
        match route.targets[index]
            .stats
            .breaker
            .try_admit(routing.now_ms, breaker)
        {
            Some(admission) => return Some((index, admission)),
            None => rule.refuse(index),
        }
    }
    None
}

/// Claims target `index` of `route`, which the breaker admitted, within its
/// provider's `max_concurrency` (unless `rule` ignores saturation), and
/// counts the pick. `None` when another pick filled the engine between the
/// judgement and the claim: the admission is released (a half-open probe
/// slot with it) and the caller judges again.
pub fn claim(
    route: &Route,
    index: usize,
    admission: Admission,
    rule: &Eligibility<'_>,
) -> Option<(BreakerTicket, InFlightGuard)> {
    let target = &route.targets[index];
    let ticket = BreakerTicket::new(std::sync::Arc::clone(&target.stats.breaker), admission);
    let limit = if rule.saturation_ignored() {
        None
    } else {
        target.provider.max_concurrency
    };
    let in_flight = target.stats.begin_within(limit)?;
    target.stats.record_pick();
    target.metrics.attempts.inc();
    route.metrics.picks.inc();
    Some((ticket, in_flight))
}
