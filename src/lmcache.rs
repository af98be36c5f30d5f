//! LMCache occupancy of each provider, for `lmcache_aware`.
//!
//! A background poller (`lmcache/poller.rs`) reads each provider's
//! configured signal every `poll_interval` — an endpoint answering
//! `{"occupancy": f, "cache_available": b}`, or a Prometheus text endpoint
//! with a configured gauge — and stores the last good reading here. The
//! request path only reads atomics: a signal that is missing, stale (older
//! than `stale_after`), unavailable or saturated gives `None`, and the
//! strategy stays neutral on it. A failed poll makes it neutral at once,
//! until the next good one: the last reading of a controller known to be
//! broken is not evidence; staleness is for a signal that merely stopped.

mod poller;

pub use poller::{OccupancyPoller, SignalSource};

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The last reading of one provider's occupancy signal.
#[derive(Debug, Default)]
pub struct Occupancy {
    /// f64 bits of the occupancy in [0, 1].
    occupancy_bits: AtomicU64,
    available: AtomicBool,
    /// Clock reading (ms) of the last good poll; 0 = never.
    updated_ms: AtomicU64,
    /// How old a reading may get before it is ignored (ms), from the config.
    stale_after_ms: AtomicU64,
    polls: AtomicU64,
    failures: AtomicU64,
    /// The last poll failed.
    failed: AtomicBool,
}

/// A reading, as the admin API reports it.
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct OccupancySummary {
    pub occupancy: Option<f64>,
    pub cache_available: bool,
    pub age_ms: Option<u64>,
    pub fresh: bool,
    /// The last poll failed (the reading is not used).
    pub failed: bool,
    pub polls: u64,
    pub failures: u64,
}

impl Occupancy {
    pub fn record(&self, occupancy: f64, available: bool, now_ms: u64) {
        self.occupancy_bits
            .store(occupancy.to_bits(), Ordering::Relaxed);
        self.available.store(available, Ordering::Relaxed);
        self.failed.store(false, Ordering::Relaxed);
        // Published last: a reader that sees the new time sees the values.
        self.updated_ms.store(now_ms.max(1), Ordering::Release);
        self.polls.fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_failure(&self) {
        self.failed.store(true, Ordering::Release);
        self.polls.fetch_add(1, Ordering::Relaxed);
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    pub fn set_stale_after(&self, stale_after_ms: u64) {
        self.stale_after_ms.store(stale_after_ms, Ordering::Relaxed);
    }

    fn is_fresh(&self, now_ms: u64) -> bool {
        let updated = self.updated_ms.load(Ordering::Acquire);
        updated != 0
            && !self.failed.load(Ordering::Acquire)
            && now_ms.saturating_sub(updated) <= self.stale_after_ms.load(Ordering::Relaxed)
    }

    /// Free capacity (1 - occupancy) when the signal is fresh, the cache
    /// available and not saturated; `None` otherwise.
    pub fn free_capacity(&self, now_ms: u64) -> Option<f64> {
        if !self.is_fresh(now_ms) || !self.available.load(Ordering::Relaxed) {
            return None;
        }
        let occupancy = f64::from_bits(self.occupancy_bits.load(Ordering::Relaxed));
        (0.0..1.0).contains(&occupancy).then_some(1.0 - occupancy)
    }

    pub fn summary(&self, now_ms: u64) -> OccupancySummary {
        let updated = self.updated_ms.load(Ordering::Acquire);
        OccupancySummary {
            occupancy: (updated != 0)
                .then(|| f64::from_bits(self.occupancy_bits.load(Ordering::Relaxed))),
            cache_available: self.available.load(Ordering::Relaxed),
            age_ms: (updated != 0).then(|| now_ms.saturating_sub(updated)),
            fresh: self.is_fresh(now_ms),
            failed: self.failed.load(Ordering::Acquire),
            polls: self.polls.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
        }
    }
}

/// The occupancy signals of one route's targets, as `lmcache_aware` reads them.
pub struct OccupancyTargetsView {
    /// One entry per route target; `None` where the provider has no signal.
    targets: Vec<Option<Arc<Occupancy>>>,
}

impl OccupancyTargetsView {
    pub fn new(targets: Vec<Option<Arc<Occupancy>>>) -> Self {
        Self { targets }
    }
}

impl rolter_balancer::OccupancyView for OccupancyTargetsView {
    fn free_capacity(&self, target: usize) -> Option<f64> {
        self.targets
            .get(target)?
            .as_ref()?
            .free_capacity(crate::clock::now_ms())
    }
}

/// Every provider's occupancy, by slug; outlives snapshots.
#[derive(Debug, Default)]
pub struct OccupancyRegistry {
    // Locked only while a snapshot is built or the poller lists providers.
    providers: Mutex<HashMap<String, Arc<Occupancy>>>,
}

impl OccupancyRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn provider(&self, slug: &str) -> Arc<Occupancy> {
        let mut providers = self.providers.lock().unwrap_or_else(|e| e.into_inner());
        Arc::clone(providers.entry(slug.to_string()).or_default())
    }

    /// Every provider's reading, sorted by slug.
    pub fn summaries(&self, now_ms: u64) -> Vec<(String, OccupancySummary)> {
        let providers = self.providers.lock().unwrap_or_else(|e| e.into_inner());
        let mut summaries: Vec<_> = providers
            .iter()
            .map(|(slug, signal)| (slug.clone(), signal.summary(now_ms)))
            .collect();
        summaries.sort_by(|a, b| a.0.cmp(&b.0));
        summaries
    }

    /// Forgets providers that are no longer configured.
    pub fn retain(&self, keep: impl Fn(&str) -> bool) {
        let mut providers = self.providers.lock().unwrap_or_else(|e| e.into_inner());
        providers.retain(|slug, _| keep(slug));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(occupancy: f64, available: bool) -> Occupancy {
        let signal = Occupancy::default();
        signal.set_stale_after(10_000);
        signal.record(occupancy, available, 1_000);
        signal
    }

    #[test]
    fn free_capacity_is_one_minus_occupancy_when_fresh() {
        let signal = fresh(0.25, true);
        assert_eq!(signal.free_capacity(2_000), Some(0.75));
    }

    #[test]
    fn never_polled_stale_unavailable_and_saturated_are_neutral() {
        let never = Occupancy::default();
        never.set_stale_after(10_000);
        assert_eq!(never.free_capacity(0), None);
        assert_eq!(fresh(0.25, true).free_capacity(11_001), None, "stale");
        assert_eq!(fresh(0.25, false).free_capacity(2_000), None, "unavailable");
        assert_eq!(fresh(1.0, true).free_capacity(2_000), None, "saturated");
        assert_eq!(fresh(f64::NAN, true).free_capacity(2_000), None, "garbage");
        assert_eq!(fresh(-0.5, true).free_capacity(2_000), None, "garbage");
    }

    #[test]
    fn a_failed_poll_is_neutral_at_once_not_after_the_staleness_window() {
        let signal = fresh(0.25, true);
        signal.record_failure();
        assert_eq!(signal.free_capacity(1_001), None, "known broken");
        assert!(signal.summary(1_001).failed);
        signal.record(0.5, true, 1_500);
        assert_eq!(
            signal.free_capacity(1_600),
            Some(0.5),
            "a good poll restores it"
        );
    }
}
