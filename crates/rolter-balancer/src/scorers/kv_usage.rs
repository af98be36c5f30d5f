//! KV-cache usage: prefer the engine with the most free KV cache, `1 -
//! usage` (llm-d's kv-cache-utilization scorer).
//!
//! An engine near a full cache preempts or evicts to admit more, which
//! costs every sequence on it; one with room does not. The signal is the
//! engine's own gauge (`vllm:kv_cache_usage_perc`, `sglang:token_usage`)
//! from a fresh reading ([`TargetStatsView::kv_usage`]). A target without
//! one scores 0, as `free_capacity.rs` explains: with no reading anywhere
//! every score is 0 (neutral), and otherwise only known room is ranked up.

use std::fmt;
use std::sync::Arc;

use super::unit;
use crate::{Candidates, RouteContext, Scorer, TargetStatsView};

/// Scores eligible targets by free KV cache; see the module documentation.
#[derive(Clone)]
pub struct KvUsageScorer {
    stats: Arc<dyn TargetStatsView>,
}

impl KvUsageScorer {
    pub fn new(stats: Arc<dyn TargetStatsView>) -> Self {
        Self { stats }
    }
}

impl fmt::Debug for KvUsageScorer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KvUsageScorer").finish_non_exhaustive()
    }
}

impl Scorer for KvUsageScorer {
    fn name(&self) -> &'static str {
        "kv_usage"
    }

    fn score(&self, _ctx: &RouteContext, targets: Candidates<'_>, scores: &mut [f64]) {
        for (i, score) in scores.iter_mut().enumerate() {
            *score = if targets.eligible(i) {
                self.stats
                    .kv_usage(i)
                    .map_or(0.0, |usage| unit(1.0 - usage))
            } else {
                0.0
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scorers::testing::{is_neutral, scores};

    struct Usage(Vec<Option<f64>>);

    impl TargetStatsView for Usage {
        fn kv_usage(&self, target: usize) -> Option<f64> {
            self.0.get(target).copied().flatten()
        }
    }

    #[test]
    fn the_emptiest_cache_scores_highest() {
        let scorer = KvUsageScorer::new(Arc::new(Usage(vec![Some(0.75), Some(0.25), None])));
        let got = scores(&scorer, &RouteContext::default(), &[0; 3], &|_| true);
        assert_eq!(got, [0.25, 0.75, 0.0]);
    }

    #[test]
    fn without_readings_it_is_neutral_and_garbage_is_clamped() {
        let none = KvUsageScorer::new(Arc::new(crate::NoViews));
        assert!(is_neutral(&scores(
            &none,
            &RouteContext::default(),
            &[0; 3],
            &|_| true
        )));
        let odd = KvUsageScorer::new(Arc::new(Usage(vec![Some(1.5), Some(f64::NAN)])));
        let got = scores(&odd, &RouteContext::default(), &[0; 2], &|_| true);
        assert_eq!(got, [0.0, 0.0]);
    }
}
