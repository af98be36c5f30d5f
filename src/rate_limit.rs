//! Per-key rate limits: requests per minute (`rpm`), tokens per minute
//! (`tpm`) and requests in flight (`max_concurrent`) of each `[[api_keys]]`
//! entry.
//!
//! **Per node.** The counters live in this process. In a fleet of gateways a
//! key may make `rpm` requests a minute and hold `max_concurrent` requests on
//! *each* node; divide by the node count (or pin a key's traffic to one node)
//! for a fleet-wide budget. Nothing is shared between nodes or kept across a
//! restart. Anonymous callers (`require_api_key = false`) are not limited.
//!
//! **Requests per minute: a sliding-window estimate.** Each key counts the
//! requests it was admitted in the current minute and in the one before. A
//! request is admitted while
//!
//! ```text
//! previous × (1 − elapsed / 60 s) + current  <  rpm
//! ```
//!
//! i.e. while the requests of the last 60 seconds, the previous minute's
//! assumed spread evenly over it, stay under the limit. This is the two-bucket
//! estimator Cloudflare describes for its rate limiting ("How we built rate
//! limiting capable of scaling to millions of domains", 2017) and that
//! `pingora-limits`' `Rate` provides: a burst of `rpm` requests is admitted
//! at once (what a caller reading "requests per minute" expects, unlike
//! nginx's `limit_req` without `burst`, which spaces them 60/rpm seconds
//! apart), and after it the key gets `rpm` requests a minute, never a second
//! burst at the boundary of a fixed window. `pingora-limits` itself is not
//! used: its `Rate` counts in a count-min sketch (keys may collide, and one
//! key's traffic may then throttle another), resets fixed windows on its own
//! `Instant::now()` (no clock to inject, so no deterministic tests), and
//! cannot say *when* a request would be admitted, which `Retry-After` needs.
//! Here the state is exact, one small record per key name, and the time
//! until the estimate drops under the limit is solved in closed form.
//! A key's window starts at its first request after a quiet period, so
//! windows of different keys are not aligned.
//!
//! **Tokens per minute: the same window, charged afterwards.** A request's
//! tokens (prompt and completion, from the engine's `usage`) are known only
//! when its answer ends, so `tpm` is checked before dispatch — a key whose
//! estimate of the last 60 seconds has reached `tpm` is refused, with the
//! `Retry-After` at which it drops under it — and charged when the usage
//! arrives ([`KeyLimits::charge_tokens`]). One request may overshoot the
//! budget (OpenAI's limits behave alike); the key then waits the overshoot
//! off. An answer without `usage` charges nothing.
//!
//! **Requests in flight: a counted slot.** An admitted request holds a
//! [`ConcurrencySlot`] in its context for its whole life, streamed response
//! included; the slot is given back when the context is dropped (the response
//! ended, failed, or the client went away). Nothing has to remember to
//! decrement.
//!
//! A request is checked after authentication and before its body is read, so
//! a limited caller costs no body read. It counts against `rpm` once
//! admitted, whatever happens to it later (a 400 or an engine error counts,
//! as it does at OpenAI); a refused request counts against nothing.
//!
//! **Reloads.** Counters are keyed by the key's *name* in [`RateLimits`],
//! shared by every snapshot; each snapshot's [`KeyLimits`] pairs them with
//! that configuration's limits. A reload that changes `rpm` or
//! `max_concurrent` applies the new limits to the same counters (requests
//! already admitted still count); a key removed from the configuration
//! drops its counters; one that is renamed starts afresh. Requests are
//! counted even for a key without limits, so limits added by a reload see
//! the real recent traffic.

mod shared;

pub use shared::{SharedAdmission, SharedLimitsService, SharedStore};

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

/// The window of `rpm`, in milliseconds.
pub const WINDOW_MS: u64 = 60_000;

/// `Retry-After` of a request refused for `max_concurrent`, in seconds: no
/// time is known at which a slot frees, so the client is told to try soon.
pub const CONCURRENCY_RETRY_AFTER_SECS: u64 = 1;

/// The counters of every configured key, by name; outlives snapshots.
#[derive(Debug, Default)]
pub struct RateLimits {
    // Locked only while a snapshot is built (once per reload); the request
    // path holds each key's `Arc<KeyCounters>` and never takes this lock.
    keys: Mutex<HashMap<String, Arc<KeyCounters>>>,
    /// The fleet's counters in Redis, when `[rate_limits]` names one.
    pub shared: Arc<SharedStore>,
}

