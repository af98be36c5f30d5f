//! The scorers the pipeline strategies are stacked from; see
//! [`crate::Scorer`] for the contract and [`crate::Pipeline`] for how scores
//! are combined.
//!
//! Every scorer writes a score in [0, 1] for each eligible target, higher is
//! better, and is neutral — the same value for every eligible target — when
//! it has nothing to say, so the rest of the stack decides. Learned state
//! (session pins, adapter sets, prefix trees) is keyed by target index: a
//! balancer lives for one configuration snapshot, in which an index names
//! one stable target identity, and a reload builds a new balancer.

mod adapter_affinity;
mod free_capacity;
mod kv_block;
mod kv_usage;
mod load;
mod prefix_affinity;
mod queue_depth;
mod session_affinity;
mod static_weight;

pub use adapter_affinity::AdapterAffinityScorer;
pub use free_capacity::FreeCapacityScorer;
pub use kv_block::KvBlockScorer;
pub use kv_usage::KvUsageScorer;
pub use load::LoadScorer;
pub use prefix_affinity::PrefixAffinityScorer;
pub use queue_depth::QueueDepthScorer;
pub use session_affinity::SessionAffinityScorer;
pub use static_weight::StaticWeightScorer;

/// A signal clamped to [0, 1], with NaN (a view's bug) read as 0: nothing
/// known in its favour.
fn unit(value: f64) -> f64 {
    if value.is_nan() {
        0.0
    } else {
        value.clamp(0.0, 1.0)
    }
}

/// Test helpers shared by the scorers' unit tests.
#[cfg(test)]
pub(crate) mod testing {
    use crate::{Candidates, KvBlockView, OccupancyView, RouteContext, Scorer};

    /// A hand-fed KV / occupancy view: `values[target]` is what it answers
    /// for that target (`None` past the end).
    #[derive(Clone, Debug, Default)]
    pub(crate) struct FixedView {
        pub(crate) values: Vec<Option<f64>>,
    }

    impl FixedView {
        pub(crate) fn new(values: &[Option<f64>]) -> Self {
            Self {
                values: values.to_vec(),
            }
        }

        fn value(&self, target: usize) -> Option<f64> {
            self.values.get(target).copied().flatten()
        }
    }

    impl KvBlockView for FixedView {
        fn resident_fraction(
            &self,
            target: usize,
            _token_ids: &[u32],
            _adapter: Option<&str>,
        ) -> Option<f64> {
            self.value(target)
        }
    }

    impl OccupancyView for FixedView {
        fn free_capacity(&self, target: usize) -> Option<f64> {
            self.value(target)
        }
    }

    /// The scores `scorer` gives with `eligible`, ineligible entries as NaN
    /// so a test cannot mistake them for a score.
    pub(crate) fn scores(
        scorer: &dyn Scorer,
        ctx: &RouteContext,
        loads: &[u64],
        eligible: &dyn Fn(usize) -> bool,
    ) -> Vec<f64> {
        let mut out = vec![f64::NAN; loads.len()];
        scorer.score(ctx, Candidates::new(loads, eligible), &mut out);
        for (i, s) in out.iter_mut().enumerate() {
            if eligible(i) {
                assert!(
                    (0.0..=1.0).contains(s),
                    "{}: score {s} of target {i} outside [0, 1]",
                    scorer.name()
                );
            } else {
                *s = f64::NAN;
            }
        }
        out
    }

    /// Whether every eligible entry of `scores` is the same (neutral).
    pub(crate) fn is_neutral(scores: &[f64]) -> bool {
        let mut known = scores.iter().filter(|s| !s.is_nan());
        match known.next() {
            Some(first) => known.all(|s| s == first),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_clamps_and_reads_nan_as_nothing() {
        assert_eq!(unit(-0.5), 0.0);
        assert_eq!(unit(0.25), 0.25);
        assert_eq!(unit(7.0), 1.0);
        assert_eq!(unit(f64::NAN), 0.0);
        assert_eq!(unit(f64::INFINITY), 1.0);
    }
}
