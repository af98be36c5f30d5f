//! The strategies this crate provides, and the build step that turns a
//! configured strategy name plus a route's targets into a balancer.
//!
//! A strategy is a [`StrategyKind`] (the configuration variant) plus
//! [`build`]: everything a strategy needs arrives through the
//! [`BuildContext`], so nothing has to be injected into a built balancer
//! later. Each strategy lives in its own file under `strategy/`, and each is
//! also constructible directly (tests, benches, callers that know what they
//! want).

mod adaptive;
mod cache_aware;
mod consistent_hash;
mod pipeline;
mod power_of_two;
mod predicted_latency;
mod random;
mod round_robin;
mod weighted;

#[cfg(test)]
mod properties;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::views::{KvBlockView, NoViews, OccupancyView, TargetStatsView};
use crate::LoadBalancer;

pub use adaptive::Adaptive;
pub use cache_aware::{CacheAware, CacheAwareDecisions, CacheGuard, GuardSetting};
pub use consistent_hash::ConsistentHash;
pub use pipeline::{Pipeline, WeightedScorer};
pub use power_of_two::PowerOfTwo;
pub use predicted_latency::PredictedLatencyScorer;
pub use random::Random;
pub use round_robin::RoundRobin;
pub use weighted::WeightedRoundRobin;

/// A configured load-balancing strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StrategyKind {
    /// Sequential rotation.
    RoundRobin,
    /// Uniform random.
    Random,
    /// The less loaded of two random targets.
    PowerOfTwo,
    /// Smooth weighted round-robin over the targets' weights.
    Weighted,
    /// Hash ring keyed by session, else by conversation digest.
    ConsistentHash,
    /// Approximate prefix affinity on the conversation text, with a load
    /// guard.
    CacheAware,
    /// Filter → weighted scores → argmax over the default scorer stack.
    Pipeline,
    /// Resident KV blocks from the engines' event streams, then load.
    PreciseCacheAware,
    /// Free LMCache capacity, then load.
    LmcacheAware,
    /// A blend of observed latency, catalog cost and in-flight load under
    /// the deployment-wide adaptive-routing policy, on the pipeline stack
    /// until engaged.
    Adaptive,
    /// Per-target modelled latency of this request (queue joined, prompt
    /// size), then load.
    PredictedLatency,
    /// LoRA adapter residency, then prefix affinity, then load.
    LoraAware,
}

impl StrategyKind {
    /// Every strategy, in documentation order.
    pub const ALL: &'static [StrategyKind] = &[
        StrategyKind::RoundRobin,
        StrategyKind::Random,
        StrategyKind::PowerOfTwo,
        StrategyKind::Weighted,
        StrategyKind::ConsistentHash,
        StrategyKind::CacheAware,
        StrategyKind::Pipeline,
        StrategyKind::PreciseCacheAware,
        StrategyKind::LmcacheAware,
        StrategyKind::Adaptive,
        StrategyKind::PredictedLatency,
        StrategyKind::LoraAware,
    ];

    /// The name used in configuration, metrics and [`LoadBalancer::name`].
    pub fn as_str(self) -> &'static str {
        match self {
            StrategyKind::RoundRobin => "round_robin",
            StrategyKind::Random => "random",
            StrategyKind::PowerOfTwo => "power_of_two",
            StrategyKind::Weighted => "weighted",
            StrategyKind::ConsistentHash => "consistent_hash",
            StrategyKind::CacheAware => "cache_aware",
            StrategyKind::Pipeline => "pipeline",
            StrategyKind::PreciseCacheAware => "precise_cache_aware",
            StrategyKind::LmcacheAware => "lmcache_aware",
            StrategyKind::Adaptive => "adaptive",
            StrategyKind::PredictedLatency => "predicted_latency",
            StrategyKind::LoraAware => "lora_aware",
        }
    }

    /// The strategy configured as `name`; the inverse of [`StrategyKind::as_str`].
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|kind| kind.as_str() == name)
    }

    /// Whether the strategy consults the targets' weights. Per docs/design/balancer.md only
    /// weighted, pipeline (its static-weight scorer) and adaptive (its
    /// fallback stack) do. Everything else is built from the target count
    /// alone, so a weight on one of its targets is stored and never read —
    /// the dashboard says so, and must learn of any strategy added to this
    /// list.
    pub fn reads_weights(self) -> bool {
        matches!(
            self,
            StrategyKind::Weighted | StrategyKind::Pipeline | StrategyKind::Adaptive
        )
    }

    /// Whether the strategy reads [`RouteContext::prompt_digest`]: only
    /// consistent_hash does, for a request without a session key. The
    /// gateway works the digest out for these alone (it needs the whole
    /// conversation decoded) and passes 0 to the others. A strategy that
    /// starts reading it must be named here: `strategy::properties`
    /// checks that every other one picks the same with the digest as
    /// with 0.
    ///
    /// [`RouteContext::prompt_digest`]: crate::RouteContext::prompt_digest
    pub fn reads_prompt_digest(self) -> bool {
        matches!(self, StrategyKind::ConsistentHash)
    }
}

