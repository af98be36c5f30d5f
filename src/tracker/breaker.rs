//! A circuit breaker per target.
//!
//! Closed: requests flow; `failure_threshold` consecutive failures open it.
//! Open: the target takes nothing for `open` (it is ineligible). Then
//! half-open: exactly one request is admitted as a probe — whoever wins the
//! compare-and-swap on `probe_in_flight` — and every other request keeps
//! treating the target as ineligible. The probe's success closes the breaker,
//! its failure re-opens it for another `open`; a probe that ends without a
//! verdict (the client went away) frees the slot for the next probe.
//!
//! Eligibility asks [`CircuitBreaker::admits`], which only reads; the pick is
//! then confirmed with [`CircuitBreaker::try_admit`], which claims the probe
//! slot, so a predicate evaluated many times per pick never claims anything.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

/// Breaker settings (`[breaker]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerPolicy {
    pub enabled: bool,
    pub failure_threshold: u32,
    pub open_ms: u64,
}

/// The breaker's state, as reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BreakerState {
    Closed,
    Open,
    HalfOpen,
}

impl BreakerState {
    pub fn as_str(self) -> &'static str {
        match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half_open",
        }
    }

    fn from_u8(value: u8) -> Self {
        match value {
            OPEN => BreakerState::Open,
            HALF_OPEN => BreakerState::HalfOpen,
            _ => BreakerState::Closed,
        }
    }
}

const CLOSED: u8 = 0;
const OPEN: u8 = 1;
const HALF_OPEN: u8 = 2;

/// How a confirmed pick was admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Normal,
    /// The one half-open probe: its outcome decides the breaker.
    Probe,
}

/// A state change, for metrics and logs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    pub to: BreakerState,
}

#[derive(Debug, Default)]
pub struct CircuitBreaker {
    state: AtomicU8,
    consecutive_failures: AtomicU32,
    opened_at_ms: AtomicU64,
    probe_in_flight: AtomicBool,
}

