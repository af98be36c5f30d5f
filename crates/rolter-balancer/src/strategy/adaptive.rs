//! adaptive: a weighted blend of observed latency, catalog cost and in-flight
//! load, governed by the deployment-wide `[adaptive_routing]` policy
//! (docs/design/balancer.md, "adaptive").
//!
//! # Engagement
//!
//! The blend routes a request only when all three conditions hold:
//!
//! 1. the policy is enabled (the kill switch);
//! 2. at least one of its weights is non-zero;
//! 3. the route's targets have served `min_samples` requests *and* at
//!    least two of them have a latency sample. Both counts are kept per
//!    target identity by the gateway ([`TargetStatsView::served`]), not in
//!    the balancer, so a reload (which rebuilds every balancer, on a fleet
//!    gateway at every fleet version) keeps an engaged route engaged.
//!
//! Until then every pick goes to the fallback: the pipeline stack the route
//! would have used otherwise ([`Pipeline::default_stack`] when built by
//! [`build`](crate::build)), so moving a route to adaptive shifts no traffic
//! on its own. The fallback is told of every served request
//! ([`LoadBalancer::observe`]) whoever chose it, so it stays warm while the
//! blend routes and disengaging lands on warm session and prefix state.
//!
//! # Warm-up (#1645)
//!
//! Waiting does not satisfy condition 3: the fallback may legitimately send
//! every pick to one target (a weight, session or prefix affinity), and the
//! target it skips never earns a sample. So while the policy is enabled with
//! a non-zero weight but not engaged, a pick goes to an eligible target that
//! has no latency sample yet, if any — the one with the fewest warm-up picks
//! so far (then the least loaded, then the first), so probes spread — at most
//! [`Adaptive::WARM_UP_PICKS`] (8) per target over the balancer's life. The
//! budget bounds the cost: a target that never answers absorbs at most that
//! many picks and is then left to the fallback. It is more than one because
//! a sample lands only when a request finishes, and under concurrency a
//! budget of one would be spent on a probe still in flight. Warm-up picks
//! count as exploration. A disabled policy probes nothing.
//!
//! # Blend and exploration
//!
//! Target weights are read by the fallback stack only (docs/design/balancer.md: adaptive reads
//! weights through its fallback); the blend ranks every eligible target.
//! Once engaged, an `exploration_ratio` share of picks is uniform over the
//! eligible targets (counted as exploration), so a target the blend avoids
//! keeps producing fresh samples; the rest take the argmax of the blended
//! score ([`blend`] explains the normalization), ties broken at random.
//!
//! # Telemetry
//!
//! A pick costs two relaxed atomics of per-target attribution (picks served,
//! last pick time from [`RouteContext::now_ms`]) plus a relaxed counter of
//! how it was decided. It also remembers the in-flight counts it was handed,
//! storing only those that changed, so [`LoadBalancer::report`] — called off
//! the request path — can recompute each target's score, components and
//! signals against the current latencies.
//!
//! Everything random draws from one seeded generator: picks are reproducible
//! under a seed, given the same views.

mod blend;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use self::blend::{price_number, Reference, Signals};
use super::random::uniform_eligible;
use super::{BuildContext, Pipeline};
use crate::pick_counters::PickCounters;
use crate::rng::{mix64, SplitMix64};
use crate::views::TargetStatsView;
use crate::{
    AdaptivePolicy, BalancerReport, Candidates, DecisionSplit, LoadBalancer, RouteContext,
    TargetReport, TargetSpec,
};

/// Salt between the build seed (which the fallback stack uses as is) and the
/// blend's own generator, so the two draw independent streams.
const SEED_SALT: u64 = 0x6164_6170_7469_7665; // "adaptive"

/// Blended scores this close to the best are tied (scores are sums of
/// components in [0, 1] with weights of order 1; real gaps are far larger).
const TIE_EPSILON: f64 = 1e-9;

/// How a pick was decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    Blend,
    Fallback,
    Exploration,
}

