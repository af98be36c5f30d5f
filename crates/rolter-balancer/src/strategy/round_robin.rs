//! round_robin: sequential rotation over the targets.
//!
//! The oldest scheduling policy there is: one shared counter, advanced once
//! per pick, taken modulo the target count. It is an atomic `fetch_add`, so
//! concurrent picks never collide on a slot and never take a lock.
//!
//! When the slot the counter lands on is ineligible, the pick scans forward
//! from there to the first eligible target. That keeps the rotation's position
//! untouched by holes (the next pick continues where the counter says), at the
//! cost that the target just past a hole takes the hole's share as well while
//! the hole lasts — acceptable for a short-lived exclusion such as a parked
//! target or an already-tried retry.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::{Candidates, LoadBalancer, RouteContext};

/// Sequential rotation; see the module documentation.
#[derive(Debug)]
pub struct RoundRobin {
    targets: usize,
    next: AtomicUsize,
}

impl RoundRobin {
    /// A rotation over `targets` targets, starting at index 0.
    pub fn new(targets: usize) -> Self {
        Self {
            targets,
            next: AtomicUsize::new(0),
        }
    }
}

impl LoadBalancer for RoundRobin {
    fn name(&self) -> &'static str {
        "round_robin"
    }

    fn pick_eligible(&self, _ctx: &RouteContext, targets: Candidates<'_>) -> Option<usize> {
        let n = self.targets;
        if n == 0 {
            return None;
        }
        // Relaxed: the counter orders nothing but itself. Wrapping past
        // usize::MAX only makes one rotation a little short.
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        (start..n).chain(0..start).find(|&i| targets.eligible(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn picks(
        lb: &RoundRobin,
        count: usize,
        eligible: &dyn Fn(usize) -> bool,
    ) -> Vec<Option<usize>> {
        let loads = vec![0; lb.targets];
        (0..count)
            .map(|_| lb.pick_eligible(&RouteContext::default(), Candidates::new(&loads, eligible)))
            .collect()
    }

    #[test]
    fn round_robin_rotates_through_every_target_in_order() {
        let lb = RoundRobin::new(3);
        let got: Vec<usize> = (0..7)
            .map(|_| lb.pick(&RouteContext::default(), &[0, 0, 0]).unwrap())
            .collect();
        assert_eq!(got, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn round_robin_ignores_load() {
        let lb = RoundRobin::new(2);
        let ctx = RouteContext::default();
        assert_eq!(lb.pick(&ctx, &[1_000, 0]), Some(0));
        assert_eq!(lb.pick(&ctx, &[1_000, 0]), Some(1));
        assert_eq!(lb.pick(&ctx, &[1_000, 0]), Some(0));
    }

    #[test]
    fn round_robin_skips_a_hole_to_the_next_eligible_target() {
        let lb = RoundRobin::new(4);
        let got = picks(&lb, 8, &|i| i != 1);
        let expect = [0, 2, 2, 3, 0, 2, 2, 3].map(Some);
        assert_eq!(got, expect);
    }

    #[test]
    fn round_robin_wraps_past_trailing_holes() {
        let lb = RoundRobin::new(4);
        let got = picks(&lb, 4, &|i| i == 0);
        assert_eq!(got, [Some(0); 4]);
    }

    #[test]
    fn round_robin_resumes_the_rotation_after_a_hole_closes() {
        let lb = RoundRobin::new(3);
        assert_eq!(picks(&lb, 2, &|i| i != 1), [Some(0), Some(2)]);
        assert_eq!(picks(&lb, 4, &|_| true), [2, 0, 1, 2].map(Some));
    }

    #[test]
    fn round_robin_shares_one_rotation_between_threads() {
        let lb = RoundRobin::new(4);
        let mut counts = [0; 4];
        let per_thread: Vec<Vec<usize>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..4)
                .map(|_| s.spawn(|| picks(&lb, 1_000, &|_| true).into_iter().flatten().collect()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for i in per_thread.into_iter().flatten() {
            counts[i] += 1;
        }
        assert_eq!(counts, [1_000; 4]);
    }

    #[test]
    fn round_robin_with_no_targets_picks_nothing() {
        let lb = RoundRobin::new(0);
        assert_eq!(lb.pick(&RouteContext::default(), &[]), None);
        assert_eq!(picks(&lb, 1, &|_| true), [None]);
    }

    #[test]
    fn round_robin_with_nothing_eligible_picks_nothing() {
        let lb = RoundRobin::new(65);
        assert_eq!(picks(&lb, 3, &|_| false), [None; 3]);
    }

    #[test]
    fn round_robin_reaches_indices_past_64() {
        let lb = RoundRobin::new(130);
        assert_eq!(picks(&lb, 1, &|i| i == 129), [Some(129)]);
        let all: Vec<usize> = picks(&lb, 130, &|_| true).into_iter().flatten().collect();
        let mut sorted = all.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (0..130).collect::<Vec<_>>());
    }
}
