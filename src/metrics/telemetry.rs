//! Metrics of the engine telemetry: KV-event streams and LMCache signals.
//!
//! The subscriber and the poller count in their own atomics (they run off
//! the request path and keep counting across reconfiguration); a scrape
//! copies those counts into Prometheus counters by adding what grew since
//! the last scrape.

use std::sync::Mutex;

use prometheus::{Gauge, GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use crate::kv_events::KvIndexSummary;
use crate::lmcache::OccupancySummary;

pub struct TelemetryMetrics {
    kv_events: IntCounterVec,
    kv_gaps: IntCounterVec,
    kv_replays: IntCounterVec,
    kv_resets: IntCounterVec,
    kv_drops: IntCounterVec,
    kv_blocks: IntGaugeVec,
    kv_usable: IntGaugeVec,
    lmcache_occupancy: GaugeVec,
    lmcache_fresh: IntGaugeVec,
    lmcache_failures: IntCounterVec,
    // Serializes scrapes: two concurrent syncs would each add the same growth.
    sync: Mutex<()>,
}

fn counter(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let vec = IntCounterVec::new(Opts::new(name, help), labels).expect("static metric definition");
    registry
        .register(Box::new(vec.clone()))
        .expect("metric names are unique");
    vec
}

fn gauge(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let vec = IntGaugeVec::new(Opts::new(name, help), labels).expect("static metric definition");
    registry
        .register(Box::new(vec.clone()))
        .expect("metric names are unique");
    vec
}

/// Brings a Prometheus counter up to `value` (counts only ever grow).
fn sync_counter(vec: &IntCounterVec, labels: &[&str], value: u64) {
    let counter = vec.with_label_values(labels);
    let seen = counter.get();
    if value > seen {
        counter.inc_by(value - seen);
    }
}

impl TelemetryMetrics {
    pub fn new(registry: &Registry) -> Self {
        let lmcache_occupancy = GaugeVec::new(
            Opts::new(
                "rolter_lmcache_occupancy",
                "Last LMCache occupancy reading per provider (0 to 1).",
            ),
            &["provider"],
        )
        .expect("static metric definition");
        registry
            .register(Box::new(lmcache_occupancy.clone()))
            .expect("metric names are unique");
        Self {
            kv_events: counter(
                registry,
                "rolter_kv_events_total",
                "KV events per provider, type (block_stored, block_removed, all_blocks_cleared) and outcome (received, applied, dropped).",
                &["provider", "type", "outcome"],
            ),
            kv_gaps: counter(
                registry,
                "rolter_kv_gaps_total",
                "Sequence gaps in KV-event streams.",
                &["provider"],
            ),
            kv_replays: counter(
                registry,
                "rolter_kv_replays_total",
                "Replays asked for after a gap, by result.",
                &["provider", "result"],
            ),
            kv_resets: counter(
                registry,
                "rolter_kv_resets_total",
                "KV indexes cleared, by reason (gap, restart, malformed).",
                &["provider", "reason"],
            ),
            kv_drops: counter(
                registry,
                "rolter_kv_dropped_total",
                "Blocks or messages dropped, by reason (unknown_parent, eviction, decode_error, unknown_event).",
                &["provider", "reason"],
            ),
            kv_blocks: gauge(
                registry,
                "rolter_kv_blocks_resident",
                "Blocks the KV index holds per provider.",
                &["provider"],
            ),
            kv_usable: gauge(
                registry,
                "rolter_kv_index_usable",
                "1 while a provider's KV index is fresh and whole (else precise_cache_aware is neutral on it).",
                &["provider"],
            ),
            lmcache_occupancy,
            lmcache_fresh: gauge(
                registry,
                "rolter_lmcache_fresh",
                "1 while a provider's LMCache signal is fresh (else lmcache_aware is neutral on it).",
                &["provider"],
            ),
            lmcache_failures: counter(
                registry,
                "rolter_lmcache_poll_failures_total",
                "Failed LMCache polls per provider.",
                &["provider"],
            ),
            sync: Mutex::new(()),
        }
    }

    pub fn sync(&self, kv: &[KvIndexSummary], occupancy: &[(String, OccupancySummary)]) {
        let _serialized = self.sync.lock().unwrap_or_else(|e| e.into_inner());
        for index in kv.iter().filter(|i| i.configured) {
            let p = index.provider.as_str();
            for (kind, counts) in [
                ("block_stored", &index.events.block_stored),
                ("block_removed", &index.events.block_removed),
                ("all_blocks_cleared", &index.events.all_blocks_cleared),
            ] {
                sync_counter(&self.kv_events, &[p, kind, "received"], counts.received);
                sync_counter(&self.kv_events, &[p, kind, "applied"], counts.applied);
                sync_counter(&self.kv_events, &[p, kind, "dropped"], counts.dropped);
            }
            sync_counter(&self.kv_gaps, &[p], index.gaps);
            sync_counter(&self.kv_replays, &[p, "ok"], index.replays.ok);
            sync_counter(&self.kv_replays, &[p, "failed"], index.replays.failed);
            sync_counter(&self.kv_resets, &[p, "gap"], index.resets.gap);
            sync_counter(&self.kv_resets, &[p, "restart"], index.resets.restart);
            sync_counter(&self.kv_resets, &[p, "malformed"], index.resets.malformed);
            for (reason, value) in [
                ("unknown_parent", index.unknown_parent_drops),
                ("eviction", index.evictions),
                ("decode_error", index.decode_errors),
                ("unknown_event", index.events.unknown),
            ] {
                sync_counter(&self.kv_drops, &[p, reason], value);
            }
            self.kv_blocks
                .with_label_values(&[p])
                .set(index.blocks_resident as i64);
            self.kv_usable
                .with_label_values(&[p])
                .set(i64::from(index.usable));
        }
        for (provider, signal) in occupancy {
            let p = provider.as_str();
            if let Some(value) = signal.occupancy {
                let gauge: Gauge = self.lmcache_occupancy.with_label_values(&[p]);
                gauge.set(value);
            }
            self.lmcache_fresh
                .with_label_values(&[p])
                .set(i64::from(signal.fresh));
            sync_counter(&self.lmcache_failures, &[p], signal.failures);
        }
    }
}