/// The adaptive strategy; see the module documentation.
pub struct Adaptive {
    stats: Arc<dyn TargetStatsView>,
    policy: AdaptivePolicy,
    /// Each target's price as one number (see [`blend`]); `None` unpriced.
    prices: Vec<Option<f64>>,
    fallback: Box<dyn LoadBalancer>,
    rng: SplitMix64,
    /// Picks and last pick time per target (the attribution atomics).
    picks: PickCounters,
    /// Each target's in-flight count as of the latest pick, for reports.
    in_flight: Box<[AtomicU64]>,
    blend_picks: AtomicU64,
    fallback_picks: AtomicU64,
    exploration_picks: AtomicU64,
}

impl Adaptive {
    /// Warm-up picks a target without a latency sample may receive in total
    /// (eight, see the module documentation and docs/design/balancer.md).
    pub const WARM_UP_PICKS: u64 = 8;

    /// Targets with a latency sample the route needs before the blend
    /// engages (docs/design/defaults.md).
    pub const MIN_SAMPLED_TARGETS: usize = 2;

    /// Upper bound of the exploration share (docs/design/defaults.md).
    pub const MAX_EXPLORATION_RATIO: f64 = 0.5;

    /// The adaptive strategy over `targets` (their prices are read; the
    /// weights are the fallback's business), measuring them through `stats`,
    /// under `policy` (sanitized again here: negative or non-finite weights
    /// read as 0, exploration clamped to [0, 0.5]), deferring to `fallback`
    /// until engaged, drawing from a generator seeded with `seed`.
    pub fn new(
        targets: &[TargetSpec],
        stats: Arc<dyn TargetStatsView>,
        policy: AdaptivePolicy,
        fallback: Box<dyn LoadBalancer>,
        seed: u64,
    ) -> Self {
        Self {
            stats,
            policy: sanitized(policy),
            prices: targets
                .iter()
                .map(|t| {
                    t.price
                        .and_then(|p| price_number(p.input_per_mtok, p.output_per_mtok))
                })
                .collect(),
            fallback,
            rng: SplitMix64::from_seed(seed),
            picks: PickCounters::new(targets.len()),
            in_flight: targets.iter().map(|_| AtomicU64::new(0)).collect(),
            blend_picks: AtomicU64::new(0),
            fallback_picks: AtomicU64::new(0),
            exploration_picks: AtomicU64::new(0),
        }
    }

    /// `adaptive` as [`build`](crate::build) makes it: `ctx`'s targets,
    /// stats and policy, [`Pipeline::default_stack`] (seeded with
    /// `ctx.seed`) as the fallback, the blend drawing from
    /// [`Adaptive::blend_seed`]`(ctx.seed)`.
    pub fn from_context(ctx: &BuildContext) -> Self {
        Self::new(
            ctx.targets,
            ctx.stats.clone(),
            ctx.adaptive,
            Box::new(Pipeline::default_stack(ctx)),
            Self::blend_seed(ctx.seed),
        )
    }

    /// The seed the blend's generator gets when the fallback was built from
    /// `build_seed`.
    pub fn blend_seed(build_seed: u64) -> u64 {
        mix64(build_seed ^ SEED_SALT)
    }

    /// The policy this balancer runs, as sanitized.
    pub fn policy(&self) -> &AdaptivePolicy {
        &self.policy
    }

    /// Whether the blend routes now (see the module documentation).
    pub fn engaged(&self) -> bool {
        self.blend_allowed() && self.has_evidence()
    }

    /// Conditions 1 and 2: the kill switch is on and some weight is not zero.
    fn blend_allowed(&self) -> bool {
        let p = &self.policy;
        p.enabled && (p.latency_weight > 0.0 || p.cost_weight > 0.0 || p.load_weight > 0.0)
    }

    /// Condition 3: `min_samples` requests served and two targets sampled.
    fn has_evidence(&self) -> bool {
        let served: u64 = (0..self.targets()).map(|i| self.stats.served(i)).sum();
        served >= self.policy.min_samples
            && (0..self.targets())
                .filter(|&i| self.stats.latency_samples(i) > 0)
                .take(Self::MIN_SAMPLED_TARGETS)
                .count()
                >= Self::MIN_SAMPLED_TARGETS
    }

