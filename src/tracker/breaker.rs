//! A circuit breaker per target.
//!
//! Closed: requests flow; `failure_threshold` consecutive failures open it.
//! Open: the target takes nothing for `open` (it is ineligible). Then
//! half-open: exactly one request is admitted as a probe — whoever wins the
//! compare-and-swap that sets its probe flag — and every other request keeps
//! treating the target as ineligible. The probe's success closes the breaker,
//! its failure re-opens it for another `open`; a probe that ends without a
//! verdict (the client went away) frees the slot for the next probe.
//!
//! Eligibility asks [`CircuitBreaker::admits`], which only reads; the pick is
//! then confirmed with [`CircuitBreaker::try_admit`], which claims the probe
//! slot, so a predicate evaluated many times per pick never claims anything.
//!
//! State, the probe flag and the time the breaker opened live in one
//! `AtomicU64` and change together by compare-and-swap: a reader never sees
//! "open" without the time it opened (an earlier layout stored the state
//! first, and an admission in between read the previous `opened_at`, found
//! the open period long over and took the half-open probe at once).

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Breaker settings (`[breaker]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerPolicy {
    pub enabled: bool,
    pub failure_threshold: u32,
    pub open_ms: u64,
}

/// The breaker's state, as reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
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
}

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

/// The packed word: state in the top two bits, the probe flag below them,
/// the clock reading (ms) the breaker last opened at in the rest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Word(u64);

const STATE_SHIFT: u32 = 62;
const PROBE_BIT: u64 = 1 << 61;
const TIME_MASK: u64 = PROBE_BIT - 1;
const CLOSED: u64 = 0;
const OPEN: u64 = 1;
const HALF_OPEN: u64 = 2;

impl Word {
    fn new(state: u64, probe: bool, opened_at_ms: u64) -> Self {
        // Clock readings are milliseconds since start (`clock.rs`): 2^61 ms
        // is 73 million years, so the mask never cuts a real reading.
        Word(state << STATE_SHIFT | if probe { PROBE_BIT } else { 0 } | opened_at_ms & TIME_MASK)
    }

    fn state(self) -> u64 {
        self.0 >> STATE_SHIFT
    }

    fn probe(self) -> bool {
        self.0 & PROBE_BIT != 0
    }

    fn opened_at_ms(self) -> u64 {
        self.0 & TIME_MASK
    }

    /// Whether the open period is over at `now_ms`.
    fn open_elapsed(self, now_ms: u64, policy: &BreakerPolicy) -> bool {
        now_ms >= self.opened_at_ms().saturating_add(policy.open_ms)
    }
}

#[derive(Debug, Default)]
pub struct CircuitBreaker {
    word: AtomicU64,
    consecutive_failures: AtomicU32,
}

impl CircuitBreaker {
    fn load(&self) -> Word {
        Word(self.word.load(Ordering::Acquire))
    }

    /// Replaces `current` with `next`; false when another thread changed it first.
    fn swap(&self, current: Word, next: Word) -> bool {
        self.word
            .compare_exchange(current.0, next.0, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub fn state(&self) -> BreakerState {
        match self.load().state() {
            OPEN => BreakerState::Open,
            HALF_OPEN => BreakerState::HalfOpen,
            _ => BreakerState::Closed,
        }
    }

    /// Whether a request may be sent now (read only; see the module docs).
    pub fn admits(&self, now_ms: u64, policy: &BreakerPolicy) -> bool {
        if !policy.enabled {
            return true;
        }
        let word = self.load();
        match word.state() {
            CLOSED => true,
            OPEN => word.open_elapsed(now_ms, policy) && !word.probe(),
            _ => !word.probe(),
        }
    }

    /// Confirms a pick: `None` when the target cannot take it after all (the
    /// probe slot went to another request in the meantime).
    pub fn try_admit(&self, now_ms: u64, policy: &BreakerPolicy) -> Option<Admission> {
        if !policy.enabled {
            return Some(Admission::Normal);
        }
        loop {
            let word = self.load();
            match word.state() {
                CLOSED => return Some(Admission::Normal),
                OPEN if !word.open_elapsed(now_ms, policy) => return None,
                _ if word.probe() => return None,
                _ => {
                    let probing = Word::new(HALF_OPEN, true, word.opened_at_ms());
                    if self.swap(word, probing) {
                        return Some(Admission::Probe);
                    }
                }
            }
        }
    }

    /// The attempt succeeded (the engine answered without a server error).
    pub fn record_success(&self, admission: Admission) -> Option<Transition> {
        self.consecutive_failures.store(0, Ordering::Relaxed);
        if admission == Admission::Probe {
            let opened_at = self.load().opened_at_ms();
            self.word
                .store(Word::new(CLOSED, false, opened_at).0, Ordering::Release);
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
            // Re-opens and frees the probe slot in one store.
            self.word
                .store(Word::new(OPEN, false, now_ms).0, Ordering::Release);
            self.consecutive_failures.store(0, Ordering::Relaxed);
            return Some(Transition {
                to: BreakerState::Open,
            });
        }
        let failures = self.consecutive_failures.fetch_add(1, Ordering::Relaxed) + 1;
        if !policy.enabled || failures < policy.failure_threshold {
            return None;
        }
        let word = self.load();
        (word.state() == CLOSED && self.swap(word, Word::new(OPEN, false, now_ms))).then_some(
            Transition {
                to: BreakerState::Open,
            },
        )
    }

    /// A probe ended without a verdict: let the next request probe.
    pub fn release_probe(&self) {
        loop {
            let word = self.load();
            if !word.probe() {
                return;
            }
            let freed = Word::new(word.state(), false, word.opened_at_ms());
            if self.swap(word, freed) {
                return;
            }
        }
    }
}

/// The breaker admission of one attempt. A half-open probe that ends
/// without a verdict (the client left, the attempt was replaced) frees the
/// probe slot when dropped; a verdict is given at most once.
#[derive(Debug)]
pub struct BreakerTicket {
    breaker: Arc<CircuitBreaker>,
    admission: Admission,
    settled: bool,
}

impl BreakerTicket {
    pub fn new(breaker: Arc<CircuitBreaker>, admission: Admission) -> Self {
        Self {
            breaker,
            admission,
            settled: false,
        }
    }

    /// The attempt's verdict: success (the engine answered).
    pub fn success(&mut self) -> Option<Transition> {
        if std::mem::replace(&mut self.settled, true) {
            return None;
        }
        self.breaker.record_success(self.admission)
    }

    /// The attempt's verdict: a failure the breaker counts.
    pub fn failure(&mut self, now_ms: u64, policy: &BreakerPolicy) -> Option<Transition> {
        if std::mem::replace(&mut self.settled, true) {
            return None;
        }
        self.breaker.record_failure(self.admission, now_ms, policy)
    }
}

impl Drop for BreakerTicket {
    fn drop(&mut self) {
        if !self.settled && self.admission == Admission::Probe {
            self.breaker.release_probe();
        }
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

    /// Regression: `record_failure` stored "open" before the time it opened,
    /// and an admission in between took the half-open probe at once. Each
    /// round opens a fresh breaker at t = 10 s while readers ask to be
    /// admitted at t = 10.5 s, inside the open period: none may probe.
    #[test]
    fn no_admission_sees_open_without_its_opening_time() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Barrier;

        const ROUNDS: usize = 2_000;
        for round in 0..ROUNDS {
            let breaker = CircuitBreaker::default();
            let opened = AtomicBool::new(false);
            let start = Barrier::new(3);
            std::thread::scope(|scope| {
                for _ in 0..2 {
                    scope.spawn(|| {
                        start.wait();
                        // Bounded: the writer opens within a few thousand spins.
                        for _ in 0..100_000 {
                            let admission = breaker.try_admit(10_500, &POLICY);
                            assert_ne!(
                                admission,
                                Some(Admission::Probe),
                                "round {round}: probed inside the open period"
                            );
                            if opened.load(Ordering::Acquire) && admission.is_none() {
                                break;
                            }
                        }
                    });
                }
                start.wait();
                for _ in 0..POLICY.failure_threshold {
                    fail(&breaker, 10_000);
                }
                opened.store(true, Ordering::Release);
            });
            assert_eq!(breaker.state(), BreakerState::Open);
            assert!(!breaker.admits(10_999, &POLICY));
            assert!(breaker.admits(11_000, &POLICY));
        }
    }

    #[test]
    fn packed_word_keeps_state_probe_and_time_apart() {
        let word = Word::new(HALF_OPEN, true, 123_456);
        assert_eq!(word.state(), HALF_OPEN);
        assert!(word.probe());
        assert_eq!(word.opened_at_ms(), 123_456);
        let word = Word::new(OPEN, false, TIME_MASK);
        assert_eq!((word.state(), word.probe()), (OPEN, false));
        assert_eq!(word.opened_at_ms(), TIME_MASK);
    }

    #[test]
    fn a_probe_ticket_dropped_without_a_verdict_frees_the_slot_and_a_verdict_counts_once() {
        let breaker = Arc::new(CircuitBreaker::default());
        for _ in 0..3 {
            fail(&breaker, 0);
        }
        let admission = breaker.try_admit(1000, &POLICY).unwrap();
        drop(BreakerTicket::new(Arc::clone(&breaker), admission));
        let admission = breaker.try_admit(1000, &POLICY);
        assert_eq!(admission, Some(Admission::Probe), "the slot was freed");
        let mut ticket = BreakerTicket::new(Arc::clone(&breaker), Admission::Probe);
        assert!(ticket.success().is_some());
        assert_eq!(ticket.failure(1000, &POLICY), None, "settled already");
        drop(ticket);
        assert_eq!(breaker.state(), BreakerState::Closed);
    }
}
