//! Active health of each provider, shared by every snapshot.
//!
//! A provider is healthy until proven otherwise (unknown = healthy): the
//! checker (`health/checker.rs`) marks it down after `unhealthy_after`
//! consecutive failed probes and up again after `healthy_after` successes.
//! A probe answered 429 says "busy", not "down": it counts neither way and
//! the next probes back off instead. A probe answered 404 or 405 says the
//! probe path is wrong, not that the engine is dead (it answered): it counts
//! as up, and the provider is flagged as misconfigured until a probe gets
//! another answer (log, `rolter_health_probe_misconfigured`, `/admin/routes`).
//!
//! Health alone never empties a route: when every target a request may use
//! is down by its probes, the request is routed across them anyway (Envoy's
//! panic threshold at its limit), see `proxy/select.rs`.

mod checker;

pub use checker::{HealthChecker, PlanSource, ProbePlan};

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use http::HeaderValue;

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
    /// The engine answered 404 or 405: it is up, the probe path is wrong.
    Misconfigured {
        status: u16,
    },
}

impl ProbeOutcome {
    /// A fixed label value for `rolter_health_probes_total`.
    pub fn label(self) -> &'static str {
        match self {
            ProbeOutcome::Up => "up",
            ProbeOutcome::Busy => "busy",
            ProbeOutcome::Down => "down",
            ProbeOutcome::Misconfigured { .. } => "misconfigured",
        }
    }
}

/// One provider as the checker probes it.
#[derive(Debug)]
pub struct ProbeTarget {
    pub slug: String,
    pub addr: SocketAddr,
    pub tls: bool,
    /// `Host` header and TLS server name.
    pub host: String,
    /// The probe's path: the base URL's prefix and `health_path`.
    pub path: String,
    /// `Bearer <key>`, the provider's key.
    pub authorization: Option<HeaderValue>,
    pub health: Arc<ProviderHealth>,
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
    /// The status of the last probe when it was 404 or 405; 0 otherwise.
    misconfigured_status: AtomicU32,
}

impl Default for ProviderHealth {
    fn default() -> Self {
        Self {
            healthy: AtomicBool::new(true),
            failures: AtomicU32::new(0),
            successes: AtomicU32::new(0),
            backoff_level: AtomicU32::new(0),
            next_probe_ms: AtomicU64::new(0),
            misconfigured_status: AtomicU32::new(0),
        }
    }
}

impl ProviderHealth {
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::Acquire)
    }

    /// Whether a probe is due (not backing off after a 429).
    pub fn probe_due(&self, now_ms: u64) -> bool {
        now_ms >= self.next_probe_at()
    }

    /// The earliest a probe may run (ms; 0: any time), later than the
    /// interval while a busy engine's probes back off.
    pub fn next_probe_at(&self) -> u64 {
        self.next_probe_ms.load(Ordering::Acquire)
    }

    /// The status a misconfigured probe path answered (404, 405); `None`
    /// while the probe gets any other answer.
    pub fn probe_misconfigured(&self) -> Option<u16> {
        match self.misconfigured_status.load(Ordering::Relaxed) {
            0 => None,
            status => u16::try_from(status).ok(),
        }
    }

    /// Applies a probe's outcome; says when the provider changed state.
    pub fn record(
        &self,
        outcome: ProbeOutcome,
        now_ms: u64,
        policy: &HealthPolicy,
    ) -> Option<HealthChange> {
        let misconfigured = match outcome {
            ProbeOutcome::Misconfigured { status } => u32::from(status),
            _ => 0,
        };
        self.misconfigured_status
            .store(misconfigured, Ordering::Relaxed);
        match outcome {
            ProbeOutcome::Busy => {
                let level = self.backoff_level.fetch_add(1, Ordering::Relaxed);
                let intervals = (1u64 << level.min(16)).min(MAX_BACKOFF_INTERVALS);
                self.next_probe_ms
                    .store(now_ms + intervals * policy.interval_ms, Ordering::Release);
                None
            }
            ProbeOutcome::Up | ProbeOutcome::Misconfigured { .. } => {
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
        self.misconfigured_status.store(0, Ordering::Relaxed);
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
    fn a_probe_path_the_engine_does_not_serve_is_misconfigured_not_down() {
        let health = ProviderHealth::default();
        for _ in 0..10 {
            let outcome = ProbeOutcome::Misconfigured { status: 404 };
            assert_eq!(health.record(outcome, 0, &POLICY), None);
        }
        assert!(health.is_healthy(), "an engine answering 404 is up");
        assert_eq!(health.probe_misconfigured(), Some(404));
        health.record(ProbeOutcome::Up, 0, &POLICY);
        assert_eq!(health.probe_misconfigured(), None);
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
