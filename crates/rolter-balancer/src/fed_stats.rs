//! A [`TargetStatsView`] fed by hand, for the tests of the strategies that
//! read latencies and predictions: latency the way the gateway's tracker
//! keeps it (an EWMA of successful requests, alpha 0.3), predictions from a
//! real [`LatencyModel`] per target.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::views::TargetStatsView;
use crate::LatencyModel;

/// The gateway's latency EWMA weight (docs/design/defaults.md).
const ALPHA: f64 = 0.3;

#[derive(Debug)]
pub(crate) struct FedStats {
    /// `(smoothed latency, samples)` per target. A test fixture: a mutex is
    /// simpler than atomics and nothing here is timed.
    latency: Mutex<Vec<(Option<f64>, u64)>>,
    models: Vec<LatencyModel>,
    /// Requests dispatched per target, as the gateway's in-flight guard counts.
    served: Vec<AtomicU64>,
    warm_up: Vec<AtomicU64>,
}

impl FedStats {
    /// `targets` targets with no sample and cold models.
    pub(crate) fn new(targets: usize) -> Self {
        Self {
            latency: Mutex::new(vec![(None, 0); targets]),
            models: (0..targets).map(|_| LatencyModel::new()).collect(),
            served: (0..targets).map(|_| AtomicU64::new(0)).collect(),
            warm_up: (0..targets).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// A request dispatched to `target` (the gateway counts it on dispatch).
    pub(crate) fn dispatch(&self, target: usize) {
        self.served[target].fetch_add(1, Ordering::Relaxed);
    }

    /// A successful request to `target` that took `ms`.
    pub(crate) fn record(&self, target: usize, ms: f64) {
        let mut latency = self.latency.lock().unwrap_or_else(PoisonError::into_inner);
        let (smoothed, samples) = &mut latency[target];
        *smoothed = Some(smoothed.map_or(ms, |s| s + ALPHA * (ms - s)));
        *samples += 1;
    }

    /// Sets `target`'s smoothed latency and sample count outright.
    pub(crate) fn set(&self, target: usize, ms: Option<f64>, samples: u64) {
        let mut latency = self.latency.lock().unwrap_or_else(PoisonError::into_inner);
        latency[target] = (ms, samples);
    }

    /// `target`'s latency model, to train.
    pub(crate) fn model(&self, target: usize) -> &LatencyModel {
        &self.models[target]
    }
}

impl TargetStatsView for FedStats {
    fn latency_ms(&self, target: usize) -> Option<f64> {
        let latency = self.latency.lock().unwrap_or_else(PoisonError::into_inner);
        latency.get(target).and_then(|(ms, _)| *ms)
    }

    fn latency_samples(&self, target: usize) -> u64 {
        let latency = self.latency.lock().unwrap_or_else(PoisonError::into_inner);
        latency.get(target).map_or(0, |(_, samples)| *samples)
    }

    fn served(&self, target: usize) -> u64 {
        self.served
            .get(target)
            .map_or(0, |s| s.load(Ordering::Relaxed))
    }

    fn warm_up_spent(&self, target: usize) -> u64 {
        self.warm_up
            .get(target)
            .map_or(0, |s| s.load(Ordering::Relaxed))
    }

    fn spend_warm_up(&self, target: usize, budget: u64) -> bool {
        self.warm_up.get(target).is_some_and(|spent| {
            spent
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < budget).then_some(n + 1)
                })
                .is_ok()
        })
    }

    fn latency_model(&self, target: usize) -> Option<&LatencyModel> {
        self.models.get(target)
    }
}
