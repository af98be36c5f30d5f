//! A tiny lock-free, seedable random number generator for the random
//! strategies.
//!
//! SplitMix64 (Steele, Lea & Flood, "Fast Splittable Pseudorandom Number
//! Generators", OOPSLA 2014; constants from Vigna's reference `splitmix64.c`).
//! Its state is a Weyl sequence — a counter advanced by a fixed odd gamma — and
//! the output is that state passed through a bijective mixer. Advancing the
//! state is therefore a single `fetch_add`: threads share one generator
//! without a lock, and concurrent callers each receive a distinct state, so no
//! draw is lost or duplicated.
//!
//! It is not cryptographic and need not be: it only spreads load. Seeding it
//! explicitly (`from_seed`) is what makes the random strategies' tests
//! deterministic.

use std::sync::atomic::{AtomicU64, Ordering};

/// The Weyl increment: 2^64 divided by the golden ratio, rounded to odd, so
/// the state visits every `u64` before repeating.
const GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

#[derive(Debug)]
pub(crate) struct SplitMix64 {
    state: AtomicU64,
}

impl SplitMix64 {
    pub(crate) fn from_seed(seed: u64) -> Self {
        Self {
            state: AtomicU64::new(seed),
        }
    }

    pub(crate) fn next_u64(&self) -> u64 {
        // Relaxed is enough: the state is the only shared datum, the RMW is
        // atomic on it, and no other memory is published through it.
        let state = self
            .state
            .fetch_add(GAMMA, Ordering::Relaxed)
            .wrapping_add(GAMMA);
        mix64(state)
    }

    /// A draw in `0..bound`, by Lemire's multiply-shift ("Fast Random Integer
    /// Generation in an Interval", 2019) without the rejection step: its bias
    /// is below `bound / 2^64`, far under anything load balancing can notice.
    pub(crate) fn below(&self, bound: usize) -> usize {
        debug_assert!(bound > 0, "below(0) has no valid answer");
        ((u128::from(self.next_u64()) * bound as u128) >> 64) as usize
    }
}

/// SplitMix64's finalizer: a bijection on `u64` that spreads every input bit
/// over the whole output.
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_matches_the_reference_sequence() {
        // First outputs of Vigna's splitmix64.c seeded with 1234567.
        let rng = SplitMix64::from_seed(1_234_567);
        assert_eq!(rng.next_u64(), 6_457_827_717_110_365_317);
        assert_eq!(rng.next_u64(), 3_203_168_211_198_807_973);
        assert_eq!(rng.next_u64(), 9_817_491_932_198_370_423);
    }

    #[test]
    fn same_seed_gives_same_sequence() {
        let a = SplitMix64::from_seed(42);
        let b = SplitMix64::from_seed(42);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn below_stays_in_range() {
        let rng = SplitMix64::from_seed(7);
        for bound in [1, 2, 3, 63, 64, 65, 130, usize::MAX] {
            for _ in 0..1000 {
                assert!(rng.below(bound) < bound);
            }
        }
    }

    #[test]
    fn below_is_roughly_uniform() {
        let rng = SplitMix64::from_seed(99);
        let mut counts = [0u32; 10];
        for _ in 0..100_000 {
            counts[rng.below(10)] += 1;
        }
        for count in counts {
            assert!((9_000..11_000).contains(&count), "{counts:?}");
        }
    }
}
