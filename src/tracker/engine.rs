//! One engine's load as every gateway node can agree on it: what the engine
//! itself reports (`[providers.engine_metrics]`, polled by
//! `engine_metrics.rs`) joined with what this node sent it since.
//!
//! The combined load of a target, the one figure every load-reading
//! strategy and scorer reads ([`TargetStats::combined_load`]):
//!
//! ```text
//! fresh reading:  max(in_flight, running + waiting + dispatched_since)
//! otherwise:      in_flight
//! ```
//!
//! - `running`, `waiting`: the engine's last reading for the target's model
//!   (its `model_name` label when the engine reports several, else the
//!   engine's totals). They count every node's requests, which is what
//!   makes two nodes agree.
//! - `dispatched_since`: attempts this node sent the engine after that
//!   reading was requested. They are on their way or in its queue but not
//!   in the figure yet; without them a node would pile a whole poll
//!   interval's worth of requests onto the engine that looked idlest.
//! - `in_flight`: this node's own attempts on the target; the engine cannot
//!   hold fewer than those, so a lagging reading never makes it look
//!   emptier than this node knows it is.
//!
//! A reading is fresh while it is younger than `stale_after_ms` and the
//! last poll succeeded; a failed poll drops back to the local count at
//! once (the last figure of an engine that stopped answering is not
//! evidence). The queue depth the cache guard and the queue scorer read
//! follows the same rule with `waiting` in place of `running + waiting`,
//! and this node's requests without a first byte as the floor.
//!
//! Saturation ([`TargetStats::saturation`]): this node holds
//! `max_concurrency` attempts on the engine, or a fresh reading shows
//! `waiting >= [saturation] max_waiting` or KV-cache usage
//! `>= max_kv_usage`. The concurrency limit is claimed atomically with
//! the in-flight slot ([`TargetStats::begin_within`]), so it holds exactly
//! under any number of concurrent picks.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

use super::TargetStats;

/// Why a target takes no new request now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SaturatedBy {
    /// This node has its provider's `max_concurrency` in flight there.
    Concurrency,
    /// The engine reports `max_waiting` or more requests waiting.
    Queue,
    /// The engine reports `max_kv_usage` or more of its KV cache in use.
    KvCache,
}

impl SaturatedBy {
    pub const LABELS: [&'static str; 3] = ["concurrency", "queue", "kv_cache"];

    pub fn label(self) -> &'static str {
        match self {
            SaturatedBy::Concurrency => Self::LABELS[0],
            SaturatedBy::Queue => Self::LABELS[1],
            SaturatedBy::KvCache => Self::LABELS[2],
        }
    }
}

/// `[saturation]` and a provider's `max_concurrency`, as a pick reads them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SaturationPolicy {
    pub max_waiting: u64,
    pub max_kv_usage: f64,
}

impl Default for SaturationPolicy {
    fn default() -> Self {
        let config = crate::config::Saturation::default();
        SaturationPolicy {
            max_waiting: config.max_waiting,
            max_kv_usage: config.max_kv_usage(),
        }
    }
}

impl From<&crate::config::Saturation> for SaturationPolicy {
    fn from(config: &crate::config::Saturation) -> Self {
        SaturationPolicy {
            max_waiting: config.max_waiting,
            max_kv_usage: config.max_kv_usage(),
        }
    }
}

/// Wakes flow control when capacity may have freed: a request ended, or a
/// new engine reading came in. Costs one atomic load per request while
/// nobody waits.
#[derive(Debug, Default)]
pub struct CapacitySignal {
    waiters: AtomicU64,
    notify: Notify,
}

impl CapacitySignal {
    /// Capacity may have freed.
    pub fn freed(&self) {
        if self.waiters.load(Ordering::Acquire) > 0 {
            self.notify.notify_one();
        }
    }

    /// A request starts waiting; [`CapacitySignal::stop_waiting`] ends it.
    /// The first waiter wakes the dispatcher, which sleeps while none waits.
    pub fn start_waiting(&self) {
        if self.waiters.fetch_add(1, Ordering::AcqRel) == 0 {
            self.notify.notify_one();
        }
    }

