//! Session affinity: a repeat request of the same `x-session-id` prefers the
//! target that last served that session, for warm-cache reuse.
//!
//! Learning happens in `observe`: the session is pinned to the target that
//! served it, replacing any earlier pin. A pin lives for the TTL after the
//! session was last served ([`SessionAffinityScorer::DEFAULT_TTL_MS`], 300 s
//! per docs/design/defaults.md), measured on the gateway's monotonic clock passed as
//! `ctx.now_ms`; an engine evicts an idle conversation's KV long before a
//! stale pin would be worth honouring.
//!
//! The pinned target scores 1 and every other eligible target 0. There is
//! nothing to say — every target scores 0, neutral — for a request without a
//! session, an unknown or expired session, or a session pinned to a target
//! that is not eligible now (parked, tried, unhealthy): the rest of the stack
//! then decides, and the target that serves the request takes over the pin.
//!
//! Memory is bounded: sessions are stored as the xxh3 hash of the key (no
//! allocation per request), at most `capacity` of them
//! ([`SessionAffinityScorer::DEFAULT_CAPACITY`] by default), and the least
//! recently served one is forgotten first. Expired pins are dropped as
//! `observe` meets them at the old end of the recency queue.

use std::collections::VecDeque;
use std::sync::{Mutex, PoisonError};

use crate::hashing::{key_hash, PrehashedMap};
use crate::{Candidates, RouteContext, Scorer};

/// Pins sessions to their last-served target; see the module documentation.
#[derive(Debug)]
pub struct SessionAffinityScorer {
    ttl_ms: u64,
    capacity: usize,
    // Mutex: scoring does one map lookup under it, observing one insert and
    // an amortized O(1) trim; no I/O, no callbacks, and every state a panic
    // could leave is a valid (if untidy) pin set, so poisoning is ignored.
    pins: Mutex<SessionPins>,
}

#[derive(Debug, Default)]
struct SessionPins {
    by_session: PrehashedMap<Pin>,
    /// `(session, stamp)` in the order sessions were served. An entry whose
    /// stamp no longer matches its session's pin is stale (the session was
    /// served again since) and is skipped; stale entries are compacted away
    /// once they outnumber the live ones.
    order: VecDeque<(u64, u64)>,
    next_stamp: u64,
    evictions: u64,
}

#[derive(Clone, Copy, Debug)]
struct Pin {
    target: usize,
    served_ms: u64,
    stamp: u64,
}

impl SessionAffinityScorer {
    /// How long a pin outlives the session's last served request: 300 s
    /// (docs/design/defaults.md).
    pub const DEFAULT_TTL_MS: u64 = 300_000;

    /// Sessions remembered at once. At roughly 50 bytes per session this
    /// bounds the map at a few MiB per balancer.
    pub const DEFAULT_CAPACITY: usize = 100_000;

    /// Pins living `ttl_ms` after their session was last served, at most
    /// `capacity` of them (0 remembers nothing).
    pub fn new(ttl_ms: u64, capacity: usize) -> Self {
        Self {
            ttl_ms,
            capacity,
            pins: Mutex::new(SessionPins::default()),
        }
    }

    /// Sessions currently remembered, expired or not.
    pub fn len(&self) -> usize {
        self.lock().by_session.len()
    }

