//! random: a uniform draw over the eligible targets.
//!
//! Uniform random selection is the baseline for homogeneous pools: no state
//! beyond the generator, no coordination between gateway nodes, and balance
//! in expectation.
//!
//! Drawing uniformly over an arbitrary eligible subset without allocating is
//! done in two stages ([`uniform_eligible`]). First one optimistic draw over
//! all slots; if it lands on an eligible target, that is the answer, which is
//! the common case and costs one draw and one predicate call. Otherwise count
//! the `m` eligible targets, draw `k` in `0..m` and walk to the `k`-th. The
//! combination is still exactly uniform: with `s` slots, each eligible target
//! is chosen with probability `1/s + (s - m)/s · 1/m = 1/m`.

use crate::rng::SplitMix64;
use crate::{Candidates, LoadBalancer, RouteContext};

/// Uniform random selection; see the module documentation.
#[derive(Debug)]
pub struct Random {
    targets: usize,
    rng: SplitMix64,
}

impl Random {
    /// Uniform selection over `targets` targets, drawing from a generator
    /// seeded with `seed`.
    pub fn from_seed(targets: usize, seed: u64) -> Self {
        Self {
            targets,
            rng: SplitMix64::from_seed(seed),
        }
    }
}

impl LoadBalancer for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn pick_eligible(&self, _ctx: &RouteContext, targets: Candidates<'_>) -> Option<usize> {
        uniform_eligible(&self.rng, self.targets, None, targets.predicate())
    }
}

/// A uniform draw over the indices in `0..n`, other than `except`, for which
/// `eligible` holds; `None` when there is none. See the module documentation
/// for why the fast path keeps the draw uniform.
pub(super) fn uniform_eligible(
    rng: &SplitMix64,
    n: usize,
    except: Option<usize>,
    eligible: &dyn Fn(usize) -> bool,
) -> Option<usize> {
    debug_assert!(except.is_none_or(|x| x < n), "except must index a target");
    let slots = n - usize::from(except.is_some());
    if slots == 0 {
        return None;
    }

    let mut guess = rng.below(slots);
    if except.is_some_and(|x| guess >= x) {
        guess += 1;
    }
    if eligible(guess) {
        return Some(guess);
    }

    let candidate = |i: &usize| Some(*i) != except && eligible(*i);
    let count = (0..n).filter(candidate).count();
    if count == 0 {
        return None;
    }
    (0..n).filter(candidate).nth(rng.below(count))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(lb: &Random, n: usize, picks: usize, eligible: &dyn Fn(usize) -> bool) -> Vec<usize> {
        let loads = vec![0; n];
        let mut counts = vec![0; n];
        for _ in 0..picks {
            let i = lb
                .pick_eligible(&RouteContext::default(), Candidates::new(&loads, eligible))
                .expect("something is eligible");
            counts[i] += 1;
        }
        counts
    }

    #[test]
    fn random_is_roughly_uniform_over_all_targets() {
        let lb = Random::from_seed(4, 7);
        let got = counts(&lb, 4, 4_000, &|_| true);
        for &c in &got {
            assert!((850..1_150).contains(&c), "{got:?}");
        }
    }

    #[test]
    fn random_is_roughly_uniform_over_the_eligible_targets_only() {
        let lb = Random::from_seed(6, 11);
        let got = counts(&lb, 6, 6_000, &|i| i % 2 == 1);
        for (i, &c) in got.iter().enumerate() {
            if i % 2 == 1 {
                assert!((1_800..2_200).contains(&c), "{got:?}");
            } else {
                assert_eq!(c, 0, "{got:?}");
            }
        }
    }

    #[test]
    fn random_with_one_eligible_target_always_picks_it() {
        let lb = Random::from_seed(130, 3);
        let got = counts(&lb, 130, 200, &|i| i == 64);
        assert_eq!(got[64], 200);
    }

    #[test]
    fn random_reaches_indices_past_64() {
        let lb = Random::from_seed(130, 5);
        let got = counts(&lb, 130, 13_000, &|_| true);
        assert!(got.iter().all(|&c| c > 0), "{got:?}");
    }

    #[test]
    fn random_with_the_same_seed_repeats_its_picks() {
        let a = Random::from_seed(10, 42);
        let b = Random::from_seed(10, 42);
        let ctx = RouteContext::default();
        for _ in 0..100 {
            assert_eq!(a.pick(&ctx, &[0; 10]), b.pick(&ctx, &[0; 10]));
        }
    }

    #[test]
    fn random_with_no_targets_or_nothing_eligible_picks_nothing() {
        let ctx = RouteContext::default();
        assert_eq!(Random::from_seed(0, 1).pick(&ctx, &[]), None);
        assert_eq!(
            Random::from_seed(3, 1).pick_eligible(&ctx, Candidates::new(&[0; 3], &|_| false)),
            None
        );
    }

    #[test]
    fn uniform_eligible_never_returns_the_excluded_index() {
        let rng = SplitMix64::from_seed(9);
        for _ in 0..1_000 {
            let got = uniform_eligible(&rng, 3, Some(1), &|_| true).unwrap();
            assert_ne!(got, 1);
        }
        assert_eq!(uniform_eligible(&rng, 1, Some(0), &|_| true), None);
        assert_eq!(uniform_eligible(&rng, 2, Some(0), &|i| i == 0), None);
    }
}
