//! Per-target load, shared by every snapshot.
//!
//! A target is identified by [`TargetId`] (provider slug + upstream model), never
//! by its position in a route, so a reload that reorders, adds or removes
//! targets keeps what was learned about the ones that stay. The map is only
//! touched when a snapshot is built; the request path holds an
//! `Arc<TargetStats>` and works on its atomics.
//!
//! When a request counts as finished: the [`InFlightGuard`] is taken when an
//! attempt is dispatched to a target and dropped when that attempt ends — the
//! whole response including a streamed body was relayed, the client went away,
//! the attempt failed, or a retry replaced it. Nothing has to remember to
//! decrement. Until its first response byte, the attempt also counts as
//! *waiting* ([`TargetStats::waiting`]): queued or in prefill on the engine,
//! which is what a new request there would wait behind.
//!
//! What a latency sample is: time to the first body byte for a streamed
//! response (vLLM and SGLang send a stream's headers before the request is
//! even queued, so the first event is the first token), the whole response
//! for a non-streaming one; taken only from attempts that completed
//! successfully (`proxy.rs` feeds [`TargetStats::record_success`]).
//!
//! Which identities exist: the targets of configured routes and declared
//! group members (provider, upstream model), and one per provider for what
//! its engine serves under requested names: passthrough group members and
//! pinned `<provider>/<model>` addresses that name no configured target
//! share `(provider, "*")` ([`TargetId::engine`]). So a caller inventing
//! model names creates no entry, two adapters on one engine share its
//! load, and a pinned address of a configured target is load on it. A reload that
//! drops a target drops its entry once nothing holds it any more
//! ([`LoadTracker::retain`]).
//!
//! Targets on one provider share its [`EngineStats`]: this node's
//! attempts on the engine as a whole (its `max_concurrency`) and whether
//! its metrics are read; each target keeps the engine's last reading for
//! its model. The load every strategy reads
//! ([`TargetStats::combined_load`]) is
//! `max(in_flight, running + waiting + dispatched since the reading)` while
//! the reading is fresh, and `in_flight` otherwise; `tracker/engine.rs`
//! says why each term is there.

mod breaker;
mod engine;
mod failure_log;
mod parking;

pub use breaker::{
    Admission, BreakerPolicy, BreakerState, BreakerTicket, CircuitBreaker, Transition,
};
pub use engine::{
    CapacitySignal, EngineStats, PollSummary, Reading, ReadingSummary, Reported, SaturatedBy,
    SaturationPolicy,
};
pub use failure_log::{FailureLog, FailureReason};
pub use parking::{parse_retry_after, Parking, ParkingPolicy};

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rolter_balancer::{LatencyModel, TargetStatsView};

/// Weight of a new sample in the latency EWMA (docs/design/defaults.md: alpha 0.3).
pub const LATENCY_EWMA_ALPHA: f64 = 0.3;

/// Stable identity of a target: which provider serves which upstream model.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TargetId {
    pub provider: String,
    pub model: String,
}

/// The model part of [`TargetId::engine`].
pub const ANY_MODEL: &str = "*";

impl TargetId {
    pub fn new(provider: impl Into<String>, model: impl Into<String>) -> Self {
        Self {
            provider: provider.into(),
            model: model.into(),
        }
    }

    /// The provider's engine as a whole: whatever model a request names
    /// through a passthrough group member or a pinned provider address.
    pub fn engine(provider: impl Into<String>) -> Self {
        Self::new(provider, ANY_MODEL)
    }
}

impl fmt::Display for TargetId {
    /// `provider/model`: unambiguous because a slug never contains `/`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.provider, self.model)
    }
}

