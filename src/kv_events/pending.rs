//! Blocks the gateway expects an engine to hold soon: those of requests it
//! just sent there.
//!
//! An engine reports a request's blocks only once their prefill finished,
//! which for a long system prompt takes a while; a second request of the
//! same tenant arriving meanwhile would find nothing and be sent elsewhere
//! to prefill the same prompt again. So each routed request's blocks are
//! noted as *pending* on its target for [`PENDING_TTL_MS`], and the index
//! counts a pending block after the confirmed run at [`PENDING_WEIGHT`] of
//! a confirmed one: evidence, but weaker than the engine's own word. An
//! event that stores the block makes it confirmed; one that never comes
//! lets it expire.
//!
//! Bounded: at most [`MAX_PENDING`] blocks; the oldest go first.

use std::collections::{HashMap, VecDeque};

/// How long a routed request's blocks count as pending: long enough for a
/// long prefill and its event, short enough that a request the engine
/// dropped stops attracting others soon.
pub const PENDING_TTL_MS: u64 = 10_000;

/// A pending block scores this much of a confirmed one.
pub const PENDING_WEIGHT: f64 = 0.5;

/// Pending blocks kept per provider at most.
pub const MAX_PENDING: usize = 65_536;

#[derive(Debug, Default)]
pub(super) struct PendingBlocks {
    /// Block hash to its expiry (ms).
    expiry: HashMap<u64, u64>,
    /// Insertion order, for expiry and the bound; an entry whose expiry no
    /// longer matches the map was refreshed later and is skipped.
    order: VecDeque<(u64, u64)>,
}

impl PendingBlocks {
    /// Notes `hashes` as pending until `now_ms + PENDING_TTL_MS`.
    pub(super) fn note(&mut self, hashes: &[u64], now_ms: u64) {
        let until = now_ms.saturating_add(PENDING_TTL_MS);
        for &hash in hashes {
            self.expiry.insert(hash, until);
            self.order.push_back((hash, until));
        }
        self.expire(now_ms);
        while self.expiry.len() > MAX_PENDING {
            self.pop_oldest();
        }
        // Refreshes leave stale entries in `order`; keep it near the map.
        if self.order.len() > 2 * MAX_PENDING {
            let expiry = &self.expiry;
            self.order
                .retain(|(hash, until)| expiry.get(hash) == Some(until));
        }
    }

    /// How many of `hashes`, from the start, are pending at `now_ms`.
    pub(super) fn leading_run(&self, hashes: &[u64], now_ms: u64) -> usize {
        hashes
            .iter()
            .take_while(|hash| self.expiry.get(hash).is_some_and(|&until| until > now_ms))
            .count()
    }

    pub(super) fn len(&self) -> usize {
        self.expiry.len()
    }

    fn expire(&mut self, now_ms: u64) {
        while self
            .order
            .front()
            .is_some_and(|&(_, until)| until <= now_ms)
        {
            self.pop_oldest();
        }
    }

    fn pop_oldest(&mut self) {
        if let Some((hash, until)) = self.order.pop_front() {
            if self.expiry.get(&hash) == Some(&until) {
                self.expiry.remove(&hash);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_blocks_expire_and_stay_bounded() {
        let mut pending = PendingBlocks::default();
        pending.note(&[1, 2, 3], 0);
        assert_eq!(pending.leading_run(&[1, 2, 3, 4], 1), 3);
        assert_eq!(pending.leading_run(&[2, 1], 1), 2);
        assert_eq!(
            pending.leading_run(&[9, 1], 1),
            0,
            "a run starts at the first block"
        );
        assert_eq!(pending.leading_run(&[1], PENDING_TTL_MS), 0, "expired");
        // Noting again refreshes: the refreshed block outlives the others.
        pending.note(&[2], PENDING_TTL_MS - 1);
        pending.note(&[7], PENDING_TTL_MS + 1);
        assert_eq!(pending.leading_run(&[2], PENDING_TTL_MS + 1), 1);
        assert_eq!(pending.leading_run(&[1], PENDING_TTL_MS + 1), 0);
        let many: Vec<u64> = (100..100 + 2 * MAX_PENDING as u64).collect();
        pending.note(&many, PENDING_TTL_MS + 2);
        assert!(pending.len() <= MAX_PENDING);
        assert!(pending.order.len() <= 2 * MAX_PENDING + 1);
        assert_eq!(
            pending.leading_run(&many[many.len() - 3..], PENDING_TTL_MS + 2),
            3
        );
    }
}
