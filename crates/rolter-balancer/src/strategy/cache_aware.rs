//! cache_aware: approximate prefix affinity on the conversation text, with a
//! load guard.
//!
//! Engines with prefix caching (vLLM's automatic prefix caching, SGLang's
//! radix cache) skip the prefill of any prompt prefix whose KV they still
//! hold, so sending a conversation back to the replica that served its
//! beginning saves real GPU time. The gateway cannot see those caches; it
//! keeps one approximate prefix tree per target (`prefix_tree.rs`: 64-byte
//! blocks, chained xxh3 hashes, bounded per target with LRU eviction of
//! leaves) and learns it from `observe`. This is SGLang router's and SMG's
//! cache-aware policy, with the tree bounded by what it represents and the
//! guard below.
//!
//! A pick, over the eligible targets only (an unhealthy, parked or
//! breaker-open target neither attracts a request nor shapes the load
//! comparison):
//!
//! 1. finds the eligible target with the longest match of the prompt
//!    (several equally long: the least loaded of them, then at random);
//! 2. if that match is warm — at least [`CacheAware::WARM_MATCH_FRACTION`]
//!    of the prompt, or at least [`CacheAware::WARM_MATCH_BYTES`] of it —
//!    the request stays there, unless that target's load is more than
//!    [`CacheGuard::min_load`] (default 2) requests past the least loaded
//!    eligible target's *and* more than [`CacheGuard::load_ratio`]
//!    (default 1.5)× it (#1851: a shared system prompt made one replica
//!    warm for everything and took all the traffic); then the next longest warm
//!    match within the guard keeps it (a first turn whose tenant's system
//!    prompt is warm on several replicas, a later turn whose history's
//!    replica is busy while another holds the system prompt), and only when
//!    no warm target is within the guard does it spread to the least loaded
//!    eligible target;
//! 3. a cold prompt goes to the least loaded eligible target, ties at
//!    random — not to the smallest tree, which turns whichever replica has
//!    learned least into a hot spot.
//!
//! Which load. A new request waits behind the requests an engine has not
//! yet started answering (queued, or in prefill), not behind streams that
//! are only decoding: those share the batch with it and hardly delay its
//! prefill. Counting them made the guard move a conversation off the
//! engine holding its history whenever that engine was streaming a few
//! answers, and every move re-prefills the whole history elsewhere. So the
//! load compared here is the target's *waiting* requests (in flight and
//! not past their first response byte, [`TargetStatsView::waiting`]),
//! ties broken by requests in flight; a view that does not measure it
//! falls back to in flight.
//!
//! Spreading is what lets a popular prefix become warm on several replicas:
//! the target a request spreads to learns the prefix too, and from then on
//! ties between equally warm replicas go to the least loaded of them.
//!
//! Cost: the prompt (bounded to 32 KiB) is hashed once into at most 512
//! block hashes; each eligible target's tree is then binary-searched (about
//! nine map probes); `observe` touches at most 512 entries of one tree.
//! Nothing allocates per pick for routes of up to 64 targets.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use smallvec::{smallvec, SmallVec};

use crate::pick_counters::PickCounters;
use crate::prefix_tree::{PrefixTrees, PromptBlocks};
use crate::report::{BalancerReport, TargetReport};
use crate::rng::SplitMix64;
use crate::{Candidates, LoadBalancer, NoViews, RouteContext, TargetStatsView};

/// Routes up to this many targets are compared without allocating.
const INLINE_TARGETS: usize = 64;

/// Marks a target that takes no part in a pick.
const INELIGIBLE: u32 = u32::MAX;

/// Approximate prefix affinity with a load guard; see the module
/// documentation.
pub struct CacheAware {
    trees: PrefixTrees,
    rng: SplitMix64,
    picks: PickCounters,
    decisions: DecisionCounters,
    guard: CacheGuard,
    stats: Arc<dyn TargetStatsView>,
}

impl std::fmt::Debug for CacheAware {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheAware")
            .field("trees", &self.trees)
            .field("guard", &self.guard)
            .field("decisions", &self.decisions)
            .finish_non_exhaustive()
    }
}

/// When a warm target gives a request up: its load is more than `min_load`
/// requests past the least loaded eligible target's *and* more than
/// `load_ratio` times it (the specification: "more than 2 requests and
/// 1.5× past the least-loaded usable one").
///
/// Both terms are measured from the least loaded target, as SGLang's
/// router measures its imbalance (`max - min > abs` and `max > rel × min`):
/// what a move buys is the difference in queue, and what it costs is the
/// whole prefix prefilled again. Counted from zero instead, a warm engine
/// with one request queued behind two prefills gave up conversations while
/// its peers had one waiting each, and on `load-tests/quality.py` those
/// moves, each prefilling its whole history elsewhere, were half of
/// cache_aware's slowest tenth (TTFT p90 1.8x precise_cache_aware's; 1.15x
/// measured from the least loaded).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CacheGuard {
    pub min_load: u64,
    pub load_ratio: f64,
}

