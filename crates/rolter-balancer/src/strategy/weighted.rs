//! weighted: smooth weighted round-robin.
//!
//! nginx's algorithm (Maxim Dounin, nginx 1.3.1, 2012,
//! `ngx_http_upstream_get_peer` in `ngx_http_upstream_round_robin.c`). Each
//! target keeps a running `current` weight. On every pick each participating
//! target adds its configured weight to `current`; the target with the largest
//! `current` wins (the first one on a tie), and the winner gives back the sum
//! of all participating weights. Over one cycle every target is picked
//! exactly in proportion to its weight, and — unlike plain weighted
//! round-robin — the picks of a heavy target are interleaved with the others
//! instead of arriving in a burst: 5:1:1 gives a,a,b,a,c,a,a rather than
//! a,a,a,a,a,b,c, and 3:1 gives 0,0,1,0.
//!
//! Participants are the eligible targets with a positive weight. An ineligible
//! target sits the round out with its `current` frozen, as nginx does with a
//! down peer, so it rejoins where it left off. Weight 0 means "no share": such
//! a target never participates, and is picked only when every eligible target
//! has weight 0, in which case the first eligible one is returned so the
//! request still goes somewhere the gateway allows.
//!
//! Each round adds the participants' total weight and the winner gives the
//! same amount back, so the running weights always sum to 0 (asserted in
//! debug builds), and they do not drift when eligibility changes from one
//! pick to the next (guarded by
//! `weighted_running_weights_stay_bounded_under_changing_eligibility`): an
//! `i64` never overflows for `u32` weights.

use std::sync::{Mutex, PoisonError};

use crate::{Candidates, LoadBalancer, RouteContext};

/// Smooth weighted round-robin; see the module documentation.
#[derive(Debug)]
pub struct WeightedRoundRobin {
    weights: Box<[u32]>,
    // Mutex: a pick updates every running weight together; it is held for one
    // allocation-free pass with no I/O, and any state it leaves is valid, so a
    // poisoned lock is simply taken over.
    current: Mutex<Box<[i64]>>,
}

impl WeightedRoundRobin {
    /// Smooth weighted round-robin with one weight per target, in target
    /// order.
    pub fn new(weights: &[u32]) -> Self {
        Self {
            weights: weights.into(),
            current: Mutex::new(vec![0; weights.len()].into_boxed_slice()),
        }
    }
}