impl RateLimits {
    /// The counters of the key named `name`, created on first use.
    pub fn counters(&self, name: &str) -> Arc<KeyCounters> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(keys.entry(name.to_string()).or_default())
    }

    /// Drops the counters of keys that are no longer configured (requests
    /// in flight keep theirs until they end).
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.retain(|name, _| keep(name));
    }
}

/// What one key has used: its sliding windows and its requests in flight.
#[derive(Debug, Default)]
pub struct KeyCounters {
    // Held for a handful of integer operations, never across an await; only
    // requests of the same key contend for it.
    windows: Mutex<Windows>,
    in_flight: AtomicU32,
}

/// The requests and the tokens a key was admitted and charged.
#[derive(Debug, Default, Clone, Copy)]
struct Windows {
    requests: Window,
    tokens: Window,
}

impl KeyCounters {
    /// Requests of this key in flight now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }
}

/// The two buckets of the sliding window.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    /// Start of the current minute, on the caller's clock (ms).
    start_ms: u64,
    /// Requests admitted (tokens charged) in the minute before the current one.
    previous: u64,
    /// Requests admitted (tokens charged) in the current minute.
    current: u64,
}

impl Window {
    /// Moves the window to the minute holding `now_ms`.
    fn roll(&mut self, now_ms: u64) {
        let elapsed = now_ms.saturating_sub(self.start_ms);
        if elapsed >= WINDOW_MS {
            let minutes = elapsed / WINDOW_MS;
            self.start_ms += minutes * WINDOW_MS;
            self.previous = if minutes == 1 { self.current } else { 0 };
            self.current = 0;
        }
        if self.previous == 0 && self.current == 0 {
            // Nothing to weigh: the next minute may as well start now.
            self.start_ms = now_ms;
        }
    }

    /// Whether the estimate at `now_ms` (already rolled to) is under
    /// `limit`. Scaled by the window length to stay in integers:
    /// `previous × (W − elapsed) + current × W < limit × W`.
    fn admits(&self, now_ms: u64, limit: u64) -> bool {
        let elapsed = now_ms - self.start_ms;
        debug_assert!(elapsed < WINDOW_MS, "roll() keeps now in the window");
        let weighted = u128::from(self.previous) * u128::from(WINDOW_MS - elapsed)
            + u128::from(self.current) * u128::from(WINDOW_MS);
        weighted < u128::from(limit) * u128::from(WINDOW_MS)
    }

    /// Milliseconds from `now_ms` until [`Self::admits`] holds again, if
    /// nothing else is counted meanwhile. Call only when it does not hold.
    fn wait_ms(&self, now_ms: u64, limit: u64) -> u64 {
        let elapsed = now_ms - self.start_ms;
        let rpm = u128::from(limit);
        let (previous, current) = (u128::from(self.previous), u128::from(self.current));
        let window = u128::from(WINDOW_MS);
        // Still in this minute: `previous × (W − e) < (rpm − current) × W`
        // holds from `e = W + 1 − ceil((rpm − current) × W / previous)` on.
        if current < rpm && previous > 0 {
            let from = (window + 1).saturating_sub(((rpm - current) * window).div_ceil(previous));
            if from < window {
                return (from as u64).saturating_sub(elapsed);
            }
        }
        // In the next minute this one's count is the weighed one:
        // `current × (W − e) < rpm × W`.
        let from = if current == 0 {
            0
        } else {
            (window + 1).saturating_sub((rpm * window).div_ceil(current))
        };
        if from < window {
            WINDOW_MS - elapsed + from as u64
        } else {
            // Only a minute with neither bucket filled admits it.
            2 * WINDOW_MS - elapsed
        }
    }
}

/// Why a request was refused; its label is the `limit` of
/// `rolter_rate_limited_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    /// Over `rpm`; a request would be admitted in `retry_after_secs`.
    Rpm { limit: u32, retry_after_secs: u64 },
    /// Over `tpm`; a request would be admitted in `retry_after_secs`.
    Tpm { limit: u64, retry_after_secs: u64 },
    /// `max_concurrent` requests are in flight.
    Concurrency { limit: u32 },
}

impl Limited {
    /// The metric label: `rpm`, `tpm` or `concurrency`.
    pub fn label(self) -> &'static str {
        match self {
            Limited::Rpm { .. } => "rpm",
            Limited::Tpm { .. } => "tpm",
            Limited::Concurrency { .. } => "concurrency",
        }
    }

    /// Seconds to send in `Retry-After`.
    pub fn retry_after_secs(self) -> u64 {
        match self {
            Limited::Rpm {
                retry_after_secs, ..
            }
            | Limited::Tpm {
                retry_after_secs, ..
            } => retry_after_secs,
            Limited::Concurrency { .. } => CONCURRENCY_RETRY_AFTER_SECS,
        }
    }
}

