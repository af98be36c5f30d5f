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

/// The wall clock, as milliseconds since the Unix epoch, for timestamps an
/// operator reads (0 if the clock is before 1970).
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
