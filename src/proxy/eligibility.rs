//! Which targets of a route an attempt may use: the one place the rule is
//! written (docs/design/balancer.md, "Eligibility").
//!
//! A target is eligible when there is no reason against it, checked in this
//! order: it was already tried by this request; the caller's key does not
//! allow its provider; its provider is down by active health checks; it is
//! parked (it asked for time: 429, 5xx, `Retry-After`, a failed connect);
//! its circuit breaker is open (or its one half-open probe is out). The
//! balancer is handed [`Eligibility::is_eligible`]; the 503 for a route with
//! no eligible target names the count of each reason ([`NoEligible`]), and
//! `rolter_ineligible_targets_total` counts them.
//!
//! Saturation comes last (`tracker/engine.rs`): a target at its provider's
//! `max_concurrency` or whose engine reports a full queue or KV cache takes
//! no new request. When saturation alone would leave the caller nothing,
//! flow control (when on) holds the request in the gateway; when off, the
//! request goes to the least loaded of the saturated targets, as before
//! saturation existed ([`Eligibility::saturation_ignored`]).
//!
//! Health panic (Envoy's panic threshold, at its limit): active health
//! checks alone never empty a route. When every target the caller may use
//! is down by its probes, the probes are more likely wrong (a slow health
//! path under load, a probe the engine does not serve) than every engine
//! dead, so health is ignored for the pick while the breaker, parking and
//! the key's rules still decide. Counted in `rolter_health_panic_total`;
//! entering and leaving it is logged once each.

use std::fmt;
use std::sync::atomic::Ordering;

use super::target_set::TargetSet;
use crate::auth::Caller;
use crate::snapshot::{Limits, Route, Target};
use crate::tracker::{BreakerPolicy, SaturatedBy, SaturationPolicy};

/// Why a target may not take an attempt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ineligible {
    /// This request was dispatched to it already.
    Tried,
    /// The caller's key does not allow its provider.
    NotAllowed,
    /// Its provider is down by its active health checks.
    Unhealthy,
    /// It asked for time, until this clock reading (ms).
    Parked { until_ms: u64 },
    /// Its circuit breaker is open, or its half-open probe is out.
    BreakerOpen,
    /// It takes no new request: at its concurrency limit, or its engine's
    /// queue or KV cache is full.
    Saturated(SaturatedBy),
}

impl Ineligible {
    pub const LABELS: [&'static str; 6] = [
        "tried",
        "not_allowed",
        "unhealthy",
        "parked",
        "breaker_open",
        "saturated",
    ];

    /// A fixed label value for metrics.
    pub fn label(self) -> &'static str {
        Self::LABELS[self.index()]
    }

    fn index(self) -> usize {
        match self {
            Ineligible::Tried => 0,
            Ineligible::NotAllowed => 1,
            Ineligible::Unhealthy => 2,
            Ineligible::Parked { .. } => 3,
            Ineligible::BreakerOpen => 4,
            Ineligible::Saturated(_) => 5,
        }
    }
}

/// The eligibility of a route's targets for one pick.
pub struct Eligibility<'a> {
    route: &'a Route,
    caller: Option<&'a Caller>,
    tried: &'a TargetSet,
    breaker: &'a BreakerPolicy,
    saturation: &'a SaturationPolicy,
    now_ms: u64,
    /// Targets whose breaker refused this pick after the balancer chose
    /// them (a half-open probe went to another request in between): left
    /// out of this pick only, not tried.
    refused: TargetSet,
    /// Health panic (see the module docs).
    ignore_health: bool,
    /// Saturation alone leaves nothing and flow control is off.
    ignore_saturation: bool,
}

/// What a route's targets leave a pick ([`Eligibility::remaining`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Remaining {
    /// At least one target may take it.
    Eligible,
    /// Saturation is the only reason none may: flow control holds it.
    OnlySaturated,
    /// Something other than saturation leaves every target out.
    Nothing,
}

impl<'a> Eligibility<'a> {
    /// The rule for a pick at `now_ms` by `caller` (`None`: anyone), given
    /// the targets `tried` already. Health is ignored when it alone would
    /// leave the caller nothing; see [`Eligibility::health_panic`].
    pub fn new(
        route: &'a Route,
        caller: Option<&'a Caller>,
        tried: &'a TargetSet,
        limits: &'a Limits,
        now_ms: u64,
    ) -> Self {
        let mut rule = Eligibility {
            route,
            caller,
            tried,
            breaker: &limits.breaker,
            saturation: &limits.saturation,
            now_ms,
            refused: TargetSet::default(),
            ignore_health: false,
            ignore_saturation: false,
        };
        let mut usable = route.targets.iter().filter(|t| rule.allows(t)).peekable();
        rule.ignore_health =
            usable.peek().is_some() && usable.all(|t| !t.provider.health.is_healthy());
        // Saturation is judged unless flow control is off and it alone
        // leaves nothing; when something else does too, the 503 names both.
        if !limits.flow_control.enabled && !rule.any() {
            rule.ignore_saturation = true;
            rule.ignore_saturation = rule.any();
        }
        rule
    }

    /// Whether health checks are ignored for this pick because they alone
    /// would leave the caller no target.
    pub fn health_panic(&self) -> bool {
        self.ignore_health
    }