impl Default for CacheGuard {
    fn default() -> Self {
        CacheGuard {
            min_load: 2,
            load_ratio: 1.5,
        }
    }
}

impl CacheGuard {
    /// Whether a warm target with `load` waiting requests gives a request
    /// up when the least loaded eligible target has `least`.
    pub fn trips(self, load: u64, least: u64) -> bool {
        load.saturating_sub(least) > self.min_load && load as f64 > least as f64 * self.load_ratio
    }

    /// `precise_cache_aware`'s default: its affinity is to blocks the engine
    /// really holds, so it tolerates a longer queue before giving them up
    /// (on `load-tests/quality.py` with two prefill slots per engine, 4 and
    /// 2x keep 99.5% of the one-cache ceiling at a TTFT p90 of 130 ms,
    /// where 2 and 1.5x keep 98% at 138 ms).
    pub const PRECISE: CacheGuard = CacheGuard {
        min_load: 4,
        load_ratio: 2.0,
    };
}

/// A route's `cache_guard` as written: each field it sets replaces the
/// strategy's default.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct GuardSetting {
    pub min_load: Option<u64>,
    pub load_ratio: Option<f64>,
}

impl GuardSetting {
    /// This setting over the strategy's `default`.
    pub fn over(self, default: CacheGuard) -> CacheGuard {
        CacheGuard {
            min_load: self.min_load.unwrap_or(default.min_load),
            load_ratio: self.load_ratio.unwrap_or(default.load_ratio),
        }
    }
}

#[derive(Debug, Default)]
struct DecisionCounters {
    affinity: AtomicU64,
    spread: AtomicU64,
    cold: AtomicU64,
}

/// How a [`CacheAware`] balancer's picks were decided since it was built.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheAwareDecisions {
    /// Warm prompts kept on their longest match.
    pub affinity: u64,
    /// Warm prompts the load guard moved off their longest match: to the
    /// longest warm match within the guard, else the least loaded target.
    pub spread: u64,
    /// Cold prompts sent to the least loaded target.
    pub cold: u64,
}

impl CacheAware {
    /// Prompt text remembered per target by [`CacheAware::from_seed`]: 2 MiB,
    /// about 500k tokens — several long conversations or many system
    /// prompts, for well under 2 MiB of memory (see `prefix_tree.rs`).
    pub const DEFAULT_MAX_BYTES_PER_TARGET: usize = 2 * 1024 * 1024;

    /// A match covering at least this share of the (bounded) prompt is warm:
    /// most of the prefill would be saved (SGLang router's and SMG's default
    /// `cache_threshold`).
    pub const WARM_MATCH_FRACTION: f64 = 0.5;

    /// A match of at least this many bytes (about 1k tokens) is warm however
    /// long the prompt: a long system prompt shared by a 32 KiB conversation
    /// saves as much prefill as it would on a short one.
    pub const WARM_MATCH_BYTES: usize = 4 * 1024;

    /// Prefix affinity over `targets` targets with the default bound of
    /// [`Self::DEFAULT_MAX_BYTES_PER_TARGET`], breaking ties from a generator
    /// seeded with `seed`.
    pub fn from_seed(targets: usize, seed: u64) -> Self {
        Self::with_max_bytes(targets, Self::DEFAULT_MAX_BYTES_PER_TARGET, seed)
    }

    /// As [`CacheAware::from_seed`], each target's tree representing at most
    /// `max_bytes_per_target` bytes of prompt text (whole 64-byte blocks).
    pub fn with_max_bytes(targets: usize, max_bytes_per_target: usize, seed: u64) -> Self {
        Self {
            trees: PrefixTrees::new(targets, max_bytes_per_target),
            rng: SplitMix64::from_seed(seed),
            picks: PickCounters::new(targets),
            decisions: DecisionCounters::default(),
            guard: CacheGuard::default(),
            stats: Arc::new(NoViews),
        }
    }

    /// The same balancer with `guard`, reading each target's waiting
    /// requests from `stats`.
    pub fn with_guard(mut self, guard: CacheGuard, stats: Arc<dyn TargetStatsView>) -> Self {
        self.guard = guard;
        self.stats = stats;
        self
    }

    /// How picks were decided so far.
    pub fn decisions(&self) -> CacheAwareDecisions {
        CacheAwareDecisions {
            affinity: self.decisions.affinity.load(Ordering::Relaxed),
            spread: self.decisions.spread.load(Ordering::Relaxed),
            cold: self.decisions.cold.load(Ordering::Relaxed),
        }
    }