    pub fn stop_waiting(&self) {
        self.waiters.fetch_sub(1, Ordering::AcqRel);
    }

    /// Requests waiting for capacity.
    pub fn waiters(&self) -> u64 {
        self.waiters.load(Ordering::Acquire)
    }

    /// Resolves at the next [`CapacitySignal::freed`] (or one that came
    /// while nobody listened).
    pub async fn changed(&self) {
        self.notify.notified().await;
    }
}

/// One engine (a provider) as this node sees it, shared by its targets.
#[derive(Debug, Default)]
pub struct EngineStats {
    /// This node's attempts on the engine, any model.
    in_flight: AtomicU64,
    /// This node's attempts on the engine since the process started.
    dispatched: AtomicU64,
    /// How old a reading may be (ms); 0: the engine's metrics are not read.
    stale_after_ms: AtomicU64,
    /// The last poll failed: no reading is used until one succeeds.
    failed: AtomicBool,
    polls: AtomicU64,
    poll_failures: AtomicU64,
    /// Clock reading (ms) of the last good poll; 0: never.
    last_ok_ms: AtomicU64,
    signal: Arc<CapacitySignal>,
}

/// An engine's metrics polling, as the admin API and `/metrics` show it.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct PollSummary {
    /// The engine's readings are used now.
    pub fresh: bool,
    /// Since the last good poll; `None` before the first.
    pub age_ms: Option<u64>,
    pub polls: u64,
    pub failures: u64,
}

impl EngineStats {
    pub fn new(signal: Arc<CapacitySignal>) -> Self {
        EngineStats {
            signal,
            ..EngineStats::default()
        }
    }

    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Attempts dispatched so far: taken when a poll starts, it marks what
    /// the reading cannot know yet.
    pub fn dispatched(&self) -> u64 {
        self.dispatched.load(Ordering::Relaxed)
    }

    /// Whether the engine's metrics are read, and how long a reading lasts.
    pub fn set_stale_after(&self, stale_after_ms: Option<u64>) {
        self.stale_after_ms
            .store(stale_after_ms.unwrap_or(0), Ordering::Relaxed);
    }

    pub fn record_poll(&self, ok: bool) {
        self.polls.fetch_add(1, Ordering::Relaxed);
        if ok {
            self.last_ok_ms
                .store(crate::clock::now_ms().max(1), Ordering::Relaxed);
        } else {
            self.poll_failures.fetch_add(1, Ordering::Relaxed);
        }
        self.failed.store(!ok, Ordering::Release);
        // A new reading may unsaturate a target flow control waits for.
        self.signal.freed();
    }

    /// Whether the metrics are read, and how their polling goes.
    pub fn poll_summary(&self, now_ms: u64) -> Option<PollSummary> {
        if self.stale_after_ms.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let last_ok = self.last_ok_ms.load(Ordering::Relaxed);
        Some(PollSummary {
            fresh: self.fresh_at(last_ok, now_ms),
            age_ms: (last_ok != 0).then(|| now_ms.saturating_sub(last_ok)),
            polls: self.polls.load(Ordering::Relaxed),
            failures: self.poll_failures.load(Ordering::Relaxed),
        })
    }

    /// Claims an in-flight slot unless `limit` are taken (always, without
    /// a limit).
    pub(super) fn claim(&self, limit: Option<u64>) -> bool {
        let claimed = match limit {
            None => {
                self.in_flight.fetch_add(1, Ordering::AcqRel);
                true
            }
            Some(limit) => self
                .in_flight
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < limit).then_some(n + 1)
                })
                .is_ok(),
        };
        if claimed {
            self.dispatched.fetch_add(1, Ordering::Relaxed);
        }
        claimed
    }

    fn release(&self) {
        let before = self.in_flight.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(before > 0, "engine in-flight count underflow");
        self.signal.freed();
    }

    /// Reads are used only while fresh: polled, not failed, young enough.
    fn fresh_at(&self, reading_ms: u64, now_ms: u64) -> bool {
        let stale_after = self.stale_after_ms.load(Ordering::Relaxed);
        stale_after > 0
            && reading_ms != 0
            && !self.failed.load(Ordering::Acquire)
            && now_ms.saturating_sub(reading_ms) <= stale_after
    }
}

