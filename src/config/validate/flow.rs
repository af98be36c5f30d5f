//! `[saturation]` and `[flow_control]`: when an engine counts as full, and
//! what a request does while every engine of its route is.

use std::time::Duration;

use super::super::file;
use super::super::{FlowControl, Saturation};
use super::eligibility::Unit;
use super::Validator;

impl Validator<'_> {
    pub(super) fn saturation(&mut self, table: file::SaturationTable) -> Saturation {
        let defaults = Saturation::default();
        let max_waiting = self
            .bounded(
                "saturation.max_waiting",
                table.max_waiting,
                file::DEFAULT_SATURATION_MAX_WAITING,
                file::MAX_SATURATION_MAX_WAITING,
                Unit::Count,
            )
            .unwrap_or(defaults.max_waiting);
        let max_kv_usage_milli = match table.max_kv_usage {
            None => defaults.max_kv_usage_milli,
            Some(usage) if usage > 0.0 && usage <= 1.0 => ((usage * 1000.0).round() as u32).max(1),
            Some(usage) => {
                self.error(
                    "saturation.max_kv_usage",
                    format!(
                        "must be above 0 and at most 1 (got {usage}); it is a share of the KV cache, 0.8 for 80 percent"
                    ),
                );
                defaults.max_kv_usage_milli
            }
        };
        Saturation {
            max_waiting,
            max_kv_usage_milli,
        }
    }

    pub(super) fn flow_control(&mut self, table: file::FlowControlTable) -> FlowControl {
        let defaults = FlowControl::default();
        let max_queued = self
            .bounded(
                "flow_control.max_queued",
                table.max_queued,
                file::DEFAULT_FLOW_CONTROL_MAX_QUEUED,
                file::MAX_FLOW_CONTROL_MAX_QUEUED,
                Unit::Count,
            )
            .unwrap_or(defaults.max_queued);
        let max_wait = self
            .bounded(
                "flow_control.max_wait_secs",
                table.max_wait_secs,
                file::DEFAULT_FLOW_CONTROL_MAX_WAIT_SECS,
                file::MAX_FLOW_CONTROL_MAX_WAIT_SECS,
                Unit::Seconds,
            )
            .map_or(defaults.max_wait, Duration::from_secs);
        FlowControl {
            enabled: table.enabled.unwrap_or(defaults.enabled),
            max_queued,
            max_wait,
        }
    }
}