    /// Whether saturation is ignored for this pick (flow control off,
    /// every otherwise eligible target saturated).
    pub fn saturation_ignored(&self) -> bool {
        self.ignore_saturation
    }

    /// What the targets leave this pick, read in one pass: eligibility
    /// reads live loads, so two separate questions ("any eligible?", "only
    /// saturated?") can each see a different moment and both say no.
    pub fn remaining(&self) -> Remaining {
        let mut saturated = false;
        for i in 0..self.route.targets.len() {
            match self.reason(i) {
                None => return Remaining::Eligible,
                Some(Ineligible::Saturated(_)) => saturated = true,
                Some(_) => {}
            }
        }
        if saturated {
            Remaining::OnlySaturated
        } else {
            Remaining::Nothing
        }
    }

    fn allows(&self, target: &Target) -> bool {
        self.caller
            .is_none_or(|c| c.may_use_provider(&target.id.provider))
    }

    /// Why target `index` may not take the attempt; `None`: it may.
    pub fn reason(&self, index: usize) -> Option<Ineligible> {
        let target = &self.route.targets[index];
        if self.tried.contains(index) {
            return Some(Ineligible::Tried);
        }
        if !self.allows(target) {
            return Some(Ineligible::NotAllowed);
        }
        if !self.ignore_health && !target.provider.health.is_healthy() {
            return Some(Ineligible::Unhealthy);
        }
        if let Some(until_ms) = target.stats.parking.parked_until(self.now_ms) {
            return Some(Ineligible::Parked { until_ms });
        }
        if self.refused.contains(index) || !target.stats.breaker.admits(self.now_ms, self.breaker) {
            return Some(Ineligible::BreakerOpen);
        }
        if !self.ignore_saturation {
            if let Some(by) = target.stats.saturation(
                self.now_ms,
                self.saturation,
                target.provider.max_concurrency,
            ) {
                return Some(Ineligible::Saturated(by));
            }
        }
        None
    }

    pub fn is_eligible(&self, index: usize) -> bool {
        self.reason(index).is_none()
    }

    /// Whether any target is eligible.
    pub fn any(&self) -> bool {
        (0..self.route.targets.len()).any(|i| self.is_eligible(i))
    }

    /// Leaves out a target whose breaker refused the pick after all.
    pub fn refuse(&mut self, index: usize) {
        self.refused.insert(index);
    }

    /// The reasons no target is eligible, counted.
    pub fn why_none(&self) -> NoEligible {
        let mut counts = [0usize; Ineligible::LABELS.len()];
        let mut soonest: Option<u64> = None;
        for i in 0..self.route.targets.len() {
            if let Some(reason) = self.reason(i) {
                counts[reason.index()] += 1;
                if let Ineligible::Parked { until_ms } = reason {
                    soonest = Some(soonest.map_or(until_ms, |s| s.min(until_ms)));
                }
            }
        }
        NoEligible {
            targets: self.route.targets.len(),
            counts,
            parked_for_ms: soonest.map(|until| until.saturating_sub(self.now_ms)),
        }
    }
}

/// Logs `route` entering or leaving health panic, once each.
pub fn note_health_panic(route: &Route, panic: bool) {
    let flag = &route.metrics.health_panic;
    if panic == flag.load(Ordering::Relaxed) || flag.swap(panic, Ordering::Relaxed) == panic {
        return;
    }
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

/// Why a route had no eligible target: how many targets each reason left
/// out. Its `Display` is the 503's explanation, e.g. "of its 4 targets, 2
/// unhealthy, 1 breaker open, 1 parked (the first for 4 more s)".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoEligible {
    targets: usize,
    counts: [usize; Ineligible::LABELS.len()],
    parked_for_ms: Option<u64>,
}

impl NoEligible {
    /// Each reason's label and how many targets it left out (none omitted).
    pub fn counts(&self) -> impl Iterator<Item = (&'static str, usize)> + '_ {
        Ineligible::LABELS
            .iter()
            .zip(self.counts)
            .filter(|(_, n)| *n > 0)
            .map(|(label, n)| (*label, n))
    }
}

impl fmt::Display for NoEligible {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [tried, not_allowed, unhealthy, parked, open, saturated] = self.counts;
        write!(f, "of its {} targets", self.targets)?;
        for (count, what) in [
            (tried, "already tried"),
            (not_allowed, "not allowed to this key"),
            (unhealthy, "unhealthy"),
            (open, "breaker open"),
            (saturated, "saturated"),
        ] {
            if count > 0 {
                write!(f, ", {count} {what}")?;
            }
        }
        if parked > 0 {
            let secs = self.parked_for_ms.unwrap_or(0).div_ceil(1000);
            write!(f, ", {parked} parked (the first for {secs} more s)")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_explanation_names_each_reason_with_its_count() {
        let none = NoEligible {
            targets: 5,
            counts: [1, 0, 2, 1, 1, 0],
            parked_for_ms: Some(3_500),
        };
        assert_eq!(
            none.to_string(),
            "of its 5 targets, 1 already tried, 2 unhealthy, 1 breaker open, 1 parked (the first for 4 more s)"
        );
        let counts: Vec<_> = none.counts().collect();
        assert_eq!(
            counts,
            [
                ("tried", 1),
                ("unhealthy", 2),
                ("parked", 1),
                ("breaker_open", 1)
            ]
        );
    }
}
