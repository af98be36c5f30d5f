//! rolter's load-balancing strategies: pure, synchronous, no I/O.
//!
//! A strategy is handed three things per request — a [`RouteContext`] (what is
//! known about the request), a load snapshot (`loads[i]` is target `i`'s
//! load: the gateway's combined figure of the engine's reported queue and
//! its own in-flight requests, see its `tracker/engine.rs`) and an eligibility predicate decided once by
//! the gateway (not tried yet, not parked, healthy, breaker not open, allowed
//! to the key) — and answers with an index into the route's target list.
//! Nothing here knows about Pingora, sockets, clocks or async, which is what
//! keeps the strategies benchable (`benches/pick.rs`) and property-testable.
//!
//! Balancers belong to the pool, not to the request: their state (a
//! round-robin counter, smooth weighted running weights) is what makes them
//! balance, so build one per route per configuration snapshot with
//! [`build`] and share it.

pub mod context;
#[cfg(test)]
mod fed_stats;
mod hashing;
pub mod latency_model;
mod pick_counters;
mod prefix_tree;
pub mod report;
mod rng;
pub mod scorer;
pub mod scorers;
pub mod strategy;
pub mod views;

pub use context::{bound_prompt, RouteContext};
pub use latency_model::LatencyModel;
pub use report::{BalancerReport, DecisionSplit, TargetReport};
pub use scorer::{Candidates, Scorer};
pub use scorers::{
    AdapterAffinityScorer, FreeCapacityScorer, KvBlockScorer, KvUsageScorer, LoadScorer,
    PrefixAffinityScorer, QueueDepthScorer, SessionAffinityScorer, StaticWeightScorer,
};
pub use strategy::{
    build, AdaptivePolicy, BuildContext, ConsistentHash, PowerOfTwo, Price, Random, RoundRobin,
    StrategyKind, TargetSpec, UnknownStrategy, WeightedRoundRobin,
};
pub use strategy::{Adaptive, PredictedLatencyScorer};
pub use strategy::{
    CacheAware, CacheAwareDecisions, CacheGuard, GuardSetting, Pipeline, WeightedScorer,
};
pub use views::{KvBlockView, NoViews, OccupancyView, TargetStatsView};

/// A load-balancing strategy over one route's targets.
///
/// Indices refer to the route's target order as given at build time, and
/// `loads.len()` (of `pick`, or of the [`Candidates`]) is the number of
/// targets.
///
/// A strategy implements selection once, in either method: every strategy
/// in this crate implements [`LoadBalancer::pick_eligible`] and takes
/// `pick` from its default (every target eligible); one written elsewhere
/// may implement `pick` alone and take `pick_eligible`'s default, which
/// leaves skipping ineligible picks to the caller. Implementing neither
/// would recurse: each default calls the other.
///
/// The eligibility predicate ([`Candidates::eligible`]) must be a pure function of the index for the
/// duration of one call: a strategy may ask about the same index more than
/// once (counting, then choosing), and the weighted strategy asks while
/// holding its short internal lock, so the predicate must not call back into
/// the balancer.
pub trait LoadBalancer: Send + Sync {
    /// The strategy's configuration name, as in [`StrategyKind::as_str`].
    fn name(&self) -> &'static str;

    /// Picks a target with every target eligible; `None` only when the route
    /// has no targets.
    fn pick(&self, ctx: &RouteContext, loads: &[u64]) -> Option<usize> {
        self.pick_eligible(ctx, Candidates::new(loads, &|_| true))
    }

    /// Picks a target among the eligible `targets`.
    ///
    /// Every strategy in this crate implements this and never returns an
    /// ineligible index while an eligible one exists; it returns `None` when
    /// nothing is eligible. The default, kept for strategies written outside
    /// this crate that implement `pick` only, ignores eligibility and leaves
    /// skipping to the caller.
    fn pick_eligible(&self, ctx: &RouteContext, targets: Candidates<'_>) -> Option<usize> {
        self.pick(ctx, targets.loads)
    }

    /// Tells a learning strategy which target served the request described by
    /// `ctx`. Stateless strategies keep the no-op.
    fn observe(&self, _target: usize, _ctx: &RouteContext) {}

    /// The balancer's account of its state (scores, decisions, learned
    /// sizes). Called off the request path; stateless strategies report
    /// nothing.
    fn report(&self) -> BalancerReport {
        BalancerReport::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written outside the crate's style: `pick` alone.
    struct AlwaysLast;

    impl LoadBalancer for AlwaysLast {
        fn name(&self) -> &'static str {
            "always_last"
        }
        fn pick(&self, _ctx: &RouteContext, loads: &[u64]) -> Option<usize> {
            loads.len().checked_sub(1)
        }
    }

    #[test]
    fn either_method_carries_selection_through_the_other_default() {
        let ctx = RouteContext::default();
        let loads = [0, 0, 0];
        // `pick` alone: `pick_eligible` defers to it, eligibility unread.
        assert_eq!(
            AlwaysLast.pick_eligible(&ctx, Candidates::new(&loads, &|i| i == 0)),
            Some(2)
        );
        // `pick_eligible` alone (every strategy here): `pick` is "all eligible".
        let rr = RoundRobin::new(3);
        assert_eq!(rr.pick(&ctx, &loads), Some(0));
        assert_eq!(
            rr.pick_eligible(&ctx, Candidates::new(&loads, &|i| i == 2)),
            Some(2)
        );
    }
}
