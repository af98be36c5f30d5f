//! The gateway's monotonic clock, as milliseconds since the process started.
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
