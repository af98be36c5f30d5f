//! Per-target pick attribution for reports: two relaxed atomics per pick.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::TargetReport;

/// `last_pick_ms` of a target never picked.
const NEVER: u64 = u64::MAX;

/// How many picks each target got, and when the last one was.
#[derive(Debug)]
pub(crate) struct PickCounters {
    counters: Box<[PickCounter]>,
}

#[derive(Debug)]
struct PickCounter {
    picks: AtomicU64,
    last_pick_ms: AtomicU64,
}

impl PickCounters {
    pub(crate) fn new(targets: usize) -> Self {
        Self {
            counters: (0..targets)
                .map(|_| PickCounter {
                    picks: AtomicU64::new(0),
                    last_pick_ms: AtomicU64::new(NEVER),
                })
                .collect(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.counters.len()
    }

    /// Counts a pick of `target` at `now_ms`; an unknown target is ignored.
    pub(crate) fn record(&self, target: usize, now_ms: u64) {
        if let Some(counter) = self.counters.get(target) {
            // Relaxed: independent counters, read only for reports.
            counter.picks.fetch_add(1, Ordering::Relaxed);
            counter.last_pick_ms.store(now_ms, Ordering::Relaxed);
        }
    }

    /// `report` with `target`'s counts written in.
    pub(crate) fn counted(&self, target: usize, mut report: TargetReport) -> TargetReport {
        if let Some(counter) = self.counters.get(target) {
            report.picks = counter.picks.load(Ordering::Relaxed);
            report.last_pick_ms =
                Some(counter.last_pick_ms.load(Ordering::Relaxed)).filter(|&ms| ms != NEVER);
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_picks_and_the_last_pick_time_per_target() {
        let counters = PickCounters::new(2);
        counters.record(1, 10);
        counters.record(1, 20);
        counters.record(5, 30);
        let a = counters.counted(0, TargetReport::default());
        let b = counters.counted(1, TargetReport::default());
        assert_eq!((a.picks, a.last_pick_ms), (0, None));
        assert_eq!((b.picks, b.last_pick_ms), (2, Some(20)));
    }
}