/// Live counters of one target.
#[derive(Debug, Default)]
pub struct TargetStats {
    in_flight: AtomicU64,
    /// In flight and not past their first response byte (queued or in
    /// prefill): what a new request waits behind.
    waiting: AtomicU64,
    requests: AtomicU64,
    failures: AtomicU64,
    picks: AtomicU64,
    /// f64 bits of the EWMA in seconds; `NO_SAMPLE` until the first success.
    latency_ewma_bits: AtomicU64,
    latency_samples: AtomicU64,
    /// predicted_latency's model of this target; lives here, not in the
    /// balancer, so a reload does not throw away what it learned.
    latency_model: LatencyModel,
    /// adaptive's warm-up picks spent on this target, for the same reason:
    /// a target that never answers absorbs the budget once, not per reload.
    warm_up_picks: AtomicU64,
    /// Breaker and parking live here too: a reload must not close an open
    /// breaker or unpark a target that asked for time. The breaker is
    /// shared with the tickets of the attempts it admitted.
    pub breaker: Arc<CircuitBreaker>,
    pub parking: Parking,
    pub failure_log: FailureLog,
    /// The provider's engine, shared with its other targets.
    engine: Arc<EngineStats>,
    /// The engine's last reading for this target's model.
    reported: Reported,
}

const NO_SAMPLE: u64 = 0;

/// A copy of a target's counters at one instant, for the admin API and metrics.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct TargetLoad {
    pub in_flight: u64,
    pub requests: u64,
    pub failures: u64,
    pub picks: u64,
    /// Smoothed latency of successful attempts, in ms: time to first token
    /// for streams, the whole response otherwise (see the module docs).
    pub latency_ewma_ms: Option<f64>,
    pub latency_samples: u64,
    pub breaker: BreakerState,
}

impl TargetStats {
    /// Counts a pick by the balancer (taken or not).
    pub fn record_pick(&self) {
        self.picks.fetch_add(1, Ordering::Relaxed);
    }

    /// Marks an attempt as dispatched, with no concurrency limit; the
    /// guard releases it. See [`TargetStats::begin_within`].
    pub fn begin(self: &Arc<Self>) -> InFlightGuard {
        // Without a limit the claim always succeeds.
        self.engine.claim(None);
        self.begin_claimed()
    }

    /// The target's part of a dispatch whose engine slot is claimed.
    fn begin_claimed(self: &Arc<Self>) -> InFlightGuard {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.waiting.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        InFlightGuard {
            stats: Arc::clone(self),
            waiting: true,
        }
    }

    /// In-flight attempts still waiting for their first response byte.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }

    pub fn record_failure(&self) {
        self.failures.fetch_add(1, Ordering::Relaxed);
    }

    /// Learns from a successful attempt: the latency EWMA, and the latency
    /// model with the queue the request joined (`queue_depth`, read before
    /// its own in-flight increment) and its prompt size.
    pub fn record_success(&self, latency: Duration, queue_depth: u64, prompt_ktokens: f64) {
        self.record_latency(latency);
        self.latency_model
            .learn(queue_depth, prompt_ktokens, latency.as_secs_f64() * 1000.0);
    }

    /// Feeds the latency EWMA with a successful attempt's latency.
    pub fn record_latency(&self, latency: Duration) {
        let sample = latency.as_secs_f64();
        // A CAS loop rather than a lock: contention is one retry at worst,
        // and a lost race only delays the sample by one iteration.
        let mut current = self.latency_ewma_bits.load(Ordering::Relaxed);
        loop {
            let next = if current == NO_SAMPLE {
                sample
            } else {
                let old = f64::from_bits(current);
                old + LATENCY_EWMA_ALPHA * (sample - old)
            };
            // A sample of exactly 0.0 has bits 0; nudge it so it reads as a sample.
            let bits = next.max(f64::MIN_POSITIVE).to_bits();
            match self.latency_ewma_bits.compare_exchange_weak(
                current,
                bits,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => break,
                Err(seen) => current = seen,
            }
        }
        self.latency_samples.fetch_add(1, Ordering::Relaxed);
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The latency EWMA in ms; `None` before the first successful attempt.
    pub fn latency_ms(&self) -> Option<f64> {
        let bits = self.latency_ewma_bits.load(Ordering::Relaxed);
        (bits != NO_SAMPLE).then(|| f64::from_bits(bits) * 1000.0)
    }

    pub fn latency_model(&self) -> &LatencyModel {
        &self.latency_model
    }

    /// Attempts dispatched to this target since the process started.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// Claims one of `budget` warm-up picks; false when they are spent.
    pub fn spend_warm_up(&self, budget: u64) -> bool {
        self.warm_up_picks
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |spent| {
                (spent < budget).then_some(spent + 1)
            })
            .is_ok()
    }

