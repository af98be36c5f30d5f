//! pipeline: filter → weighted scores → argmax.
//!
//! The composable strategy every cost, latency and cache signal plugs into
//! (the shape of llm-d's inference scheduler and SMG's policy pipeline).
//! A pick
//!
//! 1. filters: only targets for which the gateway's `eligible` predicate
//!    holds take part (the reference pipeline ignored eligibility, #1942;
//!    this one never returns an ineligible target while one is eligible). A
//!    pipeline built [`with a weight filter`](Pipeline::with_weight_filter)
//!    also drops weight-0 targets while a positively weighted one is usable;
//! 2. asks every [`Scorer`] for a score in [0, 1] per remaining target;
//! 3. sums the scores with the stages' weights, and
//! 4. returns the argmax, breaking ties uniformly at random from a seeded
//!    generator. Totals within [`TIE_EPSILON`] of the best count as tied, so
//!    that floating-point noise in an otherwise neutral stack does not pick
//!    the same target every time.
//!
//! `observe` is forwarded to every scorer, so learning scorers (session
//! pins, prefix trees, adapter sets) learn what the chosen target served.
//!
//! A pick allocates nothing for routes of up to [`INLINE_TARGETS`] targets:
//! eligibility, totals and one scratch row of scores live on the stack. The
//! last pick's per-target totals and components are kept for
//! [`LoadBalancer::report`] when the record is free (a pick that finds it
//! busy skips recording rather than wait), and per-target pick counts are
//! two relaxed atomics.

use std::fmt;
use std::sync::{Mutex, OnceLock, PoisonError, TryLockError};

use smallvec::{smallvec, SmallVec};

use crate::pick_counters::PickCounters;
use crate::report::{BalancerReport, TargetReport};
use crate::rng::SplitMix64;
use crate::scorers::{
    AdapterAffinityScorer, FreeCapacityScorer, KvBlockScorer, KvUsageScorer, LoadScorer,
    PrefixAffinityScorer, QueueDepthScorer, SessionAffinityScorer, StaticWeightScorer,
};
use crate::strategy::BuildContext;
use crate::{CacheGuard, Candidates, LoadBalancer, RouteContext, Scorer};

/// Routes up to this many targets are scored without allocating.
const INLINE_TARGETS: usize = 64;

/// Totals this close to the best are tied. Scores are in [0, 1] and stage
/// weights of order 1, so real differences are many orders larger.
const TIE_EPSILON: f64 = 1e-9;

/// One stage of a [`Pipeline`]: a scorer and what its score is worth.
pub struct WeightedScorer {
    pub scorer: Box<dyn Scorer>,
    /// Multiplies the scorer's [0, 1] score in the sum. Must be finite; a
    /// non-finite weight is read as 0 (the stage is ignored).
    pub weight: f64,
}

impl WeightedScorer {
    /// `scorer` weighted by `weight`.
    pub fn new(scorer: impl Scorer + 'static, weight: f64) -> Self {
        Self {
            scorer: Box::new(scorer),
            weight,
        }
    }
}

impl fmt::Debug for WeightedScorer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WeightedScorer")
            .field("scorer", &self.scorer.name())
            .field("weight", &self.weight)
            .finish()
    }
}

/// Filter → weighted scores → argmax; see the module documentation.
pub struct Pipeline {
    name: &'static str,
    stages: Box<[WeightedScorer]>,
    rng: SplitMix64,
    /// `zero_weight[i]`: target `i` has weight 0 and sits out while a
    /// positively weighted target is usable. Empty: no weight filter.
    zero_weight: Box<[bool]>,
    /// Per-target pick counters, sized by the first pick's target count.
    counters: OnceLock<PickCounters>,
    // Mutex, only ever try-locked on the request path: a pick that finds it
    // busy skips recording rather than wait. A pick holds it while its
    // scorers run (no I/O, no callbacks into the pipeline); `report` locks
    // it off the request path for one copy.
    last: Mutex<LastPick>,
}