impl fmt::Display for StrategyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for StrategyKind {
    type Err = UnknownStrategy;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Self::from_name(name).ok_or_else(|| UnknownStrategy {
            name: name.to_owned(),
        })
    }
}

/// A strategy name that names no [`StrategyKind`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnknownStrategy {
    /// The name as it was given.
    pub name: String,
}

impl fmt::Display for UnknownStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown load-balancing strategy {:?} (known: ",
            self.name
        )?;
        for (i, kind) in StrategyKind::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(kind.as_str())?;
        }
        f.write_str(")")
    }
}

impl std::error::Error for UnknownStrategy {}

/// One target as a strategy sees it at build time.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TargetSpec<'a> {
    /// Stable identity, `provider-slug/upstream-model`. Learned state that
    /// must survive reordering (hash-ring positions) is keyed by it, never by
    /// the index.
    pub id: &'a str,
    /// Relative share of traffic; read only by strategies for which
    /// [`StrategyKind::reads_weights`] holds. `0` takes no share.
    pub weight: u32,
    /// Catalog price of the target's upstream model; `None` when not priced
    /// (cost-neutral).
    pub price: Option<Price>,
    /// LoRA adapters the target's engine holds at once (its `--max-loras`);
    /// `lora_aware` remembers that many per target.
    pub max_adapters: usize,
}

impl<'a> TargetSpec<'a> {
    /// Adapters remembered per target when the provider does not say
    /// (docs/design/defaults.md; vLLM's default `--max-loras` is smaller, fleets that
    /// serve many adapters raise it).
    pub const DEFAULT_MAX_ADAPTERS: usize = 8;

    /// A target with weight 1, no price and the default adapter slots.
    pub fn new(id: &'a str) -> Self {
        Self {
            id,
            weight: 1,
            price: None,
            max_adapters: Self::DEFAULT_MAX_ADAPTERS,
        }
    }
}

/// A model's catalog price, in currency units per million tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

/// The deployment-wide `[adaptive_routing]` policy, already sanitized
/// (weights clamped at zero, exploration to [0, 0.5]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdaptivePolicy {
    pub enabled: bool,
    pub latency_weight: f64,
    pub cost_weight: f64,
    pub load_weight: f64,
    pub exploration_ratio: f64,
    pub min_samples: u64,
}

impl Default for AdaptivePolicy {
    /// The defaults of docs/design/defaults.md: off, 1.0 / 0.5 / 0.25, 5 %, 50 samples.
    fn default() -> Self {
        Self {
            enabled: false,
            latency_weight: 1.0,
            cost_weight: 0.5,
            load_weight: 0.25,
            exploration_ratio: 0.05,
            min_samples: 50,
        }
    }
}

/// Everything a strategy may need at build time.
#[derive(Clone)]
pub struct BuildContext<'a> {
    /// The route's targets, in the order pick indices refer to.
    pub targets: &'a [TargetSpec<'a>],
    /// Seed for the random strategies. Give each balancer its own (a fixed
    /// seed in tests makes picks reproducible).
    pub seed: u64,
    /// The gateway's measurements of the route's targets.
    pub stats: Arc<dyn TargetStatsView>,
    /// KV-event index of the route's targets, when any has a source.
    pub kv_blocks: Arc<dyn KvBlockView>,
    /// LMCache occupancy of the route's targets, when any has a source.
    pub occupancy: Arc<dyn OccupancyView>,
    pub adaptive: AdaptivePolicy,
    /// The route's `cache_guard`, over each strategy's own default.
    pub cache_guard: GuardSetting,
}

impl<'a> BuildContext<'a> {
    /// A context over `targets` with no measurements and default policies
    /// (tests, benches, strategies that need nothing else).
    pub fn new(targets: &'a [TargetSpec<'a>], seed: u64) -> Self {
        Self {
            targets,
            seed,
            stats: Arc::new(NoViews),
            kv_blocks: Arc::new(NoViews),
            occupancy: Arc::new(NoViews),
            adaptive: AdaptivePolicy::default(),
            cache_guard: GuardSetting::default(),
        }
    }
}