/// A key's limits as configured; 0 is unlimited.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Quota {
    /// Requests per minute.
    pub rpm: u32,
    /// Tokens (prompt and completion) per minute.
    pub tpm: u64,
    /// Requests in flight.
    pub max_concurrent: u32,
}

/// One key's limits in one snapshot, over the key's shared counters.
#[derive(Debug)]
pub struct KeyLimits {
    quota: Quota,
    counters: Arc<KeyCounters>,
}

impl KeyLimits {
    pub fn new(quota: Quota, counters: Arc<KeyCounters>) -> Self {
        Self { quota, counters }
    }

    pub fn quota(&self) -> Quota {
        self.quota
    }

    /// Counts a request that shared counters admitted, without checking
    /// the local limits: they are kept warm for when Redis goes away.
    pub fn count_admitted(&self, now_ms: u64, remote: shared::RemoteSlot) -> ConcurrencySlot {
        let mut windows = self.lock();
        windows.requests.roll(now_ms);
        windows.requests.current = windows.requests.current.saturating_add(1);
        self.counters.in_flight.fetch_add(1, Ordering::AcqRel);
        ConcurrencySlot {
            counters: Arc::clone(&self.counters),
            _remote: Some(remote),
        }
    }

    /// Admits a request at `now_ms` (a monotonic clock, `clock::now_ms` in
    /// the gateway): counts it and hands out its in-flight slot, or says
    /// which limit refuses it. A refused request is not counted.
    pub fn admit(&self, now_ms: u64) -> Result<ConcurrencySlot, Limited> {
        let Quota {
            rpm,
            tpm,
            max_concurrent,
        } = self.quota;
        let mut windows = self.lock();
        windows.requests.roll(now_ms);
        if rpm > 0 && !windows.requests.admits(now_ms, u64::from(rpm)) {
            let wait_ms = windows.requests.wait_ms(now_ms, u64::from(rpm));
            return Err(Limited::Rpm {
                limit: rpm,
                retry_after_secs: wait_ms.div_ceil(1000).max(1),
            });
        }
        if tpm > 0 {
            windows.tokens.roll(now_ms);
            if !windows.tokens.admits(now_ms, tpm) {
                let wait_ms = windows.tokens.wait_ms(now_ms, tpm);
                return Err(Limited::Tpm {
                    limit: tpm,
                    retry_after_secs: wait_ms.div_ceil(1000).max(1),
                });
            }
        }
        // The slot is taken under the window lock so that a request refused
        // for concurrency is not counted against rpm (and vice versa).
        let slot = self.enter().ok_or(Limited::Concurrency {
            limit: max_concurrent,
        })?;
        windows.requests.current = windows.requests.current.saturating_add(1);
        Ok(slot)
    }

    /// Charges `tokens` (a finished request's prompt and completion tokens)
    /// at `now_ms`. Charged whether or not the key has a `tpm`, so a limit
    /// added by a reload sees the real recent traffic.
    pub fn charge_tokens(&self, now_ms: u64, tokens: u64) {
        if tokens == 0 {
            return;
        }
        let mut windows = self.lock();
        windows.tokens.roll(now_ms);
        windows.tokens.current = windows.tokens.current.saturating_add(tokens);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Windows> {
        self.counters
            .windows
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Takes an in-flight slot unless `max_concurrent` are taken.
    fn enter(&self) -> Option<ConcurrencySlot> {
        let limit = self.quota.max_concurrent;
        self.counters
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (limit == 0 || n < limit).then(|| n.saturating_add(1))
            })
            .ok()?;
        Some(ConcurrencySlot {
            counters: Arc::clone(&self.counters),
            _remote: None,
        })
    }
}

/// One request of a key in flight; given back when dropped (with the
/// request's context), here and, when Redis admitted it, there.
#[derive(Debug)]
pub struct ConcurrencySlot {
    counters: Arc<KeyCounters>,
    _remote: Option<shared::RemoteSlot>,
}