/// The last recorded pick: `components[i * stages + s]` is stage `s`'s raw
/// score of target `i`; `totals[i]` is NaN for a target that did not take
/// part.
#[derive(Debug, Default)]
struct LastPick {
    stages: usize,
    totals: Vec<f64>,
    components: Vec<f64>,
    loads: Vec<u64>,
}

impl Pipeline {
    /// Stage weights of the `pipeline` strategy (docs/design/defaults.md).
    pub const SESSION_WEIGHT: f64 = 1.0;
    pub const STATIC_WEIGHT: f64 = 1.0;
    pub const LOAD_WEIGHT: f64 = 1.0;
    pub const PREFIX_WEIGHT: f64 = 1.0;
    pub const QUEUE_DEPTH_WEIGHT: f64 = 0.5;
    pub const KV_USAGE_WEIGHT: f64 = 0.5;
    /// Stage weights of `precise_cache_aware` (docs/design/defaults.md): KV events 1.0,
    /// load 0.25.
    pub const PRECISE_KV_WEIGHT: f64 = 1.0;
    pub const PRECISE_LOAD_WEIGHT: f64 = 0.25;
    /// Stage weights of `lmcache_aware` (docs/design/defaults.md): free capacity 1.0,
    /// load 0.25.
    pub const LMCACHE_FREE_CAPACITY_WEIGHT: f64 = 1.0;
    pub const LMCACHE_LOAD_WEIGHT: f64 = 0.25;
    /// Stage weights of `lora_aware` (docs/design/defaults.md): adapter 1.0, prefix
    /// 0.5, load 0.25.
    pub const LORA_ADAPTER_WEIGHT: f64 = 1.0;
    pub const LORA_PREFIX_WEIGHT: f64 = 0.5;
    pub const LORA_LOAD_WEIGHT: f64 = 0.25;

    /// A pipeline named `name` (what [`LoadBalancer::name`] returns) over
    /// `stages`, breaking ties from a generator seeded with `seed`.
    pub fn new(name: &'static str, stages: Vec<WeightedScorer>, seed: u64) -> Self {
        let stages = stages
            .into_iter()
            .map(|mut stage| {
                debug_assert!(stage.weight.is_finite(), "stage weight must be finite");
                if !stage.weight.is_finite() {
                    stage.weight = 0.0;
                }
                stage
            })
            .collect();
        Self {
            name,
            stages,
            rng: SplitMix64::from_seed(seed),
            zero_weight: Box::default(),
            counters: OnceLock::new(),
            last: Mutex::new(LastPick::default()),
        }
    }

    /// The default stack of the `pipeline` strategy (docs/design/defaults.md): session
    /// affinity 1.0 (TTL 300 s, bounded map), static weight 1.0, in-flight
    /// load 1.0, prefix affinity 1.0, queue depth 0.5, KV-cache usage 0.5;
    /// weight-0 targets sit out while a weighted one is usable.
    pub fn default_stack(ctx: &BuildContext) -> Self {
        let weights: Vec<u32> = ctx.targets.iter().map(|t| t.weight).collect();
        Self::new(
            "pipeline",
            vec![
                WeightedScorer::new(SessionAffinityScorer::default(), Self::SESSION_WEIGHT),
                WeightedScorer::new(StaticWeightScorer::new(&weights), Self::STATIC_WEIGHT),
                WeightedScorer::new(LoadScorer::new(), Self::LOAD_WEIGHT),
                WeightedScorer::new(
                    PrefixAffinityScorer::new(ctx.targets.len()),
                    Self::PREFIX_WEIGHT,
                ),
                WeightedScorer::new(
                    QueueDepthScorer::new(ctx.stats.clone()),
                    Self::QUEUE_DEPTH_WEIGHT,
                ),
                WeightedScorer::new(KvUsageScorer::new(ctx.stats.clone()), Self::KV_USAGE_WEIGHT),
            ],
            ctx.seed,
        )
        .with_weight_filter(&weights)
    }