impl CircuitBreaker {
    pub fn state(&self) -> BreakerState {
        BreakerState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Whether a request may be sent now (read only; see the module docs).
    pub fn admits(&self, now_ms: u64, policy: &BreakerPolicy) -> bool {
        if !policy.enabled {
            return true;
        }
        match self.state.load(Ordering::Acquire) {
            CLOSED => true,
            OPEN => {
                now_ms >= self.opened_at_ms.load(Ordering::Acquire) + policy.open_ms
                    && !self.probe_in_flight.load(Ordering::Acquire)
            }
            _ => !self.probe_in_flight.load(Ordering::Acquire),
        }
    }

    /// Confirms a pick: `None` when the target cannot take it after all (the
    /// probe slot went to another request in the meantime).
    pub fn try_admit(&self, now_ms: u64, policy: &BreakerPolicy) -> Option<Admission> {
        if !policy.enabled {
            return Some(Admission::Normal);
        }
        match self.state.load(Ordering::Acquire) {
            CLOSED => Some(Admission::Normal),
            OPEN if now_ms < self.opened_at_ms.load(Ordering::Acquire) + policy.open_ms => None,
            _ => {
                self.probe_in_flight
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .ok()?;
                self.state.store(HALF_OPEN, Ordering::Release);
                Some(Admission::Probe)
            }
        }
    }

    /// The attempt succeeded (the engine answered without a server error).
    pub fn record_success(&self, admission: Admission) -> Option<Transition> {
        self.consecutive_failures.store(0, Ordering::Relaxed);
        if admission == Admission::Probe {
            self.state.store(CLOSED, Ordering::Release);
            self.probe_in_flight.store(false, Ordering::Release);
            return Some(Transition {
                to: BreakerState::Closed,
            });
        }
        None
    }

    /// The attempt failed (connect, 5xx, reset, timeout).
    pub fn record_failure(
        &self,
        admission: Admission,
        now_ms: u64,
        policy: &BreakerPolicy,
    ) -> Option<Transition> {
        if admission == Admission::Probe {
            self.open(now_ms);
            self.probe_in_flight.store(false, Ordering::Release);
            return Some(Transition {
                to: BreakerState::Open,
            });
        }
        let failures = self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if policy.enabled
            && failures >= policy.failure_threshold
            && self
                .state
                .compare_exchange(CLOSED, OPEN, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            self.opened_at_ms.store(now_ms, Ordering::Release);
            return Some(Transition {
                to: BreakerState::Open,
            });
        }
        None
    }

    /// A probe ended without a verdict: let the next request probe.
    pub fn release_probe(&self) {
        self.probe_in_flight.store(false, Ordering::Release);
    }

    fn open(&self, now_ms: u64) {
        self.opened_at_ms.store(now_ms, Ordering::Release);
        self.state.store(OPEN, Ordering::Release);
        self.consecutive_failures.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: BreakerPolicy = BreakerPolicy {
        enabled: true,
        failure_threshold: 3,
        open_ms: 1000,
    };

    fn fail(breaker: &CircuitBreaker, now: u64) -> Option<Transition> {
        breaker.record_failure(Admission::Normal, now, &POLICY)
    }

    #[test]
    fn opens_after_threshold_consecutive_failures() {
        let breaker = CircuitBreaker::default();
        assert_eq!(fail(&breaker, 0), None);
        assert_eq!(fail(&breaker, 0), None);
        breaker.record_success(Admission::Normal);
        assert_eq!(fail(&breaker, 0), None);
        assert_eq!(fail(&breaker, 0), None);
        assert_eq!(
            fail(&breaker, 5),
            Some(Transition {
                to: BreakerState::Open
            })
        );
        assert!(!breaker.admits(5, &POLICY));
        assert!(!breaker.admits(1004, &POLICY));
        assert_eq!(breaker.try_admit(1004, &POLICY), None);
    }

    #[test]
    fn half_open_admits_exactly_one_probe() {
        let breaker = CircuitBreaker::default();
        for _ in 0..3 {
            fail(&breaker, 0);
        }
        assert!(breaker.admits(1000, &POLICY));
        assert_eq!(breaker.try_admit(1000, &POLICY), Some(Admission::Probe));
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        for _ in 0..10 {
            assert!(!breaker.admits(1000, &POLICY));
            assert_eq!(breaker.try_admit(1000, &POLICY), None);
        }
        assert_eq!(
            breaker.record_success(Admission::Probe),
            Some(Transition {
                to: BreakerState::Closed
            })
        );
        assert!(breaker.admits(1000, &POLICY));
        assert_eq!(breaker.try_admit(1000, &POLICY), Some(Admission::Normal));
    }

    #[test]
    fn failed_probe_reopens_for_another_period() {
        let breaker = CircuitBreaker::default();
        for _ in 0..3 {
            fail(&breaker, 0);
        }
        assert_eq!(breaker.try_admit(1500, &POLICY), Some(Admission::Probe));
        assert_eq!(
            breaker.record_failure(Admission::Probe, 1600, &POLICY),
            Some(Transition {
                to: BreakerState::Open
            })
        );
        assert!(!breaker.admits(2500, &POLICY));
        assert!(breaker.admits(2600, &POLICY));
    }

    #[test]
    fn probe_without_verdict_frees_the_slot() {
        let breaker = CircuitBreaker::default();
        for _ in 0..3 {
            fail(&breaker, 0);
        }
        assert_eq!(breaker.try_admit(1000, &POLICY), Some(Admission::Probe));
        breaker.release_probe();
        assert_eq!(breaker.try_admit(1000, &POLICY), Some(Admission::Probe));
    }

    #[test]
    fn disabled_breaker_always_admits() {
        let policy = BreakerPolicy {
            enabled: false,
            ..POLICY
        };
        let breaker = CircuitBreaker::default();
        for _ in 0..10 {
            assert_eq!(breaker.record_failure(Admission::Normal, 0, &policy), None);
        }
        assert!(breaker.admits(0, &policy));
        assert_eq!(breaker.try_admit(0, &policy), Some(Admission::Normal));
    }
}