    pub fn warm_up_spent(&self) -> u64 {
        self.warm_up_picks.load(Ordering::Relaxed)
    }

    pub fn load(&self) -> TargetLoad {
        TargetLoad {
            in_flight: self.in_flight(),
            requests: self.requests.load(Ordering::Relaxed),
            failures: self.failures.load(Ordering::Relaxed),
            picks: self.picks.load(Ordering::Relaxed),
            latency_ewma_ms: self.latency_ms(),
            latency_samples: self.latency_samples.load(Ordering::Relaxed),
            breaker: self.breaker.state(),
        }
    }
}

/// Holds one in-flight slot of a target until dropped.
#[derive(Debug)]
pub struct InFlightGuard {
    stats: Arc<TargetStats>,
    /// Counted in [`TargetStats::waiting`] still.
    waiting: bool,
}

impl InFlightGuard {
    /// The attempt's first response byte arrived: it no longer waits.
    pub fn first_byte(&mut self) {
        if std::mem::take(&mut self.waiting) {
            self.stats.waiting.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.first_byte();
        let before = self.stats.in_flight.fetch_sub(1, Ordering::Relaxed);
        debug_assert!(before > 0, "in-flight count underflow");
        self.stats.release_engine();
    }
}

/// The tracker as one balancer sees it: its targets' counters, by route index.
pub struct TrackerView {
    targets: Vec<Arc<TargetStats>>,
}

impl TrackerView {
    pub fn new(targets: Vec<Arc<TargetStats>>) -> Self {
        Self { targets }
    }
}

impl TargetStatsView for TrackerView {
    fn latency_ms(&self, target: usize) -> Option<f64> {
        self.targets.get(target)?.latency_ms()
    }

    fn waiting(&self, target: usize) -> Option<u64> {
        Some(
            self.targets
                .get(target)?
                .combined_waiting(crate::clock::now_ms()),
        )
    }

    fn kv_usage(&self, target: usize) -> Option<f64> {
        self.targets.get(target)?.kv_usage(crate::clock::now_ms())
    }

    fn latency_samples(&self, target: usize) -> u64 {
        self.targets
            .get(target)
            .map_or(0, |t| t.latency_samples.load(Ordering::Relaxed))
    }

    fn served(&self, target: usize) -> u64 {
        self.targets.get(target).map_or(0, |t| t.requests())
    }

    fn warm_up_spent(&self, target: usize) -> u64 {
        self.targets.get(target).map_or(0, |t| t.warm_up_spent())
    }

    fn spend_warm_up(&self, target: usize, budget: u64) -> bool {
        self.targets
            .get(target)
            .is_some_and(|t| t.spend_warm_up(budget))
    }

