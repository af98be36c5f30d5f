//! Active health of each provider, shared by every snapshot.
//!
//! A provider is healthy until proven otherwise (unknown = healthy): the
//! checker (`health/checker.rs`) marks it down after `unhealthy_after`
//! consecutive failed probes and up again after `healthy_after` successes.
//! A probe answered 429 says "busy", not "down": it counts neither way and
//! the next probes back off instead.

mod checker;

pub use checker::HealthChecker;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Health settings (`[health]`), in the units the checker uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HealthPolicy {
    pub enabled: bool,
    pub interval_ms: u64,
    pub timeout_ms: u64,
    pub unhealthy_after: u32,
    pub healthy_after: u32,
}

/// The most intervals a 429 backoff skips (doubling from one).
pub const MAX_BACKOFF_INTERVALS: u64 = 8;

/// What a probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeOutcome {
    Up,
    /// The engine answered 429: busy, back off.
    Busy,
    Down,
}

/// A change of a provider's health, for logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthChange {
    WentDown,
    CameUp,
}

#[derive(Debug)]
pub struct ProviderHealth {
    healthy: AtomicBool,
    failures: AtomicU32,
    successes: AtomicU32,
    backoff_level: AtomicU32,
    /// No probe before this clock reading (ms).
    next_probe_ms: AtomicU64,
}

impl Default for ProviderHealth {
    fn default() -> Self {
        Self {
            healthy: AtomicBool::new(true),
            failures: AtomicU32::new(0),
            successes: AtomicU32::new(0),
            backoff_level: AtomicU32::new(0),
            next_probe_ms: AtomicU64::new(0),
        }
    }
}

impl ProviderHealth {
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Whether a probe is due (not backing off after a 429).
    pub fn probe_due(&self, now_ms: u64) -> bool {
        now_ms >= self.next_probe_ms.load(Ordering::Acquire)
    }

    /// Applies a probe's outcome; says when the provider changed state.
    pub fn record(
        &self,
        outcome: ProbeOutcome,
        now_ms: u64,
        policy: &HealthPolicy,
    ) -> Option<HealthChange> {
        match outcome {
            ProbeOutcome::Busy => {
                let level = self.backoff_level.fetch_add(1, Ordering::Relaxed);
                let intervals = (1u64 << level.min(16)).min(MAX_BACKOFF_INTERVALS);
                self.next_probe_ms
                    .store(now_ms + intervals * policy.interval_ms, Ordering::Release);
                None
            }
            ProbeOutcome::Up => {
                self.backoff_level.store(0, Ordering::Relaxed);
                self.failures.store(0, Ordering::Relaxed);
                let successes = self.successes.fetch_add(1, Ordering::Relaxed) + 1;
                (successes >= policy.healthy_after
                    && self
                        .healthy
                        .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok())
                .then_some(HealthChange::CameUp)
            }
            ProbeOutcome::Down => {
                self.backoff_level.store(0, Ordering::Relaxed);
                self.successes.store(0, Ordering::Relaxed);
                let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
                (failures >= policy.unhealthy_after
                    && self
                        .healthy
                        .compare_exchange(true, false, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok())
                .then_some(HealthChange::WentDown)
            }
        }
    }

    /// Forgets everything: healthy, no backoff (health checks turned off).
    pub fn reset(&self) {
        self.healthy.store(true, Ordering::Release);
        self.failures.store(0, Ordering::Relaxed);
        self.successes.store(0, Ordering::Relaxed);
        self.backoff_level.store(0, Ordering::Relaxed);
        self.next_probe_ms.store(0, Ordering::Release);
    }
}

/// Every provider's health, by slug; shared by all snapshots so a reload
/// does not bring a dead engine back.
#[derive(Debug, Default)]
pub struct HealthRegistry {
    // Locked only while a snapshot is built or the checker lists providers.
    providers: Mutex<HashMap<String, Arc<ProviderHealth>>>,
}

impl HealthRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn provider(&self, slug: &str) -> Arc<ProviderHealth> {
        let mut providers = self.providers.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(providers.entry(slug.to_string()).or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POLICY: HealthPolicy = HealthPolicy {
        enabled: true,
        interval_ms: 1000,
        timeout_ms: 500,
        unhealthy_after: 3,
        healthy_after: 2,
    };

    #[test]
    fn unknown_is_healthy_and_goes_down_after_n_failures() {
        let health = ProviderHealth::default();
        assert!(health.is_healthy());
        assert_eq!(health.record(ProbeOutcome::Down, 0, &POLICY), None);
        assert_eq!(health.record(ProbeOutcome::Down, 0, &POLICY), None);
        // A success in between starts the count again.
        assert_eq!(health.record(ProbeOutcome::Up, 0, &POLICY), None);
        assert_eq!(health.record(ProbeOutcome::Down, 0, &POLICY), None);
        assert_eq!(health.record(ProbeOutcome::Down, 0, &POLICY), None);
        assert!(health.is_healthy());
        assert_eq!(
            health.record(ProbeOutcome::Down, 0, &POLICY),
            Some(HealthChange::WentDown)
        );
        assert!(!health.is_healthy());
        assert_eq!(health.record(ProbeOutcome::Up, 0, &POLICY), None);
        assert_eq!(
            health.record(ProbeOutcome::Up, 0, &POLICY),
            Some(HealthChange::CameUp)
        );
        assert!(health.is_healthy());
    }

    #[test]
    fn busy_backs_off_without_marking_down() {
        let health = ProviderHealth::default();
        for _ in 0..10 {
            assert_eq!(health.record(ProbeOutcome::Busy, 0, &POLICY), None);
        }
        assert!(health.is_healthy());
        // Backoff doubled up to the cap of 8 intervals.
        assert!(!health.probe_due(7_999));
        assert!(health.probe_due(8_000));
        health.record(ProbeOutcome::Up, 8_000, &POLICY);
        health.record(ProbeOutcome::Busy, 8_000, &POLICY);
        assert!(health.probe_due(9_000), "backoff restarts at one interval");
    }
}
