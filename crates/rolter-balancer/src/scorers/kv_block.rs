//! Precise KV-block residency: prefer the target whose engine reports the
//! longest leading run of this request's token blocks as resident.
//!
//! The signal comes from the engines' own KV-event streams (vLLM's ZMQ
//! `BlockStored` / `BlockRemoved` events) through the gateway's index, read
//! here as a [`KvBlockView`]: the score of a target is its resident fraction
//! of the request's leading full token blocks.
//!
//! Neutrality. Without the request's token ids (`ctx.token_ids` absent or
//! empty) there is nothing to look up and every target scores 0. A target
//! whose stream is stale, malformed, disconnected or sequence-gapped has no
//! fresh index, and the view answers `None` for it; such a target also
//! scores 0 — exactly what a fresh index with nothing resident scores. That
//! is the one reading that is neutral about the unknown target: when every
//! target is unknown, every score is 0 and the rest of the stack (least
//! load) decides, as docs/design/balancer.md requires; when some targets report
//! blocks, only positive evidence ranks a target up, and a target whose
//! stream broke is ranked exactly like a known-cold one — neither rewarded
//! for its silence (which would steer traffic toward broken streams) nor
//! pushed below cold targets.

use std::fmt;
use std::sync::Arc;

use super::unit;
use crate::{CacheGuard, Candidates, KvBlockView, RouteContext, Scorer, TargetStatsView};

/// Scores eligible targets by resident KV blocks; see the module
/// documentation.
#[derive(Clone)]
pub struct KvBlockScorer {
    view: Arc<dyn KvBlockView>,
    /// When set, a warm target whose waiting requests trip the guard
    /// scores 0: its prefix is worth less than the queue in front of it.
    guard: Option<(CacheGuard, Arc<dyn TargetStatsView>)>,
}

impl KvBlockScorer {
    /// A scorer over the gateway's KV-block index.
    pub fn new(view: Arc<dyn KvBlockView>) -> Self {
        Self { view, guard: None }
    }

    /// The same scorer with `cache_aware`'s load guard over the targets'
    /// waiting requests (in flight, not past their first token): affinity
    /// to an engine whose prefill queue is more than `guard.min_load`
    /// requests past the least loaded target's and more than
    /// `guard.load_ratio` times it is dropped for
    /// that pick, and load decides. Without it, a popular tenant's prefix
    /// (weight 1.0 against load's 0.25) keeps one engine hot however long
    /// its queue grows.
    pub fn with_guard(mut self, guard: CacheGuard, stats: Arc<dyn TargetStatsView>) -> Self {
        self.guard = Some((guard, stats));
        self
    }

    /// Target `i`'s waiting requests (in flight when the view does not
    /// know), under the guard's view.
    fn waiting(stats: &dyn TargetStatsView, targets: &Candidates<'_>, i: usize) -> u64 {
        let in_flight = targets.loads[i];
        stats.waiting(i).unwrap_or(in_flight).min(in_flight)
    }

    /// The guard, its view and the least waiting requests of an eligible
    /// target, found once per pick; `None` without a guard.
    fn guard_for(
        &self,
        targets: &Candidates<'_>,
    ) -> Option<(CacheGuard, &dyn TargetStatsView, u64)> {
        let (guard, stats) = self.guard.as_ref()?;
        let least = (0..targets.loads.len())
            .filter(|&i| targets.eligible(i))
            .map(|i| Self::waiting(stats.as_ref(), targets, i))
            .min()
            .unwrap_or(0);
        Some((*guard, stats.as_ref(), least))
    }
}

impl fmt::Debug for KvBlockScorer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvBlockScorer").finish_non_exhaustive()
    }
}