    fn latency_model(&self, target: usize) -> Option<&LatencyModel> {
        self.targets.get(target).map(|t| &t.latency_model)
    }
}

/// Owner of every target's counters, shared by all snapshots.
#[derive(Debug, Default)]
pub struct LoadTracker {
    // Locked only while a snapshot is built, the admin API or a metrics
    // scrape lists targets, or the failure-log summary runs; the request
    // path never touches it.
    targets: Mutex<Targets>,
    /// Shared with every engine: wakes flow control when capacity frees.
    signal: Arc<CapacitySignal>,
}

#[derive(Debug, Default)]
struct Targets {
    stats: HashMap<TargetId, Arc<TargetStats>>,
    /// By provider slug; an engine goes when its last target went.
    engines: HashMap<String, Arc<EngineStats>>,
    /// The identities the current configuration names; `None` until the
    /// first [`LoadTracker::retain`] (everything is kept).
    configured: Option<HashSet<TargetId>>,
}

impl Targets {
    /// Drops the entries of targets no longer configured that nothing holds
    /// any more: no snapshot, no request in flight.
    fn sweep(&mut self) {
        let Some(configured) = &self.configured else {
            return;
        };
        self.stats
            .retain(|id, stats| configured.contains(id) || Arc::strong_count(stats) > 1);
        // Held by its targets (and a poll in progress) only.
        self.engines
            .retain(|_, engine| Arc::strong_count(engine) > 1);
    }
}

impl LoadTracker {
    pub fn new() -> Self {
        Self::default()
    }

    /// The counters of `id`, created empty the first time it is seen.
    pub fn stats(&self, id: &TargetId) -> Arc<TargetStats> {
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(stats) = targets.stats.get(id) {
            return Arc::clone(stats);
        }
        let signal = &self.signal;
        let engine = Arc::clone(
            targets
                .engines
                .entry(id.provider.clone())
                .or_insert_with(|| Arc::new(EngineStats::new(Arc::clone(signal)))),
        );
        let stats = Arc::new(TargetStats {
            engine,
            ..TargetStats::default()
        });
        targets.stats.insert(id.clone(), Arc::clone(&stats));
        stats
    }

    /// The engine of provider `slug`, when a target of it is tracked.
    pub fn engine(&self, slug: &str) -> Option<Arc<EngineStats>> {
        let targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        targets.engines.get(slug).cloned()
    }

    /// The tracked targets of provider `slug`, for the engine-metrics poller.
    pub fn targets_of(&self, slug: &str) -> Vec<(TargetId, Arc<TargetStats>)> {
        let targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        targets
            .stats
            .iter()
            .filter(|(id, _)| id.provider == slug)
            .map(|(id, stats)| (id.clone(), Arc::clone(stats)))
            .collect()
    }

    /// Wakes flow control when capacity may have freed.
    pub fn capacity_signal(&self) -> &Arc<CapacitySignal> {
        &self.signal
    }

    /// Keeps the entries of `configured` (a new snapshot's identities) and
    /// drops every other entry once it drained: at once when nothing holds
    /// it, else at a later listing after the last request holding it ended.
    pub fn retain(&self, configured: HashSet<TargetId>) {
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        targets.configured = Some(configured);
        targets.sweep();
    }

    /// Every target tracked, sorted by identity (drained targets a reload
    /// removed are dropped first).
    pub fn entries(&self) -> Vec<(TargetId, Arc<TargetStats>)> {
        let mut targets = self.targets.lock().unwrap_or_else(|e| e.into_inner());
        targets.sweep();
        let mut entries: Vec<_> = targets
            .stats
            .iter()
            .map(|(id, stats)| (id.clone(), Arc::clone(stats)))
            .collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        entries
    }