    fn targets(&self) -> usize {
        self.prices.len()
    }

    fn signals(&self, target: usize, in_flight: u64) -> Signals {
        Signals::new(
            self.stats.latency_ms(target),
            self.prices[target],
            in_flight,
        )
    }

    /// A warm-up pick: an eligible target without a latency sample whose
    /// budget is not spent, claimed atomically; `None` when there is none.
    fn warm_up(&self, targets: Candidates<'_>) -> Option<usize> {
        // A concurrent pick may spend the last budget of the chosen target
        // between the scan and the claim; scan again then. Bounded: each
        // retry means a budget was spent, and there are n * 8 of them.
        for _ in 0..=self.targets() * Self::WARM_UP_PICKS as usize {
            let mut chosen: Option<(u64, u64, usize)> = None;
            for (i, &load) in targets.loads.iter().enumerate().take(self.targets()) {
                let spent = self.stats.warm_up_spent(i);
                if spent >= Self::WARM_UP_PICKS
                    || !targets.eligible(i)
                    || self.stats.latency_samples(i) > 0
                {
                    continue;
                }
                let key = (spent, load, i);
                if chosen.is_none_or(|best| key < best) {
                    chosen = Some(key);
                }
            }
            let (_, _, target) = chosen?;
            if self.stats.spend_warm_up(target, Self::WARM_UP_PICKS) {
                return Some(target);
            }
        }
        None
    }