    /// Whether no session is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sessions forgotten to respect the capacity since the scorer was built
    /// (expiry is not counted).
    pub fn evictions(&self) -> u64 {
        self.lock().evictions
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SessionPins> {
        self.pins.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn expired(&self, pin: &Pin, now_ms: u64) -> bool {
        now_ms.saturating_sub(pin.served_ms) > self.ttl_ms
    }

    /// The live pin of the request's session, if any.
    fn pinned(&self, ctx: &RouteContext) -> Option<usize> {
        let session = key_hash(ctx.session_key?);
        let pins = self.lock();
        let pin = pins.by_session.get(&session)?;
        (!self.expired(pin, ctx.now_ms)).then_some(pin.target)
    }
}

impl Default for SessionAffinityScorer {
    /// The pipeline's defaults: [`Self::DEFAULT_TTL_MS`],
    /// [`Self::DEFAULT_CAPACITY`].
    fn default() -> Self {
        Self::new(Self::DEFAULT_TTL_MS, Self::DEFAULT_CAPACITY)
    }
}

impl Scorer for SessionAffinityScorer {
    fn name(&self) -> &'static str {
        "session"
    }

    fn score(&self, ctx: &RouteContext, targets: Candidates<'_>, scores: &mut [f64]) {
        scores.fill(0.0);
        if let Some(target) = self.pinned(ctx) {
            if target < scores.len() && targets.eligible(target) {
                scores[target] = 1.0;
            }
        }
    }

    fn observe(&self, target: usize, ctx: &RouteContext) {
        let Some(key) = ctx.session_key else {
            return;
        };
        if self.capacity == 0 {
            return;
        }
        let session = key_hash(key);
        let now = ctx.now_ms;
        let mut pins = self.lock();
        let pins = &mut *pins;
        let stamp = pins.next_stamp;
        pins.next_stamp += 1;
        pins.by_session.insert(
            session,
            Pin {
                target,
                served_ms: now,
                stamp,
            },
        );
        pins.order.push_back((session, stamp));

        // Forget from the old end: expired pins always, live ones while over
        // capacity. Stale queue entries are skipped on the way.
        while let Some(&(oldest, oldest_stamp)) = pins.order.front() {
            let live = pins
                .by_session
                .get(&oldest)
                .filter(|pin| pin.stamp == oldest_stamp)
                .copied();
            match live {
                None => {
                    pins.order.pop_front();
                }
                Some(pin) if self.expired(&pin, now) => {
                    pins.order.pop_front();
                    pins.by_session.remove(&oldest);
                }
                Some(_) if pins.by_session.len() > self.capacity => {
                    pins.order.pop_front();
                    pins.by_session.remove(&oldest);
                    pins.evictions += 1;
                }
                Some(_) => break,
            }
        }
        // Each live session has exactly one live queue entry; compact when
        // stale entries (sessions served again) make up most of the queue.
        if pins.order.len() > 2 * pins.by_session.len() + 64 {
            let by_session = &pins.by_session;
            pins.order.retain(|(session, stamp)| {
                by_session
                    .get(session)
                    .is_some_and(|pin| pin.stamp == *stamp)
            });
        }
        debug_assert!(pins.by_session.len() <= self.capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scorers::testing::{is_neutral, scores};

    fn ctx(session: Option<&str>, now_ms: u64) -> RouteContext<'_> {
        RouteContext {
            session_key: session,
            now_ms,
            ..RouteContext::default()
        }
    }

    #[test]
    fn a_served_session_scores_its_target_one_and_the_others_zero() {
        let scorer = SessionAffinityScorer::default();
        scorer.observe(2, &ctx(Some("s1"), 1_000));
        let got = scores(&scorer, &ctx(Some("s1"), 2_000), &[0; 4], &|_| true);
        assert_eq!(got, [0.0, 0.0, 1.0, 0.0]);
    }

    #[test]
    fn no_session_or_an_unknown_one_is_neutral() {
        let scorer = SessionAffinityScorer::default();
        scorer.observe(1, &ctx(Some("s1"), 0));
        assert!(is_neutral(&scores(
            &scorer,
            &ctx(None, 0),
            &[0; 3],
            &|_| true
        )));
        let got = scores(&scorer, &ctx(Some("s2"), 0), &[0; 3], &|_| true);
        assert!(is_neutral(&got));
    }

    #[test]
    fn a_pin_to_an_ineligible_target_is_neutral() {
        let scorer = SessionAffinityScorer::default();
        scorer.observe(1, &ctx(Some("s1"), 0));
        let got = scores(&scorer, &ctx(Some("s1"), 0), &[0; 3], &|i| i != 1);
        assert!(is_neutral(&got));
    }

    #[test]
    fn the_last_served_target_takes_over_the_pin() {
        let scorer = SessionAffinityScorer::default();
        scorer.observe(1, &ctx(Some("s1"), 0));
        scorer.observe(0, &ctx(Some("s1"), 10));
        let got = scores(&scorer, &ctx(Some("s1"), 20), &[0; 3], &|_| true);
        assert_eq!(got, [1.0, 0.0, 0.0]);
        assert_eq!(scorer.len(), 1);
    }

    #[test]
    fn session_pin_expires_after_its_ttl_since_last_served() {
        let scorer = SessionAffinityScorer::new(300_000, 16);
        scorer.observe(1, &ctx(Some("s1"), 1_000));
        let pinned = [0.0, 1.0];
        assert_eq!(
            scores(&scorer, &ctx(Some("s1"), 301_000), &[0; 2], &|_| true),
            pinned
        );
        let got = scores(&scorer, &ctx(Some("s1"), 301_001), &[0; 2], &|_| true);
        assert!(is_neutral(&got));
        // Serving the session again renews the pin from that moment.
        scorer.observe(1, &ctx(Some("s1"), 400_000));
        assert_eq!(
            scores(&scorer, &ctx(Some("s1"), 700_000), &[0; 2], &|_| true),
            pinned
        );
    }

    #[test]
    fn expired_pins_are_dropped_as_new_sessions_arrive() {
        let scorer = SessionAffinityScorer::new(1_000, 16);
        for i in 0..5 {
            scorer.observe(0, &ctx(Some(&format!("old-{i}")), 0));
        }
        scorer.observe(0, &ctx(Some("new"), 5_000));
        assert_eq!(scorer.len(), 1);
        assert_eq!(scorer.evictions(), 0);
    }

    #[test]
    fn session_pins_are_bounded_and_the_least_recently_served_is_evicted() {
        let scorer = SessionAffinityScorer::new(u64::MAX, 3);
        scorer.observe(0, &ctx(Some("a"), 0));
        scorer.observe(1, &ctx(Some("b"), 1));
        scorer.observe(2, &ctx(Some("c"), 2));
        // Serving "a" again makes "b" the least recently served.
        scorer.observe(0, &ctx(Some("a"), 3));
        scorer.observe(3, &ctx(Some("d"), 4));
        assert_eq!(scorer.len(), 3);
        assert_eq!(scorer.evictions(), 1);
        let b = scores(&scorer, &ctx(Some("b"), 5), &[0; 4], &|_| true);
        assert!(is_neutral(&b), "b was evicted: {b:?}");
        for (session, target) in [("a", 0), ("c", 2), ("d", 3)] {
            let got = scores(&scorer, &ctx(Some(session), 5), &[0; 4], &|_| true);
            assert_eq!(got[target], 1.0, "{session}");
        }
    }

    #[test]
    fn session_pins_stay_bounded_under_many_sessions_and_repeats() {
        let scorer = SessionAffinityScorer::new(u64::MAX, 100);
        for i in 0..10_000u64 {
            // Every third request repeats a recent session.
            let key = if i % 3 == 0 { i / 2 } else { i };
            scorer.observe((i % 7) as usize, &ctx(Some(&key.to_string()), i));
            assert!(scorer.len() <= 100);
        }
        let queued = scorer.lock().order.len();
        assert!(queued <= 2 * 100 + 64, "recency queue grew to {queued}");
    }

    #[test]
    fn zero_capacity_remembers_nothing() {
        let scorer = SessionAffinityScorer::new(1_000, 0);
        scorer.observe(1, &ctx(Some("s1"), 0));
        assert!(scorer.is_empty());
    }
}