    /// `precise_cache_aware`: resident KV blocks 1.0 over `ctx.kv_blocks`,
    /// load 0.25. Without token ids or fresh KV events it is least-load.
    pub fn precise_cache_aware(ctx: &BuildContext) -> Self {
        Self::new(
            "precise_cache_aware",
            vec![
                WeightedScorer::new(
                    KvBlockScorer::new(ctx.kv_blocks.clone())
                        .with_guard(ctx.cache_guard.over(CacheGuard::PRECISE), ctx.stats.clone()),
                    Self::PRECISE_KV_WEIGHT,
                ),
                WeightedScorer::new(LoadScorer::new(), Self::PRECISE_LOAD_WEIGHT),
            ],
            ctx.seed,
        )
    }

    /// `lmcache_aware`: free LMCache capacity 1.0 over `ctx.occupancy`, load
    /// 0.25. Without a usable occupancy signal it is least-load.
    pub fn lmcache_aware(ctx: &BuildContext) -> Self {
        Self::new(
            "lmcache_aware",
            vec![
                WeightedScorer::new(
                    FreeCapacityScorer::new(ctx.occupancy.clone()),
                    Self::LMCACHE_FREE_CAPACITY_WEIGHT,
                ),
                WeightedScorer::new(LoadScorer::new(), Self::LMCACHE_LOAD_WEIGHT),
            ],
            ctx.seed,
        )
    }

    /// `lora_aware`: adapter residency 1.0 (each target remembering its
    /// `max_adapters`), prefix affinity 0.5, load 0.25.
    pub fn lora_aware(ctx: &BuildContext) -> Self {
        let max_adapters: Vec<usize> = ctx.targets.iter().map(|t| t.max_adapters).collect();
        Self::new(
            "lora_aware",
            vec![
                WeightedScorer::new(
                    AdapterAffinityScorer::new(&max_adapters),
                    Self::LORA_ADAPTER_WEIGHT,
                ),
                WeightedScorer::new(
                    PrefixAffinityScorer::new(ctx.targets.len()),
                    Self::LORA_PREFIX_WEIGHT,
                ),
                WeightedScorer::new(LoadScorer::new(), Self::LORA_LOAD_WEIGHT),
            ],
            ctx.seed,
        )
    }

    /// Drops targets of weight 0 from a pick while any usable target has a
    /// positive weight, as `weighted` does: weight 0 means "no share", and a
    /// score cannot express that (an idle weight-0 target would still win on
    /// load). When every usable target has weight 0 they all take part, so
    /// the request still goes somewhere the gateway allows. `weights` is in
    /// target order; a target past its end counts as weighted.
    pub fn with_weight_filter(mut self, weights: &[u32]) -> Self {
        // Without a weight-0 target there is nothing to filter: keep the
        // pick free of the extra pass.
        self.zero_weight = if weights.contains(&0) {
            weights.iter().map(|&w| w == 0).collect()
        } else {
            Box::default()
        };
        self
    }

    /// The stages, in scoring order.
    pub fn stages(&self) -> &[WeightedScorer] {
        &self.stages
    }

    fn record(&self) -> Option<std::sync::MutexGuard<'_, LastPick>> {
        match self.last.try_lock() {
            Ok(guard) => Some(guard),
            Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        }
    }

    fn count_pick(&self, target: usize, targets: usize, now_ms: u64) {
        self.counters
            .get_or_init(|| PickCounters::new(targets))
            .record(target, now_ms);
    }
}

impl fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("name", &self.name)
            .field("stages", &self.stages)
            .field("weight_filter", &!self.zero_weight.is_empty())
            .finish_non_exhaustive()
    }
}

