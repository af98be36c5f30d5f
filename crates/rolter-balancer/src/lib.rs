//! rolter's load-balancing strategies: pure, synchronous, no I/O.
//!
//! A strategy is handed three things per request — a [`RouteContext`] (what is
//! known about the request), a load snapshot (`loads[i]` is the in-flight
//! request count of target `i`) and an eligibility predicate decided once by
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
pub use scorer::Scorer;
pub use scorers::{
    AdapterAffinityScorer, FreeCapacityScorer, KvBlockScorer, LoadScorer, PrefixAffinityScorer,
    SessionAffinityScorer, StaticWeightScorer,
};
pub use strategy::{
    build, AdaptivePolicy, BuildContext, ConsistentHash, PowerOfTwo, Price, Random, RoundRobin,
    StrategyKind, TargetSpec, UnknownStrategy, WeightedRoundRobin,
};
pub use strategy::{Adaptive, PredictedLatencyScorer};
pub use strategy::{CacheAware, CacheAwareDecisions, Pipeline, WeightedScorer};
pub use views::{KvBlockView, NoViews, OccupancyView, TargetStatsView};

/// A load-balancing strategy over one route's targets.
///
/// Indices refer to the route's target order as given at build time, and
/// `loads.len()` is the number of targets.
///
/// The `eligible` predicate must be a pure function of the index for the
/// duration of one call: a strategy may ask about the same index more than
/// once (counting, then choosing), and the weighted strategy asks while
/// holding its short internal lock, so the predicate must not call back into
/// the balancer.
pub trait LoadBalancer: Send + Sync {
    /// The strategy's configuration name, as in [`StrategyKind::as_str`].
    fn name(&self) -> &'static str;

    /// Picks a target with every target eligible; `None` only when the route
    /// has no targets.
    fn pick(&self, ctx: &RouteContext, loads: &[u64]) -> Option<usize>;

    /// Picks a target among those for which `eligible` holds.
    ///
    /// Every strategy in this crate overrides this and never returns an
    /// ineligible index while an eligible one exists; it returns `None` when
    /// nothing is eligible. The default, kept for strategies written outside
    /// this crate, ignores `eligible` and leaves skipping to the caller.
    fn pick_eligible(
        &self,
        ctx: &RouteContext,
        loads: &[u64],
        _eligible: &dyn Fn(usize) -> bool,
    ) -> Option<usize> {
        self.pick(ctx, loads)
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
