//! Failure logging per target that cannot flood the log.
//!
//! An engine that fails every request would otherwise write a line (or two)
//! per request: over half a million lines in 30 s under load, burying the
//! one line that says what broke. Per target and per kind of failure, the
//! first [`BURST`] failures of each [`WINDOW_MS`] window are logged in full;
//! the rest are only counted, and the failure-log summary service
//! (`FailureLogSummary` in `tracker.rs`) writes one line per target and kind
//! with their count every window. The access log is not affected: it keeps
//! one line per request.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Why an attempt at a target failed, as a fixed label value (metrics) and
/// a kind of failure (this log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureReason {
    /// No connection (refused, unreachable, connect timeout).
    Connect,
    /// A 5xx, 429 or 408 answer.
    Status,
    /// No response header within `first_byte_secs`.
    FirstByteTimeout,
    /// A response stalled longer than `idle_secs` between reads.
    IdleTimeout,
    /// The connection broke (reset, closed early).
    Stream,
}

impl FailureReason {
    pub const ALL: [FailureReason; 5] = [
        FailureReason::Connect,
        FailureReason::Status,
        FailureReason::FirstByteTimeout,
        FailureReason::IdleTimeout,
        FailureReason::Stream,
    ];

    pub fn label(self) -> &'static str {
        match self {
            FailureReason::Connect => "connect",
            FailureReason::Status => "status",
            FailureReason::FirstByteTimeout => "first_byte_timeout",
            FailureReason::IdleTimeout => "idle_timeout",
            FailureReason::Stream => "stream",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Failures of one kind logged in full per window.
pub const BURST: u32 = 3;
/// The window, and how often suppressed failures are summarized.
pub const WINDOW_MS: u64 = 10_000;

/// One kind's window: when it started, how many were logged in it, how many
/// were only counted since the last summary.
#[derive(Debug, Default)]
struct Window {
    started_ms: AtomicU64,
    logged: AtomicU32,
    suppressed: AtomicU64,
}

/// The log budget of one target.
#[derive(Debug, Default)]
pub struct FailureLog {
    kinds: [Window; FailureReason::ALL.len()],
}

impl FailureLog {
    /// Whether a failure of `reason` at `now_ms` is logged in full; when
    /// not, it is counted for the next summary.
    pub fn admit(&self, reason: FailureReason, now_ms: u64) -> bool {
        let window = &self.kinds[reason.index()];
        let started = window.started_ms.load(Ordering::Relaxed);
        if now_ms.saturating_sub(started) >= WINDOW_MS
            && window
                .started_ms
                .compare_exchange(started, now_ms, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            window.logged.store(0, Ordering::Relaxed);
        }
        if window.logged.fetch_add(1, Ordering::Relaxed) < BURST {
            return true;
        }
        window.suppressed.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Takes the failures counted but not logged since the last call, per
    /// kind (kinds with none are left out).
    pub fn take_suppressed(&self) -> Vec<(FailureReason, u64)> {
        FailureReason::ALL
            .iter()
            .filter_map(|&reason| {
                let n = self.kinds[reason.index()]
                    .suppressed
                    .swap(0, Ordering::Relaxed);
                (n > 0).then_some((reason, n))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_a_burst_per_window_and_counts_the_rest() {
        let log = FailureLog::default();
        let admitted = (0..1000)
            .filter(|_| log.admit(FailureReason::Connect, 50_000))
            .count();
        assert_eq!(admitted, BURST as usize);
        // Another kind has a budget of its own.
        assert!(log.admit(FailureReason::Status, 50_000));
        assert_eq!(
            log.take_suppressed(),
            vec![(FailureReason::Connect, 1000 - u64::from(BURST))]
        );
        assert!(log.take_suppressed().is_empty(), "taken once");
        // The next window logs a burst again.
        assert!(!log.admit(FailureReason::Connect, 50_000 + WINDOW_MS - 1));
        assert!(log.admit(FailureReason::Connect, 50_000 + WINDOW_MS));
    }
}