/// Builds the balancer for `kind` over `ctx.targets`. Build it once per route
/// per configuration snapshot and share it: a balancer's state is what makes
/// it balance.
pub fn build(kind: StrategyKind, ctx: &BuildContext) -> Box<dyn LoadBalancer> {
    let n = ctx.targets.len();
    match kind {
        StrategyKind::RoundRobin => Box::new(RoundRobin::new(n)),
        StrategyKind::Random => Box::new(Random::from_seed(n, ctx.seed)),
        StrategyKind::PowerOfTwo => Box::new(PowerOfTwo::from_seed(n, ctx.seed)),
        StrategyKind::Weighted => {
            let weights: Vec<u32> = ctx.targets.iter().map(|t| t.weight).collect();
            Box::new(WeightedRoundRobin::new(&weights))
        }
        StrategyKind::ConsistentHash => {
            let ids: Vec<&str> = ctx.targets.iter().map(|t| t.id).collect();
            Box::new(ConsistentHash::new(&ids))
        }
        StrategyKind::CacheAware => Box::new(CacheAware::from_seed(n, ctx.seed).with_guard(
            ctx.cache_guard.over(CacheGuard::default()),
            Arc::clone(&ctx.stats),
        )),
        StrategyKind::Pipeline => Box::new(Pipeline::default_stack(ctx)),
        StrategyKind::PreciseCacheAware => Box::new(Pipeline::precise_cache_aware(ctx)),
        StrategyKind::LmcacheAware => Box::new(Pipeline::lmcache_aware(ctx)),
        StrategyKind::Adaptive => Box::new(Adaptive::from_context(ctx)),
        StrategyKind::PredictedLatency => Box::new(Pipeline::predicted_latency(ctx)),
        StrategyKind::LoraAware => Box::new(Pipeline::lora_aware(ctx)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RouteContext;

    #[test]
    fn strategy_names_round_trip() {
        for &kind in StrategyKind::ALL {
            assert_eq!(StrategyKind::from_name(kind.as_str()), Some(kind));
            assert_eq!(kind.as_str().parse::<StrategyKind>(), Ok(kind));
            assert_eq!(kind.to_string(), kind.as_str());
        }
    }

    #[test]
    fn strategy_names_are_the_configuration_names() {
        let names: Vec<&str> = StrategyKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            names,
            [
                "round_robin",
                "random",
                "power_of_two",
                "weighted",
                "consistent_hash",
                "cache_aware",
                "pipeline",
                "precise_cache_aware",
                "lmcache_aware",
                "adaptive",
                "predicted_latency",
                "lora_aware",
            ]
        );
    }

    #[test]
    fn unknown_strategy_error_names_it_and_lists_the_known_ones() {
        assert_eq!(StrategyKind::from_name("least_busy"), None);
        assert_eq!(StrategyKind::from_name("Round_Robin"), None);
        let err = "least_busy".parse::<StrategyKind>().unwrap_err();
        assert_eq!(err.name, "least_busy");
        assert_eq!(
            err.to_string(),
            "unknown load-balancing strategy \"least_busy\" (known: round_robin, random, \
             power_of_two, weighted, consistent_hash, cache_aware, pipeline, precise_cache_aware, \
             lmcache_aware, adaptive, predicted_latency, lora_aware)"
        );
    }

    #[test]
    fn only_weighted_pipeline_and_adaptive_read_weights() {
        for &kind in StrategyKind::ALL {
            assert_eq!(
                kind.reads_weights(),
                matches!(
                    kind,
                    StrategyKind::Weighted | StrategyKind::Pipeline | StrategyKind::Adaptive
                ),
                "{kind}"
            );
        }
    }

    #[test]
    fn built_balancer_reports_its_strategy_name() {
        let targets = [TargetSpec::new("a/m"), TargetSpec::new("b/m")];
        let ctx = BuildContext::new(&targets, 1);
        for &kind in StrategyKind::ALL {
            assert_eq!(build(kind, &ctx).name(), kind.as_str());
        }
    }

    #[test]
    fn built_weighted_balancer_honours_target_weights() {
        let targets = [
            TargetSpec {
                weight: 3,
                ..TargetSpec::new("a/m")
            },
            TargetSpec::new("b/m"),
        ];
        let lb = build(StrategyKind::Weighted, &BuildContext::new(&targets, 0));
        let picks: Vec<usize> = (0..8)
            .map(|_| lb.pick(&RouteContext::default(), &[0, 0]).unwrap())
            .collect();
        assert_eq!(picks, [0, 0, 1, 0, 0, 0, 1, 0]);
    }

    #[test]
    fn built_balancer_over_no_targets_picks_nothing() {
        let ctx = BuildContext::new(&[], 0);
        for &kind in StrategyKind::ALL {
            assert_eq!(build(kind, &ctx).pick(&RouteContext::default(), &[]), None);
        }
    }
}