/// The engine's last reading for one target's model.
#[derive(Debug, Default)]
pub struct Reported {
    running: AtomicU64,
    waiting: AtomicU64,
    /// f64 bits of KV-cache usage in [0, 1]; `NO_KV` when not reported.
    kv_usage_bits: AtomicU64,
    /// [`EngineStats::dispatched`] when the poll started.
    mark: AtomicU64,
    /// Clock reading (ms) of the reading; 0: never. Published last.
    at_ms: AtomicU64,
}

const NO_KV: u64 = u64::MAX;

/// What an engine reported, for one target.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Reading {
    pub running: u64,
    pub waiting: u64,
    pub kv_usage: Option<f64>,
}

/// A target's engine reading as the admin API shows it.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct ReadingSummary {
    pub running: u64,
    pub waiting: u64,
    pub kv_usage: Option<f64>,
    pub age_ms: u64,
    /// Young enough and the last poll succeeded: the reading is used.
    pub fresh: bool,
}

impl Reported {
    /// Stores a reading taken at `now_ms` by a poll that started when the
    /// engine had `mark` dispatches.
    pub fn store(&self, reading: Reading, mark: u64, now_ms: u64) {
        self.running.store(reading.running, Ordering::Relaxed);
        self.waiting.store(reading.waiting, Ordering::Relaxed);
        let kv = reading
            .kv_usage
            .filter(|u| u.is_finite() && *u >= 0.0)
            .map_or(NO_KV, f64::to_bits);
        self.kv_usage_bits.store(kv, Ordering::Relaxed);
        self.mark.store(mark, Ordering::Relaxed);
        self.at_ms.store(now_ms.max(1), Ordering::Release);
    }

    fn load(&self) -> (Reading, u64, u64) {
        let at = self.at_ms.load(Ordering::Acquire);
        let bits = self.kv_usage_bits.load(Ordering::Relaxed);
        let reading = Reading {
            running: self.running.load(Ordering::Relaxed),
            waiting: self.waiting.load(Ordering::Relaxed),
            kv_usage: (bits != NO_KV).then(|| f64::from_bits(bits)),
        };
        (reading, self.mark.load(Ordering::Relaxed), at)
    }
}

impl TargetStats {
    /// The engine's reading and what this node dispatched since, when the
    /// reading is fresh at `now_ms`.
    fn fresh_reading(&self, now_ms: u64) -> Option<(Reading, u64)> {
        let (reading, mark, at) = self.reported.load();
        if !self.engine.fresh_at(at, now_ms) {
            return None;
        }
        Some((reading, self.engine.dispatched().saturating_sub(mark)))
    }

    /// The load every strategy reads (see the module docs).
    pub fn combined_load(&self, now_ms: u64) -> u64 {
        let local = self.in_flight();
        match self.fresh_reading(now_ms) {
            Some((reading, since)) => local.max(
                reading
                    .running
                    .saturating_add(reading.waiting)
                    .saturating_add(since),
            ),
            None => local,
        }
    }

    /// Requests a new one would queue behind: the engine's waiting plus
    /// this node's dispatches since, never below this node's requests
    /// without a first byte.
    pub fn combined_waiting(&self, now_ms: u64) -> u64 {
        let local = self.waiting();
        match self.fresh_reading(now_ms) {
            Some((reading, since)) => local.max(reading.waiting.saturating_add(since)),
            None => local,
        }
    }

    /// The engine's KV-cache usage in [0, 1] from a fresh reading.
    pub fn kv_usage(&self, now_ms: u64) -> Option<f64> {
        self.fresh_reading(now_ms)?.0.kv_usage
    }