    /// Whether a best match of `blocks` blocks of `prompt` is warm.
    fn is_warm(prompt: &PromptBlocks, blocks: usize) -> bool {
        blocks > 0
            && (prompt.matched_fraction(blocks) >= Self::WARM_MATCH_FRACTION
                || PromptBlocks::matched_bytes(blocks) >= Self::WARM_MATCH_BYTES)
    }

    /// Whether a warm target at `load` must give the request up when the
    /// least loaded eligible target is at `least`.
    fn guard_trips(&self, load: u64, least: u64) -> bool {
        self.guard.trips(load, least)
    }

    /// The load the guard compares: waiting requests, then in flight.
    fn load_of(&self, targets: &Candidates<'_>, i: usize) -> (u64, u64) {
        let in_flight = targets.loads[i];
        (
            self.stats.waiting(i).unwrap_or(in_flight).min(in_flight),
            in_flight,
        )
    }

    /// A uniform draw among the targets in `0..n` for which `candidate`
    /// holds; `None` when none does.
    fn uniform_among(&self, n: usize, candidate: impl Fn(usize) -> bool) -> Option<usize> {
        let count = (0..n).filter(|&i| candidate(i)).count();
        let k = match count {
            0 => return None,
            1 => 0,
            _ => self.rng.below(count),
        };
        (0..n).filter(|&i| candidate(i)).nth(k)
    }
}

impl LoadBalancer for CacheAware {
    fn name(&self) -> &'static str {
        "cache_aware"
    }

    fn pick_eligible(&self, ctx: &RouteContext, targets: Candidates<'_>) -> Option<usize> {
        let n = targets.loads.len();
        let prompt = PromptBlocks::of(ctx.prompt);

        // One pass over the eligible targets: their matches, the longest
        // match, and the least load. Ineligible targets stay out of both.
        let mut matched: SmallVec<[u32; INLINE_TARGETS]> = smallvec![INELIGIBLE; n];
        let mut loads: SmallVec<[(u64, u64); INLINE_TARGETS]> = smallvec![(0, 0); n];
        let mut least: Option<(u64, u64)> = None;
        let mut best = 0u32;
        for (i, m) in matched.iter_mut().enumerate() {
            if !targets.eligible(i) {
                continue;
            }
            // At most MAX_BLOCKS (512), so it fits.
            *m = self.trees.matched_blocks(i, &prompt) as u32;
            best = best.max(*m);
            loads[i] = self.load_of(&targets, i);
            least = Some(least.map_or(loads[i], |l| l.min(loads[i])));
        }
        let least = least?;
        let usable = |i: usize| matched[i] != INELIGIBLE;
        let least_loaded = |i: usize| usable(i) && loads[i] == least;

        let chosen = if Self::is_warm(&prompt, best as usize) {
            // The longest warm match whose target the guard lets keep it;
            // past the longest, a shorter warm match (the tenant's system
            // prompt without this user's history) still saves most of the
            // prefill that the least loaded, cold target would redo.
            let keeps = |i: usize| {
                usable(i)
                    && Self::is_warm(&prompt, matched[i] as usize)
                    && !self.guard_trips(loads[i].0, least.0)
            };
            let kept = (0..n).filter(|&i| keeps(i)).map(|i| matched[i]).max();
            let counter = if kept == Some(best) {
                &self.decisions.affinity
            } else {
                &self.decisions.spread
            };
            counter.fetch_add(1, Ordering::Relaxed);
            match kept {
                Some(kept) => {
                    let tier = |i: usize| keeps(i) && matched[i] == kept;
                    let lowest = (0..n).filter(|&i| tier(i)).map(|i| loads[i]).min();
                    self.uniform_among(n, |i| tier(i) && Some(loads[i]) == lowest)
                }
                None => self.uniform_among(n, least_loaded),
            }
        } else {
            self.decisions.cold.fetch_add(1, Ordering::Relaxed);
            self.uniform_among(n, least_loaded)
        };
        debug_assert!(chosen.is_some_and(usable), "an eligible target was found");
        if let Some(target) = chosen {
            self.picks.record(target, ctx.now_ms);
        }
        chosen
    }

    fn observe(&self, target: usize, ctx: &RouteContext) {
        self.trees.insert(target, &PromptBlocks::of(ctx.prompt));
    }

    fn report(&self) -> BalancerReport {
        let targets = (0..self.trees.len().max(self.picks.len()))
            .map(|i| {
                let learned = TargetReport {
                    learned_size: Some(self.trees.stored_bytes(i)),
                    evictions: Some(self.trees.evictions(i)),
                    ..TargetReport::default()
                };
                self.picks.counted(i, learned)
            })
            .collect();
        BalancerReport {
            targets,
            decisions: None,
            cache_decisions: Some(self.decisions()),
        }
    }
}

#[cfg(test)]
mod tests;
