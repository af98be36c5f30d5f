//! Metrics of engine-reported load, saturation and flow control.
//!
//! Counted as they happen: flow control's outcomes and waits. Read at
//! scrape time: queue depth per route and band, each engine's metrics
//! freshness and polls (the poller counts in its own atomics; a scrape
//! adds what grew, as `telemetry.rs` does).

use std::collections::HashSet;
use std::sync::Mutex;

use prometheus::{
    GaugeVec, HistogramOpts, HistogramVec, IntCounterVec, IntGaugeVec, Opts, Registry,
};

use crate::flow_control::Outcome;

pub struct FlowMetrics {
    outcomes: IntCounterVec,
    wait: HistogramVec,
    queued: IntGaugeVec,
    /// The `(route, band)` series the last scrape set, so an emptied band
    /// reads 0 once and then leaves.
    queued_series: Mutex<HashSet<(String, String)>>,
    engine_fresh: IntGaugeVec,
    engine_age: GaugeVec,
    engine_polls: IntCounterVec,
}

/// One provider's engine-metrics state at a scrape.
pub struct EngineMetricsGauges<'a> {
    pub provider: &'a str,
    pub fresh: bool,
    /// Since the last good poll; `None` before the first.
    pub age_secs: Option<f64>,
    pub polls: u64,
    pub failures: u64,
}

fn registered<T: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: T,
) -> T {
    registry
        .register(Box::new(metric.clone()))
        .expect("metric names are unique");
    metric
}

impl FlowMetrics {
    pub fn new(registry: &Registry) -> Self {
        let outcomes = registered(
            registry,
            IntCounterVec::new(
                Opts::new(
                    "rolter_flow_control_total",
                    "Requests flow control held, by route and how they left: dispatched, queue_full, expired, cancelled.",
                ),
                &["route", "outcome"],
            )
            .expect("static metric definition"),
        );
        let wait = registered(
            registry,
            HistogramVec::new(
                HistogramOpts::new(
                    "rolter_flow_control_wait_seconds",
                    "Time requests waited in flow control before they left it, by route and outcome.",
                )
                .buckets(vec![
                    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
                ]),
                &["route", "outcome"],
            )
            .expect("static metric definition"),
        );
        let queued = registered(
            registry,
            IntGaugeVec::new(
                Opts::new(
                    "rolter_flow_control_queued",
                    "Requests waiting in flow control, by route and priority band.",
                ),
                &["route", "priority"],
            )
            .expect("static metric definition"),
        );
        let engine_fresh = registered(
            registry,
            IntGaugeVec::new(
                Opts::new(
                    "rolter_engine_metrics_fresh",
                    "1 while the provider's engine-metrics reading is used (young enough, last poll good).",
                ),
                &["provider"],
            )
            .expect("static metric definition"),
        );
        let engine_age = registered(
            registry,
            GaugeVec::new(
                Opts::new(
                    "rolter_engine_metrics_age_seconds",
                    "Age of the provider's last good engine-metrics reading.",
                ),
                &["provider"],
            )
            .expect("static metric definition"),
        );
        let engine_polls = registered(
            registry,
            IntCounterVec::new(
                Opts::new(
                    "rolter_engine_metrics_polls_total",
                    "Engine-metrics polls per provider and outcome (ok, failed).",
                ),
                &["provider", "outcome"],
            )
            .expect("static metric definition"),
        );
        FlowMetrics {
            outcomes,
            wait,
            queued,
            queued_series: Mutex::new(HashSet::new()),
            engine_fresh,
            engine_age,
            engine_polls,
        }
    }

    /// A request left flow control after `waited_secs`.
    pub fn record(&self, route: &str, outcome: Outcome, waited_secs: f64) {
        self.outcomes
            .with_label_values(&[route, outcome.label()])
            .inc();
        self.wait
            .with_label_values(&[route, outcome.label()])
            .observe(waited_secs);
    }

    /// The queue depths now; series of bands that emptied read 0, then go.
    pub fn set_queued(&self, depths: &[(String, i32, u64)]) {
        let now: HashSet<(String, String)> = depths
            .iter()
            .map(|(route, band, _)| (route.clone(), band.to_string()))
            .collect();
        let mut previous = self.queued_series.lock().unwrap_or_else(|e| e.into_inner());
        for (route, band) in previous.difference(&now) {
            self.queued.remove_label_values(&[route, band]).ok();
        }
        for (route, band, depth) in depths {
            self.queued
                .with_label_values(&[route, &band.to_string()])
                .set(i64::try_from(*depth).unwrap_or(i64::MAX));
        }
        *previous = now;
    }

    pub fn set_engine_metrics(&self, engine: &EngineMetricsGauges<'_>) {
        let provider = [engine.provider];
        self.engine_fresh
            .with_label_values(&provider)
            .set(i64::from(engine.fresh));
        match engine.age_secs {
            Some(age) => self.engine_age.with_label_values(&provider).set(age),
            None => {
                self.engine_age.remove_label_values(&provider).ok();
            }
        }
        for (outcome, value) in [
            ("ok", engine.polls.saturating_sub(engine.failures)),
            ("failed", engine.failures),
        ] {
            let counter = self
                .engine_polls
                .with_label_values(&[engine.provider, outcome]);
            let seen = counter.get();
            if value > seen {
                counter.inc_by(value - seen);
            }
        }
    }
}
