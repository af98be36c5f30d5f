//! In-flight load: the least loaded eligible target scores 1.
//!
//! The score of target `i` is `(min + 1) / (load_i + 1)`, where `min` is the
//! least in-flight count among the eligible targets. Why this normalization:
//!
//! - the least loaded target scores exactly 1 and every other target less, so
//!   when the rest of the stack is neutral the argmax is the least loaded
//!   target (ties at random) — least-load is the pipeline's fallback;
//! - it is a ratio, so what counts is relative load, like the 1.5× of
//!   `cache_aware`'s guard: 0 vs 1 in flight is a large gap (1 vs 0.5), 100
//!   vs 101 a negligible one (1 vs 0.99), and a small cache or weight bonus
//!   can outrank the latter but not the former;
//! - the `+ 1` keeps an idle target finite and makes it a clear winner over a
//!   busy one rather than an infinite one.
//!
//! Load is the gateway's in-flight count (guards taken before dispatch,
//! dropped at the end of the response).

use crate::{Candidates, RouteContext, Scorer};

/// Scores eligible targets by in-flight load; see the module documentation.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadScorer;

impl LoadScorer {
    /// The load scorer (it has no state).
    pub fn new() -> Self {
        Self
    }
}

impl Scorer for LoadScorer {
    fn name(&self) -> &'static str {
        "load"
    }

    fn score(&self, _ctx: &RouteContext, targets: Candidates<'_>, scores: &mut [f64]) {
        let loads = targets.loads;
        let n = scores.len().min(loads.len());
        let Some(min) = (0..n)
            .filter(|&i| targets.eligible(i))
            .map(|i| loads[i])
            .min()
        else {
            return;
        };
        let min = min as f64 + 1.0;
        for i in 0..n {
            if targets.eligible(i) {
                scores[i] = min / (loads[i] as f64 + 1.0);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scorers::testing::scores;

    #[test]
    fn least_loaded_eligible_target_scores_one_and_others_less() {
        let got = scores(
            &LoadScorer,
            &RouteContext::default(),
            &[3, 1, 0, 7],
            &|_| true,
        );
        assert_eq!(got[2], 1.0);
        assert_eq!(got[1], 0.5);
        assert_eq!(got[0], 0.25);
        assert_eq!(got[3], 0.125);
    }

    #[test]
    fn load_is_relative_to_the_least_loaded_eligible_target() {
        // The idle target 2 is ineligible: target 1 is the least loaded.
        let got = scores(&LoadScorer, &RouteContext::default(), &[3, 1, 0], &|i| {
            i != 2
        });
        assert_eq!(got[1], 1.0);
        assert_eq!(got[0], 0.5);
    }

    #[test]
    fn equal_loads_are_neutral() {
        let got = scores(&LoadScorer, &RouteContext::default(), &[4, 4, 4], &|_| true);
        assert_eq!(got, [1.0, 1.0, 1.0]);
    }

    #[test]
    fn huge_loads_stay_in_range() {
        let got = scores(
            &LoadScorer,
            &RouteContext::default(),
            &[u64::MAX, 0, u64::MAX - 1],
            &|_| true,
        );
        assert_eq!(got[1], 1.0);
        assert!(got[0] < 1e-18 && got[2] < 1e-18);
    }
}
