//! Static weight: a target's configured weight relative to the heaviest
//! eligible target.
//!
//! The score is `weight / max eligible weight`, so the heaviest eligible
//! target scores 1 and a target of half its weight 0.5. Normalizing by the
//! eligible maximum (not the route's) keeps the spread the same when the
//! heaviest target is parked. When every eligible weight is 0 there is no
//! preference to express and every target scores 0 (neutral). In a pipeline
//! a weight is a bonus, not a traffic share; the `pipeline` strategy also
//! drops weight-0 targets while a weighted one is usable (see
//! [`crate::Pipeline::with_weight_filter`]).

use crate::{Candidates, RouteContext, Scorer};

/// Scores eligible targets by configured weight; see the module
/// documentation.
#[derive(Clone, Debug)]
pub struct StaticWeightScorer {
    weights: Box<[u32]>,
}

impl StaticWeightScorer {
    /// One weight per target, in target order; a target past the end has
    /// weight 0.
    pub fn new(weights: &[u32]) -> Self {
        Self {
            weights: weights.into(),
        }
    }

    fn weight(&self, target: usize) -> u32 {
        self.weights.get(target).copied().unwrap_or(0)
    }
}

impl Scorer for StaticWeightScorer {
    fn name(&self) -> &'static str {
        "weight"
    }

    fn score(&self, _ctx: &RouteContext, targets: Candidates<'_>, scores: &mut [f64]) {
        let n = scores.len();
        let max = (0..n)
            .filter(|&i| targets.eligible(i))
            .map(|i| self.weight(i))
            .max()
            .unwrap_or(0);
        for (i, score) in scores.iter_mut().enumerate() {
            if targets.eligible(i) {
                *score = if max == 0 {
                    0.0
                } else {
                    f64::from(self.weight(i)) / f64::from(max)
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scorers::testing::{is_neutral, scores};

    #[test]
    fn heaviest_eligible_target_scores_one() {
        let scorer = StaticWeightScorer::new(&[3, 1, 6]);
        let got = scores(&scorer, &RouteContext::default(), &[0; 3], &|_| true);
        assert_eq!(got, [0.5, 1.0 / 6.0, 1.0]);
    }

    #[test]
    fn weights_are_relative_to_the_heaviest_eligible_target() {
        let scorer = StaticWeightScorer::new(&[3, 1, 6]);
        let got = scores(&scorer, &RouteContext::default(), &[0; 3], &|i| i != 2);
        assert_eq!(got[0], 1.0);
        assert!((got[1] - 1.0 / 3.0).abs() < 1e-12);
    }

    #[test]
    fn all_zero_weights_are_neutral() {
        let scorer = StaticWeightScorer::new(&[0, 0]);
        let got = scores(&scorer, &RouteContext::default(), &[0; 2], &|_| true);
        assert!(is_neutral(&got));
    }

    #[test]
    fn a_target_without_a_weight_scores_zero() {
        let scorer = StaticWeightScorer::new(&[2]);
        let got = scores(&scorer, &RouteContext::default(), &[0; 2], &|_| true);
        assert_eq!(got, [1.0, 0.0]);
    }
}