    /// Why the target takes no new request at `now_ms`, if it takes none.
    pub fn saturation(
        &self,
        now_ms: u64,
        policy: &SaturationPolicy,
        max_concurrency: Option<u64>,
    ) -> Option<SaturatedBy> {
        if max_concurrency.is_some_and(|limit| self.engine.in_flight() >= limit) {
            return Some(SaturatedBy::Concurrency);
        }
        let (reading, _) = self.fresh_reading(now_ms)?;
        if reading.waiting >= policy.max_waiting {
            return Some(SaturatedBy::Queue);
        }
        if reading
            .kv_usage
            .is_some_and(|usage| usage >= policy.max_kv_usage)
        {
            return Some(SaturatedBy::KvCache);
        }
        None
    }

    /// The engine's last reading for this target, for the admin API;
    /// `None` when it never reported.
    pub fn reading(&self, now_ms: u64) -> Option<ReadingSummary> {
        let (reading, _, at) = self.reported.load();
        (at != 0).then(|| ReadingSummary {
            running: reading.running,
            waiting: reading.waiting,
            kv_usage: reading.kv_usage,
            age_ms: now_ms.saturating_sub(at),
            fresh: self.engine.fresh_at(at, now_ms),
        })
    }

    /// The engine this target runs on.
    pub fn engine(&self) -> &Arc<EngineStats> {
        &self.engine
    }

    /// Where the poller stores the engine's readings for this target.
    pub fn reported(&self) -> &Reported {
        &self.reported
    }

    /// Claims the engine's slot against `max_concurrency` and marks the
    /// attempt dispatched; `None` when the engine is at its limit (another
    /// pick took the last slot since this one was judged).
    pub fn begin_within(
        self: &Arc<Self>,
        max_concurrency: Option<u64>,
    ) -> Option<super::InFlightGuard> {
        if !self.engine.claim(max_concurrency) {
            return None;
        }
        Some(self.begin_claimed())
    }