impl Scorer for KvBlockScorer {
    fn name(&self) -> &'static str {
        "kv_blocks"
    }

    fn observe(&self, target: usize, ctx: &RouteContext) {
        if let Some(token_ids) = ctx.token_ids.filter(|ids| !ids.is_empty()) {
            self.view.note_routed(target, token_ids, ctx.adapter);
        }
    }

    fn score(&self, ctx: &RouteContext, targets: Candidates<'_>, scores: &mut [f64]) {
        scores.fill(0.0);
        let Some(token_ids) = ctx.token_ids.filter(|ids| !ids.is_empty()) else {
            return;
        };
        let guard = self.guard_for(&targets);
        let over_guard = |i: usize| {
            guard.is_some_and(|(guard, stats, least)| {
                guard.trips(Self::waiting(stats, &targets, i), least)
            })
        };
        for (i, score) in scores.iter_mut().enumerate() {
            if targets.eligible(i) && !over_guard(i) {
                *score = self
                    .view
                    .resident_fraction(i, token_ids, ctx.adapter)
                    .map_or(0.0, unit);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scorers::testing::{is_neutral, scores, FixedView};

    /// A view that models residency: target `t` holds the first
    /// `resident_blocks[t]` blocks of 16 tokens of any request.
    struct LeadingBlocks {
        resident_blocks: Vec<usize>,
    }

    impl KvBlockView for LeadingBlocks {
        fn resident_fraction(
            &self,
            target: usize,
            token_ids: &[u32],
            _adapter: Option<&str>,
        ) -> Option<f64> {
            let blocks = token_ids.len() / 16;
            if blocks == 0 {
                return Some(0.0);
            }
            let held = self.resident_blocks.get(target)?;
            Some((*held).min(blocks) as f64 / blocks as f64)
        }
    }

    fn ctx(token_ids: Option<&[u32]>) -> RouteContext<'_> {
        RouteContext {
            token_ids,
            ..RouteContext::default()
        }
    }

    const TOKENS: [u32; 64] = [7; 64];

    #[test]
    fn kv_scorer_prefers_the_longest_resident_leading_fraction() {
        let scorer = KvBlockScorer::new(Arc::new(LeadingBlocks {
            resident_blocks: vec![1, 4, 2],
        }));
        let got = scores(&scorer, &ctx(Some(&TOKENS)), &[0; 3], &|_| true);
        assert_eq!(got, [0.25, 1.0, 0.5]);
    }

    #[test]
    fn kv_scorer_is_neutral_without_token_ids() {
        let scorer = KvBlockScorer::new(Arc::new(FixedView::new(&[Some(1.0), Some(0.0)])));
        assert!(is_neutral(&scores(&scorer, &ctx(None), &[0; 2], &|_| true)));
        assert!(is_neutral(&scores(
            &scorer,
            &ctx(Some(&[])),
            &[0; 2],
            &|_| true
        )));
    }

    #[test]
    fn kv_scorer_is_neutral_when_no_target_has_a_fresh_index() {
        let scorer = KvBlockScorer::new(Arc::new(FixedView::new(&[None, None, None])));
        assert!(is_neutral(&scores(
            &scorer,
            &ctx(Some(&TOKENS)),
            &[0; 3],
            &|_| true
        )));
    }

    #[test]
    fn kv_scorer_ranks_an_unknown_target_like_a_cold_one() {
        // 0 reports blocks, 1's stream is stale, 2 is fresh and cold.
        let scorer = KvBlockScorer::new(Arc::new(FixedView::new(&[Some(0.5), None, Some(0.0)])));
        let got = scores(&scorer, &ctx(Some(&TOKENS)), &[0; 3], &|_| true);
        assert_eq!(got, [0.5, 0.0, 0.0]);
    }

    #[test]
    fn kv_scorer_clamps_what_the_view_says() {
        let scorer = KvBlockScorer::new(Arc::new(FixedView::new(&[
            Some(1.5),
            Some(-1.0),
            Some(f64::NAN),
        ])));
        let got = scores(&scorer, &ctx(Some(&TOKENS)), &[0; 3], &|_| true);
        assert_eq!(got, [1.0, 0.0, 0.0]);
    }

    /// Target `i` has `waiting[i]` requests not past their first token.
    struct Waiting(Vec<u64>);

    impl crate::TargetStatsView for Waiting {
        fn waiting(&self, target: usize) -> Option<u64> {
            self.0.get(target).copied()
        }
    }

    #[test]
    fn a_warm_engine_with_a_prefill_queue_loses_its_affinity_to_the_guard() {
        let view = Arc::new(FixedView::new(&[Some(0.9), Some(0.0), Some(0.0)]));
        let guarded = |waiting: Vec<u64>| {
            KvBlockScorer::new(view.clone())
                .with_guard(CacheGuard::default(), Arc::new(Waiting(waiting)))
        };
        // Four streams decoding on the warm engine: its affinity stands.
        let decoding = scores(
            &guarded(vec![0, 0, 1]),
            &ctx(Some(&TOKENS)),
            &[4, 0, 1],
            &|_| true,
        );
        assert_eq!(decoding, [0.9, 0.0, 0.0]);
        // The same four waiting for their prefill: load decides.
        let queued = scores(
            &guarded(vec![4, 0, 1]),
            &ctx(Some(&TOKENS)),
            &[4, 0, 1],
            &|_| true,
        );
        assert!(is_neutral(&queued), "{queued:?}");
        // An ineligible idle target does not count as the least loaded.
        let idle_out = scores(
            &guarded(vec![3, 0, 3]),
            &ctx(Some(&TOKENS)),
            &[3, 0, 3],
            &|i| i != 1,
        );
        assert_eq!((idle_out[0], idle_out[2]), (0.9, 0.0));
        // Unguarded, as before.
        let plain = KvBlockScorer::new(view.clone());
        assert_eq!(
            scores(&plain, &ctx(Some(&TOKENS)), &[9, 0, 0], &|_| true),
            [0.9, 0.0, 0.0]
        );
    }
}
