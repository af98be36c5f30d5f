//! `[health]`, `[breaker]` and `[parking]`: the three settings from which the
//! gateway decides whether a target is eligible (docs/design/defaults.md, "Gateway").
//!
//! Every field is optional, with its default in docs/design/defaults.md. Each number has a
//! lower bound that keeps the mechanism meaningful (a zero interval probes in
//! a busy loop, a zero threshold opens a breaker before any failure) and an
//! upper bound that catches a unit mistake, most often milliseconds written
//! where the field is in seconds. Two rules tie fields together: a probe's
//! timeout is below the probe interval, so a probe ends before the next one
//! starts; and the parking cap is not below the parking base. Such a rule is
//! judged only when both of its fields are valid on their own, and is
//! reported at whichever of the two is written (the timeout or the cap when
//! both are), naming both.

use std::time::Duration;

use super::super::file;
use super::super::{Breaker, Health, Parking};
use super::Validator;

/// What a bounded whole number counts, for its message.
#[derive(Clone, Copy)]
pub(super) enum Unit {
    Seconds,
    Milliseconds,
    Count,
}

impl Validator<'_> {
    pub(super) fn health(&mut self, table: file::HealthTable) -> Health {
        let interval = self.bounded(
            "health.interval_secs",
            table.interval_secs,
            file::DEFAULT_HEALTH_INTERVAL_SECS,
            file::MAX_HEALTH_INTERVAL_SECS,
            Unit::Seconds,
        );
        // Its upper bound is the interval: the ordering rule below.
        let timeout = self.bounded(
            "health.timeout_secs",
            table.timeout_secs,
            file::DEFAULT_HEALTH_TIMEOUT_SECS,
            u64::MAX,
            Unit::Seconds,
        );
        if let (Some(interval), Some(timeout)) = (interval, timeout) {
            if timeout >= interval {
                let reason = "a probe must end before the next one starts";
                if table.timeout_secs.is_some() {
                    self.error(
                        "health.timeout_secs",
                        format!(
                            "must be less than health.interval_secs (got timeout_secs = {timeout}, interval_secs = {interval}{}): {reason}",
                            by_default(table.interval_secs)
                        ),
                    );
                } else {
                    self.error(
                        "health.interval_secs",
                        format!(
                            "must be greater than health.timeout_secs (got interval_secs = {interval}, timeout_secs = {timeout} by default): {reason}"
                        ),
                    );
                }
            }
        }
        let unhealthy_after = self.bounded_count(
            "health.unhealthy_after",
            table.unhealthy_after,
            file::DEFAULT_UNHEALTHY_AFTER,
            file::MAX_HEALTH_THRESHOLD,
        );
        let healthy_after = self.bounded_count(
            "health.healthy_after",
            table.healthy_after,
            file::DEFAULT_HEALTHY_AFTER,
            file::MAX_HEALTH_THRESHOLD,
        );

        let defaults = Health::default();
        Health {
            enabled: table.enabled.unwrap_or(file::DEFAULT_HEALTH_ENABLED),
            interval: interval.map_or(defaults.interval, Duration::from_secs),
            timeout: timeout.map_or(defaults.timeout, Duration::from_secs),
            unhealthy_after,
            healthy_after,
        }
    }

    pub(super) fn breaker(&mut self, table: file::BreakerTable) -> Breaker {
        let failure_threshold = self.bounded_count(
            "breaker.failure_threshold",
            table.failure_threshold,
            file::DEFAULT_FAILURE_THRESHOLD,
            file::MAX_FAILURE_THRESHOLD,
        );
        let open = self.bounded(
            "breaker.open_secs",
            table.open_secs,
            file::DEFAULT_OPEN_SECS,
            file::MAX_OPEN_SECS,
            Unit::Seconds,
        );
        Breaker {
            enabled: table.enabled.unwrap_or(file::DEFAULT_BREAKER_ENABLED),
            failure_threshold,
            open: open.map_or(Breaker::default().open, Duration::from_secs),
        }
    }

    pub(super) fn parking(&mut self, table: file::ParkingTable) -> Parking {
        let base = self.bounded(
            "parking.base_secs",
            table.base_secs,
            file::DEFAULT_PARKING_BASE_SECS,
            file::MAX_PARKING_BASE_SECS,
            Unit::Seconds,
        );
        let max = self.bounded(
            "parking.max_secs",
            table.max_secs,
            file::DEFAULT_PARKING_MAX_SECS,
            file::MAX_PARKING_MAX_SECS,
            Unit::Seconds,
        );
        if let (Some(base), Some(max)) = (base, max) {
            if max < base {
                let reason = "the cap cannot be shorter than the base";
                if table.max_secs.is_some() {
                    self.error(
                        "parking.max_secs",
                        format!(
                            "must be at least parking.base_secs (got max_secs = {max}, base_secs = {base}{}): {reason}",
                            by_default(table.base_secs)
                        ),
                    );
                } else {
                    self.error(
                        "parking.base_secs",
                        format!(
                            "must be at most parking.max_secs (got base_secs = {base}, max_secs = {max} by default): {reason}"
                        ),
                    );
                }
            }
        }
        let defaults = Parking::default();
        Parking {
            base: base.map_or(defaults.base, Duration::from_secs),
            max: max.map_or(defaults.max, Duration::from_secs),
        }
    }

    /// A whole number in `1..=max`, the default when not written; `None`
    /// (and an error naming the field) when out of range. `max = u64::MAX`
    /// leaves only the lower bound.
    pub(super) fn bounded(
        &mut self,
        field: &str,
        written: Option<u64>,
        default: u64,
        max: u64,
        unit: Unit,
    ) -> Option<u64> {
        let value = written.unwrap_or(default);
        debug_assert!((1..=max).contains(&default), "{field} default");
        if (1..=max).contains(&value) {
            return Some(value);
        }
        let message = match unit {
            Unit::Count => format!("must be between 1 and {max} (got {value})"),
            Unit::Seconds if max == u64::MAX => format!("must be at least 1 second (got {value})"),
            Unit::Seconds if value == 0 => {
                format!("must be between 1 and {max} seconds (got {value})")
            }
            Unit::Seconds => format!(
                "must be between 1 and {max} seconds (got {value}); the unit is seconds, not milliseconds"
            ),
            Unit::Milliseconds => format!("must be between 1 and {max} milliseconds (got {value})"),
        };
        self.error(field, message);
        None
    }

    /// A count in `1..=max`; the default (validation fails anyway) when out
    /// of range.
    fn bounded_count(&mut self, field: &str, written: Option<u64>, default: u32, max: u32) -> u32 {
        self.bounded(
            field,
            written,
            u64::from(default),
            u64::from(max),
            Unit::Count,
        )
        // In 1..=max, so it fits.
        .and_then(|value| u32::try_from(value).ok())
        .unwrap_or(default)
    }
}

/// " by default" for the other field of a pairing rule when it was not
/// written, so that a user does not look for it in the file.
pub(super) fn by_default(written: Option<u64>) -> &'static str {
    if written.is_none() {
        " by default"
    } else {
        ""
    }
}