impl LoadBalancer for Pipeline {
    fn name(&self) -> &'static str {
        self.name
    }

    fn pick_eligible(&self, ctx: &RouteContext, targets: Candidates<'_>) -> Option<usize> {
        let n = targets.loads.len();

        // 1. Filter, asking the gateway's predicate once per target.
        let mut usable: SmallVec<[bool; INLINE_TARGETS]> =
            (0..n).map(|i| targets.eligible(i)).collect();
        if !self.zero_weight.is_empty() {
            let weighted = |i: usize| !self.zero_weight.get(i).copied().unwrap_or(false);
            if (0..n).any(|i| usable[i] && weighted(i)) {
                for (i, u) in usable.iter_mut().enumerate() {
                    *u &= weighted(i);
                }
            }
        }
        if !usable.contains(&true) {
            return None;
        }
        let is_usable = |i: usize| usable.get(i).copied().unwrap_or(false);

        // 2-3. Score and sum.
        let mut record = self.record();
        let stage_count = self.stages.len();
        if let Some(last) = record.as_deref_mut() {
            last.stages = stage_count;
            last.totals.clear();
            last.totals.resize(n, f64::NAN);
            last.components.clear();
            last.components.resize(n * stage_count, f64::NAN);
            last.loads.clear();
            last.loads.extend_from_slice(targets.loads);
        }
        let mut totals: SmallVec<[f64; INLINE_TARGETS]> = smallvec![0.0; n];
        let mut scratch: SmallVec<[f64; INLINE_TARGETS]> = smallvec![0.0; n];
        for (s, stage) in self.stages.iter().enumerate() {
            scratch.fill(0.0);
            stage.scorer.score(
                ctx,
                Candidates::new(targets.loads, &is_usable),
                &mut scratch,
            );
            for i in (0..n).filter(|&i| usable[i]) {
                let score = scratch[i];
                debug_assert!(
                    (0.0..=1.0).contains(&score),
                    "scorer {} gave target {i} {score}, outside [0, 1]",
                    stage.scorer.name()
                );
                let score = if score.is_nan() {
                    0.0
                } else {
                    score.clamp(0.0, 1.0)
                };
                totals[i] += stage.weight * score;
                if let Some(last) = record.as_deref_mut() {
                    last.components[i * stage_count + s] = score;
                }
            }
        }
        if let Some(mut last) = record {
            for i in (0..n).filter(|&i| usable[i]) {
                last.totals[i] = totals[i];
            }
        }

        // 4. Argmax, ties at random.
        let best = (0..n)
            .filter(|&i| usable[i])
            .map(|i| totals[i])
            .fold(f64::NEG_INFINITY, f64::max);
        let tied = |i: &usize| usable[*i] && totals[*i] >= best - TIE_EPSILON;
        let ties = (0..n).filter(tied).count();
        debug_assert!(ties > 0, "a usable target always reaches the best total");
        let k = if ties > 1 { self.rng.below(ties) } else { 0 };
        let chosen = (0..n).filter(tied).nth(k)?;
        self.count_pick(chosen, n, ctx.now_ms);
        Some(chosen)
    }

    fn observe(&self, target: usize, ctx: &RouteContext) {
        for stage in self.stages.iter() {
            stage.scorer.observe(target, ctx);
        }
    }

    fn report(&self) -> BalancerReport {
        let last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        let counters = self.counters.get();
        let n = last
            .totals
            .len()
            .max(counters.map_or(0, |counters| counters.len()));
        let targets = (0..n)
            .map(|i| {
                let mut report = TargetReport::default();
                if let Some(&total) = last.totals.get(i).filter(|t| !t.is_nan()) {
                    report.score = Some(total);
                    report.components = self
                        .stages
                        .iter()
                        .enumerate()
                        .filter_map(|(s, stage)| {
                            let score = *last.components.get(i * last.stages + s)?;
                            Some((stage.scorer.name(), score))
                        })
                        .collect();
                }
                if let Some(&load) = last.loads.get(i) {
                    report.signals = vec![("in_flight", load as f64)];
                }
                match counters {
                    Some(counters) => counters.counted(i, report),
                    None => report,
                }
            })
            .collect();
        BalancerReport {
            targets,
            ..BalancerReport::default()
        }
    }
}

#[cfg(test)]
mod tests;