impl Drop for ConcurrencySlot {
    fn drop(&mut self) {
        let before = self.counters.in_flight.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "a slot is only handed out after an increment");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rpm: u32, max_concurrent: u32) -> KeyLimits {
        KeyLimits::new(quota(rpm, max_concurrent), Arc::default())
    }

    fn quota(rpm: u32, max_concurrent: u32) -> Quota {
        Quota {
            rpm,
            tpm: 0,
            max_concurrent,
        }
    }

    /// Admits `n` requests at `at_ms`, keeping their slots alive.
    fn admit_n(key: &KeyLimits, n: u32, at_ms: u64) -> Vec<ConcurrencySlot> {
        (0..n)
            .map(|i| {
                key.admit(at_ms)
                    .unwrap_or_else(|e| panic!("request {i} at {at_ms} refused: {e:?}"))
            })
            .collect()
    }

    #[test]
    fn a_burst_of_rpm_is_admitted_and_the_next_request_waits_for_the_window() {
        let key = limits(3, 0);
        admit_n(&key, 3, 1_000);
        // The window started at 1 000; the burst weighs fully until 61 000.
        assert_eq!(
            key.admit(1_500).unwrap_err(),
            Limited::Rpm {
                limit: 3,
                retry_after_secs: 60
            }
        );
    }

    #[test]
    fn after_a_burst_the_key_gets_rpm_requests_a_minute() {
        let key = limits(3, 0);
        admit_n(&key, 3, 0);
        // At the turn of the minute the burst still weighs almost fully;
        // then one request every 20 s (60 s / 3) fits under the estimate.
        assert!(key.admit(59_999).is_err());
        admit_n(&key, 1, 60_001);
        assert!(key.admit(80_000).is_err());
        admit_n(&key, 1, 80_001);
        assert!(key.admit(100_000).is_err());
        admit_n(&key, 1, 100_001);
        // Three in the second minute: full again until the third one's turn.
        assert!(key.admit(119_999).is_err());
    }

    #[test]
    fn retry_after_is_exactly_when_a_request_would_be_admitted() {
        // For many histories: refused one millisecond before the wait ends,
        // admitted when it ends.
        for rpm in [1u32, 2, 3, 7, 60, 1000] {
            for burst in [1u32, rpm / 2 + 1, rpm] {
                for (first, later) in [(0u64, 10u64), (0, 30_000), (5_000, 59_999), (0, 65_000)] {
                    let key = limits(rpm, 0);
                    admit_n(&key, burst.min(rpm), first);
                    // Fill what is left, later in the window or the next.
                    while key.admit(later).is_ok() {}
                    let window = key.lock().requests;
                    let wait = window.wait_ms(later, u64::from(rpm));
                    assert!(wait > 0, "rpm {rpm} burst {burst} at {later}");
                    let probe = |at: u64| {
                        let mut w = window;
                        w.roll(at);
                        w.admits(at, u64::from(rpm))
                    };
                    assert!(
                        !probe(later + wait - 1),
                        "rpm {rpm} burst {burst}: admitted before the wait of {wait} ms"
                    );
                    assert!(
                        probe(later + wait),
                        "rpm {rpm} burst {burst}: refused after the wait of {wait} ms"
                    );
                }
            }
        }
    }

    #[test]
    fn one_request_per_minute_is_one_per_sliding_minute() {
        let key = limits(1, 0);
        admit_n(&key, 1, 0);
        let Err(Limited::Rpm {
            retry_after_secs, ..
        }) = key.admit(10_000)
        else {
            panic!("second request within the minute admitted");
        };
        // Admitted from 60 001 ms on: 50 001 ms, rounded up.
        assert_eq!(retry_after_secs, 51);
        assert!(key.admit(60_000).is_err());
        admit_n(&key, 1, 60_001);
    }

    #[test]
    fn a_quiet_key_starts_a_fresh_window_at_its_next_request() {
        let key = limits(2, 0);
        admit_n(&key, 2, 0);
        // Two minutes of silence: both buckets are empty again.
        admit_n(&key, 2, 200_000);
        assert!(key.admit(200_001).is_err());
        // The window started at 200 000, not at a multiple of a minute.
        assert!(key.admit(259_999).is_err());
    }

    #[test]
    fn refused_requests_count_against_nothing() {
        let key = limits(2, 1);
        let held = admit_n(&key, 1, 0);
        assert_eq!(key.admit(1).unwrap_err(), Limited::Concurrency { limit: 1 });
        drop(held);
        // The refused request did not use the second request of the minute.
        admit_n(&key, 1, 2);
        assert!(matches!(key.admit(3), Err(Limited::Rpm { .. })));
        assert_eq!(key.counters.in_flight(), 0);
    }

    #[test]
    fn the_concurrency_slot_is_held_until_dropped() {
        let key = limits(0, 2);
        let first = key.admit(0).unwrap();
        let second = key.admit(0).unwrap();
        assert_eq!(key.admit(0).unwrap_err(), Limited::Concurrency { limit: 2 });
        assert_eq!(key.admit(0).unwrap_err().retry_after_secs(), 1);
        drop(first);
        let third = key.admit(0).unwrap();
        assert_eq!(key.counters.in_flight(), 2);
        drop((second, third));
        assert_eq!(key.counters.in_flight(), 0);
    }

    #[test]
    fn new_limits_apply_to_the_same_counters() {
        let registry = RateLimits::default();
        let before = KeyLimits::new(quota(3, 1), registry.counters("team"));
        for at in 0..3 {
            before.admit(at).unwrap();
        }
        assert!(matches!(
            before.admit(3),
            Err(Limited::Rpm { limit: 3, .. })
        ));
        // A reload raises the limits: the three requests still count.
        let after = KeyLimits::new(quota(5, 1), registry.counters("team"));
        let held = admit_n(&after, 1, 3);
        assert_eq!(
            after.admit(4).unwrap_err(),
            Limited::Concurrency { limit: 1 }
        );
        drop(held);
        admit_n(&after, 1, 5);
        assert!(matches!(after.admit(6), Err(Limited::Rpm { limit: 5, .. })));
        // Another key has its own counters.
        admit_n(
            &KeyLimits::new(quota(5, 1), registry.counters("other")),
            1,
            6,
        );
    }

    #[test]
    fn limits_of_zero_are_unlimited_but_still_count() {
        let key = limits(0, 0);
        let held = admit_n(&key, 500, 0);
        assert_eq!(key.counters.in_flight(), 500);
        drop(held);
        // A reload that adds a limit sees the 500 requests of this minute.
        let limited = KeyLimits::new(quota(100, 0), Arc::clone(&key.counters));
        assert!(limited.admit(1).is_err());
    }

    #[test]
    fn removed_keys_drop_their_counters() {
        let registry = RateLimits::default();
        let kept = registry.counters("kept");
        let gone = registry.counters("gone");
        registry.retain(|name| name == "kept");
        assert!(Arc::ptr_eq(&kept, &registry.counters("kept")));
        assert!(!Arc::ptr_eq(&gone, &registry.counters("gone")));
    }

    fn tpm(tpm: u64) -> KeyLimits {
        KeyLimits::new(
            Quota {
                tpm,
                ..Quota::default()
            },
            Arc::default(),
        )
    }

    #[test]
    fn tpm_refuses_once_the_charged_tokens_fill_the_window() {
        let key = tpm(1_000);
        // Admitted while the window has room, however large the request
        // turns out to be: its tokens are charged when its usage arrives.
        admit_n(&key, 1, 0);
        key.charge_tokens(500, 600);
        admit_n(&key, 1, 1_000);
        key.charge_tokens(1_500, 400);
        let Err(Limited::Tpm {
            limit: 1_000,
            retry_after_secs,
        }) = key.admit(2_000)
        else {
            panic!("admitted with 1000 of 1000 tokens used");
        };
        // The token window started at the first charge (500 ms); its full
        // minute weighs until 60.5 s.
        assert_eq!(retry_after_secs, 59);
        assert!(key.admit(60_500).is_err());
        admit_n(&key, 1, 60_501);
    }

    #[test]
    fn an_overshoot_is_waited_off_in_proportion() {
        let key = tpm(1_000);
        admit_n(&key, 1, 0);
        // One answer used four minutes' worth.
        key.charge_tokens(10, 4_000);
        let Err(Limited::Tpm {
            retry_after_secs, ..
        }) = key.admit(20)
        else {
            panic!("admitted over the budget");
        };
        // The window started at the charge (10 ms); in the next minute
        // 4000 × (1 − e/60 s) < 1000 from e = 45.001 s on: at 105.011 s.
        assert_eq!(retry_after_secs, 105);
        assert!(key.admit(105_010).is_err());
        admit_n(&key, 1, 105_011);
    }

    #[test]
    fn tokens_are_charged_without_a_tpm_and_refusals_cost_none() {
        let counters = Arc::new(KeyCounters::default());
        let unlimited = KeyLimits::new(Quota::default(), Arc::clone(&counters));
        admit_n(&unlimited, 1, 0);
        unlimited.charge_tokens(1, 5_000);
        // A reload adds tpm = 5000: the tokens already used count.
        let limited = KeyLimits::new(
            Quota {
                tpm: 5_000,
                rpm: 10,
                ..Quota::default()
            },
            counters,
        );
        assert!(matches!(limited.admit(2), Err(Limited::Tpm { .. })));
        // The refusal was not counted against rpm.
        assert_eq!(limited.lock().requests.current, 1);
        assert_eq!(
            Limited::Tpm {
                limit: 1,
                retry_after_secs: 3
            }
            .label(),
            "tpm"
        );
    }
}