impl LoadBalancer for WeightedRoundRobin {
    fn name(&self) -> &'static str {
        "weighted"
    }

    fn pick_eligible(&self, _ctx: &RouteContext, targets: Candidates<'_>) -> Option<usize> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        let mut total: i64 = 0;
        let mut best: Option<usize> = None;
        for (i, &weight) in self.weights.iter().enumerate() {
            if weight == 0 || !targets.eligible(i) {
                continue;
            }
            let weight = i64::from(weight);
            current[i] += weight;
            total += weight;
            if best.is_none_or(|b| current[i] > current[b]) {
                best = Some(i);
            }
        }
        match best {
            Some(winner) => {
                current[winner] -= total;
                debug_assert_eq!(current.iter().sum::<i64>(), 0, "running weights sum to 0");
                Some(winner)
            }
            None => {
                drop(current);
                (0..self.weights.len()).find(|&i| targets.eligible(i))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sequence(
        lb: &WeightedRoundRobin,
        count: usize,
        eligible: &dyn Fn(usize) -> bool,
    ) -> Vec<usize> {
        let loads = vec![0; lb.weights.len()];
        (0..count)
            .map(|_| {
                lb.pick_eligible(&RouteContext::default(), Candidates::new(&loads, eligible))
                    .expect("something is eligible")
            })
            .collect()
    }

    #[test]
    fn weighted_three_to_one_repeats_0010() {
        let lb = WeightedRoundRobin::new(&[3, 1]);
        assert_eq!(sequence(&lb, 12, &|_| true), [0, 0, 1, 0].repeat(3));
    }

    #[test]
    fn weighted_five_one_one_matches_nginx_aabacaa() {
        let lb = WeightedRoundRobin::new(&[5, 1, 1]);
        let (a, b, c) = (0, 1, 2);
        assert_eq!(
            sequence(&lb, 14, &|_| true),
            [a, a, b, a, c, a, a].repeat(2)
        );
    }

    #[test]
    fn weighted_equal_weights_rotate_like_round_robin() {
        let lb = WeightedRoundRobin::new(&[2, 2, 2]);
        assert_eq!(sequence(&lb, 6, &|_| true), [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn weighted_picks_are_proportional_to_weights() {
        let weights = [7, 3, 1, 9];
        let lb = WeightedRoundRobin::new(&weights);
        let cycle: u32 = weights.iter().sum();
        let mut counts = [0u32; 4];
        for i in sequence(&lb, 10 * cycle as usize, &|_| true) {
            counts[i] += 1;
        }
        assert_eq!(counts, weights.map(|w| 10 * w));
    }

    #[test]
    fn weighted_keeps_exact_proportions_across_threads() {
        let lb = WeightedRoundRobin::new(&[3, 1]);
        let per_thread: Vec<Vec<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| sequence(&lb, 1_000, &|_| true)))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let mut counts = [0; 2];
        for i in per_thread.into_iter().flatten() {
            counts[i] += 1;
        }
        assert_eq!(counts, [3_000, 1_000]);
    }

    #[test]
    fn weighted_ineligible_target_sits_out_and_the_rest_keep_their_ratio() {
        let lb = WeightedRoundRobin::new(&[3, 5, 1]);
        let got = sequence(&lb, 8, &|i| i != 1);
        assert_eq!(got, [0, 0, 2, 0].repeat(2));
    }

    #[test]
    fn weighted_zero_weight_is_never_picked_beside_a_positive_weight() {
        let lb = WeightedRoundRobin::new(&[0, 2, 0, 1]);
        let got = sequence(&lb, 30, &|_| true);
        assert!(got.iter().all(|&i| i == 1 || i == 3), "{got:?}");
        assert_eq!(got.iter().filter(|&&i| i == 1).count(), 20);
    }

    #[test]
    fn weighted_all_zero_eligible_falls_back_to_the_first_eligible() {
        let lb = WeightedRoundRobin::new(&[5, 0, 0]);
        assert_eq!(sequence(&lb, 3, &|i| i != 0), [1, 1, 1]);
        let all_zero = WeightedRoundRobin::new(&[0, 0, 0]);
        assert_eq!(sequence(&all_zero, 2, &|_| true), [0, 0]);
    }

    #[test]
    fn weighted_reaches_indices_past_64() {
        let mut weights = vec![1; 130];
        weights[129] = 1_000;
        let lb = WeightedRoundRobin::new(&weights);
        let got = sequence(&lb, 10, &|i| i >= 64);
        assert!(got.iter().all(|&i| i >= 64), "{got:?}");
        assert_eq!(got[0], 129);
    }

    #[test]
    fn weighted_with_no_targets_or_nothing_eligible_picks_nothing() {
        let ctx = RouteContext::default();
        assert_eq!(WeightedRoundRobin::new(&[]).pick(&ctx, &[]), None);
        let lb = WeightedRoundRobin::new(&[1, 2]);
        assert_eq!(
            lb.pick_eligible(&ctx, Candidates::new(&[0, 0], &|_| false)),
            None
        );
    }

    #[test]
    fn weighted_running_weights_stay_bounded_under_changing_eligibility() {
        // Eligibility flips every pick in a pattern unrelated to the weights;
        // the running weights must not drift.
        let weights = [u32::MAX, 1, 7, u32::MAX / 3, 0, 12];
        let lb = WeightedRoundRobin::new(&weights);
        let total: i64 = weights.iter().map(|&w| i64::from(w)).sum();
        let mut mask: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..100_000 {
            mask = mask.rotate_left(7) ^ (mask >> 3);
            let eligible = |i: usize| mask >> (i * 5) & 1 == 1;
            let _ = lb.pick_eligible(
                &RouteContext::default(),
                Candidates::new(&[0; 6], &eligible),
            );
            let current = lb.current.lock().unwrap();
            for &c in current.iter() {
                assert!(c.abs() <= total * weights.len() as i64, "{current:?}");
            }
        }
    }
}
