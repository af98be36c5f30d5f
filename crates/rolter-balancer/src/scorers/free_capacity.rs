//! LMCache free capacity: prefer the target whose LMCache has the most room
//! (1 - occupancy), so offloaded KV lands where it will not evict others.
//!
//! The signal is the gateway's poll of each target's LMCache controller, read
//! as an [`OccupancyView`]. A target whose controller is empty, saturated,
//! failed or stale reads `None` and scores 0 — the same as a cache with no
//! room, for the reason given in `kv_block.rs`: when no target has a usable
//! signal every score is 0 (neutral, least load decides), and otherwise only
//! a known free cache is ranked up.

use std::fmt;
use std::sync::Arc;

use super::unit;
use crate::{Candidates, OccupancyView, RouteContext, Scorer};

/// Scores eligible targets by free LMCache capacity; see the module
/// documentation.
#[derive(Clone)]
pub struct FreeCapacityScorer {
    view: Arc<dyn OccupancyView>,
}

impl FreeCapacityScorer {
    /// A scorer over the gateway's LMCache occupancy signal.
    pub fn new(view: Arc<dyn OccupancyView>) -> Self {
        Self { view }
    }
}

impl fmt::Debug for FreeCapacityScorer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FreeCapacityScorer").finish_non_exhaustive()
    }
}

impl Scorer for FreeCapacityScorer {
    fn name(&self) -> &'static str {
        "free_capacity"
    }

    fn score(&self, _ctx: &RouteContext, targets: Candidates<'_>, scores: &mut [f64]) {
        for (i, score) in scores.iter_mut().enumerate() {
            *score = if targets.eligible(i) {
                self.view.free_capacity(i).map_or(0.0, unit)
            } else {
                0.0
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scorers::testing::{is_neutral, scores, FixedView};

    #[test]
    fn free_capacity_scores_the_freest_available_cache_highest() {
        let scorer =
            FreeCapacityScorer::new(Arc::new(FixedView::new(&[Some(0.2), Some(0.9), None])));
        let got = scores(&scorer, &RouteContext::default(), &[0; 3], &|_| true);
        assert_eq!(got, [0.2, 0.9, 0.0]);
    }

    #[test]
    fn free_capacity_without_any_signal_is_neutral() {
        let scorer = FreeCapacityScorer::new(Arc::new(crate::NoViews));
        assert!(is_neutral(&scores(
            &scorer,
            &RouteContext::default(),
            &[0; 4],
            &|_| true
        )));
    }
}
