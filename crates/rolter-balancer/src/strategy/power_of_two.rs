//! power_of_two: the less loaded of two random targets.
//!
//! The "power of two choices" (Azar, Broder, Karlin & Upfal, "Balanced
//! Allocations", 1994; Mitzenmacher, "The Power of Two Choices in Randomized
//! Load Balancing", 2001): sampling two targets and taking the less loaded one
//! shrinks the worst imbalance from `Θ(log n / log log n)` to
//! `Θ(log log n)` compared with one random choice, while reading only two
//! load counters. Always taking the global least loaded would do no better
//! and makes every gateway node herd onto the same target from the same
//! (stale) snapshot; two random samples keep nodes from agreeing. tower's
//! `balance::p2c` and Finagle's `P2CLeastLoaded` are the same policy.
//!
//! Both samples are drawn uniformly from the eligible targets and are
//! distinct whenever two are eligible; a tie keeps the first sample, which is
//! itself uniform. Load is the in-flight request count the gateway counts with
//! its guards.

use crate::rng::SplitMix64;
use crate::strategy::random::uniform_eligible;
use crate::{Candidates, LoadBalancer, RouteContext};

/// Power-of-two-choices selection; see the module documentation.
#[derive(Debug)]
pub struct PowerOfTwo {
    targets: usize,
    rng: SplitMix64,
}

impl PowerOfTwo {
    /// Two-choice selection over `targets` targets, sampling from a generator
    /// seeded with `seed`.
    pub fn from_seed(targets: usize, seed: u64) -> Self {
        Self {
            targets,
            rng: SplitMix64::from_seed(seed),
        }
    }
}

impl LoadBalancer for PowerOfTwo {
    fn name(&self) -> &'static str {
        "power_of_two"
    }

    fn pick_eligible(&self, _ctx: &RouteContext, targets: Candidates<'_>) -> Option<usize> {
        debug_assert_eq!(targets.loads.len(), self.targets, "one load per target");
        let first = uniform_eligible(&self.rng, self.targets, None, targets.predicate())?;
        let Some(second) =
            uniform_eligible(&self.rng, self.targets, Some(first), targets.predicate())
        else {
            return Some(first);
        };
        // A missing load (a caller bug the debug assertion above catches)
        // reads as idle rather than panicking on the request path.
        let load = |i: usize| targets.loads.get(i).copied().unwrap_or(0);
        if load(second) < load(first) {
            Some(second)
        } else {
            Some(first)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(
        lb: &PowerOfTwo,
        loads: &[u64],
        picks: usize,
        eligible: &dyn Fn(usize) -> bool,
    ) -> Vec<usize> {
        let mut counts = vec![0; loads.len()];
        for _ in 0..picks {
            let i = lb
                .pick_eligible(&RouteContext::default(), Candidates::new(loads, eligible))
                .expect("something is eligible");
            counts[i] += 1;
        }
        counts
    }

    #[test]
    fn power_of_two_is_roughly_uniform_under_equal_load() {
        let lb = PowerOfTwo::from_seed(4, 7);
        let got = counts(&lb, &[3; 4], 4_000, &|_| true);
        for &c in &got {
            assert!((850..1_150).contains(&c), "{got:?}");
        }
    }

    #[test]
    fn power_of_two_never_picks_the_most_loaded_of_two_or_more() {
        let lb = PowerOfTwo::from_seed(4, 13);
        let got = counts(&lb, &[5, 5, 9, 5], 2_000, &|_| true);
        assert_eq!(got[2], 0, "{got:?}");
    }

    #[test]
    fn power_of_two_prefers_the_less_loaded_target() {
        // Target 0 wins whenever it is sampled: in 3 of the 6 pairs, so
        // half the picks; the rest spread over the others.
        let lb = PowerOfTwo::from_seed(4, 21);
        let got = counts(&lb, &[0, 10, 10, 10], 4_000, &|_| true);
        assert!((1_800..2_200).contains(&got[0]), "{got:?}");
        for &c in &got[1..] {
            assert!((500..850).contains(&c), "{got:?}");
        }
    }

    #[test]
    fn power_of_two_with_two_targets_always_takes_the_lighter() {
        let lb = PowerOfTwo::from_seed(2, 1);
        let got = counts(&lb, &[4, 1], 500, &|_| true);
        assert_eq!(got, [0, 500]);
    }

    #[test]
    fn power_of_two_ignores_the_load_of_ineligible_targets() {
        // The idle target 1 is ineligible; 0 and 2 are equally loaded.
        let lb = PowerOfTwo::from_seed(3, 17);
        let got = counts(&lb, &[2, 0, 2], 2_000, &|i| i != 1);
        assert_eq!(got[1], 0);
        assert!((850..1_150).contains(&got[0]), "{got:?}");
    }

    #[test]
    fn power_of_two_with_one_eligible_target_picks_it_however_loaded() {
        let lb = PowerOfTwo::from_seed(65, 3);
        let mut loads = vec![0; 65];
        loads[64] = 1_000;
        let got = counts(&lb, &loads, 100, &|i| i == 64);
        assert_eq!(got[64], 100);
    }

    #[test]
    fn power_of_two_finds_the_idle_target_past_index_64() {
        let lb = PowerOfTwo::from_seed(130, 5);
        let mut loads = vec![50; 130];
        loads[129] = 0;
        let got = counts(&lb, &loads, 100, &|i| i == 3 || i == 129);
        assert_eq!(got[129], 100);
    }

    #[test]
    fn power_of_two_with_no_targets_or_nothing_eligible_picks_nothing() {
        let ctx = RouteContext::default();
        assert_eq!(PowerOfTwo::from_seed(0, 1).pick(&ctx, &[]), None);
        assert_eq!(
            PowerOfTwo::from_seed(3, 1).pick_eligible(&ctx, Candidates::new(&[0; 3], &|_| false)),
            None
        );
    }
}
