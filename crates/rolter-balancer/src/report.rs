//! What a balancer can tell about itself, for the admin API, metrics and
//! the adaptive-routing telemetry. Collected off the request path.

/// A balancer's own account of its state; empty for stateless strategies.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BalancerReport {
    /// One entry per target, in route order (empty when nothing to say).
    pub targets: Vec<TargetReport>,
    /// How picks were decided, for strategies that decide in several ways.
    pub decisions: Option<DecisionSplit>,
    /// cache_aware's split: affinity kept, spread by the guard, cold.
    pub cache_decisions: Option<crate::CacheAwareDecisions>,
}

/// Per-target detail; fields a strategy does not track stay `None`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TargetReport {
    /// The blended score the strategy last ranked this target by.
    pub score: Option<f64>,
    /// Named components of that score (e.g. "latency", "cost", "load").
    pub components: Vec<(&'static str, f64)>,
    /// Raw signals behind the components (e.g. "latency_ms", "price", "in_flight").
    pub signals: Vec<(&'static str, f64)>,
    /// Picks this balancer gave the target.
    pub picks: u64,
    /// The `now_ms` of the last pick of the target.
    pub last_pick_ms: Option<u64>,
    /// Size of learned per-target state (prefix-tree characters, adapters held).
    pub learned_size: Option<u64>,
    /// Evictions from that learned state since the balancer was built.
    pub evictions: Option<u64>,
}

/// How an adaptive balancer's picks were made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecisionSplit {
    pub blend: u64,
    pub fallback: u64,
    pub exploration: u64,
    /// Whether the blend currently routes (all engagement conditions hold).
    pub engaged: bool,
}
