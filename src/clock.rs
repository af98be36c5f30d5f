//! The gateway's monotonic clock, as milliseconds since the process started,
//! and the wall clock for timestamps shown to people.
//!
//! The balancer reads no clock of its own (`RouteContext::now_ms`); this is
//! the one the gateway hands it.

use std::sync::OnceLock;
use std::time::Instant;

static START: OnceLock<Instant> = OnceLock::new();

/// Milliseconds since the first call in this process; never goes backwards.
pub fn now_ms() -> u64 {
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// `at` on the same scale as [`now_ms`]: one clock reading that serves as
/// both an `Instant` and milliseconds.
pub fn ms_at(at: Instant) -> u64 {
    at.saturating_duration_since(*START.get_or_init(Instant::now))
        .as_millis() as u64
}

/// The wall clock, as milliseconds since the Unix epoch, for timestamps an
/// operator reads (0 if the clock is before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instant_reads_as_the_milliseconds_now_ms_gives() {
        let before = now_ms();
        let at = Instant::now();
        let after = now_ms();
        let ms = ms_at(at);
        assert!(
            (before..=after).contains(&ms),
            "{before} <= {ms} <= {after}"
        );
        assert_eq!(
            ms_at(at + std::time::Duration::from_millis(1500)),
            ms + 1500
        );
    }
}