    /// Whether this engaged pick explores.
    fn explores(&self) -> bool {
        let ratio = self.policy.exploration_ratio;
        // 53 random bits as a uniform draw in [0, 1).
        ratio > 0.0 && ((self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64) < ratio
    }

    /// The argmax of the blended score over the eligible targets, ties at
    /// random.
    fn blend(&self, targets: Candidates<'_>) -> Option<usize> {
        let n = self.targets();
        let mut reference = Reference::new();
        for i in (0..n).filter(|&i| targets.eligible(i)) {
            reference.add(&self.signals(i, targets.loads[i]));
        }
        let mut best: Option<(f64, usize)> = None;
        let mut ties = 0usize;
        for i in (0..n).filter(|&i| targets.eligible(i)) {
            let score = reference
                .components(&self.signals(i, targets.loads[i]))
                .score(&self.policy);
            match best {
                Some((top, _)) if score < top - TIE_EPSILON => {}
                Some((top, _)) if score <= top + TIE_EPSILON => {
                    // Reservoir sampling over the tied targets: the k-th
                    // tie replaces the choice with probability 1/k.
                    ties += 1;
                    if self.rng.below(ties) == 0 {
                        best = Some((score, i));
                    }
                }
                _ => {
                    best = Some((score, i));
                    ties = 1;
                }
            }
        }
        best.map(|(_, i)| i)
    }

    /// Decides a pick, not yet attributed.
    fn decide(&self, ctx: &RouteContext, targets: Candidates<'_>) -> Option<(usize, Decision)> {
        if !self.blend_allowed() {
            return Some((
                self.fallback.pick_eligible(ctx, targets)?,
                Decision::Fallback,
            ));
        }
        if !self.has_evidence() {
            if let Some(target) = self.warm_up(targets) {
                return Some((target, Decision::Exploration));
            }
            return Some((
                self.fallback.pick_eligible(ctx, targets)?,
                Decision::Fallback,
            ));
        }
        if self.explores() {
            let target = uniform_eligible(&self.rng, self.targets(), None, targets.predicate())?;
            return Some((target, Decision::Exploration));
        }
        Some((self.blend(targets)?, Decision::Blend))
    }

    /// Counts a pick: the decision, the target's picks and last pick time,
    /// and the in-flight counts that changed since the last pick.
    fn attribute(&self, target: usize, decision: Decision, ctx: &RouteContext, loads: &[u64]) {
        let counter = match decision {
            Decision::Blend => &self.blend_picks,
            Decision::Fallback => &self.fallback_picks,
            Decision::Exploration => &self.exploration_picks,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.picks.record(target, ctx.now_ms);
        for (in_flight, &load) in self.in_flight.iter().zip(loads) {
            // Read before writing: an unchanged count leaves the cache line
            // shared between the threads that pick.
            if in_flight.load(Ordering::Relaxed) != load {
                in_flight.store(load, Ordering::Relaxed);
            }
        }
    }
}

impl LoadBalancer for Adaptive {
    fn name(&self) -> &'static str {
        "adaptive"
    }

    fn pick_eligible(&self, ctx: &RouteContext, targets: Candidates<'_>) -> Option<usize> {
        let n = self.targets();
        debug_assert_eq!(targets.loads.len(), n, "one load per target");
        if targets.loads.len() < n {
            // A caller bug the assertion above catches; on the request path
            // leave the choice to the fallback rather than index past targets.loads.
            return self.fallback.pick_eligible(ctx, targets);
        }
        let (target, decision) = self.decide(ctx, targets)?;
        debug_assert!(
            target < n && targets.eligible(target),
            "picked ineligible {target}"
        );
        self.attribute(target, decision, ctx, targets.loads);
        Some(target)
    }

    fn observe(&self, target: usize, ctx: &RouteContext) {
        self.fallback.observe(target, ctx);
    }

    /// Per target: the blended score and its "latency", "cost" and "load"
    /// components (normalized over all the route's targets, each in [0, 1],
    /// unweighted; the score is their weighted sum), the raw signals behind
    /// them ("latency_ms" when sampled, "price" when priced, "in_flight" as
    /// of the latest pick), picks and the latest pick time. Plus the
    /// decision split, `engaged` evaluated now.
    fn report(&self) -> BalancerReport {
        let signals: Vec<Signals> = self
            .in_flight
            .iter()
            .enumerate()
            .map(|(i, in_flight)| self.signals(i, in_flight.load(Ordering::Relaxed)))
            .collect();
        let mut reference = Reference::new();
        signals.iter().for_each(|s| reference.add(s));
        let targets = signals
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let components = reference.components(s);
                let mut raw = Vec::with_capacity(3);
                if let Some(ms) = s.latency_ms {
                    raw.push(("latency_ms", ms));
                }
                if let Some(price) = s.price {
                    raw.push(("price", price));
                }
                raw.push(("in_flight", s.in_flight as f64));
                let report = TargetReport {
                    score: Some(components.score(&self.policy)),
                    components: vec![
                        ("latency", components.latency),
                        ("cost", components.cost),
                        ("load", components.load),
                    ],
                    signals: raw,
                    ..TargetReport::default()
                };
                self.picks.counted(i, report)
            })
            .collect();
        BalancerReport {
            targets,
            decisions: Some(DecisionSplit {
                blend: self.blend_picks.load(Ordering::Relaxed),
                fallback: self.fallback_picks.load(Ordering::Relaxed),
                exploration: self.exploration_picks.load(Ordering::Relaxed),
                engaged: self.engaged(),
            }),
            cache_decisions: None,
        }
    }
}

impl std::fmt::Debug for Adaptive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adaptive")
            .field("policy", &self.policy)
            .field("prices", &self.prices)
            .field("fallback", &self.fallback.name())
            .finish_non_exhaustive()
    }
}

/// `policy` with negative or non-finite weights at 0 and exploration in
/// [0, [`Adaptive::MAX_EXPLORATION_RATIO`]] — what the configuration layer already
/// guarantees, enforced again because the blend divides nothing by them but
/// must never rank on NaN.
fn sanitized(policy: AdaptivePolicy) -> AdaptivePolicy {
    let weight = |w: f64| if w.is_finite() && w > 0.0 { w } else { 0.0 };
    AdaptivePolicy {
        latency_weight: weight(policy.latency_weight),
        cost_weight: weight(policy.cost_weight),
        load_weight: weight(policy.load_weight),
        exploration_ratio: weight(policy.exploration_ratio).min(Adaptive::MAX_EXPLORATION_RATIO),
        ..policy
    }
}
