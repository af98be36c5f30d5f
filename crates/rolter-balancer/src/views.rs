//! Read-only views of what the gateway knows about each target, handed to
//! strategies at build time (see [`crate::BuildContext`]).
//!
//! The gateway implements these over its own state (the load tracker, the
//! KV-event index, the LMCache poller); target indices are the route's, as
//! for `pick`. Every method is called on the request path: implementations
//! read atomics or take only short, non-blocking locks, and never do I/O.
//! `None` always means "unknown": the scorer built on it stays neutral.

use crate::LatencyModel;

/// What the gateway has measured about each target, kept per target
/// identity so that it outlives a reload (which rebuilds every balancer).
/// Every method answers "unknown" by default (no sample, nothing served,
/// no model), so a view that measures less implements only what it has.
pub trait TargetStatsView: Send + Sync {
    /// Smoothed latency of successful requests, in ms; `None` before the
    /// first. A sample is a stream's time to first token, or a whole
    /// non-streaming response.
    fn latency_ms(&self, _target: usize) -> Option<f64> {
        None
    }
    /// Requests dispatched to `target` that have not received their first
    /// response byte yet: those still queued or in prefill, which a new
    /// request waits behind (streams that are only decoding do not delay
    /// its prefill much). The gateway adds what the engine itself reports
    /// waiting, from every node. `None` when not measured.
    fn waiting(&self, _target: usize) -> Option<u64> {
        None
    }
    /// The engine's KV-cache usage in [0, 1] from a fresh reading of its
    /// metrics; `None` when not read, stale or not reported.
    fn kv_usage(&self, _target: usize) -> Option<f64> {
        None
    }
    /// How many successful requests fed [`TargetStatsView::latency_ms`].
    fn latency_samples(&self, _target: usize) -> u64 {
        0
    }
    /// Requests dispatched to `target` so far (adaptive's `min_samples`).
    fn served(&self, _target: usize) -> u64 {
        0
    }
    /// adaptive's warm-up picks spent on `target` so far.
    fn warm_up_spent(&self, _target: usize) -> u64 {
        0
    }
    /// Claims one of `budget` warm-up picks for `target`, atomically; false
    /// when they are spent (by default: nowhere to keep a budget, so no
    /// warm-up). The one write of this view: the budget must live where a
    /// reload cannot reset it.
    fn spend_warm_up(&self, _target: usize, _budget: u64) -> bool {
        false
    }
    /// `target`'s latency model (see `predicted_latency`).
    fn latency_model(&self, _target: usize) -> Option<&LatencyModel> {
        None
    }
    /// What a request of `prompt_ktokens` joining a queue of `queue_depth`
    /// is modelled to take on `target`, in ms; `None` while the target's
    /// model has too little evidence.
    fn predicted_latency_ms(
        &self,
        target: usize,
        queue_depth: u64,
        prompt_ktokens: f64,
    ) -> Option<f64> {
        self.latency_model(target)?
            .predict(queue_depth, prompt_ktokens)
    }
}

/// The engines' KV caches as their event streams describe them.
pub trait KvBlockView: Send + Sync {
    /// The fraction in [0, 1] of the request's leading full token blocks that
    /// are resident on `target`; `None` when that target has no fresh index
    /// (no source, stale, cleared after a gap, not yet rebuilt). `adapter`
    /// is the LoRA adapter the request addresses, when the route does not
    /// fix each target's model ([`RouteContext::adapter`](crate::RouteContext)):
    /// an engine keys an adapter's blocks apart from the base model's.
    fn resident_fraction(
        &self,
        target: usize,
        token_ids: &[u32],
        adapter: Option<&str>,
    ) -> Option<f64>;
    /// A request with `token_ids` was just routed to `target`: its blocks
    /// will be there once the engine's prefill ends (the gateway counts them
    /// as pending until its events confirm them or a short time passes).
    fn note_routed(&self, _target: usize, _token_ids: &[u32], _adapter: Option<&str>) {}
}

/// The LMCache occupancy signal of each target.
pub trait OccupancyView: Send + Sync {
    /// Free capacity (1 - occupancy) in [0, 1] of the target's cache when the
    /// signal is fresh, the cache available and not saturated; `None` otherwise.
    fn free_capacity(&self, target: usize) -> Option<f64>;
}

/// A view that knows nothing: every scorer built on it is neutral.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoViews;

impl TargetStatsView for NoViews {}

impl KvBlockView for NoViews {
    fn resident_fraction(
        &self,
        _target: usize,
        _token_ids: &[u32],
        _adapter: Option<&str>,
    ) -> Option<f64> {
        None
    }
}

impl OccupancyView for NoViews {
    fn free_capacity(&self, _target: usize) -> Option<f64> {
        None
    }
}
