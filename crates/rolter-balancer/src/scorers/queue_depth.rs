//! Queue depth: prefer the target with the fewest requests waiting to
//! start (llm-d's queue scorer).
//!
//! Where [`LoadScorer`](super::LoadScorer) counts everything on a target,
//! this counts only what a new request would wait behind: the engine's
//! reported waiting queue plus what this node sent since, never below this
//! node's requests without a first byte ([`TargetStatsView::waiting`]). A
//! target decoding many streams but with an empty queue starts a new
//! prefill at once; one with a queue does not. Scores use the load
//! scorer's ratio, `(min + 1) / (waiting_i + 1)`, so the shortest queue
//! scores 1; a target whose queue is unknown scores as if empty — with
//! nothing known anywhere every target scores 1 (neutral).

use std::fmt;
use std::sync::Arc;

use crate::{Candidates, RouteContext, Scorer, TargetStatsView};

/// Scores eligible targets by queue depth; see the module documentation.
#[derive(Clone)]
pub struct QueueDepthScorer {
    stats: Arc<dyn TargetStatsView>,
}

impl QueueDepthScorer {
    pub fn new(stats: Arc<dyn TargetStatsView>) -> Self {
        Self { stats }
    }
}

impl fmt::Debug for QueueDepthScorer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueueDepthScorer").finish_non_exhaustive()
    }
}

impl Scorer for QueueDepthScorer {
    fn name(&self) -> &'static str {
        "queue_depth"
    }

    fn score(&self, _ctx: &RouteContext, targets: Candidates<'_>, scores: &mut [f64]) {
        let mut min = u64::MAX;
        for (i, score) in scores.iter_mut().enumerate() {
            if targets.eligible(i) {
                let waiting = self.stats.waiting(i).unwrap_or(0);
                min = min.min(waiting);
                // Parked here until the minimum is known.
                *score = waiting as f64;
            }
        }
        if min == u64::MAX {
            return;
        }
        let min = min as f64 + 1.0;
        for (i, score) in scores.iter_mut().enumerate() {
            if targets.eligible(i) {
                *score = min / (*score + 1.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scorers::testing::{is_neutral, scores};

    struct Waiting(Vec<Option<u64>>);

    impl TargetStatsView for Waiting {
        fn waiting(&self, target: usize) -> Option<u64> {
            self.0.get(target).copied().flatten()
        }
    }

    #[test]
    fn the_shortest_queue_scores_one() {
        let scorer = QueueDepthScorer::new(Arc::new(Waiting(vec![Some(3), Some(0), Some(1)])));
        let got = scores(&scorer, &RouteContext::default(), &[9, 9, 9], &|_| true);
        assert_eq!(got, [0.25, 1.0, 0.5]);
    }

    #[test]
    fn ineligible_targets_do_not_set_the_minimum() {
        let scorer = QueueDepthScorer::new(Arc::new(Waiting(vec![Some(0), Some(2), Some(2)])));
        let got = scores(&scorer, &RouteContext::default(), &[0; 3], &|i| i != 0);
        assert_eq!(got[1..], [1.0, 1.0]);
    }

    #[test]
    fn with_nothing_known_it_is_neutral() {
        let scorer = QueueDepthScorer::new(Arc::new(crate::NoViews));
        assert!(is_neutral(&scores(
            &scorer,
            &RouteContext::default(),
            &[0, 5, 9],
            &|_| true
        )));
    }
}
