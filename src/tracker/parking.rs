//! Parking: a target that answered 429, 408 or 5xx, or failed to connect,
//! takes nothing until a deadline — `[parking] base_secs`, or the
//! `Retry-After` it sent, capped at `max_secs`. A new park only ever moves
//! the deadline later.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

/// Parking settings (`[parking]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParkingPolicy {
    pub base_ms: u64,
    pub max_ms: u64,
}

impl ParkingPolicy {
    /// How long to park for, given the upstream's `Retry-After` if any.
    /// Saturates: a `Retry-After` of a trillion seconds parks for
    /// `max_ms`, it never wraps into a short park.
    pub fn duration_ms(&self, retry_after: Option<Duration>) -> u64 {
        retry_after
            .map_or(self.base_ms, |d| {
                u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
            })
            .min(self.max_ms)
    }
}

#[derive(Debug, Default)]
pub struct Parking {
    /// Clock reading (ms) until which the target is parked; 0 = never parked.
    until_ms: AtomicU64,
}

impl Parking {
    /// Parks until `now_ms + duration_ms`, unless already parked longer.
    /// Returns the deadline in force.
    pub fn park(&self, now_ms: u64, duration_ms: u64) -> u64 {
        let until = now_ms.saturating_add(duration_ms);
        self.until_ms.fetch_max(until, Ordering::AcqRel).max(until)
    }

    pub fn is_parked(&self, now_ms: u64) -> bool {
        now_ms < self.until_ms.load(Ordering::Acquire)
    }

    /// The deadline, if it is still ahead of `now_ms`.
    pub fn parked_until(&self, now_ms: u64) -> Option<u64> {
        let until = self.until_ms.load(Ordering::Acquire);
        (now_ms < until).then_some(until)
    }
}

/// Parses a `Retry-After` value: delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
/// Delay-seconds too large for a `u64` read as the longest delay there is
/// (the policy caps it), not as no header at all.
pub fn parse_retry_after(value: &[u8]) -> Option<Duration> {
    let text = std::str::from_utf8(value).ok()?.trim();
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return Some(Duration::from_secs(text.parse::<u64>().unwrap_or(u64::MAX)));
    }
    let when = httpdate::parse_http_date(text).ok()?;
    Some(when.duration_since(SystemTime::now()).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parking_only_extends() {
        let parking = Parking::default();
        assert!(!parking.is_parked(0));
        assert_eq!(parking.park(1000, 5000), 6000);
        assert!(parking.is_parked(5999) && !parking.is_parked(6000));
        // A shorter park does not shorten the deadline.
        assert_eq!(parking.park(2000, 1000), 6000);
        assert_eq!(parking.parked_until(2000), Some(6000));
        assert_eq!(parking.park(2000, 10_000), 12_000);
    }

    #[test]
    fn retry_after_is_honoured_and_capped() {
        let policy = ParkingPolicy {
            base_ms: 5000,
            max_ms: 300_000,
        };
        assert_eq!(policy.duration_ms(None), 5000);
        assert_eq!(policy.duration_ms(Some(Duration::from_secs(30))), 30_000);
        assert_eq!(policy.duration_ms(Some(Duration::from_secs(3600))), 300_000);
    }

    #[test]
    fn retry_after_parses_seconds_and_dates() {
        assert_eq!(parse_retry_after(b"120"), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(b" 7 "), Some(Duration::from_secs(7)));
        let past = parse_retry_after(b"Wed, 21 Oct 2015 07:28:00 GMT");
        assert_eq!(past, Some(Duration::ZERO));
        let future = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(100));
        let parsed = parse_retry_after(future.as_bytes()).unwrap();
        assert!(parsed > Duration::from_secs(90) && parsed <= Duration::from_secs(100));
        assert_eq!(parse_retry_after(b"soon"), None);
        assert_eq!(parse_retry_after(b"-1"), None);
        assert_eq!(parse_retry_after(b""), None);
    }

    #[test]
    fn a_huge_retry_after_parks_for_the_cap_and_never_wraps_into_a_short_park() {
        let policy = ParkingPolicy {
            base_ms: 5000,
            max_ms: 300_000,
        };
        // 2^64 / 1000 + 1 seconds: its milliseconds wrapped to a few ms
        // when cast to u64.
        let wraps = Duration::from_secs(u64::MAX / 1000 + 1);
        assert_eq!(policy.duration_ms(Some(wraps)), 300_000);
        assert_eq!(policy.duration_ms(Some(Duration::MAX)), 300_000);
        let beyond_u64 = parse_retry_after(b"99999999999999999999999").unwrap();
        assert_eq!(policy.duration_ms(Some(beyond_u64)), 300_000);
        let parking = Parking::default();
        assert_eq!(parking.park(u64::MAX - 10, 300_000), u64::MAX);
        assert!(parking.is_parked(u64::MAX - 1));
    }
}