    pub(super) fn release_engine(&self) {
        self.engine.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_waiter_wakes_the_dispatcher_and_freed_capacity_only_wakes_it_for_waiters() {
        let signal = CapacitySignal::default();
        let woke = |signal: &CapacitySignal| {
            let changed = std::pin::pin!(signal.changed());
            futures_util::FutureExt::now_or_never(changed).is_some()
        };
        // Nobody waits: freed capacity is nobody's news.
        signal.freed();
        assert!(!woke(&signal));

        signal.start_waiting();
        assert!(
            woke(&signal),
            "the first waiter did not wake the dispatcher"
        );
        signal.start_waiting();
        assert!(
            !woke(&signal),
            "a second waiter has a dispatcher already awake"
        );
        signal.freed();
        assert!(woke(&signal));
        signal.stop_waiting();
        signal.stop_waiting();
        assert_eq!(signal.waiters(), 0);
    }

    fn polled(stats: &TargetStats, stale_after_ms: u64) {
        stats.engine.set_stale_after(Some(stale_after_ms));
        stats.engine.record_poll(true);
    }

    fn reading(running: u64, waiting: u64, kv: Option<f64>) -> Reading {
        Reading {
            running,
            waiting,
            kv_usage: kv,
        }
    }

    #[test]
    fn without_a_reading_the_load_is_the_local_count() {
        let stats = Arc::new(TargetStats::default());
        let _held = stats.begin();
        assert_eq!(stats.combined_load(1_000), 1);
        stats.reported.store(reading(9, 9, None), 0, 1_000);
        assert_eq!(
            stats.combined_load(1_000),
            1,
            "metrics not read: a stored figure is not used"
        );
    }

    #[test]
    fn a_fresh_reading_counts_every_node_plus_what_this_one_sent_since() {
        let stats = Arc::new(TargetStats::default());
        polled(&stats, 3_000);
        let _before = stats.begin();
        let mark = stats.engine.dispatched();
        stats.reported.store(reading(4, 2, Some(0.5)), mark, 1_000);
        assert_eq!(stats.combined_load(1_500), 6, "4 running + 2 waiting");
        let _after = stats.begin();
        let _after2 = stats.begin();
        assert_eq!(stats.combined_load(1_500), 8, "+2 dispatched since");
        assert_eq!(stats.combined_waiting(1_500), 4, "2 waiting + 2 since");
        assert_eq!(stats.kv_usage(1_500), Some(0.5));
    }

    #[test]
    fn the_load_never_drops_below_this_nodes_in_flight() {
        let stats = Arc::new(TargetStats::default());
        polled(&stats, 3_000);
        let held: Vec<_> = (0..5).map(|_| stats.begin()).collect();
        let mark = stats.engine.dispatched();
        stats.reported.store(reading(1, 0, None), mark, 1_000);
        assert_eq!(stats.combined_load(1_000), 5);
        assert_eq!(stats.combined_waiting(1_000), 5, "none had a first byte");
        drop(held);
    }

    #[test]
    fn a_stale_or_failed_reading_falls_back_at_once() {
        let stats = Arc::new(TargetStats::default());
        polled(&stats, 3_000);
        stats.reported.store(reading(7, 3, Some(0.9)), 0, 1_000);
        assert_eq!(stats.combined_load(4_000), 10, "3 s old: still fresh");
        assert_eq!(stats.combined_load(4_001), 0, "stale");
        stats.reported.store(reading(7, 3, Some(0.9)), 0, 5_000);
        stats.engine.record_poll(false);
        assert_eq!(stats.combined_load(5_000), 0, "the last poll failed");
        assert_eq!(stats.kv_usage(5_000), None);
        assert!(!stats.reading(5_000).unwrap().fresh);
        stats.engine.record_poll(true);
        assert_eq!(stats.combined_load(5_000), 10);
    }

    #[test]
    fn saturation_by_concurrency_queue_and_kv_cache() {
        let policy = SaturationPolicy {
            max_waiting: 5,
            max_kv_usage: 0.8,
        };
        let stats = Arc::new(TargetStats::default());
        assert_eq!(stats.saturation(0, &policy, Some(2)), None);
        let first = stats.begin_within(Some(2)).expect("1 of 2");
        let _second = stats.begin_within(Some(2)).expect("2 of 2");
        assert_eq!(
            stats.saturation(0, &policy, Some(2)),
            Some(SaturatedBy::Concurrency)
        );
        assert!(stats.begin_within(Some(2)).is_none(), "the limit holds");
        drop(first);
        assert!(stats.begin_within(Some(2)).is_some());

        let engine = Arc::new(TargetStats::default());
        polled(&engine, 3_000);
        engine.reported.store(reading(3, 4, Some(0.79)), 0, 1_000);
        assert_eq!(engine.saturation(1_000, &policy, None), None);
        engine.reported.store(reading(3, 5, Some(0.79)), 0, 1_000);
        assert_eq!(
            engine.saturation(1_000, &policy, None),
            Some(SaturatedBy::Queue)
        );
        engine.reported.store(reading(3, 0, Some(0.8)), 0, 1_000);
        assert_eq!(
            engine.saturation(1_000, &policy, None),
            Some(SaturatedBy::KvCache)
        );
        assert_eq!(
            engine.saturation(9_000, &policy, None),
            None,
            "a stale reading saturates nothing"
        );
    }

    #[test]
    fn the_concurrency_limit_holds_under_racing_claims() {
        let stats = Arc::new(TargetStats::default());
        let peak = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let stats = Arc::clone(&stats);
                let peak = Arc::clone(&peak);
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        if let Some(guard) = stats.begin_within(Some(3)) {
                            peak.fetch_max(stats.engine.in_flight(), Ordering::Relaxed);
                            drop(guard);
                        }
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("thread");
        }
        assert!(peak.load(Ordering::Relaxed) <= 3);
        assert_eq!(stats.engine.in_flight(), 0);
    }
}