    /// Writes one line per target and kind of failure with the failures the
    /// log left out since the last call (see `failure_log.rs`).
    pub fn summarize_failures(&self) {
        for (id, stats) in self.entries() {
            for (reason, count) in stats.failure_log.take_suppressed() {
                log::warn!(
                    "{id}: {count} more {} failures in the last {} s (only the first {} per window are logged in full)",
                    reason.label(),
                    failure_log::WINDOW_MS / 1000,
                    failure_log::BURST,
                );
            }
        }
    }
}

/// The background service behind [`LoadTracker::summarize_failures`]: one
/// summary per failure-log window.
pub struct FailureLogSummary {
    tracker: Arc<LoadTracker>,
}

impl FailureLogSummary {
    pub fn new(tracker: Arc<LoadTracker>) -> Self {
        Self { tracker }
    }
}

#[async_trait::async_trait]
impl pingora::services::background::BackgroundService for FailureLogSummary {
    async fn start(&self, mut shutdown: pingora::server::ShutdownWatch) {
        let every = Duration::from_millis(failure_log::WINDOW_MS);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => self.tracker.summarize_failures(),
                _ = shutdown.changed() => {
                    self.tracker.summarize_failures();
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_releases_in_flight_on_drop() {
        let tracker = LoadTracker::new();
        let stats = tracker.stats(&TargetId::new("gpu-a", "m"));
        let first = stats.begin();
        let second = stats.begin();
        assert_eq!(stats.in_flight(), 2);
        drop(first);
        assert_eq!(stats.in_flight(), 1);
        drop(second);
        assert_eq!(stats.in_flight(), 0);
        assert_eq!(stats.load().requests, 2);
    }

    #[test]
    fn an_attempt_waits_until_its_first_byte_once() {
        let tracker = LoadTracker::new();
        let stats = tracker.stats(&TargetId::new("gpu-a", "m"));
        let mut answering = stats.begin();
        let queued = stats.begin();
        assert_eq!((stats.in_flight(), stats.waiting()), (2, 2));
        answering.first_byte();
        answering.first_byte();
        assert_eq!((stats.in_flight(), stats.waiting()), (2, 1));
        drop(answering);
        assert_eq!((stats.in_flight(), stats.waiting()), (1, 1));
        drop(queued);
        assert_eq!((stats.in_flight(), stats.waiting()), (0, 0));
    }

    #[test]
    fn same_identity_shares_counters() {
        let tracker = LoadTracker::new();
        let a = tracker.stats(&TargetId::new("gpu-a", "m"));
        let _held = a.begin();
        let again = tracker.stats(&TargetId::new("gpu-a", "m"));
        assert_eq!(again.in_flight(), 1);
        let other = tracker.stats(&TargetId::new("gpu-a", "other"));
        assert_eq!(other.in_flight(), 0);
    }

    #[test]
    fn entries_of_removed_targets_go_once_they_drained() {
        let tracker = LoadTracker::new();
        let kept = tracker.stats(&TargetId::new("gpu-a", "m"));
        let removed = tracker.stats(&TargetId::new("gpu-b", "m"));
        let busy = removed.begin();
        drop(removed);
        tracker.retain(HashSet::from([TargetId::new("gpu-a", "m")]));
        assert_eq!(
            tracker.entries().len(),
            2,
            "a request still in flight keeps its target's entry"
        );
        drop(busy);
        let entries = tracker.entries();
        assert_eq!(entries.len(), 1, "drained: gone at the next listing");
        assert_eq!(entries[0].0, TargetId::new("gpu-a", "m"));
        assert!(Arc::ptr_eq(&entries[0].1, &kept));
    }

    #[test]
    fn warm_up_budget_is_spent_once_per_target() {
        let stats = TargetStats::default();
        assert!((0..8).all(|_| stats.spend_warm_up(8)));
        assert!(!stats.spend_warm_up(8));
        assert_eq!(stats.warm_up_spent(), 8);
    }

    #[test]
    fn latency_ewma_starts_at_first_sample_then_smooths() {
        let stats = TargetStats::default();
        assert_eq!(stats.load().latency_ewma_ms, None);
        stats.record_latency(Duration::from_millis(100));
        assert!((stats.load().latency_ewma_ms.unwrap() - 100.0).abs() < 1e-9);
        stats.record_latency(Duration::from_millis(200));
        // 100 + 0.3 * (200 - 100)
        assert!((stats.load().latency_ewma_ms.unwrap() - 130.0).abs() < 1e-9);
        assert_eq!(stats.load().latency_samples, 2);
    }
}
