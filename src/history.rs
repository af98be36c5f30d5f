//! A bounded in-memory history of each route's traffic to each target, for
//! the dashboard's charts: every [`INTERVAL`] a sampler (`admin/history.rs`)
//! reads the process's cumulative counters and this keeps the rates of the
//! interval, [`POINTS`] of them (15 minutes). Counters are read, never written, so the request path
//! knows nothing of it; the lock is held by the sampler and by readers, for
//! a copy, never across an await.
//!
//! A control node keeps the same history per gateway from the states its
//! gateways push (`control/node.rs`), without time to first token, which
//! pushes do not carry.

pub mod quantile;

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

/// How often a point is taken.
pub const INTERVAL: Duration = Duration::from_secs(5);
/// How many points each series keeps: 15 minutes at [`INTERVAL`].
pub const POINTS: usize = 180;

/// What the counters of one route's target read at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reading {
    pub at_unix_ms: u64,
    /// Cumulative attempts and failures of the route there.
    pub attempts: u64,
    pub failures: u64,
    pub in_flight: u64,
    /// Cumulative time-to-first-byte bucket counts (Prometheus order, the
    /// last one +Inf) with their upper bounds in seconds; `None` where the
    /// source has no histogram (a gateway's push).
    pub ttfb: Option<(Vec<u64>, &'static [f64])>,
}

/// One interval of one series.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Point {
    /// The end of the interval, milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    pub requests_per_s: f64,
    pub errors_per_s: f64,
    /// Requests in flight at the end of the interval.
    pub in_flight: u64,
    /// Time to first byte of the interval's requests; `None` without any
    /// (or without the histogram).
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p95_ms: Option<f64>,
}

impl Point {
    /// The interval from `before` to `now`; `None` when the counters went
    /// backwards (a restarted gateway) or no time passed.
    fn between(before: &Reading, now: &Reading) -> Option<Point> {
        let elapsed_ms = now.at_unix_ms.checked_sub(before.at_unix_ms)?;
        if elapsed_ms == 0 {
            return None;
        }
        let attempts = now.attempts.checked_sub(before.attempts)?;
        let failures = now.failures.checked_sub(before.failures)?;
        let seconds = elapsed_ms as f64 / 1000.0;
        let (p50, p95) = match (&before.ttfb, &now.ttfb) {
            (Some((was, bounds)), Some((is, _))) if was.len() == is.len() => {
                let delta: Vec<u64> = is
                    .iter()
                    .zip(was)
                    .map(|(n, b)| n.saturating_sub(*b))
                    .collect();
                (
                    quantile::of_buckets(&delta, bounds, 0.5).map(|s| s * 1000.0),
                    quantile::of_buckets(&delta, bounds, 0.95).map(|s| s * 1000.0),
                )
            }
            _ => (None, None),
        };
        Some(Point {
            at_unix_ms: now.at_unix_ms,
            requests_per_s: attempts as f64 / seconds,
            errors_per_s: failures as f64 / seconds,
            in_flight: now.in_flight,
            ttft_p50_ms: p50,
            ttft_p95_ms: p95,
        })
    }
}

/// A series' key: the route's public model and the target's
/// `provider/model` label.
pub type SeriesKey = (String, String);

#[derive(Default)]
struct Series {
    last: Option<Reading>,
    points: VecDeque<Point>,
}

/// Series by key, each at most [`POINTS`] long; a key missing from a round
/// of readings (a route or target a reload removed) is dropped with it.
#[derive(Default)]
pub struct History {
    series: Mutex<HashMap<SeriesKey, Series>>,
}

impl History {
    /// Takes one round of readings: a point per key read before, the
    /// first reading of a new key only remembered.
    pub fn record(&self, readings: Vec<(SeriesKey, Reading)>) {
        let mut series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let mut kept: HashMap<SeriesKey, Series> = HashMap::with_capacity(readings.len());
        for (key, reading) in readings {
            let mut entry = series.remove(&key).unwrap_or_default();
            if let Some(point) = entry
                .last
                .as_ref()
                .and_then(|l| Point::between(l, &reading))
            {
                if entry.points.len() == POINTS {
                    entry.points.pop_front();
                }
                entry.points.push_back(point);
            }
            entry.last = Some(reading);
            kept.insert(key, entry);
        }
        *series = kept;
    }

    /// Every series' points, oldest first, by key.
    pub fn points(&self) -> Vec<(SeriesKey, Vec<Point>)> {
        let series = self.series.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<_> = series
            .iter()
            .map(|(key, s)| (key.clone(), s.points.iter().cloned().collect()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }
}

/// `GET /admin/history`, and one gateway's in `GET /api/v1/fleet/history`.
#[derive(Clone, Debug, Default, Serialize, utoipa::ToSchema)]
pub struct HistoryAnswer {
    /// Milliseconds between points.
    pub interval_ms: u64,
    pub series: Vec<SeriesView>,
}

/// One route's traffic to one target over time.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct SeriesView {
    /// The route's public model.
    pub route: String,
    /// The target's `provider/model`.
    pub target: String,
    /// Oldest first.
    pub points: Vec<Point>,
}

impl HistoryAnswer {
    pub fn of(history: &History, interval: Duration) -> Self {
        HistoryAnswer {
            interval_ms: interval.as_millis() as u64,
            series: history
                .points()
                .into_iter()
                .map(|((route, target), points)| SeriesView {
                    route,
                    target,
                    points,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests;
