//! `GET /metrics`: the Prometheus exposition, with the gauges that are read
//! at scrape time rather than moved by events: each tracked target's
//! in-flight count, breaker and parking (`learned.tracker`), each
//! provider's health, the KV-index and LMCache summaries, the addressed
//! routes kept, and `adaptive`'s scores and `cache_aware`'s decision split
//! from the running snapshot's balancers. Called off the request path, once per scrape.

use rolter_balancer::StrategyKind;

use crate::learned::Learned;
use crate::metrics::{EngineMetricsGauges, Metrics, TargetGauges};
use crate::snapshot::Snapshot;

/// Reads the scrape-time gauges into `metrics` and encodes everything.
pub fn scrape(metrics: &Metrics, learned: &Learned, snapshot: &Snapshot) -> String {
    let now = crate::clock::now_ms();
    metrics.sync_telemetry(&learned.kv.summaries(), &learned.occupancy.summaries(now));
    let targets: Vec<TargetGauges> = learned
        .tracker
        .entries()
        .into_iter()
        .map(|(id, stats)| {
            let max_concurrency = snapshot
                .provider(&id.provider)
                .and_then(|p| p.max_concurrency);
            TargetGauges {
                label: id.to_string(),
                in_flight: stats.in_flight(),
                breaker: stats.breaker.state(),
                parked: stats.parking.is_parked(now),
                load: stats.combined_load(now),
                saturated: stats
                    .saturation(now, &snapshot.limits.saturation, max_concurrency)
                    .is_some(),
            }
        })
        .collect();
    metrics.set_target_gauges(&targets);
    metrics.flow.set_queued(&learned.flow.depths());
    for provider in snapshot.providers() {
        if let Some(polls) = learned
            .tracker
            .engine(&provider.slug)
            .and_then(|engine| engine.poll_summary(now))
        {
            metrics.flow.set_engine_metrics(&EngineMetricsGauges {
                provider: &provider.slug,
                fresh: polls.fresh,
                age_secs: polls.age_ms.map(|ms| ms as f64 / 1000.0),
                polls: polls.polls,
                failures: polls.failures,
            });
        }
        metrics.set_provider_healthy(&provider.slug, provider.health.is_healthy());
        metrics.set_probe_misconfigured(
            &provider.slug,
            provider.health.probe_misconfigured().is_some(),
        );
    }
    metrics.set_addressed_routes(snapshot.addressed_routes());
    for route in snapshot
        .routes()
        .iter()
        .filter(|r| r.strategy == StrategyKind::CacheAware)
    {
        if let Some(d) = route.balancer.report().cache_decisions {
            for (decision, count) in [
                ("affinity", d.affinity),
                ("spread", d.spread),
                ("cold", d.cold),
            ] {
                metrics.set_cache_decisions(&route.model, decision, count);
            }
        }
    }
    for route in snapshot
        .routes()
        .iter()
        .filter(|r| r.strategy == StrategyKind::Adaptive)
    {
        let report = route.balancer.report();
        for (target, entry) in route.targets.iter().zip(&report.targets) {
            if let Some(score) = entry.score {
                metrics.set_adaptive_score(&route.model, &target.label, score);
            }
        }
    }
    metrics.encode()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::tracker::TargetId;

    #[test]
    fn the_scrape_reports_requests_and_in_flight() {
        let metrics = Arc::new(Metrics::new());
        let learned = Learned::default();
        let config = crate::config::parse("t.toml", "", &|_| None).unwrap();
        let snapshot = Snapshot::build(config, 1, &learned, &metrics).unwrap();
        let stats = learned.tracker.stats(&TargetId::new("gpu-a", "m"));
        let _guard = stats.begin();
        metrics.record_request("chat", "gpu-a/m", 200);
        let text = scrape(&metrics, &learned, &snapshot);
        assert!(
            text.contains(r#"rolter_requests_total{route="chat",status="200",target="gpu-a/m"} 1"#)
        );
        assert!(text.contains(r#"rolter_target_in_flight{target="gpu-a/m"} 1"#));
    }
}
