//! A [`TargetStatsView`] fed by hand, for the tests of the strategies that
//! read latencies and predictions: latency the way the gateway's tracker
//! keeps it (an EWMA of successful requests, alpha 0.3), predictions from a
//! real [`LatencyModel`] per target.

use std::sync::{Mutex, PoisonError};

use crate::views::TargetStatsView;
use crate::LatencyModel;

/// The gateway's latency EWMA weight (decisions.md).
const ALPHA: f64 = 0.3;

#[derive(Debug)]
pub(crate) struct FedStats {
    /// `(smoothed latency, samples)` per target. A test fixture: a mutex is
    /// simpler than atomics and nothing here is timed.
    latency: Mutex<Vec<(Option<f64>, u64)>>,
    models: Vec<LatencyModel>,
}

impl FedStats {
    /// `targets` targets with no sample and cold models.
    pub(crate) fn new(targets: usize) -> Self {
        Self {
            latency: Mutex::new(vec![(None, 0); targets]),
            models: (0..targets).map(|_| LatencyModel::new()).collect(),
        }
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

    fn predicted_latency_ms(
        &self,
        target: usize,
        queue_depth: u64,
        prompt_ktokens: f64,
    ) -> Option<f64> {
        self.models
            .get(target)?
            .predict(queue_depth, prompt_ktokens)
    }
}
