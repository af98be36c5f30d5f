//! A gateway's live state as its control node shows it: each gateway pushes
//! its `/admin/routes` answer with its telemetry (`telemetry.rs`), the
//! control node keeps the newest per gateway, and `GET /api/v1/fleet/gateways`
//! answers them with their age, for the dashboard to show per gateway and
//! summed over gateways.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::history::{History, HistoryAnswer, Reading, SeriesKey};

/// A report this much later than its gateway's push interval is late.
pub const GRACE_MS: u64 = 2_000;

/// Whether a report `age_ms` old, from a gateway pushing every
/// `interval_ms`, missed at least one push and a grace: its numbers are old.
pub fn is_stale(age_ms: u64, interval_ms: u64) -> bool {
    age_ms > interval_ms.saturating_mul(2).saturating_add(GRACE_MS)
}

/// `GET /api/v1/fleet/gateways`.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct GatewaysAnswer {
    /// By node id; gateways silent for longer than the control node keeps
    /// reports are left out.
    pub gateways: Vec<GatewayView>,
}

/// One gateway's newest report.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct GatewayView {
    pub node_id: String,
    pub reported_at: DateTime<Utc>,
    /// Milliseconds since it reported, on the database's clock.
    pub age_ms: u64,
    /// How often it pushes.
    pub interval_ms: u64,
    /// It missed a push: these numbers are `age_ms` old.
    pub stale: bool,
    /// Its `/admin/routes` answer.
    #[schema(value_type = crate::live::RoutesAnswer)]
    pub state: serde_json::Value,
}

/// The most gateways a control node keeps a history of; past it, the one
/// silent longest is dropped.
pub const MAX_GATEWAY_HISTORIES: usize = 256;

/// A gateway's history, its push interval and when it last pushed.
struct Kept {
    history: History,
    interval_ms: u64,
    last_unix_ms: u64,
}

/// What a control node keeps of each gateway's recent traffic: a point per
/// push, from the cumulative counters the pushed state carries (no time to
/// first token: the state does not carry the histogram). In this control
/// node's memory: each control node behind a load balancer keeps the
/// pushes it received.
#[derive(Default)]
pub struct GatewayHistories {
    gateways: Mutex<HashMap<String, Kept>>,
}

impl GatewayHistories {
    /// Takes `state`, pushed by `node_id` at `now_unix_ms`.
    pub fn record(
        &self,
        node_id: &str,
        state: &serde_json::Value,
        interval_ms: u64,
        now_unix_ms: u64,
    ) {
        let readings = readings(state, now_unix_ms);
        let mut gateways = self.gateways.lock().unwrap_or_else(|e| e.into_inner());
        if !gateways.contains_key(node_id) && gateways.len() >= MAX_GATEWAY_HISTORIES {
            let oldest = gateways
                .iter()
                .min_by_key(|(_, kept)| kept.last_unix_ms)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                gateways.remove(&oldest);
            }
        }
        let kept = gateways.entry(node_id.to_owned()).or_insert_with(|| Kept {
            history: History::default(),
            interval_ms,
            last_unix_ms: now_unix_ms,
        });
        kept.interval_ms = interval_ms;
        kept.last_unix_ms = now_unix_ms;
        kept.history.record(readings);
    }

    /// Each gateway's history, by node id.
    pub fn answer(&self) -> FleetHistoryAnswer {
        let gateways = self.gateways.lock().unwrap_or_else(|e| e.into_inner());
        let mut answer: Vec<GatewayHistory> = gateways
            .iter()
            .map(|(node_id, kept)| GatewayHistory {
                node_id: node_id.clone(),
                history: HistoryAnswer::of(&kept.history, Duration::from_millis(kept.interval_ms)),
            })
            .collect();
        answer.sort_by(|a, b| a.node_id.cmp(&b.node_id));
        FleetHistoryAnswer { gateways: answer }
    }
}

/// Every route target of a pushed `/admin/routes` document, as readings.
fn readings(state: &serde_json::Value, at_unix_ms: u64) -> Vec<(SeriesKey, Reading)> {
    let routes = state["routes"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    routes
        .iter()
        .flat_map(|route| {
            let model = route["model"].as_str().unwrap_or_default().to_owned();
            let targets = route["targets"]
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default();
            targets.iter().filter_map(move |target| {
                let label = format!(
                    "{}/{}",
                    target["provider"].as_str()?,
                    target["model"].as_str()?
                );
                let traffic = &target["route_traffic"];
                let reading = Reading {
                    at_unix_ms,
                    attempts: traffic["attempts"].as_u64()?,
                    failures: traffic["failures"].as_u64().unwrap_or(0),
                    in_flight: target["in_flight"].as_u64().unwrap_or(0),
                    ttfb: None,
                };
                Some(((model.clone(), label), reading))
            })
        })
        .collect()
}

/// `GET /api/v1/fleet/history`.
#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct FleetHistoryAnswer {
    pub gateways: Vec<GatewayHistory>,
}

/// One gateway's recent traffic, a point per push.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct GatewayHistory {
    pub node_id: String,
    #[serde(flatten)]
    pub history: HistoryAnswer,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_stale_once_it_missed_a_push_and_the_grace() {
        assert!(!is_stale(0, 1_000));
        assert!(!is_stale(4_000, 1_000));
        assert!(is_stale(4_001, 1_000));
        assert!(!is_stale(32_000, 15_000));
        assert!(is_stale(32_001, 15_000));
        assert!(!is_stale(u64::MAX, u64::MAX), "no overflow");
    }

    fn pushed(attempts: u64) -> serde_json::Value {
        serde_json::json!({"routes": [{"model": "chat", "targets": [
            {"provider": "gpu", "model": "m", "in_flight": 2,
             "route_traffic": {"attempts": attempts, "failures": 1}}
        ]}]})
    }

    #[test]
    fn a_gateway_s_pushes_become_its_history() {
        let kept = GatewayHistories::default();
        kept.record("gw-1", &pushed(10), 1_000, 50_000);
        kept.record("gw-1", &pushed(30), 1_000, 52_000);
        let answer = kept.answer();
        let history = &answer.gateways[0].history;
        assert_eq!(answer.gateways[0].node_id, "gw-1");
        assert_eq!(history.interval_ms, 1_000);
        assert_eq!(history.series[0].route, "chat");
        assert_eq!(history.series[0].target, "gpu/m");
        let point = &history.series[0].points[0];
        assert_eq!(point.requests_per_s, 10.0);
        assert_eq!(point.errors_per_s, 0.0);
        assert_eq!(point.in_flight, 2);
        assert_eq!(point.ttft_p50_ms, None);
    }

    #[test]
    fn gateways_kept_are_bounded_and_the_longest_silent_goes() {
        let kept = GatewayHistories::default();
        for i in 0..MAX_GATEWAY_HISTORIES as u64 + 5 {
            kept.record(&format!("gw-{i}"), &pushed(0), 1_000, 1_000 + i);
        }
        let ids: Vec<_> = kept
            .answer()
            .gateways
            .into_iter()
            .map(|g| g.node_id)
            .collect();
        assert_eq!(ids.len(), MAX_GATEWAY_HISTORIES);
        assert!(!ids.contains(&"gw-0".to_string()));
        assert!(ids.contains(&format!("gw-{}", MAX_GATEWAY_HISTORIES + 4)));
    }
}
