//! The sampler of this node's history (`crate::history`): every
//! [`INTERVAL`] it reads each route target's counters from the running
//! snapshot.

use std::sync::Arc;

use async_trait::async_trait;
use pingora::server::ShutdownWatch;
use pingora::services::background::BackgroundService;
use prometheus::core::Metric;

use crate::history::{Reading, SeriesKey, INTERVAL};
use crate::state::GatewayState;

/// This node's readings now: every route target of the running snapshot.
fn readings(state: &GatewayState) -> Vec<(SeriesKey, Reading)> {
    let snapshot = state.snapshot();
    let at_unix_ms = crate::clock::unix_ms();
    snapshot
        .routes()
        .iter()
        .flat_map(|route| {
            route.targets.iter().map(move |target| {
                let metric = target.metrics.time_to_first_byte.metric();
                let histogram = metric.get_histogram();
                let buckets = histogram
                    .get_bucket()
                    .iter()
                    .map(|b| b.cumulative_count())
                    .chain(std::iter::once(histogram.get_sample_count()))
                    .collect();
                let reading = Reading {
                    at_unix_ms,
                    attempts: target.metrics.attempts.get(),
                    failures: target.metrics.failures.get(),
                    in_flight: target.stats.load().in_flight,
                    ttfb: Some((buckets, crate::metrics::LATENCY_BUCKETS)),
                };
                (
                    (route.model.clone(), target.metrics.label.to_string()),
                    reading,
                )
            })
        })
        .collect()
}

/// Takes this node's points every [`INTERVAL`].
pub struct HistorySampler {
    state: Arc<GatewayState>,
}

impl HistorySampler {
    /// Takes the first readings now, before the server serves, so that
    /// the first point counts every request from the start: a request
    /// answered before the service's first tick was in its baseline and
    /// in no point.
    pub fn new(state: Arc<GatewayState>) -> Self {
        state.history.record(readings(&state));
        Self { state }
    }
}

#[async_trait]
impl BackgroundService for HistorySampler {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        // The baseline was taken in `new`: the first point is one interval on.
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + INTERVAL, INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => self.state.history.record(readings(&self.state)),
                _ = shutdown.changed() => return,
            }
        }
    }
}
